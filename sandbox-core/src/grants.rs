//! Grants that would defeat the policy itself, refused by what they are, not how they are
//! spelled.
//!
//! A writable `/sys/fs/cgroup` lets the command move itself out of its memory and pids
//! cgroups; a readable `/run` hands it the Docker socket (connecting to a unix socket is not
//! stopped by a read-only mount), which is root on the host. Names alone are no defence: a
//! symlink or a bind mount spells the same thing another way. So each grant is judged on the
//! resolved path: the filesystem type of its mount (`statfs`'s `f_type`, and for devtmpfs,
//! which reports tmpfs's magic, the mount table), every mount below it (binds are recursive),
//! and whether a known control socket is at or below it (by device and inode).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// Filesystems whose files control the kernel, the sandbox's own limits or other
/// processes: by `statfs` magic, with their names.
const CONTROL_FS: &[(i64, &str)] = &[
    (0x0027_e0eb, "cgroupfs (v1)"),
    (0x6367_7270, "cgroupfs (v2)"),
    (0x6265_6572, "sysfs"),
    (0x0000_9fa0, "procfs"),
    (0x0000_1cd1, "devpts"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpffs"),
];

/// The same filesystems by the names the mount table gives them (for mounts below a grant,
/// and devtmpfs, which `statfs` cannot tell from tmpfs).
const CONTROL_FS_NAMES: &[&str] = &[
    "cgroup",
    "cgroup2",
    "sysfs",
    "proc",
    "devtmpfs",
    "devpts",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
];

/// Sockets that are root on the host to whoever can connect: container engines.
const CONTROL_SOCKETS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
];

fn refused(field: &'static str, path: &Path, what: String) -> SandboxError {
    SandboxError::ControlGrant {
        field,
        path: path.to_path_buf(),
        what,
        remedy: "grant a directory that holds only the files the command needs; limits and \
                 kernel interfaces are set by the sandbox's own options (such as \
                 --memory), never by handing the command their control files"
            .into(),
    }
}

/// The mount table: (mount point, filesystem type), in mount order.
fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let point = pre.split(' ').nth(4)?;
            let fstype = post.split(' ').next()?;
            Some((PathBuf::from(unescape(point)), fstype.to_owned()))
        })
        .collect()
}

/// Mount points escape space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuse `path` (canonical) as a grant in `field` if it is, or holds, something that
/// would let the command undo its own confinement.
pub(crate) fn check(field: &'static str, path: &Path) -> Result<(), SandboxError> {
    if let Ok(fs) = rustix::fs::statfs(path) {
        #[allow(clippy::unnecessary_cast)]
        let magic = fs.f_type as i64;
        if let Some((_, name)) = CONTROL_FS.iter().find(|(m, _)| *m == magic) {
            return Err(refused(field, path, format!("it is on {name}")));
        }
    }
    let table = mounts();
    // The mount that holds the path: the last (topmost) one whose point is its longest
    // prefix.
    let holder = table
        .iter()
        .filter(|(p, _)| path.starts_with(p))
        .max_by_key(|(p, _)| p.components().count());
    if let Some((point, fstype)) = holder {
        if fstype == "devtmpfs" {
            return Err(refused(
                field,
                path,
                format!("it is on devtmpfs (mounted at {})", point.display()),
            ));
        }
    }
    if let Some((point, fstype)) = table
        .iter()
        .find(|(p, t)| p != path && p.starts_with(path) && CONTROL_FS_NAMES.contains(&t.as_str()))
    {
        return Err(refused(
            field,
            path,
            format!("it holds a {fstype} mount at {}", point.display()),
        ));
    }
    let grant = std::fs::metadata(path).ok();
    for sock in CONTROL_SOCKETS {
        let Ok(canon) = Path::new(sock).canonicalize() else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&canon) else {
            continue;
        };
        let at_or_below = canon.starts_with(path)
            || grant
                .as_ref()
                .is_some_and(|g| same_or_parent_of(g, &canon, &meta));
        if at_or_below {
            return Err(refused(
                field,
                path,
                format!("it holds the container engine's control socket {sock}"),
            ));
        }
    }
    Ok(())
}

/// Where the sandbox keeps its own state between runs, in the host process's environment:
/// `$XDG_CACHE_HOME/sandbox`, else `~/.cache/sandbox` (the command-line tool's start-up
/// cache and the backends' recorded host facts). A command that could write there would
/// choose what the next run starts from, so a grant that holds it gets it back read-only
/// ([`state_carveouts`]).
pub fn state_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".cache"))
        })?;
    Some(base.join("sandbox"))
}

