//! The apply's journal: every step that changes the real workspace is written down before
//! it is taken, with what undoes it, so that an apply that fails half way is undone and
//! one whose host was killed half way is undone by the next one that looks
//! ([`recover`]).
//!
//! Nothing the workspace held is destroyed while the apply runs: a deleted entry, and the
//! old file a new one replaces, are moved into a staging directory (`.sandbox-apply-*`),
//! where the new contents were staged too. Every step is a rename, so there is a staging
//! directory on each filesystem the apply writes: at the workspace's top (which holds the
//! journal), and at the top of each filesystem mounted inside it that the change set
//! touches. Only once every step is done is the journal marked done and the staging
//! directories removed.
//!
//! The journal is written, not synced: it survives the host process being killed, which
//! is what it is for, not a power cut (the renames it records are not synced either).
//! While an apply runs its journal is locked (`flock`), so [`recover`] never undoes an
//! apply that another process is still making.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufRead, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmodat, mkdirat, FchmodatFlags, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use rustix::fs::RenameFlags;

use crate::fs::fsx::{self, Kind};

/// The names of staging directories.
pub(crate) const PREFIX: &str = ".sandbox-apply-";
const JOURNAL: &str = "journal";

/// One step, with what undoes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The entry at `path` moved to `slot` (relative to the workspace, in a staging
    /// directory): moved back.
    Trash { path: PathBuf, slot: PathBuf },
    /// A new entry made at `path` (a file or link staged as inode `ino`, or a directory):
    /// removed, if it is still the one made.
    New { path: PathBuf, ino: Option<u64> },
    /// The staged entry `slot` (inode `ino`) exchanged with the old one at `path`:
    /// exchanged back, if it took place.
    Swap {
        path: PathBuf,
        slot: PathBuf,
        ino: u64,
    },
    /// The permission bits of `path` were `old`: set back.
    Mode { path: PathBuf, old: u32 },
}

/// One staging directory: on the filesystem `dev`, at `rel` (relative to the workspace).
struct Stage {
    dev: u64,
    rel: PathBuf,
    dir: OwnedFd,
}

/// The journal of one apply, and its staging directories (the first, at the workspace's
/// top, holds the journal).
pub(crate) struct Journal {
    real: OwnedFd,
    stages: Vec<Stage>,
    file: File,
    steps: Vec<Step>,
    next: u64,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

fn os(b: Vec<u8>) -> OsString {
    OsString::from_vec(b)
}

/// A relative path of plain names, at least one.
fn plain(p: &Path) -> bool {
    p.components().count() > 0
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// A staging directory's path: plain names, the last a staging directory's.
fn is_stage(p: &Path) -> bool {
    plain(p)
        && p.file_name()
            .is_some_and(|n| n.as_bytes().starts_with(PREFIX.as_bytes()))
}

/// A slot's path: `s<n>` in a staging directory.
fn is_slot(p: &Path) -> bool {
    let name = p.file_name().map(OsStr::as_bytes).unwrap_or_default();
    name.len() > 1
        && name[0] == b's'
        && name[1..].iter().all(u8::is_ascii_digit)
        && p.parent().is_some_and(is_stage)
}

/// A new private staging directory in `dir`, under a name of its own.
fn make_stage(dir: BorrowedFd<'_>) -> io::Result<(OsString, OwnedFd)> {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut tries = 0;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = OsString::from(format!(
            "{PREFIX}{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        match mkdirat(dir, name.as_os_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) => {
                let fd = fsx::open_dir_at(dir, &name)?;
                return Ok((name, fd));
            }
            Err(nix::Error::EEXIST) if tries < 100 => tries += 1,
            Err(e) => return Err(fsx::nix_io(e)),
        }
    }
}

impl Step {
    fn line(&self) -> String {
        let p = |p: &Path| hex(p.as_os_str().as_bytes());
        match self {
            Self::Trash { path, slot } => format!("trash {} {}\n", p(path), p(slot)),
            Self::New { path, ino } => {
                format!("new {} {}\n", p(path), ino.map_or(-1, |i| i as i128))
            }
            Self::Swap { path, slot, ino } => {
                format!("swap {} {} {ino}\n", p(path), p(slot))
            }
            Self::Mode { path, old } => format!("mode {} {old}\n", p(path)),
        }
    }

