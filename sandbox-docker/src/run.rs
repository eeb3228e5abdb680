//! One run on the engine: create what it needs, start it, supervise it to its end, bring
//! the changes back, remove everything.
//!
//! Order matters for "nothing half-started or left behind": every input error is found by
//! the plan and the pure [`spec`](crate::spec) before the engine is asked for anything;
//! each object is recorded in [`Resources`] the moment it exists, and any error after the
//! first one removes them all before `run` returns. The supervision itself (the timeout
//! and kill race, the output capture, the order of teardown) is core's
//! [`supervise`](sandbox_core::run::supervise); this module supplies the engine's verbs.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, ImageInspect};
use bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::denial::DenialLog;
use sandbox_core::record::Container;
use sandbox_core::run::{
    feed_stdin, run_channel, supervise, End, Finished, Job, OutputTap, RunHandle,
};
use sandbox_core::{
    Capability, Changes, EffectivePolicy, EgressRun, Plan, Record, SandboxError, SandboxOutcome,
    Status, Stdin, StreamKind,
};
use sandbox_host::pipeline::{self, ContainerStart, ContainerStarter};
use sandbox_host::HostLayer;

use crate::config::{DockerConfig, WorkspaceMode};
use crate::create::RunKind;
use crate::create::{self, Made, Output, Setup};
use crate::error::DockerError;
use crate::handover::{Handover, Identity, Via};
use crate::pool::{Engine, Pool, Warm};
use crate::resources::Resources;
use crate::{copy, egress, labels, prepare, report, spec, NAME};
use sandbox_host::door::{self, InNamespace, ProxyRun, PublishRun};

/// How long teardown waits for a killed container to stop.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(30);

/// Start `plan` in a container through the shared start pipeline; returns once it runs.
/// `capability`: the backend's for `config`, which the pipeline reads.
pub(crate) async fn start(
    config: &DockerConfig,
    capability: Capability,
    plan: Plan,
    kind: RunKind,
    engine: Option<Arc<Engine>>,
) -> Result<RunHandle, SandboxError> {
    let run = OnEngine {
        config,
        capability,
        kind,
        engine,
    };
    pipeline::start_container(&run, plan).await
}

/// A run on the engine, as the pipeline's container stages see it: the engine's verbs,
/// with the clock, the host's facts, the secrets, the door's host side and the layer made
/// by the pipeline (see `sandbox_host::pipeline::start_container`).
struct OnEngine<'a> {
    config: &'a DockerConfig,
    capability: Capability,
    kind: RunKind,
    /// The backend's shared state (connection, warm pool); `None` for the preflight.
    engine: Option<Arc<Engine>>,
}

/// What the check found: who the command runs as, how each path travels, the body.
struct Checked {
    identity: Identity,
    run_id: String,
    handovers: Vec<Handover>,
    body: ContainerCreateBody,
}

/// The check's findings with the engine reached and the image found.
struct Connected {
    checked: Checked,
    docker: Docker,
    image: ImageInspect,
    /// The container runs the pool's waiter: the door makes listeners inside first.
    waiter: bool,
}

