//! Apply a change set into the real workspace: check everything first, write nothing if a
//! check fails, then write each file beside its target and rename it over.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::renameat;
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use serde::Serialize;

use super::fsx::{self, Kind};
use super::layer::Layer;
use super::resolve::After;
use super::{Change, ChangeKind, Stamp};
use crate::process::tree;

/// Why a change cannot be applied at all, forced or not: it would reach out of the
/// workspace or plant something the host might trip over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Escape {
    /// A symlink that, resolved as the kernel will once the change set is applied (every
    /// link on the way followed, the change set's own included), leaves the workspace for
    /// somewhere other than the host's programs and libraries.
    SymlinkOutside {
        /// The target as written.
        target: PathBuf,
        /// Where it leads on the host (`None`: through more links than the kernel follows).
        resolved: Option<PathBuf>,
    },
    /// A symlink the workspace already has, left as it is, that the change set turns out of
    /// the workspace (a directory on its way replaced by a link).
    Redirected {
        /// The target as written.
        target: PathBuf,
        /// Where it would lead after the apply (`None`: through more links than the kernel
        /// follows).
        resolved: Option<PathBuf>,
    },
    /// A character or block device node.
    Device,
    /// A FIFO.
    Fifo,
    /// A unix socket.
    Socket,
    /// A set-user-id or set-group-id bit.
    SetId {
        /// The permission bits asked.
        mode: u32,
    },
    /// A regular file with more links than the layer holds: a hard link to a file
    /// outside.
    HardLinkOutside,
    /// A directory on the way in the real workspace is a symlink (or not a directory).
    ThroughSymlink {
        /// The path, relative to the workspace, that is not a directory.
        at: PathBuf,
    },
}

impl fmt::Display for Escape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SymlinkOutside { target, resolved } => match resolved {
                Some(r) => write!(
                    f,
                    "a symlink to {}, which leads to {} (out of the workspace)",
                    target.display(),
                    r.display()
                ),
                None => write!(
                    f,
                    "a symlink to {}, which goes through more links than the kernel follows",
                    target.display()
                ),
            },
            Self::Redirected { target, resolved } => match resolved {
                Some(r) => write!(
                    f,
                    "the workspace's symlink to {}, which the changes would make lead to {} \
                     (out of the workspace)",
                    target.display(),
                    r.display()
                ),
                None => write!(
                    f,
                    "the workspace's symlink to {}, which the changes would make go through \
                     more links than the kernel follows",
                    target.display()
                ),
            },
            Self::Device => f.write_str("a device node"),
            Self::Fifo => f.write_str("a FIFO"),
            Self::Socket => f.write_str("a socket"),
            Self::SetId { mode } => write!(f, "a set-id bit (mode {mode:o})"),
            Self::HardLinkOutside => f.write_str("a hard link to a file outside the workspace"),
            Self::ThroughSymlink { at } => {
                write!(
                    f,
                    "a path through {}, which is not a directory",
                    at.display()
                )
            }
        }
    }
}

/// One refused change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The change's path, relative to the workspace.
    pub path: PathBuf,
    /// Why.
    pub escape: Escape,
}

/// Why [`ChangeSet::apply`](super::ChangeSet::apply) wrote nothing, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// Some changes may never be applied; nothing was written. Discard the change set.
    #[error("refused, nothing applied: {}", list_refusals(.refusals))]
    Refused {
        /// Every refused change.
        refusals: Vec<Refusal>,
    },
    /// Files the change set touches changed in the real workspace after the run started;
    /// nothing was written. Apply with `force` to overwrite them, or discard.
    #[error(
        "conflict, nothing applied: {} changed in the workspace after the run started; \
         apply with force to overwrite, or discard",
        list_paths(.paths)
    )]
    Conflict {
        /// The paths, relative to the workspace.
        paths: Vec<PathBuf>,
    },
    /// The workspace's filesystem has no room for the new contents; nothing was written.
    #[error(
        "no space left on the workspace's disk (ENOSPC), nothing applied: the changes need \
         {needed} bytes and {} new entries, the filesystem of {} has {available} bytes and \
         {inodes} entries free; free space there, or discard",
        .entries,
        .workspace.display()
    )]
    NoSpace {
        /// The real workspace.
        workspace: PathBuf,
        /// Bytes the new contents take (whole blocks).
        needed: u64,
        /// Bytes free for an unprivileged writer.
        available: u64,
        /// Entries (files, links, directories) the changes add.
        entries: u64,
        /// Entries (inodes) free.
        inodes: u64,
    },
    /// The change set was already applied or discarded.
    #[error("the change set was already applied or discarded")]
    Gone,
    /// Writing failed part-way; the changes before `path` were applied.
    #[error("applying {}: {source}", .path.display())]
    Io {
        /// Where it failed, relative to the workspace.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn list_paths(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn list_refusals(r: &[Refusal]) -> String {
    r.iter()
        .map(|r| format!("{}: {}", r.path.display(), r.escape))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// Files, symlinks and directories written or created.
    pub written: usize,
    /// Entries deleted.
    pub deleted: usize,
    /// Mode changes made.
    pub modes: usize,
    /// Conflicting paths overwritten because the caller forced it.
    pub forced: Vec<PathBuf>,
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
                    .map(|s| Stamp::of(&s));
                let moved = now != c.real || now.is_some_and(|s| s.ctime >= layer.start());
                if moved {
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
