//! The start pipeline of a process backend: a launcher's plan, from the sweep of dead
//! owners' leftovers to the command running.
//!
//! Stages, in order ([`Starter::start`] for [`Launched`]):
//!
//! 1. **sweep**: the first run of a process removes what crashed hosts left
//!    ([`crate::sweep`]), on a blocking thread beside the start, awaited on every path;
//! 2. **layer**: the copy-on-write layer over the workspace, under the run's deadline
//!    ([`crate::changes`]);
//! 3. **door**: where the plan asks for the egress proxy, host ports or published ports,
//!    the host's side of the door (`sandbox-proxy`: the published ports bound, the proxy
//!    served on the listeners the sandbox will send) and the sandbox's end of it; for a
//!    backend whose door is mediated ([`DoorPlace::Mediated`]), the proxy on the host's
//!    loopback and the routes the supervisor connects the command by ([`door::mediate`]);
//!    with secrets, first their authority and the bundle the command trusts it through
//!    ([`door::prepare_secrets`]);
//! 4. **the backend's own stage**: [`Launcher::prepare`], the pure turn of the plan (and
//!    the door's end) into a [`Launch`];
//! 5. **start**: the spawn under supervision ([`crate::process`]);
//! 6. **ready**: the backend's helper says the sandbox is set up, or nothing ran.

use std::any::Any;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sandbox_core::run::{RunHandle, RunSandbox, Starter};
use sandbox_core::{
    Capability, Changes, DoorPlace, Enforcement, Lane, NetworkMode, Plan, Preflight,
    ResourceLimits, SandboxError, SandboxExt, SandboxOpts, Status,
};

use crate::changes::layer_within;
use crate::door;
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
    // The run's clock starts before the layer is made: a workspace made slow to copy
    // (huge, or raced by another run) must not hold the timeout off.
    let started = std::time::Instant::now();
    let deadline = plan.timeout.map(|t| started + t);
    // The layer over the workspace: overlay is mounted in the child over the
    // workspace's own path; a copy (the race-free walk, under the run's deadline)
    // moves the plan onto it.
    let layer = match plan.changes {
        Changes::Direct => None,
        Changes::Discard | Changes::Review => {
            let best = cap
                .change_layer
                .unwrap_or(sandbox_core::LayerMechanism::Copy);
            match layer_within(&plan.workspace, best, deadline).await {
                Ok(l) => Some(l),
                Err(SandboxError::Io { source, .. }) if tree::is_deadline(&source) => {
                    // The copy took the whole timeout: the run timed out before its
                    // command started, and nothing was changed.
                    return Ok(sandbox_core::run::ended_before_start(
                        name,
                        &plan,
                        sandbox_core::Status::TimedOut,
                        started.elapsed(),
                    ));
                }
                Err(e) => return Err(e),
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
    if let Some(d) = deadline {
        plan.timeout = Some(d.saturating_duration_since(std::time::Instant::now()));
    }
    // A proxy the lane let the backend over-grant (the whole network, recorded in the
    // outcome's grants) gets no door: there is nothing for it to enforce.
    let over_granted =
        plan.network == NetworkMode::Proxy && cap.network_proxy != Enforcement::Exact;
    if over_granted && !plan.terminated_hosts().is_empty() {
        // The capability claims secrets (and the rules judged on the same terminated TLS)
        // only with an exact proxy; never run one open.
        return Err(SandboxError::NotSupported {
            backend: name,
            feature: "secrets or request rules without the egress proxy".into(),
            remedy: "use a backend whose capability lists secrets (`sandbox doctor`)".into(),
        });
    }
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
