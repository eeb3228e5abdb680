//! The backend's own errors, each converted to the contract's error with its remedy.

use std::path::PathBuf;

use sandbox_core::{Lane, SandboxError};

use crate::NAME;

/// Why this backend refuses or cannot run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BwrapError {
    /// A caller's path the sandbox cannot grant.
    #[error("{path} cannot be granted: {why}")]
    Path {
        /// The option it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
        /// Why not.
        why: &'static str,
    },
    /// Full network as host root, where abstract unix sockets cannot be confined.
    #[error(
        "the full network for a command running as host root: it would share the host's \
         abstract unix sockets, where root services accept any uid-0 peer, and this kernel \
         cannot confine them (landlock ABI 6, Linux 6.12, is needed); run the host as an \
         ordinary user, use network `loopback` or `none`, or the `trusted` lane"
    )]
    RootFullNetwork {
        /// The lane that refuses it.
        lane: Lane,
    },
    /// The mounts would take more options than bwrap reads (a large named tree whose
    /// root-only entries are each hidden by a mount of their own).
    #[error(
        "the sandbox would need {options} bwrap options ({hidden} of its mounts hide root-only \
         entries), more than bwrap reads ({max}); grant a smaller directory, or run the host \
         as an ordinary user (then nothing needs hiding)"
    )]
    TooManyMounts {
        /// The most options bwrap reads.
        max: usize,
        /// The options the plan needs.
        options: usize,
        /// How many root-only entries are hidden.
        hidden: usize,
    },
    /// bwrap is not installed or not runnable.
    #[error("bwrap was not found ({0})")]
    Missing(String),
    /// The installed bwrap lacks options this backend needs.
    #[error("the installed bwrap ({version}) lacks {missing}")]
    TooOld {
        /// Its version.
        version: String,
        /// The options it lacks.
        missing: String,
    },
}

impl From<BwrapError> for SandboxError {
    fn from(e: BwrapError) -> Self {
        let text = e.to_string();
        match e {
            BwrapError::Path { field, .. } => SandboxError::invalid(field, text),
            BwrapError::TooManyMounts { .. } => SandboxError::NotSupported {
                backend: NAME,
                feature: "a read or write grant this large on a root host".into(),
                remedy: text,
            },
            BwrapError::RootFullNetwork { lane } => SandboxError::PolicyRefused {
                lane: lane.to_string(),
                backend: NAME,
                reason: text,
            },
            BwrapError::Missing(_) => SandboxError::unavailable(
                NAME,
                text,
                "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, \
                 `pacman -S bubblewrap`) and make sure `bwrap` is on PATH",
            ),
            BwrapError::TooOld { .. } => SandboxError::unavailable(
                NAME,
                text,
                "install bubblewrap 0.5.0 or later (0.8.0 recommended)",
            ),
        }
    }
}