#[async_trait]
impl ContainerStarter for OnEngine<'_> {
    type Checked = Checked;
    type Connected = Connected;

    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        self.capability.clone()
    }

    fn check(&self, plan: &Plan) -> Result<Checked, SandboxError> {
        let identity = prepare::identity(plan);
        let run_id = labels::run_id();
        let handovers = prepare::handovers(self.config, plan, &identity, true, None);
        let body = self.spec(plan, identity, &run_id, &handovers)?;
        prepare::copyable(&handovers)?;
        Ok(Checked {
            identity,
            run_id,
            handovers,
            body,
        })
    }

    async fn connect(
        &self,
        plan: &Plan,
        checked: Checked,
        door: &InNamespace,
    ) -> Result<Connected, SandboxError> {
        // The proxy's listeners are made after the start and before the command: its
        // container waits for its argv behind the pool's waiter (see `egress.rs`).
        let waiter = door.needs_listeners();
        if waiter {
            self.waiter_available()?;
        }
        if plan.changes == Changes::Review && self.config.workspace_mode == WorkspaceMode::Copy {
            // The capability says so and the plan refuses it first; never run it unlayered.
            return Err(DockerError::LayerNeedsBind.into());
        }
        let docker = match &self.engine {
            Some(e) => e.connection.get().await?,
            None => crate::client::connect_inner().await?,
        };
        let image = crate::image::ensure(&docker, self.config).await?;
        Ok(Connected {
            checked,
            docker,
            image,
            waiter,
        })
    }

    async fn create_start(
        &self,
        start: ContainerStart<Connected>,
    ) -> Result<RunHandle, SandboxError> {
        let ContainerStart {
            plan,
            connected,
            mut layer,
            door,
            secrets,
        } = start;
        let Connected {
            mut checked,
            docker,
            image,
            waiter,
        } = connected;
        if let Some(l) = &layer {
            // The layer's copy is bound at the workspace's path: in the runs directory
            // (which a writable temp dir shows, carved out) it stays read-only with the rest.
            checked.handovers =
                prepare::handovers(self.config, &plan, &checked.identity, true, Some(l.tree()));
            layer_bindable(
                &checked.handovers,
                Some(l.tree()),
                "the layer's owner cannot be read",
            )?;
            checked.body =
                self.spec(&plan, checked.identity, &checked.run_id, &checked.handovers)?;
        }
        // From here on the host or the engine holds objects of ours: any error removes them.
        let mut resources = Resources::new(docker.clone());
        let mut notes = self
            .stage(&plan, &mut checked, &mut layer, &mut resources)
            .await?;
        let mut policy = report::policy(
            &plan,
            self.config,
            &checked.identity,
            &checked.handovers,
            &image,
        );
        policy.enforced.append(&mut notes);
        if let Some(l) = &layer {
            policy.enforced.push(l.record(plan.changes));
        }
        let bundle = secrets.map(|s| {
            policy.enforced.push(s.record());
            s.into_keep_alive()
        });
        let Checked {
            identity,
            run_id,
            handovers,
            mut body,
        } = checked;
        let mut run = Run {
            docker,
            resources,
            id: String::new(),
            plan,
            policy,
            handovers,
            uploaded: BTreeMap::new(),
            refill: None,
            egress: None,
            published: None,
            layer,
            bundle,
        };
        match self.pooled(&run, &body, &image).await? {
            Pooled::Warm { warm, pool, key } => {
                // Nothing was staged or layered: every path is bound as it is.
                return start_warm(run, warm, pool, &key, self.config, &identity, door).await;
            }
            Pooled::Cold { refill } => run.refill = refill.map(|r| *r),
        }
        if waiter {
            if let Some(Ok(pool)) = self.engine.as_ref().map(|e| &e.pool) {
                body = pool.waiting(&body);
            }
        }
        let cold = Cold {
            body,
            identity,
            run_id,
            waiter,
            door,
        };
        self.start_cold(run, cold).await
    }
}

/// A run's warm container, or what a fresh one leaves for the pool.
enum Pooled<'p> {
    /// A pooled container for the run, taken (its replacement already asked for).
    Warm {
        warm: Warm,
        pool: &'p Pool,
        key: String,
    },
    /// A fresh run; `refill`: the body to make for the next run once this one is over.
    Cold { refill: Option<Box<Refill>> },
}

/// After a fresh run that the pool could have served: the body of a container for the
/// next, for the pool of this engine, under this key.
type Refill = (Weak<Engine>, String, ContainerCreateBody);

/// What a fresh container is made from, beside the run.
struct Cold {
    body: ContainerCreateBody,
    identity: Identity,
    run_id: String,
    waiter: bool,
    door: InNamespace,
}

