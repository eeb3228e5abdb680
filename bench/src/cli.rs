//! Start-up through the `sandbox` command as a whole process (what a shell script or an
//! agent that shells out pays): `sandbox run ... -- /bin/true`, against a bare spawn of
//! `/bin/true`, interleaved.

use std::ffi::OsString;
use std::path::Path;

use crate::budget::Budget;
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio};
use crate::subject::Subject;
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

/// The row for `s`, through the command at `bin`.
pub async fn measure(
    s: &Subject,
    bin: &Path,
    host_true: &Path,
    budget: &Budget,
) -> Result<Row, BenchError> {
    let rounds = budget.cli_for(s.slow);
    let args = run_args(s);
    let bare_argv = vec![host_true.as_os_str().to_owned()];
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(runs::bare_spawn(&bare_argv))),
        Box::new(|| Box::pin(runs::whole_process(bin, &args))),
    ];
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
    Ok(Row {
        backend: s.name.into(),
        what: format!(
            "start-up through the command as a whole process: `sandbox {}`, {} runs",
            shown.join(" "),
            ours.len()
        ),
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
    })
}
