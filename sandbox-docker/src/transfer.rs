//! Copy mode's file work: the archive a tree is uploaded as, and applying the archive the
//! engine gives back to the host tree. Plain blocking I/O on `Read`/`Write`, so it is
//! tested on temp dirs without an engine.
//!
//! # Safety of the write-back
//!
//! The archive describes a tree the sandboxed command controlled, and is applied by a host
//! process that may be root. So every entry is checked: its path must be relative with
//! only normal components; each of its parent directories on the host must be a real
//! directory, never a symlink (a planted `link -> /etc` followed by `link/passwd` would
//! otherwise write through it); files are written to a temp file and renamed over the
//! target, which replaces a symlink instead of following it; setuid, setgid and sticky
//! bits are dropped; fifos and devices are ignored. Both directions are walked with
//! descriptors (core's [`tree`]): the upload never follows a symlink, and the write-back
//! resolves each parent beneath the tree's descriptor with `RESOLVE_NO_SYMLINKS`, so a
//! link swapped in by a command still running in the same workspace is never followed. Only paths that were uploaded and are
//! missing from the archive are deleted, so a file the command could not see is never
//! removed, and carve-outs and nested handovers are never touched.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sandbox_host::process::tree::{self, Budget, Meta, Source, Visit};

/// Where an upload is unpacked: the container's root. The engine refuses a symlink whose
/// target climbs above the directory it unpacks into, so unpacking into the loader's
/// `/.sandbox-load` made a workspace holding `up -> ../../x` fail to run at all (bwrap and
/// landlock copy it as a link, unchanged). Unpacked at `/`, no target climbs above it and
/// links arrive unchanged; [`Upload::top`] is then the mount point without its leading `/`.
pub(crate) const UPLOAD_TO: &str = "/";

/// How one tree is uploaded.
#[derive(Clone, Debug)]
pub(crate) struct Upload {
    /// The host tree.
    pub root: PathBuf,
    /// The archive's top directory: the loader's mount point for the tree's volume, as a
    /// name relative to [`UPLOAD_TO`].
    pub top: String,
    /// Owner of every entry (a writable tree: the command's uid), or `None` to keep each
    /// file's host owner (a read-only tree keeps its host permissions).
    pub owner: Option<(u32, u32)>,
    /// Relative paths that go in owned by root and without write permission (carve-outs of
    /// a copied workspace).
    pub read_only_inside: Vec<PathBuf>,
    /// The group of `read_only_inside` entries, so the command can still read them.
    pub read_only_group: u32,
    /// Relative paths left out, with everything under them (nested handovers).
    pub skip: Vec<PathBuf>,
}

/// The owner's read and execute bits, given to the group and kept for others: readable
/// and searchable as before, writable by nobody.
fn read_only_mode(mode: u32) -> u32 {
    let owner = (mode >> 6) & 0o5;
    (owner << 6) | (owner << 3) | (mode & 0o5)
}

/// Write the archive of `up` to `out`; returns the relative paths it holds (for telling,
/// after the run, what the command deleted). The walk is core's [`tree::walk`]: links are
/// archived as links, fifos and devices left out, and the size capped.
pub(crate) fn write_archive<W: Write>(up: &Upload, out: W) -> io::Result<BTreeSet<PathBuf>> {
    let mut v = Archiver {
        b: tar::Builder::new(out),
        up,
        seen: BTreeSet::new(),
    };
    v.b.follow_symlinks(false);
    tree::walk(&up.root, &Budget::default(), &mut v)?;
    v.b.into_inner()?.flush()?;
    Ok(v.seen)
}

struct Archiver<'a, W: Write> {
    b: tar::Builder<W>,
    up: &'a Upload,
    seen: BTreeSet<PathBuf>,
}

impl<W: Write> Archiver<'_, W> {
    fn skipped(&self, rel: &Path) -> bool {
        !rel.as_os_str().is_empty() && self.up.skip.iter().any(|s| rel.starts_with(s))
    }

    fn header(&mut self, rel: &Path, meta: &Meta) -> (tar::Header, PathBuf) {
        let up = self.up;
        let ro = up.read_only_inside.iter().any(|p| rel.starts_with(p));
        let (uid, gid, mode) = if ro {
            (0, up.read_only_group, read_only_mode(meta.mode))
        } else {
            let (u, g) = up.owner.unwrap_or((meta.uid, meta.gid));
            (u, g, tree::plain(meta.mode))
        };
        let mut h = tar::Header::new_gnu();
        h.set_uid(uid.into());
        h.set_gid(gid.into());
        h.set_mode(mode);
        h.set_mtime(meta.mtime.max(0) as u64);
        if !rel.as_os_str().is_empty() {
            self.seen.insert(rel.to_path_buf());
        }
        (h, Path::new(&up.top).join(rel))
    }
}