impl OnEngine<'_> {
    /// The container's body for `plan` with `handovers`.
    fn spec(
        &self,
        plan: &Plan,
        identity: Identity,
        run_id: &str,
        handovers: &[Handover],
    ) -> Result<ContainerCreateBody, DockerError> {
        spec::container(&spec::SpecInput {
            plan,
            config: self.config,
            identity,
            handovers,
            run_id,
            labels: labels::labels(self.kind.role),
        })
    }

    /// The pool's waiter, which a door with listeners inside needs: refused where the
    /// pool cannot run (or for a run without its backend).
    fn waiter_available(&self) -> Result<(), SandboxError> {
        let why = match self.engine.as_ref().map(|e| &e.pool) {
            Some(Ok(_)) => return Ok(()),
            Some(Err(why)) => why.clone(),
            None => "a run without its backend".to_string(),
        };
        Err(SandboxError::NotSupported {
            backend: NAME,
            feature: "the egress proxy and host ports".into(),
            remedy: format!(
                "the container's waiter is unavailable here ({why}); use network mode \
                 `loopback` or `full`"
            ),
        })
    }

    /// The idmapped staging mounts where a handover asks for one; where they cannot be
    /// made, the same trees handed over by copy instead, and the note that says so.
    async fn stage(
        &self,
        plan: &Plan,
        checked: &mut Checked,
        layer: &mut Option<HostLayer>,
        resources: &mut Resources,
    ) -> Result<Record, SandboxError> {
        let mut notes = Record::new();
        let idmapped = |h: &Handover| matches!(h.via, Via::IdmappedBind { .. });
        if !checked.handovers.iter().any(idmapped) {
            return Ok(notes);
        }
        let staged = prepare::stage_idmapped(
            &checked.run_id,
            &checked.handovers,
            &checked.identity,
            resources,
        )
        .await;
        let Err(e) = staged else {
            return Ok(notes);
        };
        if let Err(cleanup) = resources.remove_all().await {
            tracing::error!("sandbox-docker: removing staging mounts: {cleanup}");
        }
        // Not a weaker confinement: the same trees, handed over by copy instead. A
        // snapshot's layer would travel by copy too: the workspace goes into a volume as
        // it did before layers (holes filled, charged at full length).
        if plan.changes != Changes::Review {
            if let Some(l) = layer.take() {
                l.discard().await;
            }
        }
        let tree = layer.as_ref().map(|l| l.tree());
        checked.handovers = prepare::handovers(self.config, plan, &checked.identity, false, tree);
        layer_bindable(&checked.handovers, tree, &e.to_string())?;
        notes.push(Container::CopiedWithoutIdmap { why: e.to_string() });
        prepare::copyable(&checked.handovers)?;
        checked.body = self.spec(plan, checked.identity, &checked.run_id, &checked.handovers)?;
        Ok(notes)
    }

    /// The warm pool serves runs whose every path is bound as it is: a copy, a layer or
    /// a staging mount is made per run, after a pooled container's binds were fixed.
    async fn pooled(
        &self,
        run: &Run,
        body: &ContainerCreateBody,
        image: &ImageInspect,
    ) -> Result<Pooled<'_>, SandboxError> {
        let cold = Pooled::Cold { refill: None };
        let (Some(e), Some(image_id)) = (&self.engine, &image.id) else {
            return Ok(cold);
        };
        let Ok(pool) = &e.pool else {
            return Ok(cold);
        };
        let servable = self.kind.resolve_program
            && !run.plan.argv.is_empty()
            && run.handovers.iter().all(Handover::bound_as_is);
        if !servable {
            return Ok(cold);
        }
        let (pooled, key) = pool.body(body, image_id)?;
        if let Some(warm) = pool.take(&key).await {
            pool.refill(key.clone(), pooled);
            return Ok(Pooled::Warm { warm, pool, key });
        }
        let refill = pool
            .seen_before(&key)
            .then(|| Box::new((Arc::downgrade(e), key, pooled)));
        Ok(Pooled::Cold { refill })
    }

    /// Make a fresh container, start its door's listeners and published ports, then the
    /// command; any error removes what was made.
    async fn start_cold(&self, mut run: Run, cold: Cold) -> Result<RunHandle, SandboxError> {
        let Cold {
            body,
            identity,
            run_id,
            waiter,
            door,
        } = cold;
        let Run {
            docker,
            resources,
            plan,
            policy,
            handovers,
            ..
        } = &mut run;
        let setup = Setup {
            docker,
            config: self.config,
            plan,
            handovers,
            identity: &identity,
            run_id: &run_id,
            kind: self.kind,
            waiter,
        };
        let started = async {
            let made = create::make(&setup, resources, body).await?;
            // The command waits for its argv: its proxy first.
            let egress = match waiter {
                true => egress::start(docker, &made.id, plan, &door).await?,
                false => None,
            };
            let published = egress::publish(docker, &made.id, plan, door, policy).await?;
            Ok::<_, SandboxError>((made, egress, published))
        };
        let (made, egress, published) = match started.await {
            Ok(x) => x,
            Err(e) => {
                if let Err(cleanup) = run.resources.remove_all().await {
                    tracing::error!("sandbox-docker: removing a failed run: {cleanup}");
                }
                return Err(e);
            }
        };
        if egress.is_some() {
            run.policy.enforced.push(door::record(&run.plan));
        }
        let Made {
            id,
            uploaded,
            output,
            input,
            mut notes,
        } = made;
        run.policy.enforced.append(&mut notes);
        (run.id, run.uploaded, run.egress, run.published) = (id, uploaded, egress, published);

        let (handle, control) = run_channel(run.plan.output_limit);
        let reader = tokio::spawn(pump(output, control.tap(run.plan.output_sink.clone())));
        if waiter {
            // The argv, then the command's own input (end-of-file at once for `Null`).
            let mut bytes = crate::pool::frame(&argv_bytes(&run.plan));
            if let Stdin::Bytes(b) = &run.plan.stdin {
                bytes.extend_from_slice(b);
            }
            feed_stdin(input, bytes);
        } else if let Stdin::Bytes(bytes) = &run.plan.stdin {
            feed_stdin(input, bytes.clone());
        }
        let timeout = run.plan.timeout;
        supervise(run, control, vec![reader], Instant::now(), timeout);
        Ok(handle)
    }
}

