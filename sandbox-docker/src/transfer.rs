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
//! bits are dropped; fifos and devices are ignored. Only paths that were uploaded and are
//! missing from the archive are deleted, so a file the command could not see is never
//! removed, and carve-outs and nested handovers are never touched.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// How one tree is uploaded.
#[derive(Clone, Debug)]
pub(crate) struct Upload {
    /// The host tree.
    pub root: PathBuf,
    /// The archive's top directory: the loader's mount point for the tree's volume, as a
    /// name relative to the upload destination.
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

/// The permission bits kept: no setuid, setgid or sticky bit crosses in either direction.
fn plain(mode: u32) -> u32 {
    mode & 0o777
}

/// The owner's read and execute bits, given to the group and kept for others: readable
/// and searchable as before, writable by nobody.
fn read_only_mode(mode: u32) -> u32 {
    let owner = (mode >> 6) & 0o5;
    (owner << 6) | (owner << 3) | (mode & 0o5)
}

/// Write the archive of `up` to `out`; returns the relative paths it holds (for telling,
/// after the run, what the command deleted).
pub(crate) fn write_archive<W: Write>(up: &Upload, out: W) -> io::Result<BTreeSet<PathBuf>> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    let mut seen = BTreeSet::new();
    let meta = fs::symlink_metadata(&up.root)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            up.root.display()
        )));
    }
    append(&mut b, up, Path::new(""), &meta, &mut seen)?;
    walk(&mut b, up, Path::new(""), &mut seen)?;
    b.into_inner()?.flush()?;
    Ok(seen)
}

fn walk<W: Write>(
    b: &mut tar::Builder<W>,
    up: &Upload,
    rel: &Path,
    seen: &mut BTreeSet<PathBuf>,
) -> io::Result<()> {
    let dir = up.root.join(rel);
    let mut entries = fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    entries.sort();
    for name in entries {
        let child = rel.join(&name);
        if up.skip.iter().any(|s| child.starts_with(s)) {
            continue;
        }
        let meta = fs::symlink_metadata(up.root.join(&child))?;
        let ty = meta.file_type();
        if !(ty.is_dir() || ty.is_file() || ty.is_symlink()) {
            // Sockets, fifos and devices do not travel.
            continue;
        }
        append(b, up, &child, &meta, seen)?;
        if ty.is_dir() {
            walk(b, up, &child, seen)?;
        }
    }
    Ok(())
}

