//! How many runs each measurement takes, and the targets from issue 7.

use std::time::Duration;

use sandbox::registry::CostTargets;

use crate::measure::Rounds;

/// The idle time before each run of the "after idle" start-up figure.
pub const IDLE: Duration = Duration::from_millis(50);

/// Iteration counts and sizes for one bench run.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Whether this is a `--quick` run.
    pub quick: bool,
    /// Start-up: warm-up and measured runs per variant.
    pub startup: Rounds,
    /// Start-up for backends whose one run costs hundreds of milliseconds (docker).
    pub startup_slow: Rounds,
    /// Start-up with [`IDLE`] before each run.
    pub startup_idle: Rounds,
    /// The same for container backends.
    pub startup_idle_slow: Rounds,
    /// Start-up back to back with the bench holding a large written buffer (process
    /// backends only).
    pub large_host: Rounds,
    /// Start-up through the `sandbox` command, and for container backends: a whole
    /// process per run costs far more than a library call, so fewer runs.
    pub cli: Rounds,
    /// The same for container backends.
    pub cli_slow: Rounds,
    /// Bytes written by the flood.
    pub flood_bytes: u64,
    /// Flood: warm-up and measured runs per variant.
    pub flood: Rounds,
    /// The same for container backends (their output crosses the engine's API).
    pub flood_slow: Rounds,
    /// Sandboxes started at once.
    pub concurrent: usize,
    /// Concurrent-vs-sequential rounds (each round runs both).
    pub concurrency_rounds: usize,
    /// The same for container backends.
    pub concurrency_rounds_slow: usize,
    /// Sandboxes started at once for container backends in a quick run.
    pub concurrent_slow_quick: usize,
}

impl Budget {
    /// Start-up rounds back to back and after idle, for a subject that is `slow` or not.
    pub fn startup_for(&self, slow: bool) -> (Rounds, Rounds) {
        if slow {
            (self.startup_slow, self.startup_idle_slow)
        } else {
            (self.startup, self.startup_idle)
        }
    }

    /// Rounds through the `sandbox` command.
    pub fn cli_for(&self, slow: bool) -> Rounds {
        if slow {
            self.cli_slow
        } else {
            self.cli
        }
    }

    /// Flood rounds.
    pub fn flood_for(&self, slow: bool) -> Rounds {
        if slow {
            self.flood_slow
        } else {
            self.flood
        }
    }

    /// How many at once, and how many rounds.
    pub fn concurrency_for(&self, slow: bool) -> (usize, usize) {
        match (slow, self.quick) {
            (true, true) => (self.concurrent_slow_quick, self.concurrency_rounds_slow),
            (true, false) => (self.concurrent, self.concurrency_rounds_slow),
            (false, _) => (self.concurrent, self.concurrency_rounds),
        }
    }

    /// The full bench: enough runs for a stable median and p95 on a noisy 2-core host.
    pub fn full() -> Self {
        Self {
            quick: false,
            startup: Rounds {
                warmup: 20,
                runs: 200,
                idle: Duration::ZERO,
            },
            startup_slow: Rounds {
                warmup: 3,
                runs: 30,
                idle: Duration::ZERO,
            },
            startup_idle: Rounds {
                warmup: 2,
                runs: 40,
                idle: IDLE,
            },
            startup_idle_slow: Rounds {
                warmup: 1,
                runs: 10,
                idle: IDLE,
            },
            large_host: Rounds {
                warmup: 5,
                runs: 60,
                idle: Duration::ZERO,
            },
            cli: Rounds {
                warmup: 3,
                runs: 50,
                idle: Duration::ZERO,
            },
            cli_slow: Rounds {
                warmup: 1,
                runs: 10,
                idle: Duration::ZERO,
            },
            flood_bytes: 1 << 30,
            flood: Rounds {
                warmup: 1,
                runs: 11,
                idle: Duration::ZERO,
            },
            flood_slow: Rounds {
                warmup: 0,
                runs: 3,
                idle: Duration::ZERO,
            },
            concurrent: 64,
            concurrency_rounds: 5,
            concurrency_rounds_slow: 2,
            concurrent_slow_quick: 8,
        }
    }

