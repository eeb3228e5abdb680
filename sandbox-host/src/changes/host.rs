//! The layer for a backend whose command is not a host process that core spawns (a
//! container engine): made on the host, bound into the sandbox by the backend at the
//! workspace's path, and scanned by core after the run, so that its change set is the
//! same as every other backend's.

use std::path::Path;
use std::time::Instant;

use super::layer::Layer;
use super::LayerMechanism;
use super::{ChangeSet, Changes};
use sandbox_core::SandboxError;

/// A copy-on-write layer over a workspace, prepared on the host for a sandbox that the
/// backend builds itself.
///
/// The layer is a copy (blocks shared with the original where the filesystem can): an
/// overlay of core's is mounted in a process's own mount namespace, which a container
/// engine's namespaces never see. The backend binds [`tree`](Self::tree) at the
/// workspace's path, runs the command, and once the command's whole tree is dead turns
/// the layer into the run's [`ChangeSet`] with [`into_change_set`](Self::into_change_set)
/// (or drops it with [`discard`](Self::discard)). Dropping it removes it too.
#[derive(Debug)]
pub struct HostLayer {
    layer: Layer,
}

impl HostLayer {
    /// Copy `workspace` into a private temp dir of the host, on a blocking thread, under
    /// `deadline`. A copy that reaches the deadline is an [`SandboxError::Io`] whose
    /// source satisfies [`is_deadline`](crate::fs::tree::is_deadline): report the
    /// run with [`ended_before_start`](sandbox_core::run::ended_before_start) and
    /// [`Status::TimedOut`](sandbox_core::Status::TimedOut).
    pub async fn prepare(
        workspace: &Path,
        deadline: Option<Instant>,
    ) -> Result<Self, SandboxError> {
        layer_within(workspace, LayerMechanism::Copy, deadline)
            .await
            .map(|layer| Self { layer })
    }

    /// The tree the command writes: bind it at the workspace's path.
    pub fn tree(&self) -> &Path {
        self.layer.source()
    }

    /// How the layer was made.
    pub fn mechanism(&self) -> LayerMechanism {
        self.layer.mechanism()
    }

    /// The real workspace the layer is over.
    pub fn workspace(&self) -> &Path {
        self.layer.workspace()
    }

    /// The outcome's record for a run on this layer.
    pub fn record(&self, changes: Changes) -> sandbox_core::record::Layer {
        layer_record(self.mechanism(), changes)
    }

    /// What the command changed, compared with the real workspace. Call once nothing of
    /// the command is left that could still write the layer.
    pub async fn into_change_set(self) -> Result<ChangeSet, SandboxError> {
        change_set(self.layer).await
    }

    /// Remove the layer now, on a blocking thread (dropping it does the same, inline).
    pub async fn discard(self) {
        let layer = self.layer;
        let _ = tokio::task::spawn_blocking(move || drop(layer)).await;
    }
}

/// The outcome's record for a run on a layer made by `mechanism`.
pub(crate) fn layer_record(
    mechanism: LayerMechanism,
    changes: Changes,
) -> sandbox_core::record::Layer {
    sandbox_core::record::Layer::Workspace {
        made_by: mechanism,
        changes,
    }
}

/// Scan `layer` on a blocking thread into the run's change set (which then holds it).
pub(crate) async fn change_set(layer: Layer) -> Result<ChangeSet, SandboxError> {
    let scanned = tokio::task::spawn_blocking(move || {
        super::scan::scan(&layer).map(|c| {
            ChangeSet::new(
                Box::new(super::Pending::new(layer)),
                c,
                super::layer::read_under,
            )
        })
    })
    .await;
    match scanned {
        Ok(Ok(set)) => Ok(set),
        Ok(Err(e)) => Err(SandboxError::io(
            "reading the command's changes from its layer",
            e,
        )),
        Err(e) => Err(SandboxError::io(
            "reading the command's changes from its layer",
            std::io::Error::other(e),
        )),
    }
}

/// Make the run's layer on a blocking thread, under `deadline`. Dropping the future (the
/// caller went away) cancels a copy between entries; the layer removes what it made.
pub(crate) async fn layer_within(
    workspace: &std::path::Path,
    best: sandbox_core::LayerMechanism,
    deadline: Option<std::time::Instant>,
) -> Result<Layer, SandboxError> {
    struct CancelOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let budget = crate::fs::tree::Budget::until(deadline);
    let _cancel = CancelOnDrop(budget.cancel.clone());
    let src = workspace.to_path_buf();
    let cancel = budget.cancel.clone();
    let task = tokio::task::spawn_blocking(move || Layer::prepare(&src, best, &budget));
    tokio::pin!(task);
    // A kill during the copy stops it between two chunks; the copy's own error path then
    // removes what it made, and that is awaited, so `kill` returns with nothing left.
    let joined = tokio::select! {
        r = &mut task => r,
        () = sandbox_core::run::start_cancelled() => {
            cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            (&mut task).await
        }
    };
    joined.map_err(|e| SandboxError::io("making the workspace layer", std::io::Error::other(e)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kill while the layer is copied stops the copy (between two chunks) and the start
    /// fails with the cancellation, its partial copy removed on the copy's error path.
    #[tokio::test]
    async fn a_kill_stops_the_layer_copy() {
        let ws = tempfile::tempdir().unwrap();
        for i in 0..4 {
            std::fs::write(ws.path().join(format!("f{i}")), vec![7u8; 3 << 20]).unwrap();
        }
        let (_tx, rx) = tokio::sync::watch::channel(true);
        let r = sandbox_core::run::within_start(
            rx,
            layer_within(ws.path(), sandbox_core::LayerMechanism::Copy, None),
        )
        .await;
        let e = r.unwrap_err();
        assert!(e.to_string().contains("cancelled"), "{e}");
    }
}
