//! Start-up to outcome of `/bin/true`: through the library, against a bare spawn from this
//! same process and against the backend's own tool run directly with what the backend
//! would give it (its own launch, or its registry entry's direct command), all interleaved
//! in one loop.

use std::ffi::OsString;
use std::path::Path;

use crate::budget::{self, Budget};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, Samples};
use crate::subject::{Direct, Subject};
use crate::table::{Row, Verdict};

fn ratio(a: &Samples, b: &Samples) -> f64 {
    a.median().as_secs_f64() / b.median().as_secs_f64()
}

fn row(
    s: &Subject,
    what: String,
    ours: &Samples,
    base: &Samples,
    base_label: &str,
    target: Option<budget::Target>,
    quick: bool,
) -> Row {
    let r = ratio(ours, base);
    Row {
        backend: s.name.into(),
        what,
        median: fmt_duration(ours.median()),
        p95: fmt_duration(ours.p95()),
        ratio: fmt_ratio(r),
        baseline: format!(
            "{base_label}: {} (p95 {})",
            fmt_duration(base.median()),
            fmt_duration(base.p95())
        ),
        target: target.map_or("—".into(), |t| t.cell()),
        verdict: target.map_or(Verdict::NoTarget, |t| Verdict::judge(t.met(r), quick)),
    }
}

/// The start-up rows for `s`.
pub async fn measure(
    s: &Subject,
    host_true: &Path,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let (rounds, idle) = budget.startup_for(s.slow);
    let bare_argv: Vec<OsString> = vec![host_true.as_os_str().to_owned()];
    let opts = s.opts(vec![s.true_program.clone()]);
    // The same backend on `fast`, where the subject runs on `strict` and `fast` takes it
    // too: what process isolation costs on top (landlock's pid namespace).
    let fast_opts = {
        let mut o = opts.clone();
        o.lane = sandbox_core::Lane::Fast;
        o
    };

    // `fast` on a backend value of its own where the backend keeps state across runs
    // (docker's warm pool: one container kept warm per container body, which both lanes
    // share): on one value each lane's run would take the container the other's had left
    // warming, and the figures would be the interleaving's, not repeated commands'.
    let runs_fast = s.lane == sandbox_core::Lane::Strict && s.accepts(sandbox_core::Lane::Fast);
    let fast_backend = match &s.fresh {
        Some(fresh) if runs_fast => {
            Some((fresh.0)().map_err(|e| BenchError::wrong("a backend value for `fast`", e))?)
        }
        _ => None,
    };
    // Built once: the same arguments (a container's flags) for every run.
    let direct_args = match &s.direct {
        Some(Direct::Command(run)) => (run.args)(&opts).map_err(|e| {
            BenchError::wrong(
                format!("the baseline {}", run.label),
                format!("cannot build it: {e}"),
            )
        })?,
        _ => Vec::new(),
    };
    // A backend that records refusals (a seccomp supervisor): the same run with the record
    // off, so the row shows what reporting costs at start-up.
    let plain_opts = {
        let mut o = opts.clone();
        o.report_denials = false;
        o
    };
    let mut unmeasured = Vec::new();
    let mut probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(runs::bare_spawn(&bare_argv))),
        Box::new(|| {
            let opts = opts.clone();
            Box::pin(async move { runs::library_run(&s.backend, opts).await.map(|(d, _)| d) })
        }),
    ];
    // A launch born in namespaces is spawned only by core's `clone3` (sharing the host's
    // memory until exec); the bench's own spawn of it would fork the bench twice (`unshare`
    // and the next child) and measure the bench's size, not the mechanism.
    let born_in = match &s.direct {
        Some(Direct::Launch { prepare, .. }) => prepare(&opts)
            .map_err(|e| BenchError::sandbox("preparing the launch", e))?
            .born_in
            .any(),
        _ => false,
    };
    let direct_label = match &s.direct {
        Some(Direct::Launch { label, .. }) if born_in => {
            unmeasured.push(Row::not_measured(
                s.name,
                &format!("start-up against {label}"),
                "the launch is born in namespaces (a pid namespace's init), \
                 which only core's `clone3` makes without copying this process; a fork of \
                 the bench would measure the bench's size",
            ));
            None
        }
        Some(Direct::Launch { label, prepare }) => {
            let prepare = prepare.clone();
            let opts = &opts;
            probes.push(Box::new(move || {
                let prepare = prepare.clone();
                Box::pin(async move { runs::direct_launch(&*prepare, opts).await })
            }));
            Some(label.clone())
        }
        Some(Direct::Command(run)) => {
            let (program, args) = (&run.program, &direct_args);
            probes.push(Box::new(move || {
                Box::pin(runs::whole_process(program, args))
            }));
            Some(run.label.clone())
        }
        None => None,
    };
    // A first command: a new backend value each time, so nothing it keeps across runs
    // (a connection, a warm pool) helps.
    let first_at = probes.len();
    if let Some(fresh) = &s.fresh {
        let opts = &opts;
        probes.push(Box::new(move || {
            let fresh = fresh.0.clone();
            let opts = opts.clone();
            Box::pin(async move {
                let backend = fresh().map_err(|e| BenchError::wrong("a new backend value", e))?;
                runs::library_run(&backend, opts).await.map(|(d, _)| d)
            })
        }));
    }
    let fast_index = runs_fast.then(|| {
        let fast_opts = &fast_opts;
        let backend = fast_backend.as_ref().unwrap_or(&s.backend);
        probes.push(Box::new(move || {
            let opts = fast_opts.clone();
            Box::pin(async move { runs::library_run(backend, opts).await.map(|(d, _)| d) })
        }));
        probes.len() - 1
    });
    // What reporting sets up at start (a seccomp supervisor). The proxy's refusals are not
    // among them: core reads them from its record after the run, and this run has no proxy.
    let startup_kinds = sandbox_core::DenialKinds {
        network_connect: false,
        ..s.backend.capability().reports_denials
    };
    let reports = startup_kinds != Default::default();
    let plain_at = probes.len();
    if reports {
        let plain_opts = &plain_opts;
        probes.push(Box::new(move || {
            let opts = plain_opts.clone();
            Box::pin(async move { runs::library_run(&s.backend, opts).await.map(|(d, _)| d) })
        }));
    }
    let mut rows = unmeasured;
    for (rounds, how) in [
        (rounds, "back to back".to_string()),
        (
            idle,
            format!(
                "after {} ms idle before each run (as between an agent's commands)",
                idle.idle.as_millis()
            ),
        ),
    ] {
        let samples = interleaved(&probes, rounds).await?;
        let (bare, ours) = (&samples[0], &samples[1]);
        let what = format!(
            "start-up of `/bin/true` to outcome: `run` + `wait` (lane {}), {how}, {} runs",
            s.lane,
            ours.len()
        );
        rows.push(row(
            s,
            what,
            ours,
            bare,
            "bare spawn (tokio::process)",
            budget::startup_vs_bare(&s.cost),
            budget.quick,
        ));
        if let Some(fast) = fast_index.and_then(|i| samples.get(i)) {
            rows.push(row(
                s,
                format!("start-up on `strict` against the same backend on `fast`, {how}"),
                ours,
                fast,
                "the same on `fast`",
                Some(budget::STRICT_VS_FAST),
                budget.quick,
            ));
        }
        if let (true, Some(plain)) = (reports, samples.get(plain_at)) {
            rows.push(row(
                s,
                format!(
                    "start-up with denial reporting (kinds: {}), {how}",
                    startup_kinds.names().join(", ")
                ),
                ours,
                plain,
                "the same run with `report_denials` off",
                Some(budget::DENIAL_REPORTING),
                budget.quick,
            ));
        }
        if let (Some(label), Some(direct)) = (&direct_label, samples.get(2)) {
            rows.push(row(
                s,
                format!("start-up against {label}, {how}"),
                ours,
                direct,
                label,
                budget::startup_vs_direct(&s.cost),
                budget.quick,
            ));
            if let (true, Some(first)) = (s.fresh.is_some(), samples.get(first_at)) {
                rows.push(row(
                    s,
                    format!("first command (a new backend value, no pool) against {label}, {how}"),
                    first,
                    direct,
                    label,
                    budget::first_vs_direct(&s.cost),
                    budget.quick,
                ));
            }
        }
    }
    if !s.slow {
        rows.extend(large_host(s, &probes, fast_index, budget).await?);
    }
    Ok(rows)
}