    /// A step read back; `None` for anything this module would not have written (a path
    /// that is not plain names, a slot that is not one of [`Journal::slot`]'s).
    fn parse(line: &str) -> Option<Self> {
        let w: Vec<&str> = line.split(' ').collect();
        let path = || {
            unhex(w.get(1)?)
                .map(|b| PathBuf::from(os(b)))
                .filter(|p| plain(p))
        };
        let slot = || {
            unhex(w.get(2)?)
                .map(|b| PathBuf::from(os(b)))
                .filter(|p| is_slot(p))
        };
        Some(match *w.first()? {
            "trash" => Self::Trash {
                path: path()?,
                slot: slot()?,
            },
            "new" => Self::New {
                path: path()?,
                ino: u64::try_from(w.get(2)?.parse::<i128>().ok()?).ok(),
            },
            "swap" => Self::Swap {
                path: path()?,
                slot: slot()?,
                ino: w.get(3)?.parse().ok()?,
            },
            "mode" => Self::Mode {
                path: path()?,
                old: w.get(2)?.parse().ok()?,
            },
            _ => return None,
        })
    }
}

fn flock(f: &File, wait: bool) -> io::Result<()> {
    let mut op = libc::LOCK_EX;
    if !wait {
        op |= libc::LOCK_NB;
    }
    // SAFETY: a live descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Journal {
    /// A new staging directory at the top of the workspace `real`, its journal locked.
    pub(crate) fn begin(real: BorrowedFd<'_>) -> io::Result<Self> {
        let real = nix::unistd::dup(real).map_err(fsx::nix_io)?;
        let (name, dir) = make_stage(real.as_fd())?;
        let dev = nix::sys::stat::fstat(&dir).map_err(fsx::nix_io)?.st_dev;
        let fd = openat(
            dir.as_fd(),
            JOURNAL,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(fsx::nix_io)?;
        let file = File::from(fd);
        flock(&file, true)?;
        Ok(Self {
            real,
            stages: vec![Stage {
                dev,
                rel: PathBuf::from(name),
                dir,
            }],
            file,
            steps: Vec::new(),
            next: 0,
        })
    }

    /// The staging directory at the workspace's top, relative to the workspace.
    pub(crate) fn path(&self) -> PathBuf {
        self.stages[0].rel.clone()
    }

    /// The staging directory for writes into `dir` (at `rel`, relative to the workspace):
    /// the one on its filesystem, made at the top of that filesystem's mount inside the
    /// workspace the first time.
    pub(crate) fn stage_for(&mut self, rel: &Path, dir: BorrowedFd<'_>) -> io::Result<usize> {
        let dev = nix::sys::stat::fstat(dir).map_err(fsx::nix_io)?.st_dev;
        if let Some(k) = self.stages.iter().position(|s| s.dev == dev) {
            return Ok(k);
        }
        // The shallowest directory on the way that is on that filesystem.
        let mut cur = nix::unistd::dup(self.real.as_fd()).map_err(fsx::nix_io)?;
        let mut at = PathBuf::new();
        for c in rel.components() {
            let std::path::Component::Normal(n) = c else {
                continue;
            };
            cur = fsx::open_dir_at(cur.as_fd(), n)?;
            at.push(n);
            if nix::sys::stat::fstat(&cur).map_err(fsx::nix_io)?.st_dev == dev {
                break;
            }
        }
        let (name, stage) = make_stage(cur.as_fd())?;
        let rel = at.join(name);
        self.file
            .write_all(format!("stage {}\n", hex(rel.as_os_str().as_bytes())).as_bytes())?;
        self.stages.push(Stage {
            dev,
            rel,
            dir: stage,
        });
        Ok(self.stages.len() - 1)
    }

    /// The staging directory `k`.
    pub(crate) fn dir(&self, k: usize) -> BorrowedFd<'_> {
        self.stages[k].dir.as_fd()
    }

    /// A fresh name in the staging directory `k`, and its path relative to the workspace.
    pub(crate) fn slot(&mut self, k: usize) -> (OsString, PathBuf) {
        self.next += 1;
        let name = OsString::from(format!("s{}", self.next));
        let rel = self.stages[k].rel.join(&name);
        (name, rel)
    }

    /// Write `step` down; call before taking it.
    pub(crate) fn record(&mut self, step: Step) -> io::Result<()> {
        self.file.write_all(step.line().as_bytes())?;
        self.steps.push(step);
        Ok(())
    }

    /// Every step done: the staging directories (the old entries with them) go.
    pub(crate) fn commit(mut self) {
        let _ = self.file.write_all(b"done\n");
        self.remove_stages();
    }

    /// Undo every step written down, last first, then remove the staging directories. The
    /// paths that could not be put back, with why; when there are any, the staging
    /// directories and the journal stay, for [`recover`] or the user.
    pub(crate) fn roll_back(self) -> Vec<(PathBuf, io::Error)> {
        let failed = undo(self.real.as_fd(), &self.steps);
        if failed.is_empty() {
            self.remove_stages();
        }
        failed
    }

    fn remove_stages(&self) {
        // The one holding the journal last.
        for s in self.stages.iter().rev() {
            remove(self.real.as_fd(), &s.rel, s.dir.as_fd());
        }
    }
}

