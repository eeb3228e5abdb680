//! Many sandboxes at once: `n` runs of `/bin/true` started together on the multi-threaded
//! runtime, against the same `n` one after another, in alternating order each round. The
//! figure is completions per second; every run of every round must complete with exit 0
//! (a fork-time deadlock or a lost wakeup shows up here as a hang or a failure, not as a
//! good number).

use std::time::{Duration, Instant};

use crate::budget::{self, Budget};
use crate::error::BenchError;
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, Samples};
use crate::subject::Subject;
use crate::table::{Row, Verdict};

/// `n` runs one after another.
async fn sequential(s: &Subject, n: usize) -> Result<Duration, BenchError> {
    let opts = s.opts(vec![s.true_program.clone()]);
    let start = Instant::now();
    for _ in 0..n {
        runs::library_run(&s.backend, opts.clone()).await?;
    }
    Ok(start.elapsed())
}

/// `n` runs started at once, each on its own task; all must complete.
async fn concurrent(s: &Subject, n: usize) -> Result<Duration, BenchError> {
    let opts = s.opts(vec![s.true_program.clone()]);
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let backend = s.backend.clone();
        let opts = opts.clone();
        set.spawn(async move { runs::library_run(&backend, opts).await.map(|_| ()) });
    }
    let mut completed = 0;
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(())) => completed += 1,
            Ok(Err(e)) => {
                first_error.get_or_insert(e.to_string());
            }
            Err(e) => {
                first_error.get_or_insert(format!("a task panicked or was cancelled: {e}"));
            }
        }
    }
    let took = start.elapsed();
    match first_error {
        None => Ok(took),
        Some(e) => Err(BenchError::wrong(
            format!("{n} sandboxes at once"),
            format!("{completed} of {n} completed; first failure: {e}"),
        )),
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// The concurrency row for `s`.
pub async fn measure(s: &Subject, budget: &Budget) -> Result<Row, BenchError> {
    let (n, rounds) = budget.concurrency_for(s.slow);
    // A warm-up round of each, not counted.
    sequential(s, n.min(8)).await?;
    concurrent(s, n.min(8)).await?;
    let (mut seq, mut conc) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        if round % 2 == 0 {
            seq.push(sequential(s, n).await?);
            conc.push(concurrent(s, n).await?);
        } else {
            conc.push(concurrent(s, n).await?);
            seq.push(sequential(s, n).await?);
        }
    }
    let ratio = rate(n, conc.median()) / rate(n, seq.median());
    let workers = std::thread::available_parallelism().map_or(1, |w| w.get());
    Ok(Row {
        backend: s.name.into(),
        what: format!(
            "{n} sandboxes of `/bin/true` at once on a {workers}-worker runtime; all {n} \
             completed in each of {} rounds",
            conc.len()
        ),
        median: format!(
            "{:.0} runs/s ({} per batch)",
            rate(n, conc.median()),
            fmt_duration(conc.median())
        ),
        p95: format!("slowest batch {}", fmt_duration(conc.p95())),
        ratio: fmt_ratio(ratio),
        baseline: format!(
            "the same {n} one after another: {:.0} runs/s ({})",
            rate(n, seq.median()),
            fmt_duration(seq.median())
        ),
        target: budget::CONCURRENCY.cell(),
        verdict: Verdict::judge(budget::CONCURRENCY.met(ratio), budget.quick),
    })
}
