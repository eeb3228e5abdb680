//! The one walk the host makes over a tree the sandboxed command can write to.
//!
//! The host reads and writes workspace content (snapshot copies, captured files, docker's
//! upload and write-back) while a command, in this run or another one sharing the
//! workspace, may be changing it. A walk that takes an entry's type from `readdir` and then
//! opens it by path can be raced: swap a file for a symlink to a root-only host file with
//! `renameat2(RENAME_EXCHANGE)` between the two steps and the host copies the secret. So:
//!
//! - every entry is opened relative to its parent's descriptor, with `O_PATH | O_NOFOLLOW`,
//!   and its type comes from `fstat` on that descriptor, never from a name;
//! - a symlink is read as a link (`readlinkat` on that descriptor) and never followed;
//! - a directory is re-opened through that descriptor (`openat(fd, ".")`), so it is the
//!   same inode; a regular file is opened with `O_NOFOLLOW | O_NONBLOCK` and must be the
//!   same inode, else it is skipped as changed under us;
//! - fifos, sockets and devices are never opened for reading (a fifo would block forever);
//! - a file's holes are found with `SEEK_DATA`/`SEEK_HOLE`, so a sparse file costs only its
//!   data;
//! - every byte read counts against a [`Budget`]: a size cap, a deadline and a cancel flag,
//!   checked between entries and between chunks, so a run's timeout and kill reach a copy.
//!
//! Writes into a host tree go through [`open_beneath`] (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`) for the parent and `*at` calls for the last component, so no
//! symlink planted on the way is ever followed.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, SeekFrom};
use rustix::io::Errno;

/// The most file data (holes excluded) one copy of a tree moves: 8 GiB. A workspace can
/// hold anything the command wrote, so the host must not copy without bound.
pub const MAX_COPY_BYTES: u64 = 8 << 30;

/// How deep a walk goes before it refuses: each level holds one descriptor.
pub const MAX_DEPTH: usize = 256;

/// The chunk between two budget checks.
const CHUNK: usize = 1 << 20;

/// What one walk may spend.
#[derive(Clone, Debug)]
pub struct Budget {
    /// The most file data, in bytes.
    pub max_bytes: u64,
    /// When the walk must give up (the run's timeout).
    pub deadline: Option<Instant>,
    /// Set to stop the walk (a kill, or the caller went away).
    pub cancel: Arc<AtomicBool>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_bytes: MAX_COPY_BYTES,
            deadline: None,
            cancel: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The error a walk that ran past its [`Budget::deadline`] returns (kind `TimedOut`).
pub fn is_deadline(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut
}

impl Budget {
    /// A budget with the default cap and `deadline`.
    pub fn until(deadline: Option<Instant>) -> Self {
        Self {
            deadline,
            ..Self::default()
        }
    }

    /// An error if the walk must stop now.
    pub fn check(&self) -> io::Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the copy was cancelled",
            ));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the copy ran past the run's timeout",
            ));
        }
        Ok(())
    }

    /// Count `n` more bytes against the cap in `used`.
    pub fn charge(&self, used: &mut u64, n: u64) -> io::Result<()> {
        *used = used.saturating_add(n);
        if *used > self.max_bytes {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "the tree holds more than {} MiB of file data, the cap on what the host \
                     copies (sandbox_core::process::tree::MAX_COPY_BYTES); make the \
                     workspace smaller or run without a copy",
                    self.max_bytes >> 20
                ),
            ));
        }
        self.check()
    }
}

/// What the walk knows of an entry, from `fstat` on its open descriptor.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Size in bytes (holes included).
    pub len: u64,
}

impl Meta {
    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime: st.st_mtime,
            len: u64::try_from(st.st_size).unwrap_or(0),
        }
    }
}

/// A regular file met by the walk, open for reading; its reads count against the budget.
#[derive(Debug)]
pub struct Source<'a> {
    file: File,
    len: u64,
    /// Where [`io::Read`] goes on.
    pos: u64,
    /// The whole length was charged up front ([`Source::reserve`]).
    prepaid: bool,
    budget: &'a Budget,
    used: &'a mut u64,
}

