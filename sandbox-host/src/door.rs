//! The door stage of a run's start: the one way into the command's network that a plan can
//! ask for (the egress proxy of network mode `proxy`, host ports, published ports), made by
//! the host's side (`sandbox-proxy`) and handed to the backend in the form its sandbox takes.
//!
//! No backend crate names the proxy: each backend's start gets its door from here, in one
//! of the ways that exist, and every way serves the same proxy with the same record.
//!
//! - **Handed over** ([`hand_over`]): the sandbox makes its listeners in the command's own
//!   network namespace, between fork and exec or in its init, and sends them to the host on
//!   a socket pair. For a backend whose process makes the namespace (bwrap, landlock): the
//!   pipeline calls it before the backend's `prepare`, which gets the sandbox's end.
//! - **In a namespace the host enters** ([`InNamespace`]): the host makes the listeners
//!   itself in a running container's network namespace, before its command starts
//!   (docker).
//!
//! A way without any namespace (connections mediated by the supervisor) is the next variant
//! this module gains.

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use sandbox_core::record::{Door, Proxy};
use sandbox_core::{EffectivePolicy, NetworkMode, Plan, Published, SandboxError, PROXY_PORT};
pub use sandbox_proxy::publish::PublishRun;
pub use sandbox_proxy::ProxyRun;

use crate::process::DoorEnd;

/// The door for `plan` handed over by the sandbox: the host's side running (the proxy, the
/// published ports), and the sandbox's end. `None` when the plan asks for no door.
pub fn hand_over(plan: &Plan) -> Result<Option<(ProxyRun, DoorEnd)>, SandboxError> {
    Ok(sandbox_proxy::start_for_plan(plan)?.map(|h| {
        (
            h.run,
            DoorEnd {
                sock: h.child_end,
                ports: h.ports,
            },
        )
    }))
}

/// The record of a run with a door: the proxy and what it allows, the host ports, the
/// published ports.
pub fn record(plan: &Plan) -> Door {
    Door::WaysOut {
        proxy: (plan.network == NetworkMode::Proxy).then(|| Proxy {
            port: PROXY_PORT,
            allow: plan
                .allowlist
                .patterns()
                .iter()
                .map(|p| p.as_str().to_string())
                .collect(),
        }),
        host_ports: plan.host_ports.clone(),
        published: plan.publish.iter().map(|p| p.port).collect(),
    }
}

/// The door for `plan` made by the host inside a namespace it enters (a container's): the
/// published ports' host listeners are bound first, before anything runs, so a port in use
/// refuses the run; the rest is made once the namespace exists.
#[derive(Debug)]
pub struct InNamespace {
    bound: Vec<(TcpListener, Published)>,
    ports: Vec<u16>,
}

impl InNamespace {
    /// What `plan` asks for, with the published ports' host side bound now.
    pub fn bind(plan: &Plan) -> Result<Self, SandboxError> {
        Ok(Self {
            bound: sandbox_proxy::publish::bind_for_plan(plan)?,
            ports: sandbox_proxy::inside_ports(plan),
        })
    }

    /// Whether listeners must be made inside (the proxy, host ports): the command must
    /// then wait until they are.
    pub fn needs_listeners(&self) -> bool {
        !self.ports.is_empty()
    }

    /// Make the listeners inside `netns` (on a blocking thread: entering a namespace
    /// moves the calling thread) and serve them for `plan`; `None` when there are none.
    pub async fn serve(
        &self,
        plan: &Plan,
        netns: OwnedFd,
    ) -> Result<Option<ProxyRun>, SandboxError> {
        if self.ports.is_empty() {
            return Ok(None);
        }
        let ports = self.ports.clone();
        let listeners =
            tokio::task::spawn_blocking(move || sandbox_proxy::listen_in_namespace(netns, &ports))
                .await
                .map_err(|e| SandboxError::io("making the proxy's listeners", e.into()))?
                .map_err(|e| {
                    SandboxError::io("making the proxy's listeners in the sandbox's namespace", e)
                })?;
        sandbox_proxy::serve_for_plan(plan, listeners).map(Some)
    }

    /// Whether any port is published.
    pub fn publishes(&self) -> bool {
        !self.bound.is_empty()
    }

    /// Serve the published ports with sockets made in `netns`; tell the plan's sink and the
    /// policy where they are. `None` when nothing is published.
    pub fn publish(
        self,
        plan: &Plan,
        netns: OwnedFd,
        policy: &mut EffectivePolicy,
    ) -> Result<Option<PublishRun>, SandboxError> {
        if self.bound.is_empty() {
            return Ok(None);
        }
        let maker = Arc::new(sandbox_proxy::publish::NetnsSockets(netns));
        let run = sandbox_proxy::publish::serve(self.bound, sandbox_proxy::publish::ready(maker))
            .map_err(|e| SandboxError::io("serving the published ports", e))?;
        if let Some(r) = &run {
            policy.published = r.published().to_vec();
            policy.enforced.push(Door::Published {
                ports: r.published().to_vec(),
            });
            if let Some(sink) = &plan.on_published {
                (sink.0)(r.published());
            }
        }
        Ok(run)
    }
}
