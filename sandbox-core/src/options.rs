//! What the caller asks for.
//!
//! [`SandboxOpts`] is plain data with safe defaults (no network, a scrubbed environment, an
//! output cap, a process cap, the `strict` lane). It is checked by
//! [`Plan::new`](crate::Plan::new) before anything runs; a bad option is an
//! [`InvalidConfig`](crate::SandboxError::InvalidConfig) error and nothing is started.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Changes, Lane, NetworkMode, Publish, PublishSink, Resolver};

/// The default cap on each captured output stream: 8 MiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 8 << 20;

/// The default cap on the number of processes (and threads) a command may have at once, so
/// that a fork bomb stops here instead of at the host's limit.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;

/// The default memory limit for the whole command tree: 8 GiB. A run that names no limit
/// must still not be able to take the host's memory (its own, or through a tmpfs the
/// sandbox made, which backends size inside this limit). Override it with
/// [`ResourceLimits::memory_bytes`]; `None` there is "unlimited", and only said explicitly.
///
/// Where no memory cgroup can be made the limit falls back, like any memory limit, to a
/// per-process `RLIMIT_AS` (recorded as such in the effective policy); 8 GiB of address
/// space leaves room for runtimes that reserve address space up front (V8, the JVM).
pub const DEFAULT_MEMORY_BYTES: u64 = 8 << 30;

/// Resource limits for the whole command. `None` leaves a limit unset.
///
/// Where a cgroup can be created the memory and process limits bind the whole process tree
/// (and bind root); where not, they fall back to per-process rlimits. The outcome's
/// effective policy records which mechanism enforced each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// Memory, in bytes, for the whole tree; [`DEFAULT_MEMORY_BYTES`] unless set, `None`
    /// for no limit at all.
    pub memory_bytes: Option<u64>,
    /// CPU time, in seconds (per process: `RLIMIT_CPU`).
    pub cpu_seconds: Option<u64>,
    /// Processes and threads at once.
    pub max_processes: Option<u64>,
    /// Open file descriptors per process.
    pub open_files: Option<u64>,
}

impl ResourceLimits {
    /// No limits at all.
    pub fn none() -> Self {
        Self {
            memory_bytes: None,
            cpu_seconds: None,
            max_processes: None,
            open_files: None,
        }
    }
}

impl Default for ResourceLimits {
    /// The safe default: a process cap and a memory limit, nothing else.
    fn default() -> Self {
        Self {
            max_processes: Some(DEFAULT_MAX_PROCESSES),
            memory_bytes: Some(DEFAULT_MEMORY_BYTES),
            ..Self::none()
        }
    }
}

/// The command's standard input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`. The default: a sandboxed command never reads the host's terminal.
    #[default]
    Null,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
}

/// The command's environment. The command gets only what is named here, on top of a
/// minimal base (`PATH`, `HOME`, `LANG`); nothing of the host's environment leaks by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Variables set to these values (override the base).
    pub set: Vec<(String, OsString)>,
    /// Variables passed through from the host by name, when set there.
    pub pass: Vec<String>,
}

/// Which stream a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A callback that sees every chunk of output as it is produced, before any cap: how the
/// command-line tool streams a long build to the terminal. It runs on the reading task, so
/// it must not block for long.
#[derive(Clone)]
pub struct OutputSink(pub Arc<SinkFn>);

/// The callback behind an [`OutputSink`].
pub type SinkFn = dyn Fn(StreamKind, &[u8]) + Send + Sync;

impl fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OutputSink(..)")
    }
}

