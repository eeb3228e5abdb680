//! Start-up through the `sandbox` command as a whole process (what a shell script or an
//! agent that shells out pays): `sandbox run ... -- /bin/true`, against a bare spawn of
//! `/bin/true` and, for a backend that launches a host process, against the bare mechanism
//! with the same confinement: the backend's own launch for the same request (bwrap run
//! directly with the backend's argv; landlock's ruleset, seccomp filter and namespace
//! steps applied between fork and exec), spawned without the library. All interleaved.

use std::ffi::OsString;
use std::path::Path;

use crate::budget::{self, Budget};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio};
use crate::subject::{Direct, Subject};
use crate::table::{Row, Verdict};

/// The `sandbox run` arguments for `s`: its backend and lane, the bench's workspace.
pub fn run_args(s: &Subject) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "run".into(),
        "--backend".into(),
        s.name.into(),
        "--lane".into(),
        s.lane.as_str().into(),
        "--workspace".into(),
        s.workspace.clone().into_os_string(),
    ];
    args.extend(s.cli_args.iter().cloned());
    args.push("--".into());
    args.push(s.true_program.clone());
    args
}

/// The rows for `s`, through the command at `bin`.
pub async fn measure(
    s: &Subject,
    bin: &Path,
    host_true: &Path,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let rounds = budget.cli_for(s.slow);
    let args = run_args(s);
    let bare_argv = vec![host_true.as_os_str().to_owned()];
    // The request the command makes of the library with these flags: the workspace, the
    // lane, the rest the defaults.
    let opts = s.opts(vec![s.true_program.clone()]);
    let mut probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(runs::bare_spawn(&bare_argv))),
        Box::new(|| Box::pin(runs::whole_process(bin, &args))),
    ];
    let mechanism = match &s.direct {
        Some(Direct::Launch { prepare, .. }) => {
            let opts = &opts;
            probes.push(Box::new(move || {
                let prepare = prepare.clone();
                Box::pin(async move { runs::direct_launch(&*prepare, opts).await })
            }));
            true
        }
        _ => false,
    };
    let samples = interleaved(&probes, rounds).await?;
    let (bare, ours) = (&samples[0], &samples[1]);
    // The temporary workspace's name changes every run; the table shows its role.
    let shown: Vec<String> = args
        .iter()
        .map(|a| {
            if Path::new(a) == s.workspace {
                "WORKSPACE".to_string()
            } else {
                a.to_string_lossy().into_owned()
            }
        })
        .collect();
    let what = format!(
        "start-up through the command as a whole process: `sandbox {}`, {} runs",
        shown.join(" "),
        ours.len()
    );
    let mut rows = vec![Row {
        backend: s.name.into(),
        what: what.clone(),
        median: fmt_duration(ours.median()),
        p95: fmt_duration(ours.p95()),
        ratio: fmt_ratio(ours.median().as_secs_f64() / bare.median().as_secs_f64()),
        baseline: format!(
            "bare spawn (tokio::process): {} (p95 {})",
            fmt_duration(bare.median()),
            fmt_duration(bare.p95())
        ),
        target: "—".into(),
        verdict: Verdict::NoTarget,
    }];
    if let (true, Some(direct)) = (mechanism, samples.get(2)) {
        let r = ours.median().as_secs_f64() / direct.median().as_secs_f64();
        let target = budget::CLI_VS_MECHANISM;
        rows.push(Row {
            backend: s.name.into(),
            what: format!("{what}, against the bare mechanism with the same confinement"),
            median: fmt_duration(ours.median()),
            p95: fmt_duration(ours.p95()),
            ratio: fmt_ratio(r),
            baseline: format!(
                "the backend's own launch for the same request, spawned without the library \
                 or the command: {} (p95 {})",
                fmt_duration(direct.median()),
                fmt_duration(direct.p95())
            ),
            target: target.cell(),
            verdict: Verdict::judge(target.met(r), budget.quick),
        });
    }
    Ok(rows)
}
