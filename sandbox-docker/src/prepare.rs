//! Before anything is made: who the command runs as, how each path travels, and the
//! host side of idmapped staging.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bollard::models::ContainerCreateBody;
use sandbox_core::{Plan, SandboxError};

use crate::config::DockerConfig;
use crate::error::DockerError;
use crate::handover::{choose_identity, plan_handovers, Handover, Identity, Request, Role, Via};
use crate::idmap::{self, IdmappedMount};
use crate::resources::Resources;
use crate::{labels, spec, NAME};

/// The owner of a host path, for the uid decisions of [`crate::handover`].
pub(crate) fn owner_of(p: &Path) -> Option<(u32, u32)> {
    std::fs::metadata(p).ok().map(|m| (m.uid(), m.gid()))
}

/// Who the command runs as, from this host's uid and the workspace's owner.
pub(crate) fn identity(plan: &Plan) -> Identity {
    let host_uid = nix::unistd::geteuid().as_raw();
    let host_gid = nix::unistd::getegid().as_raw();
    choose_identity(host_uid, host_gid, owner_of(&plan.workspace))
}

/// How each path the plan names travels into the container; `idmap` allows idmapped
/// staging for trees the command's uid does not own; `layer` is the tree of the run's
/// layer, bound at the workspace's path.
pub(crate) fn handovers(
    config: &DockerConfig,
    plan: &Plan,
    identity: &Identity,
    idmap: bool,
    layer: Option<&Path>,
) -> Vec<Handover> {
    plan_handovers(&Request {
        workspace: &plan.workspace,
        layer,
        carveouts: &plan.readonly_carveouts,
        read_only: &plan.read_only_paths,
        read_only_links: &plan.read_only_links,
        writable: &plan.writable_paths,
        mode: config.workspace_mode,
        snapshot: plan.snapshot,
        host_is_root: nix::unistd::geteuid().is_root(),
        identity,
        idmap,
        owner: &owner_of,
    })
}

/// The create-container body a run of `plan` sends when every path it names is
/// bind-mounted as it is (no copy, no idmapped staging); an error when the plan needs
/// either. See [`DockerBackend::container_body`](crate::DockerBackend::container_body).
pub(crate) fn plain_body(
    config: &DockerConfig,
    plan: &Plan,
) -> Result<ContainerCreateBody, SandboxError> {
    if plan.changes == sandbox_core::Changes::Review {
        return Err(SandboxError::NotSupported {
            backend: NAME,
            feature: "a plain bind-mount specification for a run on a layer (made per run)".into(),
            remedy: "leave the workspace's changes direct".into(),
        });
    }
    let identity = identity(plan);
    let handovers = handovers(config, plan, &identity, false, None);
    if let Some(h) = handovers.iter().find(|h| !h.bound_as_is()) {
        return Err(SandboxError::NotSupported {
            backend: NAME,
            feature: format!(
                "a plain bind-mount specification for {} (it travels by copy here)",
                h.path.display()
            ),
            remedy: "name paths the command's uid owns, in bind mode".into(),
        });
    }
    Ok(spec::container(&spec::SpecInput {
        plan,
        config,
        identity,
        handovers: &handovers,
        run_id: &labels::run_id(),
        labels: labels::labels("run"),
    })?)
}

/// A volume holds a directory: a named file cannot travel by copy.
pub(crate) fn copyable(handovers: &[Handover]) -> Result<(), DockerError> {
    for h in handovers {
        if matches!(h.via, Via::Volume { .. }) && !h.path.is_dir() {
            return Err(DockerError::Invalid {
                field: match h.role {
                    Role::Workspace => "workspace",
                    Role::Carveout => "readonly_carveouts",
                    Role::ReadOnly => "read_only_paths",
                    Role::Writable => "writable_paths",
                },
                reason: format!(
                    "{} is a file, and a copied path must be a directory (name its directory, \
                     or use bind mode with a local engine)",
                    h.path.display()
                ),
            });
        }
    }
    Ok(())
}

/// Make the idmapped staging mounts of the run's handovers, on a blocking thread.
pub(crate) async fn stage_idmapped(
    run_id: &str,
    handovers: &[Handover],
    identity: &Identity,
    resources: &mut Resources,
) -> Result<(), std::io::Error> {
    let run_id = run_id.to_string();
    let wanted: Vec<(usize, PathBuf, (u32, u32))> = handovers
        .iter()
        .enumerate()
        .filter_map(|(i, h)| match h.via {
            Via::IdmappedBind { from } => Some((i, h.source.clone(), from)),
            _ => None,
        })
        .collect();
    let to = (identity.uid, identity.gid);
    let made = tokio::task::spawn_blocking(move || {
        let dir = idmap::run_dir(&run_id, &labels::owner())?;
        let mut mounts = Vec::new();
        for (i, path, from) in wanted {
            match IdmappedMount::create(&path, &idmap::staging_path(&run_id, i), from, to) {
                Ok(m) => mounts.push(m),
                Err(e) => {
                    drop(mounts);
                    let _ = idmap::remove_run_dir(&dir);
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", path.display()),
                    ));
                }
            }
        }
        Ok((dir, mounts))
    })
    .await
    .map_err(std::io::Error::other)??;
    let (dir, mounts) = made;
    resources.staging(dir, mounts);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_plain_body_binds_a_workspace_its_uid_owns_and_refuses_one_that_travels() {
        let dir = tempfile::tempdir().unwrap();
        let config = DockerConfig::new("img:1");
        let plan_of = |p: &Path| {
            let opts = sandbox_core::SandboxOpts::new(p, ["/bin/true"]);
            Plan::new(&opts, NAME, &crate::capability()).unwrap()
        };
        if nix::unistd::geteuid().is_root() {
            // Root-owned: the command runs as nobody and the tree would travel by copy.
            let e = plain_body(&config, &plan_of(dir.path())).unwrap_err();
            assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
            std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        }
        let plan = plan_of(dir.path());
        let body = plain_body(&config, &plan).unwrap();
        let ws = plan.workspace.to_str().unwrap().to_string();
        assert_eq!(body.image.as_deref(), Some("img:1"));
        assert_eq!(body.working_dir.as_deref(), Some(ws.as_str()));
        let mounts = body.host_config.and_then(|h| h.mounts).unwrap_or_default();
        assert!(
            mounts
                .iter()
                .any(|m| m.source.as_deref() == Some(ws.as_str())
                    && m.target.as_deref() == Some(ws.as_str())
                    && m.typ == Some(bollard::models::MountTypeEnum::BIND)),
            "{mounts:?}"
        );
    }
}
