//! Interleaved measurement: every variant of one comparison runs in the same loop, in a
//! rotating order, so a baseline and the sandbox see the same machine state (page cache,
//! CPU frequency, the other engineers' builds on a shared host). Timing them in separate
//! phases would let a background burst land on one side only.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::error::BenchError;
use crate::stats::Samples;

/// One timed run of a variant.
pub type Timed<'a> = Pin<Box<dyn Future<Output = Result<Duration, BenchError>> + Send + 'a>>;

/// A variant: makes one timed run each time it is called.
pub type Probe<'a> = Box<dyn Fn() -> Timed<'a> + Send + Sync + 'a>;

/// How many runs to throw away and how many to keep.
#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    /// Runs of each variant before measuring (caches, lazy initialisation, the first
    /// cgroup).
    pub warmup: usize,
    /// Measured runs of each variant.
    pub runs: usize,
    /// Idle time before each run, not timed: zero for back-to-back runs. An agent's
    /// commands come seconds apart, and some kernel paths (an RCU grace period on the
    /// first cgroup move after a quiet spell) cost only then.
    pub idle: Duration,
}

/// Run every probe `warmup + runs` times, interleaved; iteration `i` starts at probe
/// `i mod n` so no variant always follows the same one. The first error stops everything:
/// a failing variant has no time worth reporting.
pub async fn interleaved(probes: &[Probe<'_>], rounds: Rounds) -> Result<Vec<Samples>, BenchError> {
    let n = probes.len();
    let mut samples = vec![Samples::default(); n];
    for i in 0..rounds.warmup + rounds.runs {
        for j in 0..n {
            let k = (i + j) % n;
            if !rounds.idle.is_zero() {
                tokio::time::sleep(rounds.idle).await;
            }
            let took = probes[k]().await?;
            if i >= rounds.warmup {
                samples[k].push(took);
            }
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn every_probe_runs_warmup_plus_runs_times_in_rotating_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let probe = |id: u64| -> Probe<'static> {
            let log = log.clone();
            Box::new(move || {
                let log = log.clone();
                Box::pin(async move {
                    if let Ok(mut l) = log.lock() {
                        l.push(id);
                    }
                    Ok(Duration::from_millis(id))
                })
            })
        };
        let probes = vec![probe(1), probe(2), probe(3)];
        let samples = interleaved(
            &probes,
            Rounds {
                warmup: 1,
                runs: 2,
                idle: Duration::from_millis(1),
            },
        )
        .await
        .unwrap_or_default();
        assert_eq!(samples.len(), 3);
        assert!(samples.iter().all(|s| s.len() == 2));
        assert_eq!(samples[1].median(), Duration::from_millis(2));
        let order = log.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(order, vec![1, 2, 3, 2, 3, 1, 3, 1, 2]);
    }

    #[tokio::test]
    async fn the_first_failure_stops_the_measurement() {
        let probes: Vec<Probe<'static>> = vec![Box::new(|| {
            Box::pin(async { Err(BenchError::wrong("x", "exit 1")) })
        })];
        let r = interleaved(
            &probes,
            Rounds {
                warmup: 0,
                runs: 3,
                idle: Duration::ZERO,
            },
        )
        .await;
        assert!(matches!(r, Err(BenchError::Wrong { .. })));
    }
}
