//! Apply a change set into the real workspace: check everything first, write nothing if a
//! check fails, then stage every new file and take the steps under a journal that undoes
//! them all if one fails ([`super::journal`]).

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{renameat, OFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::symlinkat;
use rustix::fs::RenameFlags;

use super::journal::{self, chmod_at, Journal, Step};
use super::layer::Layer;
use super::resolve::After;
use super::{stamp_of, ApplyError, ApplyReport, Change, ChangeKind, Escape, Refusal, Stamp};
use crate::fs::fsx::{self, Kind};

fn nix_err(path: &Path) -> impl Fn(nix::Error) -> ApplyError + '_ {
    move |e| ApplyError::Io {
        path: path.to_path_buf(),
        source: fsx::nix_io(e),
    }
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> ApplyError + '_ {
    move |source| ApplyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a real path's directories look: all directories, a missing one, or not a directory.
enum Way {
    Dir(OwnedFd),
    Missing,
    NotDir(PathBuf),
}

/// Walk the real workspace down to `rel`'s parent, stopping at a directory the change set
/// creates (everything beneath it is new).
fn way(root: BorrowedFd<'_>, rel: &Path, created: &BTreeSet<&Path>) -> io::Result<Way> {
    let mut cur = nix::unistd::dup(root).map_err(fsx::nix_io)?;
    let mut at = PathBuf::new();
    let Some(parent) = rel.parent() else {
        return Ok(Way::Dir(cur));
    };
    for c in parent.components() {
        let Component::Normal(n) = c else { continue };
        at.push(n);
        if created.contains(at.as_path()) {
            return Ok(Way::Missing);
        }
        match fsx::open_dir_at(cur.as_fd(), n) {
            Ok(fd) => cur = fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Way::Missing),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                return Ok(Way::NotDir(at))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Way::Dir(cur))
}

fn mode_bits(m: u32) -> Mode {
    Mode::from_bits_truncate(m & 0o7777)
}

/// The stamps of real paths an undone apply put back: they moved (their `ctime`), but by
/// the apply's own hand, so they are no conflict while they stay as the undo left them.
pub(crate) type Restored = HashMap<PathBuf, Option<Stamp>>;

pub(crate) fn apply(
    layer: &Layer,
    changes: &[Change],
    force: bool,
    restored: &mut Restored,
) -> Result<ApplyReport, super::ApplyError> {
    let ws = layer.workspace();
    // An apply of an earlier process killed half way is undone first: this one is judged
    // against the workspace as it was before that one.
    journal::recover(ws).map_err(io_err(Path::new(".")))?;
    let real = fsx::open_root(ws).map_err(io_err(Path::new(".")))?;
    let src = fsx::open_root(layer.source()).map_err(io_err(Path::new(".")))?;
    let created: BTreeSet<&Path> = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::DirAdded)
        .map(|c| c.path.as_path())
        .collect();

    let after = After::new(ws, real.as_fd(), changes);

    // 1. Escapes: never applied, forced or not.
    let mut refusals = Vec::new();
    let mut conflicts = Vec::new();
    for c in changes {
        let refuse = |escape| Refusal {
            path: c.path.clone(),
            escape,
        };
        match &c.kind {
            ChangeKind::Special => {
                let st = fsx::open_parent(src.as_fd(), &c.path)
                    .ok()
                    .flatten()
                    .and_then(|p| fsx::stat_at(p.as_fd(), fsx::file_name(&c.path)).ok())
                    .flatten();
                let escape = match st.map(|s| s.st_mode & libc::S_IFMT) {
                    Some(libc::S_IFIFO) => Escape::Fifo,
                    Some(libc::S_IFSOCK) => Escape::Socket,
                    _ => Escape::Device,
                };
                refusals.push(refuse(escape));
            }
            ChangeKind::Symlink { target } => {
                let place = after.resolve(&c.path, target);
                if !place.allowed() {
                    refusals.push(refuse(Escape::SymlinkOutside {
                        target: target.clone(),
                        resolved: place.outside(),
                    }));
                }
            }
            ChangeKind::Added | ChangeKind::Modified | ChangeKind::ModeChanged => {
                if c.links.0 > c.links.1 {
                    refusals.push(refuse(Escape::HardLinkOutside));
                }
            }
            ChangeKind::DirAdded | ChangeKind::Deleted { .. } => {}
        }
        if journal::reserved(&c.path) {
            refusals.push(refuse(Escape::Reserved));
        }
        if let Some(m) = c.mode.filter(|m| m & 0o6000 != 0) {
            refusals.push(refuse(Escape::SetId { mode: m }));
        }
        // 2. The real side: no symlink on the way; unchanged since the run started.
        match way(real.as_fd(), &c.path, &created).map_err(io_err(&c.path))? {
            Way::NotDir(at) => refusals.push(refuse(Escape::ThroughSymlink { at })),
            Way::Missing => {
                if c.real.is_some() {
                    conflicts.push(c.path.clone());
                }
            }
            Way::Dir(parent) => {
                let now = fsx::stat_at(parent.as_fd(), fsx::file_name(&c.path))
                    .map_err(io_err(&c.path))?
                    .map(|s| stamp_of(&s));
                let moved = now != c.real || now.is_some_and(|s| s.ctime >= layer.start());
                if moved && restored.get(&c.path) != Some(&now) {
                    conflicts.push(c.path.clone());
                }
            }
        }
    }
    if changes
        .iter()
        .any(|c| matches!(c.kind, ChangeKind::Symlink { .. }))
    {
        for (path, target, place) in after.redirected().map_err(io_err(Path::new(".")))? {
            refusals.push(Refusal {
                path,
                escape: Escape::Redirected {
                    target,
                    resolved: place.outside(),
                },
            });
        }
    }
    if !refusals.is_empty() {
        return Err(ApplyError::Refused { refusals });
    }
    conflicts.dedup();
    let mut report = ApplyReport::default();
    if !conflicts.is_empty() {
        if !force {
            return Err(ApplyError::Conflict { paths: conflicts });
        }
        report.forced = conflicts;
    }

    // 3. Room: a disk that fills half way would leave half a change set, so the new
    //    contents must fit before anything is written. (Another writer may still take the
    //    room meanwhile: then the write fails with ENOSPC at that path.)
    room(real.as_fd(), ws, changes)?;
    if changes.is_empty() {
        return Ok(report);
    }

    // 4. Stage every new file and link before the first step that changes the workspace,
    //    then take the steps under a journal that undoes them all if one fails.
    let mut journal = Journal::begin(real.as_fd()).map_err(io_err(Path::new(".")))?;
    let staging = journal.path();
    let done = stage(real.as_fd(), &src, &mut journal, changes)
        .and_then(|staged| write(real.as_fd(), &mut journal, changes, &staged, &mut report));
    match done {
        Ok(()) => {
            journal.commit();
            Ok(report)
        }
        Err(e) => {
            let stuck = journal.roll_back();
            if stuck.is_empty() {
                for c in changes {
                    if let Ok(Way::Dir(parent)) = way(real.as_fd(), &c.path, &created) {
                        if let Ok(now) = fsx::stat_at(parent.as_fd(), fsx::file_name(&c.path)) {
                            restored.insert(c.path.clone(), now.map(|s| stamp_of(&s)));
                        }
                    }
                }
                Err(e)
            } else {
                let (path, source) = match e {
                    ApplyError::Io { path, source } => (path, source),
                    other => (PathBuf::from("."), io::Error::other(other.to_string())),
                };
                Err(ApplyError::Stuck {
                    path,
                    source,
                    stuck: stuck.into_iter().map(|(p, _)| p).collect(),
                    staging: ws.join(staging),
                })
            }
        }
    }
}

