//! The test main: one libtest-mimic trial per case, for the backend the environment names.
//!
//! A backend crate (in this workspace or outside it) runs the suite with a `harness =
//! false` test target whose `main` calls [`main`] with its own `backend_by_name`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use sandbox_core::Backend;
//!
//! fn backend_by_name(name: &str) -> Option<Arc<dyn Backend>> {
//!     match name {
//!         // "mine" => Some(Arc::new(my_backend::MyBackend::new())),
//!         _ => None,
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     sandbox_conformance::harness::main(backend_by_name, "/path/to/sandbox-probe".as_ref())
//! }
//! ```
//!
//! Environment:
//! - `SANDBOX_BACKEND`: the backend to test (this workspace's suite defaults it to the
//!   registry's unconfined backend; unset, nothing runs and the backend is reported
//!   unavailable).
//! - `SANDBOX_VALIDATE=1`: run only the confinement cases, against `SANDBOX_BACKEND`
//!   (which must confine nothing), each passing only if it fails at its confinement
//!   check.
//! - `SANDBOX_PROBE`: the probe's path as argv\[0\] (default: the host probe, or
//!   [`IN_IMAGE_PROBE`] for a backend without host programs).
//! - `SANDBOX_CONFORMANCE_REPORT`: write a JSON report of every verdict to this file.
//!
//! A backend whose preflight fails (or that `backend_by_name` does not know) is reported
//! as one line starting `UNAVAILABLE:` and exit code [`UNAVAILABLE_EXIT`]; nothing runs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use libtest_mimic::{Arguments, Completion, Trial};
use sandbox_core::registry::HostObjects;
use sandbox_core::Backend;
use serde_json::{json, Value};

use crate::context::{prepare_host_env, Context, Mode, IN_IMAGE_PROBE};
use crate::registry::{cases, run_case, Verdict};

/// The exit code for "this backend cannot run here".
pub const UNAVAILABLE_EXIT: u8 = 3;

/// Trials at once unless `--test-threads` says otherwise: most cases wait on a sandbox,
/// so more than the core count keeps the suite short without loading the host.
const DEFAULT_THREADS: usize = 4;

fn env_flag(name: &str) -> bool {
    matches!(
        std::env::var(name).as_deref(),
        Ok("1") | Ok("true") | Ok("yes")
    )
}

fn write_report(path: Option<&Path>, report: &Value) {
    let Some(path) = path else { return };
    let text = serde_json::to_string_pretty(report).unwrap_or_default();
    if let Err(e) = std::fs::write(path, text) {
        eprintln!(
            "conformance: cannot write the report {}: {e}",
            path.display()
        );
    }
}

fn unavailable(mut report: Value, path: Option<&Path>, reason: String) -> ExitCode {
    println!("UNAVAILABLE: {reason}");
    report["unavailable"] = Value::String(reason);
    write_report(path, &report);
    ExitCode::from(UNAVAILABLE_EXIT)
}

/// Run the suite for the backend `SANDBOX_BACKEND` names, made by `backend_by_name`;
/// `host_probe` is the probe binary on the host.
pub fn main<F>(backend_by_name: F, host_probe: &Path) -> ExitCode
where
    F: Fn(&str) -> Option<Arc<dyn Backend>>,
{
    main_with(backend_by_name, |_| None, host_probe)
}

