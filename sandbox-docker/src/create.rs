//! Making a run's objects on the engine: its volumes and their uploads, the container,
//! the program check, the attach and the start; and what the engine's answers mean.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::pin::Pin;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, VolumeCreateOptions};
use bollard::query_parameters::{AttachContainerOptionsBuilder, CreateContainerOptionsBuilder};
use bollard::Docker;
use futures_util::Stream;
use sandbox_core::record::Container;
use sandbox_core::{Plan, Record, Stdin};

use crate::config::DockerConfig;
use crate::error::DockerError;
use crate::handover::{Handover, Identity, Role};
use crate::resources::Resources;
use crate::{copy, labels, program, spec};

/// Knobs that differ between a user's run and the preflight's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunKind {
    /// Look `argv[0]` up in the image first (off for the preflight, whose program is the
    /// engine's own init, mounted only at start).
    pub resolve_program: bool,
    /// The role label.
    pub role: &'static str,
}

/// The run's output as the engine multiplexes it.
pub(crate) type Output =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// What [`make`] needs: the run's decisions, made before the engine was asked anything.
pub(crate) struct Setup<'a> {
    pub docker: &'a Docker,
    pub config: &'a DockerConfig,
    pub plan: &'a Plan,
    pub handovers: &'a [Handover],
    pub identity: &'a Identity,
    pub run_id: &'a str,
    pub kind: RunKind,
    /// The container runs the waiter (see `pool.rs`): its input is always attached, and
    /// the command starts only once the argv is written there.
    pub waiter: bool,
}

/// A started container, attached.
pub(crate) struct Made {
    pub id: String,
    /// The host paths each copied tree uploaded, by handover index (the write-back
    /// deletes only what the command deleted of these).
    pub uploaded: BTreeMap<usize, BTreeSet<PathBuf>>,
    pub output: Output,
    pub input: Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// The engine's create warnings that do not fail the run.
    pub notes: Record,
}

/// Volumes, uploads, the container, the program check, attach, start. Every object is
/// recorded in `resources` as soon as it exists.
pub(crate) async fn make(
    s: &Setup<'_>,
    resources: &mut Resources,
    body: ContainerCreateBody,
) -> Result<Made, DockerError> {
    let Setup {
        docker,
        config,
        plan,
        handovers,
        identity,
        run_id,
        kind,
        waiter,
    } = *s;
    let volumes = spec::volume_names(run_id, handovers);
    let mut uploaded = BTreeMap::new();
    if !volumes.is_empty() {
        for (_, name) in &volumes {
            docker
                .create_volume(VolumeCreateOptions {
                    name: Some(name.clone()),
                    labels: Some(labels::labels("volume")),
                    ..Default::default()
                })
                .await
                .map_err(|e| DockerError::engine(format!("create volume {name}"), e))?;
            resources.volume(name.clone());
        }
        let loader_name = format!("{run_id}-loader");
        let loader = docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::new()
                        .name(&loader_name)
                        .build(),
                ),
                spec::loader(&config.image, run_id, handovers, labels::labels("loader")),
            )
            .await
            .map_err(|e| DockerError::engine("create the loader container", e))?;
        resources.container(loader.id.clone());
        for (i, _) in &volumes {
            let up = copy::upload_for(*i, handovers, identity);
            let seen = copy::upload(docker, &loader.id, up).await?;
            uploaded.insert(*i, seen);
        }
        resources.remove_container(&loader.id).await?;
    }

    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(run_id).build()),
            body,
        )
        .await
        .map_err(|e| mount_error(e, handovers, &config.image, "create the container"))?;
    resources.container(created.id.clone());
    let notes = check_warnings(&created.warnings)?;
    let id = created.id;

    if kind.resolve_program {
        check_program(docker, &id, config, plan, identity).await?;
    }

    let attach = attach(docker, &id, waiter || matches!(plan.stdin, Stdin::Bytes(_))).await?;
    docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| mount_error(e, handovers, &config.image, "start the container"))?;
    Ok(Made {
        id,
        uploaded,
        output: attach.output,
        input: attach.input,
        notes,
    })
}

/// Attach to container `id`'s output streams from now on, and to its input if `stdin`.
pub(crate) async fn attach(
    docker: &Docker,
    id: &str,
    stdin: bool,
) -> Result<bollard::container::AttachContainerResults, DockerError> {
    let opts = AttachContainerOptionsBuilder::new()
        .stream(true)
        .stdout(true)
        .stderr(true)
        .stdin(stdin)
        .logs(false)
        .build();
    docker
        .attach_container(id, Some(opts))
        .await
        .map_err(|e| DockerError::engine("attach to the container", e))
}

/// Look the plan's `argv[0]` up in container `id` as the command's uid (see
/// [`program::check`]); the paths looked at, the program's last.
pub(crate) async fn check_program(
    docker: &Docker,
    id: &str,
    config: &DockerConfig,
    plan: &Plan,
    identity: &Identity,
) -> Result<Vec<PathBuf>, DockerError> {
    let argv0 = plan.argv[0].to_string_lossy();
    let path_var = plan
        .env_var("PATH")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    program::check(
        docker,
        id,
        &config.image,
        &argv0,
        &path_var,
        &plan.cwd,
        (identity.uid, identity.gid),
    )
    .await
}

