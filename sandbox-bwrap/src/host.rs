//! What the backend learns about the host once, when it is constructed: where bwrap is and
//! what it supports, and how the system directories are laid out. Everything here is asked
//! of the host, never assumed (a merged `/usr` is read from the symlinks, not guessed from
//! the distribution).

use std::path::{Path, PathBuf};
use std::process::Command;

use sandbox_host::facts::HostRecord;

pub(crate) use sandbox_host::layout::SystemEntry;

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
/// And the top-level files a kernel makes readable by root alone (mode 0400) that are known
/// here; [`root_only_proc_files`] adds, on every host, whatever else of that kind the
/// running kernel or one of its modules has (a command that keeps host uid 0 with its
/// capabilities dropped still owns them, and they are kernel-exploitation aids: slab and
/// vmalloc layouts, physical page flags).
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
    /// Each of [`sandbox_host::layout::SYSTEM_DIRS`], in that order.
    pub system: Vec<(PathBuf, SystemEntry)>,
    /// Where `/etc/resolv.conf` leads when that is outside `/etc` (systemd-resolved's stub
    /// in `/run`): bound with the full network so name resolution works.
    pub resolv_conf: Option<PathBuf>,
    /// The entries of [`PROC_READ_ONLY`] and [`PROC_HIDDEN`] this kernel has, and its
    /// other root-only top-level files ([`root_only_proc_files`]), each once.
    pub proc_entries: Vec<String>,
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

/// The names of the facts this backend records (see `sandbox_host::facts`): bwrap's
/// version and the optional options it has, learned from `bwrap --version` and
/// `bwrap --help`. Recorded under the identity of that very binary: another bwrap (a new
/// file, a file rewritten in place) is asked again, so a recorded feature list never
/// describes a binary it was not read from. And only for a bwrap that has every option
/// the runs use (the required ones and `--disable-userns`): a record can then only add
/// options to a run, never leave one out, so even a record the user did not write (a
/// workspace that holds the cache directory) can make bwrap refuse a run, never run it
/// with less.
const VERSION: &str = "version";
const OPTIONAL: &str = "optional options";

/// This backend's part of the facts' key: the identity of the bwrap found (path, size,
/// times, inode) and the format of what is recorded.
pub(crate) fn own_key(bwrap: &Result<PathBuf, String>) -> String {
    match bwrap {
        Ok(p) => format!(
            "bwrap facts v1; {}",
            sandbox_core::registry::file_identity(p)
        ),
        Err(e) => format!("bwrap facts v1; no bwrap: {e}"),
    }
}

/// Where bwrap is, canonical, or why it was not found.
pub(crate) fn find_bwrap() -> Result<PathBuf, String> {
    which::which("bwrap")
        .map_err(|e| e.to_string())
        .and_then(|p| p.canonicalize().map_err(|e| e.to_string()))
}

/// bwrap's version and features: from `record` where it has them, else by running
/// `bwrap --version` and `bwrap --help` (and recorded when every required option is
/// there).
fn version_and_features(bwrap: &Path, record: &HostRecord) -> (Option<String>, Features) {
    let recorded = record
        .get(OPTIONAL)
        .filter(|o| o.split(' ').any(|x| x == "--disable-userns"));
    if let Some(optional) = recorded {
        let features = Features {
            missing: Vec::new(),
            disable_userns: true,
            overlay: optional.split(' ').any(|x| x == "--overlay-src"),
        };
        return (record.get(VERSION).filter(|v| !v.is_empty()), features);
    }
    let version = run_text(bwrap, "--version").and_then(|t| {
        t.split_whitespace()
            .nth(1)
            .map(str::to_owned)
            .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    });
    let features = run_text(bwrap, "--help")
        .map(|h| Features::from_help(&h))
        .unwrap_or_else(|| Features::from_help(""));
    if features.missing.is_empty() && features.disable_userns {
        let optional: Vec<&str> = [
            ("--disable-userns", features.disable_userns),
            ("--overlay-src", features.overlay),
        ]
        .iter()
        .filter(|(_, has)| *has)
        .map(|(o, _)| *o)
        .collect();
        record.set(VERSION, version.clone().unwrap_or_default());
        record.set(OPTIONAL, optional.join(" "));
    }
    (version, features)
}

/// Every top-level regular file of this host's `/proc` that only its owner (root) may read:
/// a list no release of this crate can keep complete (a new kernel, a module such as a
/// hypervisor's accounting file adds its own), so it is read on the host, on every
/// construction and never from a record. A few dozen `lstat`s.
pub(crate) fn root_only_proc_files() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<String> = dir
        .filter_map(Result::ok)
        .filter(|e| {
            !e.file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
        })
        .filter(|e| {
            std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file() && m.mode() & 0o004 == 0)
        })
        .filter_map(|e| e.path().to_str().map(str::to_owned))
        .collect();
    found.sort_unstable();
    found
}

