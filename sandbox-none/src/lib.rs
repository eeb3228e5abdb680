//! The unconfined backend.
//!
//! **It confines nothing.** The command reads and writes everything the host user can,
//! reaches the host's whole network, and sees and signals the host's processes. What it
//! does get is everything core gives every backend: the scrubbed environment, resource
//! limits, the timeout, output caps, and the whole process tree killed at the end (by a
//! cgroup; a host where none can be created cannot run it, since descendants that call
//! `setsid` would escape).
//!
//! Its capability says so, so the lane policy runs it only on the `trusted` lane, with
//! every over-grant recorded in the outcome. It is for commands the host already trusts,
//! for tests, and as the worked example in `docs/adding-a-backend.md`.
//!
//! Dependencies: `sandbox-core` (everything), `async-trait` (the launcher trait).

use async_trait::async_trait;
use sandbox_core::registry::{AutoRank, BackendInfo, HostKey};
use sandbox_core::{Capability, Enforcement, Plan, Preflight, SandboxError};
use sandbox_host::pipeline::ProcessSandbox;
use sandbox_host::process::{DoorEnd, HostSupport, Launch, Launcher};
use std::sync::Arc;

/// The backend's name.
pub const NAME: &str = "none";

/// What the facade's registry knows of this backend: never picked by `auto` on its own,
/// only as the last resort a caller allowed, since it confines nothing.
pub const INFO: BackendInfo = BackendInfo {
    name: NAME,
    summary: "no confinement (only on `--lane trusted`)",
    auto_rank: AutoRank::NEVER,
    unconfined: true,
    unprivileged: true,
    image: None,
    make: |_| Ok(Arc::new(NoneBackend::new())),
    host_key: HostKey::Nothing,
    leaves: None,
};

/// What the workspace's own tools (the bench, CI) need to know of this backend.
#[cfg(feature = "tooling")]
pub const TOOLING: sandbox_core::registry::Tooling = sandbox_core::registry::Tooling {
    launcher: Some(|_| sandbox_host::pipeline::erase(NoneBackend::new())),
    direct: None,
    host_packages: &[],
    cost: sandbox_core::registry::CostTargets::NONE,
};

/// A sandbox that runs its command unconfined.
pub type NoneSandbox = ProcessSandbox<NoneBackend>;

/// The launcher: runs the plan's program as it is.
#[derive(Clone, Debug)]
pub struct NoneBackend {
    capability: Capability,
}

sandbox_host::launcher_backend!(NoneBackend);

impl NoneBackend {
    /// The launcher, with its capability on this host.
    pub fn new() -> Self {
        Self {
            capability: capability(),
        }
    }
}

impl Default for NoneBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// A new unconfined sandbox.
pub fn sandbox() -> NoneSandbox {
    ProcessSandbox::new(NoneBackend::new())
}

/// What `none` enforces on this host: no confinement; limits and tree kill from core.
pub fn capability() -> Capability {
    let host = HostSupport::detect(false);
    let mut cap = Capability {
        network_none: Enforcement::OverGrant("the host's whole network"),
        network_loopback: Enforcement::OverGrant("the host's whole network"),
        network_full: Enforcement::Exact,
        // No namespace to hold the command: the allowlist would be advice only.
        network_proxy: Enforcement::OverGrant("the host's whole network, no allowlist"),
        tree_kill: host.cgroup_kill.is_some(),
        signal_status: true,
        host_programs: true,
        full_network_is_host: true,
        ..Capability::default()
    };
    host.apply(&mut cap);
    cap
}

#[async_trait]
impl Launcher for NoneBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        self.capability.clone()
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        if !self.capability.tree_kill {
            return Err(SandboxError::unavailable(
                NAME,
                "no cgroup can be created here, so descendants that call setsid could \
                 outlive the run",
                "run with a writable cgroup (as root, or in a systemd-delegated cgroup v2 \
                 subtree, e.g. under `systemd-run --user --scope`)",
            ));
        }
        Ok(Preflight::new(
            NAME,
            None,
            vec!["no confinement: runs only on the `trusted` lane".into()],
        ))
    }

    fn prepare(&self, plan: &Plan, door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        if door.is_some() {
            // Its capability claims no door, so the plan asked for none; never run open.
            return Err(SandboxError::NotSupported {
                backend: NAME,
                feature: "the egress proxy, host ports or published ports".into(),
                remedy: "run `sandbox doctor` to see which backends enforce them".into(),
            });
        }
        Ok(Launch::direct(plan))
    }
}
