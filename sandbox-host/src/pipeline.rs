//! The start pipeline: a plan, from the sweep of dead owners' leftovers to the command
//! running. The shared stages (the clock, the host's facts, the layer, the secrets, the
//! door) are written here once; a backend writes only its own stage. Two entries:
//!
//! A process backend ([`Launcher`]), stages in order ([`Starter::start`] for [`Launched`]):
//!
//! 1. **sweep**: the first run of a process removes what crashed hosts left
//!    ([`crate::sweep`]), on a blocking thread beside the start, awaited on every path;
//! 2. **layer**: the copy-on-write layer over the workspace, under the run's deadline
//!    (its clock started before the layer) ([`crate::changes`]);
//! 3. **host facts**: the run directories carved out read-only, and the refusals
//!    (`host_facts`);
//! 4. **door**: where the plan asks for the egress proxy, host ports or published ports,
//!    the host's side of the door (`sandbox-proxy`: the published ports bound, the proxy
//!    served on the listeners the sandbox will send) and the sandbox's end of it; for a
//!    backend whose door is mediated ([`DoorPlace::Mediated`]), the proxy on the host's
//!    loopback and the routes the supervisor connects the command by ([`door::mediate`]);
//!    with secrets, first their authority and the bundle the command trusts it through
//!    ([`door::prepare_secrets`]);
//! 5. **the backend's own stage**: [`Launcher::prepare`], the pure turn of the plan (and
//!    the door's end) into a [`Launch`];
//! 6. **start**: the spawn under supervision ([`crate::process`]);
//! 7. **ready**: the backend's helper says the sandbox is set up, or nothing ran.
//!
//! A backend that is not a process (a container engine: [`ContainerStarter`]) goes
//! through [`start_container`]: the clock, the host facts, the secrets, its own check
//! (every input error before anything is made), the door's host side where its
//! [`DoorPlace`] says (in the container's namespace: [`InNamespace`]), its own connection
//! (engine, image), the layer ([`HostLayer`], bound at the workspace's path, so the plan
//! the check read stays true), then its own create/start. The order differs from a
//! process's because a container's input errors and its engine are known before the
//! layer's copy, which may take long; a process's `prepare` needs the layer and the
//! door's end, so it comes after them.

use std::any::Any;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandbox_core::run::{RunHandle, RunSandbox, Starter};
use sandbox_core::{
    Capability, Changes, DoorPlace, Enforcement, Lane, NetworkMode, Plan, Preflight,
    ResourceLimits, SandboxError, SandboxExt, SandboxOpts, Status,
};

use crate::changes::{layer_within, HostLayer};
use crate::door::{self, InNamespace};
use crate::fs::tree;
use crate::process::{supervise, Launcher};

/// A [`Sandbox`](sandbox_core::Sandbox) for any [`Launcher`]: the whole run, kill and wait
/// logic, once. `ProcessSandbox::new(launcher)` makes one.
pub type ProcessSandbox<L> = RunSandbox<Launched<L>>;

/// A launcher as the starter of a run. A wrapper because the contract's [`Starter`] and a
/// backend's launcher live in different crates: a blanket impl for every launcher would be
/// an impl of a foreign trait for an uncovered type.
#[derive(Clone, Debug)]
pub struct Launched<L>(pub L);

impl<L> From<L> for Launched<L> {
    fn from(launcher: L) -> Self {
        Self(launcher)
    }
}

/// A launcher, erased for [`BackendInfo::launcher`](sandbox_core::registry::BackendInfo),
/// which the contract types without naming [`Launcher`].
pub fn erase(launcher: impl Launcher) -> Arc<dyn Any + Send + Sync> {
    Arc::new(Arc::new(launcher) as Arc<dyn Launcher>)
}

/// The launcher [`erase`] erased; `None` for anything else.
pub fn unerase(erased: &Arc<dyn Any + Send + Sync>) -> Option<Arc<dyn Launcher>> {
    erased.downcast_ref::<Arc<dyn Launcher>>().cloned()
}