/// The plan's argv as the waiter reads it: each argument's bytes, as given.
fn argv_bytes(plan: &Plan) -> Vec<Vec<u8>> {
    plan.argv.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// Run the plan in a pooled container: look its program up (once per image and policy),
/// hand the waiter the argv, then the input.
async fn start_warm(
    mut run: Run,
    mut warm: Warm,
    pool: &Pool,
    key: &str,
    config: &DockerConfig,
    identity: &Identity,
    door: InNamespace,
) -> Result<RunHandle, SandboxError> {
    run.id = warm.id.clone();
    run.resources.container(warm.id.clone());
    let argv = argv_bytes(&run.plan);
    let started = async {
        if !pool.program_known(key, &argv[0]) {
            let looked =
                create::check_program(&run.docker, &run.id, config, &run.plan, identity).await?;
            // Found in the image itself, and nothing earlier on the search can appear
            // later: the image is immutable and named by id in the key.
            let mounted = |p: &PathBuf| {
                run.handovers.iter().any(|h| p.starts_with(&h.path))
                    || ["/tmp", "/proc", "/dev", "/sys", "/etc"]
                        .iter()
                        .any(|m| p.starts_with(m))
            };
            if !looked.iter().any(mounted) {
                pool.program_found(key, &argv[0]);
            }
        }
        // The output, attached before the command exists (it has none until then).
        let output = create::attach(&run.docker, &run.id, false).await?.output;
        // The proxy's listeners, in the container's namespace, before the command.
        run.egress = egress::start(&run.docker, &run.id, &run.plan, &door).await?;
        run.published =
            egress::publish(&run.docker, &run.id, &run.plan, door, &mut run.policy).await?;
        warm.deliver(&argv)
            .await
            .map_err(|e| DockerError::io("handing the command to its container", e))?;
        Ok::<_, SandboxError>(output)
    };
    let output = match started.await {
        Ok(o) => o,
        Err(e) => {
            if let Err(cleanup) = run.resources.remove_all().await {
                tracing::error!("sandbox-docker: removing a failed run: {cleanup}");
            }
            return Err(e);
        }
    };
    if run.egress.is_some() {
        run.policy.enforced.push(door::record(&run.plan));
    }
    run.policy.enforced.append(&mut warm.notes);
    run.policy.enforced.push(Container::WarmPool);

    let (handle, control) = run_channel(run.plan.output_limit);
    let tap = control.tap(run.plan.output_sink.clone());
    // The pool's runtime drives the streams: it stays until the output has ended.
    let keep = warm.keep_runtime();
    let reader = tokio::spawn(async move {
        pump(output, tap).await;
        drop(keep);
    });
    // The input is always a pipe here: the command's bytes, or end-of-file at once.
    let input = match &run.plan.stdin {
        Stdin::Bytes(bytes) => bytes.clone(),
        Stdin::Null => Vec::new(),
    };
    feed_stdin(warm.input, input);
    let timeout = run.plan.timeout;
    supervise(run, control, vec![reader], Instant::now(), timeout);
    Ok(handle)
}

/// Copy the output into the captures (and the sink) as it arrives.
pub(crate) async fn pump(mut output: Output, tap: OutputTap) {
    while let Some(Ok(item)) = output.next().await {
        match item {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                tap.push(StreamKind::Stdout, &message)
            }
            LogOutput::StdErr { message } => tap.push(StreamKind::Stderr, &message),
            LogOutput::StdIn { .. } => {}
        }
    }
}

