//! The contract of the sandbox workspace, and the machinery every process-based backend
//! shares.
//!
//! A host program (an AI coding agent, a plugin host, a CI runner) holds a
//! [`Sandbox`] chosen at run time and runs one untrusted command in it: [`Sandbox::run`],
//! then [`Sandbox::wait`] for a [`SandboxOutcome`], with [`Sandbox::kill`] from any task.
//!
//! # Guarantees
//!
//! - **Fail closed.** Everything [`SandboxOpts`] asks for is a hard requirement. A backend
//!   that cannot enforce it on the chosen [`Lane`] refuses before anything runs, naming
//!   what is missing; it never falls back to weaker confinement on its own. What was
//!   enforced, and how, is in every outcome's [`EffectivePolicy`].
//! - **Bad input is refused before anything runs** ([`Plan::new`]).
//! - **Nothing outlives `wait` or `kill`**: no process (including ones that double-fork and
//!   call `setsid`), cgroup, temp dir or descriptor. A host killed before it could clean
//!   up leaves its cgroups and temp dirs named after it; the next start removes those of
//!   dead owners ([`owner`]).
//! - **Safe defaults**: no network, a scrubbed environment, an output cap, a process cap,
//!   a memory limit for the whole tree ([`DEFAULT_MEMORY_BYTES`]),
//!   the `strict` lane.
//!
//! # Shape
//!
//! - [`Sandbox`]: the trait; [`SandboxExt`]: conveniences on it.
//! - [`SandboxOpts`] → [`Plan`]: options, checked and resolved.
//! - [`Capability`]: what a backend can enforce, as data; [`policy`]: lanes and network
//!   modes, pure decisions over capabilities.
//! - [`process`]: spawn, limits, cgroups, output capture, timeouts, tree kill; a backend
//!   that runs a process implements [`process::Launcher`] and gets a whole [`Sandbox`] from
//!   [`process::ProcessSandbox`].
//! - [`run`]: the one-run state machine, shared with backends that are not processes.
//! - [`owner`]: who made a host object, and the removal of what dead makers left.
//! - [`changes`]: the copy-on-write layer over the workspace and the change set a host
//!   reviews, applies or discards.
//! - [`syscalls`]: the one table of denied system calls, rendered to the BPF program
//!   (`seccomp`, behind the feature of that name) and to container profiles.
//! - [`registry`]: what each backend crate says about itself ([`registry::BackendInfo`]),
//!   the data the facade's one list of backends is made of.
//! - [`facts`]: what backends learned about the host by probing it, kept per process and
//!   in a caller's store, so that a new backend value need not probe again.
//!
//! # Dependencies
//!
//! `tokio` (process, timers, channels), `async-trait` (an object-safe async trait),
//! `thiserror` (the typed error), `serde` (outcomes and policies as JSON), `nix` and `libc`
//! (signals, credentials, the raw calls between fork and exec; with nix's `dir` feature,
//! the descriptor-relative walks over the change layer), `rustix` (the spawn's pidfd verbs,
//! pipes and polls, and raw credential calls that skip glibc's per-thread broadcast),
//! `which` (resolving `argv[0]` as a
//! shell would), `tempfile` (snapshot copies, the layer's directory), `tracing` (diagnostics),
//! and, behind the `seccomp` feature, `seccompiler` (the shared system-call filter).

pub mod capability;
pub mod changes;
pub mod denial;
pub mod egress;
mod error;
pub mod facts;
mod grants;
pub mod handover;
pub mod idmap;
pub mod kernel;
pub mod layout;
mod options;
mod outcome;
pub mod owner;
mod plan;
pub mod policy;
pub mod process;
pub mod registry;
pub mod run;
mod sandbox;
#[cfg(feature = "seccomp")]
pub mod seccomp;
pub mod syscalls;

pub use capability::{Capability, Enforcement};
pub use changes::{Change, ChangeKind, ChangeSet, Changes, LayerMechanism};
pub use denial::{Denial, DenialKind, DenialKinds, DenialMechanism, Denials};
pub use egress::{
    ConnectionRecord, Connections, EgressRun, FoldedConnections, ProxyProtocol, Publish,
    PublishSink, Published, Resolver, SystemResolver, MAX_CONNECTIONS, PROXY_PORT,
};
pub use error::{Result, SandboxError};
pub use grants::state_dir;
pub use options::{
    EnvPolicy, OutputSink, ResourceLimits, SandboxOpts, Stdin, StreamKind, DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_BYTES, DEFAULT_OUTPUT_LIMIT,
};
pub use outcome::{
    Captured, EffectivePolicy, Grant, LimitMechanism, LimitRecord, Logs, SandboxOutcome, Status,
    TreeKill,
};
pub use plan::{Plan, DEFAULT_PATH, MAX_HOST_PORTS};
pub use policy::{Allowlist, Decision, HostPattern, Lane, NetworkMode};
pub use sandbox::{Backend, DynSandbox, Preflight, Sandbox, SandboxExt};
