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
//! - **escapes** ([`Escape`]): a symlink pointing out of the workspace, a device node, a
//!   FIFO or socket, a set-id bit, a hard link to a file outside the layer, a path through
//!   a symlink in the real workspace;
//! - **conflicts**: a real file the change set touches that changed after the run started
//!   (its `ctime` is not before a stamp taken when the layer was made) or after the scan;
//!   overridden by `force`.
//!
//! Then each file is written beside its target and renamed over it (atomic per file);
//! deletions go deepest first, directory modes last.
//!
//! Dropping the last clone of a [`ChangeSet`] (or calling [`ChangeSet::discard`]) removes
//! the layer: nothing stays on disk.
//!
//! The conflict stamp is a file time, so a real file written in the same clock tick as the
//! layer was made counts as changed (a false conflict, never a missed one).

pub(crate) mod apply;
mod host;
pub(crate) mod layer;
pub(crate) mod scan;

pub use host::HostLayer;
pub(crate) use host::{change_set, layer_note, layer_within};
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

impl PendingLayer for Layer {
    fn mechanism(&self) -> LayerMechanism {
        Layer::mechanism(self)
    }
    fn workspace(&self) -> &std::path::Path {
        Layer::workspace(self)
    }
    fn dir(&self) -> &std::path::Path {
        Layer::dir(self)
    }
    fn read_source(&self, path: &std::path::Path, cap: usize) -> Option<Vec<u8>> {
        Layer::read_source(self, path, cap)
    }
    fn apply(&self, changes: &[Change], force: bool) -> Result<ApplyReport, ApplyError> {
        apply::apply(self, changes, force)
    }
}

#[cfg(test)]
mod tests;