/// Everything a run can ask for. Build with [`SandboxOpts::new`] and set the fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SandboxOpts {
    /// The program and its arguments, passed as an argv: never joined into a shell string.
    /// Where the backend runs the host's programs, `argv[0]` is resolved on the host's
    /// `PATH` to a canonical absolute path.
    pub argv: Vec<OsString>,
    /// The one writable directory. Must exist; canonicalised.
    pub workspace: PathBuf,
    /// Paths inside the workspace that stay read-only (`.git/hooks`, `.git/config`), so an
    /// agent cannot plant code that the host runs later. Relative paths are taken against
    /// the workspace; a path outside it is an error.
    pub readonly_carveouts: Vec<PathBuf>,
    /// The working directory: inside the workspace (relative paths are taken against it).
    /// Defaults to the workspace.
    pub cwd: Option<PathBuf>,
    /// The environment, on top of the minimal base.
    pub env: EnvPolicy,
    /// More paths the command may read. Absolute, existing.
    pub read_only_paths: Vec<PathBuf>,
    /// More paths the command may write. Absolute, existing.
    pub writable_paths: Vec<PathBuf>,
    /// Toolchain homes the command may read (`~/.rustup`, `~/.cargo/bin`, `~/.nvm`):
    /// absolute, existing, read-only, with every credential path of
    /// [`crate::credentials::CREDENTIALS`] inside made unreadable (or the run refused).
    pub toolchains: Vec<PathBuf>,
    /// The network mode; `none` by default.
    pub network: NetworkMode,
    /// The trust tier; `strict` by default.
    pub lane: Lane,
    /// Wall-clock limit; the whole process tree is killed when it fires.
    pub timeout: Option<Duration>,
    /// Cap on each captured stream, in bytes. Over the cap the beginning and the end are
    /// kept (the last lines of a failing build are the ones that matter).
    pub output_limit: usize,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// Standard input.
    pub stdin: Stdin,
    /// Files (relative to the workspace) read into the outcome after the command ends.
    pub capture_files: Vec<PathBuf>,
    /// Run against a throwaway copy of the workspace: the original is never touched. The
    /// same as `changes: Changes::Discard`.
    pub snapshot: bool,
    /// What happens to the command's writes to the workspace: straight in (the default),
    /// into a layer that is thrown away, or into a layer whose change set the outcome
    /// carries for the host to apply or discard (see [`crate::changes`]).
    pub changes: Changes,
    /// Sees output as it is produced (optional).
    pub output_sink: Option<OutputSink>,
    /// With network mode `proxy`: the hosts the command may reach, as patterns
    /// (`crates.io`, `*.githubusercontent.com`, `example.com:8443`, `10.0.0.0/8`; see
    /// [`policy::Allowlist`](crate::policy::Allowlist)). Required and non-empty with
    /// `proxy`, refused with any other mode.
    pub allow_hosts: Vec<String>,
    /// With network mode `proxy`: how the proxy resolves allowed names. `None` is the
    /// host's resolver. For tests (a table of names to loopback addresses) and for hosts
    /// with their own resolver; never reachable from inside the sandbox.
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Host ports by number: the command's `127.0.0.1:PORT` reaches the host's
    /// `127.0.0.1:PORT` (a database or an API the host runs for the agent), and nothing
    /// else of the host's. With network `loopback` or `proxy` only.
    pub host_ports: Vec<u16>,
    /// Ports the command serves on its own `127.0.0.1`, published on the host's
    /// `127.0.0.1` (`--publish PORT[:HOSTPORT]`): the dev server an agent starts, reached by
    /// the host, without giving the command any way out. With network `loopback` or
    /// `proxy` only; a named host port already in use is refused before anything runs.
    pub publish: Vec<Publish>,
    /// Told the host address of each published port once it is bound, before the command
    /// starts (the outcome's policy says it again).
    pub on_published: Option<PublishSink>,
    /// Record what was refused in the outcome's denials, where the backend can
    /// ([`crate::Capability::reports_denials`]). On by default; off, a backend uses its
    /// plain mechanism (the same refusals, unrecorded), which the bench compares against.
    pub report_denials: bool,
    /// Secrets the command uses without holding them (`--secret NAME@HOST`): the command's
    /// `NAME` is a placeholder made for the run, and the proxy puts the value into requests
    /// to the secret's hosts only (see [`crate::secret`]). Needs network mode `proxy`; a
    /// secret's hosts are allowed without naming them in `allow_hosts`.
    pub secrets: Vec<crate::SecretSpec>,
    /// With network mode `proxy`: files of PEM certificates of authorities the proxy also
    /// trusts when it verifies the real server behind a host whose TLS it terminates
    /// (`--upstream-ca`: a corporate TLS inspection's, a test's). With secrets they join the
    /// run's certificate bundle too. Read and checked before anything runs.
    pub upstream_cas: Vec<PathBuf>,
    /// With network mode `proxy`: the caller's own HTTP proxy that every connection the
    /// egress proxy makes goes through (`--upstream-proxy http://HOST:PORT`, see
    /// [`UpstreamProxy`](crate::UpstreamProxy)): for a host whose only way out is a
    /// corporate proxy. The allowlist is decided first; the upstream proxy resolves the
    /// names. Checked before anything runs; credentials in the URL are refused.
    pub upstream_proxy: Option<String>,
    /// Request rules (`--allow-request 'GET,HEAD https://api.github.com/repos/o/r/**'`,
    /// see [`crate::policy::RequestRule`]): on a host that has rules, only requests that
    /// match one pass, judged on TLS the proxy terminates. Needs network mode `proxy`; a
    /// rule's host is allowed without naming it in `allow_hosts`.
    pub allow_requests: Vec<String>,
}

impl SandboxOpts {
    /// Options with the safe defaults for running `argv` in `workspace`.
    pub fn new<I, S>(workspace: impl Into<PathBuf>, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            workspace: workspace.into(),
            readonly_carveouts: Vec::new(),
            cwd: None,
            env: EnvPolicy::default(),
            read_only_paths: Vec::new(),
            writable_paths: Vec::new(),
            toolchains: Vec::new(),
            network: NetworkMode::None,
            lane: Lane::Strict,
            timeout: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            limits: ResourceLimits::default(),
            stdin: Stdin::Null,
            capture_files: Vec::new(),
            snapshot: false,
            changes: Changes::Direct,
            output_sink: None,
            allow_hosts: Vec::new(),
            resolver: None,
            host_ports: Vec::new(),
            publish: Vec::new(),
            on_published: None,
            report_denials: true,
            secrets: Vec::new(),
            upstream_cas: Vec::new(),
            upstream_proxy: None,
            allow_requests: Vec::new(),
        }
    }
}
