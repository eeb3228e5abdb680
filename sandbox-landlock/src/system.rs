//! The system paths every command may read, and what "read" means when the host is root.
//!
//! # The list, and why each entry is there
//!
//! | path | access | why |
//! |---|---|---|
//! | `/usr` | read, execute | programs, libraries and their data; on merged-`/usr` systems also what `/bin`, `/sbin` and `/lib*` point to |
//! | `/bin`, `/sbin` | read, execute | programs, on systems without merged `/usr` |
//! | `/lib`, `/lib32`, `/lib64`, `/libx32` | read, execute | the dynamic loader and the C library |
//! | `/etc` | read | `ld.so.cache`, `passwd`/`group` (user names), `nsswitch.conf`, `hosts`, `resolv.conf`, `localtime`, CA certificates, `alternatives` |
//! | `/proc` | read, no write, no execute | `/proc/self/*` (`exe`, `maps`, `fd`, `status`) and `cpuinfo`/`meminfo`; `/proc/self` is a different directory in every process, so only `/proc` as a whole can be granted. Host processes' `environ`, `mem` and `fd` stay closed: the kernel checks ptrace access for them, and landlock denies ptrace out of the sandbox. Never writable: `/proc/sys` and `/proc/sysrq-trigger` are guarded only by file modes, which a root command would pass |
//! | `/dev/null`, `/dev/zero`, `/dev/full` | read, write | the sinks and sources of shell redirections |
//! | `/dev/random`, `/dev/urandom` | read | randomness for programs that do not use `getrandom(2)` |
//!
//! Not granted, on purpose: `/home` and `/root` (keys, credentials), `/tmp` and `/dev/shm`
//! (shared with every other process: a side channel, and writes outside the workspace),
//! `/run` and `/var` (service sockets and state), `/sys`, `/dev/tty` (the host's
//! terminal), `/opt`. A caller who needs one names it in `read_only_paths` or
//! `writable_paths`.
//!
//! # When the host is root and the command keeps uid 0
//!
//! A root host's command normally leaves uid 0 for an unprivileged id with its workspace
//! idmapped to it (`sandbox_host::handover`), and then none of this section applies: the
//! kernel refuses it root-only files by their modes. Where a run cannot have that, the
//! command keeps uid 0 (so that a root-owned workspace stays writable) but loses every
//! capability. A file mode still lets uid 0 read what root owns (`/etc/shadow`,
//! `/etc/ssl/private/*.key`, `/etc/docker/key.json`): the owner bits apply to it. So a root
//! host's command gets a first landlock layer that grants reads *as an unprivileged user
//! would see them* ([`unprivileged_view`], built by [`crate::compile::RootLayer`]): the
//! system directories are walked ([`public_view`]) and only what every user may read is
//! granted (the `o+r` files, and whole directories when everything beneath is public), so
//! a root-only file in `/etc` is denied by landlock even though uid 0 owns it. A
//! directory that is only partly public (`/etc` itself) cannot be listed.
//!
//! The walk is cached: `/usr`, `/bin`, `/lib*` (package-managed, ~100k entries) once per
//! process; `/etc` (where secrets are added at run time) with the layer, which is rebuilt
//! when older than [`ETC_REFRESH`]. A root-only file created under a public directory of
//! `/usr` while the process runs is therefore readable until the process restarts; under
//! `/etc`, for at most [`ETC_REFRESH`]. A file of `/etc` replaced by a new one (rename over
//! it) is denied for as long, since the layer holds the old one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::fsview::{FsView, Kind, Meta};

/// How a system path is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SysAccess {
    /// Read files, list directories, execute.
    Read,
    /// Read files and list directories; no execute (`/proc`).
    ReadNoExec,
    /// Read and write a device (`/dev/null`).
    Device,
    /// Read a device (`/dev/urandom`).
    DeviceRead,
}

/// One entry of the list in the module docs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SystemPath {
    pub path: &'static str,
    pub access: SysAccess,
    /// Re-walked for a root host when older than [`ETC_REFRESH`].
    pub volatile: bool,
}

