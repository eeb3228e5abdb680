//! `sandbox doctor --prove`: the suite's confinement cases (and the denial record's
//! checks) run against one backend on this host, from inside the `sandbox` command, with
//! no source tree and no cargo: the probe is the command itself (`sandbox __probe`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use sandbox_core::registry::BuildImageFn;
use sandbox_core::{Backend, Lane, SandboxError};
use serde::Serialize;

use crate::context::{Context, Mode, IN_IMAGE_PROBE};
use crate::registry::{cases, run_case, Case, Verdict};

/// One case's verdict, as `doctor --prove` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Proved {
    /// `area::name`.
    pub case: String,
    /// `pass`, `fail` or `skip`.
    pub verdict: &'static str,
    /// Why it failed or was skipped.
    pub message: Option<String>,
}

/// What `--prove` runs: every confinement case its image can run, and the denial record's
/// cheap checks (a million refusals is left to the suite: it takes seconds, not a proof
/// of confinement).
fn proves(c: &Case) -> bool {
    (c.confinement && !NEEDS_MORE_THAN_PROVE_TOOLS.contains(&c.full_name().as_str()))
        || (c.area == "denials" && c.name != "million_refusals_bounded")
}

/// Confinement cases that drive a real client the proving image does not hold
/// ([`PROVE_TOOLS`]): the secrets cases with python and git, the bypass classes' raw
/// client among them. The same secrets and the request rules are proved through curl by
/// the other `secrets` cases; the suite runs these with its full image.
const NEEDS_MORE_THAN_PROVE_TOOLS: &[&str] = &[
    "conformance::secrets::python_urllib_gets_the_value_injected",
    "conformance::secrets::git_clone_with_a_token_it_never_sees",
    "conformance::secrets::ambiguous_paths_refused_canonical_path_passes",
    "conformance::secrets::request_smuggling_refused",
    "conformance::secrets::fronted_host_header_refused",
    "conformance::secrets::mismatched_server_name_refused",
    "conformance::secrets::relayed_connect_refused",
    "conformance::secrets::websocket_carries_the_value_h2c_refused",
];

/// The image a backend that runs every command in one is proved in: built on its engine
/// around the probe, from host files (there may be no registry to pull from).
pub const PROBE_IMAGE: &str = "sandbox-prove:latest";

/// The tools the proving cases run besides the probe (`sh` and `curl`, for the egress
/// cases that use curl through the proxy): a small image, since proving runs none of the
/// python or git cases.
pub const PROVE_TOOLS: &[&str] = &["sh", "curl"];

/// Build image `tag` with `build` (a backend's [`BuildImageFn`]) holding `probe` at
/// [`IN_IMAGE_PROBE`], where the cases run it in a backend without host programs, and
/// `tools` (names from [`IMAGE_TOOLS`](crate::IMAGE_TOOLS): [`PROVE_TOOLS`] to prove, all
/// of them for the whole suite). An unchanged image is kept as it is.
pub async fn build_probe_image(
    build: BuildImageFn,
    tag: &str,
    probe: PathBuf,
    tools: &[&str],
) -> Result<(), SandboxError> {
    let mut files = vec![(probe, PathBuf::from(IN_IMAGE_PROBE))];
    files.extend(crate::image_tool_sources(tools));
    build(tag.to_owned(), files).await
}

/// How many cases run at once: most wait on a sandbox.
const AT_ONCE: usize = 4;

/// Run the proving cases against `backend` (its preflight has passed), with `probe` then
/// `prefix` as the probe's argv head, on `lane` (default: the strictest it allows). `Err` when the scratch directory cannot be made.
pub async fn prove(
    backend: Arc<dyn Backend>,
    probe: PathBuf,
    prefix: Vec<OsString>,
    lane: Option<Lane>,
) -> std::io::Result<Vec<Proved>> {
    let mut ctx = Context::new(backend, probe, Mode::Conform)?.with_probe_prefix(prefix);
    if let Some(lane) = lane {
        ctx = ctx.with_lane(lane);
    }
    let ctx = Arc::new(ctx);
    let selected: Vec<Case> = cases().into_iter().filter(proves).collect();
    // At most AT_ONCE cases in flight, a new one as soon as one ends (not in chunks, which
    // would wait for each chunk's slowest case).
    let slots = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let handles: Vec<_> = selected
        .iter()
        .map(|&c| {
            let (ctx, slots) = (ctx.clone(), slots.clone());
            let handle = tokio::spawn(async move {
                let _slot = slots.acquire_owned().await;
                run_case(c, ctx).await
            });
            (c, handle)
        })
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for (c, h) in handles {
        let verdict = h
            .await
            .unwrap_or_else(|e| Verdict::Fail(format!("the case panicked: {e}")));
        let (word, message) = match verdict {
            Verdict::Pass(_) => ("pass", None),
            Verdict::Fail(m) => ("fail", Some(m)),
            Verdict::Skip(r) => ("skip", Some(r)),
        };
        out.push(Proved {
            case: format!("{}::{}", c.area, c.name),
            verdict: word,
            message,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case left out of proving for its tools is a confinement case of the suite (a
    /// renamed case would otherwise be proved again, or a name here mean nothing).
    #[test]
    fn the_cases_left_out_for_their_tools_exist_and_only_they_are_left_out() {
        let all = cases();
        for name in NEEDS_MORE_THAN_PROVE_TOOLS {
            let case = all.iter().find(|c| c.full_name() == *name);
            assert!(case.is_some_and(|c| c.confinement), "{name}");
        }
        let left_out = all.iter().filter(|c| c.confinement && !proves(c)).count();
        assert_eq!(left_out, NEEDS_MORE_THAN_PROVE_TOOLS.len());
    }
}
