//! Confine an untrusted command (an AI agent's shell command, a plugin, a CI step) with the
//! strongest sandbox this host offers, chosen at run time from the backends compiled in.
//!
//! This is the crate a downstream program depends on and the `sandbox` command a person
//! types. It re-exports the contract of [`sandbox_core`] (the [`Sandbox`] trait,
//! [`SandboxOpts`], [`SandboxOutcome`], [`Capability`], lanes, errors) and adds:
//!
//! - one cargo feature per backend, of the backend's name: `none`, `bwrap`, `landlock`,
//!   `docker` (all on by default); a build with one of them pulls in only that backend's
//!   dependencies;
//! - [`select`]: a backend by name, or `auto`, the strongest one that enforces what the
//!   options ask on this host ([`select::preference`] documents the order);
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
//! ```no_run
//! use sandbox::select::{select, BackendConfig, Choice};
//! use sandbox::{SandboxExt, SandboxOpts};
//!
//! # async fn demo() -> Result<(), sandbox::SandboxError> {
//! let opts = SandboxOpts::new("/home/me/project", ["cargo", "test"]);
//! let chosen = select(&Choice::auto(), &opts, &BackendConfig::default()).await?;
//! let outcome = chosen.backend.sandbox().execute(opts).await?;
//! println!("{:?} via {}", outcome.status, outcome.backend);
//! # Ok(()) }
//! ```
//!
//! # Dependencies
//!
//! `sandbox-core` (the contract) and `serde` (the doctor report as JSON) always; each
//! backend crate behind its feature; behind `cli`: `clap` and `clap_complete` (the command
//! line and its completions), `toml` (policy files), `serde_json` (`--json`), `tokio` (the
//! runtime and signal handling), `thiserror` (the command's own errors).

pub mod doctor;
pub mod select;

pub use sandbox_core::*;

#[cfg(feature = "bwrap")]
pub use sandbox_bwrap as bwrap;
#[cfg(feature = "docker")]
pub use sandbox_docker as docker;
#[cfg(feature = "landlock")]
pub use sandbox_landlock as landlock;
#[cfg(feature = "none")]
pub use sandbox_none as none;