const fn read(path: &'static str) -> SystemPath {
    SystemPath {
        path,
        access: SysAccess::Read,
        volatile: false,
    }
}

/// The list in the module docs.
pub(crate) const SYSTEM_PATHS: &[SystemPath] = &[
    read("/usr"),
    read("/bin"),
    read("/sbin"),
    read("/lib"),
    read("/lib32"),
    read("/lib64"),
    read("/libx32"),
    SystemPath {
        path: "/etc",
        access: SysAccess::Read,
        volatile: true,
    },
    SystemPath {
        path: "/proc",
        access: SysAccess::ReadNoExec,
        volatile: false,
    },
    SystemPath {
        path: "/dev/null",
        access: SysAccess::Device,
        volatile: false,
    },
    SystemPath {
        path: "/dev/zero",
        access: SysAccess::Device,
        volatile: false,
    },
    SystemPath {
        path: "/dev/full",
        access: SysAccess::Device,
        volatile: false,
    },
    SystemPath {
        path: "/dev/random",
        access: SysAccess::DeviceRead,
        volatile: false,
    },
    SystemPath {
        path: "/dev/urandom",
        access: SysAccess::DeviceRead,
        volatile: false,
    },
];

/// How long a root host's view of `/etc` is reused before it is walked again.
pub(crate) const ETC_REFRESH: Duration = Duration::from_secs(2);

/// One system grant on this host: a canonical path, what it is, how it is granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SystemGrant {
    pub path: PathBuf,
    pub kind: Kind,
    pub access: SysAccess,
}

/// The entries of `list` that exist here, canonical, without those already beneath another
/// granted directory with the same access (`/bin` -> `/usr/bin` is inside `/usr`).
pub(crate) fn resolve(fs: &dyn FsView, list: &[SystemPath]) -> Vec<SystemGrant> {
    let mut out: Vec<SystemGrant> = Vec::new();
    for sp in list {
        let Ok(path) = fs.canonical(Path::new(sp.path)) else {
            continue;
        };
        let Ok(meta) = fs.stat(&path) else {
            continue;
        };
        let covered = out
            .iter()
            .any(|g| g.kind == Kind::Dir && g.access == sp.access && path.starts_with(&g.path));
        if !covered {
            out.push(SystemGrant {
                path,
                kind: meta.kind,
                access: sp.access,
            });
        }
    }
    out
}

/// Readable by every user: `o+r` (and `o+x` for a directory, to reach inside).
fn public(meta: &Meta) -> bool {
    match meta.kind {
        Kind::Dir => meta.mode & 0o005 == 0o005,
        Kind::Symlink => true,
        Kind::File | Kind::Special => meta.mode & 0o004 != 0,
    }
}

/// The grants an unprivileged user's view of `path` needs: `path` itself when everything
/// beneath is public, else the public parts beneath. Symlinks need nothing (the kernel
/// judges where they lead); a directory that cannot be read is fail-closed: nothing.
fn walk(fs: &dyn FsView, path: &Path, meta: Meta, out: &mut Vec<(PathBuf, Kind)>) -> bool {
    match meta.kind {
        Kind::Symlink => true,
        Kind::File | Kind::Special => {
            if public(&meta) {
                out.push((path.to_path_buf(), meta.kind));
                true
            } else {
                false
            }
        }
        Kind::Dir => {
            // Without o+x an ordinary user reaches nothing beneath.
            if meta.mode & 0o001 == 0 {
                return false;
            }
            let Ok(entries) = fs.list(path) else {
                return false;
            };
            let mark = out.len();
            let mut all = public(&meta);
            for e in entries {
                all &= walk(fs, &path.join(&e.name), e.meta, out);
            }
            if all {
                // Everything beneath is public: one rule for the directory instead.
                out.truncate(mark);
                out.push((path.to_path_buf(), Kind::Dir));
            }
            all
        }
    }
}

