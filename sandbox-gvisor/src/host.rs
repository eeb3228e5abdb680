//! What the backend learns about the host once, when it is constructed: where runsc is,
//! its version, whether the host is root, and how the system directories are laid out
//! (`sandbox_host::layout`).
//!
//! runsc's version is the one answer that costs a process (`runsc --version`, about as
//! long as a bwrap start): it is recorded (`sandbox_host::facts`) under the identity of
//! the runsc binary it was read from, so the `sandbox` command starts runsc once per
//! command, for the command. It only names the runtime in the notes and the preflight: a
//! stale or forged record cannot change what a run enforces.

use std::path::{Path, PathBuf};
use std::process::Command;

use sandbox_core::registry::BackendConfig;
use sandbox_host::facts::HostRecord;
use sandbox_host::layout::SystemEntry;

/// The name of the one recorded fact: the first line of `runsc --version`.
const VERSION: &str = "version";

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
    /// Each of [`sandbox_host::layout::SYSTEM_DIRS`], in that order.
    pub system: Vec<(PathBuf, SystemEntry)>,
}

/// This backend's part of the facts' key: the identity of the runsc found (path, size,
/// times, inode) and the format of what is recorded.
fn own_key(runsc: &Result<PathBuf, String>) -> String {
    match runsc {
        Ok(p) => format!(
            "gvisor facts v1; {}",
            sandbox_core::registry::file_identity(p)
        ),
        Err(e) => format!("gvisor facts v1; no runsc: {e}"),
    }
}

/// The first line of `runsc --version`, from `record` where it has it, else asked (and
/// recorded when runsc answered).
fn version(runsc: &Path, record: &HostRecord) -> Option<String> {
    if let Some(v) = record.get(VERSION) {
        return Some(v);
    }
    let out = Command::new(runsc).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().map(|l| l.trim().to_owned())?;
    record.set(VERSION, line.clone());
    Some(line)
}

impl HostFacts {
    /// Ask the host, with runsc's version taken from and kept in `config`'s fact store.
    pub(crate) fn detect(config: &BackendConfig) -> Self {
        let runsc = which::which("runsc")
            .map_err(|e| e.to_string())
            .and_then(|p| p.canonicalize().map_err(|e| e.to_string()));
        let record = HostRecord::open(config, crate::NAME, &own_key(&runsc));
        let version = runsc.as_ref().ok().and_then(|p| version(p, &record));
        let system = sandbox_host::layout::system_layout();
        Self {
            runsc,
            version,
            is_root: nix::unistd::geteuid().is_root(),
            system,
        }
    }
}
