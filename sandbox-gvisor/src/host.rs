//! What the backend learns about the host once, when it is constructed: where runsc is,
//! its version, whether the host is root, and how the system directories are laid out
//! (`sandbox_core::layout`).

use std::path::PathBuf;
use std::process::Command;

use sandbox_core::layout::SystemEntry;

/// The facts, found once.
#[derive(Clone, Debug)]
pub(crate) struct HostFacts {
    /// Where runsc is, or why it was not found.
    pub runsc: Result<PathBuf, String>,
    /// The first line of `runsc --version`.
    pub version: Option<String>,
    /// The host process runs as root: runsc runs as root and the command as an
    /// unprivileged uid; otherwise runsc runs rootless as the caller.
    pub is_root: bool,
    /// Each of [`sandbox_core::layout::SYSTEM_DIRS`], in that order.
    pub system: Vec<(PathBuf, SystemEntry)>,
}

impl HostFacts {
    /// Ask the host.
    pub(crate) fn detect() -> Self {
        let runsc = which::which("runsc")
            .map_err(|e| e.to_string())
            .and_then(|p| p.canonicalize().map_err(|e| e.to_string()));
        let version = runsc.as_ref().ok().and_then(|p| {
            let out = Command::new(p).arg("--version").output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            text.lines().next().map(|l| l.trim().to_owned())
        });
        let system = sandbox_core::layout::system_layout();
        Self {
            runsc,
            version,
            is_root: nix::unistd::geteuid().is_root(),
            system,
        }
    }
}
