//! Finding and removing what a crashed host left on the engine.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, ListVolumesOptionsBuilder};
use bollard::Docker;
use sandbox_core::SandboxError;

use crate::error::DockerError;
use crate::idmap::{remove_run_dir, STAGING_ROOT};
use crate::labels::{owner_state, OwnerState, LABEL, LABEL_OWNER, LABEL_VALUE};
use crate::resources::{remove_container, remove_volume};

/// Which of our objects [`cleanup_leftovers`] removes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Those whose maker ran on this machine and is gone. Objects of live processes, and
    /// of other machines sharing a remote engine, are left alone. The default.
    #[default]
    DeadOwners,
    /// Every object carrying our label, whoever made it: for an operator who knows that
    /// no run is in progress anywhere (live runs would be killed).
    All,
}

/// What [`cleanup_leftovers`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Removed {
    /// Container ids.
    pub containers: Vec<String>,
    /// Volume names.
    pub volumes: Vec<String>,
    /// Idmapped staging directories on this host (unmounted and deleted).
    pub staging: Vec<std::path::PathBuf>,
    /// This host's temp directories of dead makers (the pool's waiter, and those of the
    /// other backends: see [`sandbox_host::owner`]). Never a live maker's, whatever `scope`.
    pub temp_dirs: Vec<std::path::PathBuf>,
}

fn wanted(scope: Scope, owner: Option<&str>) -> bool {
    match scope {
        Scope::All => true,
        Scope::DeadOwners => owner_state(owner) == OwnerState::Gone,
    }
}

/// Remove the containers (running ones are killed) and volumes carrying our [`LABEL`]
/// that `scope` selects, and, when this process is root, the idmapped staging mounts the
/// same owners left on this host. A host that crashed mid-run leaves its container behind; call
/// this at start-up, or from a periodic job.
///
/// [`LABEL`]: crate::LABEL
pub async fn cleanup_leftovers(
    engine: &crate::DockerEngine,
    scope: Scope,
) -> Result<Removed, SandboxError> {
    Ok(cleanup(&engine.0, scope).await?)
}

/// Our containers (id, owner label) and volumes (name, owner label) on the engine.
type Ours = (Vec<(String, Option<String>)>, Vec<(String, Option<String>)>);

async fn ours(docker: &Docker) -> Result<Ours, DockerError> {
    let filter = HashMap::from([("label", vec![format!("{LABEL}={LABEL_VALUE}")])]);
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filter)
                .build(),
        ))
        .await
        .map_err(|e| DockerError::engine("list containers", e))?
        .into_iter()
        .filter_map(|c| {
            let owner = c.labels.as_ref().and_then(|l| l.get(LABEL_OWNER)).cloned();
            Some((c.id?, owner))
        })
        .collect();
    let volumes = docker
        .list_volumes(Some(
            ListVolumesOptionsBuilder::new().filters(&filter).build(),
        ))
        .await
        .map_err(|e| DockerError::engine("list volumes", e))?
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            let owner = v.labels.get(LABEL_OWNER).cloned();
            (v.name, owner)
        })
        .collect();
    Ok((containers, volumes))
}

pub(crate) async fn cleanup(docker: &Docker, scope: Scope) -> Result<Removed, DockerError> {
    let mut removed = Removed::default();
    let (containers, volumes) = ours(docker).await?;
    for (id, owner) in containers {
        if wanted(scope, owner.as_deref()) {
            remove_container(docker, &id).await?;
            removed.containers.push(id);
        }
    }
    for (name, owner) in volumes {
        if wanted(scope, owner.as_deref()) {
            remove_volume(docker, &name).await?;
            removed.volumes.push(name);
        }
    }
    // After the containers that bound them. Only root makes (and can read) these.
    if let Ok(dirs) = std::fs::read_dir(STAGING_ROOT) {
        for d in dirs.flatten() {
            let dir = d.path();
            let owner = std::fs::read_to_string(dir.join("owner")).ok();
            if wanted(scope, owner.as_deref()) {
                remove_run_dir(&dir)
                    .map_err(|e| DockerError::io(format!("removing {}", dir.display()), e))?;
                removed.staging.push(dir);
            }
        }
    }
    removed.temp_dirs = tokio::task::spawn_blocking(sandbox_host::sweep::remove_dead_leftovers)
        .await
        .map(|r| r.dirs)
        .unwrap_or_default();
    Ok(removed)
}

/// Our containers and volumes that the process `pid` of this machine made (by their owner
/// label), one line each: `container ID` or `volume NAME`. What the registry's
/// [`HostObjects`](sandbox_core::registry::HostObjects) counts.
pub(crate) async fn made_by(pid: u32) -> Result<Vec<String>, SandboxError> {
    let (containers, volumes) = ours(&crate::connect().await?.0).await?;
    let theirs = |owner: &Option<String>| {
        owner
            .as_deref()
            .is_some_and(|o| sandbox_host::owner::label_names_pid(o, pid))
    };
    let containers = containers
        .into_iter()
        .filter(|(_, o)| theirs(o))
        .map(|(id, _)| format!("container {id}"));
    let volumes = volumes
        .into_iter()
        .filter(|(_, o)| theirs(o))
        .map(|(name, _)| format!("volume {name}"));
    Ok(containers.chain(volumes).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_selects_every_owner_and_dead_owners_only_the_gone() {
        let me = crate::owner();
        for owner in [None, Some("elsewhere/1/1"), Some(me.as_str())] {
            assert!(wanted(Scope::All, owner), "{owner:?}");
        }
        assert!(!wanted(Scope::DeadOwners, Some(me.as_str())));
    }
}