/// Makes a cloneable [`Launcher`] a [`Backend`](sandbox_core::Backend) whose sandboxes are
/// [`ProcessSandbox`]es: one line in each process backend's crate, since the contract's
/// trait cannot be implemented here for every launcher at once (see [`Launched`]).
#[macro_export]
macro_rules! launcher_backend {
    ($ty:ty) => {
        impl ::sandbox_core::Backend for $ty {
            fn name(&self) -> &'static str {
                <$ty as $crate::process::Launcher>::name(self)
            }
            fn capability(&self) -> ::sandbox_core::Capability {
                <$ty as $crate::process::Launcher>::capability(self)
            }
            fn sandbox(&self) -> ::std::boxed::Box<::sandbox_core::DynSandbox> {
                ::std::boxed::Box::new($crate::pipeline::ProcessSandbox::new(
                    ::std::clone::Clone::clone(self),
                ))
            }
        }
    };
}

/// A launcher starts a plan by spawning its launch under [`supervise`](sandbox_core::run::supervise).
#[async_trait]
impl<L: Launcher> Starter for Launched<L> {
    fn name(&self) -> &'static str {
        Launcher::name(&self.0)
    }

    fn capability(&self) -> Capability {
        Launcher::capability(&self.0)
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        Launcher::preflight(&self.0).await
    }

    async fn start(&self, plan: Plan) -> Result<RunHandle, SandboxError> {
        // The first run of this process removes what crashed hosts left (their cgroups,
        // layers, bundles), on a blocking thread beside this start rather than before it:
        // each is named by its owner, so neither touches what the other makes, and a
        // `sandbox` command (a first run every time) no longer waits for the sweep before
        // it prepares. It is awaited on every path, so `run` still returns with it done.
        let sweep = (!crate::sweep::dead_leftovers_removed())
            .then(|| tokio::task::spawn_blocking(crate::sweep::remove_dead_leftovers_once));
        let started = start_launch(&self.0, plan).await;
        if let Some(sweep) = sweep {
            let _ = sweep.await;
        }
        started
    }
}

/// [`Starter::start`] for a launcher, once the sweep is under way.
async fn start_launch<L: Launcher>(
    launcher: &L,
    mut plan: Plan,
) -> Result<RunHandle, SandboxError> {
    let name = Launcher::name(launcher);
    let cap = Launcher::capability(launcher);
    let clock = Clock::start(&plan);
    // The layer over the workspace: overlay is mounted in the child over the
    // workspace's own path; a copy (the race-free walk, under the run's deadline)
    // moves the plan onto it.
    let layer = match plan.changes {
        Changes::Direct => None,
        Changes::Discard | Changes::Review => {
            let best = cap
                .change_layer
                .unwrap_or(sandbox_core::LayerMechanism::Copy);
            let made = layer_within(&plan.workspace, best, clock.deadline);
            match clock.within(name, &plan, made).await? {
                Ok(l) => Some(l),
                Err(ended) => return Ok(ended),
            }
        }
    };
    let mount = match &layer {
        Some(l) if l.mechanism() == sandbox_core::LayerMechanism::Overlay => {
            l.mount_step(&plan.cwd)?
        }
        Some(l) => {
            plan.rebase_workspace(l.source());
            None
        }
        None => None,
    };
    plan.layer = layer
        .as_ref()
        .map(|l| (l.mechanism(), l.dir().to_path_buf()));
    host_facts(name, &cap, &mut plan)?;
    clock.rest(&mut plan);
    let over_granted = over_granted(&cap, &plan);
    // Secrets: the run's authority made once, and its bundle named in the plan (a
    // read-only path and the bundle variables) before the backend turns the plan into
    // its launch.
    let secrets = door::prepare_secrets(&mut plan)?;
    let run_secrets = secrets.as_ref().map(door::SecretsReady::secrets);
    let mediated = cap.door == DoorPlace::Mediated;
    let (egress, door_end, mediation) = if over_granted {
        (None, None, None)
    } else if mediated {
        match door::mediate(&plan, run_secrets)? {
            Some((run, m)) => (Some(run), None, Some(m)),
            None => (None, None, None),
        }
    } else {
        match door::hand_over(&plan, run_secrets)? {
            Some((run, end)) => (Some(run), Some(end), None),
            None => (None, None, None),
        }
    };
    let mut launch = launcher.prepare(&plan, door_end)?;
    if let Some(m) = mediation {
        // The launch's filter notifies `connect` (it is a mediated one, or the backend
        // refused the plan above); its supervisor answers by this door.
        if launch.seccomp_listener.is_none() {
            return Err(SandboxError::NotSupported {
                backend: name,
                feature: "a mediated door without a notifying filter".into(),
                remedy: "run `sandbox doctor` to see what this host refuses".into(),
            });
        }
        launch.mediation = Some(m);
    }
    if let Some(run) = egress {
        launch.egress = Some(Box::new(run));
        launch.enforced.push(if mediated {
            door::mediated_record(&plan)
        } else {
            door::record(&plan)
        });
    }
    if let Some(s) = secrets {
        launch.enforced.push(s.record());
        // Removed with the run: the launch's keep-alives go when the run is over.
        launch.keep_alive.push(Box::new(s.into_keep_alive()));
    }
    if let Some(mut step) = mount {
        if let Some(trees) = launch.layer_trees.take() {
            // The command runs as an unprivileged id (a root host's hand-over): the overlay
            // is mounted on idmapped layers, so it owns what root owns in the workspace.
            let dir = plan.layer.as_ref().map(|(_, d)| d.as_path());
            dir.ok_or_else(|| std::io::Error::other("no layer directory"))
                .and_then(|d| step.on_idmapped_layers(trees.lower, trees.dir, d))
                .map_err(|e| SandboxError::io("preparing the idmapped overlay", e))?;
        }
        if launch.born_in.user {
            // Born in a user namespace of its own, already mapped: the overlay is mounted
            // there (a nested one would leave the pid namespace, which that one owns,
            // out of the command's reach).
            step.in_the_born_user_namespace();
        }
        launch.pre_exec.insert(0, Box::new(step));
    }
    if let Some(l) = &layer {
        launch
            .enforced
            .push(crate::changes::layer_record(l.mechanism(), plan.changes));
    }
    let ready = launch.ready_pipe.take();
    let handle = supervise::start(name, plan, launch, layer)?;
    match ready {
        Some(pipe) => set_up_or_nothing_ran(name, handle, pipe).await,
        None => Ok(handle),
    }
}

