//! The change set a host reviews, applies or discards, as the contract sees it.
//!
//! With [`Changes::Review`] or [`Changes::Discard`] the command works on a layer over the
//! workspace instead of the workspace itself; the host crate makes the layer, scans it and
//! writes it back. What the caller holds is a [`ChangeSet`]: the list of changes, and the
//! layer behind a [`PendingLayer`] so that this crate stays free of the machinery.
//!
//! [`ChangeSet::apply`] first checks everything, and writes nothing if any check fails:
//! **escapes** ([`Escape`]) always refuse; **conflicts** (a real file that changed after
//! the run started) refuse unless forced. Dropping the last clone of a [`ChangeSet`] (or
//! calling [`ChangeSet::discard`]) removes the layer: nothing stays on disk.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// What happens to the command's changes to the workspace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Changes {
    /// The command writes the workspace itself. The default.
    #[default]
    Direct,
    /// The command writes a layer that is thrown away (what `snapshot` means).
    Discard,
    /// The command writes a layer; the outcome carries the [`ChangeSet`] to apply or
    /// discard.
    Review,
}

/// What one change did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ChangeKind {
    /// A regular file that did not exist.
    Added,
    /// A regular file whose contents changed.
    Modified,
    /// A file, symlink or directory that is gone (a deleted directory also lists every
    /// entry it held).
    Deleted {
        /// It was a directory.
        dir: bool,
    },
    /// Only the permission bits changed.
    ModeChanged,
    /// A symlink created (or re-pointed).
    Symlink {
        /// Where it points, as written.
        target: PathBuf,
    },
    /// A directory created.
    DirAdded,
    /// A FIFO, socket or device node created: listed so the host sees it, never applied.
    Special,
}

/// The state of a real path when the change set was made: apply refuses to overwrite one
/// that has moved on since (a conflict).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(hidden)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

/// One change, relative to the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The path, relative to the workspace.
    pub path: PathBuf,
    /// What happened.
    #[serde(flatten)]
    pub kind: ChangeKind,
    /// The new size in bytes (a symlink: its target's length; a deletion: the old size).
    pub size: u64,
    /// The permission bits before, where the path existed and its mode changed.
    pub old_mode: Option<u32>,
    /// The permission bits after (`st_mode & 0o7777`), for what exists after.
    pub mode: Option<u32>,
    /// The real path as it was when the set was made (`None`: absent).
    #[serde(skip)]
    #[doc(hidden)]
    pub real: Option<Stamp>,
    /// For a regular file: its link count in the layer, and how many of those links the
    /// layer holds (fewer means a hard link to something outside).
    #[serde(skip)]
    #[doc(hidden)]
    pub links: (u64, u64),
}

impl Change {
    /// True for a deletion.
    pub fn is_deletion(&self) -> bool {
        matches!(self.kind, ChangeKind::Deleted { .. })
    }
}

/// What the command changed in the workspace, held until it is applied, discarded or
/// dropped. Cloning shares the one layer; the last clone dropped removes it.
#[derive(Clone)]
pub struct ChangeSet {
    summary: Arc<Summary>,
    store: Arc<Mutex<Option<Box<dyn PendingLayer>>>>,
    real: ReadReal,
}

/// Reads a regular file of the real workspace (relative path, byte cap) without following a
/// symlink anywhere on the way; the host crate supplies it.
pub type ReadReal = fn(workspace: &Path, path: &Path, cap: usize) -> Option<Vec<u8>>;

/// The layer behind a pending [`ChangeSet`], implemented by the host crate: the contract
/// holds it without knowing how it is made. Dropping it removes the layer from disk.
pub trait PendingLayer: Send + fmt::Debug {
    /// How the layer was made.
    fn mechanism(&self) -> LayerMechanism;
    /// The real workspace it lies over.
    fn workspace(&self) -> &Path;
    /// The directory holding it.
    fn dir(&self) -> &Path;
    /// The new contents of the regular file `path` (relative), at most `cap` bytes.
    fn read_source(&self, path: &Path, cap: usize) -> Option<Vec<u8>>;
    /// Check every change, then write them into the real workspace, all or nothing (see
    /// [`ChangeSet::apply`]); a failed apply may be tried again.
    fn apply(&mut self, changes: &[Change], force: bool) -> Result<ApplyReport, ApplyError>;
}

#[derive(Debug, Serialize)]
struct Summary {
    mechanism: LayerMechanism,
    workspace: PathBuf,
    changes: Vec<Change>,
}

impl fmt::Debug for ChangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.summary.fmt(f)
    }
}

impl Serialize for ChangeSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.summary.serialize(s)
    }
}