impl<W: Write> Visit for Archiver<'_, W> {
    fn enter_dir(&mut self, rel: &Path, meta: &Meta) -> io::Result<bool> {
        if self.skipped(rel) {
            return Ok(false);
        }
        let (mut h, name) = self.header(rel, meta);
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        self.b.append_data(&mut h, &name, io::empty())?;
        Ok(true)
    }

    fn leave_dir(&mut self, _: &Path, _: &Meta) -> io::Result<()> {
        Ok(())
    }

    fn file(&mut self, rel: &Path, meta: &Meta, src: &mut Source<'_>) -> io::Result<()> {
        if self.skipped(rel) {
            return Ok(());
        }
        let (mut h, name) = self.header(rel, meta);
        let len = src.len();
        // The engine unpacks an upload densely (Go's archive/tar fills holes with zeros,
        // whatever the archive says), so a file costs its whole length on the engine's
        // disk: it is charged at that length, and one longer than the cap is refused
        // before a byte is sent.
        src.reserve(len)?;
        h.set_entry_type(tar::EntryType::Regular);
        // The size is the one the open file had; a file that shrinks meanwhile is padded,
        // so the header never lies about what follows.
        h.set_size(len);
        let body = (&mut *src).chain(io::repeat(0)).take(len);
        self.b.append_data(&mut h, &name, body)
    }

    fn symlink(&mut self, rel: &Path, meta: &Meta, target: &Path) -> io::Result<()> {
        if self.skipped(rel) {
            return Ok(());
        }
        let (mut h, name) = self.header(rel, meta);
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        self.b.append_link(&mut h, &name, target)
    }
}

/// How the changes came back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Files, directories and links written or replaced.
    pub written: usize,
    /// Paths removed because the command removed them.
    pub removed: usize,
}

/// Where the write-back goes.
#[derive(Clone, Debug)]
pub(crate) struct WriteBack<'a> {
    /// The host tree.
    pub root: &'a Path,
    /// What was uploaded (relative): the only paths a missing entry may delete.
    pub uploaded: &'a BTreeSet<PathBuf>,
    /// Relative paths never touched (carve-outs, nested handovers).
    pub keep: &'a [PathBuf],
    /// When the host runs as root: the owner for new entries (the tree's owner).
    pub chown_new: Option<(u32, u32)>,
}

/// The entry's path below the archive's top directory, or `None` for the top itself.
fn below_top(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut comps = path.components();
    match comps.next() {
        Some(Component::Normal(_)) => {}
        Some(Component::CurDir) => return below_top(comps.as_path()),
        _ => return Err(bad_path(path)),
    }
    let rest = comps.as_path();
    if rest.as_os_str().is_empty() {
        return Ok(None);
    }
    if rest
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(bad_path(path));
    }
    Ok(Some(rest.to_path_buf()))
}

fn bad_path(p: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the archive holds an unsafe path: {}", p.display()),
    )
}

/// The directory that holds `rel`, opened beneath `root` without following any symlink
/// (a planted `link -> /etc` then `link/passwd` is refused), and `rel`'s last name.
fn parent_of<'r>(root: &OwnedFd, rel: &'r Path) -> io::Result<(OwnedFd, &'r OsStr)> {
    let name = rel.file_name().ok_or_else(|| bad_path(rel))?;
    let parent = tree::open_beneath(root, rel.parent().unwrap_or(Path::new("")))?;
    Ok((parent, name))
}

fn stat_at(dir: &OwnedFd, name: &OsStr) -> Option<rustix::fs::Stat> {
    tree::stat_at(dir, name).ok().flatten()
}

fn is(st: &rustix::fs::Stat, ty: FileType) -> bool {
    FileType::from_raw_mode(st.st_mode) == ty
}

fn chmod_at(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let fd = tree::open_nofollow(dir, name)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    Ok(())
}

