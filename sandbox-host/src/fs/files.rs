//! Files in and out of a run: the race-free copy a copy layer is made with, and captured
//! files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::fs::tree::{self, Budget, Meta, Source, Visit};

/// Copy `src` into the existing directory `dst`: regular files (holes kept), directories
/// and symlinks (as links, never followed), with their permission bits less setuid, setgid
/// and sticky. The walk is [`tree::walk`]'s, so a command racing it cannot make the host
/// copy anything from outside `src`; `budget` bounds its size and time. The `io::Error`'s
/// kind tells a deadline from a failure; the caller removes `dst` on error.
pub fn copy_tree(src: &Path, dst: &Path, budget: &Budget) -> io::Result<()> {
    let root = rustix::fs::open(
        dst,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    tree::walk(src, budget, &mut CopyInto { dirs: vec![root] })
}

/// Writes what the walk meets under the destination directory on top of `dirs`.
struct CopyInto {
    dirs: Vec<OwnedFd>,
}

impl CopyInto {
    fn top(&self) -> io::Result<&OwnedFd> {
        self.dirs
            .last()
            .ok_or_else(|| io::Error::other("the copy lost its destination"))
    }
}

fn last(rel: &Path) -> io::Result<&std::ffi::OsStr> {
    rel.file_name()
        .ok_or_else(|| io::Error::other("an entry without a name"))
}

impl Visit for CopyInto {
    fn enter_dir(&mut self, rel: &Path, _: &Meta) -> io::Result<bool> {
        if rel.as_os_str().is_empty() {
            return Ok(true);
        }
        let name = last(rel)?;
        let top = self.top()?;
        rustix::fs::mkdirat(top, name, Mode::from_raw_mode(0o700))?;
        let d = rustix::fs::openat(
            top,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        self.dirs.push(d);
        Ok(true)
    }

    fn leave_dir(&mut self, rel: &Path, meta: &Meta) -> io::Result<()> {
        // The mode last, so a read-only directory could still be filled.
        rustix::fs::fchmod(self.top()?, Mode::from_raw_mode(tree::plain(meta.mode)))?;
        if !rel.as_os_str().is_empty() {
            self.dirs.pop();
        }
        Ok(())
    }

    fn file(&mut self, rel: &Path, meta: &Meta, src: &mut Source<'_>) -> io::Result<()> {
        let fd = rustix::fs::openat(
            self.top()?,
            last(rel)?,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let out = File::from(fd);
        tree::copy_sparse(src, &out)?;
        rustix::fs::fchmod(&out, Mode::from_raw_mode(tree::plain(meta.mode)))?;
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, _: &Meta, target: &Path) -> io::Result<()> {
        rustix::fs::symlinkat(target, self.top()?, last(rel)?)?;
        Ok(())
    }
}

/// Read the files named in `names` (relative to `workspace`) into a map, each up to `cap`
/// bytes. A file that is missing, not a regular file, or that resolves outside the
/// workspace (a symlink planted by the command to exfiltrate a host file) is left out:
/// the kernel resolves each name beneath the workspace's descriptor (`openat2` with
/// `RESOLVE_BENEATH`), so a link swapped in meanwhile cannot lead out, and a fifo is opened
/// without blocking.
pub fn capture_files(
    workspace: &Path,
    names: &[PathBuf],
    cap: usize,
) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(root) = rustix::fs::open(
        workspace,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return out;
    };
    for name in names {
        if let Some(buf) = capture_one(root.as_fd(), name, cap) {
            out.insert(name.clone(), buf);
        }
    }
    out
}

fn capture_one(root: std::os::fd::BorrowedFd<'_>, name: &Path, cap: usize) -> Option<Vec<u8>> {
    let fd = rustix::fs::openat2(
        root,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut buf = Vec::new();
    File::from(fd).take(cap as u64).read_to_end(&mut buf).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn snapshot_copies_files_dirs_and_links() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir(src.path().join("d")).unwrap();
        fs::write(src.path().join("d/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("l")).unwrap();
        let copy = tempfile::tempdir().unwrap();
        copy_tree(src.path(), copy.path(), &Budget::default()).unwrap();
        assert_eq!(fs::read(copy.path().join("d/f")).unwrap(), b"x");
        assert_eq!(
            fs::read_link(copy.path().join("l")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn capture_refuses_links_out_of_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        fs::write(ws_path.join("ok"), b"fine").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ws_path.join("leak")).unwrap();
        let got = capture_files(
            &ws_path,
            &["ok".into(), "leak".into(), "missing".into()],
            1024,
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[Path::new("ok")], b"fine");
    }
}