impl Source<'_> {
    /// The open file (read it only through [`Source::read_at`] or [`io::Read`], which count).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The size when it was opened; reads stop there even if the file grows.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges `(offset, length)` that hold data, within [`Source::len`]: holes are
    /// left out. A filesystem without `SEEK_DATA` gives the whole file as one range.
    pub fn data_ranges(&self) -> io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut off = 0u64;
        while off < self.len {
            let start = match rustix::fs::seek(&self.file, SeekFrom::Data(off)) {
                Ok(s) => s,
                Err(Errno::NXIO) => break,
                Err(Errno::INVAL | Errno::OPNOTSUPP) if off == 0 => {
                    out.push((0, self.len));
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            if start >= self.len {
                break;
            }
            let end = match rustix::fs::seek(&self.file, SeekFrom::Hole(start)) {
                Ok(e) => e.min(self.len),
                Err(_) => self.len,
            };
            out.push((start, end - start));
            off = end;
        }
        Ok(out)
    }

    /// Charge `n` bytes now, for a consumer that will store the file's whole length
    /// (holes included) rather than its data; reads are then not charged again. Fails,
    /// naming the cap, before anything is read.
    pub fn reserve(&mut self, n: u64) -> io::Result<()> {
        self.budget.charge(self.used, n)?;
        self.prepaid = true;
        Ok(())
    }

    /// Count `n` bytes moved without [`Source::read_at`] (a copy in the kernel).
    fn charge(&mut self, n: u64) -> io::Result<()> {
        if self.prepaid {
            self.budget.check()
        } else {
            self.budget.charge(self.used, n)
        }
    }

    /// Read at `off` into `buf`, counting the bytes against the budget.
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.len.saturating_sub(off)).unwrap_or(CHUNK));
        let n = rustix::io::pread(&self.file, &mut buf[..want], off)?;
        self.charge(n as u64)?;
        Ok(n)
    }
}

/// Reads the whole file densely (holes read as zeros), counting against the budget.
/// (From its own position, not the file offset, which `SEEK_DATA` moves.)
impl io::Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len {
            return Ok(0);
        }
        let want = buf.len().min(CHUNK);
        let n = self.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// What a walk does with each entry. Paths are relative to the walk's root (the root is
/// the empty path).
pub trait Visit {
    /// A directory, before its entries; `false` leaves it out with everything under it
    /// (and [`Visit::leave_dir`] is not called).
    fn enter_dir(&mut self, rel: &Path, meta: &Meta) -> io::Result<bool>;
    /// A directory, after its entries.
    fn leave_dir(&mut self, rel: &Path, meta: &Meta) -> io::Result<()>;
    /// A regular file.
    fn file(&mut self, rel: &Path, meta: &Meta, src: &mut Source<'_>) -> io::Result<()>;
    /// A symlink, with its target as written (never followed).
    fn symlink(&mut self, rel: &Path, meta: &Meta, target: &Path) -> io::Result<()>;
}

/// Walk the tree at `root` (a directory the caller named: it is the one path followed),
/// in name order, calling `visit` for each directory, regular file and symlink. Fifos,
/// sockets, devices and entries that change type while being opened are skipped.
pub fn walk(root: &Path, budget: &Budget, visit: &mut impl Visit) -> io::Result<()> {
    let dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| with_path(e.into(), root))?;
    let meta = Meta::of(&rustix::fs::fstat(&dir)?);
    let mut used = 0;
    let mut rel = PathBuf::new();
    if visit.enter_dir(&rel, &meta)? {
        walk_dir(&dir, &mut rel, 0, budget, &mut used, visit)?;
        visit.leave_dir(&rel, &meta)?;
    }
    Ok(())
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// The names in the directory open at `dir`, sorted, without `.` and `..`.
pub fn names(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    let mut d = rustix::fs::Dir::read_from(dir)?;
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_owned());
        }
    }
    out.sort();
    Ok(out)
}