/// A staged entry, by the index of its change: its staging directory, its name there, its
/// path relative to the workspace, and its inode.
pub(super) type Staged = HashMap<usize, (usize, OsString, PathBuf, u64)>;

/// The deepest directory of `rel`'s parent that exists in the real workspace, and its path:
/// where `rel` will be written (the directories the change set adds below it are made on
/// its filesystem).
fn nearest_dir(real: BorrowedFd<'_>, rel: &Path) -> io::Result<(PathBuf, OwnedFd)> {
    let mut cur = nix::unistd::dup(real).map_err(fsx::nix_io)?;
    let mut at = PathBuf::new();
    for c in rel.parent().unwrap_or(Path::new("")).components() {
        let Component::Normal(n) = c else { continue };
        match fsx::open_dir_at(cur.as_fd(), n) {
            Ok(fd) => {
                cur = fd;
                at.push(n);
            }
            Err(_) => break,
        }
    }
    Ok((at, cur))
}

/// Copy every new file's contents (and make every new link) in the staging directory, with
/// its final mode: whatever fails here (a file of the layer the host cannot read, a full
/// disk) fails before the workspace is touched.
pub(super) fn stage(
    real: BorrowedFd<'_>,
    src: &OwnedFd,
    journal: &mut Journal,
    changes: &[Change],
) -> Result<Staged, ApplyError> {
    let mut staged = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        let copied = match c.kind {
            ChangeKind::Added | ChangeKind::Modified | ChangeKind::Symlink { .. } => true,
            ChangeKind::ModeChanged => shared_file(real, &c.path).map_err(io_err(&c.path))?,
            _ => false,
        };
        if !copied {
            continue;
        }
        let name = fsx::file_name(&c.path);
        let (at, dir) = nearest_dir(real, &c.path).map_err(io_err(&c.path))?;
        let k = journal
            .stage_for(&at, dir.as_fd())
            .map_err(io_err(&c.path))?;
        let (slot, rel) = journal.slot(k);
        match &c.kind {
            ChangeKind::Added | ChangeKind::Modified | ChangeKind::ModeChanged => {
                let from = fsx::open_parent(src.as_fd(), &c.path)
                    .map_err(io_err(&c.path))?
                    .ok_or_else(|| io_err(&c.path)(io::Error::from_raw_os_error(libc::ENOENT)))?;
                let mut input = open_source(from.as_fd(), name).map_err(io_err(&c.path))?;
                let fd = nix::fcntl::openat(
                    journal.dir(k),
                    slot.as_os_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .map_err(nix_err(&c.path))?;
                let mut out = std::fs::File::from(fd);
                io::copy(&mut input, &mut out).map_err(io_err(&c.path))?;
                fchmod(out.as_fd(), mode_bits(c.mode.unwrap_or(0o644)))
                    .map_err(nix_err(&c.path))?;
                let ino = nix::sys::stat::fstat(&out)
                    .map_err(nix_err(&c.path))?
                    .st_ino;
                staged.insert(i, (k, slot, rel, ino));
            }
            ChangeKind::Symlink { target } => {
                symlinkat(target.as_path(), journal.dir(k), slot.as_os_str())
                    .map_err(nix_err(&c.path))?;
                let ino = fsx::stat_at(journal.dir(k), &slot)
                    .map_err(io_err(&c.path))?
                    .map_or(0, |st| st.st_ino);
                staged.insert(i, (k, slot, rel, ino));
            }
            _ => {}
        }
    }
    Ok(staged)
}

