//! One run on the engine: create what it needs, start it, supervise it to its end, bring
//! the changes back, remove everything.
//!
//! Order matters for "nothing half-started or left behind": every input error is found by
//! the plan and the pure [`spec`](crate::spec) before the engine is asked for anything;
//! each object is recorded in [`Resources`] the moment it exists, and any error after the
//! first one removes them all before `run` returns.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, VolumeCreateOptions};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder,
    DownloadFromContainerOptionsBuilder, EventsOptionsBuilder, InspectContainerOptions,
    KillContainerOptionsBuilder, UploadToContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};
use sandbox_core::process::output::SharedCapture;
use sandbox_core::run::{run_channel, RunControl, RunHandle};
use sandbox_core::{
    EffectivePolicy, LimitMechanism, LimitRecord, OutputSink, Plan, SandboxError, SandboxOutcome,
    Status, Stdin, StreamKind, TreeKill,
};
use tokio::io::AsyncWriteExt;

use crate::config::DockerConfig;
use crate::error::DockerError;
use crate::handover::{choose_identity, nested_in, plan_handovers, Handover, Identity, Role, Via};
use crate::idmap::{self, IdmappedMount};
use crate::resources::Resources;
use crate::transfer::{self, ChannelReader, ChannelWriter, Upload, WriteBack};
use crate::{labels, program, spec, NAME};

/// How long teardown waits for a killed container to stop and its output to drain.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(30);
/// Uploads and downloads of a large workspace take longer than the client's default
/// request timeout.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(3600);

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Knobs that differ between a user's run and the preflight's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunKind {
    /// Look `argv[0]` up in the image first (off for the preflight, whose program is the
    /// engine's own init, mounted only at start).
    pub resolve_program: bool,
    /// The role label.
    pub role: &'static str,
}

/// Everything the supervisor owns.
struct Run {
    docker: Docker,
    resources: Resources,
    id: String,
    plan: Plan,
    policy: EffectivePolicy,
    handovers: Vec<Handover>,
    uploaded: BTreeMap<usize, BTreeSet<PathBuf>>,
}

fn owner_of(p: &Path) -> Option<(u32, u32)> {
    std::fs::metadata(p).ok().map(|m| (m.uid(), m.gid()))
}