fn walk_dir(
    dir: &OwnedFd,
    rel: &mut PathBuf,
    depth: usize,
    budget: &Budget,
    used: &mut u64,
    visit: &mut impl Visit,
) -> io::Result<()> {
    if depth >= MAX_DEPTH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is nested more than {MAX_DEPTH} directories deep; refusing to copy it",
                rel.display()
            ),
        ));
    }
    for name in names(dir)? {
        budget.check()?;
        let path_fd = match rustix::fs::openat(
            dir,
            name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Removed since the directory was read.
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&path_fd)?;
        let meta = Meta::of(&st);
        rel.push(&name);
        let r = match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(&path_fd, "", Vec::new())?;
                visit.symlink(rel, &meta, Path::new(OsStr::from_bytes(target.as_bytes())))
            }
            FileType::Directory => {
                // Through the O_PATH descriptor: the very directory that was checked.
                let sub = rustix::fs::openat(
                    &path_fd,
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                if visit.enter_dir(rel, &meta)? {
                    walk_dir(&sub, rel, depth + 1, budget, used, visit)?;
                    visit.leave_dir(rel, &meta)
                } else {
                    Ok(())
                }
            }
            FileType::RegularFile => match open_same_file(dir, &name, &st)? {
                Some(file) => {
                    let mut src = Source {
                        file,
                        len: meta.len,
                        pos: 0,
                        prepaid: false,
                        budget,
                        used: &mut *used,
                    };
                    visit.file(rel, &meta, &mut src)
                }
                None => {
                    tracing::debug!(path = %rel.display(), "changed while being copied; skipped");
                    Ok(())
                }
            },
            // Fifos, sockets and devices are never opened: a snapshot is of source trees.
            _ => Ok(()),
        };
        rel.pop();
        r?;
    }
    Ok(())
}

/// Open `name` in `dir` for reading (or only to change its mode), without following a
/// link and without blocking: a fifo swapped in is opened without waiting for a writer,
/// a symlink fails with `ELOOP`.
pub fn open_nofollow(dir: impl AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `name` in `dir`, not followed if it is a link; `None` when there is nothing there.
pub fn stat_at(dir: impl AsFd, name: &OsStr) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Open `name` in `dir` for reading, without following a link and without blocking, and
/// only if it is still the regular file `st` describes.
fn open_same_file(dir: &OwnedFd, name: &OsStr, st: &rustix::fs::Stat) -> io::Result<Option<File>> {
    let fd = match open_nofollow(dir, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let now = rustix::fs::fstat(&fd)?;
    if now.st_dev != st.st_dev
        || now.st_ino != st.st_ino
        || FileType::from_raw_mode(now.st_mode) != FileType::RegularFile
    {
        return Ok(None);
    }
    Ok(Some(File::from(fd)))
}

/// Open the directory `rel` below the directory `root`, refusing every symlink on the way
/// and any `..` that would leave it: the kernel resolves the whole path at once, so nothing
/// can be swapped in between. The empty path is `root` itself.
pub fn open_beneath(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR | Errno::XDEV => io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a directory on the host (a symlink or a file is in the way); \
                 refusing to write below it",
                rel.display()
            ),
        ),
        e => with_path(e.into(), rel),
    })
}

/// Copy `src`'s data into `dst` (a new, empty file) keeping its holes, then give `dst` the
/// source's length. Each data range goes through `copy_file_range` (in the kernel, shared
/// extents where the filesystem can), chunk by chunk so the budget is checked between;
/// where the kernel cannot (across filesystems on some kernels), through a buffer.
pub fn copy_sparse(src: &mut Source<'_>, dst: &File) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    for (start, len) in src.data_ranges()? {
        let end = start + len;
        let mut off = start;
        while off < end {
            let want = usize::try_from(end - off).unwrap_or(CHUNK).min(CHUNK);
            if buf.is_empty() {
                let (mut from, mut to) = (off, off);
                match rustix::fs::copy_file_range(
                    &src.file,
                    Some(&mut from),
                    dst,
                    Some(&mut to),
                    want,
                ) {
                    Ok(0) => break,
                    Ok(n) => {
                        src.charge(n as u64)?;
                        off += n as u64;
                        continue;
                    }
                    Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                        buf = vec![0u8; CHUNK];
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let n = src.read_at(&mut buf[..want], off)?;
            if n == 0 {
                break;
            }
            write_sparse(dst, &buf[..n], off)?;
            off += n as u64;
        }
    }
    rustix::fs::ftruncate(dst, src.len())?;
    Ok(())
}

/// Write `data` at `off` in `dst`, leaving 4 KiB blocks of zeros as holes.
pub fn write_sparse(dst: &File, data: &[u8], off: u64) -> io::Result<()> {
    const BLOCK: usize = 4096;
    let mut i = 0;
    while i < data.len() {
        let end = (i + BLOCK).min(data.len());
        let block = &data[i..end];
        if block.iter().any(|b| *b != 0) {
            let mut w = 0;
            while w < block.len() {
                w += rustix::io::pwrite(dst, &block[w..], off + (i + w) as u64)?;
            }
        }
        i = end;
    }
    Ok(())
}

/// Whether `a` and `b` hold the same bytes, read from the start whatever their offsets (a
/// file just written is compared as it is). A file that turns out shorter than the other
/// is not the same, even if it shrank while being read.
pub fn same_contents(a: &File, b: &File) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut off = 0u64;
    loop {
        let n = a.read_at(&mut x, off)?;
        if n == 0 {
            return Ok(b.read_at(&mut y[..1], off)? == 0);
        }
        let mut got = 0;
        while got < n {
            match b.read_at(&mut y[got..n], off + got as u64)? {
                0 => return Ok(false),
                m => got += m,
            }
        }
        if x[..n] != y[..n] {
            return Ok(false);
        }
        off += n as u64;
    }
}

