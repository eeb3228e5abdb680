//! `sandbox-bench`: what each sandbox backend costs, as ratios against baselines measured
//! in the same run (issue 7). `cargo xtask bench` builds it in release, runs it and keeps
//! its table in `bench/RESULTS.md`.
//!
//! # What it measures, per backend
//!
//! - Start-up to outcome of `/bin/true` through the library (`run` + `wait`), median and
//!   p95 after a warm-up, against a bare `tokio::process` spawn of the same program from
//!   this process; for a process backend also against the launch the backend builds run
//!   directly (same program, argv, environment, descriptors: for bwrap, bwrap itself), for
//!   a backend that runs an image against its registry entry's direct command (for docker,
//!   `docker run --rm` with the same image and flags).
//! - Throughput of a flood of standard output through the sandbox with capture on,
//!   against a bare pipe.
//! - 64 sandboxes at once on the multi-threaded runtime against 64 one after another.
//! - Start-up through the `sandbox` command as a whole process.
//! - Start-up over a 1 GiB workspace with the copy-on-write layer against a plain run.
//! - Network mode `proxy` (see [`egress`]): start-up against `loopback`, a download
//!   through the proxy against a direct one, and the connection set-up it adds.
//! - Where no namespace can be made (see [`pod`]: a default container or pod, made on the
//!   host as the landlock backend's tests make it): start-up on `fast` against a launcher
//!   that applies the same ruleset and filter and execs, and a connect mediated by the
//!   supervisor against the network-namespace door.
//!
//! # Honesty
//!
//! Each comparison runs its variants interleaved in one loop (see [`measure`]), so both
//! sides see the same machine. A run only counts if it did what is measured (exit 0,
//! every byte read); otherwise the row says FAILED and the bench exits non-zero. A backend
//! that cannot run here is a row saying why, never a number. `--quick` runs a handful of
//! iterations to prove the paths work and judges no target.
//!
//! # Dependencies
//!
//! `sandbox-core` and the backend crates (what is measured), `tokio` (the runtime the
//! library runs on, and the bare baselines), `clap` (arguments), `tempfile` (the
//! workspace), `thiserror` (the error), `sandbox-proxy` (the egress proxy measured on its
//! own, and the test resolver table), `libc` (`fcntl` between fork and exec for the
//! direct launch, `geteuid` for the header).

mod budget;
mod cli;
mod concurrency;
mod egress;
mod error;
mod flood;
mod layer;
mod machine;
mod measure;
mod pod;
mod runs;
mod startup;
mod stats;
mod subject;
mod table;
mod terminated;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::budget::Budget;
use crate::error::BenchError;
use crate::machine::Machine;
use crate::subject::{Host, Subject};
use crate::table::{Report, Row};