fn append<W: Write>(
    b: &mut tar::Builder<W>,
    up: &Upload,
    rel: &Path,
    meta: &fs::Metadata,
    seen: &mut BTreeSet<PathBuf>,
) -> io::Result<()> {
    let name = Path::new(&up.top).join(rel);
    let ro = up.read_only_inside.iter().any(|p| rel.starts_with(p));
    let (uid, gid, mode) = if ro {
        (0, up.read_only_group, read_only_mode(meta.mode()))
    } else {
        let (u, g) = up.owner.unwrap_or((meta.uid(), meta.gid()));
        (u, g, plain(meta.mode()))
    };
    let mut h = tar::Header::new_gnu();
    h.set_uid(uid.into());
    h.set_gid(gid.into());
    h.set_mode(mode);
    h.set_mtime(meta.mtime().max(0) as u64);
    let full = up.root.join(rel);
    let ty = meta.file_type();
    if ty.is_dir() {
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        b.append_data(&mut h, &name, io::empty())?;
    } else if ty.is_symlink() {
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        let target = fs::read_link(&full)?;
        b.append_link(&mut h, &name, target)?;
    } else {
        h.set_entry_type(tar::EntryType::Regular);
        let f = fs::File::open(&full)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", full.display())))?;
        // The size is taken from the open file, so a file that changes while we read it
        // cannot make the header lie about what follows.
        let len = f.metadata()?.len();
        h.set_size(len);
        b.append_data(&mut h, &name, f.take(len))?;
    }
    if !rel.as_os_str().is_empty() {
        seen.insert(rel.to_path_buf());
    }
    Ok(())
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

/// Every parent of `rel` under `root` must be a real directory: never follow a symlink.
fn check_parents(root: &Path, rel: &Path) -> io::Result<()> {
    let mut cur = root.to_path_buf();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            cur.push(c);
            let m = fs::symlink_metadata(&cur)?;
            if !m.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a directory on the host; refusing to write below it",
                        cur.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn temp_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.sandbox-{}", std::process::id()))
}

fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    let (Ok(ma), Ok(mb)) = (fs::symlink_metadata(a), fs::symlink_metadata(b)) else {
        return Ok(false);
    };
    if !ma.is_file() || !mb.is_file() || ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (fs::File::open(a)?, fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Apply the archive the engine returned for a tree to the host tree (see the module docs).
pub(crate) fn apply_archive<R: Read>(archive: R, to: &WriteBack<'_>) -> io::Result<Applied> {
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
        let mode = plain(entry.header().mode()?);
        let target = to.root.join(&rel);
        check_parents(to.root, &rel)?;
        let old = fs::symlink_metadata(&target).ok();
        let owner = old.as_ref().map(|m| (m.uid(), m.gid())).or(to.chown_new);
        match ty {
            tar::EntryType::Directory => {
                present.insert(rel.clone());
                match &old {
                    Some(m) if m.is_dir() => {
                        if plain(m.mode()) != mode {
                            fs::set_permissions(&target, fs::Permissions::from_mode(mode))?;
                        }
                        continue;
                    }
                    Some(_) => remove_any(&target)?,
                    None => {}
                }
                fs::create_dir(&target)?;
                fs::set_permissions(&target, fs::Permissions::from_mode(mode))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                present.insert(rel.clone());
                let tmp = temp_name(&target);
                let _ = fs::remove_file(&tmp);
                {
                    let mut f = fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&tmp)?;
                    io::copy(&mut entry, &mut f)?;
                    f.set_permissions(fs::Permissions::from_mode(mode))?;
                    if let Ok(mtime) = entry.header().mtime() {
                        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
                        f.set_modified(t)?;
                    }
                }
                if same_content(&tmp, &target)? {
                    fs::remove_file(&tmp)?;
                    if let Some(m) = &old {
                        if plain(m.mode()) != mode {
                            fs::set_permissions(&target, fs::Permissions::from_mode(mode))?;
                        }
                    }
                    continue;
                }
                if old.as_ref().is_some_and(|m| m.is_dir()) {
                    fs::remove_dir_all(&target)?;
                }
                fs::rename(&tmp, &target)?;
            }
            tar::EntryType::Symlink => {
                present.insert(rel.clone());
                let Some(link) = entry.link_name()? else {
                    continue;
                };
                if old.as_ref().is_some_and(|m| m.is_symlink())
                    && fs::read_link(&target)? == link.as_ref()
                {
                    continue;
                }
                if old.is_some() {
                    remove_any(&target)?;
                }
                std::os::unix::fs::symlink(&link, &target)?;
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
                let src = to.root.join(&src_rel);
                check_parents(to.root, &src_rel)?;
                if !fs::symlink_metadata(&src)?.is_file() {
                    continue;
                }
                if same_content(&src, &target).unwrap_or(false) {
                    continue;
                }
                let tmp = temp_name(&target);
                let _ = fs::remove_file(&tmp);
                fs::copy(&src, &tmp)?;
                fs::set_permissions(&tmp, fs::Permissions::from_mode(plain(mode)))?;
                if old.is_some() {
                    remove_any(&target)?;
                }
                fs::rename(&tmp, &target)?;
            }
            // Devices, fifos and anything else do not come back.
            _ => continue,
        }
        applied.written += 1;
        if let Some((uid, gid)) = owner {
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::lchown(&target, Some(uid), Some(gid))?;
            }
        }
    }
    // Deletions: children before their parents.
    for rel in to.uploaded.iter().rev() {
        if present.contains(rel) || to.keep.iter().any(|k| rel.starts_with(k)) {
            continue;
        }
        // A parent replaced by a file or link took its children with it.
        if check_parents(to.root, rel).is_err() {
            continue;
        }
        let p = to.root.join(rel);
        if fs::symlink_metadata(&p).is_ok() {
            remove_any(&p)?;
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

/// A `Read` over chunks an async producer sends: the engine's archive is applied on a
/// blocking thread while it streams in.
#[derive(Debug)]
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, io::Error>>,
    cur: bytes::Bytes,
}

impl ChannelReader {
    /// A reader over `rx`.
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, io::Error>>) -> Self {
        Self {
            rx,
            cur: bytes::Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

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