/// Copy `from` into `to` keeping blocks of zeros as holes; returns the length.
fn copy_sparse_from(mut from: impl Read, to: &File) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        tree::write_sparse(to, &buf[..n], off)?;
        off += n as u64;
    }
    rustix::fs::ftruncate(to, off)?;
    Ok(off)
}

/// Put a regular file at `name` in `dir` (where `old` was): filled from `from`, with
/// `mode` and `mtime`, beside it and renamed over it. A file already there with the same
/// bytes is kept (its inode too), given `mode`; `false` then.
fn put_file(
    dir: &OwnedFd,
    name: &OsStr,
    old: Option<&rustix::fs::Stat>,
    mode: u32,
    mtime: Option<u64>,
    from: impl Read,
) -> io::Result<bool> {
    let new = tree::Beside::create(dir.as_fd())?;
    copy_sparse_from(from, new.file())?;
    rustix::fs::fchmod(new.file(), Mode::from_raw_mode(mode))?;
    if let Some(mtime) = mtime {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
        new.file().set_modified(t)?;
    }
    if new.same_as(name)? {
        if old.is_some_and(|m| tree::plain(m.st_mode) != mode) {
            chmod_at(dir, name, mode)?;
        }
        return Ok(false);
    }
    if old.is_some_and(|m| is(m, FileType::Directory)) {
        tree::remove_at(dir, name)?;
    }
    new.rename_over(name)?;
    Ok(true)
}

/// Apply the archive the engine returned for a tree to the host tree (see the module docs).
pub(crate) fn apply_archive<R: Read>(archive: R, to: &WriteBack<'_>) -> io::Result<Applied> {
    let root = rustix::fs::open(
        to.root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let is_root = nix::unistd::geteuid().is_root();
    let mut applied = Applied::default();
    let mut present = BTreeSet::new();
    let mut ar = tar::Archive::new(archive);
    for entry in ar.entries()? {
        let mut entry = entry?;
        let Some(rel) = below_top(&entry.path()?)? else {
            continue;
        };
        if to.keep.iter().any(|k| rel.starts_with(k)) {
            continue;
        }
        let ty = entry.header().entry_type();
        let mode = tree::plain(entry.header().mode()?);
        let (dir, name) = parent_of(&root, &rel)?;
        let old = stat_at(&dir, name);
        let owner = old.as_ref().map(|m| (m.st_uid, m.st_gid)).or(to.chown_new);
        match ty {
            tar::EntryType::Directory => {
                present.insert(rel.clone());
                match &old {
                    Some(m) if is(m, FileType::Directory) => {
                        if tree::plain(m.st_mode) != mode {
                            chmod_at(&dir, name, mode)?;
                        }
                        continue;
                    }
                    Some(_) => tree::remove_at(&dir, name)?,
                    None => {}
                }
                rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700))?;
                chmod_at(&dir, name, mode)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                present.insert(rel.clone());
                let mtime = entry.header().mtime().ok();
                if !put_file(&dir, name, old.as_ref(), mode, mtime, &mut entry)? {
                    continue;
                }
            }
            tar::EntryType::Symlink => {
                present.insert(rel.clone());
                let Some(link) = entry.link_name()? else {
                    continue;
                };
                if old.as_ref().is_some_and(|m| is(m, FileType::Symlink))
                    && rustix::fs::readlinkat(&dir, name, Vec::new())?.as_bytes()
                        == link.as_os_str().as_bytes()
                {
                    continue;
                }
                if old.is_some() {
                    tree::remove_at(&dir, name)?;
                }
                rustix::fs::symlinkat(link.as_ref(), &dir, name)?;
            }
            tar::EntryType::Link => {
                // A second name for a file earlier in the archive: copied, never linked to
                // something outside the tree.
                present.insert(rel.clone());
                let Some(link) = entry.link_name()? else {
                    continue;
                };
                let Some(src_rel) = below_top(&link)? else {
                    continue;
                };
                let (src_dir, src_name) = parent_of(&root, &src_rel)?;
                if !stat_at(&src_dir, src_name).is_some_and(|m| is(&m, FileType::RegularFile)) {
                    continue;
                }
                let src = File::from(tree::open_nofollow(&src_dir, src_name)?);
                if !is(&rustix::fs::fstat(&src)?, FileType::RegularFile) {
                    continue;
                }
                let mtime = entry.header().mtime().ok();
                if !put_file(&dir, name, old.as_ref(), mode, mtime, &src)? {
                    continue;
                }
            }
            // Devices, fifos and anything else do not come back.
            _ => continue,
        }
        applied.written += 1;
        if let Some((uid, gid)) = owner {
            if is_root {
                rustix::fs::chownat(
                    &dir,
                    name,
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                )?;
            }
        }
    }
    // Deletions: children before their parents.
    for rel in to.uploaded.iter().rev() {
        if present.contains(rel) || to.keep.iter().any(|k| rel.starts_with(k)) {
            continue;
        }
        // A parent replaced by a file or link took its children with it.
        let Ok((dir, name)) = parent_of(&root, rel) else {
            continue;
        };
        if stat_at(&dir, name).is_some() {
            tree::remove_at(&dir, name)?;
            applied.removed += 1;
        }
    }
    Ok(applied)
}