/// Whether `rel` is a regular file of the real workspace with more than one name. Its mode
/// change is then a copy exchanged in, as a contents change is: a `chmod` of the real inode
/// would change its other names too, which the change set leaves as they were (in the
/// layer they are files of their own: a copy, or overlay's copy-up, splits the link).
fn shared_file(real: BorrowedFd<'_>, rel: &Path) -> io::Result<bool> {
    let Some(parent) = fsx::open_parent(real, rel)? else {
        return Ok(false);
    };
    Ok(fsx::stat_at(parent.as_fd(), fsx::file_name(rel))?
        .is_some_and(|st| fsx::kind(&st) == Kind::File && st.st_nlink > 1))
}

/// Open the regular file `name` of the layer for reading. The layer is the host's own, so
/// a file the command left unreadable (mode 000) is made readable to its owner first: the
/// mode the change set applies is the one recorded, not the layer's.
fn open_source(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<std::fs::File> {
    match fsx::open_file_at(dir, name) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            let st = fsx::stat_at(dir, name)?.ok_or(e)?;
            if fsx::kind(&st) != Kind::File {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            chmod_at(dir, name, (st.st_mode & 0o7777) | 0o400)?;
            fsx::open_file_at(dir, name)
        }
        r => r,
    }
}

/// Take every step into the real workspace, each written in the journal first.
pub(super) fn write(
    real: BorrowedFd<'_>,
    journal: &mut Journal,
    changes: &[Change],
    staged: &Staged,
    report: &mut ApplyReport,
) -> Result<(), ApplyError> {
    // Deletions, shallowest first: a directory moves aside whole, with what it held.
    let mut trashed: Vec<&Path> = Vec::new();
    for c in changes.iter().filter(|c| c.is_deletion()) {
        if trashed.iter().any(|t| c.path.starts_with(t)) {
            report.deleted += 1;
            continue;
        }
        let Ok(Some(parent)) = fsx::open_parent(real, &c.path) else {
            continue;
        };
        let name = fsx::file_name(&c.path);
        let Some(st) = fsx::stat_at(parent.as_fd(), name).map_err(io_err(&c.path))? else {
            continue;
        };
        // Moving a directory to another parent rewrites its `..`, which takes write
        // permission on it (an `rmdir` of the empty one would not): a read-only directory of
        // the host's own is made writable first, and that is undone with the rest.
        let old = st.st_mode & 0o7777;
        if fsx::kind(&st) == Kind::Dir && old & 0o200 == 0 && !nix::unistd::geteuid().is_root() {
            journal
                .record(Step::Mode {
                    path: c.path.clone(),
                    old,
                })
                .map_err(io_err(&c.path))?;
            chmod_at(parent.as_fd(), name, old | 0o700).map_err(io_err(&c.path))?;
        }
        let k = journal
            .stage_for(c.path.parent().unwrap_or(Path::new("")), parent.as_fd())
            .map_err(io_err(&c.path))?;
        let (slot, rel) = journal.slot(k);
        journal
            .record(Step::Trash {
                path: c.path.clone(),
                slot: rel,
            })
            .map_err(io_err(&c.path))?;
        renameat(parent.as_fd(), name, journal.dir(k), slot.as_os_str())
            .map_err(nix_err(&c.path))?;
        trashed.push(&c.path);
        report.deleted += 1;
    }

    // Additions, parents first; directory modes afterwards, deepest first.
    let mut dir_modes = Vec::new();
    for (i, c) in changes.iter().enumerate().filter(|(_, c)| !c.is_deletion()) {
        let parent = fsx::open_parent(real, &c.path)
            .map_err(io_err(&c.path))?
            .ok_or_else(|| io_err(&c.path)(io::Error::from_raw_os_error(libc::ENOENT)))?;
        let name = fsx::file_name(&c.path);
        let now = fsx::stat_at(parent.as_fd(), name).map_err(io_err(&c.path))?;
        match &c.kind {
            ChangeKind::DirAdded => {
                if now.as_ref().map(fsx::kind) != Some(Kind::Dir) {
                    journal
                        .record(Step::New {
                            path: c.path.clone(),
                            ino: None,
                        })
                        .map_err(io_err(&c.path))?;
                    mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700))
                        .map_err(nix_err(&c.path))?;
                }
                let old = now
                    .as_ref()
                    .filter(|st| fsx::kind(st) == Kind::Dir)
                    .map_or(0o700, |st| st.st_mode & 0o7777);
                dir_modes.push((c, old));
                report.written += 1;
            }
            ChangeKind::Added | ChangeKind::Modified | ChangeKind::Symlink { .. } => {
                let Some(slot) = staged.get(&i) else {
                    return Err(io_err(&c.path)(io::Error::other("not staged")));
                };
                // A directory here now is someone's since the checks (the change set's own
                // was moved aside): never exchanged away.
                if now.as_ref().map(fsx::kind) == Some(Kind::Dir) {
                    return Err(io_err(&c.path)(io::Error::from_raw_os_error(libc::EISDIR)));
                }
                place(journal, parent.as_fd(), c, slot, now.is_some())?;
                report.written += 1;
            }
            ChangeKind::ModeChanged => match now {
                Some(st) if fsx::kind(&st) == Kind::Dir => dir_modes.push((c, st.st_mode & 0o7777)),
                // One name of a file with several (`shared_file`): its copy, with the mode.
                Some(_) if staged.contains_key(&i) => {
                    place(journal, parent.as_fd(), c, &staged[&i], true)?;
                    report.modes += 1;
                }
                Some(st) => {
                    journal
                        .record(Step::Mode {
                            path: c.path.clone(),
                            old: st.st_mode & 0o7777,
                        })
                        .map_err(io_err(&c.path))?;
                    chmod_at(parent.as_fd(), name, c.mode.unwrap_or(0o644))
                        .map_err(io_err(&c.path))?;
                    report.modes += 1;
                }
                None => return Err(io_err(&c.path)(io::Error::from_raw_os_error(libc::ENOENT))),
            },
            ChangeKind::Deleted { .. } | ChangeKind::Special => {}
        }
    }
    for (c, old) in dir_modes.into_iter().rev() {
        let parent = fsx::open_parent(real, &c.path)
            .map_err(io_err(&c.path))?
            .ok_or_else(|| io_err(&c.path)(io::Error::from_raw_os_error(libc::ENOENT)))?;
        journal
            .record(Step::Mode {
                path: c.path.clone(),
                old,
            })
            .map_err(io_err(&c.path))?;
        chmod_at(
            parent.as_fd(),
            fsx::file_name(&c.path),
            c.mode.unwrap_or(0o755),
        )
        .map_err(io_err(&c.path))?;
        if c.kind == ChangeKind::ModeChanged {
            report.modes += 1;
        }
    }
    Ok(())
}