/// A name for a temp file or link in a directory of the host tree, unique in this process
/// and hidden from a plain `ls`.
pub(crate) fn temp_name() -> std::ffi::OsString {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        ".sandbox-tmp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
    .into()
}

/// A new file beside the entry it will replace, in a directory of a host tree: filled,
/// then renamed over the entry, so that a reader sees the old file or the new one, never
/// half of one, and a symlink in its place is replaced rather than followed. Dropped
/// without [`Beside::rename_over`] (an error on the way, or the old file was kept), it is
/// removed, so nothing is left behind.
#[derive(Debug)]
pub struct Beside<'d> {
    dir: BorrowedFd<'d>,
    tmp: std::ffi::OsString,
    file: File,
    placed: bool,
}

impl<'d> Beside<'d> {
    /// An empty file in `dir`, mode 0600, open for reading and writing, under a name of
    /// its own ([`O_EXCL`](OFlags::EXCL), never through a link).
    pub fn create(dir: BorrowedFd<'d>) -> io::Result<Self> {
        let mut tries = 0;
        loop {
            let tmp = temp_name();
            match rustix::fs::openat(
                dir,
                tmp.as_os_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => {
                    return Ok(Self {
                        dir,
                        tmp,
                        file: File::from(fd),
                        placed: false,
                    })
                }
                // A name left by an earlier process with this pid, or planted.
                Err(Errno::EXIST) if tries < 8 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The new file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether `name` beside it is a regular file with the same bytes: then it need not be
    /// replaced (and keeps its inode).
    pub fn same_as(&self, name: &OsStr) -> io::Result<bool> {
        let Some(st) = stat_at(self.dir, name)? else {
            return Ok(false);
        };
        let len = self.file.metadata()?.len();
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || u64::try_from(st.st_size).ok() != Some(len)
        {
            return Ok(false);
        }
        same_contents(&self.file, &File::from(open_nofollow(self.dir, name)?))
    }

    /// Rename it over `name` (a file or a link there is replaced; a directory must be
    /// removed first).
    pub fn rename_over(mut self, name: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(self.dir, self.tmp.as_os_str(), self.dir, name)?;
        self.placed = true;
        Ok(())
    }
}

impl Drop for Beside<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ =
                rustix::fs::unlinkat(self.dir, self.tmp.as_os_str(), rustix::fs::AtFlags::empty());
        }
    }
}

/// Remove `name` in `dir` and everything under it, never following a symlink.
pub fn remove_at(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    let dir = dir.as_fd();
    let Some(st) = stat_at(dir, name)? else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        let sub = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        for child in names(&sub)? {
            remove_at(&sub, &child)?;
        }
        rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty())?;
    }
    Ok(())
}

