//! Race-free file-system steps relative to open directories: every walk over the layer and
//! over the real workspace goes through these, never through a path string.
//!
//! Each directory is opened with `O_NOFOLLOW | O_DIRECTORY` relative to its parent's
//! descriptor, and each entry's type is taken from `fstatat(AT_SYMLINK_NOFOLLOW)` on that
//! descriptor, so a symlink swapped in anywhere along a path is seen as a symlink and never
//! followed. (The `hardening` work is building a shared fd-based walker in
//! `process/files.rs`; these are the few primitives this module needs until it lands.)

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::fcntl::AtFlags;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstatat, FileStat, Mode};

pub(crate) fn nix_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// What an entry is, from `st_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// A character device 0/0: an overlay whiteout.
    Whiteout,
    /// FIFOs, sockets and other device nodes.
    Special,
}

pub(crate) fn kind(st: &FileStat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFCHR if st.st_rdev == 0 => Kind::Whiteout,
        _ => Kind::Special,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when the entry does not exist.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(nix::Error::ENOENT) => Ok(None),
        Err(e) => Err(nix_io(e)),
    }
}

/// Open the directory `name` in `dir`, refusing a symlink.
pub(crate) fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_io)
}

/// Open the directory at absolute `path` (the workspace itself may sit under symlinks the
/// caller chose; it was canonicalised when the plan was made).
pub(crate) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_io)
}

/// Open the regular file `name` in `dir` for reading, refusing a symlink, a FIFO (no
/// blocking open) or anything that is not a regular file.
pub(crate) fn open_file_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<std::fs::File> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(nix_io)?;
    let st = nix::sys::stat::fstat(&fd).map_err(nix_io)?;
    if kind(&st) != Kind::File {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(std::fs::File::from(fd))
}

/// The names in directory `dir` (without `.` and `..`), sorted.
pub(crate) fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let dup = nix::unistd::dup(dir).map_err(nix_io)?;
    let mut d = nix::dir::Dir::from_fd(dup).map_err(nix_io)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(nix_io)?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    out.sort();
    Ok(out)
}

/// The value of the first of `names` set on the open descriptor `fd`, if any.
pub(crate) fn xattr(fd: BorrowedFd<'_>, names: &[&CStr]) -> Option<Vec<u8>> {
    for name in names {
        let mut buf = [0u8; 16];
        // SAFETY: a live descriptor, a NUL-terminated name and a buffer of the given size.
        let n = unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            return Some(buf[..n as usize].to_vec());
        }
    }
    None
}

/// Walk from `root` down the directories of `rel` (all but its last component), refusing a
/// symlink or a non-directory at any step. `Ok(None)` when a directory on the way does not
/// exist.
pub(crate) fn open_parent(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<OwnedFd>> {
    let mut cur = nix::unistd::dup(root).map_err(nix_io)?;
    let comps: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((_, dirs)) = comps.split_last() else {
        return Ok(Some(cur));
    };
    for d in dirs {
        match open_dir_at(cur.as_fd(), d) {
            Ok(fd) => cur = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(cur))
}

/// The last component of `rel`.
pub(crate) fn file_name(rel: &Path) -> &OsStr {
    rel.file_name().unwrap_or(OsStr::new("."))
}

pub(crate) fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Remove everything beneath the open directory `dir`, then nothing else: directories are
/// made writable and searchable first (a command may leave a `0500` directory in its layer,
/// and an overlay's `work/work` is `0000`), entries are never followed.
pub(crate) fn clear_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
    for name in list(dir)? {
        let Some(st) = stat_at(dir, &name)? else {
            continue;
        };
        if kind(&st) == Kind::Dir {
            // Owner rwx so that it can be listed and emptied (a no-op when it already is).
            let _ = nix::sys::stat::fchmodat(
                dir,
                name.as_os_str(),
                Mode::from_bits_truncate(0o700),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            );
            let sub = open_dir_at(dir, &name)?;
            clear_dir(sub.as_fd())?;
            nix::unistd::unlinkat(dir, name.as_os_str(), nix::unistd::UnlinkatFlags::RemoveDir)
                .map_err(nix_io)?;
        } else {
            nix::unistd::unlinkat(
                dir,
                name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(nix_io)?;
        }
    }
    Ok(())
}