/// [`main`], told also what a backend's runs leave on the host beyond what core removes
/// (its registry entry's `leaves`), which the soak counts.
pub fn main_with<F, L>(backend_by_name: F, leaves_by_name: L, host_probe: &Path) -> ExitCode
where
    F: Fn(&str) -> Option<Arc<dyn Backend>>,
    L: Fn(&str) -> Option<HostObjects>,
{
    // Before any thread exists: the environment cases need host variables to scrub.
    prepare_host_env();
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(DEFAULT_THREADS);
    }
    let mode = if env_flag("SANDBOX_VALIDATE") {
        Mode::Validate
    } else {
        Mode::Conform
    };
    let name = std::env::var("SANDBOX_BACKEND").unwrap_or_default();
    let report_path = std::env::var_os("SANDBOX_CONFORMANCE_REPORT").map(PathBuf::from);
    let report_path = report_path.as_deref();
    let mut report = json!({
        "backend": name,
        "mode": if mode == Mode::Validate { "validate" } else { "conform" },
        "unavailable": null,
        "results": [],
    });

    let Some(backend) = backend_by_name(&name) else {
        return unavailable(
            report,
            report_path,
            format!(
                "backend `{name}` is not known to this suite's backend_by_name (not built in, \
                 or misspelt)"
            ),
        );
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("conformance: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !args.list {
        let sb = backend.sandbox();
        if let Err(e) = rt.block_on(sb.preflight()) {
            return unavailable(report, report_path, e.to_string());
        }
    }
    let cap = backend.capability();
    if mode == Mode::Validate && (cap.confine_writes || cap.confine_reads) {
        eprintln!(
            "conformance: validating the suite needs a backend that confines nothing, and \
             `{name}` confines the filesystem"
        );
        return ExitCode::FAILURE;
    }
    let probe = match std::env::var_os("SANDBOX_PROBE") {
        Some(p) => PathBuf::from(p),
        None if cap.host_programs => host_probe.to_path_buf(),
        None => PathBuf::from(IN_IMAGE_PROBE),
    };
    if cap.host_programs && !probe.is_file() {
        eprintln!(
            "conformance: the probe {} does not exist; build it with `cargo build -p \
             sandbox-conformance --bin sandbox-probe`, or set SANDBOX_PROBE",
            probe.display()
        );
        return ExitCode::FAILURE;
    }
    let ctx = match Context::new(backend, probe, mode) {
        Ok(c) => Arc::new(c.with_host_probe(host_probe.to_path_buf())),
        Err(e) => {
            eprintln!("conformance: cannot make the scratch directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(spec) = std::env::var_os("SANDBOX_SOAK") {
        let leaves = leaves_by_name(&name);
        return soak_main(ctx, &spec.to_string_lossy(), leaves, report_path);
    }
    report["lane"] = json!(ctx.lane().as_str());
    report["capability"] = serde_json::to_value(ctx.capability()).unwrap_or(Value::Null);
    if !args.list {
        eprintln!(
            "conformance: backend `{name}`, lane `{}`, probe {}{}",
            ctx.lane(),
            ctx.probe().display(),
            if mode == Mode::Validate {
                " (validating the suite: confinement cases must fail)"
            } else {
                ""
            }
        );
    }

    let results: Arc<Mutex<Vec<Value>>> = Arc::default();
    let trials: Vec<Trial> = cases()
        .into_iter()
        .enumerate()
        .filter(|(_, c)| mode == Mode::Conform || c.confinement)
        .map(|(index, case)| {
            let (ctx, rt, results) = (ctx.clone(), rt.clone(), results.clone());
            Trial::ignorable_test(case.full_name(), move || {
                let verdict = rt.block_on(run_case(case, ctx));
                let (word, message) = match &verdict {
                    Verdict::Pass(note) => ("pass", note.clone()),
                    Verdict::Fail(m) => ("fail", Some(m.clone())),
                    Verdict::Skip(r) => ("skip", Some(r.clone())),
                };
                if let Ok(mut r) = results.lock() {
                    r.push(json!({
                        "index": index,
                        "name": case.full_name(),
                        "area": case.area,
                        "case": case.name,
                        "confinement": case.confinement,
                        "verdict": word,
                        "message": message,
                    }));
                }
                match verdict {
                    Verdict::Pass(_) => Ok(Completion::Completed),
                    Verdict::Skip(reason) => Ok(Completion::ignored_with(reason)),
                    Verdict::Fail(m) => Err(m.into()),
                }
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if !args.list {
        let mut list = results.lock().map(|r| r.clone()).unwrap_or_default();
        list.sort_by_key(|v| v["index"].as_u64());
        report["results"] = Value::Array(list);
        write_report(report_path, &report);
    }
    // Removes the scratch directory (process::exit would skip it).
    drop(ctx);
    conclusion.exit_code()
}

/// `SANDBOX_SOAK=RUNS,CONCURRENT`: the soak instead of the cases (see [`crate::soak`]).
/// Prints the counts before and after; fails on growth or on a run that ended otherwise
/// than expected.
fn soak_main(
    ctx: Arc<Context>,
    spec: &str,
    leaves: Option<HostObjects>,
    report_path: Option<&Path>,
) -> ExitCode {
    let config = match crate::soak::SoakConfig::parse(spec) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    // The runtime's threads are named (so the count can tell them from threads a run left
    // behind), its blocking pool bounded, and idle threads kept: a pool that shrinks
    // between the two counts would hide a leak, one that regrows would fake one.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .max_blocking_threads(16)
        .thread_name(crate::soak::RUNTIME_THREAD)
        .thread_keep_alive(std::time::Duration::from_secs(24 * 3600))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = ctx.backend_name();
    eprintln!(
        "soak: backend `{name}`, {} sequential runs then {} at once (twice), kills, timeouts, \
         floods and daemons mixed in",
        config.sequential, config.concurrent
    );
    let report = rt.block_on(crate::soak::soak(ctx.clone(), config, leaves));
    println!("soak {name}: before: {}", report.before);
    println!("soak {name}: after:  {}", report.after);
    for e in report.errors.iter().take(20) {
        println!("soak {name}: run failed: {e}");
    }
    for g in &report.growth {
        println!("soak {name}: GREW: {g}");
    }
    println!(
        "soak {name}: {} runs in {:.1} s: {}",
        report.runs,
        report.seconds,
        if report.passed() {
            "nothing grew"
        } else {
            "FAILED"
        }
    );
    write_report(
        report_path,
        &serde_json::to_value(&report).unwrap_or(Value::Null),
    );
    let passed = report.passed();
    drop(ctx);
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