/// The run's clock, started before the layer is made: a workspace slow to copy (huge, or
/// raced by another run) must not hold the timeout off.
struct Clock {
    started: Instant,
    /// When the run's timeout ends, counted from [`Clock::start`].
    deadline: Option<Instant>,
}

impl Clock {
    fn start(plan: &Plan) -> Self {
        let started = Instant::now();
        Self {
            started,
            deadline: plan.timeout.map(|t| started + t),
        }
    }

    /// `made` (a layer's copy under [`Clock::deadline`]), or, `Err`, the run that ended
    /// before its command started when the copy took the whole timeout: nothing was
    /// changed, and the run reports a timeout rather than an error.
    async fn within<T>(
        &self,
        name: &'static str,
        plan: &Plan,
        made: impl Future<Output = Result<T, SandboxError>>,
    ) -> Result<Result<T, RunHandle>, SandboxError> {
        match made.await {
            Ok(made) => Ok(Ok(made)),
            Err(SandboxError::Io { source, .. }) if tree::is_deadline(&source) => {
                Ok(Err(sandbox_core::run::ended_before_start(
                    name,
                    plan,
                    Status::TimedOut,
                    self.started.elapsed(),
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// The plan's timeout becomes what is left of it (after the layer's copy), so the
    /// command's own time ends at the run's deadline.
    fn rest(&self, plan: &mut Plan) {
        if let Some(d) = self.deadline {
            plan.timeout = Some(d.saturating_duration_since(Instant::now()));
        }
    }
}

/// The host's facts about `plan`, the same for every backend: the sandbox's own run
/// directories carved out read-only where a writable grant holds them (refused where the
/// backend confines writes but cannot carve out), and a run with secrets or request
/// rules refused where the lane let the backend over-grant the proxy ([`over_granted`]).
fn host_facts(name: &'static str, cap: &Capability, plan: &mut Plan) -> Result<(), SandboxError> {
    let runs =
        crate::owner::runs_dir_carveouts(&plan.workspace, &plan.workspace, &plan.writable_paths);
    if !runs.is_empty() && cap.confine_writes && !cap.readonly_carveouts {
        return Err(SandboxError::NotSupported {
            backend: name,
            feature: "a writable grant holding the sandbox's own run directories (read-only \
                      carve-outs)"
                .into(),
            remedy: "grant a narrower writable directory than the temp dir".into(),
        });
    }
    for d in runs {
        if !plan.readonly_carveouts.contains(&d) {
            plan.readonly_carveouts.push(d);
        }
    }
    if over_granted(cap, plan) && !plan.terminated_hosts().is_empty() {
        // The capability claims secrets (and the rules judged on the same terminated TLS)
        // only with an exact proxy; never run one open.
        return Err(SandboxError::NotSupported {
            backend: name,
            feature: "secrets or request rules without the egress proxy".into(),
            remedy: "use a backend whose capability lists secrets (`sandbox doctor`)".into(),
        });
    }
    Ok(())
}

/// A proxy the lane let the backend over-grant (the whole network, recorded in the
/// outcome's grants): it gets no door, since there is nothing for it to enforce.
fn over_granted(cap: &Capability, plan: &Plan) -> bool {
    plan.network == NetworkMode::Proxy && cap.network_proxy != Enforcement::Exact
}

/// A backend whose sandbox is not a host process the pipeline spawns (a container
/// engine; the cluster one to come): it writes only what differs, its check, its
/// connection and its create/start, and [`start_container`] runs the shared stages
/// around them.
///
/// Three methods rather than one create/start: a container's input errors (its spec) are
/// found before anything is made, the door's published ports included, and its engine is
/// asked for the image before the layer's copy, so that an engine that is down or an
/// image that is missing is told at once rather than after a long copy.
#[async_trait]
pub trait ContainerStarter: Send + Sync {
    /// What the check found (the container's body, how each path travels), carried into
    /// the later stages.
    type Checked: Send;
    /// What [`connect`](Self::connect) reached (the engine, the image) with the check's
    /// findings.
    type Connected: Send;

    /// The backend's name, as in its outcomes and errors.
    fn name(&self) -> &'static str;

    /// What the backend enforces; the pipeline reads its `door` and `change_layer`.
    fn capability(&self) -> Capability;

    /// Every input error of `plan` (as the host's facts rewrote it), before anything is
    /// made: pure, with no engine and no host object.
    fn check(&self, plan: &Plan) -> Result<Self::Checked, SandboxError>;

    /// Reach what the start needs (the engine, the image) once the door's host side is
    /// bound; the refusals that depend on the door (`door`: what it must make inside).
    /// Makes nothing that outlives an error.
    async fn connect(
        &self,
        plan: &Plan,
        checked: Self::Checked,
        door: &InNamespace,
    ) -> Result<Self::Connected, SandboxError>;

    /// Create and start the container from what the shared stages made; returns once the
    /// command runs. On an error it removes whatever it made: nothing is left half-started.
    async fn create_start(
        &self,
        start: ContainerStart<Self::Connected>,
    ) -> Result<RunHandle, SandboxError>;
}

/// What the shared stages hand a [`ContainerStarter`]'s create/start.
#[derive(Debug)]
pub struct ContainerStart<C> {
    /// The plan as the stages rewrote it: the run directories carved out, the secrets'
    /// bundle named, the timeout what is left of it after the layer.
    pub plan: Plan,
    /// What the backend's own check and connection made.
    pub connected: C,
    /// The layer over the workspace (a review, or a snapshot where the capability names a
    /// change layer), to bind at the workspace's path; `None` for a direct run.
    pub layer: Option<HostLayer>,
    /// The door's host side: the published ports bound, the rest made inside once the
    /// container's namespace exists.
    pub door: InNamespace,
    /// The run's secrets: their record, and the bundle's directory, which must outlive
    /// the container that binds it.
    pub secrets: Option<door::SecretsReady>,
}

/// Start `plan` through a backend that is not a process. Stages, in order:
///
/// 1. **clock**: the run's deadline, before the layer;
/// 2. **host facts**: the run directories' carve-outs and the refusals (`host_facts`);
/// 3. **secrets**: their authority and bundle ([`door::prepare_secrets`]), named in the
///    plan before the check reads it;
/// 4. **check**: the backend's; every input error surfaces here, before anything is made;
/// 5. **door**: its host side, where the capability's [`DoorPlace`] says;
/// 6. **connect**: the backend's engine and image;
/// 7. **layer**: under the run's deadline; a copy that takes the whole timeout ends the
///    run before its command started;
/// 8. **create/start**: the backend's, with the plan's timeout what is left of it.
///
/// The sweep of dead owners' leftovers is the backend's (an engine's containers and
/// volumes), before this.
pub async fn start_container<C: ContainerStarter>(
    backend: &C,
    mut plan: Plan,
) -> Result<RunHandle, SandboxError> {
    let name = backend.name();
    let cap = backend.capability();
    let clock = Clock::start(&plan);
    // A container's door is made as the plan asks: its backend claims the proxy exactly or
    // the plan refused it, so no proxy is over-granted here.
    host_facts(name, &cap, &mut plan)?;
    let secrets = door::prepare_secrets(&mut plan)?;
    let checked = backend.check(&plan)?;
    let door = container_door(name, &cap, &plan, secrets.as_ref())?;
    let connected = backend.connect(&plan, checked, &door).await?;
    let layer = if plan.changes != Changes::Direct && cap.change_layer.is_some() {
        let made = HostLayer::prepare(&plan.workspace, clock.deadline);
        match clock.within(name, &plan, made).await? {
            Ok(l) => Some(l),
            Err(ended) => return Ok(ended),
        }
    } else {
        None
    };
    clock.rest(&mut plan);
    let start = ContainerStart {
        plan,
        connected,
        layer,
        door,
        secrets,
    };
    backend.create_start(start).await
}

/// A container's door, where its capability says: in the container's own network
/// namespace (the host enters it), its published ports bound now so a port in use is
/// refused before anything is made. A mediated door needs a supervisor of the command's
/// process, which a container's engine keeps to itself.
fn container_door(
    name: &'static str,
    cap: &Capability,
    plan: &Plan,
    secrets: Option<&door::SecretsReady>,
) -> Result<InNamespace, SandboxError> {
    match cap.door {
        DoorPlace::Namespace => InNamespace::bind(plan, secrets.map(door::SecretsReady::secrets)),
        DoorPlace::Mediated => Err(SandboxError::NotSupported {
            backend: name,
            feature: "a mediated door for a container".into(),
            remedy: "declare the door in the container's network namespace".into(),
        }),
    }
}

/// Wait until the backend's helper says the sandbox is set up ([`Launch::ready_pipe`]).
/// A launcher that ended without saying so ran nothing: its run is over (everything
/// released) and is an error naming what the launcher printed. A run killed or timed out
/// during the set-up keeps its outcome.
async fn set_up_or_nothing_ran(
    name: &'static str,
    handle: RunHandle,
    pipe: OwnedFd,
) -> Result<RunHandle, SandboxError> {
    use tokio::io::AsyncReadExt;
    let io = |e| SandboxError::io("reading the sandbox's ready pipe", e);
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(pipe).map_err(io)?;
    let mut byte = [0u8; 1];
    tokio::select! {
        // Only the helper writes it; the host's own copy of a write end is released with
        // the run, so end-of-file, where it comes at all, comes no earlier than the outcome.
        r = rx.read(&mut byte) => if matches!(r, Ok(1)) {
            return Ok(handle);
        },
        _ = handle.wait() => {}
        // A kill asked for during the set-up: `run` passes it on to the handle.
        () = sandbox_core::run::start_cancelled() => return Ok(handle),
    }
    let outcome = handle.wait().await?;
    // The byte may have come with the end (a command that was over at once). Asked of the
    // kernel (the descriptor is non-blocking), not with `try_read`, which answers from the
    // reactor's readiness and may not have seen the byte yet; and not awaited, since a
    // ready pipe may be a FIFO the host holds open for writing too (gVisor's pid file),
    // which never reads end-of-file.
    if matches!(rustix::io::read(&rx, &mut byte), Ok(1)) {
        return Ok(handle);
    }
    match outcome.status {
        sandbox_core::Status::Exited { code } => Err(SandboxError::unavailable(
            name,
            format!(
                "the sandbox could not be set up and nothing ran: the launcher exited with \
                 {code} before the command started{}",
                match outcome.stderr.text().trim() {
                    "" => String::new(),
                    said => format!(" ({said})"),
                }
            ),
            "run `sandbox doctor` to see what the host refuses",
        )),
        _ => Ok(handle),
    }
}

/// Run `true` through the whole of `launcher` (its launch, its steps between fork and exec,
/// core's supervision) in a fresh temp workspace tagged `kind`, on the `trusted` lane with
/// network `network`, no limits and a minute's timeout: what a preflight runs to prove the
/// backend works here, not only that its program exists. `Ok(Err(how))` when it ran and
/// did not exit 0 (`how` says how it ended, with its stderr), for the backend to turn into
/// its own error with the remedy; `Err` when it could not be run at all.
pub async fn run_true<L: Launcher + Clone>(
    launcher: &L,
    kind: &str,
    network: NetworkMode,
) -> Result<Result<(), String>, SandboxError> {
    let dir = crate::owner::temp_dir(kind)?;
    let mut opts = SandboxOpts::new(dir.path(), ["true"]);
    opts.network = network;
    opts.lane = Lane::Trusted;
    opts.limits = ResourceLimits::none();
    opts.timeout = Some(Duration::from_secs(60));
    let outcome = ProcessSandbox::new(launcher.clone()).execute(opts).await?;
    if outcome.status == (Status::Exited { code: 0 }) {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "ended with {:?}: {}",
        outcome.status,
        outcome.stderr.text().trim()
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A container backend that records the stages of its own the pipeline ran, and what
    /// its create/start was handed.
    struct Recording {
        refuse_check: bool,
        stages: Mutex<Vec<String>>,
    }

    impl Recording {
        fn new(refuse_check: bool) -> Self {
            Self {
                refuse_check,
                stages: Mutex::new(Vec::new()),
            }
        }

        fn push(&self, stage: String) {
            self.stages.lock().expect("stages").push(stage);
        }

        fn stages(&self) -> Vec<String> {
            self.stages.lock().expect("stages").clone()
        }
    }

    #[async_trait]
    impl ContainerStarter for Recording {
        type Checked = ();
        type Connected = ();

        fn name(&self) -> &'static str {
            "recording"
        }

        fn capability(&self) -> Capability {
            Capability::everything()
        }

        fn check(&self, _: &Plan) -> Result<(), SandboxError> {
            self.push("check".into());
            if self.refuse_check {
                return Err(SandboxError::NotSupported {
                    backend: "recording",
                    feature: "this plan".into(),
                    remedy: "none".into(),
                });
            }
            Ok(())
        }

        async fn connect(&self, _: &Plan, (): (), _: &InNamespace) -> Result<(), SandboxError> {
            self.push("connect".into());
            Ok(())
        }

        async fn create_start(&self, start: ContainerStart<()>) -> Result<RunHandle, SandboxError> {
            let layer = start.layer.as_ref().map(|l| l.mechanism());
            let rest = start
                .plan
                .timeout
                .is_some_and(|t| t <= Duration::from_secs(60));
            self.push(format!("create_start layer={layer:?} rest={rest}"));
            Ok(sandbox_core::run::ended_before_start(
                "recording",
                &start.plan,
                Status::Killed,
                Duration::ZERO,
            ))
        }
    }

    fn plan(workspace: &std::path::Path, changes: Changes) -> Plan {
        let mut opts = SandboxOpts::new(workspace, ["true"]);
        opts.changes = changes;
        opts.lane = Lane::Trusted;
        opts.timeout = Some(Duration::from_secs(60));
        Plan::new(&opts, "recording", &Capability::everything()).expect("plan")
    }

    #[tokio::test]
    async fn a_container_input_error_surfaces_before_anything_is_made() {
        let ws = tempfile::tempdir().expect("workspace");
        let backend = Recording::new(true);
        let e = start_container(&backend, plan(ws.path(), Changes::Review))
            .await
            .expect_err("the check refuses");
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
        // No connection, no layer, no start.
        assert_eq!(backend.stages(), ["check"]);
    }

    #[tokio::test]
    async fn a_container_review_starts_on_the_host_layer_with_the_rest_of_its_time() {
        let ws = tempfile::tempdir().expect("workspace");
        std::fs::write(ws.path().join("f"), "x").expect("file");
        let backend = Recording::new(false);
        let handle = start_container(&backend, plan(ws.path(), Changes::Review))
            .await
            .expect("started");
        assert_eq!(handle.wait().await.expect("outcome").status, Status::Killed);
        assert_eq!(
            backend.stages(),
            [
                "check",
                "connect",
                "create_start layer=Some(Copy) rest=true"
            ]
        );
        let backend = Recording::new(false);
        start_container(&backend, plan(ws.path(), Changes::Direct))
            .await
            .expect("started");
        assert_eq!(backend.stages()[2], "create_start layer=None rest=true");
    }
}