/// Put the staged `slot` at `c`'s path: exchanged with the old entry (a reader sees the old
/// one or the new one, and the old one is kept for an undo), else renamed where nothing is
/// (a name someone made meanwhile is not overwritten).
fn place(
    journal: &mut Journal,
    parent: BorrowedFd<'_>,
    c: &Change,
    (k, slot, rel, ino): &(usize, OsString, PathBuf, u64),
    exists: bool,
) -> Result<(), ApplyError> {
    let (k, slot, ino) = (*k, slot.as_os_str(), *ino);
    let name = fsx::file_name(&c.path);
    if exists {
        journal
            .record(Step::Swap {
                path: c.path.clone(),
                slot: rel.clone(),
                ino,
            })
            .map_err(io_err(&c.path))?;
        match rustix::fs::renameat_with(journal.dir(k), slot, parent, name, RenameFlags::EXCHANGE) {
            Ok(()) => return Ok(()),
            // A filesystem without exchange: move the old one aside, then place.
            Err(rustix::io::Errno::INVAL) => {
                let (aside, aside_rel) = journal.slot(k);
                journal
                    .record(Step::Trash {
                        path: c.path.clone(),
                        slot: aside_rel,
                    })
                    .map_err(io_err(&c.path))?;
                renameat(parent, name, journal.dir(k), aside.as_os_str())
                    .map_err(nix_err(&c.path))?;
            }
            Err(e) => return Err(io_err(&c.path)(e.into())),
        }
    }
    journal
        .record(Step::New {
            path: c.path.clone(),
            ino: Some(ino),
        })
        .map_err(io_err(&c.path))?;
    rustix::fs::renameat_with(journal.dir(k), slot, parent, name, RenameFlags::NOREPLACE)
        .map_err(|e| io_err(&c.path)(e.into()))
}

