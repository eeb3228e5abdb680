//! Output throughput: a program writes a fixed number of bytes to standard output, through
//! the sandbox with capture on, against the same program on a bare pipe read by this
//! process, interleaved.
//!
//! The capture keeps the library's default cap (8 MiB per stream: the head and the tail
//! are kept, every byte in between is read and counted), so this is the throughput of a
//! capped capture, which is what a host that did not raise the cap gets. Every run checks
//! that all bytes were read (`total_bytes`), so a cap can never pass for speed.

use std::io::Write;
use std::time::Duration;

use sandbox_core::DEFAULT_OUTPUT_LIMIT;

use crate::budget::{self, Budget};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, gib_per_sec};
use crate::subject::{Host, Subject};
use crate::table::{Row, Verdict};

/// The flood program itself (`sandbox-bench flood BYTES`): `bytes` zero bytes to standard
/// output in 1 MiB writes; exit 1 if the reader goes away first.
pub fn flood(bytes: u64) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    // Unbuffered: each write goes straight to the pipe, as a chatty build's would.
    let mut out = std::fs::File::from(std::os::fd::AsFd::as_fd(&stdout).try_clone_to_owned()?);
    let chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn cell(bytes: u64, d: Duration) -> String {
    format!("{} ({:.2} GiB/s)", fmt_duration(d), gib_per_sec(bytes, d))
}

/// The throughput row for `s`.
pub async fn measure(s: &Subject, host: &Host, budget: &Budget) -> Result<Row, BenchError> {
    let bytes = budget.flood_bytes;
    let count = bytes.to_string();
    let host_argv = runs::argv(host.flood().as_os_str(), ["flood", count.as_str()]);
    let opts = s.opts(runs::argv(&s.flood_program, ["flood", count.as_str()]));

    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(runs::bare_pipe(&host_argv, bytes))),
        Box::new(|| {
            let opts = opts.clone();
            Box::pin(async move {
                let (took, outcome) = runs::library_run(&s.backend, opts).await?;
                runs::check_flood(&outcome, bytes)?;
                Ok(took)
            })
        }),
    ];
    let samples = interleaved(&probes, budget.flood_for(s.slow)).await?;
    let (bare, ours) = (&samples[0], &samples[1]);
    // Throughput ratio: the same bytes, so the inverse of the time ratio.
    let ratio = bare.median().as_secs_f64() / ours.median().as_secs_f64();
    Ok(Row {
        backend: s.name.into(),
        what: format!(
            "{} of stdout, capture on (default {} MiB cap: head and tail kept, every byte \
             read and counted), {} runs",
            size(bytes),
            DEFAULT_OUTPUT_LIMIT >> 20,
            ours.len()
        ),
        median: cell(bytes, ours.median()),
        p95: cell(bytes, ours.p95()),
        ratio: fmt_ratio(ratio),
        baseline: format!(
            "bare pipe read by this process: {}",
            cell(bytes, bare.median())
        ),
        target: budget::FLOOD.cell(),
        verdict: Verdict::judge(budget::FLOOD.met(ratio), budget.quick),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_named_in_binary_units() {
        assert_eq!(size(1 << 30), "1 GiB");
        assert_eq!(size(64 << 20), "64 MiB");
    }
}