    /// A handful of runs, only to prove every path still works.
    pub fn quick() -> Self {
        Self {
            quick: true,
            startup: Rounds {
                warmup: 1,
                runs: 5,
                idle: Duration::ZERO,
            },
            startup_slow: Rounds {
                warmup: 0,
                runs: 2,
                idle: Duration::ZERO,
            },
            startup_idle: Rounds {
                warmup: 0,
                runs: 2,
                idle: IDLE,
            },
            startup_idle_slow: Rounds {
                warmup: 0,
                runs: 2,
                idle: IDLE,
            },
            large_host: Rounds {
                warmup: 0,
                runs: 3,
                idle: Duration::ZERO,
            },
            cli: Rounds {
                warmup: 0,
                runs: 3,
                idle: Duration::ZERO,
            },
            cli_slow: Rounds {
                warmup: 0,
                runs: 2,
                idle: Duration::ZERO,
            },
            flood_bytes: 64 << 20,
            flood: Rounds {
                warmup: 0,
                runs: 1,
                idle: Duration::ZERO,
            },
            flood_slow: Rounds {
                warmup: 0,
                runs: 1,
                idle: Duration::ZERO,
            },
            concurrent: 64,
            concurrency_rounds: 1,
            concurrency_rounds_slow: 1,
            concurrent_slow_quick: 8,
        }
    }
}

/// A target on a ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// The ratio must be at most this.
    AtMost(f64),
    /// The ratio must be at least this.
    AtLeast(f64),
}

impl Target {
    /// Whether `ratio` meets it.
    pub fn met(self, ratio: f64) -> bool {
        match self {
            Self::AtMost(t) => ratio <= t,
            Self::AtLeast(t) => ratio >= t,
        }
    }

    /// As shown in the table.
    pub fn cell(self) -> String {
        match self {
            Self::AtMost(t) => format!("≤ {t:.2}×"),
            Self::AtLeast(t) => format!("≥ {t:.2}×"),
        }
    }
}

/// A backend's start-up target against a bare spawn (its registry entry's promise).
pub fn startup_vs_bare(cost: &CostTargets) -> Option<Target> {
    cost.startup_vs_bare_spawn.map(Target::AtMost)
}

/// A backend's target for repeated start-ups against its own tool run directly.
pub fn startup_vs_direct(cost: &CostTargets) -> Option<Target> {
    cost.startup_vs_direct.map(Target::AtMost)
}

/// A backend's target for a first command (a new backend value, nothing warm) against its
/// own tool run directly.
pub fn first_vs_direct(cost: &CostTargets) -> Option<Target> {
    cost.first_vs_direct.map(Target::AtMost)
}

/// Issue 17's target for a backend whose process isolation is an option it adds on the
/// `strict` lane: at most 1.2 times the same backend on `fast`.
pub const STRICT_VS_FAST: Target = Target::AtMost(1.2);

/// Issue 12's target: `sandbox run ... -- /bin/true` as a whole process at most 1.2 times
/// the bare mechanism with the same confinement (the backend's own launch, spawned
/// directly).
pub const CLI_VS_MECHANISM: Target = Target::AtMost(1.2);

/// 1 GiB of stdout with capture on: at least 0.8 of a bare pipe's throughput.
pub const FLOOD: Target = Target::AtLeast(0.8);

/// Issue 14: start-up with denials recorded, at most 1.1 times the same run without.
pub const DENIAL_REPORTING: Target = Target::AtMost(1.1);

/// 64 at once: at least 1.6 times the sequential completion rate.
pub const CONCURRENCY: Target = Target::AtLeast(1.6);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_compare_in_the_right_direction() {
        assert!(Target::AtMost(1.3).met(1.3));
        assert!(!Target::AtMost(1.3).met(1.31));
        assert!(FLOOD.met(0.8));
        assert!(!FLOOD.met(0.79));
        assert_eq!(Target::AtMost(1.05).cell(), "≤ 1.05×");
        assert_eq!(startup_vs_bare(&CostTargets::NONE), None);
        let cost = CostTargets {
            startup_vs_direct: Some(1.05),
            ..CostTargets::NONE
        };
        assert_eq!(startup_vs_direct(&cost), Some(Target::AtMost(1.05)));
    }
}
