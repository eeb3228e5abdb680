//! What one run made on the engine, and its removal: always, also when the run fails half
//! way or its task is dropped.

use std::time::Duration;

use bollard::query_parameters::{RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder};
use bollard::Docker;

use crate::error::DockerError;
use crate::idmap::{self, IdmappedMount};

/// How long removal is tried before the run reports that something was left behind: long
/// enough to outlast an engine restart (seconds, tens at most), so that a run whose engine
/// went away mid-run still leaves nothing once it is back.
const PATIENCE: Duration = Duration::from_secs(90);

/// Containers and volumes made for one run.
#[derive(Debug)]
pub(crate) struct Resources {
    docker: Docker,
    containers: Vec<String>,
    volumes: Vec<String>,
    /// Idmapped staging mounts on the host, and their run directory: removed after the
    /// containers that bind them.
    mounts: Vec<IdmappedMount>,
    run_dir: Option<std::path::PathBuf>,
}

impl Resources {
    /// Nothing made yet.
    pub(crate) fn new(docker: Docker) -> Self {
        Self {
            docker,
            containers: Vec::new(),
            volumes: Vec::new(),
            mounts: Vec::new(),
            run_dir: None,
        }
    }

    /// Record the run's staging directory and its idmapped mounts.
    pub(crate) fn staging(&mut self, dir: std::path::PathBuf, mounts: Vec<IdmappedMount>) {
        self.run_dir = Some(dir);
        self.mounts = mounts;
    }

    /// Record a container (before anything else can fail).
    pub(crate) fn container(&mut self, id: String) {
        self.containers.push(id);
    }

    /// Record a volume.
    pub(crate) fn volume(&mut self, name: String) {
        self.volumes.push(name);
    }

    /// Remove one container now (the loader, once the uploads are done).
    pub(crate) async fn remove_container(&mut self, id: &str) -> Result<(), DockerError> {
        remove_container(&self.docker, id).await?;
        self.containers.retain(|c| c != id);
        Ok(())
    }

    /// Remove everything, containers first (a volume in use cannot go). Retried; the error
    /// names what is left.
    pub(crate) async fn remove_all(&mut self) -> Result<(), DockerError> {
        let mut last = None;
        let began = std::time::Instant::now();
        for attempt in 0u32.. {
            if attempt > 0 {
                if began.elapsed() > PATIENCE {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
            }
            let mut left = Vec::new();
            for id in std::mem::take(&mut self.containers) {
                if let Err(e) = remove_container(&self.docker, &id).await {
                    last = Some(e);
                    left.push(id);
                }
            }
            self.containers = left;
            let mut left = Vec::new();
            for name in std::mem::take(&mut self.volumes) {
                if let Err(e) = remove_volume(&self.docker, &name).await {
                    last = Some(e);
                    left.push(name);
                }
            }
            self.volumes = left;
            // The staging mounts go once no container binds them.
            if self.containers.is_empty() {
                if let Err(e) = self.remove_staging() {
                    last = Some(e);
                }
            }
            if self.is_empty() {
                return Ok(());
            }
        }
        Err(last.unwrap_or_else(|| {
            DockerError::io(
                "removing the run's containers and volumes",
                std::io::Error::other(format!(
                    "left behind: containers {:?}, volumes {:?}",
                    self.containers, self.volumes
                )),
            )
        }))
    }

    fn remove_staging(&mut self) -> Result<(), DockerError> {
        let mut left = Vec::new();
        let mut err = None;
        for mut m in std::mem::take(&mut self.mounts) {
            if let Err(e) = m.remove() {
                err = Some(DockerError::io(
                    format!("unmounting {}", m.path().display()),
                    e,
                ));
                left.push(m);
            }
        }
        self.mounts = left;
        if self.mounts.is_empty() {
            if let Some(dir) = self.run_dir.take() {
                if let Err(e) = idmap::remove_run_dir(&dir) {
                    err = Some(DockerError::io(format!("removing {}", dir.display()), e));
                    self.run_dir = Some(dir);
                }
            }
        }
        err.map_or(Ok(()), Err)
    }

    fn is_empty(&self) -> bool {
        self.containers.is_empty()
            && self.volumes.is_empty()
            && self.mounts.is_empty()
            && self.run_dir.is_none()
    }
}

/// Force-remove a container with its anonymous volumes; one already gone is fine.
pub(crate) async fn remove_container(docker: &Docker, id: &str) -> Result<(), DockerError> {
    let opts = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(opts)).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e = DockerError::engine(format!("remove container {id}"), e);
            if e.is_not_found() {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Remove a volume; one already gone is fine.
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> Result<(), DockerError> {
    let opts = RemoveVolumeOptionsBuilder::new().force(true).build();
    match docker.remove_volume(name, Some(opts)).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e = DockerError::engine(format!("remove volume {name}"), e);
            if e.is_not_found() {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

impl Drop for Resources {
    /// The backstop: a run whose task was dropped (its runtime shut down mid-run) still
    /// removes what it made. The removal runs on a thread of its own with its own runtime
    /// and client, since the dropping runtime may be the one going away; it is waited for,
    /// boundedly, so that a process exiting right after still leaves nothing behind.
    fn drop(&mut self) {
        if self.is_empty() {
            return;
        }
        self.drop_engine_objects();
        // After the containers: unmount and remove the staging directory.
        let _ = self.remove_staging();
    }
}

impl Resources {
    fn drop_engine_objects(&mut self) {
        if self.containers.is_empty() && self.volumes.is_empty() {
            return;
        }
        let containers = std::mem::take(&mut self.containers);
        let volumes = std::mem::take(&mut self.volumes);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("sandbox-docker-cleanup".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let Ok(rt) = rt {
                    rt.block_on(async {
                        if let Ok(docker) = crate::client::connect_inner().await {
                            let mut r = Resources {
                                docker,
                                containers,
                                volumes,
                                mounts: Vec::new(),
                                run_dir: None,
                            };
                            if let Err(e) = r.remove_all().await {
                                tracing::error!(
                                    "sandbox-docker: cleanup after a dropped run failed: {e}"
                                );
                            }
                            // Whatever is left is reported above; no second backstop.
                            r.containers.clear();
                            r.volumes.clear();
                        }
                    });
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(30));
        }
    }
}
