//! The sandbox's filesystem as a table of mounts, shared by the backends that build a root
//! of their own (bwrap's arguments, gVisor's OCI spec): which host system directories
//! there are, and how the caller's paths combine when they overlap.
//!
//! Everything about the host is asked of it, never assumed: a merged `/usr` is read from
//! the symlinks, not guessed from the distribution.
//!
//! # The caller's paths
//!
//! A path named more than once gets one mount, the one the caller meant: a carve-out (a
//! restriction) over the workspace over a writable grant over a read-only grant over the
//! program's own file. A caller's path replaces a system mount at the same place (naming
//! `/tmp` writable gives the host's `/tmp`). Mounts are applied shallowest first, so a
//! path under another lands on top of it whichever list it came from.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The top-level directories a sandbox gets read-only, as the host has them. `/bin`,
/// `/lib*` and `/sbin` are symlinks into `/usr` on a merged-`/usr` host and directories on
/// an older one; `/opt` and `/nix/store` exist only on some hosts.
pub const SYSTEM_DIRS: &[&str] = &[
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
pub enum SystemEntry {
    /// A real directory: bound read-only.
    Dir,
    /// A symlink: recreated inside with the same target.
    Symlink(PathBuf),
    /// Not on this host.
    Absent,
}

/// How the host has `path`.
pub fn system_entry(path: &Path) -> SystemEntry {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(path) {
            Ok(target) => SystemEntry::Symlink(target),
            Err(_) => SystemEntry::Absent,
        },
        Ok(m) if m.is_dir() => SystemEntry::Dir,
        _ => SystemEntry::Absent,
    }
}

/// Each of [`SYSTEM_DIRS`] as this host has it, in that order.
pub fn system_layout() -> Vec<(PathBuf, SystemEntry)> {
    SYSTEM_DIRS
        .iter()
        .map(|d| (PathBuf::from(d), system_entry(Path::new(d))))
        .collect()
}

/// How many normal components `p` has (`/` is 0).
pub fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// Who asked for a mount; at one path the greater weight wins (the order of the variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// The sandbox's own (system directories, private tmpfs, `/proc`).
    System,
    /// The program's own file, when nothing else shows it.
    Program,
    /// A named read-only path.
    ReadOnlyPath,
    /// A named writable path.
    Writable,
    /// The workspace.
    Workspace,
    /// A read-only carve-out inside the workspace.
    Carveout,
}

impl Origin {
    /// A caller's path of this origin is bound writable.
    pub fn writable(self) -> bool {
        matches!(self, Self::Writable | Self::Workspace)
    }
}

/// One mount: what the backend does at the path (`Op` is the backend's), and who asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount<Op> {
    /// The backend's operation.
    pub op: Op,
    /// Who asked for it.
    pub origin: Origin,
}

/// The mount table being built: one mount per destination.
#[derive(Clone, Debug)]
pub struct MountTable<Op> {
    /// Destination to mount.
    pub mounts: BTreeMap<PathBuf, Mount<Op>>,
}

impl<Op> Default for MountTable<Op> {
    fn default() -> Self {
        Self {
            mounts: BTreeMap::new(),
        }
    }
}

impl<Op> MountTable<Op> {
    /// A mount of the sandbox's own at `dest` (replaces whatever was there).
    pub fn system(&mut self, dest: impl Into<PathBuf>, op: Op) {
        self.mounts.insert(
            dest.into(),
            Mount {
                op,
                origin: Origin::System,
            },
        );
    }

    /// A caller's path: replaces a system mount, and another caller's of less weight.
    pub fn caller(&mut self, dest: &Path, origin: Origin, op: Op) {
        match self.mounts.get(dest) {
            Some(m) if m.origin != Origin::System && m.origin >= origin => {}
            _ => {
                self.mounts.insert(dest.to_path_buf(), Mount { op, origin });
            }
        }
    }

    /// The deepest mount at or above `path` among those `keep` accepts.
    pub fn deepest(
        &self,
        path: &Path,
        keep: impl Fn(&Mount<Op>) -> bool,
    ) -> Option<(&Path, &Mount<Op>)> {
        self.mounts
            .iter()
            .filter(|(dest, m)| path.starts_with(dest) && keep(m))
            .max_by_key(|(dest, _)| depth(dest))
            .map(|(d, m)| (d.as_path(), m))
    }

    /// In mount order: shallowest first; at one depth, system mounts before the caller's.
    pub fn ordered(&self) -> Vec<(&PathBuf, &Mount<Op>)> {
        let mut v: Vec<_> = self.mounts.iter().collect();
        v.sort_by(|(a, ma), (b, mb)| {
            (depth(a), ma.origin != Origin::System, *a).cmp(&(
                depth(b),
                mb.origin != Origin::System,
                *b,
            ))
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_entries_are_read_not_assumed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink("usr/bin", d.path().join("link")).unwrap();
        assert_eq!(system_entry(&d.path().join("real")), SystemEntry::Dir);
        assert_eq!(
            system_entry(&d.path().join("link")),
            SystemEntry::Symlink("usr/bin".into())
        );
        assert_eq!(system_entry(&d.path().join("none")), SystemEntry::Absent);
    }

    #[test]
    fn the_heavier_caller_path_wins_and_replaces_the_system() {
        let mut t: MountTable<&str> = MountTable::default();
        t.system("/tmp", "tmpfs");
        t.caller(Path::new("/tmp"), Origin::ReadOnlyPath, "ro");
        assert_eq!(t.mounts[Path::new("/tmp")].op, "ro");
        t.caller(Path::new("/w"), Origin::Carveout, "ro");
        t.caller(Path::new("/w"), Origin::Workspace, "rw");
        assert_eq!(t.mounts[Path::new("/w")].origin, Origin::Carveout);
        t.caller(Path::new("/r"), Origin::ReadOnlyPath, "ro");
        t.caller(Path::new("/r"), Origin::Writable, "rw");
        assert_eq!(t.mounts[Path::new("/r")].op, "rw");
    }

    #[test]
    fn order_is_shallowest_first_and_deepest_finds_the_cover() {
        let mut t: MountTable<&str> = MountTable::default();
        t.caller(Path::new("/a/b/c"), Origin::Carveout, "ro");
        t.caller(Path::new("/a/b"), Origin::Workspace, "rw");
        t.system("/a", "tmpfs");
        let order: Vec<_> = t.ordered().into_iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(order, ["/a", "/a/b", "/a/b/c"].map(PathBuf::from));
        let (d, _) = t.deepest(Path::new("/a/b/x"), |_| true).unwrap();
        assert_eq!(d, Path::new("/a/b"));
        let (d, _) = t.deepest(Path::new("/a/b/x"), |m| m.op == "tmpfs").unwrap();
        assert_eq!(d, Path::new("/a"));
    }
}
