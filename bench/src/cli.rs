//! Start-up through the `sandbox` command as a whole process (what a shell script or an
//! agent that shells out pays): `sandbox run ... -- /bin/true`, against a bare spawn of
//! `/bin/true` and, for a backend that launches a host process, against the bare mechanism
//! with the same confinement, two ways, all interleaved:
//!
//! - as a process of its own: `sandbox-bench-launch` (`src/bin/sandbox-bench-launch.rs`),
//!   a minimal launcher that builds the same launch for the same request and applies it in
//!   its own single-threaded process, then execs (issue 12's baseline for a backend whose
//!   launch is the command itself, landlock);
//! - from inside the bench: the backend's own launch spawned by this process without the
//!   library (bwrap run directly with the backend's argv, issue 12's baseline for a
//!   backend that runs a tool; for the others a stricter figure that leaves out the start
//!   of any process but the command's; not for a launch born in namespaces, which only
//!   core's `clone3` makes without copying the bench).
//!
//! Which of the two a backend's target is judged against follows from its launch, not its
//! name: a launch whose program is the command itself, or core's waiter that starts it (a
//! launch born in namespaces), is judged against the launcher process; one that runs a
//! host tool against that tool run directly. The other row is shown, labelled, for
//! information.

use std::ffi::OsString;
use std::path::Path;

use crate::budget::{self, Budget};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, Samples};
use crate::subject::{Direct, Host, Subject};
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

/// The launcher baseline's arguments for the same request as [`run_args`].
fn launcher_args(s: &Subject, facts: &Path) -> Vec<OsString> {
    vec![
        s.name.into(),
        s.lane.as_str().into(),
        s.workspace.clone().into_os_string(),
        facts.as_os_str().to_owned(),
        "--".into(),
        s.true_program.clone(),
    ]
}

/// The rows for `s`, through the command at `bin`, with the launcher baseline at
/// `launcher` where there is one.
pub async fn measure(
    s: &Subject,
    bin: &Path,
    launcher: Option<&Path>,
    host: &Host,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let rounds = budget.cli_for(s.slow);
    let args = run_args(s);
    let bare_argv = vec![host.true_program.as_os_str().to_owned()];
    // The request the command makes of the library with these flags: the workspace, the
    // lane, the rest the defaults.
    let opts = s.opts(vec![s.true_program.clone()]);
    // Whether the launch runs the command itself, or core's own init that starts it (a
    // launch born in namespaces execs core's waiter): then the launcher process is the bare
    // mechanism; or a tool of the host's (then that tool run directly is).
    // A launch that keeps something of the host alive while the command runs (an OCI
    // bundle, a proxy) has no stand-in in a process that becomes the command by exec.
    let (runs_the_command, needs_host_alive, born_in) = match &s.direct {
        Some(Direct::Launch { prepare, .. }) => {
            let launch =
                prepare(&opts).map_err(|e| BenchError::sandbox("preparing the launch", e))?;
            let born_in = launch.born_in.any();
            (
                Some(launch.program == Path::new(&s.true_program) || born_in),
                launch.needs_host_alive(),
                born_in,
            )
        }
        _ => (None, false, false),
    };
    let launcher_args = match (launcher, runs_the_command) {
        (Some(_), Some(_)) if !needs_host_alive => {
            let facts = host
                .write_facts()
                .map_err(|e| BenchError::io("writing the facts for the launcher", e))?;
            Some(launcher_args(s, &facts))
        }
        _ => None,
    };
    let mut probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(runs::bare_spawn(&bare_argv))),
        Box::new(|| Box::pin(runs::whole_process(bin, &args))),
    ];
    let mut in_process = None;
    // A launch born in namespaces is spawned only by core's `clone3`: the bench's own spawn
    // (a fork) would charge the baseline for the bench's size, not the mechanism.
    if let (Some(Direct::Launch { prepare, .. }), false) = (&s.direct, born_in) {
        let opts = &opts;
        in_process = Some(probes.len());
        probes.push(Box::new(move || {
            let prepare = prepare.clone();
            Box::pin(async move { runs::direct_launch(&*prepare, opts).await })
        }));
    }
    let mut as_process = None;
    if let (Some(bin), Some(args)) = (launcher, &launcher_args) {
        as_process = Some(probes.len());
        probes.push(Box::new(move || Box::pin(runs::whole_process(bin, args))));
    }
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
    let judged_is_process = runs_the_command == Some(true);
    let row = |baseline: &Samples, label: String, judged: bool| {
        let r = ours.median().as_secs_f64() / baseline.median().as_secs_f64();
        let target = budget::CLI_VS_MECHANISM;
        Row {
            backend: s.name.into(),
            what: if judged {
                format!("{what}, against the bare mechanism with the same confinement")
            } else {
                format!(
                    "{what}, against the same mechanism another way (for information; the \
                     row above is judged)"
                )
            },
            median: fmt_duration(ours.median()),
            p95: fmt_duration(ours.p95()),
            ratio: fmt_ratio(r),
            baseline: format!(
                "{label}: {} (p95 {})",
                fmt_duration(baseline.median()),
                fmt_duration(baseline.p95())
            ),
            target: if judged { target.cell() } else { "—".into() },
            verdict: if judged {
                Verdict::judge(target.met(r), budget.quick)
            } else {
                Verdict::NoTarget
            },
        }
    };
    let process_label = "a minimal launcher as a process of its own (`sandbox-bench-launch`: the \
                         same launch for the same request applied in its own single-threaded \
                         process, then exec; no runtime, cgroup or supervisor)";
    let in_process_label = if judged_is_process {
        "stricter: the backend's own launch spawned from inside the bench, without the \
         library (no process start but the command's)"
    } else {
        "the backend's own tool run directly with the backend's argv, spawned from inside \
         the bench without the library or the command"
    };
    let mut judged = Vec::new();
    let mut info = Vec::new();
    if let Some(i) = as_process {
        let r = row(&samples[i], process_label.to_string(), judged_is_process);
        if judged_is_process {
            judged.push(r);
        } else {
            info.push(r);
        }
    }
    if let Some(i) = in_process {
        let r = row(
            &samples[i],
            in_process_label.to_string(),
            !judged_is_process,
        );
        if judged_is_process {
            info.push(r);
        } else {
            judged.push(r);
        }
    }
    if judged_is_process && as_process.is_none() {
        let why = if needs_host_alive {
            "the launch keeps host state alive while the command runs (a bundle, a proxy), \
             which a launcher that execs the command cannot"
        } else {
            "no launcher given (--launcher-bin PATH; built next to sandbox-bench)"
        };
        rows.push(Row::not_measured(
            s.name,
            &format!("{what}, against the bare mechanism as a process of its own"),
            why,
        ));
    }
    rows.extend(judged);
    rows.extend(info);
    Ok(rows)
}