/// Where a host keeps the directories of its runs (layers, copies, bundles), in the host
/// process's temp dir: `$TMPDIR/sandbox-runs-<euid>`, private to that user. One directory
/// for all of them, so that a writable grant holding the temp dir gets it back read-only
/// as a whole (the start pipeline's carve-out), including what runs started later make
/// there.
pub fn runs_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "sandbox-runs-{}",
        rustix::process::geteuid().as_raw()
    ))
}

/// The sandbox's state directories (canonical, existing) that the workspace or a writable
/// path holds: carved out read-only, so `--write ~/.cache` or a workspace of `$HOME` still
/// runs. One that does not exist yet is not carved out: whoever keeps state there makes it
/// before the run (the command-line tool does).
pub(crate) fn state_carveouts(workspace: &Path, writable: &[PathBuf]) -> Vec<PathBuf> {
    state_dir()
        .and_then(|d| d.canonicalize().ok())
        .filter(|d| d.is_dir())
        .filter(|d| d.starts_with(workspace) || writable.iter().any(|w| d.starts_with(w)))
        .into_iter()
        .collect()
}

/// Whether the grant (by device and inode) is the socket itself or its directory: a bind
/// mount of the directory elsewhere is the same inode under another name.
fn same_or_parent_of(
    grant: &std::fs::Metadata,
    sock: &Path,
    sock_meta: &std::fs::Metadata,
) -> bool {
    let same = |m: &std::fs::Metadata| m.dev() == grant.dev() && m.ino() == grant.ino();
    same(sock_meta)
        || sock
            .parent()
            .and_then(|d| std::fs::metadata(d).ok())
            .is_some_and(|m| same(&m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_what(p: &Path) -> Option<String> {
        match check("writable_paths", p) {
            Err(SandboxError::ControlGrant { what, field, .. }) => {
                assert_eq!(field, "writable_paths");
                Some(what)
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn control_filesystems_are_refused_by_type() {
        for (p, name) in [
            ("/sys/fs/cgroup", "cgroup"),
            ("/sys", "sysfs"),
            ("/proc", "procfs"),
            ("/proc/sys", "procfs"),
            ("/dev", "devtmpfs"),
        ] {
            if Path::new(p).exists() {
                let what = refused_what(Path::new(p)).unwrap_or_else(|| panic!("{p} accepted"));
                assert!(what.contains(name), "{p}: {what}");
            }
        }
    }

    #[test]
    fn a_symlink_does_not_spell_its_way_around() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("cg");
        std::os::unix::fs::symlink("/sys/fs/cgroup", &link).unwrap();
        let canon = link.canonicalize().unwrap();
        assert!(refused_what(&canon).is_some());
    }

    #[test]
    fn a_tree_holding_a_control_mount_is_refused_and_a_plain_one_is_not() {
        assert!(refused_what(Path::new("/")).is_some());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(refused_what(&d.path().canonicalize().unwrap()), None);
    }

    /// Set in the re-executed test: the bind mount to judge, made in a mount namespace of
    /// its own so nothing shows on the host.
    const BIND_VAR: &str = "SANDBOX_GRANT_BIND_TARGET";

    #[test]
    fn a_bind_mount_does_not_spell_its_way_around() {
        if let Ok(target) = std::env::var(BIND_VAR) {
            let what = refused_what(Path::new(&target)).expect("the bind mount was accepted");
            assert!(what.contains("cgroup"), "{what}");
            return;
        }
        if !rustix::process::geteuid().is_root() {
            eprintln!("needs root to make a bind mount; the symlink test covers this user");
            return;
        }
        let source = mounts()
            .into_iter()
            .find(|(_, t)| t == "cgroup2" || t == "cgroup")
            .map(|(p, _)| p)
            .expect("a cgroup mount on this host");
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("innocent");
        std::fs::create_dir(&target).unwrap();
        let exe = std::env::current_exe().unwrap();
        let status = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$1" "$2" && exec "$3" --exact "$4" --nocapture"#)
            .args([
                std::ffi::OsStr::new("sh"),
                source.as_os_str(),
                target.as_os_str(),
            ])
            .arg(&exe)
            .arg("grants::tests::a_bind_mount_does_not_spell_its_way_around")
            .env(BIND_VAR, &target)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "the check inside the mount namespace failed"
        );
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
    }
}
