//! What the backend learns about the host once, when it is constructed: where bwrap is and
//! what it supports, and how the system directories are laid out. Everything here is asked
//! of the host, never assumed (a merged `/usr` is read from the symlinks, not guessed from
//! the distribution).

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) use sandbox_core::layout::SystemEntry;

/// Entries of `/proc` that stay read-only inside: bwrap covers some of them itself, but
/// decides by `access(W_OK)` on the entry, which skips `/proc/sys` (a 0555 directory) even
/// when its files are writable. A command running as host root (kuid 0, even with every
/// capability dropped) could then write global sysctls such as `kernel.core_pattern`, a
/// way to run code as root on the host. Checked on the host (same kernel) since a missing
/// destination would make bwrap fail.
pub(crate) const PROC_READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];

/// Entries of `/proc` hidden inside (as Docker does): they describe the whole host (every
/// task, every timer with its process name, the keyring list), not the sandbox's namespace.
///
/// And every top-level file the kernel makes readable by root alone (mode 0400): a command
/// that keeps host uid 0 with its capabilities dropped still owns them, and they are
/// kernel-exploitation aids (slab and vmalloc layouts, physical page flags). A test checks
/// that this list covers every such file of the running kernel.
pub(crate) const PROC_HIDDEN: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/kmsg",
    "/proc/kpagecgroup",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/pagetypeinfo",
    "/proc/slabinfo",
    "/proc/vmallocinfo",
];

/// Options of bwrap this backend relies on, and the ones it uses when present.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Features {
    /// Everything required is there (`--args`, `--clearenv`, `--seccomp`, `--ro-bind-data`,
    /// `--perms`, `--cap-drop`, `--die-with-parent`, `--new-session`, `--remount-ro`,
    /// `--unshare-cgroup-try`); else the missing options.
    pub missing: Vec<&'static str>,
    /// `--disable-userns` (0.8): no nested user namespaces even if seccomp were bypassed.
    pub disable_userns: bool,
    /// `--overlay-src` (0.10): unused; snapshots and change sets use core's layer either way.
    pub overlay: bool,
}

const REQUIRED: &[&str] = &[
    "--args",
    "--clearenv",
    "--seccomp",
    "--ro-bind-data",
    "--perms",
    "--cap-drop",
    "--die-with-parent",
    "--new-session",
    "--remount-ro",
    "--unshare-cgroup-try",
    "--ro-bind-try",
];

impl Features {
    /// Parse `bwrap --help`.
    pub(crate) fn from_help(help: &str) -> Self {
        let has = |opt: &str| {
            help.lines()
                .any(|l| l.split_whitespace().next() == Some(opt))
        };
        Self {
            missing: REQUIRED.iter().copied().filter(|o| !has(o)).collect(),
            disable_userns: has("--disable-userns"),
            overlay: has("--overlay-src"),
        }
    }
}

/// The facts, found once.
#[derive(Clone, Debug)]
pub(crate) struct HostFacts {
    /// Where bwrap is, or why it was not found.
    pub bwrap: Result<PathBuf, String>,
    /// `bwrap --version`, e.g. `0.8.0`.
    pub version: Option<String>,
    /// What the installed bwrap supports.
    pub features: Features,
    /// Each of [`sandbox_core::layout::SYSTEM_DIRS`], in that order.
    pub system: Vec<(PathBuf, SystemEntry)>,
    /// Where `/etc/resolv.conf` leads when that is outside `/etc` (systemd-resolved's stub
    /// in `/run`): bound with the full network so name resolution works.
    pub resolv_conf: Option<PathBuf>,
    /// The entries of [`PROC_READ_ONLY`] and [`PROC_HIDDEN`] this kernel has.
    pub proc_entries: Vec<&'static str>,
    /// The kernel's landlock ABI (0: none); 6 and up can confine abstract unix sockets.
    pub landlock_abi: u32,
    /// The host process runs as root.
    pub is_root: bool,
}

fn run_text(bwrap: &Path, arg: &str) -> Option<String> {
    let out = Command::new(bwrap).arg(arg).env_clear().output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Some(text)
}

impl HostFacts {
    /// Ask this host.
    pub(crate) fn detect() -> Self {
        let bwrap = which::which("bwrap")
            .map_err(|e| e.to_string())
            .and_then(|p| p.canonicalize().map_err(|e| e.to_string()));
        let (version, features) = match &bwrap {
            Ok(path) => (
                run_text(path, "--version").and_then(|t| {
                    t.split_whitespace()
                        .nth(1)
                        .map(str::to_owned)
                        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                }),
                run_text(path, "--help")
                    .map(|h| Features::from_help(&h))
                    .unwrap_or_else(|| Features::from_help("")),
            ),
            Err(_) => (None, Features::from_help("")),
        };
        let resolv_conf = std::fs::canonicalize("/etc/resolv.conf")
            .ok()
            .filter(|p| !p.starts_with("/etc"));
        Self {
            bwrap,
            version,
            features,
            system: sandbox_core::layout::system_layout(),
            resolv_conf,
            proc_entries: PROC_READ_ONLY
                .iter()
                .chain(PROC_HIDDEN)
                .copied()
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .collect(),
            landlock_abi: sandbox_core::kernel::landlock_abi().unwrap_or(0),
            is_root: nix::unistd::geteuid().is_root(),
        }
    }

    /// Whether abstract unix sockets can be confined (landlock ABI 6, Linux 6.12).
    pub(crate) fn can_scope_abstract_unix(&self) -> bool {
        self.landlock_abi >= 6
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn every_root_only_proc_file_of_this_kernel_is_hidden() {
        use std::os::unix::fs::MetadataExt;
        let mut missed = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let path = e.path().display().to_string();
            if m.is_file() && m.mode() & 0o004 == 0 && !PROC_HIDDEN.contains(&path.as_str()) {
                missed.push(path);
            }
        }
        assert!(missed.is_empty(), "not hidden: {missed:?}");
    }

    use super::*;

    #[test]
    fn features_are_read_from_the_help_text() {
        let help =
            "usage: bwrap\n    --args FD   Parse\n    --clearenv  Unset\n    --disable-userns  x\n";
        let f = Features::from_help(help);
        assert!(f.disable_userns);
        assert!(!f.overlay);
        assert!(!f.missing.contains(&"--args"));
        assert!(f.missing.contains(&"--seccomp"));
        // An option named only inside another's description does not count.
        let f = Features::from_help("    --bind SRC DEST   like --seccomp but not\n");
        assert!(f.missing.contains(&"--seccomp"));
    }
}
