//! Apply a change set into the real workspace: check everything first, write nothing if a
//! check fails, then write each file beside its target and rename it over.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::renameat;
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};

use super::layer::Layer;
use super::{stamp_of, ApplyError, ApplyReport, Change, ChangeKind, Escape, Refusal};
use crate::fs::fsx::{self, Kind};
use crate::fs::tree;

/// Lexically resolve `target` from the directory `parent` (relative to the workspace
/// `ws`): does it stay inside `ws`?
fn stays_inside(ws: &Path, parent: &Path, target: &Path) -> bool {
    let mut stack: Vec<&OsStr> = Vec::new();
    let base: Vec<&OsStr> = if target.is_absolute() {
        Vec::new()
    } else {
        ws.components()
            .chain(parent.components())
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect()
    };
    stack.extend(base);
    for c in target.components() {
        match c {
            Component::Normal(n) => stack.push(n),
            Component::ParentDir if stack.pop().is_none() => return false,
            _ => {}
        }
    }
    let resolved: PathBuf = std::iter::once(OsStr::new("/")).chain(stack).collect();
    resolved.starts_with(ws)
}

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

pub(crate) fn apply(
    layer: &Layer,
    changes: &[Change],
    force: bool,
) -> Result<ApplyReport, super::ApplyError> {
    let ws = layer.workspace();
    let real = fsx::open_root(ws).map_err(io_err(Path::new(".")))?;
    let src = fsx::open_root(layer.source()).map_err(io_err(Path::new(".")))?;
    let created: BTreeSet<&Path> = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::DirAdded)
        .map(|c| c.path.as_path())
        .collect();

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
                let parent = c.path.parent().unwrap_or(Path::new(""));
                if !stays_inside(ws, parent, target) {
                    refusals.push(refuse(Escape::SymlinkOutside {
                        target: target.clone(),
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
                if moved {
                    conflicts.push(c.path.clone());
                }
            }
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

    // 4. Deletions, deepest first.
    for c in changes.iter().rev().filter(|c| c.is_deletion()) {
        let Ok(Some(parent)) = fsx::open_parent(real.as_fd(), &c.path) else {
            continue;
        };
        let name = fsx::file_name(&c.path);
        let Some(st) = fsx::stat_at(parent.as_fd(), name).map_err(io_err(&c.path))? else {
            continue;
        };
        let flag = if fsx::kind(&st) == Kind::Dir {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        unlinkat(parent.as_fd(), name, flag).map_err(nix_err(&c.path))?;
        report.deleted += 1;
    }

    // 5. Additions, parents first; directory modes afterwards, deepest first.
    let mut dir_modes = Vec::new();
    for c in changes.iter().filter(|c| !c.is_deletion()) {
        let parent = fsx::open_parent(real.as_fd(), &c.path)
            .map_err(io_err(&c.path))?
            .ok_or_else(|| ApplyError::Io {
                path: c.path.clone(),
                source: io::Error::from_raw_os_error(libc::ENOENT),
            })?;
        let name = fsx::file_name(&c.path);
        match &c.kind {
            ChangeKind::DirAdded => {
                match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(nix::Error::EEXIST) => {}
                    Err(e) => return Err(nix_err(&c.path)(e)),
                }
                dir_modes.push(c);
                report.written += 1;
            }
            ChangeKind::Added | ChangeKind::Modified => {
                let from = fsx::open_parent(src.as_fd(), &c.path)
                    .map_err(io_err(&c.path))?
                    .ok_or_else(|| io_err(&c.path)(io::Error::from_raw_os_error(libc::ENOENT)))?;
                let mut from = fsx::open_file_at(from.as_fd(), name).map_err(io_err(&c.path))?;
                write_beside(parent.as_fd(), name, c.mode.unwrap_or(0o644), |mut out| {
                    io::copy(&mut from, &mut out).map(|_| ())
                })
                .map_err(io_err(&c.path))?;
                report.written += 1;
            }
            ChangeKind::Symlink { target } => {
                let tmp = tree::temp_name();
                symlinkat(target.as_path(), parent.as_fd(), tmp.as_os_str())
                    .map_err(nix_err(&c.path))?;
                if let Err(e) = renameat(parent.as_fd(), tmp.as_os_str(), parent.as_fd(), name) {
                    let _ = unlinkat(parent.as_fd(), tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
                    return Err(nix_err(&c.path)(e));
                }
                report.written += 1;
            }
            ChangeKind::ModeChanged => {
                let st = fsx::stat_at(parent.as_fd(), name).map_err(io_err(&c.path))?;
                if st.as_ref().map(fsx::kind) == Some(Kind::Dir) {
                    dir_modes.push(c);
                } else {
                    let f = fsx::open_file_at(parent.as_fd(), name).map_err(io_err(&c.path))?;
                    fchmod(f.as_fd(), mode_bits(c.mode.unwrap_or(0o644)))
                        .map_err(nix_err(&c.path))?;
                    report.modes += 1;
                }
            }
            ChangeKind::Deleted { .. } | ChangeKind::Special => {}
        }
    }
    for c in dir_modes.into_iter().rev() {
        let Some(parent) = fsx::open_parent(real.as_fd(), &c.path).map_err(io_err(&c.path))? else {
            continue;
        };
        let d =
            fsx::open_dir_at(parent.as_fd(), fsx::file_name(&c.path)).map_err(io_err(&c.path))?;
        fchmod(d.as_fd(), mode_bits(c.mode.unwrap_or(0o755))).map_err(nix_err(&c.path))?;
        if c.kind == ChangeKind::ModeChanged {
            report.modes += 1;
        }
    }
    Ok(report)
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

/// Create a new file beside `name` in `dir`, fill it, give it `mode`, and rename it over
/// `name`: a reader sees the old file or the new one, never half of it.
fn write_beside(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    mode: u32,
    fill: impl FnOnce(&std::fs::File) -> io::Result<()>,
) -> io::Result<()> {
    let new = tree::Beside::create(dir)?;
    fill(new.file())?;
    fchmod(new.file().as_fd(), mode_bits(mode)).map_err(fsx::nix_io)?;
    new.rename_over(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets_are_judged_from_where_they_sit() {
        let ws = Path::new("/w/s");
        assert!(stays_inside(ws, Path::new("a"), Path::new("../b")));
        assert!(stays_inside(ws, Path::new(""), Path::new("a/../b")));
        assert!(!stays_inside(ws, Path::new(""), Path::new("../x")));
        assert!(!stays_inside(
            ws,
            Path::new("a/b"),
            Path::new("../../../s2")
        ));
        assert!(stays_inside(ws, Path::new("a"), Path::new("/w/s/c")));
        assert!(!stays_inside(ws, Path::new("a"), Path::new("/etc/passwd")));
        assert!(!stays_inside(ws, Path::new("a"), Path::new("/w/s/../x")));
        assert!(!stays_inside(ws, Path::new(""), Path::new("/w/sx")));
    }
}
