//! What the backend learns about the host once, when it is constructed: where runsc is,
//! its version, whether the host is root, and how the system directories are laid out
//! (asked of the host: a merged `/usr` is read from the symlinks, never assumed).

use std::path::PathBuf;
use std::process::Command;

/// The top-level directories the sandbox gets read-only, as the host has them. `/bin`,
/// `/lib*` and `/sbin` are symlinks into `/usr` on a merged-`/usr` host and directories on
/// an older one; `/opt` and `/nix/store` exist only on some hosts.
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr",
    "/etc",
    "/opt",
    "/nix/store",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
];

/// One system directory as the host has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SystemEntry {
    /// A real directory: bound read-only.
    Dir,
    /// A symlink: recreated in the sandbox's root with the same target.
    Symlink(PathBuf),
    /// Not on this host.
    Absent,
}

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
    /// Each of [`SYSTEM_DIRS`], in that order.
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
        let system = SYSTEM_DIRS
            .iter()
            .map(|d| {
                let p = PathBuf::from(d);
                let entry = match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&p) {
                        Ok(t) => SystemEntry::Symlink(t),
                        Err(_) => SystemEntry::Absent,
                    },
                    Ok(m) if m.is_dir() => SystemEntry::Dir,
                    _ => SystemEntry::Absent,
                };
                (p, entry)
            })
            .collect();
        Self {
            runsc,
            version,
            is_root: nix::unistd::geteuid().is_root(),
            system,
        }
    }
}
