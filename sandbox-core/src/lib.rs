//! The contract of the sandbox workspace: what a host program and a backend agree on.
//!
//! A host program (an AI coding agent, a plugin host, a CI runner) holds a
//! [`Sandbox`] chosen at run time and runs one untrusted command in it: [`Sandbox::run`],
//! then [`Sandbox::wait`] for a [`SandboxOutcome`], with [`Sandbox::kill`] from any task.
//! This crate is the contract alone; the Linux machinery every process backend shares
//! (spawn, the waiter, cgroups, the change layer, seccomp, the leftover sweep) is the host
//! crate, `sandbox-host`, which depends on this one and never the other way round.
//!
//! # Guarantees
//!
//! - **Fail closed.** Everything [`SandboxOpts`] asks for is a hard requirement. A backend
//!   that cannot enforce it on the chosen [`Lane`] refuses before anything runs, naming
//!   what is missing; it never falls back to weaker confinement on its own. What was
//!   enforced, and how, is in every outcome's [`EffectivePolicy`].
//! - **Bad input is refused before anything runs** ([`Plan::new`]).
//! - **Nothing outlives `wait` or `kill`**: no process (including ones that double-fork and
//!   call `setsid`), cgroup, temp dir or descriptor.
//! - **Safe defaults**: no network, a scrubbed environment, an output cap, a process cap,
//!   a memory limit for the whole tree ([`DEFAULT_MEMORY_BYTES`]), the `strict` lane.
//!
//! # Shape
//!
//! - [`Sandbox`]: the trait; [`SandboxExt`]: conveniences on it; [`Backend`]: what makes
//!   sandboxes.
//! - [`SandboxOpts`] → [`Plan`]: options, checked and resolved.
//! - [`Capability`]: what a backend can enforce, as data; [`policy`]: lanes, network modes
//!   and the allowlist; [`admission`]: what each lane accepts from a capability.
//! - [`run`]: the one-run state machine every backend's sandbox is made of
//!   ([`run::RunSandbox`] over a [`run::Starter`]); [`output`]: the capture it fills.
//! - [`changes`]: the change set a host reviews, applies or discards.
//! - [`registry`]: what each backend crate says about itself ([`registry::BackendInfo`]).
//! - [`record`]: the typed record of what was enforced, and its one rendering to text.
//! - [`egress`] and [`denial`]: the records of connections and refusals an outcome carries.
//! - [`escape()`]: text that came from the command (names, paths, diff lines), made safe
//!   to print on a terminal.
//!
//! # Dependencies
//!
//! `tokio` (the run state machine's channels, timers and tasks), `async-trait` (an
//! object-safe async trait), `thiserror` (the typed error), `serde` (outcomes and policies
//! as JSON), `which` (resolving `argv[0]` as a shell would, in [`Plan::new`]), and `rustix`
//! for the two host facts a plan is checked against before anything runs: the effective
//! uid, and the filesystem type under a granted path (`statfs`), so that no spelling of a
//! path grants a control filesystem (and the random placeholder of a secret);
//! `rustls-pki-types` for the PEM sections of an `--upstream-ca` file, read with the parser
//! rustls itself uses, so what [`Plan::new`] accepts is what the proxy reads.

pub mod admission;
pub mod capability;
pub mod changes;
pub mod credentials;
pub mod denial;
pub mod egress;
mod error;
pub mod escape;
mod grants;
pub mod options;
pub mod outcome;
pub mod output;
pub mod plan;
pub mod policy;
pub mod record;
pub mod registry;
pub mod run;
mod sandbox;
pub mod secret;

pub use admission::{check_lane, LaneRequest};
pub use capability::{Capability, DoorPlace, Enforcement};
pub use changes::{Change, ChangeKind, ChangeSet, Changes, LayerMechanism};
pub use denial::{Denial, DenialKind, DenialKinds, DenialMechanism, Denials};
pub use egress::{
    ConnectionRecord, Connections, EgressRun, FoldedConnections, ProxyProtocol, Publish,
    PublishSink, Published, RequestRecord, Resolver, SystemResolver, UpstreamProxy,
    UpstreamProxyError, MAX_CONNECTIONS, MAX_HOST_PORTS, MAX_OPEN_CONNECTIONS, PROXY_PORT,
};
pub use error::{Result, SandboxError};
pub use escape::escape;
pub use grants::{runs_dir, state_dir};
pub use options::{
    EnvPolicy, OutputSink, ResourceLimits, SandboxOpts, Stdin, StreamKind, DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_BYTES, DEFAULT_OUTPUT_LIMIT,
};
pub use outcome::{
    Captured, EffectivePolicy, Grant, LimitMechanism, LimitRecord, Logs, SandboxOutcome, Status,
    TreeKill,
};
pub use plan::{host_is_root, Plan, DEFAULT_PATH};
pub use policy::{Allowlist, Decision, HostPattern, Lane, NetworkMode};
pub use record::{Enforced, Record};
pub use sandbox::{Backend, DynSandbox, Preflight, Sandbox, SandboxExt};
pub use secret::{
    Placement, ResolvedSecret, Secret, SecretError, SecretSource, SecretSpec, UpstreamCa,
};
