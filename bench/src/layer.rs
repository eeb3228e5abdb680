//! Start-up over a 1 GiB workspace with the copy-on-write layer (`changes: review`)
//! against a plain run over the same workspace, interleaved: the layer must cost O(1) in
//! the workspace's size where overlayfs is available (issue 15: at most 1.2×).
//!
//! The workspace is 64 files of 16 MiB each, allocated with `fallocate` (real blocks, no
//! holes, nothing written), so it is cheap to make and a copy would have to move every
//! byte.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use sandbox_core::Changes;

use crate::budget::{Budget, Target};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio};
use crate::subject::Subject;
use crate::table::{Row, Verdict};

const FILES: u64 = 64;
const FILE_SIZE: i64 = 16 << 20;

/// Issue 15's target: a run over the layer against a plain run.
const TARGET: Target = Target::AtMost(1.2);

fn big_workspace() -> std::io::Result<tempfile::TempDir> {
    let d = tempfile::Builder::new()
        .prefix("sandbox-bench-1gib-")
        .tempdir()?;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))?;
    for i in 0..FILES {
        let f = File::create(d.path().join(format!("blob-{i:02}")))?;
        // SAFETY: a live descriptor; allocates blocks, writes nothing.
        if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, FILE_SIZE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(d)
}

/// The layer row for `s`.
pub async fn measure(s: &Subject, budget: &Budget) -> Result<Vec<Row>, BenchError> {
    let what = "start-up over a 1 GiB workspace with the copy-on-write layer";
    if s.backend.capability().change_layer.is_none() {
        return Ok(vec![Row::not_measured(
            s.name,
            what,
            "the backend has no change layer (capability.change_layer)",
        )]);
    }
    let ws = big_workspace().map_err(|e| BenchError::io("making the 1 GiB workspace", e))?;
    let opts = |changes| {
        let mut o = sandbox_core::SandboxOpts::new(ws.path(), vec![s.true_program.clone()]);
        o.lane = s.lane;
        o.changes = changes;
        o
    };
    // One run first: which mechanism the layer takes here.
    let (_, first) = runs::library_run(&s.backend, opts(Changes::Review)).await?;
    let mechanism = first
        .changes
        .as_ref()
        .map(|c| c.mechanism().as_str())
        .ok_or_else(|| BenchError::wrong(what, "a review run carried no change set"))?;
    drop(first);
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| {
            let o = opts(Changes::Direct);
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
        Box::new(|| {
            let o = opts(Changes::Review);
            // The outcome (and with it the layer) is dropped inside the timed run.
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
    ];
    let (rounds, _) = budget.startup_for(s.slow);
    let samples = interleaved(&probes, rounds).await?;
    let (plain, layered) = (&samples[0], &samples[1]);
    let ratio = layered.median().as_secs_f64() / plain.median().as_secs_f64();
    Ok(vec![Row {
        backend: s.name.into(),
        what: format!(
            "{what} (`changes: review`, {mechanism}; `/bin/true`, lane {}), {} runs",
            s.lane,
            layered.len()
        ),
        median: fmt_duration(layered.median()),
        p95: fmt_duration(layered.p95()),
        ratio: fmt_ratio(ratio),
        baseline: format!(
            "plain run over the same workspace: {} (p95 {})",
            fmt_duration(plain.median()),
            fmt_duration(plain.p95())
        ),
        target: TARGET.cell(),
        verdict: Verdict::judge(TARGET.met(ratio), budget.quick),
    }])
}