/// What the host process's own size costs at start-up: an agent embedding the library
/// holds hundreds of MiB, and a spawn that copies the host (a fork: page tables, then a
/// fault on every page either side writes) pays for all of it on every command, where a
/// bare spawn (vfork-like) pays nothing. The same probes, back to back, with this process
/// holding [`LARGE_HOST`] it has written; the ratio is against the bare spawn in that
/// state, to read beside the back-to-back row's.
async fn large_host(
    s: &Subject,
    probes: &[Probe<'_>],
    fast_index: Option<usize>,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let rounds = budget.large_host;
    // Written, so every page is resident and mapped: what a fork would copy.
    let ballast = vec![1u8; LARGE_HOST];
    let samples = interleaved(probes, rounds).await;
    drop(std::hint::black_box(ballast));
    let samples = samples?;
    let (bare, ours) = (&samples[0], &samples[1]);
    let mb = LARGE_HOST >> 20;
    let mut rows = vec![row(
        s,
        format!(
            "start-up of `/bin/true` to outcome (lane {}) with this process holding {mb} MiB \
             it has written (a large host, as an agent is), back to back, {} runs",
            s.lane,
            ours.len()
        ),
        ours,
        bare,
        "bare spawn (tokio::process) from the same process",
        None,
        budget.quick,
    )];
    if let Some(fast) = fast_index.and_then(|i| samples.get(i)) {
        rows.push(row(
            s,
            format!("the same on `fast`, with this process holding {mb} MiB"),
            fast,
            bare,
            "bare spawn (tokio::process) from the same process",
            None,
            budget.quick,
        ));
    }
    Ok(rows)
}

/// The large host's written memory.
const LARGE_HOST: usize = 256 << 20;
