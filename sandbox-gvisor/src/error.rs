//! The backend's own errors, each converted to the contract's error with its remedy.

use std::path::PathBuf;

use sandbox_core::SandboxError;

use crate::NAME;

/// How to install runsc, for every error that needs it.
pub(crate) const INSTALL: &str = "install gVisor's runsc (`apt-get install runsc` on Debian \
     and Ubuntu, or the release binary from gvisor.dev) and make sure `runsc` is on PATH";

/// Why this backend refuses or cannot run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GvisorError {
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
    /// A value the OCI spec (JSON, UTF-8) cannot carry.
    #[error("{what} is not valid UTF-8, which the runtime's spec (JSON) cannot carry: {shown}")]
    NotUtf8 {
        /// The option it came from.
        field: &'static str,
        /// Which value.
        what: &'static str,
        /// It, lossily.
        shown: String,
    },
    /// `argv[0]` reaches the program through a link the sandbox does not show.
    #[error(
        "{named} leads to the program through the link {link}, which the sandbox does not \
         show (gVisor looks the program up by its name inside); name it by its target, \
         {program}, or grant the link's directory read-only"
    )]
    ProgramLink {
        /// The path the name resolves to.
        named: PathBuf,
        /// The link not shown.
        link: PathBuf,
        /// The program the host resolved.
        program: PathBuf,
    },
    /// `argv[0]` leads inside to another file than on the host (`..` after a link, or a
    /// link changed meanwhile).
    #[error(
        "{named} leads inside the sandbox to {inside}, not to {program} as on the host; \
         name the program by its target, {program}"
    )]
    ProgramElsewhere {
        /// The path the name resolves to.
        named: PathBuf,
        /// Where it leads inside.
        inside: PathBuf,
        /// The program the host resolved.
        program: PathBuf,
    },
    /// runsc is not installed.
    #[error("runsc was not found ({0})")]
    Missing(String),
    /// A root host could not hand a tree to the command's uid.
    #[error(
        "{path} belongs to uid {owner}, and the command (uid {uid}) gets it through an \
         idmapped mount, which failed: {source}"
    )]
    Handover {
        /// The option it came from.
        field: &'static str,
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The command's uid.
        uid: u32,
        /// Why.
        source: std::io::Error,
    },
}

impl From<GvisorError> for SandboxError {
    fn from(e: GvisorError) -> Self {
        let text = e.to_string();
        match e {
            GvisorError::Path { field, .. } | GvisorError::NotUtf8 { field, .. } => {
                SandboxError::invalid(field, text)
            }
            GvisorError::ProgramLink { .. } | GvisorError::ProgramElsewhere { .. } => {
                SandboxError::invalid("argv", text)
            }
            GvisorError::Missing(_) => SandboxError::unavailable(NAME, text, INSTALL),
            GvisorError::Handover { field, .. } => SandboxError::NotSupported {
                backend: NAME,
                feature: format!("{field}: {text}"),
                remedy: "use a kernel and filesystem with idmapped mounts (Linux 5.12+), give \
                         the tree to an ordinary user (the command then runs as that user), \
                         or run the host as the tree's owner"
                    .into(),
            },
        }
    }
}