/// The create-container body a run of `plan` sends when every path it names is
/// bind-mounted as it is (no copy, no idmapped staging); an error when the plan needs
/// either. See [`DockerBackend::container_body`](crate::DockerBackend::container_body).
pub(crate) fn plain_body(
    config: &DockerConfig,
    plan: &Plan,
) -> Result<ContainerCreateBody, SandboxError> {
    let host_uid = nix::unistd::geteuid().as_raw();
    let host_gid = nix::unistd::getegid().as_raw();
    let identity = choose_identity(host_uid, host_gid, owner_of(&plan.workspace));
    let handovers = plan_handovers(
        &plan.workspace,
        &plan.readonly_carveouts,
        &plan.read_only_paths,
        &plan.writable_paths,
        config.workspace_mode,
        plan.snapshot,
        host_uid == 0,
        &identity,
        false,
        &owner_of,
    );
    if let Some(h) = handovers.iter().find(|h| !matches!(h.via, Via::Bind)) {
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

/// Start `plan` in a container; returns once it runs.
pub(crate) async fn start(
    config: &DockerConfig,
    plan: Plan,
    kind: RunKind,
) -> Result<RunHandle, SandboxError> {
    let host_uid = nix::unistd::geteuid().as_raw();
    let host_gid = nix::unistd::getegid().as_raw();
    let identity = choose_identity(host_uid, host_gid, owner_of(&plan.workspace));
    let plan_for = |idmap: bool| {
        plan_handovers(
            &plan.workspace,
            &plan.readonly_carveouts,
            &plan.read_only_paths,
            &plan.writable_paths,
            config.workspace_mode,
            plan.snapshot,
            host_uid == 0,
            &identity,
            idmap,
            &owner_of,
        )
    };
    let run_id = labels::run_id();
    let spec_for = |handovers: &[Handover]| {
        spec::container(&spec::SpecInput {
            plan: &plan,
            config,
            identity,
            handovers,
            run_id: &run_id,
            labels: labels::labels(kind.role),
        })
    };
    let mut handovers = plan_for(true);
    // Every input error surfaces here, before anything is made.
    let mut body = spec_for(&handovers)?;
    copyable(&handovers)?;
    let docker = crate::client::connect_inner().await?;
    let image = crate::image::ensure(&docker, config).await?;

    // From here on the host or the engine holds objects of ours: any error removes them.
    let mut resources = Resources::new(docker.clone());
    let mut notes = Vec::new();
    if handovers
        .iter()
        .any(|h| matches!(h.via, Via::IdmappedBind { .. }))
    {
        if let Err(e) = stage_idmapped(&run_id, &handovers, &identity, &mut resources).await {
            // Not a weaker confinement: the same trees, handed over by copy instead.
            notes.push(format!(
                "idmapped mounts are unavailable here ({e}); trees the command's uid does not \
                 own travel by copy"
            ));
            if let Err(cleanup) = resources.remove_all().await {
                tracing::error!("sandbox-docker: removing staging mounts: {cleanup}");
            }
            handovers = plan_for(false);
            copyable(&handovers)?;
            body = spec_for(&handovers)?;
        }
    }
    let mut policy = policy(&plan, config, &identity, &handovers, &image);
    policy.notes.append(&mut notes);

    let made = make(
        &docker,
        &mut resources,
        config,
        &plan,
        &handovers,
        &identity,
        &run_id,
        body,
        kind,
    )
    .await;
    let (id, uploaded, output, input, mut warnings) = match made {
        Ok(m) => m,
        Err(e) => {
            if let Err(cleanup) = resources.remove_all().await {
                tracing::error!("sandbox-docker: removing a failed run: {cleanup}");
            }
            return Err(e.into());
        }
    };
    policy.notes.append(&mut warnings);

    let (handle, control) = run_channel(plan.output_limit);
    let pump = tokio::spawn(pump(
        output,
        control.stdout.clone(),
        control.stderr.clone(),
        plan.output_sink.clone(),
    ));
    if let Stdin::Bytes(bytes) = &plan.stdin {
        let bytes = bytes.clone();
        let mut input = input;
        tokio::spawn(async move {
            // A command that does not read its input: not an error.
            let _ = input.write_all(&bytes).await;
            let _ = input.shutdown().await;
        });
    }
    let run = Run {
        docker,
        resources,
        id,
        plan,
        policy,
        handovers,
        uploaded,
    };
    tokio::spawn(run.supervise(control, pump));
    Ok(handle)
}

/// A volume holds a directory: a named file cannot travel by copy.
fn copyable(handovers: &[Handover]) -> Result<(), DockerError> {
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
async fn stage_idmapped(
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
            Via::IdmappedBind { from } => Some((i, h.path.clone(), from)),
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

type Made = (
    String,
    BTreeMap<usize, BTreeSet<PathBuf>>,
    Output,
    Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    Vec<String>,
);

/// Volumes, uploads, the container, the program check, attach, start.
#[allow(clippy::too_many_arguments)]
async fn make(
    docker: &Docker,
    resources: &mut Resources,
    config: &DockerConfig,
    plan: &Plan,
    handovers: &[Handover],
    identity: &Identity,
    run_id: &str,
    body: ContainerCreateBody,
    kind: RunKind,
) -> Result<Made, DockerError> {
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
            let up = upload_for(*i, handovers, identity);
            let seen = upload(docker, &loader.id, up).await?;
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
        .map_err(|e| mount_error(e, handovers, "create the container"))?;
    resources.container(created.id.clone());
    let notes = check_warnings(&created.warnings)?;
    let id = created.id;

    if kind.resolve_program {
        let argv0 = plan.argv[0].to_string_lossy();
        let path_var = plan
            .env_var("PATH")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        program::check(
            docker,
            &id,
            &config.image,
            &argv0,
            &path_var,
            &plan.cwd,
            (identity.uid, identity.gid),
        )
        .await?;
    }

    let stdin = matches!(plan.stdin, Stdin::Bytes(_));
    let attach = docker
        .attach_container(
            &id,
            Some(
                AttachContainerOptionsBuilder::new()
                    .stream(true)
                    .stdout(true)
                    .stderr(true)
                    .stdin(stdin)
                    .logs(false)
                    .build(),
            ),
        )
        .await
        .map_err(|e| DockerError::engine("attach to the container", e))?;
    docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| mount_error(e, handovers, "start the container"))?;
    Ok((id, uploaded, attach.output, attach.input, notes))
}

/// The engine's create warnings: a limit it says it will not enforce fails the run; the
/// rest become notes in the outcome's policy.
///
/// One is only a note: "Memory limited without swap" (no swap accounting on the engine's
/// host) still caps the memory the command holds in RAM, the cgroup limit we report.
fn check_warnings(warnings: &[String]) -> Result<Vec<String>, DockerError> {
    let mut notes = Vec::new();
    for w in warnings {
        let lower = w.to_lowercase();
        let what = if lower.contains("limited without swap") {
            notes.push(format!("engine: {w} (swap use is not limited)"));
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
            notes.push(format!("engine: {w}"));
            continue;
        };
        return Err(DockerError::NotEnforced {
            what: what.into(),
            warning: w.clone(),
        });
    }
    Ok(notes)
}

/// A bind source the engine cannot find means the engine does not share our disk.
fn mount_error(e: bollard::errors::Error, handovers: &[Handover], action: &str) -> DockerError {
    if let bollard::errors::Error::DockerResponseServerError { message, .. } = &e {
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

/// How handover `i` is uploaded.
fn upload_for(i: usize, handovers: &[Handover], identity: &Identity) -> Upload {
    let h = &handovers[i];
    let nested = nested_in(&h.path, handovers);
    let rel = |p: &Path| p.strip_prefix(&h.path).unwrap_or(p).to_path_buf();
    Upload {
        root: h.path.clone(),
        top: crate::spec::loader_path(i)
            .trim_start_matches('/')
            .to_owned(),
        // A writable tree belongs to the command; a read-only one keeps its host owners,
        // so what the command could not read on the host it cannot read here either.
        owner: (!h.read_only).then_some((identity.uid, identity.gid)),
        read_only_inside: nested
            .iter()
            .filter(|n| n.via == Via::InsideCopy)
            .map(|n| rel(&n.path))
            .collect(),
        read_only_group: identity.gid,
        skip: nested
            .iter()
            .filter(|n| n.via != Via::InsideCopy)
            .map(|n| rel(&n.path))
            .collect(),
    }
}

/// Stream the archive of `up` into the loader's mount of its volume.
async fn upload(
    docker: &Docker,
    loader: &str,
    up: Upload,
) -> Result<BTreeSet<PathBuf>, DockerError> {
    let root = up.root.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let builder = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter::new(tx.clone());
        let r = transfer::write_archive(&up, &mut w);
        if let Err(e) = &r {
            // Fail the upload too, so the engine does not keep half an archive.
            let _ = tx.blocking_send(Err(std::io::Error::new(e.kind(), e.to_string())));
        }
        r
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let sent = docker
        .clone()
        .with_timeout(TRANSFER_TIMEOUT)
        .upload_to_container(
            loader,
            Some(
                UploadToContainerOptionsBuilder::new()
                    .path(transfer::UPLOAD_TO)
                    .build(),
            ),
            bollard::body_try_stream(body),
        )
        .await;
    let built = builder
        .await
        .map_err(|e| DockerError::io("building the upload archive", std::io::Error::other(e)))?;
    let seen = built.map_err(|e| {
        DockerError::io(format!("copying {} into the container", root.display()), e)
    })?;
    sent.map_err(|e| DockerError::engine(format!("upload {}", root.display()), e))?;
    Ok(seen)
}

/// Copy the output into the captures (and the sink) as it arrives.
async fn pump(
    mut output: Output,
    stdout: SharedCapture,
    stderr: SharedCapture,
    sink: Option<OutputSink>,
) {
    while let Some(Ok(item)) = output.next().await {
        let (kind, bytes, cap) = match item {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (StreamKind::Stdout, message, &stdout)
            }
            LogOutput::StdErr { message } => (StreamKind::Stderr, message, &stderr),
            LogOutput::StdIn { .. } => continue,
        };
        if let Some(s) = &sink {
            (s.0)(kind, &bytes);
        }
        if let Ok(mut c) = cap.lock() {
            c.push(&bytes);
        }
    }
}

/// Return once the container is not running. The engine's wait answers when it stops;
/// if the connection breaks instead, fall back to asking.
async fn wait_stopped(docker: &Docker, id: &str) {
    loop {
        let opts = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut wait = docker.wait_container(id, Some(opts));
        match wait.next().await {
            Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {
                return
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        match docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) if c.state.as_ref().and_then(|s| s.running) == Some(true) => {}
            _ => return,
        }
    }
}

enum End {
    Exited,
    TimedOut,
    Killed,
}

impl Run {
    async fn supervise(mut self, mut control: RunControl, pump: tokio::task::JoinHandle<()>) {
        let started = Instant::now();
        let deadline = self.plan.timeout.map(|t| tokio::time::Instant::now() + t);
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let end = tokio::select! {
            _ = wait_stopped(&self.docker, &self.id) => End::Exited,
            _ = timer => End::TimedOut,
            _ = control.kill_rx.wait_for(|k| *k) => End::Killed,
        };
        if !matches!(end, End::Exited) {
            // The init dies and takes the whole pid namespace with it.
            let kill = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
            if let Err(e) = self.docker.kill_container(&self.id, Some(kill)).await {
                tracing::debug!("sandbox-docker: kill: {e}");
            }
            let _ =
                tokio::time::timeout(TEARDOWN_LIMIT, wait_stopped(&self.docker, &self.id)).await;
        }
        let wall_time = started.elapsed();
        let abort = pump.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), pump)
            .await
            .is_err()
        {
            abort.abort();
        }

        let result = self.finish(end, wall_time, &control).await;
        // Removal is part of the run: `wait` returns only once nothing is left.
        let removed = self.resources.remove_all().await;
        let result = match (result, removed) {
            (Ok(outcome), Ok(())) => Ok(outcome),
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(SandboxError::from(e)),
        };
        control.finish(result);
    }

    /// The status, the changes copied back, the captured files.
    async fn finish(
        &mut self,
        end: End,
        wall_time: Duration,
        control: &RunControl,
    ) -> Result<SandboxOutcome, SandboxError> {
        let state = self
            .docker
            .inspect_container(&self.id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| DockerError::engine("inspect the container", e))?
            .state
            .unwrap_or_default();
        let code = state.exit_code.unwrap_or(-1);
        let oom = state.oom_killed == Some(true)
            || (matches!(end, End::Exited) && code != 0 && self.oom_event(code).await);
        let mut policy = self.policy.clone();
        let status = match end {
            End::TimedOut => Status::TimedOut,
            End::Killed => Status::Killed,
            End::Exited => decode(code, oom, &mut policy),
        };

        for (i, h) in self.handovers.iter().enumerate() {
            if h.via == (Via::Volume { write_back: true }) && !h.read_only {
                let uploaded = self.uploaded.get(&i).cloned().unwrap_or_default();
                self.write_back(h, &uploaded).await?;
            }
        }
        let files = self.captured_files().await?;
        Ok(SandboxOutcome::new(
            status,
            sandbox_core::process::output::snapshot(&control.stdout),
            sandbox_core::process::output::snapshot(&control.stderr),
            wall_time,
            NAME,
            files,
            policy,
        ))
    }

    /// Whether the engine reported an OOM kill in this container.
    ///
    /// The engine's `OOMKilled` flag is set only when its OOM event arrives before the
    /// container's exit is processed; with an init as pid 1 the killed process is its
    /// child, the init exits at once, and the event often comes a few milliseconds late.
    /// The event itself is still delivered, so it is looked up in the engine's event log
    /// (filtered by this container's id, from the start of time, so clock skew with a
    /// remote engine cannot hide it). A command that died of SIGKILL (137) waits up to
    /// two seconds for a late event; other failures only look at what already arrived.
    async fn oom_event(&self, code: i64) -> bool {
        let filters = HashMap::from([
            ("container", vec![self.id.clone()]),
            ("type", vec!["container".to_string()]),
            ("event", vec!["oom".to_string()]),
        ]);
        let opts = EventsOptionsBuilder::new()
            .since("1")
            .filters(&filters)
            .build();
        let mut events = self.docker.events(Some(opts));
        let patience = if code == 137 {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(200)
        };
        matches!(
            tokio::time::timeout(patience, events.next()).await,
            Ok(Some(Ok(ev))) if ev.action.as_deref() == Some("oom")
        )
    }

    /// Download a copied tree from the stopped container and apply it to the host.
    async fn write_back(
        &self,
        h: &Handover,
        uploaded: &BTreeSet<PathBuf>,
    ) -> Result<(), SandboxError> {
        let path = h.path.to_string_lossy().into_owned();
        let mut stream = self
            .docker
            .clone()
            .with_timeout(TRANSFER_TIMEOUT)
            .download_from_container(
                &self.id,
                Some(
                    DownloadFromContainerOptionsBuilder::new()
                        .path(&path)
                        .build(),
                ),
            );
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let root = h.path.clone();
        let keep: Vec<PathBuf> = nested_in(&h.path, &self.handovers)
            .iter()
            .map(|n| {
                n.path
                    .strip_prefix(&h.path)
                    .unwrap_or(&n.path)
                    .to_path_buf()
            })
            .collect();
        let uploaded = uploaded.clone();
        // New files belong to the tree's owner, as they would after a bind-mounted run.
        let chown_new = owner_of(&h.path);
        let apply = tokio::task::spawn_blocking(move || {
            transfer::apply_archive(
                ChannelReader::new(rx),
                &WriteBack {
                    root: &root,
                    uploaded: &uploaded,
                    keep: &keep,
                    chown_new,
                },
            )
        });
        let mut fetch_err = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    if tx.send(Ok(b)).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    fetch_err = Some(e);
                    break;
                }
            }
        }
        drop(tx);
        let applied = apply
            .await
            .map_err(|e| SandboxError::io("copying the changes back", std::io::Error::other(e)))?;
        if let Some(e) = fetch_err {
            return Err(DockerError::engine(format!("download {path}"), e).into());
        }
        applied
            .map_err(|e| SandboxError::io(format!("copying the changes back into {path}"), e))?;
        Ok(())
    }

    /// The files the caller asked for: from the host workspace when the changes are
    /// there, from the container when the run was against a throwaway copy.
    async fn captured_files(&self) -> Result<BTreeMap<PathBuf, Vec<u8>>, SandboxError> {
        let ws = &self.handovers[0];
        let cap = self.plan.output_limit;
        if ws.via != (Via::Volume { write_back: false }) {
            let names = self.plan.capture_files.clone();
            let root = self.plan.workspace.clone();
            return tokio::task::spawn_blocking(move || {
                sandbox_core::process::files::capture_files(&root, &names, cap)
            })
            .await
            .map_err(|e| SandboxError::io("reading captured files", std::io::Error::other(e)));
        }
        let mut out = BTreeMap::new();
        for name in &self.plan.capture_files {
            let path = self.plan.workspace.join(name);
            let mut stream = self.docker.download_from_container(
                &self.id,
                Some(
                    DownloadFromContainerOptionsBuilder::new()
                        .path(&path.to_string_lossy())
                        .build(),
                ),
            );
            let mut bytes = Vec::new();
            let mut failed = false;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(b) => bytes.extend_from_slice(&b),
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
                // The archive of one file: its data plus headers and padding.
                if bytes.len() > cap + 64 * 1024 {
                    break;
                }
            }
            if failed {
                continue;
            }
            if let Ok(Some(data)) = transfer::single_file(&bytes[..], cap) {
                out.insert(name.clone(), data);
            }
        }
        Ok(out)
    }
}

