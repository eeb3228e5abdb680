//! Order statistics over timed runs, and how they are printed.
//!
//! Medians and 95th percentiles rather than means: a spawn's time has a long tail (a page
//! fault storm, a scheduler hiccup on a shared 2-core machine), and one outlier should not
//! move the figure an agent feels on every command.

use std::time::Duration;

/// The wall times of one variant's measured runs (warm-up runs are not in here).
#[derive(Clone, Debug, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// Record one run.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// How many runs were recorded.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.clone();
        v.sort_unstable();
        v
    }

    /// The median (the mean of the two middle runs for an even count); zero when empty.
    pub fn median(&self) -> Duration {
        let v = self.sorted();
        match v.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2,
        }
    }

    /// The 95th percentile by nearest rank: the smallest run at least 95% of runs do not
    /// exceed; zero when empty.
    pub fn p95(&self) -> Duration {
        let v = self.sorted();
        if v.is_empty() {
            return Duration::ZERO;
        }
        // Nearest rank: ceil(0.95 * n), 1-based. Integer arithmetic so 20 runs give rank 19.
        let rank = (v.len() * 95).div_ceil(100).max(1);
        v[rank - 1]
    }
}

/// `d` in the unit that keeps three significant figures readable.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A ratio as printed in the table.
pub fn fmt_ratio(r: f64) -> String {
    format!("{r:.2}×")
}

/// `bytes` moved in `d`, in GiB/s.
pub fn gib_per_sec(bytes: u64, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs == 0.0 {
        return f64::INFINITY;
    }
    bytes as f64 / (1u64 << 30) as f64 / secs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Samples {
        Samples(v.iter().map(|&m| Duration::from_millis(m)).collect())
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(ms(&[5, 1, 3]).median(), Duration::from_millis(3));
        assert_eq!(ms(&[4, 1, 3, 2]).median(), Duration::from_micros(2500));
        assert_eq!(Samples::default().median(), Duration::ZERO);
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        let s = ms(&(1..=20).collect::<Vec<_>>());
        assert_eq!(s.p95(), Duration::from_millis(19));
        let s = ms(&(1..=100).rev().collect::<Vec<_>>());
        assert_eq!(s.p95(), Duration::from_millis(95));
        assert_eq!(ms(&[7]).p95(), Duration::from_millis(7));
    }

    #[test]
    fn durations_print_in_a_readable_unit() {
        assert_eq!(fmt_duration(Duration::from_micros(812)), "812 µs");
        assert_eq!(fmt_duration(Duration::from_micros(1_520)), "1.52 ms");
        assert_eq!(fmt_duration(Duration::from_millis(2_340)), "2.34 s");
    }

    #[test]
    fn throughput_in_gib_per_second() {
        let r = gib_per_sec(1 << 30, Duration::from_millis(500));
        assert!((r - 2.0).abs() < 1e-9, "{r}");
    }
}
