//! Confine an untrusted command (an AI agent's shell command, a plugin, a CI step) with the
//! strongest sandbox this host offers, chosen at run time from the backends compiled in.
//!
//! This is the crate a downstream program depends on and the `sandbox` command a person
//! types. It re-exports the contract of [`sandbox_core`] (the [`Sandbox`] trait,
//! [`SandboxOpts`], [`SandboxOutcome`], [`Capability`], lanes, errors) and adds:
//!
//! - one cargo feature per backend, of the backend's name: `none`, `bwrap`, `landlock`,
//!   `docker` (all on by default, and all in the feature `backends`); a build with one of
//!   them pulls in only that backend's dependencies, and each backend crate is re-exported
//!   as `sandbox::registry::NAME`;
//! - [`select()`] (a backend for a lane) and the [`mod@select`] module (for one
//!   command's exact options): a backend by name, or `auto`, the strongest one that
//!   enforces the request on this host ([`select::preference`] documents the order);
//! - [`registry`]: the one list of backends, each behind its feature; nothing else names
//!   one;
//! - [`doctor`]: for every compiled-in backend, whether it works here, its version or
//!   kernel ABI, what it enforces and, where it does not work, the remedy;
//! - behind the `cli` feature (on by default), the `sandbox` command: `sandbox run`,
//!   `sandbox doctor`, `sandbox completions`.
//!
//! # Guarantees
//!
//! Selection never weakens a request. `auto` only picks a backend whose capability passes
//! the lane for exactly the options given and whose preflight passed here; it never picks
//! `none` unless the caller allowed it by name ([`select::Choice::Auto`]`{ allow_none }`). A
//! backend named but not compiled in is an error that names the cargo feature to enable;
//! it is never replaced by another.
//!
//! # Example
//!
//! A host that picks once, for a lane, then runs many commands:
//!
//! ```no_run
//! use sandbox::{Lane, SandboxExt, SandboxOpts};
//!
//! # async fn demo() -> Result<(), sandbox::SandboxError> {
//! let backend = sandbox::select("auto", &sandbox::Config::default(), Lane::Fast).await?;
//! let mut opts = SandboxOpts::new("/home/me/project", ["cargo", "check"]);
//! opts.lane = Lane::Fast;
//! let outcome = backend.sandbox().execute(opts).await?;
//! println!("{:?} via {}", outcome.status, outcome.backend);
//! # Ok(()) }
//! ```
//!
//! Choosing for one command's exact options (what `sandbox run` does):
//!
//! ```no_run
//! use sandbox::select::{select, Choice, Config};
//! use sandbox::{NetworkMode, SandboxExt, SandboxOpts};
//!
//! # async fn demo() -> Result<(), sandbox::SandboxError> {
//! let mut opts = SandboxOpts::new("/home/me/project", ["cargo", "test"]);
//! opts.network = NetworkMode::Loopback;
//! let chosen = select(&Choice::auto(), &opts, &Config::default()).await?;
//! for p in &chosen.passed_over {
//!     eprintln!("not {}: {}", p.backend, p.reason);
//! }
//! let outcome = chosen.backend.sandbox().execute(opts).await?;
//! # Ok(()) }
//! ```
//!
//! # Testing
//!
//! `tests/cli.rs` runs the built `sandbox` binary as a person or a script would, and judges
//! from outside: exit statuses (the program's code, 128+N, 124, 125, 126, 127, 141), option
//! errors refused before anything runs (a marker file the program would create stays
//! absent), the `--json` object, output streamed while the program still runs, the policy
//! file, `doctor` and completions. The cases that run a program run once per compiled-in
//! backend; a backend whose preflight fails here is skipped with its reason printed,
//! unless `SANDBOX_TEST_REQUIRE` names it (`all`, or a comma-separated list), as CI does.
//! The cases of a backend that runs an image use `SANDBOX_TEST_IMAGE`, or an image
//! imported from the host's static busybox. `tests/feature_isolation.rs` checks with
//! `cargo tree` that each backend feature pulls in only its own dependencies and the
//! library alone no command line.
//!
//! # Dependencies
//!
//! `sandbox-core` (the contract) and `serde` (the doctor report as JSON) always; each
//! backend crate behind its feature; behind `cli`: `clap` and `clap_complete` (the command
//! line and its completions), `toml` (policy files), `serde_json` (`--json`), `tokio` (the
//! runtime and signal handling), `thiserror` (the command's own errors).

pub mod doctor;
pub mod registry;
pub mod select;

pub use sandbox_core::*;
pub use select::Config;

use std::sync::Arc;

/// The backend called `name` (or `auto`: the strongest that works here, never `none`) for
/// the commands a host will run on `lane`.
///
/// The shortcut for a host that picks once and runs many commands: the backend must run a
/// default request on `lane` (network `none`, no extra paths, the default limits) and pass
/// its preflight. Each command's own options are still checked by `run`, which refuses
/// what the backend cannot enforce. To choose for one command's exact options, or to see
/// what `auto` passed over and why, use [`select::select`].
pub async fn select(name: &str, config: &Config, lane: Lane) -> Result<Arc<dyn Backend>> {
    select::for_lane(&select::Choice::parse(name), lane, config)
        .await
        .map(|s| s.backend)
}