/// The status from the engine's exit code and OOM flag. Under tini, a command killed by
/// signal N exits 128+N, so a signal cannot be told from such an exit code (the
/// capability says so). An OOM kill anywhere in the container, followed by a failing
/// exit, is reported as what it was.
fn decode(code: i64, oom: bool, policy: &mut EffectivePolicy) -> Status {
    if oom {
        policy
            .notes
            .push("the out-of-memory killer ran in the container".into());
        if code != 0 {
            return Status::OutOfMemory;
        }
    }
    Status::Exited {
        code: i32::try_from(code).unwrap_or(-1),
    }
}

/// What the run enforces, for the outcome.
fn policy(
    plan: &Plan,
    config: &DockerConfig,
    identity: &Identity,
    handovers: &[Handover],
    image: &bollard::models::ImageInspect,
) -> EffectivePolicy {
    let mut p = plan.effective_policy(NAME);
    p.tree_kill = Some(TreeKill::Container);
    let l = &plan.limits;
    for (limit, value, mechanism) in [
        ("memory", l.memory_bytes, LimitMechanism::Container),
        ("processes", l.max_processes, LimitMechanism::Container),
        ("cpu", l.cpu_seconds, LimitMechanism::Rlimit),
        ("open_files", l.open_files, LimitMechanism::Rlimit),
    ] {
        if let Some(value) = value {
            p.limits.push(LimitRecord {
                limit,
                value,
                mechanism,
            });
        }
    }
    // The engine adds HOSTNAME, and the image's own ENV lines for names we do not set.
    let mut extra = vec!["HOSTNAME".to_string()];
    if let Some(env) = image.config.as_ref().and_then(|c| c.env.as_ref()) {
        for kv in env {
            let name = kv.split('=').next().unwrap_or_default().to_string();
            if !name.is_empty() && !p.env_names.contains(&name) && !extra.contains(&name) {
                extra.push(name);
            }
        }
    }
    p.env_names.extend(extra);
    p.notes.push(format!(
        "image {} ({})",
        config.image,
        image.id.as_deref().unwrap_or("unknown id")
    ));
    p.notes.push(identity.note());
    if let Some(cpus) = config.cpus {
        p.notes.push(format!("CPU quota: {cpus} CPUs"));
    }
    p.notes.push(match plan.network {
        sandbox_core::NetworkMode::Full => "network: the engine's default bridge".into(),
        _ => "network: none (a loopback private to the container)".to_string(),
    });
    for h in handovers {
        let how = match (h.role, h.via) {
            (_, Via::Bind) => "bind-mounted".to_string(),
            (_, Via::IdmappedBind { from }) => format!(
                "bind-mounted through an idmapped mount: uid {} gid {}'s files appear as the \
                 command's, and what it writes is theirs on disk",
                from.0, from.1
            ),
            (Role::Workspace, Via::Volume { write_back: false }) => {
                "copied into a volume; changes discarded (snapshot)".to_string()
            }
            (_, Via::Volume { write_back: true }) if !h.read_only => {
                "copied into a volume; changes copied back after the end".to_string()
            }
            (_, Via::Volume { .. }) => "copied into a read-only volume".to_string(),
            (_, Via::InsideCopy) => {
                "copied with the workspace, root-owned and read-only".to_string()
            }
        };
        p.notes.push(format!("{}: {how}", h.path.display()));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(notes, vec!["engine: something harmless".to_string()]);
        let notes = check_warnings(&["Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.".into()]).unwrap();
        assert!(notes[0].contains("swap use is not limited"), "{notes:?}");
        assert!(check_warnings(&[]).unwrap().is_empty());
    }

    #[test]
    fn oom_with_a_failing_exit_is_out_of_memory() {
        let dir = tempfile::tempdir().unwrap();
        let opts = sandbox_core::SandboxOpts::new(dir.path(), ["x"]);
        let plan = Plan::new(&opts, NAME, &crate::capability()).unwrap();
        let mut p = plan.effective_policy(NAME);
        assert_eq!(decode(137, true, &mut p), Status::OutOfMemory);
        assert!(p.notes.iter().any(|n| n.contains("out-of-memory")));
        let mut p = plan.effective_policy(NAME);
        assert_eq!(decode(0, true, &mut p), Status::Exited { code: 0 });
        assert_eq!(decode(137, false, &mut p), Status::Exited { code: 137 });
        assert_eq!(decode(3, false, &mut p), Status::Exited { code: 3 });
    }

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