/// The contents of the one regular file in an archive, up to `cap` bytes; `None` for a
/// directory, a link or anything else.
pub(crate) fn single_file<R: Read>(archive: R, cap: usize) -> io::Result<Option<Vec<u8>>> {
    let mut ar = tar::Archive::new(archive);
    if let Some(entry) = ar.entries()?.next() {
        let entry = entry?;
        if entry.header().entry_type() == tar::EntryType::Regular {
            let mut buf = Vec::new();
            entry.take(cap as u64).read_to_end(&mut buf)?;
            return Ok(Some(buf));
        }
    }
    Ok(None)
}

/// A `Write` that hands chunks to an async consumer: the archive is built on a blocking
/// thread while the upload streams it, so a large workspace is never held in memory.
#[derive(Debug)]
pub(crate) struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, io::Error>>,
    buf: Vec<u8>,
}

const CHUNK: usize = 256 * 1024;

impl ChannelWriter {
    /// A writer sending into `tx`.
    pub(crate) fn new(tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, io::Error>>) -> Self {
        Self {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = bytes::Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("src/deep")).unwrap();
        fs::write(r.join("src/a.txt"), b"alpha").unwrap();
        fs::write(r.join("src/deep/b.txt"), b"beta").unwrap();
        fs::create_dir_all(r.join(".git/hooks")).unwrap();
        fs::write(r.join(".git/hooks/pre-commit"), b"#!/bin/sh\n").unwrap();
        fs::write(r.join("suid"), b"x").unwrap();
        fs::set_permissions(r.join("suid"), fs::Permissions::from_mode(0o4755)).unwrap();
        symlink("src/a.txt", r.join("link")).unwrap();
        fs::create_dir(r.join("nested")).unwrap();
        fs::write(r.join("nested/inner"), b"not uploaded").unwrap();
        d
    }

    fn upload(root: &Path) -> Upload {
        Upload {
            root: root.to_path_buf(),
            top: "0".into(),
            owner: Some((1234, 1234)),
            read_only_inside: vec![PathBuf::from(".git/hooks")],
            read_only_group: 1234,
            skip: vec![PathBuf::from("nested")],
        }
    }

    struct Entry {
        path: String,
        uid: u64,
        gid: u64,
        mode: u32,
        ty: tar::EntryType,
    }