/// `grants` as an unprivileged user would see them: each readable directory split into its
/// public parts (see the module docs). `/proc` is kept whole: its per-process files are
/// guarded by ptrace checks, not modes, and a walk would race with every process.
pub(crate) fn public_view(fs: &dyn FsView, grants: &[SystemGrant]) -> Vec<SystemGrant> {
    let mut out = Vec::new();
    for g in grants {
        match g.access {
            SysAccess::ReadNoExec => out.push(g.clone()),
            SysAccess::Read | SysAccess::Device | SysAccess::DeviceRead => {
                let Ok(meta) = fs.stat(&g.path) else {
                    continue;
                };
                let mut parts = Vec::new();
                walk(fs, &g.path, meta, &mut parts);
                out.extend(parts.into_iter().map(|(path, kind)| SystemGrant {
                    path,
                    kind,
                    access: g.access,
                }));
            }
        }
    }
    out
}

/// The system grants for one run, shared between runs.
#[derive(Clone, Debug)]
pub(crate) struct SystemView {
    parts: Vec<Arc<Vec<SystemGrant>>>,
}

impl SystemView {
    /// Every grant.
    pub fn iter(&self) -> impl Iterator<Item = &SystemGrant> {
        self.parts.iter().flat_map(|p| p.iter())
    }

    /// A view made of these grants.
    #[cfg(test)]
    pub fn from_grants(grants: Vec<SystemGrant>) -> Self {
        Self {
            parts: vec![Arc::new(grants)],
        }
    }
}

/// The host's system grants: found once per process (which of the paths exist and what
/// they are does not change under a running program).
pub(crate) fn host_view() -> SystemView {
    static PLAIN: OnceLock<Arc<Vec<SystemGrant>>> = OnceLock::new();
    let p = PLAIN.get_or_init(|| Arc::new(resolve(&crate::fsview::HostFs, SYSTEM_PATHS)));
    SystemView {
        parts: vec![p.clone()],
    }
}

/// The unprivileged view of the whole filesystem, as read rules: everything whole, except
/// the walked directories (`walked_roots`: the system directories, and the named read-only
/// paths), which contribute only their public parts (`walked`). The directories on the way
/// to a walked root are split (their other entries whole, themselves not listable).
/// Symlinks need no rule (`/bin` -> `usr/bin` is judged at `/usr/bin`).
///
/// This is the first of the two landlock layers of a root host (see
/// [`crate::compile::RootLayer`]): it handles only read and execute, so it takes away
/// exactly what an unprivileged user could not read, and the run's own layer does the
/// rest. Landlock layers intersect: an access passes only if every layer allows it.
pub(crate) fn unprivileged_view(
    fs: &dyn FsView,
    walked_roots: &[PathBuf],
    walked: &[SystemGrant],
) -> Vec<(PathBuf, Kind)> {
    fn split(
        fs: &dyn FsView,
        dir: &Path,
        walked_roots: &[PathBuf],
        out: &mut Vec<(PathBuf, Kind)>,
    ) {
        // Unreadable: nothing beneath is granted (fail closed).
        let Ok(entries) = fs.list(dir) else {
            return;
        };
        for e in entries {
            let p = dir.join(&e.name);
            if e.meta.kind == Kind::Symlink || walked_roots.contains(&p) {
                continue;
            }
            if walked_roots.iter().any(|r| r.starts_with(&p)) {
                if e.meta.kind == Kind::Dir {
                    split(fs, &p, walked_roots, out);
                }
                continue;
            }
            out.push((p, e.meta.kind));
        }
    }
    let mut out: Vec<(PathBuf, Kind)> = walked.iter().map(|g| (g.path.clone(), g.kind)).collect();
    if !walked_roots.iter().any(|r| r == Path::new("/")) {
        split(fs, Path::new("/"), walked_roots, &mut out);
    }
    out
}