/// Measure sandbox start-up, throughput and concurrency per backend; prints a markdown
/// table on standard output (progress goes to standard error).
#[derive(Debug, Parser)]
#[command(name = "sandbox-bench")]
struct Args {
    /// A backend to measure (repeatable; default: every backend in the registry). A named
    /// backend that cannot be measured makes the exit status non-zero.
    #[arg(long = "backend", value_name = "NAME")]
    backends: Vec<String>,
    /// A handful of iterations and a 64 MiB flood: proves the bench runs, judges nothing.
    #[arg(long)]
    quick: bool,
    /// The `sandbox` command to measure as a whole process.
    #[arg(long, value_name = "PATH")]
    sandbox_bin: Option<PathBuf>,
    /// The launcher baseline for that row (`sandbox-bench-launch`; default: next to this
    /// program, where cargo builds it).
    #[arg(long, value_name = "PATH")]
    launcher_bin: Option<PathBuf>,
    /// Only these measurements (repeatable; default all): for profiling one of them.
    #[arg(long, value_enum, value_name = "WHAT")]
    only: Vec<Only>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

/// One measurement, for `--only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Only {
    /// Start-up through the library.
    Startup,
    /// Standard output throughput.
    Flood,
    /// Many sandboxes at once.
    Concurrency,
    /// Start-up through the `sandbox` command.
    Cli,
    /// Start-up over a 1 GiB workspace with the copy-on-write layer.
    Layer,
    /// Network mode `proxy`: start-up, a download, connection set-up, kept-alive requests
    /// on terminated TLS.
    Egress,
    /// Kept-alive requests on terminated TLS against a tunnel (in `egress` too).
    Terminated,
    /// Where no namespace can be made (a default container or pod): start-up on `fast`
    /// against a launcher with the same ruleset and filter, and the mediated connect
    /// against the namespace door.
    Pod,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write BYTES zero bytes to standard output (the flood program run in sandboxes).
    #[command(hide = true)]
    Flood {
        /// How many bytes.
        bytes: u64,
    },
    /// Connect through `http_proxy` to HOST:PORT and print the nanoseconds the set-up took
    /// (the connection probe run in sandboxes).
    #[command(hide = true)]
    ProxyConnect {
        /// The target for `CONNECT`.
        target: String,
    },
    /// The worker of the pod rows, started by the bench where no namespace can be made.
    #[command(hide = true)]
    PodWorker {
        /// The backend.
        backend: String,
        /// `sandbox-bench-launch`, for the baseline.
        launcher: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    match &args.cmd {
        Some(Cmd::Flood { bytes }) => {
            return match flood::flood(*bytes) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            };
        }
        Some(Cmd::ProxyConnect { target }) => {
            return match pod::proxy_connect(target) {
                Ok(took) => {
                    println!("{}", took.as_nanos());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sandbox-bench proxy-connect: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandbox-bench: cannot start the tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(Cmd::PodWorker { backend, launcher }) = args.cmd.take() {
        return runtime.block_on(pod::worker(&backend, launcher));
    }
    runtime.block_on(bench(args))
}

/// The launcher baseline: as given, else `sandbox-bench-launch` next to this program.
fn launcher_bin(args: &Args) -> Option<PathBuf> {
    let found = args.launcher_bin.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| Some(p.parent()?.join("sandbox-bench-launch")))
    })?;
    found.is_file().then_some(found)
}

/// How every figure was taken, under the table.
fn notes(budget: &Budget) -> Vec<String> {
    vec![
        "Every comparison is measured interleaved: the variants run in one loop, in a \
         rotating order, in the same process, so a baseline and a sandbox see the same \
         machine. Ratios are median over median."
            .into(),
        format!(
            "Start-up: {} warm-up + {} measured runs per variant back to back ({} + {} for \
             container backends), then {} + {} ({} + {}) with {} ms of idle before each run \
             (untimed), \
             because a command that follows a quiet spell can pay costs back-to-back runs \
             hide. Bare spawn = `tokio::process::Command` of `/bin/true` with its outputs \
             piped and read. Then, for process backends, {} + {} back to back with this \
             process holding 256 MiB it has written (a large host), against the bare spawn \
             in the same state: a spawn that copies the host pays for its size.",
            budget.startup.warmup,
            budget.startup.runs,
            budget.startup_slow.warmup,
            budget.startup_slow.runs,
            budget.startup_idle.warmup,
            budget.startup_idle.runs,
            budget.startup_idle_slow.warmup,
            budget.startup_idle_slow.runs,
            budget.startup_idle.idle.as_millis(),
            budget.large_host.warmup,
            budget.large_host.runs,
        ),
        "Direct, for a process backend = the exact launch the backend prepares for the same \
         options (its program, argv, environment, working directory, the descriptors it \
         hands over, credentials), spawned by this process without the library (no plan, \
         no cgroup, no supervisor); preparing it is not timed. The ratio is what the \
         library adds on top of the backend's own launch (for a backend that wraps a tool, \
         the tool itself). A launch with nothing to do between fork and exec is spawned by \
         `posix_spawn` (vfork-like, as the library spawns); one with steps there (a root \
         host's hand-over) by a fork of this process, as `std::process` does, which the \
         bench's size makes slower; one born in namespaces (a pid namespace's init) is not \
         spawned here at all (only the library's `clone3` makes it without a copy)."
            .into(),
        "Flood: the program is this binary (`sandbox-bench flood BYTES`, 1 MiB writes) \
         copied into the workspace (into the image for a backend that runs one); the bare \
         pipe reads it in \
         64 KiB reads, as the library's capture does. Ratio = bare time / sandbox time \
         (throughput ratio)."
            .into(),
        format!(
            "A backend that runs an image: the image `{}` is built locally FROM scratch from \
             `/bin/true`, this binary and the host's curl (the egress download) with their \
             shared libraries (its registry entry's `build_from_binaries`), tagged for this \
             build tree. Its workspace is owned by uid 65534 when the bench runs as root, so \
             the backend bind-mounts it as it is and runs the command as that uid, as its \
             engine's command line with the same flags does (a root-owned workspace would \
             take the backend's idmapped staging, which that command line has no equivalent \
             of).",
            subject::image_tag()
        ),
        format!(
            "The `sandbox` command: {} + {} runs ({} + {} for container backends), \
             interleaved with a bare spawn and the bare mechanism; the figure is everything \
             one invocation costs (start of the process, the runtime, backend construction \
             with its host facts from the command's cache, the run). The bare mechanism for a \
             backend whose launch is the command itself (landlock) is `sandbox-bench-launch`, \
             a minimal launcher run as a process of its own that builds the same launch and \
             applies it in its own single-threaded process (namespaces, landlock, seccomp, \
             capabilities), then execs; for one that runs a tool (bwrap), that tool spawned \
             directly with the backend's argv. The other is shown for information.",
            budget.cli.warmup, budget.cli.runs, budget.cli_slow.warmup, budget.cli_slow.runs
        ),
        pod::NOTE.into(),
        "Lane: the strictest lane the library accepts for these options on that backend \
         (decided by the library's own checks). All runs use the library's defaults \
         otherwise: network none, 8 MiB output cap, 512-process cap."
            .into(),
    ]
}

/// Add a measurement's rows, or a FAILED row; true when it failed.
fn record(rows: &mut Vec<Row>, backend: &str, what: &str, r: Result<Vec<Row>, BenchError>) -> bool {
    match r {
        Ok(mut ok) => {
            rows.append(&mut ok);
            false
        }
        Err(e) => {
            eprintln!("sandbox-bench: {backend}: {what}: {e}");
            rows.push(Row::failed(backend, what, &e.to_string()));
            true
        }
    }
}

async fn bench(args: Args) -> ExitCode {
    let budget = if args.quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    let host = match Host::new() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("sandbox-bench: cannot set up the workspace under TMPDIR: {e}");
            return ExitCode::from(2);
        }
    };
    let explicit = !args.backends.is_empty();
    let names: Vec<String> = if explicit {
        args.backends.clone()
    } else {
        subject::all().into_iter().map(String::from).collect()
    };
    let mut report = Report {
        machine: Machine::detect(),
        quick: budget.quick,
        rows: Vec::new(),
        notes: notes(&budget),
        load_after: machine::Load::default(),
    };
    let mut failed = false;
    for name in &names {
        eprintln!("sandbox-bench: {name}: preflight");
        let s = match Subject::open(name, &host).await {
            Ok(s) => s,
            Err(reason) => {
                eprintln!("sandbox-bench: {name}: not measured: {reason}");
                report
                    .rows
                    .push(Row::not_measured(name, "all measurements", &reason));
                failed |= explicit;
                continue;
            }
        };
        if let Some(subject::Direct::Command(run)) = &s.direct {
            let note = format!("Direct, for {name} = {}", run.note);
            if !report.notes.contains(&note) {
                report.notes.push(note);
            }
        }
        report.rows.push(Row {
            backend: name.clone(),
            what: "the first preflight in a process (one-time host surveys included; not in \
                   the per-run figures below, but paid by every `sandbox` command)"
                .into(),
            median: stats::fmt_duration(s.preflight_time),
            p95: "— (one run)".into(),
            ratio: "—".into(),
            baseline: "—".into(),
            target: "—".into(),
            verdict: table::Verdict::NoTarget,
        });
        let wanted = |w: Only| args.only.is_empty() || args.only.contains(&w);
        if wanted(Only::Startup) {
            eprintln!("sandbox-bench: {name}: start-up (lane {})", s.lane);
            let r = startup::measure(&s, &host.true_program, &budget).await;
            failed |= record(&mut report.rows, name, "start-up", r);
        }
        if wanted(Only::Flood) {
            eprintln!("sandbox-bench: {name}: flood");
            let r = flood::measure(&s, &host, &budget).await.map(|r| vec![r]);
            failed |= record(&mut report.rows, name, "stdout throughput", r);
        }
        if wanted(Only::Concurrency) {
            eprintln!("sandbox-bench: {name}: concurrency");
            let r = concurrency::measure(&s, &budget).await.map(|r| vec![r]);
            failed |= record(&mut report.rows, name, "concurrency", r);
        }
        if wanted(Only::Layer) {
            eprintln!("sandbox-bench: {name}: the copy-on-write layer over 1 GiB");
            let r = layer::measure(&s, &budget).await;
            failed |= record(&mut report.rows, name, "the copy-on-write layer", r);
        }
        if wanted(Only::Egress) {
            eprintln!("sandbox-bench: {name}: egress through the proxy");
            let r = egress::measure(&s, &budget).await;
            failed |= record(&mut report.rows, name, "egress through the proxy", r);
        }
        // Where no namespace can be made: for a backend that launches a host process (one
        // that runs an image has no engine in a pod).
        if wanted(Only::Pod) && matches!(s.direct, Some(subject::Direct::Launch { .. })) {
            eprintln!("sandbox-bench: {name}: without namespaces (the pod case)");
            let launcher = launcher_bin(&args);
            let r = pod::measure(&s, launcher.as_deref(), &budget).await;
            failed |= record(&mut report.rows, name, "without namespaces", r);
        }
        if !wanted(Only::Cli) {
            continue;
        }
        let what = "start-up through the `sandbox` command";
        match &args.sandbox_bin {
            Some(bin) if bin.is_file() => {
                eprintln!("sandbox-bench: {name}: the `sandbox` command");
                let launcher = launcher_bin(&args);
                let r = cli::measure(&s, bin, launcher.as_deref(), &host, &budget).await;
                failed |= record(&mut report.rows, name, what, r);
            }
            Some(bin) => report.rows.push(Row::not_measured(
                name,
                what,
                &format!(
                    "{} does not exist (build the `sandbox` package)",
                    bin.display()
                ),
            )),
            None => report.rows.push(Row::not_measured(
                name,
                what,
                "no `sandbox` command given (--sandbox-bin PATH; `cargo xtask bench` passes it)",
            )),
        }
    }
    if args.only.is_empty() || args.only.contains(&Only::Egress) {
        eprintln!("sandbox-bench: the egress proxy's connection set-up");
        let r = egress::setup(&budget).await.map(|r| vec![r]);
        failed |= record(&mut report.rows, "egress proxy", "connection set-up", r);
    }
    if args.only.is_empty()
        || args.only.contains(&Only::Egress)
        || args.only.contains(&Only::Terminated)
    {
        eprintln!("sandbox-bench: kept-alive requests on terminated TLS against a tunnel");
        let r = terminated::keepalive(&budget).await.map(|r| vec![r]);
        failed |= record(
            &mut report.rows,
            "egress proxy",
            "kept-alive requests on terminated TLS",
            r,
        );
    }
    report.load_after = machine::Load::now();
    print!("{}", report.markdown());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
