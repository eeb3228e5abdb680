//! The change set: the layer compared with the real workspace, by descriptors.
//!
//! For overlay the walk is over the upper directory only (what is not there is unchanged);
//! for a copy it is over the copy and the original side by side (what the copy lacks was
//! deleted). Files present on both sides are compared by contents, so a file the command
//! only opened for writing, or touched, is not a change.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::sys::stat::FileStat;

use super::layer::{is_opaque, Layer};
use super::LayerMechanism;
use super::{stamp_of, Change, ChangeKind};
use crate::fs::fsx::{self, Kind};
use crate::fs::tree;

fn mode(st: &FileStat) -> u32 {
    st.st_mode & 0o7777
}

struct Scan {
    overlay: bool,
    out: Vec<Change>,
    /// `(dev, ino)` of each regular file of the layer: its link count, and how many of its
    /// links the walk met.
    links: HashMap<(u64, u64), (u64, u64)>,
    /// Which changes are regular files, with their `(dev, ino)` in the layer.
    files: Vec<(usize, (u64, u64))>,
}

/// Every change the layer holds against the real workspace, in path order (at one path a
/// deletion comes first).
pub(crate) fn scan(layer: &Layer) -> io::Result<Vec<Change>> {
    let src = fsx::open_root(layer.source())?;
    let real = fsx::open_root(layer.workspace())?;
    let mut s = Scan {
        overlay: layer.mechanism() == LayerMechanism::Overlay,
        out: Vec::new(),
        links: HashMap::new(),
        files: Vec::new(),
    };
    s.walk(Path::new(""), src.as_fd(), Some(real.as_fd()))?;
    for (i, key) in std::mem::take(&mut s.files) {
        s.out[i].links = s.links.get(&key).copied().unwrap_or((1, 1));
    }
    let mut out = s.out;
    out.sort_by(|a, b| (&a.path, !a.is_deletion()).cmp(&(&b.path, !b.is_deletion())));
    Ok(out)
}

fn change(path: PathBuf, kind: ChangeKind, st: &FileStat, real: Option<&FileStat>) -> Change {
    Change {
        path,
        kind,
        size: st.st_size.max(0) as u64,
        old_mode: None,
        mode: Some(mode(st)),
        real: real.map(stamp_of),
        links: (1, 1),
    }
}

impl Scan {
    fn walk(
        &mut self,
        rel: &Path,
        src: BorrowedFd<'_>,
        real: Option<BorrowedFd<'_>>,
    ) -> io::Result<()> {
        let mut names = fsx::list(src)?;
        if !self.overlay {
            if let Some(r) = real {
                names.extend(fsx::list(r)?);
                names.sort();
                names.dedup();
            }
        }
        for name in names {
            let path = rel.join(&name);
            let s = fsx::stat_at(src, &name)?;
            let r = match real {
                Some(rd) => fsx::stat_at(rd, &name)?.map(|st| (rd, st)),
                None => None,
            };
            match (s, r) {
                (None, Some((rd, r))) => {
                    // Only in the real workspace (copy mode): deleted, unless it is a kind
                    // the copy never takes.
                    if matches!(fsx::kind(&r), Kind::File | Kind::Dir | Kind::Symlink) {
                        self.delete(rd, &name, path, &r)?;
                    }
                }
                (None, None) => {}
                (Some(s), r) => self.entry(src, &name, path, s, r)?,
            }
        }
        Ok(())
    }

