//! The Linux machinery every process-based backend shares, below the contract
//! (`sandbox-core`).
//!
//! A backend crate implements the contract with what is here: a process backend writes a
//! [`process::Launcher`] (its pure `prepare` of a plan into a [`process::Launch`]) and gets a
//! whole [`Sandbox`](sandbox_core::Sandbox) from [`pipeline::ProcessSandbox`]; a backend that
//! is not a process (a container engine) uses the run state machine of the contract and the
//! pieces it needs from here (the syscall table's OCI rendering, the identity maps, the
//! sweep of dead owners' leftovers).
//!
//! # Floors
//!
//! Modules import only downward, which `cargo xtask layers` checks:
//!
//! 0. `sys` (the raw calls, the steps between fork and exec), `kernel`, `layout`: what the
//!    kernel is asked directly, and facts about it and the host's file tree.
//! 1. `fs`: the race-free walk and copy.
//! 2. `syscalls` (the one table of denied system calls and its container rendering),
//!    `idmap` (identity-mapped mounts), `owner` (who made a host object).
//! 3. `seccomp` (the table as a BPF program, behind the `seccomp` feature), `changes` (the
//!    copy-on-write layer, its scan and apply), `facts` (what backends learned about the
//!    host), `handover` (the root host's hand-over of the workspace).
//! 4. `process`: spawn, the waiter, limits, cgroups, supervision, tree kill.
//! 5. `sweep`: the removal of what dead owners left, cgroups included.
//! 6. `pipeline`: a launcher's start, stage by stage, and the sandbox it makes.
//!
//! # Guarantees
//!
//! - **Nothing outlives `wait` or `kill`**: no process (including ones that double-fork and
//!   call `setsid`), cgroup, temp dir or descriptor. A host killed before it could clean
//!   up leaves its cgroups and temp dirs named after it; the next start removes those of
//!   dead owners ([`owner`]).
//! - **Between fork and exec, only async-signal-safe calls** on data prepared before the
//!   fork ([`process::PreExec`], an `unsafe trait` whose contract says so).
//!
//! # Dependencies
//!
//! `sandbox-core` (the contract), `tokio` (process, timers, channels), `async-trait`,
//! `serde`, `nix` and `libc` (signals, credentials, the raw calls between fork and exec; with
//! nix's `dir` feature, the descriptor-relative walks over the change layer), `rustix` (the
//! spawn's pidfd verbs, pipes and polls, and raw credential calls that skip glibc's
//! per-thread broadcast), `which` (host programs), `tempfile` (snapshot copies, the layer's
//! directory), `tracing` (diagnostics), and, behind the `seccomp` feature, `seccompiler`
//! (the shared system-call filter).

pub mod changes;
pub mod container;
pub mod door;
pub mod facts;
pub mod fs;
pub mod handover;
pub mod idmap;
pub mod kernel;
pub mod layout;
pub mod owner;
pub mod pipeline;
pub mod process;
#[cfg(feature = "seccomp")]
pub mod seccomp;
pub mod sweep;
pub mod sys;
pub mod syscalls;

pub use changes::{overlay_supported, HostLayer};
pub use pipeline::{Launched, ProcessSandbox};