impl ChangeSet {
    /// A change set over `layer` (the host crate makes one after its scan).
    pub fn new(layer: Box<dyn PendingLayer>, changes: Vec<Change>, real: ReadReal) -> Self {
        Self {
            real,
            summary: Arc::new(Summary {
                mechanism: layer.mechanism(),
                workspace: layer.workspace().to_path_buf(),
                changes,
            }),
            store: Arc::new(Mutex::new(Some(layer))),
        }
    }

    /// How the layer was made.
    pub fn mechanism(&self) -> LayerMechanism {
        self.summary.mechanism
    }

    /// The real workspace the changes are against.
    pub fn workspace(&self) -> &Path {
        &self.summary.workspace
    }

    /// Every change, in path order.
    pub fn changes(&self) -> &[Change] {
        &self.summary.changes
    }

    /// True when the command changed nothing.
    pub fn is_empty(&self) -> bool {
        self.summary.changes.is_empty()
    }

    /// The new contents of the regular file `path` (relative), as the command left it; `None`
    /// once applied or discarded, or when it is not a regular file of the layer.
    pub fn new_contents(&self, path: &Path, cap: usize) -> Option<Vec<u8>> {
        let guard = self.store.lock().ok()?;
        guard.as_ref()?.read_source(path, cap)
    }

    /// The current contents of the regular file `path` (relative) in the real workspace,
    /// read without following a symlink anywhere on the way.
    pub fn old_contents(&self, path: &Path, cap: usize) -> Option<Vec<u8>> {
        (self.real)(&self.summary.workspace, path, cap)
    }

    /// Check every change, then write them into the real workspace, all or nothing.
    /// Nothing is written when a check fails: an escape always refuses; a conflict
    /// refuses unless `force`; a write that fails is undone. An apply that went through
    /// consumes the layer: a second call is an [`ApplyError::Gone`].
    pub fn apply(&self, force: bool) -> Result<ApplyReport, ApplyError> {
        let mut guard = self.store.lock().map_err(|_| ApplyError::Gone)?;
        let layer = guard.as_mut().ok_or(ApplyError::Gone)?;
        let report = layer.apply(&self.summary.changes, force);
        // A refusal, a conflict or a failed write (undone) leaves the layer for the caller
        // to look at, force, apply again or discard; an apply that went through drops it.
        if report.is_ok() {
            guard.take();
        }
        report
    }

    /// Throw the changes away now (dropping the last clone does the same).
    pub fn discard(&self) {
        if let Ok(mut g) = self.store.lock() {
            g.take();
        }
    }

    /// Whether the layer is still on disk (not yet applied or discarded).
    pub fn is_pending(&self) -> bool {
        self.store.lock().map(|g| g.is_some()).unwrap_or(false)
    }

    /// The directory holding the layer, while it is pending (for tests that check nothing
    /// stays behind).
    pub fn layer_dir(&self) -> Option<PathBuf> {
        let g = self.store.lock().ok()?;
        g.as_ref().map(|l| l.dir().to_path_buf())
    }
}

/// How the layer over the workspace is made (see the module docs of [`crate::changes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerMechanism {
    /// overlayfs over the workspace's path, in the command's mount namespace: O(1).
    Overlay,
    /// A copy sharing blocks with the original (`FICLONE`).
    Reflink,
    /// A plain copy.
    Copy,
}

impl LayerMechanism {
    /// The name used in notes and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Overlay => "overlay",
            Self::Reflink => "reflink",
            Self::Copy => "copy",
        }
    }
}

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
    /// A name at the workspace's top that the apply keeps for its own staging and journal
    /// (`.sandbox-apply-*`): a planted journal would be obeyed by the next start.
    Reserved,
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
            Self::Reserved => f.write_str("a name the apply keeps for its own journal"),
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

/// Why [`ChangeSet::apply`](ChangeSet::apply) wrote nothing, or stopped.
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
    /// Writing failed, and undoing what was written failed for some paths: the workspace
    /// is part way. The old entries and the journal are kept in `staging`; the next apply
    /// or run with a change layer on this workspace undoes what it can again.
    #[error(
        "applying {}: {source}; undoing it failed for {}: the journal and the old entries \
         are in {}, undone again by the next apply or layered run on this workspace",
        .path.display(),
        list_paths(.stuck),
        .staging.display()
    )]
    Stuck {
        /// Where it failed, relative to the workspace.
        path: PathBuf,
        /// The error.
        source: io::Error,
        /// The paths not put back, relative to the workspace.
        stuck: Vec<PathBuf>,
        /// The staging directory holding the journal and the old entries.
        staging: PathBuf,
    },
    /// The change set was already applied or discarded.
    #[error("the change set was already applied or discarded")]
    Gone,
    /// Writing failed; what was written before was undone, so nothing is applied. The
    /// change set is kept: fix the cause and apply again, or discard.
    #[error("applying {}: {source}; nothing applied (undone)", .path.display())]
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