/// Return once the container is not running. The engine's wait answers when it stops;
/// if the connection breaks instead, fall back to asking. An engine that does not answer
/// that either (stopped, restarting) is an error: the container's state is unknown, and
/// taking it for "stopped" would report a status the command never had.
pub(crate) async fn wait_stopped(docker: &Docker, id: &str) -> Result<(), DockerError> {
    loop {
        let opts = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut wait = docker.wait_container(id, Some(opts));
        match wait.next().await {
            Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {
                return Ok(())
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        match docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) if c.state.as_ref().and_then(|s| s.running) == Some(true) => {}
            Ok(_) => return Ok(()),
            Err(e) => {
                let e = DockerError::engine(
                    "follow the running container (the engine stopped answering mid-run: \
                     restarted or stopped?)",
                    e,
                );
                // Removed meanwhile: it is not running.
                return if e.is_not_found() { Ok(()) } else { Err(e) };
            }
        }
    }
}

/// A started container, as core's supervisor drives it.
struct Run {
    docker: Docker,
    resources: Resources,
    id: String,
    plan: Plan,
    policy: EffectivePolicy,
    handovers: Vec<Handover>,
    uploaded: BTreeMap<usize, BTreeSet<PathBuf>>,
    /// After a fresh run that the pool could have served: make a container for the next.
    refill: Option<Refill>,
    /// The egress proxy and host ports, served from the host on listeners in the
    /// container's namespace; finished once the container has stopped.
    egress: Option<ProxyRun>,
    /// The published ports' host listeners and relays; finished with the proxy.
    published: Option<PublishRun>,
    /// The layer the workspace's bind comes from (a review, or a snapshot in bind mode):
    /// scanned (a review) or removed once the container and its staging mounts are gone.
    /// After `resources`, so a dropped run unmounts the
    /// staging view of it before it is removed.
    layer: Option<HostLayer>,
    /// The run's certificate bundle's directory (a run with secrets): removed when the run
    /// is dropped, after the container that binds it.
    bundle: Option<tempfile::TempDir>,
}

#[async_trait]
impl Job for Run {
    /// The status is read from the stopped container; an error when the engine stopped
    /// answering while it ran.
    type Exit = Result<(), DockerError>;

    async fn exited(&mut self) -> Self::Exit {
        wait_stopped(&self.docker, &self.id).await
    }

    async fn stop(&mut self, end: &End<Self::Exit>) {
        // A container that stopped on its own took its pid namespace with it.
        if matches!(end, End::Exited(Ok(()))) {
            return;
        }
        // The init dies and takes the whole pid namespace with it.
        let kill = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
        if let Err(e) = self.docker.kill_container(&self.id, Some(kill)).await {
            tracing::debug!("sandbox-docker: kill: {e}");
        }
        let _ = tokio::time::timeout(TEARDOWN_LIMIT, wait_stopped(&self.docker, &self.id)).await;
    }

    async fn finish(
        mut self,
        end: End<Self::Exit>,
        finished: Finished,
    ) -> Result<SandboxOutcome, SandboxError> {
        // The container has stopped: nothing inside can connect any more. The proxy's
        // relays and listeners go now, before `wait` returns.
        if let Some(p) = self.published.take() {
            p.finish().await;
        }
        let connections = match self.egress.take() {
            Some(e) => e.finish().await,
            None => sandbox_core::Connections::default(),
        };
        // The proxy decided each refusal itself: a denial seen, not inferred (the engine's
        // own refusals are silent, see the capability).
        let mut denials = DenialLog::default();
        if self.plan.report_denials {
            denials.record_connections(&connections);
        }
        let result = self.outcome(end, finished).await.map(|mut o| {
            o.connections = connections;
            o.with_denials(denials.into_denials())
        });
        // Removal is part of the run: `wait` returns only once nothing is left.
        let removed = self.resources.remove_all().await;
        // The container that bound it is gone: the bundle goes too, before `wait` returns.
        drop(self.bundle.take());
        if let Some((engine, key, body)) = self.refill.take() {
            if let Some(Ok(pool)) = engine.upgrade().as_ref().map(|e| &e.pool) {
                pool.refill(key, body);
            }
        }
        // The container is gone and nothing else mounts the layer: it holds exactly what
        // the command left.
        let review = self.plan.changes == Changes::Review;
        let changes = match (self.layer.take(), &result, &removed) {
            (Some(l), Ok(_), Ok(())) if review => Some(l.into_change_set().await),
            (Some(l), _, _) => {
                l.discard().await;
                None
            }
            (None, _, _) => None,
        };
        match (result, removed, changes) {
            (Err(e), _, _) => Err(e),
            (Ok(_), Err(e), _) => Err(SandboxError::from(e)),
            (Ok(_), Ok(()), Some(Err(e))) => Err(e),
            (Ok(mut outcome), Ok(()), Some(Ok(set))) => {
                outcome.changes = Some(set);
                Ok(outcome)
            }
            (Ok(outcome), Ok(()), None) => Ok(outcome),
        }
    }
}