/// The engine's create warnings: a limit it says it will not enforce fails the run; the
/// rest are recorded in the outcome's policy.
///
/// One is only a note: "Memory limited without swap" (no swap accounting on the engine's
/// host) still caps the memory the command holds in RAM, the cgroup limit we report.
pub(crate) fn check_warnings(warnings: &[String]) -> Result<Record, DockerError> {
    let mut notes = Record::new();
    for w in warnings {
        let lower = w.to_lowercase();
        let what = if lower.contains("limited without swap") {
            notes.push(Container::EngineWarning {
                warning: w.clone(),
                swap_unlimited: true,
            });
            continue;
        } else if lower.contains("memory") || lower.contains("swap") {
            "the memory limit"
        } else if lower.contains("pids") {
            "the process-count limit"
        } else if lower.contains("cpu") {
            "the CPU limit"
        } else if lower.contains("discarded") || lower.contains("not support") {
            "a requested option"
        } else {
            notes.push(Container::EngineWarning {
                warning: w.clone(),
                swap_unlimited: false,
            });
            continue;
        };
        return Err(DockerError::NotEnforced {
            what: what.into(),
            warning: w.clone(),
        });
    }
    Ok(notes)
}

/// A bind source the engine cannot find means the engine does not share our disk; an init
/// the runtime cannot find at `/sbin/docker-init` means the image's `/sbin` is not a
/// directory of its own (see [`DockerError::InitHidden`]).
pub(crate) fn mount_error(
    e: bollard::errors::Error,
    handovers: &[Handover],
    image: &str,
    action: &str,
) -> DockerError {
    if let bollard::errors::Error::DockerResponseServerError { message, .. } = &e {
        if message.contains("/sbin/docker-init") {
            // The top-level directories handed over: where a symlinked `/sbin` may lead.
            let covering = handovers
                .iter()
                .filter(|h| {
                    matches!(h.role, Role::ReadOnly | Role::Writable)
                        && h.path.components().count() == 2
                })
                .map(|h| h.path.display().to_string())
                .collect();
            return DockerError::InitHidden {
                image: image.to_string(),
                covering,
            };
        }
        if message.contains("bind source path does not exist")
            || message.contains("no such file or directory") && message.contains("mount")
        {
            let path = handovers
                .iter()
                .find(|h| message.contains(&*h.path.to_string_lossy()))
                .map(|h| h.path.display().to_string())
                .unwrap_or_else(|| "a bound path".into());
            return DockerError::BindSourceMissing {
                path,
                message: message.clone(),
            };
        }
    }
    DockerError::engine(action, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_init_the_runtime_cannot_find_is_one_line_with_its_cause_and_remedy() {
        let raw = "failed to create shim task: OCI runtime create failed: runc create failed: \
                   unable to start container process: exec: \"/sbin/docker-init\": stat \
                   /sbin/docker-init: no such file or directory: unknown";
        let hand = |p: &str| Handover {
            path: PathBuf::from(p),
            source: PathBuf::from(p),
            role: Role::ReadOnly,
            via: crate::handover::Via::Bind,
            read_only: true,
        };
        let e = mount_error(
            bollard::errors::Error::DockerResponseServerError {
                status_code: 400,
                message: raw.into(),
            },
            &[hand("/tmp/ws"), hand("/usr")],
            "img:1",
            "start the container",
        );
        assert!(
            matches!(&e, DockerError::InitHidden { covering, .. } if covering == &["/usr"]),
            "{e:?}"
        );
        let e = sandbox_core::SandboxError::from(e);
        let text = e.to_string();
        assert!(!text.contains("shim") && !text.contains('\n'), "{text}");
        assert!(text.contains("/sbin") && text.contains("img:1"), "{text}");
        assert!(
            text.contains("--read /usr") && text.contains("sandbox image --from-host"),
            "{text}"
        );
    }

    #[test]
    fn limit_warnings_fail_closed_and_others_do_not() {
        let e = check_warnings(&["Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.".into()]).unwrap_err();
        assert!(matches!(e, DockerError::NotEnforced { .. }), "{e}");
        let e = check_warnings(&["Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded.".into()]).unwrap_err();
        assert!(e.to_string().contains("process-count"), "{e}");
        assert!(check_warnings(&[
            "Published ports are discarded when using host network mode".into()
        ])
        .is_err());
        let notes = check_warnings(&["something harmless".into()]).unwrap();
        assert_eq!(
            notes[..],
            [Container::EngineWarning {
                warning: "something harmless".into(),
                swap_unlimited: false
            }
            .into()]
        );
        let notes = check_warnings(&["Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.".into()]).unwrap();
        assert!(
            matches!(
                &notes[0],
                sandbox_core::Enforced::Container(Container::EngineWarning {
                    swap_unlimited: true,
                    ..
                })
            ),
            "{notes:?}"
        );
        assert!(check_warnings(&[]).unwrap().is_empty());
    }
}
