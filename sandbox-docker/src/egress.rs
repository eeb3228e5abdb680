//! Network mode `proxy` and host ports in a container: the same door as bwrap's and
//! landlock's, a listener made in the command's network namespace and served by the host.
//!
//! The container gets network `none` (a namespace holding only its loopback), exactly like
//! `loopback`. Before its command runs, the host enters that namespace on a thread of its
//! own, makes a listener on `127.0.0.1:PORT` for the proxy and each host port there, and
//! serves them with the run's [`ProxyRun`] (`sandbox-proxy`): the command sees the proxy at
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
use sandbox_proxy::publish::{NetnsSockets, PublishRun};
use sandbox_proxy::ProxyRun;

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

/// Whether `plan` needs listeners inside its container.
pub(crate) fn needs_listeners(plan: &Plan) -> bool {
    !sandbox_proxy::inside_ports(plan).is_empty()
}

/// Make `plan`'s listeners inside running container `id` and serve them; `None` when the
/// plan asks for neither the proxy nor host ports. The command must not run yet.
pub(crate) async fn start(
    docker: &Docker,
    id: &str,
    plan: &Plan,
) -> Result<Option<ProxyRun>, SandboxError> {
    let ports = sandbox_proxy::inside_ports(plan);
    if ports.is_empty() {
        return Ok(None);
    }
    let netns = netns(docker, id).await?;
    let listeners =
        tokio::task::spawn_blocking(move || sandbox_proxy::listen_in_namespace(netns, &ports))
            .await
            .map_err(|e| SandboxError::io("making the proxy's listeners", e.into()))?
            .map_err(|e| SandboxError::io("making the proxy's listeners in the container", e))?;
    sandbox_proxy::serve_for_plan(plan, listeners).map(Some)
}

/// Serve the published ports whose host listeners are `bound` (made before anything ran)
/// with sockets made in running container `id`'s namespace; tell the plan's sink and the
/// policy where they are. `None` when nothing is published.
pub(crate) async fn publish(
    docker: &Docker,
    id: &str,
    plan: &Plan,
    bound: Vec<(std::net::TcpListener, sandbox_core::Published)>,
    policy: &mut sandbox_core::EffectivePolicy,
) -> Result<Option<PublishRun>, SandboxError> {
    if bound.is_empty() {
        return Ok(None);
    }
    let maker = std::sync::Arc::new(NetnsSockets(netns(docker, id).await?));
    let run = sandbox_proxy::publish::serve(bound, sandbox_proxy::publish::ready(maker))
        .map_err(|e| SandboxError::io("serving the published ports", e))?;
    if let Some(r) = &run {
        policy.published = r.published().to_vec();
        let list: Vec<String> = r
            .published()
            .iter()
            .map(|p| format!("{} at {}", p.port, p.host))
            .collect();
        policy.notes.push(format!(
            "published: the command's 127.0.0.1 ports {} on the host (connections made \
             by the host inside the container's namespace)",
            list.join(", ")
        ));
        if let Some(sink) = &plan.on_published {
            (sink.0)(r.published());
        }
    }
    Ok(run)
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
