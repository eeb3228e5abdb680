//! The `sandbox` command: `sandbox run`, `sandbox doctor`, `sandbox image`, `sandbox mcp`,
//! `sandbox container-profile`, `sandbox completions`.
//!
//! Every error of `sandbox` itself, including a flag it does not know, exits 125 with the
//! reason on stderr before anything runs, so a caller can always tell the program's own
//! status from the sandbox's (`sandbox run --help` lists the statuses).

mod args;
mod changes;
mod config;
mod error;
mod git;
mod image;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "host")]
mod profile;
#[cfg(test)]
mod props;
mod prove;
mod run;
mod startup;
mod stream;

use clap::{CommandFactory, Parser};

use sandbox::select::Config;

use crate::args::{Cli, Command, DoctorArgs};
use crate::error::SANDBOX_FAILED;

fn main() {
    // The conformance probe, for `doctor --prove`: hidden, and before clap so that the
    // probe's own arguments are never parsed as ours.
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == prove::PROBE_SUBCOMMAND) {
        argv.remove(1);
        sandbox_conformance::probe::main(argv);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; every real error is ours: 125.
            let code = if e.use_stderr() { SANDBOX_FAILED } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = match cli.command {
        #[cfg(feature = "host")]
        Command::ContainerProfile(args) => profile::container_profile(&args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "sandbox",
                &mut std::io::stdout(),
            );
            0
        }
        // One command: its pumps, its supervisor and its signals take turns on one thread
        // (each waits on the kernel nearly all the time), and the process starts no
        // worker threads it would not use. Blocking work still goes to tokio's blocking
        // threads.
        Command::Run(args) => with_runtime(Flavor::OneThread, run::run(*args)),
        Command::Doctor(args) => with_runtime(Flavor::Workers, doctor(args)),
        Command::Image(args) => with_runtime(Flavor::Workers, image::image(args)),
        // Calls run concurrently, each with its own pumps.
        #[cfg(feature = "mcp")]
        Command::Mcp(args) => with_runtime(Flavor::Workers, mcp::serve(*args)),
    };
    std::process::exit(code);
}

/// Which tokio runtime a subcommand runs on.
#[derive(Clone, Copy, Debug)]
enum Flavor {
    /// `current_thread`: cheaper to start (no worker threads, no cross-thread wake-ups);
    /// `bench/PROFILE.md` §6 has the figures.
    OneThread,
    /// `multi_thread`, a worker per core.
    Workers,
}

fn with_runtime(flavor: Flavor, fut: impl std::future::Future<Output = i32>) -> i32 {
    let mut builder = match flavor {
        Flavor::OneThread => tokio::runtime::Builder::new_current_thread(),
        Flavor::Workers => tokio::runtime::Builder::new_multi_thread(),
    };
    match builder.enable_all().build() {
        Ok(rt) => {
            let code = rt.block_on(fut);
            // Not a blocking wait: `sandbox mcp` may still have a read of stdin parked on
            // a blocking thread, and everything that matters has been awaited.
            rt.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!(
                "sandbox: could not start the async runtime: {e}; remedy: check the host's \
                 limits on threads and open files"
            );
            SANDBOX_FAILED
        }
    }
}

async fn doctor(args: DoctorArgs) -> i32 {
    if args.prove {
        return prove::prove(args).await;
    }
    let mut config = Config::default();
    config.image = args.image;
    let report = sandbox::doctor::doctor(&config).await;
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("sandbox: could not write the report as JSON: {e}");
                return SANDBOX_FAILED;
            }
        }
    } else {
        print!("{report}");
    }
    if report.can_confine() {
        0
    } else {
        1
    }
}