/// A layer (`tree`) is bound, as it is or through an idmapped mount: a copy of it into a
/// volume would come back through an archive that drops FIFOs and hard links, and the
/// change set would no longer be what the command did. A run without a layer may travel by
/// copy. `cause`: why the layer would travel by copy.
fn layer_bindable(
    handovers: &[Handover],
    tree: Option<&std::path::Path>,
    cause: &str,
) -> Result<(), DockerError> {
    match (tree, handovers.first().map(|h| h.via)) {
        (Some(_), Some(Via::Volume { .. })) => Err(DockerError::LayerNeedsIdmap {
            cause: cause.to_string(),
        }),
        _ => Ok(()),
    }
}

impl Run {
    /// The status, the changes copied back, the captured files.
    async fn outcome(
        &mut self,
        end: End<Result<(), DockerError>>,
        finished: Finished,
    ) -> Result<SandboxOutcome, SandboxError> {
        // Contact lost mid-run: no status can be told; the removal after this (patient
        // enough to outlast an engine restart) makes sure the container is gone.
        let end = match end {
            End::Exited(Err(e)) => return Err(e.into()),
            End::Exited(Ok(())) => End::Exited(()),
            End::TimedOut => End::TimedOut,
            End::Killed => End::Killed,
        };
        let state = self
            .docker
            .inspect_container(&self.id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| DockerError::engine("inspect the container", e))?
            .state
            .unwrap_or_default();
        let code = state.exit_code.unwrap_or(-1);
        let oom = state.oom_killed == Some(true)
            || (matches!(end, End::Exited(())) && code != 0 && {
                report::oom_event(&self.docker, &self.id, code).await
            });
        let mut policy = self.policy.clone();
        let status = match end {
            End::TimedOut => Status::TimedOut,
            End::Killed => Status::Killed,
            End::Exited(()) => report::decode(code, oom, &mut policy),
        };

        for (i, h) in self.handovers.iter().enumerate() {
            if h.via == (Via::Volume { write_back: true }) && !h.read_only {
                let uploaded = self.uploaded.get(&i).cloned().unwrap_or_default();
                copy::write_back(&self.docker, &self.id, h, &self.handovers, &uploaded).await?;
            }
        }
        let files =
            copy::captured_files(&self.docker, &self.id, &self.plan, &self.handovers).await?;
        Ok(SandboxOutcome::new(
            status,
            finished.stdout,
            finished.stderr,
            finished.wall_time,
            NAME,
            files,
            policy,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::handover::Role;

    #[test]
    fn only_a_layer_is_refused_a_copy() {
        let ws = |via| {
            vec![Handover {
                path: PathBuf::from("/ws"),
                source: PathBuf::from("/tmp/layer/copy"),
                role: Role::Workspace,
                via,
                read_only: false,
            }]
        };
        let layer = Some(Path::new("/tmp/layer/copy"));
        let copied = ws(Via::Volume { write_back: true });
        // Without a layer (idmapped staging failed for a plain run): the copy is fine.
        assert!(layer_bindable(&copied, None, "no idmap").is_ok());
        let e = layer_bindable(&copied, layer, "no idmap").unwrap_err();
        assert!(
            matches!(&e, DockerError::LayerNeedsIdmap { cause } if cause == "no idmap"),
            "{e}"
        );
        let e = SandboxError::from(e);
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
        for via in [Via::Bind, Via::IdmappedBind { from: (0, 0) }] {
            assert!(layer_bindable(&ws(via), layer, "").is_ok());
        }
    }
}
