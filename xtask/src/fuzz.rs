//! `cargo xtask fuzz [--seconds N]`: the property tests over `Plan::new`, the request-path
//! canonicaliser, the request rewriter, the policy file, the command line and the change
//! set's apply path, with many cases, for half the time; then the `cargo fuzz` targets
//! ([`TARGETS`]: `Plan::new`, the canonicaliser, the proxy's TLS ClientHello reader) for the
//! other half, shared between them. Fails on any panic or property violation.
//!
//! The property tests draw a new seed on every run, so repeating them explores new
//! inputs. The fuzz target needs `cargo fuzz` (`cargo install cargo-fuzz`) and the
//! sanitizer flags of a nightly compiler; on a stable toolchain `RUSTC_BOOTSTRAP=1` lets the
//! same compiler accept them, for this build only.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{cargo, project_root, Result};

/// The `cargo fuzz` targets (`fuzz/fuzz_targets/`), each run for an equal share of the
/// second half.
const TARGETS: [&str; 3] = ["plan_new", "canonical_path", "tls_hello"];

/// Cases per property-test run: enough that one run takes a few seconds.
const CASES_PER_RUN: &str = "4096";

fn parse(args: &[String]) -> Result<u64> {
    let mut seconds = 120;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a value")?;
                seconds = v
                    .parse()
                    .map_err(|_| format!("--seconds takes a whole number, not `{v}`"))?;
                if seconds < 2 {
                    return Err("--seconds must be at least 2".into());
                }
            }
            other => {
                return Err(format!("unknown option `{other}` (see `cargo xtask help`)").into())
            }
        }
    }
    Ok(seconds)
}

/// Cases per run of the apply path's property test, which makes, edits and applies a
/// workspace on disk for each (10 to 20 ms a case in a debug build): a run of 10 to 20 s.
const APPLY_CASES_PER_RUN: &str = "1024";

fn property_tests() -> Result<()> {
    for (package, target, filter, cases) in [
        ("sandbox-core", "--test=plan_props", None, CASES_PER_RUN),
        ("sandbox-core", "--test=path_props", None, CASES_PER_RUN),
        (
            "sandbox-proxy",
            "--test=rewriter_props",
            None,
            CASES_PER_RUN,
        ),
        ("sandbox", "--bin=sandbox", Some("props::"), CASES_PER_RUN),
        // Needs root (it skips with a note otherwise), as `scripts/test-all` runs.
        (
            "sandbox-host",
            "--lib",
            Some("changes::props::"),
            APPLY_CASES_PER_RUN,
        ),
    ] {
        let status = Command::new(cargo())
            .current_dir(project_root())
            .args(["test", "--quiet", "-p", package, target])
            .args(filter.map(|f| ["--", f]).iter().flatten())
            .env("PROPTEST_CASES", cases)
            .status()?;
        if !status.success() {
            return Err(format!("property tests of {package} failed ({status})").into());
        }
    }
    Ok(())
}

/// `cargo xtask fuzz [--seconds N]`.
pub fn run(args: &[String]) -> Result<()> {
    let seconds = parse(args)?;
    let started = Instant::now();
    let half = Duration::from_secs(seconds / 2);
    let mut rounds = 0;
    eprintln!("xtask: property tests, {CASES_PER_RUN} cases a run, for {half:?}");
    while rounds == 0 || started.elapsed() < half {
        property_tests()?;
        rounds += 1;
    }
    eprintln!("xtask: property tests: {rounds} rounds, no failure");

    let has_cargo_fuzz = Command::new(cargo())
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cargo_fuzz {
        return Err(
            "`cargo fuzz` is not installed; install it with `cargo install cargo-fuzz` \
                    (scripts/test-all does)"
                .into(),
        );
    }
    let left = Duration::from_secs(seconds).saturating_sub(started.elapsed());
    let share = (left.as_secs() / TARGETS.len() as u64).max(1);
    let fuzz = project_root().join("fuzz");
    for target in TARGETS {
        eprintln!("xtask: cargo fuzz run {target} for {share} s");
        let status = Command::new(cargo())
            .current_dir(&fuzz)
            .env("RUSTC_BOOTSTRAP", "1")
            .args(["fuzz", "run", "-O", target, "--"])
            .arg(format!("-max_total_time={share}"))
            .arg("-rss_limit_mb=2048")
            .status()?;
        if !status.success() {
            return Err(format!(
                "the fuzz target {target} found a failure ({status}); the input is in {}",
                fuzz.join("artifacts").join(target).display()
            )
            .into());
        }
    }
    eprintln!("xtask: fuzzing found nothing in {seconds} s");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_default_to_two_minutes_and_are_checked() {
        assert_eq!(parse(&[]).unwrap(), 120);
        assert_eq!(parse(&["--seconds".into(), "30".into()]).unwrap(), 30);
        assert!(parse(&["--seconds".into(), "1".into()]).is_err());
        assert!(parse(&["--seconds".into(), "x".into()]).is_err());
        assert!(parse(&["--bogus".into()]).is_err());
    }
}