    fn entry(
        &mut self,
        src: BorrowedFd<'_>,
        name: &OsString,
        path: PathBuf,
        s: FileStat,
        pair: Option<(BorrowedFd<'_>, FileStat)>,
    ) -> io::Result<()> {
        let r = pair.map(|(_, st)| st);
        match fsx::kind(&s) {
            Kind::Whiteout if self.overlay => {
                if let Some((rd, r)) = pair {
                    self.delete(rd, name, path, &r)?;
                }
            }
            Kind::Dir => {
                let sub = fsx::open_dir_at(src, name)?;
                let opaque = self.overlay && is_opaque(sub.as_fd());
                if let Some((rd, r)) = pair.filter(|(_, r)| fsx::kind(r) == Kind::Dir) {
                    let rsub = fsx::open_dir_at(rd, name)?;
                    if mode(&r) != mode(&s) {
                        let mut c = change(path.clone(), ChangeKind::ModeChanged, &s, Some(&r));
                        c.old_mode = Some(mode(&r));
                        c.size = 0;
                        self.out.push(c);
                    }
                    if opaque {
                        self.delete_children(rsub.as_fd(), &path)?;
                        self.walk(&path, sub.as_fd(), None)?;
                    } else {
                        self.walk(&path, sub.as_fd(), Some(rsub.as_fd()))?;
                    }
                } else {
                    if let Some((rd, r)) = pair {
                        self.delete(rd, name, path.clone(), &r)?;
                    }
                    let mut c = change(path.clone(), ChangeKind::DirAdded, &s, r.as_ref());
                    c.size = 0;
                    self.out.push(c);
                    self.walk(&path, sub.as_fd(), None)?;
                }
            }
            Kind::File => {
                let key = (s.st_dev, s.st_ino);
                let e = self.links.entry(key).or_insert((s.st_nlink, 0));
                e.1 += 1;
                let kind = match pair.map(|(rd, r)| (rd, fsx::kind(&r), r)) {
                    Some((rd, Kind::File, r)) => {
                        let same = r.st_size == s.st_size
                            && tree::same_contents(
                                &fsx::open_file_at(src, name)?,
                                &fsx::open_file_at(rd, name)?,
                            )?;
                        if !same {
                            Some(ChangeKind::Modified)
                        } else if mode(&r) != mode(&s) {
                            Some(ChangeKind::ModeChanged)
                        } else {
                            None
                        }
                    }
                    Some((rd, Kind::Dir, r)) => {
                        self.delete(rd, name, path.clone(), &r)?;
                        Some(ChangeKind::Added)
                    }
                    Some(_) => Some(ChangeKind::Modified),
                    None => Some(ChangeKind::Added),
                };
                if let Some(kind) = kind {
                    let mut c = change(path, kind, &s, r.as_ref());
                    if let Some(r) = r.as_ref().filter(|r| fsx::kind(r) == Kind::File) {
                        if mode(r) != mode(&s) {
                            c.old_mode = Some(mode(r));
                        }
                    }
                    self.files.push((self.out.len(), key));
                    self.out.push(c);
                }
            }
            Kind::Symlink => {
                let target = PathBuf::from(
                    nix::fcntl::readlinkat(src, name.as_os_str()).map_err(fsx::nix_io)?,
                );
                if let Some((rd, _)) = pair.filter(|(_, r)| fsx::kind(r) == Kind::Symlink) {
                    let old = nix::fcntl::readlinkat(rd, name.as_os_str()).map_err(fsx::nix_io)?;
                    if Path::new(&old) == target {
                        return Ok(());
                    }
                }
                if let Some((rd, r)) = pair.filter(|(_, r)| fsx::kind(r) == Kind::Dir) {
                    self.delete(rd, name, path.clone(), &r)?;
                }
                let mut c = change(path, ChangeKind::Symlink { target }, &s, r.as_ref());
                c.mode = None;
                self.out.push(c);
            }
            Kind::Whiteout | Kind::Special => {
                self.out
                    .push(change(path, ChangeKind::Special, &s, r.as_ref()));
            }
        }
        Ok(())
    }

    /// `name` in the real directory `dir` is gone: it, and everything beneath if it is a
    /// directory.
    fn delete(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsString,
        path: PathBuf,
        st: &FileStat,
    ) -> io::Result<()> {
        let is_dir = fsx::kind(st) == Kind::Dir;
        if is_dir {
            let sub = fsx::open_dir_at(dir, name)?;
            self.delete_children(sub.as_fd(), &path)?;
        }
        let mut c = change(path, ChangeKind::Deleted { dir: is_dir }, st, Some(st));
        c.mode = None;
        if is_dir {
            c.size = 0;
        }
        self.out.push(c);
        Ok(())
    }

    fn delete_children(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> io::Result<()> {
        for name in fsx::list(dir)? {
            if let Some(st) = fsx::stat_at(dir, &name)? {
                self.delete(dir, &name, rel.join(&name), &st)?;
            }
        }
        Ok(())
    }
}
