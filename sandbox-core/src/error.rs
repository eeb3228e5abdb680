//! The one error type of the contract.
//!
//! Every variant says what went wrong and, where a person can act, what to do about it: a
//! sandbox that fails is only useful if the operator can tell "bwrap is missing" from "your
//! cwd is outside the workspace" without reading our source.

use std::path::PathBuf;

/// Why a sandbox could not do what was asked.
///
/// Grouped by cause: the caller's input ([`InvalidConfig`](Self::InvalidConfig)), the host
/// ([`Unavailable`](Self::Unavailable)), the policy ([`PolicyRefused`](Self::PolicyRefused),
/// [`NotSupported`](Self::NotSupported)), the order of calls ([`State`](Self::State)) and
/// the operating system ([`Spawn`](Self::Spawn), [`Io`](Self::Io)). Nothing has been started
/// when any variant but `Io` is returned from `run`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The options are wrong; nothing was started.
    #[error("invalid sandbox options: {field}: {reason}")]
    InvalidConfig {
        /// The option at fault (`argv`, `workspace`, `cwd`, ...).
        field: &'static str,
        /// What is wrong with it, in a sentence.
        reason: String,
    },

    /// A read or write grant names something that would let the command undo its own
    /// confinement (a cgroup, sysfs, procfs or device filesystem, or a container engine's
    /// socket), however the path was spelled; nothing was started.
    #[error("{field}: {path} is refused: {what}; remedy: {remedy}")]
    ControlGrant {
        /// The option at fault (`read_only_paths`, `writable_paths`).
        field: &'static str,
        /// The grant, resolved.
        path: PathBuf,
        /// What it is or holds (`it is on cgroupfs (v2)`, `it holds a proc mount at /x/proc`).
        what: String,
        /// What to do instead.
        remedy: String,
    },

    /// The backend cannot work on this host at all.
    #[error("sandbox backend `{backend}` is unavailable: {reason}; remedy: {remedy}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// What is missing or failing on this host.
        reason: String,
        /// What a person can do about it.
        remedy: String,
    },

    /// The lane does not accept what the backend would enforce for this request.
    #[error("policy refused on lane `{lane}` by backend `{backend}`: {reason}")]
    PolicyRefused {
        /// The lane the caller chose.
        lane: String,
        /// The backend that was asked.
        backend: &'static str,
        /// The request that cannot be enforced as asked, and how the backend falls short.
        reason: String,
    },

    /// The backend cannot enforce a requested feature on any lane.
    #[error("backend `{backend}` cannot enforce {feature}; remedy: {remedy}")]
    NotSupported {
        /// The backend's name.
        backend: &'static str,
        /// The feature asked for.
        feature: String,
        /// A backend or option that can do it.
        remedy: String,
    },

    /// A verb was called out of order (wait before run, run twice).
    #[error("sandbox state error: cannot {verb} while the sandbox is {state}")]
    State {
        /// The verb called.
        verb: &'static str,
        /// The state the sandbox was in.
        state: &'static str,
    },

    /// The program could not be started; nothing is left running.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program (or launcher) that failed to start.
        program: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },

    /// The host's temp dir cannot hold what the run needs there (a layer, a snapshot, a
    /// bundle): unwritable, read-only, missing or full. Nothing was started.
    #[error(
        "cannot create the {what} directory in the host's temp dir {} (TMPDIR): {reason}: \
         {source}; remedy: point TMPDIR at a writable directory with free space",
        .dir.display()
    )]
    TempDir {
        /// The temp dir (`TMPDIR`, else `/tmp`).
        dir: PathBuf,
        /// What the directory was for (`layer`, `snapshot`, ...).
        what: String,
        /// The cause in words (`it is not writable`, `its disk is full`).
        reason: &'static str,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },

    /// An operating-system call failed while the sandbox was set up, ran or was torn down.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// Shorthand for [`SandboxError::InvalidConfig`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            field,
            reason: reason.into(),
        }
    }

    /// Shorthand for [`SandboxError::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Shorthand for [`SandboxError::Unavailable`].
    pub fn unavailable(
        backend: &'static str,
        reason: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self::Unavailable {
            backend,
            reason: reason.into(),
            remedy: remedy.into(),
        }
    }

    /// True when the error means "this program could not be found" (exit status 127 in the
    /// command-line tool, as shells report it).
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Spawn { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Self::InvalidConfig { field, reason } => {
                *field == "argv" && reason.contains("not found")
            }
            _ => false,
        }
    }

    /// True when the program exists but cannot be executed (exit status 126).
    pub fn is_not_executable(&self) -> bool {
        match self {
            Self::Spawn { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
            Self::InvalidConfig { field, reason } => {
                *field == "argv" && reason.contains("not executable")
            }
            _ => false,
        }
    }
}

/// The contract's result type.
pub type Result<T, E = SandboxError> = std::result::Result<T, E>;
