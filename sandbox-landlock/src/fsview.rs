//! The one seam between the policy and the filesystem.
//!
//! The ruleset is a function of the plan *and* of what is on disk (is this path a file or a
//! directory, what sits next to a carve-out, which system files only root may read), so
//! the policy functions read the disk through [`FsView`] and their tests hand them a
//! made-up tree instead of the host's.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What kind of thing a path names. Landlock treats directories (rules reach everything
/// beneath) and everything else (rules reach that one file, with file rights only)
/// differently; symlinks never carry a rule, since the kernel judges the path they resolve
/// to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
    /// FIFOs, sockets and device nodes.
    Special,
}

/// The facts the policy needs about one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Hard-link count.
    pub nlink: u64,
}

/// One entry of a directory, not followed if it is a symlink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: OsString,
    pub meta: Meta,
}

/// Read-only questions about the filesystem.
pub(crate) trait FsView {
    /// The path's metadata, following symlinks (as `open(O_PATH)` does when a rule is made).
    fn stat(&self, path: &Path) -> io::Result<Meta>;
    /// The path with every symlink resolved.
    fn canonical(&self, path: &Path) -> io::Result<PathBuf>;
    /// The entries of a directory, not following symlinks, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>>;
}

/// The host's filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostFs;

fn meta(m: &fs::Metadata) -> Meta {
    let t = m.file_type();
    let kind = if t.is_symlink() {
        Kind::Symlink
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        // FIFOs, sockets, character and block devices.
        Kind::Special
    };
    Meta {
        kind,
        mode: m.mode() & 0o7777,
        nlink: m.nlink(),
    }
}

impl FsView for HostFs {
    fn stat(&self, path: &Path) -> io::Result<Meta> {
        fs::metadata(path).map(|m| meta(&m))
    }

    fn canonical(&self, path: &Path) -> io::Result<PathBuf> {
        path.canonicalize()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            // `DirEntry::metadata` is an `fstatat(AT_SYMLINK_NOFOLLOW)` on the open
            // directory: no path walk per entry.
            let m = e.metadata()?;
            out.push(Entry {
                name: e.file_name(),
                meta: meta(&m),
            });
        }
        Ok(out)
    }
}

/// A made-up tree for the policy's unit tests.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::collections::BTreeMap;

    /// Paths to metadata; symlinks map to their target in `links`.
    #[derive(Debug, Default)]
    pub(crate) struct FakeFs {
        pub nodes: BTreeMap<PathBuf, Meta>,
        pub links: BTreeMap<PathBuf, PathBuf>,
    }

    impl FakeFs {
        pub fn new() -> Self {
            let mut f = Self::default();
            f.dir("/", 0o755);
            f
        }
        fn add(&mut self, p: &str, kind: Kind, mode: u32, nlink: u64) -> &mut Self {
            let p = PathBuf::from(p);
            // Parents exist as public directories unless given.
            let mut a = p.parent();
            while let Some(d) = a {
                self.nodes.entry(d.to_path_buf()).or_insert(Meta {
                    kind: Kind::Dir,
                    mode: 0o755,
                    nlink: 1,
                });
                a = d.parent();
            }
            self.nodes.insert(p, Meta { kind, mode, nlink });
            self
        }
        pub fn dir(&mut self, p: &str, mode: u32) -> &mut Self {
            self.add(p, Kind::Dir, mode, 1)
        }
        pub fn file(&mut self, p: &str, mode: u32) -> &mut Self {
            self.add(p, Kind::File, mode, 1)
        }
        pub fn linked_file(&mut self, p: &str, nlink: u64) -> &mut Self {
            self.add(p, Kind::File, 0o644, nlink)
        }
        pub fn special(&mut self, p: &str, mode: u32) -> &mut Self {
            self.add(p, Kind::Special, mode, 1)
        }
        pub fn symlink(&mut self, p: &str, target: &str) -> &mut Self {
            self.add(p, Kind::Symlink, 0o777, 1);
            self.links.insert(PathBuf::from(p), PathBuf::from(target));
            self
        }
    }

    impl FsView for FakeFs {
        fn stat(&self, path: &Path) -> io::Result<Meta> {
            let c = self.canonical(path)?;
            self.nodes
                .get(&c)
                .copied()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn canonical(&self, path: &Path) -> io::Result<PathBuf> {
            let mut out = PathBuf::from("/");
            for c in path.components().skip(1) {
                out.push(c);
                if let Some(t) = self.links.get(&out) {
                    out = if t.is_absolute() {
                        t.clone()
                    } else {
                        out.parent().unwrap_or(Path::new("/")).join(t)
                    };
                }
                if !self.nodes.contains_key(&out) {
                    return Err(io::ErrorKind::NotFound.into());
                }
            }
            Ok(out)
        }
        fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
            Ok(self
                .nodes
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir) && p.as_path() != dir)
                .map(|(p, m)| Entry {
                    name: p.file_name().unwrap_or_default().to_owned(),
                    meta: *m,
                })
                .collect())
        }
    }
}
