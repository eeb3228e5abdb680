//! The backend and its sandboxes: the contract's verbs over [`engine`](crate::engine).

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use sandbox_core::run::{RunHandle, RunSandbox, Starter};
use sandbox_core::{
    Backend, Capability, DynSandbox, Enforcement, Plan, Preflight, ResourceLimits, SandboxError,
    SandboxOpts, Status,
};

use crate::client::Connection;
use crate::config::{DockerConfig, WorkspaceMode};
use crate::create::RunKind;
use crate::error::DockerError;
use crate::pool::{Engine, Pool};
use crate::run as engine;
use crate::NAME;

/// What the docker backend enforces in the default bind mode: the same on every host,
/// since the engine does the enforcing (the preflight checks that this engine can); except
/// network mode `proxy`, host ports and published ports, which need a root caller and a
/// local engine (see `egress.rs`).
pub fn capability() -> Capability {
    capability_in(WorkspaceMode::Bind)
}

/// What the docker backend enforces with workspace mode `mode`: only the change layer
/// differs (see `change_layer` below).
pub fn capability_in(mode: WorkspaceMode) -> Capability {
    let listeners = crate::egress::listeners_possible();
    Capability {
        confine_writes: true,
        confine_reads: true,
        readonly_carveouts: true,
        // Not yet: the spec binds a read grant whole, with no mount over what it holds.
        hide_paths: false,
        network_none: Enforcement::Exact,
        // `none` is a network namespace (or, for gVisor, a network stack) of its own.
        network_state_private: true,
        network_loopback: Enforcement::Exact,
        network_full: Enforcement::Exact,
        // The host enters the container's namespace to make the proxy's listeners there:
        // root and a local engine only. Elsewhere refused on every lane (see `check_lane`).
        network_proxy: if listeners {
            Enforcement::Exact
        } else {
            Enforcement::Unsupported
        },
        host_ports: listeners,
        // The same entering, for sockets that connect to the command's published ports.
        publish: listeners,
        tree_kill: true,
        process_isolation: true,
        drops_host_root: true,
        memory_limit: true,
        cpu_limit: true,
        process_limit: true,
        open_files_limit: true,
        // The engine's init reports a command killed by signal N as exit code 128+N.
        signal_status: false,
        oom_status: true,
        reaps_orphans: true,
        // The engine keeps a container whose host was SIGKILLed; the next start's sweep
        // (`cleanup_leftovers`, dead owners only) removes it.
        dies_with_host: false,
        snapshot: true,
        // Bind mode: the snapshot is core's layer, a host copy that keeps holes. Copy mode
        // uploads it into a volume, and the engine unpacks an upload densely, whatever the
        // archive says (each file is charged at its whole length against the cap).
        sparse_snapshot: mode == WorkspaceMode::Bind,
        // Bind mode: core's layer, made on the host (a copy: an overlay of core's lives in
        // a process's own mount namespace, which the engine's never sees) and bound at the
        // workspace's path, scanned after the run like every backend's. Copy mode refuses a
        // review: the tree would come back through an archive that drops FIFOs and hard
        // links, and the change set would not be what the command did. (`Discard` runs on
        // the same layer in bind mode, on a volume copy in copy mode.)
        change_layer: match mode {
            WorkspaceMode::Bind => Some(sandbox_core::LayerMechanism::Copy),
            WorkspaceMode::Copy => None,
        },
        host_programs: false,
        // `full` is the engine's bridge, not the host's network namespace.
        full_network_is_host: false,
        // The engine refuses silently: its seccomp profile cannot notify anyone, and an
        // AppArmor or namespace refusal leaves no record the backend can read. Only the
        // proxy's refusals are seen, and only where the proxy runs (root, a local engine).
        reports_denials: sandbox_core::DenialKinds {
            network_connect: listeners,
            ..sandbox_core::DenialKinds::default()
        },
        // Wherever its proxy runs (root, a local engine): the run's bundle is bound
        // read-only into the container like any read-only path.
        secrets: listeners,
        // Listeners made by the host inside the container's own network namespace.
        door: sandbox_core::DoorPlace::Namespace,
    }
}

/// The docker backend: makes [`DockerSandbox`]es for one image.
///
/// Cheap to clone; the clones share one engine connection and one warm pool (see the
/// crate docs), which go when the last clone is dropped. It does not connect on
/// construction: the first run (or preflight) connects, so the backend can be built where
/// the engine is down and report that in its preflight, and can be shared across tokio
/// runtimes.
#[derive(Clone, Debug)]
pub struct DockerBackend {
    config: Arc<DockerConfig>,
    engine: Arc<Engine>,
}