/// The permission bits kept on a copy: no setuid, setgid or sticky bit crosses.
pub fn plain(mode: u32) -> u32 {
    mode & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    #[derive(Default)]
    struct Seen(Vec<String>);

    impl Visit for Seen {
        fn enter_dir(&mut self, rel: &Path, _: &Meta) -> io::Result<bool> {
            self.0.push(format!("d {}", rel.display()));
            Ok(rel != Path::new("skip"))
        }
        fn leave_dir(&mut self, _: &Path, _: &Meta) -> io::Result<()> {
            Ok(())
        }
        fn file(&mut self, rel: &Path, _: &Meta, src: &mut Source<'_>) -> io::Result<()> {
            let mut s = String::new();
            io::Read::read_to_string(src, &mut s)?;
            self.0.push(format!("f {} {s}", rel.display()));
            Ok(())
        }
        fn symlink(&mut self, rel: &Path, _: &Meta, target: &Path) -> io::Result<()> {
            self.0
                .push(format!("l {} {}", rel.display(), target.display()));
            Ok(())
        }
    }

    #[test]
    fn walks_in_order_links_as_links_and_skips_fifos() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("a/b")).unwrap();
        fs::write(r.join("a/b/f"), b"x").unwrap();
        fs::create_dir(r.join("skip")).unwrap();
        fs::write(r.join("skip/hidden"), b"no").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", r.join("l")).unwrap();
        nix::unistd::mkfifo(&r.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let mut seen = Seen::default();
        walk(r, &Budget::default(), &mut seen).unwrap();
        assert_eq!(
            seen.0,
            [
                "d ",
                "d a",
                "d a/b",
                "f a/b/f x",
                "l l /etc/shadow",
                "d skip"
            ]
        );
    }

    #[test]
    fn the_cap_is_named_when_exceeded() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("big"), vec![1u8; 4096]).unwrap();
        let budget = Budget {
            max_bytes: 100,
            ..Budget::default()
        };
        let e = walk(d.path(), &budget, &mut Seen::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("MAX_COPY_BYTES"), "{e}");
    }

    #[test]
    fn a_past_deadline_stops_the_walk() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("f"), b"x").unwrap();
        let e = walk(
            d.path(),
            &Budget::until(Some(Instant::now())),
            &mut Seen::default(),
        )
        .unwrap_err();
        assert!(is_deadline(&e), "{e}");
    }

    #[test]
    fn a_sparse_copy_stays_sparse() {
        let d = tempfile::tempdir().unwrap();
        let f = File::create(d.path().join("sparse")).unwrap();
        f.set_len(64 << 20).unwrap();
        rustix::io::pwrite(&f, b"end", (64 << 20) - 3).unwrap();
        let out = File::create(d.path().join("copy")).unwrap();
        let budget = Budget::default();
        let mut used = 0;
        let mut src = Source {
            file: File::open(d.path().join("sparse")).unwrap(),
            len: 64 << 20,
            pos: 0,
            prepaid: false,
            budget: &budget,
            used: &mut used,
        };
        copy_sparse(&mut src, &out).unwrap();
        let m = fs::metadata(d.path().join("copy")).unwrap();
        assert_eq!(m.len(), 64 << 20);
        assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
        assert!(used < 1 << 20, "holes are not charged: {used}");
    }

    #[test]
    fn a_file_beside_replaces_a_link_without_following_it_and_leaves_nothing_when_dropped() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("target"), b"host").unwrap();
        std::os::unix::fs::symlink(outside.path().join("target"), d.path().join("f")).unwrap();
        fs::write(d.path().join("same"), b"new").unwrap();
        let dir = File::open(d.path()).unwrap();
        let entries = || {
            let mut v: Vec<_> = fs::read_dir(d.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };

        let new = Beside::create(dir.as_fd()).unwrap();
        io::Write::write_all(&mut new.file(), b"new").unwrap();
        assert!(
            !new.same_as(OsStr::new("f")).unwrap(),
            "a link is never the same"
        );
        assert!(new.same_as(OsStr::new("same")).unwrap());
        assert!(!new.same_as(OsStr::new("missing")).unwrap());
        new.rename_over(OsStr::new("f")).unwrap();
        assert!(fs::symlink_metadata(d.path().join("f")).unwrap().is_file());
        assert_eq!(fs::read(d.path().join("f")).unwrap(), b"new");
        assert_eq!(fs::read(outside.path().join("target")).unwrap(), b"host");

        let before = entries();
        let dropped = Beside::create(dir.as_fd()).unwrap();
        assert_eq!(entries().len(), before.len() + 1);
        drop(dropped);
        assert_eq!(entries(), before, "the temp file is gone");
    }

    #[test]
    fn contents_differ_when_one_file_is_a_prefix_of_the_other() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("a"), b"abc").unwrap();
        fs::write(d.path().join("b"), b"abcd").unwrap();
        fs::write(d.path().join("c"), b"abc").unwrap();
        let open = |n: &str| File::open(d.path().join(n)).unwrap();
        assert!(!same_contents(&open("a"), &open("b")).unwrap());
        assert!(!same_contents(&open("b"), &open("a")).unwrap());
        assert!(same_contents(&open("a"), &open("c")).unwrap());
    }

    #[test]
    fn open_beneath_refuses_links_on_the_way() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("link")).unwrap();
        let root = File::open(d.path()).unwrap();
        open_beneath(&root, Path::new("real")).unwrap();
        let e = open_beneath(&root, Path::new("link")).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(open_beneath(&root, Path::new("../")).is_err());
    }
}