/// Empty the staging directory `dir` at `rel` and remove it.
fn remove(real: BorrowedFd<'_>, rel: &Path, dir: BorrowedFd<'_>) {
    if fsx::clear_dir(dir).is_ok() {
        if let Ok(parent) = parent_of(real, rel) {
            let _ = unlinkat(
                parent.as_fd(),
                fsx::file_name(rel),
                UnlinkatFlags::RemoveDir,
            );
        }
    }
}

fn parent_of(real: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    fsx::open_parent(real, path)?.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

fn undo_one(real: BorrowedFd<'_>, step: &Step) -> io::Result<()> {
    match step {
        Step::Trash { path, slot } => {
            let Ok(staging) = parent_of(real, slot) else {
                return Ok(()); // never made, so never moved
            };
            let slot = fsx::file_name(slot);
            if fsx::stat_at(staging.as_fd(), slot)?.is_none() {
                return Ok(()); // never moved
            }
            let parent = parent_of(real, path)?;
            rustix::fs::renameat_with(
                staging.as_fd(),
                slot,
                parent.as_fd(),
                fsx::file_name(path),
                RenameFlags::NOREPLACE,
            )
            .map_err(io::Error::from)
        }
        Step::New { path, ino } => {
            let Ok(parent) = parent_of(real, path) else {
                return Ok(());
            };
            let name = fsx::file_name(path);
            let Some(st) = fsx::stat_at(parent.as_fd(), name)? else {
                return Ok(()); // never made
            };
            match ino {
                Some(i) if st.st_ino != *i => Ok(()),
                Some(_) => {
                    unlinkat(parent.as_fd(), name, UnlinkatFlags::NoRemoveDir).map_err(fsx::nix_io)
                }
                None if fsx::kind(&st) == Kind::Dir => {
                    unlinkat(parent.as_fd(), name, UnlinkatFlags::RemoveDir).map_err(fsx::nix_io)
                }
                None => Ok(()),
            }
        }
        Step::Swap { path, slot, ino } => {
            let parent = parent_of(real, path)?;
            let name = fsx::file_name(path);
            match fsx::stat_at(parent.as_fd(), name)? {
                Some(st) if st.st_ino == *ino => rustix::fs::renameat_with(
                    parent_of(real, slot)?.as_fd(),
                    fsx::file_name(slot),
                    parent.as_fd(),
                    name,
                    RenameFlags::EXCHANGE,
                )
                .map_err(io::Error::from),
                _ => Ok(()), // never exchanged
            }
        }
        Step::Mode { path, old } => {
            let parent = parent_of(real, path)?;
            chmod_at(parent.as_fd(), fsx::file_name(path), *old)
        }
    }
}

fn undo(real: BorrowedFd<'_>, steps: &[Step]) -> Vec<(PathBuf, io::Error)> {
    let mut failed = Vec::new();
    for s in steps.iter().rev() {
        if let Err(e) = undo_one(real, s) {
            let (Step::Trash { path, .. }
            | Step::New { path, .. }
            | Step::Swap { path, .. }
            | Step::Mode { path, .. }) = s;
            failed.push((path.clone(), e));
        }
    }
    failed
}

/// Set the permission bits of `name` in `dir`, never through a symlink, and whether or
/// not the caller may open it (a mode-000 file, a directory without `r`).
pub(crate) fn chmod_at(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    fchmodat(
        dir,
        name,
        Mode::from_bits_truncate(mode & 0o7777),
        FchmodatFlags::NoFollowSymlink,
    )
    .map_err(fsx::nix_io)
}

/// Finish what an apply killed half way left in the workspace `ws`: each staging directory
/// whose journal nobody holds is undone (or, if the journal says done, only removed).
/// Returns how many were found.
pub(crate) fn recover(ws: &Path) -> io::Result<usize> {
    let real = fsx::open_root(ws)?;
    let mut found = 0;
    for name in fsx::list(real.as_fd())? {
        if !name.as_bytes().starts_with(PREFIX.as_bytes()) {
            continue;
        }
        let Ok(dir) = fsx::open_dir_at(real.as_fd(), &name) else {
            continue;
        };
        // Only a staging directory this user made, private as `begin` makes it: one a
        // command planted (a confined one writes as another user, or its change set is
        // refused such a name) is never obeyed.
        if !private(dir.as_fd()) {
            continue;
        }
        let Ok(fd) = openat(
            dir.as_fd(),
            JOURNAL,
            OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let file = File::from(fd);
        if !private(file.as_fd()) {
            continue;
        }
        if flock(&file, false).is_err() {
            continue; // an apply still running
        }
        found += 1;
        let mut steps = Vec::new();
        let mut stages = Vec::new();
        let mut done = false;
        for line in io::BufReader::new(&file).lines() {
            let line = line?;
            if line == "done" {
                done = true;
            } else if let Some(rel) = line
                .strip_prefix("stage ")
                .and_then(unhex)
                .map(|b| PathBuf::from(os(b)))
                .filter(|p| is_stage(p))
            {
                stages.push(rel);
            } else if let Some(s) = Step::parse(&line) {
                steps.push(s);
            }
        }
        if done || undo(real.as_fd(), &steps).is_empty() {
            for rel in stages.iter().rev() {
                let Ok(parent) = parent_of(real.as_fd(), rel) else {
                    continue;
                };
                if let Ok(d) = fsx::open_dir_at(parent.as_fd(), fsx::file_name(rel)) {
                    if private(d.as_fd()) {
                        remove(real.as_fd(), rel, d.as_fd());
                    }
                }
            }
            remove(real.as_fd(), Path::new(&name), dir.as_fd());
        }
    }
    Ok(found)
}

/// Owned by this user and closed to everyone else.
fn private(fd: BorrowedFd<'_>) -> bool {
    nix::sys::stat::fstat(fd)
        .is_ok_and(|st| st.st_uid == nix::unistd::geteuid().as_raw() && st.st_mode & 0o077 == 0)
}

/// Whether `rel` (relative to the workspace) holds a name the apply keeps for its staging
/// (anywhere: a staging directory sits at the top of each filesystem it writes).
pub(crate) fn reserved(rel: &Path) -> bool {
    rel.components()
        .any(|c| c.as_os_str().as_bytes().starts_with(PREFIX.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_read_back_as_written() {
        let steps = [
            Step::Trash {
                path: PathBuf::from(os(b"a b/\n\xff".to_vec())),
                slot: ".sandbox-apply-1-2-3/s1".into(),
            },
            Step::New {
                path: "x".into(),
                ino: Some(7),
            },
            Step::New {
                path: "d".into(),
                ino: None,
            },
            Step::Swap {
                path: "y".into(),
                slot: "mnt/.sandbox-apply-1-2-4/s2".into(),
                ino: 9,
            },
            Step::Mode {
                path: "z".into(),
                old: 0o4755,
            },
        ];
        for bad in [
            "trash 2e2e 7331",
            "trash 61 2e2e2f78",
            "mode 2f657463 420",
            "new  5",
        ] {
            assert_eq!(Step::parse(bad), None, "{bad}");
        }
        for s in steps {
            let line = s.line();
            assert_eq!(line.matches('\n').count(), 1);
            assert_eq!(Step::parse(line.trim_end()), Some(s));
        }
    }
}