/// The walked directories of a root host and their public parts: the stable system
/// directories (`/usr`, `/lib*`) walked once per process; `/etc` and `extra` (the run's
/// read-only paths) on every call (the caller, [`crate::compile::RootLayer`], caches the
/// result for [`ETC_REFRESH`]). Returns the roots and the grants.
pub(crate) fn host_walked(fs: &dyn FsView, extra: &[PathBuf]) -> (Vec<PathBuf>, Vec<SystemGrant>) {
    static STABLE: OnceLock<(Vec<PathBuf>, Vec<SystemGrant>)> = OnceLock::new();
    let walk = |roots: Vec<SystemGrant>| -> (Vec<PathBuf>, Vec<SystemGrant>) {
        let public = public_view(fs, &roots);
        (roots.into_iter().map(|g| g.path).collect(), public)
    };
    let system = |volatile: bool| -> Vec<SystemGrant> {
        let list: Vec<SystemPath> = SYSTEM_PATHS
            .iter()
            .filter(|s| s.volatile == volatile && s.access == SysAccess::Read)
            .copied()
            .collect();
        resolve(fs, &list)
    };
    let (mut roots, mut grants) = STABLE.get_or_init(|| walk(system(false))).clone();
    let mut volatile = system(true);
    for p in extra {
        if let Ok(meta) = fs.stat(p) {
            volatile.push(SystemGrant {
                path: p.clone(),
                kind: meta.kind,
                access: SysAccess::Read,
            });
        }
    }
    let (r, g) = walk(volatile);
    roots.extend(r);
    grants.extend(g);
    (roots, grants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsview::fake::FakeFs;

    fn paths(v: &[SystemGrant]) -> Vec<String> {
        v.iter().map(|g| g.path.display().to_string()).collect()
    }

    #[test]
    fn resolve_drops_missing_paths_and_those_inside_another() {
        let mut fs = FakeFs::new();
        fs.dir("/usr/bin", 0o755)
            .dir("/usr/lib", 0o755)
            .symlink("/bin", "/usr/bin")
            .symlink("/lib", "/usr/lib")
            .dir("/etc", 0o755)
            .dir("/proc", 0o555)
            .special("/dev/null", 0o666);
        let g = resolve(&fs, SYSTEM_PATHS);
        assert_eq!(paths(&g), ["/usr", "/etc", "/proc", "/dev/null"]);
        assert_eq!(g[3].kind, Kind::Special);
        assert_eq!(g[2].access, SysAccess::ReadNoExec);
    }

    #[test]
    fn public_view_keeps_a_fully_public_tree_whole() {
        let mut fs = FakeFs::new();
        fs.file("/usr/bin/ls", 0o755)
            .file("/usr/lib/libc.so", 0o644);
        let g = resolve(&fs, &[read("/usr")]);
        assert_eq!(paths(&public_view(&fs, &g)), ["/usr"]);
    }

    #[test]
    fn public_view_splits_around_root_only_files() {
        let mut fs = FakeFs::new();
        fs.file("/etc/passwd", 0o644)
            .file("/etc/shadow", 0o640)
            .file("/etc/hosts", 0o644)
            .dir("/etc/ssl/private", 0o700)
            .file("/etc/ssl/private/host.key", 0o600)
            .file("/etc/ssl/certs/ca.pem", 0o644)
            .dir("/etc/apt", 0o755)
            .file("/etc/apt/sources.list", 0o644)
            .symlink("/etc/localtime", "/usr/share/zoneinfo/UTC")
            .file("/usr/share/zoneinfo/UTC", 0o644);
        let g = resolve(&fs, &[read("/etc")]);
        let mut v = paths(&public_view(&fs, &g));
        v.sort();
        assert_eq!(
            v,
            [
                "/etc/apt",
                "/etc/hosts",
                "/etc/passwd",
                "/etc/ssl/certs",
                // No rule for /etc, /etc/ssl, the private dir, the key or the shadow file.
            ]
        );
    }

    #[test]
    fn public_view_does_not_enter_untraversable_directories() {
        let mut fs = FakeFs::new();
        fs.dir("/etc/secret", 0o700)
            .file("/etc/secret/visible-mode", 0o644)
            .dir("/etc/listless", 0o711)
            .file("/etc/listless/known", 0o644);
        let g = resolve(&fs, &[read("/etc")]);
        let mut v = paths(&public_view(&fs, &g));
        v.sort();
        // o+x but no o+r: the file can be opened by name, the directory not listed.
        assert_eq!(v, ["/etc/listless/known"]);
    }

    #[test]
    fn public_view_keeps_proc_whole_and_filters_devices() {
        let mut fs = FakeFs::new();
        fs.dir("/proc/1", 0o555)
            .file("/proc/1/environ", 0o400)
            .special("/dev/null", 0o666)
            .special("/dev/secretdev", 0o600);
        let list = [
            SystemPath {
                path: "/proc",
                access: SysAccess::ReadNoExec,
                volatile: false,
            },
            SystemPath {
                path: "/dev/null",
                access: SysAccess::Device,
                volatile: false,
            },
            SystemPath {
                path: "/dev/secretdev",
                access: SysAccess::Device,
                volatile: false,
            },
        ];
        let g = resolve(&fs, &list);
        assert_eq!(paths(&public_view(&fs, &g)), ["/proc", "/dev/null"]);
    }

    #[test]
    fn the_unprivileged_view_keeps_other_top_level_entries_whole() {
        let mut fs = FakeFs::new();
        fs.file("/etc/passwd", 0o644)
            .file("/etc/shadow", 0o600)
            .dir("/usr/bin", 0o755)
            .dir("/home/me/.ssh", 0o700)
            .dir("/work", 0o755)
            .symlink("/bin", "/usr/bin")
            .dir("/proc", 0o555);
        fs.dir("/work/shared", 0o755)
            .file("/work/shared/public.txt", 0o644)
            .file("/work/shared/private.txt", 0o600)
            .dir("/work/ws", 0o755);
        let roots = resolve(
            &fs,
            &[
                read("/usr"),
                read("/bin"),
                read("/etc"),
                read("/work/shared"),
            ],
        );
        let walked = public_view(&fs, &roots);
        let roots: Vec<PathBuf> = roots.into_iter().map(|g| g.path).collect();
        let mut v: Vec<String> = unprivileged_view(&fs, &roots, &walked)
            .into_iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        v.sort();
        // /home whole: the run's own layer denies it; this layer only narrows what a
        // run grants. /etc and the read-only /work/shared split, /work split on the way
        // to it (its other entries whole); /bin is a symlink.
        assert_eq!(
            v,
            [
                "/etc/passwd",
                "/home",
                "/proc",
                "/usr",
                "/work/shared/public.txt",
                "/work/ws"
            ]
        );
    }

    #[test]
    fn the_list_grants_no_home_tmp_run_or_sys() {
        for p in SYSTEM_PATHS {
            for banned in ["/home", "/root", "/tmp", "/run", "/var", "/sys", "/dev/shm"] {
                assert!(!Path::new(p.path).starts_with(banned), "{}", p.path);
            }
            if p.access == SysAccess::Device {
                assert!(p.path.starts_with("/dev/"), "{}", p.path);
            }
        }
    }

    #[test]
    fn the_host_public_view_hides_root_only_files_here() {
        // On this host: whatever root-only file exists under /etc is absent from the view,
        // and nothing in the view is beneath it.
        let (_, view) = host_walked(&crate::fsview::HostFs, &[]);
        let view = SystemView::from_grants(view);
        let mut secret = None;
        let fs = crate::fsview::HostFs;
        if let Ok(entries) = fs.list(Path::new("/etc")) {
            for e in entries {
                if e.meta.kind == Kind::File && e.meta.mode & 0o004 == 0 {
                    secret = Some(Path::new("/etc").join(e.name));
                    break;
                }
            }
        }
        let secret = secret.expect("a Debian host has a root-only file in /etc (shadow)");
        assert!(
            !view.iter().any(|g| secret.starts_with(&g.path)),
            "{} is granted",
            secret.display()
        );
        assert!(view
            .iter()
            .any(|g| Path::new("/etc/passwd").starts_with(&g.path)));
    }
}