    fn entries(bytes: &[u8]) -> Vec<Entry> {
        let mut ar = tar::Archive::new(bytes);
        ar.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                Entry {
                    path: e.path().unwrap().display().to_string(),
                    uid: h.uid().unwrap(),
                    gid: h.gid().unwrap(),
                    mode: h.mode().unwrap(),
                    ty: h.entry_type(),
                }
            })
            .collect()
    }

    #[test]
    fn the_upload_is_owned_by_the_command_uid_with_carveouts_root_owned_and_read_only() {
        let d = tree();
        let mut out = Vec::new();
        let seen = write_archive(&upload(d.path()), &mut out).unwrap();
        let es = entries(&out);
        let get = |p: &str| {
            es.iter()
                .find(|e| e.path.trim_end_matches('/') == p)
                .unwrap_or_else(|| panic!("no {p}"))
        };
        assert_eq!((get("0").uid, get("0").gid), (1234, 1234));
        assert_eq!(get("0/src/a.txt").uid, 1234);
        let hook = get("0/.git/hooks/pre-commit");
        assert_eq!((hook.uid, hook.gid), (0, 1234));
        assert_eq!(hook.mode & 0o222, 0, "carve-outs carry no write bit");
        assert_eq!(hook.mode & 0o044, 0o044, "but stay readable by the group");
        let hooks = get("0/.git/hooks");
        assert_eq!((hooks.uid, hooks.mode & 0o222), (0, 0));
        assert_eq!(get("0/suid").mode & 0o7000, 0, "no setuid bit crosses");
        assert_eq!(get("0/link").ty, tar::EntryType::Symlink);
        assert!(es.iter().all(|e| !e.path.contains("nested")));
        assert!(seen.contains(Path::new("src/deep/b.txt")));
        assert!(!seen.contains(Path::new("nested")));
    }

    #[test]
    fn a_read_only_tree_keeps_its_host_owners() {
        let d = tree();
        let mut up = upload(d.path());
        up.owner = None;
        let mut out = Vec::new();
        write_archive(&up, &mut out).unwrap();
        let me = nix::unistd::geteuid().as_raw() as u64;
        assert!(entries(&out)
            .iter()
            .filter(|e| !e.path.contains(".git/hooks"))
            .all(|e| e.uid == me));
    }

    /// The archive the engine would return for the tree after `change` ran on a copy.
    fn returned(src: &Path, change: impl FnOnce(&Path)) -> (Vec<u8>, BTreeSet<PathBuf>) {
        let copy = tempfile::tempdir().unwrap();
        let mut first = Vec::new();
        let mut up = upload(src);
        up.read_only_inside.clear();
        let seen = write_archive(&up, &mut first).unwrap();
        tar::Archive::new(&first[..]).unpack(copy.path()).unwrap();
        change(&copy.path().join("0"));
        let mut again = Vec::new();
        let mut up2 = upload(&copy.path().join("0"));
        up2.top = "ws".into();
        up2.read_only_inside.clear();
        up2.skip.clear();
        write_archive(&up2, &mut again).unwrap();
        (again, seen)
    }

    fn write_back(root: &Path, archive: &[u8], uploaded: &BTreeSet<PathBuf>) -> Applied {
        let keep = vec![PathBuf::from(".git/hooks"), PathBuf::from("nested")];
        apply_archive(
            archive,
            &WriteBack {
                root,
                uploaded,
                keep: &keep,
                chown_new: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn changes_come_back_and_untouched_files_keep_their_inode() {
        let d = tree();
        let ino = fs::metadata(d.path().join("src/deep/b.txt")).unwrap().ino();
        let (ar, seen) = returned(d.path(), |c| {
            fs::write(c.join("src/a.txt"), b"ALPHA").unwrap();
            fs::write(c.join("new.txt"), b"new").unwrap();
            fs::remove_file(c.join("link")).unwrap();
            fs::remove_dir_all(c.join("src/deep")).unwrap();
            fs::create_dir(c.join("src/deep")).unwrap();
            fs::write(c.join("src/deep/b.txt"), b"beta").unwrap();
        });
        let applied = write_back(d.path(), &ar, &seen);
        let r = d.path();
        assert_eq!(fs::read(r.join("src/a.txt")).unwrap(), b"ALPHA");
        assert_eq!(fs::read(r.join("new.txt")).unwrap(), b"new");
        assert!(fs::symlink_metadata(r.join("link")).is_err(), "deleted");
        assert_eq!(
            fs::metadata(r.join("src/deep/b.txt")).unwrap().ino(),
            ino,
            "same content: left alone"
        );
        // Never uploaded, so never deleted; carve-outs untouched.
        assert_eq!(fs::read(r.join("nested/inner")).unwrap(), b"not uploaded");
        assert!(r.join(".git/hooks/pre-commit").exists());
        assert!(applied.written >= 2 && applied.removed == 1, "{applied:?}");
    }

    #[test]
    fn a_carveout_changed_inside_is_not_written_back() {
        let d = tree();
        let (ar, seen) = returned(d.path(), |c| {
            fs::write(c.join(".git/hooks/pre-commit"), b"evil").unwrap();
            fs::write(c.join(".git/hooks/post-checkout"), b"evil").unwrap();
        });
        write_back(d.path(), &ar, &seen);
        assert_eq!(
            fs::read(d.path().join(".git/hooks/pre-commit")).unwrap(),
            b"#!/bin/sh\n"
        );
        assert!(!d.path().join(".git/hooks/post-checkout").exists());
    }

    #[test]
    fn setuid_bits_do_not_come_back() {
        let d = tree();
        let (ar, seen) = returned(d.path(), |c| {
            fs::write(c.join("planted"), b"x").unwrap();
            fs::set_permissions(c.join("planted"), fs::Permissions::from_mode(0o755)).unwrap();
        });
        // Forge the setuid bit in the returned archive, as a hostile engine image might.
        let mut forged = tar::Builder::new(Vec::new());
        for e in tar::Archive::new(&ar[..]).entries().unwrap() {
            let mut e = e.unwrap();
            let mut h = e.header().clone();
            if e.path().unwrap().ends_with("planted") {
                h.set_mode(0o4755);
                h.set_cksum();
            }
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            forged.append(&h, &data[..]).unwrap();
        }
        let forged = forged.into_inner().unwrap();
        write_back(d.path(), &forged, &seen);
        let m = fs::metadata(d.path().join("planted")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
    }

    #[test]
    fn writes_through_a_planted_symlink_are_refused() {
        let d = tree();
        let outside = tempfile::tempdir().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, "ws/esc", outside.path()).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(4);
        h.set_mode(0o644);
        b.append_data(&mut h, "ws/esc/owned", &b"evil"[..]).unwrap();
        let ar = b.into_inner().unwrap();
        let seen = BTreeSet::new();
        let keep = Vec::new();
        let e = apply_archive(
            &ar[..],
            &WriteBack {
                root: d.path(),
                uploaded: &seen,
                keep: &keep,
                chown_new: None,
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(!outside.path().join("owned").exists());
    }

    #[test]
    fn a_file_longer_than_the_cap_is_refused_before_it_is_sent() {
        let d = tempfile::tempdir().unwrap();
        let f = fs::File::create(d.path().join("hole")).unwrap();
        // Sparse: nothing allocated, but the engine would unpack all of it.
        f.set_len(sandbox_host::process::tree::MAX_COPY_BYTES + 1)
            .unwrap();
        drop(f);
        let mut up = upload(d.path());
        up.skip.clear();
        up.read_only_inside.clear();
        let mut out = Vec::new();
        let e = write_archive(&up, &mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert!(e.to_string().contains("MAX_COPY_BYTES"), "{e}");
        assert!(out.len() < 1 << 20, "{} bytes were sent", out.len());
    }

    #[test]
    fn zeros_written_back_become_holes() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        fs::create_dir(&src).unwrap();
        let mut data = vec![0u8; 8 << 20];
        data[0] = 1;
        data[(8 << 20) - 1] = 2;
        fs::write(src.join("f"), &data).unwrap();
        let mut out = Vec::new();
        let mut up = upload(&src);
        up.skip.clear();
        up.read_only_inside.clear();
        write_archive(&up, &mut out).unwrap();
        let back = d.path().join("back");
        fs::create_dir(&back).unwrap();
        let seen = BTreeSet::new();
        apply_archive(
            &out[..],
            &WriteBack {
                root: &back,
                uploaded: &seen,
                keep: &[],
                chown_new: None,
            },
        )
        .unwrap();
        assert_eq!(fs::read(back.join("f")).unwrap(), data);
        assert!(fs::metadata(back.join("f")).unwrap().blocks() * 512 < 1 << 20);
    }

    #[test]
    fn dotdot_paths_are_refused() {
        assert!(below_top(Path::new("ws/../etc/passwd")).is_err());
        assert!(below_top(Path::new("/etc/passwd")).is_err());
        assert_eq!(below_top(Path::new("ws/")).unwrap(), None);
        assert_eq!(
            below_top(Path::new("./ws/a/b")).unwrap(),
            Some(PathBuf::from("a/b"))
        );
    }

    #[test]
    fn a_single_captured_file_is_read_up_to_the_cap() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(10);
        h.set_mode(0o644);
        b.append_data(&mut h, "f", &b"0123456789"[..]).unwrap();
        let ar = b.into_inner().unwrap();
        assert_eq!(single_file(&ar[..], 4).unwrap().unwrap(), b"0123");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "f", "/etc/shadow").unwrap();
        let ar = b.into_inner().unwrap();
        assert_eq!(single_file(&ar[..], 4).unwrap(), None);
    }
}
