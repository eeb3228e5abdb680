//! Network mode `proxy` and host ports in a container: the same door as bwrap's and
//! landlock's, a listener made in the command's network namespace and served by the host.
//!
//! The container gets network `none` (a namespace holding only its loopback), exactly like
//! `loopback`. Before its command runs, the host enters that namespace on a thread of its
//! own, makes a listener on `127.0.0.1:PORT` for the proxy and each host port there, and
//! serves them with the run's [`ProxyRun`] (the host crate's door stage, `InNamespace`): the command sees the proxy at
//! the same address, with the same environment, as on the other backends, and nothing of
//! the host's is reachable from the namespace. The container runs the pool's waiter (see
//! `pool.rs`) until the listeners are made, whether it was pooled or made for this run, so
//! the command never starts before its proxy.
//!
//! # What it needs
//!
//! Root (entering a namespace takes `CAP_SYS_ADMIN` over it) and a local engine in this
//! host's pid namespace (the container's pid the engine reports must be a process here).
//! [`listeners_possible`] is that check, and the capability claims `proxy` and host ports
//! only where it holds; elsewhere a request is refused before anything runs.
//!
//! # Which process
//!
//! The engine names the container's init by pid. Between reading the pid and opening its
//! namespace the container could end and its pid be reused, so the namespace is trusted
//! only when, after it was opened, the pid's cgroup still names this container and the
//! engine still reports it running with that pid.

use std::os::fd::OwnedFd;

use bollard::query_parameters::InspectContainerOptions;
use bollard::Docker;
use sandbox_core::{Plan, SandboxError};
use sandbox_host::door::{InNamespace, ProxyRun, PublishRun};

use crate::error::DockerError;

/// Whether this host can make listeners in a container's namespace: root, and an engine
/// on a local unix socket. A remote engine's containers are not processes here; a user
/// other than root cannot enter their namespaces.
pub(crate) fn listeners_possible() -> bool {
    let local = match std::env::var("DOCKER_HOST") {
        Err(_) => true,
        Ok(h) => h.is_empty() || h.starts_with("unix://"),
    };
    local && nix::unistd::geteuid().is_root()
}

/// Make `plan`'s listeners inside running container `id` and serve them; `None` when the
/// plan asks for neither the proxy nor host ports. The command must not run yet.
pub(crate) async fn start(
    docker: &Docker,
    id: &str,
    plan: &Plan,
    door: &InNamespace,
) -> Result<Option<ProxyRun>, SandboxError> {
    if !door.needs_listeners() {
        return Ok(None);
    }
    door.serve(plan, netns(docker, id).await?).await
}

/// Serve the published ports (their host listeners bound before anything ran) with sockets
/// made in running container `id`'s namespace; `None` when nothing is published.
pub(crate) async fn publish(
    docker: &Docker,
    id: &str,
    plan: &Plan,
    door: InNamespace,
    policy: &mut sandbox_core::EffectivePolicy,
) -> Result<Option<PublishRun>, SandboxError> {
    if !door.publishes() {
        return Ok(None);
    }
    door.publish(plan, netns(docker, id).await?, policy)
}

/// Container `id`'s network namespace, opened and checked to be the container's (see
/// [Which process](self#which-process)).
async fn netns(docker: &Docker, id: &str) -> Result<OwnedFd, SandboxError> {
    let pid = running_pid(docker, id).await?;
    let netns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map(OwnedFd::from)
        .map_err(|e| {
            DockerError::io(
                format!("opening the network namespace of the container's process {pid}"),
                e,
            )
        })?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    if !cgroup.contains(id) || running_pid(docker, id).await? != pid {
        return Err(SandboxError::NotSupported {
            backend: crate::NAME,
            feature: "the egress proxy, host ports and published ports".into(),
            remedy: format!(
                "process {pid} is not this container's here (an engine in another pid \
                 namespace, or the container ended): run the host in the engine's pid \
                 namespace, or use network mode `loopback` or `full`"
            ),
        });
    }
    Ok(netns)
}

/// The pid of container `id`'s init, as the engine reports it; an error unless it runs.
async fn running_pid(docker: &Docker, id: &str) -> Result<i64, DockerError> {
    let state = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .map_err(|e| DockerError::engine("inspect the container", e))?
        .state
        .unwrap_or_default();
    match (state.running, state.pid) {
        (Some(true), Some(pid)) if pid > 0 => Ok(pid),
        _ => Err(DockerError::io(
            "finding the container's process",
            std::io::Error::other("the container is not running"),
        )),
    }
}