/// Whether the filesystem of the workspace (`real`) holds what `changes` add.
fn room(real: BorrowedFd<'_>, ws: &Path, changes: &[Change]) -> Result<(), ApplyError> {
    let st = nix::sys::statvfs::fstatvfs(real).map_err(nix_err(Path::new(".")))?;
    let block = (st.fragment_size() as u64).max(1);
    let mut blocks = 0u64;
    let mut entries = 0u64;
    for c in changes {
        match c.kind {
            // A file's blocks, plus one for its metadata (extents, a directory's growth).
            ChangeKind::Added | ChangeKind::Modified => {
                blocks += c.size.div_ceil(block) + 1;
                entries += 1;
            }
            ChangeKind::Symlink { .. } | ChangeKind::DirAdded => {
                blocks += 1;
                entries += 1;
            }
            _ => {}
        }
    }
    let available = st.blocks_available() as u64;
    // Filesystems without an inode count (btrfs, some FUSE) report zero files: no limit.
    let inodes = st.files_available() as u64;
    let short_of_inodes = st.files() > 0 && entries > inodes;
    if blocks > available || short_of_inodes {
        return Err(ApplyError::NoSpace {
            workspace: ws.to_path_buf(),
            needed: blocks * block,
            available: available * block,
            entries,
            inodes,
        });
    }
    Ok(())
}
