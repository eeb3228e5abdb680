//! The markdown table: one row per (backend, measurement), with the baseline it was
//! divided by and the target next to it, so a reader never has to trust a bare
//! number.

use crate::machine::{Load, Machine};

/// Whether a row meets its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No target for this row (informative).
    NoTarget,
    /// Target met.
    Met,
    /// Target missed.
    Missed,
    /// A `--quick` run: too few iterations to judge.
    NotJudged,
}

impl Verdict {
    /// `Met` or `Missed`, or `NotJudged` in a quick run.
    pub fn judge(met: bool, quick: bool) -> Self {
        match (quick, met) {
            (true, _) => Self::NotJudged,
            (false, true) => Self::Met,
            (false, false) => Self::Missed,
        }
    }

    fn cell(self) -> &'static str {
        match self {
            Self::NoTarget => "—",
            Self::Met => "yes",
            Self::Missed => "**no**",
            Self::NotJudged => "not judged (quick)",
        }
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// The backend (or `host` for a baseline-only row).
    pub backend: String,
    /// What was measured, and how.
    pub what: String,
    /// The median (or the main figure).
    pub median: String,
    /// The 95th percentile (or the spread).
    pub p95: String,
    /// The ratio against the baseline.
    pub ratio: String,
    /// The baseline, with its own median.
    pub baseline: String,
    /// The target for the ratio.
    pub target: String,
    /// Whether the target was met.
    pub verdict: Verdict,
}

impl Row {
    /// A row for something that could not be measured here, with the reason.
    pub fn not_measured(backend: &str, what: &str, reason: &str) -> Self {
        Self {
            backend: backend.into(),
            what: what.into(),
            median: format!("not measured: {reason}"),
            p95: "—".into(),
            ratio: "—".into(),
            baseline: "—".into(),
            target: "—".into(),
            verdict: Verdict::NoTarget,
        }
    }

    /// A row for a measurement that failed part-way: the run is reported as failing.
    pub fn failed(backend: &str, what: &str, reason: &str) -> Self {
        Self {
            median: format!("FAILED: {reason}"),
            ..Self::not_measured(backend, what, reason)
        }
    }
}

/// The whole report: header, rows, notes.
#[derive(Debug)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// The rows, in measurement order.
    pub rows: Vec<Row>,
    /// Notes under the table (how each figure was taken).
    pub notes: Vec<String>,
    /// How busy the host was at the end.
    pub load_after: Load,
}

/// Keep a cell on one line and out of the table's syntax.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

impl Report {
    /// The report as markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str("### Sandbox start-up, throughput and concurrency\n\n");
        out.push_str(&format!(
            "Machine: {}\n\n",
            self.machine.describe(&self.load_after)
        ));
        if self.quick {
            out.push_str(
                "**`--quick` run: a handful of iterations and a smaller flood, only to show \
                 the bench still runs. The figures are not meaningful and no target is \
                 judged.**\n\n",
            );
        }
        out.push_str("| backend | what | median | p95 | ratio | baseline | target | met? |\n");
        out.push_str("|---|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                cell(&r.backend),
                cell(&r.what),
                cell(&r.median),
                cell(&r.p95),
                cell(&r.ratio),
                cell(&r.baseline),
                cell(&r.target),
                r.verdict.cell(),
            ));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine {
            cores: 2,
            cpu: None,
            memory_gib: Some(4.0),
            kernel: "6.1.0".into(),
            date: "2025-01-01 00:00 UTC".into(),
            euid: 0,
            load_before: Load::default(),
        }
    }

    #[test]
    fn rows_render_as_one_markdown_line_each_with_pipes_escaped() {
        let mut row = Row::not_measured("backend-x", "start-up", "no image | engine down");
        row.what = "two\nlines".into();
        let report = Report {
            machine: machine(),
            quick: false,
            rows: vec![row],
            notes: vec!["a note".into()],
            load_after: Load::default(),
        };
        let md = report.markdown();
        let line = md
            .lines()
            .find(|l| l.starts_with("| backend-x"))
            .unwrap_or_default();
        assert_eq!(
            line,
            "| backend-x | two lines | not measured: no image \\| engine down | — | — | — | — | — |"
        );
        assert!(md.contains("2 cores"), "{md}");
        assert!(md.contains("Linux 6.1.0"), "{md}");
        assert!(md.contains("- a note"), "{md}");
        assert!(!md.contains("quick"), "{md}");
    }

    #[test]
    fn a_quick_run_says_so_and_judges_nothing() {
        assert_eq!(Verdict::judge(false, true), Verdict::NotJudged);
        assert_eq!(Verdict::judge(false, false), Verdict::Missed);
        assert_eq!(Verdict::judge(true, false), Verdict::Met);
        let report = Report {
            machine: machine(),
            quick: true,
            rows: Vec::new(),
            notes: Vec::new(),
            load_after: Load::default(),
        };
        assert!(report.markdown().contains("`--quick` run"));
    }
}
