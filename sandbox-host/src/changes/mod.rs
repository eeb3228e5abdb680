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
//! apply or layered run on the workspace undoes (`journal`). A mode change to a file the
//! real workspace holds under several names is staged as a copy too: in the layer each
//! name is a file of its own, so a `chmod` of the shared inode would change names the
//! change set leaves as they were.
//!
//! Dropping the last clone of a [`ChangeSet`] (or calling [`ChangeSet::discard`]) removes
//! the layer: nothing stays on disk.
//!
//! The conflict stamp is a file time, so a real file written in the same clock tick as the
//! layer was made counts as changed (a false conflict, never a missed one).

pub(crate) mod apply;
mod host;
mod journal;
pub(crate) mod layer;
mod resolve;
pub(crate) mod scan;

pub use host::HostLayer;
pub(crate) use host::{change_set, layer_record, layer_within};
pub use layer::overlay_supported;
pub(crate) use layer::Layer;
pub(crate) use sandbox_core::changes::{
    ApplyError, ApplyReport, Change, ChangeKind, ChangeSet, Changes, Escape, LayerMechanism,
    PendingLayer, Refusal, Stamp,
};

/// The stamp of a real path as `fstatat` found it.
pub(crate) fn stamp_of(st: &nix::sys::stat::FileStat) -> Stamp {
    Stamp {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    }
}

/// A layer waiting for its host's decision, with what an undone apply put back (see
/// [`apply::Restored`]): the contract holds it as a [`PendingLayer`].
#[derive(Debug)]
pub(crate) struct Pending {
    layer: Layer,
    restored: apply::Restored,
}

impl Pending {
    pub(crate) fn new(layer: Layer) -> Self {
        Self {
            layer,
            restored: apply::Restored::default(),
        }
    }
}

impl PendingLayer for Pending {
    fn mechanism(&self) -> LayerMechanism {
        self.layer.mechanism()
    }
    fn workspace(&self) -> &std::path::Path {
        self.layer.workspace()
    }
    fn dir(&self) -> &std::path::Path {
        self.layer.dir()
    }
    fn read_source(&self, path: &std::path::Path, cap: usize) -> Option<Vec<u8>> {
        self.layer.read_source(path, cap)
    }
    fn apply(&mut self, changes: &[Change], force: bool) -> Result<ApplyReport, ApplyError> {
        apply::apply(&self.layer, changes, force, &mut self.restored)
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
