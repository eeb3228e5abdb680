//! A copy-on-write layer over the workspace, and the change set the host reviews, applies
//! or discards.
//!
//! # The layer
//!
//! With [`Changes::Review`] or [`Changes::Discard`] the command works on a layer over the
//! workspace instead of the workspace itself. The mechanism, best first:
//!
//! - [`LayerMechanism::Overlay`]: an overlayfs mounted over the workspace's own path in a
//!   private mount namespace of the command (a user namespace too when the host is not
//!   root, Linux ≥ 5.11 with `userxattr`). O(1) in the workspace's size. The upper and work
//!   directories live in a private temp dir of the host; `redirect_dir` and `metacopy` are
//!   off, so the upper directory alone says what changed (a directory renamed by the
//!   command shows as a delete and an add).
//! - [`LayerMechanism::Reflink`]: a copy whose files share their blocks with the originals
//!   (`FICLONE`), where the temp dir and the workspace are on one filesystem that can.
//! - [`LayerMechanism::Copy`]: a plain copy (regular files, directories and symlinks).
//!
//! Overlay is tried per workspace filesystem once per process (a probe mount in a forked
//! child); the mechanism used is in [`ChangeSet::mechanism`] and in the outcome's notes.
//!
//! # The change set
//!
//! After the command's whole tree is dead, the layer is compared with the real workspace
//! ([`scan`]): for overlay, the upper directory (a `0/0` character device is a whiteout, a
//! directory with `trusted.overlay.opaque`/`user.overlay.opaque` hides everything the lower
//! had there); for a copy, the copy against the original. Every walk is relative to open
//! directory descriptors with `O_NOFOLLOW`, types from `fstatat` ([`fsx`]).
//!
//! # Apply
//!
//! [`ChangeSet::apply`] first checks everything, and writes nothing if any check fails:
//!
//! - **escapes** ([`Escape`]): a symlink leading out of the workspace (resolved as the
//!   kernel will once the set is applied: every link on the way followed, the set's own
//!   included; the host's program and library directories excepted), a symlink of the
//!   workspace's own that the set turns out of it, a device node, a FIFO or socket, a
//!   set-id bit, a hard link to a file outside the layer, a path through a symlink in the
//!   real workspace;
//! - **conflicts**: a real file the change set touches that changed after the run started
//!   (its `ctime` is not before a stamp taken when the layer was made) or after the scan;
//!   overridden by `force`.
//!
//! Then every new file's contents and every new link are staged in a directory at the
//! workspace's top (and at the top of each filesystem mounted inside it that the set
//! writes), before anything of the workspace changes; the steps (deletions moved
//! aside, new entries renamed in, old ones exchanged out, modes) are written in a journal
//! before each is taken, and one that fails undoes them all: the workspace is as before,
//! names, contents and modes. A host killed half way leaves the journal, which the next
//! apply or layered run on the workspace undoes (`journal`).
//!
//! Dropping the last clone of a [`ChangeSet`] (or calling [`ChangeSet::discard`]) removes
//! the layer: nothing stays on disk.
//!
//! The conflict stamp is a file time, so a real file written in the same clock tick as the
//! layer was made counts as changed (a false conflict, never a missed one).

pub(crate) mod apply;
pub(crate) mod fsx;
mod host;
mod journal;
pub(crate) mod layer;
mod resolve;
pub(crate) mod scan;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use apply::{ApplyError, ApplyReport, Escape, Refusal};
pub use host::HostLayer;
pub(crate) use host::{change_set, layer_note};
pub(crate) use layer::Layer;
pub use layer::{overlay_supported, LayerMechanism};

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
pub(crate) struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: i64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stamp {
    pub(crate) fn of(st: &nix::sys::stat::FileStat) -> Self {
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
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
    pub(crate) real: Option<Stamp>,
    /// For a regular file: its link count in the layer, and how many of those links the
    /// layer holds (fewer means a hard link to something outside).
    #[serde(skip)]
    pub(crate) links: (u64, u64),
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
    store: Arc<Mutex<Option<Layer>>>,
    /// What an undone apply put back (see [`apply::Restored`]).
    restored: Arc<Mutex<apply::Restored>>,
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
    pub(crate) fn new(layer: Layer, changes: Vec<Change>) -> Self {
        Self {
            summary: Arc::new(Summary {
                mechanism: layer.mechanism(),
                workspace: layer.workspace().to_path_buf(),
                changes,
            }),
            store: Arc::new(Mutex::new(Some(layer))),
            restored: Arc::default(),
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
        layer::read_under(&self.summary.workspace, path, cap)
    }

    /// Check every change, then write them into the real workspace, all or nothing.
    /// Nothing is written when a check fails: an escape always refuses; a conflict
    /// refuses unless `force`; a write that fails is undone. An apply that went through
    /// consumes the layer: a second call is an [`ApplyError::Gone`].
    pub fn apply(&self, force: bool) -> Result<ApplyReport, ApplyError> {
        let mut guard = self.store.lock().map_err(|_| ApplyError::Gone)?;
        let layer = guard.as_ref().ok_or(ApplyError::Gone)?;
        let mut restored = self.restored.lock().map_err(|_| ApplyError::Gone)?;
        let report = apply::apply(layer, &self.summary.changes, force, &mut restored);
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

#[cfg(test)]
mod tests;