/// The `/proc` entries the policy binds read-only or hides, as this host has them.
fn proc_entries() -> Vec<String> {
    let mut entries: Vec<String> = PROC_READ_ONLY
        .iter()
        .chain(PROC_HIDDEN)
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .map(|p| (*p).to_owned())
        .collect();
    for f in root_only_proc_files() {
        if !entries.contains(&f) {
            entries.push(f);
        }
    }
    entries
}

impl HostFacts {
    /// Ask this host about the bwrap at `bwrap`, taking its version and features from
    /// `record` where it has them (everything else is read afresh: it is a few `stat`s).
    pub(crate) fn detect(bwrap: Result<PathBuf, String>, record: &HostRecord) -> Self {
        let (version, features) = match &bwrap {
            Ok(path) => version_and_features(path, record),
            Err(_) => (None, Features::from_help("")),
        };
        let resolv_conf = std::fs::canonicalize("/etc/resolv.conf")
            .ok()
            .filter(|p| !p.starts_with("/etc"));
        Self {
            bwrap,
            version,
            features,
            system: sandbox_host::layout::system_layout(),
            resolv_conf,
            proc_entries: proc_entries(),
            landlock_abi: sandbox_host::kernel::landlock_abi().unwrap_or(0),
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

    /// Every root-only top-level file of this kernel's `/proc` (walked here independently)
    /// is among the entries the policy handles, and none of them is one it binds
    /// read-only: the argv hides each (`crate::argv`'s tests check what a hidden entry
    /// becomes).
    #[test]
    fn every_root_only_proc_file_of_this_kernel_is_hidden() {
        use std::os::unix::fs::MetadataExt;
        let entries = proc_entries();
        let mut missed = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap() {
            let e = e.unwrap();
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue; // a process that exited meanwhile
            };
            let path = e.path().display().to_string();
            let root_only = m.is_file() && m.mode() & 0o004 == 0;
            if root_only && (!entries.contains(&path) || PROC_READ_ONLY.contains(&path.as_str())) {
                missed.push(path);
            }
        }
        assert!(missed.is_empty(), "not hidden: {missed:?}");
        // The known ones this kernel has are there too.
        for p in PROC_HIDDEN
            .iter()
            .filter(|p| std::path::Path::new(p).exists())
        {
            assert!(entries.iter().any(|e| e == p), "{p}");
        }
    }

    use super::*;

    #[test]
    fn recorded_features_are_taken_and_a_fresh_bwrap_is_asked() {
        let Ok(bwrap) = find_bwrap() else {
            panic!("bwrap is installed on test hosts");
        };
        let asked = HostRecord::fresh("bwrap");
        let facts = HostFacts::detect(Ok(bwrap.clone()), &asked);
        assert!(facts.features.missing.is_empty(), "{:?}", facts.features);
        assert!(
            facts.features.disable_userns,
            "bwrap 0.8 or later on test hosts"
        );
        // What was learned is recorded, and a record holding it is taken as it is.
        assert_eq!(asked.get(VERSION), facts.version.or(Some(String::new())));
        let recorded = HostRecord::fresh("bwrap");
        recorded.set(VERSION, "9.9.9");
        recorded.set(OPTIONAL, "--overlay-src --disable-userns");
        let taken = HostFacts::detect(Ok(bwrap.clone()), &recorded);
        assert_eq!(taken.version.as_deref(), Some("9.9.9"));
        assert!(taken.features.overlay && taken.features.disable_userns);
        assert!(taken.features.missing.is_empty());
        // A record that would leave an option out of the runs is not taken: bwrap is asked.
        let weaker = HostRecord::fresh("bwrap");
        weaker.set(VERSION, "9.9.9");
        weaker.set(OPTIONAL, "--overlay-src");
        let asked = HostFacts::detect(Ok(bwrap), &weaker);
        assert_ne!(asked.version.as_deref(), Some("9.9.9"));
        assert_eq!(asked.features, facts.features);
    }

    #[test]
    fn the_key_is_the_binarys_identity() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bwrap");
        std::fs::write(&f, "a").unwrap();
        let before = own_key(&Ok(f.clone()));
        // Rewritten in place with the same size and modification time: the change time
        // still moves.
        let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, "b").unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_ne!(before, own_key(&Ok(f)));
    }

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