impl DockerBackend {
    /// A backend for `config`; an error only when the configuration itself is wrong.
    pub fn new(config: DockerConfig) -> Result<Self, SandboxError> {
        config.validate()?;
        Ok(Self {
            config: Arc::new(config),
            engine: Arc::new(Engine {
                connection: Connection::default(),
                pool: Pool::new(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// The engine's create-container body a run of `opts` sends, when every path it
    /// names is bind-mounted as it is (the workspace owned by the command's uid, bind mode):
    /// what `docker run` with the same flags would start. For comparisons against the
    /// docker command line (the bench's `docker run --rm` baseline); options that need a
    /// copy or idmapped staging are refused here, and nothing is sent to the engine.
    pub fn container_body(
        &self,
        opts: &SandboxOpts,
    ) -> Result<bollard::models::ContainerCreateBody, SandboxError> {
        let plan = Plan::new(opts, NAME, &capability())?;
        crate::prepare::plain_body(&self.config, &plan)
    }

    /// A fresh sandbox for one command, as its concrete type.
    pub fn docker_sandbox(&self) -> DockerSandbox {
        RunSandbox::new(DockerStarter {
            config: self.config.clone(),
            engine: Arc::downgrade(&self.engine),
        })
    }
}

impl Backend for DockerBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        capability_in(self.config.workspace_mode)
    }

    fn sandbox(&self) -> Box<DynSandbox> {
        Box::new(self.docker_sandbox())
    }
}

/// One command in one container.
pub type DockerSandbox = RunSandbox<DockerStarter>;

/// How a [`DockerSandbox`] starts its command (see core's
/// [`Starter`](sandbox_core::run::Starter)).
#[derive(Debug)]
pub struct DockerStarter {
    config: Arc<DockerConfig>,
    /// The backend's shared state, while the backend lives: a sandbox does not keep the
    /// pool alive.
    engine: Weak<Engine>,
}

#[async_trait]
impl Starter for DockerStarter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        capability_in(self.config.workspace_mode)
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        preflight(&self.config).await
    }

    async fn start(&self, plan: Plan) -> Result<RunHandle, SandboxError> {
        // The first run of this process removes what crashed hosts left on the engine and
        // here (their containers, volumes, staging mounts): a host SIGKILLed mid-run
        // leaves its container running, and this is the next start.
        static SWEPT: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        SWEPT
            .get_or_init(|| async {
                let sweep = async {
                    let docker = crate::client::connect_inner().await?;
                    crate::leftovers::cleanup(&docker, crate::Scope::DeadOwners).await
                };
                match tokio::time::timeout(std::time::Duration::from_secs(60), sweep).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!("removing what dead hosts left: {e}"),
                    Err(_) => tracing::warn!(
                        "removing what dead hosts left: the engine took over a minute"
                    ),
                }
            })
            .await;
        let kind = RunKind {
            resolve_program: true,
            role: "run",
        };
        let cap = capability_in(self.config.workspace_mode);
        engine::start(&self.config, cap, plan, kind, self.engine.upgrade()).await
    }
}

/// The engine answers at an API we speak, it can enforce the limits we claim, the image
/// is there, and a real container with the full policy runs to its end and is removed.
///
/// The trial command is the engine's own init (`/sbin/docker-init --version`), which the
/// engine mounts into every container that asks for an init: it works in any image,
/// distroless ones included, so the preflight does not depend on what the image holds.
async fn preflight(config: &DockerConfig) -> Result<Preflight, SandboxError> {
    let docker = crate::client::connect_inner().await?;
    let version = docker
        .version()
        .await
        .map_err(|e| DockerError::engine("read the engine version", e))?;
    let info = docker
        .info()
        .await
        .map_err(|e| DockerError::engine("read the engine info", e))?;
    let mut missing = Vec::new();
    if info.memory_limit == Some(false) {
        missing.push("memory limits (the memory cgroup controller)");
    }
    if info.pids_limit == Some(false) {
        missing.push("process-count limits (the pids cgroup controller)");
    }
    if !missing.is_empty() {
        return Err(SandboxError::unavailable(
            NAME,
            format!("the docker engine cannot enforce {}", missing.join(" or ")),
            "enable those cgroup controllers on the engine's host (kernel command line or \
             cgroup v2 delegation), then restart the engine",
        ));
    }
    let image = crate::image::ensure(&docker, config).await?;

    let scratch = sandbox_host::owner::temp_dir("docker-preflight")?;
    let mut opts = SandboxOpts::new(scratch.path(), ["/sbin/docker-init", "--version"]);
    opts.limits = ResourceLimits {
        memory_bytes: Some(64 << 20),
        ..ResourceLimits::default()
    };
    opts.timeout = Some(std::time::Duration::from_secs(60));
    let plan = Plan::new(&opts, NAME, &capability())?;
    let handle = engine::start(
        config,
        capability_in(config.workspace_mode),
        plan,
        RunKind {
            resolve_program: false,
            role: "preflight",
        },
        None,
    )
    .await?;
    let outcome = handle.wait().await?;
    if outcome.status != (Status::Exited { code: 0 }) {
        return Err(SandboxError::unavailable(
            NAME,
            format!(
                "a trial container did not run: {:?}, output: {}{}",
                outcome.status,
                outcome.stdout.text().trim(),
                outcome.stderr.text().trim()
            ),
            "check that the engine can run containers with an init (`docker run --rm --init \
             IMAGE`), and its logs (`journalctl -u docker`)",
        ));
    }
    let v = docker.client_version();
    let mut details = vec![
        format!(
            "engine {} at {}",
            version.version.as_deref().unwrap_or("?"),
            crate::error::docker_host()
        ),
        format!(
            "image {} ({})",
            config.image,
            image.id.as_deref().unwrap_or("?")
        ),
        format!("workspace mode: {:?}", config.workspace_mode),
        format!("trial container: {}", outcome.stdout.text().trim()),
    ];
    if let Some(c) = info.cgroup_version {
        details.push(format!("cgroup version {c}"));
    }
    Ok(Preflight::new(
        NAME,
        Some(format!("API {}.{}", v.major_version, v.minor_version)),
        details,
    ))
}
