//! Project automation, run as `cargo xtask <task>` (the alias is in `.cargo/config.toml`).
//!
//! Boring on purpose: std and `serde_json` (to read cargo's build messages and the
//! suite's reports), one module per task, `main` only dispatches.

mod backends;
mod bench;
mod conformance;
mod fuzz;
mod layers;
mod soak;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Errors are messages for a person at a terminal.
type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const HELP: &str = "\
Usage: cargo xtask <task> [options]

Tasks:
  conformance [--backend NAME]... [--require NAME,...|all] [--validate] [--as-user UID]
              [--in-container IMAGE [--container-arg ARG]...] [-- <test harness args>]
      Build the conformance suite once, run it for each backend (default: every backend
      in the registry, `sandbox/src/registry.rs`), print a backend-by-case matrix
      (pass / FAIL / skip (reason)) and write it to target/conformance.md. Fails on any
      failing case and on any --require'd backend that is unavailable; other unavailable
      backends are shown, not fatal.
        --require all   every backend in the registry, each required (what CI runs)
        --validate      run the confinement cases against the backend that confines
                        nothing (`none`); each must fail there (the proof that it can fail)
        --as-user UID   run the suite as UID (setpriv, no groups, a TMPDIR it owns), for
                        the unprivileged run; then every backend (and `all`) means every
                        confining backend the registry says an ordinary user runs
        --in-container IMAGE
                        run the suite inside a default container of the local engine
                        (default seccomp profile, masked /proc, no capabilities, no
                        network), as --as-user's uid or 1000: a default pod
        --container-arg ARG
                        with --in-container: an argument for `docker run` (e.g.
                        `--security-opt=systempaths=unconfined`), for a container that
                        allows what `strict` needs
        -- ARGS         passed to the test harness (e.g. `-- fs::` to run one area)
  bench [--backend NAME]... [--quick]
      Build sandbox-bench (and the `sandbox` command) in release once, measure each
      backend (start-up, 1 GiB of stdout, 64 at once, the command as a whole process) as
      ratios against baselines taken in the same run, print the markdown table and write
      it to bench/RESULTS.md (--quick: a handful of runs, written to
      <target>/bench-quick.md; proves the bench runs, judges no target).
  soak [--backend NAME]... [--runs N] [--concurrent N] [--as-user UID]
      Per backend (default: all; with --as-user, every confining backend that runs
      unprivileged), N runs one after another (default 1000) and N at once
      (default 64, twice), with kills, timeouts, output floods and daemonizing children
      mixed in; prints the host's counts (descriptors, threads, children, zombies,
      cgroups, mounts, temp entries, containers, resident set) after a warm-up and after
      the soak, and fails if anything grew (the resident set by 5% or more).
  backends [--packages | --programs | --github-matrix]
      The registry's backends as the built suite lists them, one a line (`unprivileged`:
      an ordinary user runs it; `needs:PKG`: a Debian package it needs on the host);
      --packages: those packages, each once (what scripts/test-all installs);
      --programs: the host programs the backends run (what scripts/fresh-machine hides);
      --github-matrix: one CI conformance job per backend, as a GitHub Actions matrix.
  fuzz [--seconds N]
      For half of N seconds (default 120), the property tests over Plan::new, the
      request-path canonicaliser and rewriter, the policy file, the command line and the
      change set's apply path (as root), with new seeds (PROPTEST_CASES=4096 a run, 1024
      for the apply path); for the other half, the cargo-fuzz targets over
      Plan::new and the canonicaliser (needs `cargo install cargo-fuzz`). Fails on a panic,
      an accepted request wider than asked, or a path accepted in a non-canonical form.
  layers
      Read the `use` lines of every product crate and fail on a cycle between modules or
      crates, or on an import from a lower floor to a higher one (the floors are declared
      in xtask/src/layers.rs). What CI runs first, so the layering stays true.
  help
      This text.
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    let result = match task.as_deref() {
        Some("conformance") => conformance::run(&rest),
        Some("backends") => backends::run(&rest),
        Some("bench") => bench::run(&rest),
        Some("soak") => soak::run(&rest),
        Some("fuzz") => fuzz::run(&rest),
        Some("layers") => layers::run(&rest),
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n\n{HELP}").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: xtask lives one level below it.
fn project_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The cargo that runs us (so the same toolchain builds everything).
fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Cargo's target directory, where results are written.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => project_root().join(d),
        None => project_root().join("target"),
    }
}
