//! Spawn one launch and supervise it to its end.

use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::cgroup::{CgroupSupport, RunCgroups};
use super::child::ChildSetup;
use super::{spawn, HostSupport, Launch};
use crate::changes::Layer;
use crate::fs::files;
use sandbox_core::egress::Connections;
use sandbox_core::outcome::{LimitMechanism, LimitRecord};
use sandbox_core::output::drain;
use sandbox_core::record::Limits;
use sandbox_core::run::{feed_stdin, run_channel, supervise, End, Finished, Job, RunHandle};
use sandbox_core::{
    Changes, LayerMechanism, Plan, SandboxError, SandboxOutcome, Status, StreamKind,
};

/// How long to wait for the tree to be gone and the pipes to close after a kill.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(5);

/// Spawn `launch` for `plan`; returns once the program runs.
pub(crate) fn start(
    backend: &'static str,
    plan: Plan,
    mut launch: Launch,
    layer: Option<Layer>,
) -> Result<RunHandle, SandboxError> {
    let drops_uid = launch.credentials.is_some_and(|(uid, _)| uid != 0);
    let host = HostSupport::detect(drops_uid);
    let mut policy = plan.effective_policy(backend);
    policy.enforced.append(&mut launch.enforced);
    if let Some(e) = &launch.egress {
        policy.published = e.published();
    }

    // Decide each limit's mechanism; a cgroup where the host gives one.
    let limits = &plan.limits;
    let cg_memory = limits
        .memory_bytes
        .filter(|_| host.memory != LimitMechanism::Rlimit);
    let inside = launch.limits_inside;
    let cg_pids = limits
        .max_processes
        .filter(|_| !inside && host.processes.is_some_and(|m| m != LimitMechanism::Rlimit));
    let cgroups = RunCgroups::create(CgroupSupport::get(), cg_memory, cg_pids)
        .map_err(|e| SandboxError::io("creating the run's cgroups", e))?
        .map(Arc::new);

    let mut rlimits = Vec::new();
    if let Some(b) = limits.memory_bytes {
        policy.limits.push(LimitRecord {
            limit: "memory",
            value: b,
            mechanism: host.memory,
        });
        if host.memory == LimitMechanism::Rlimit && !inside {
            rlimits.push((libc::RLIMIT_AS, b));
        }
    }
    if let Some(n) = limits.max_processes {
        let mechanism = if inside {
            Some(LimitMechanism::Rlimit)
        } else {
            host.processes
        };
        let mechanism = mechanism.ok_or_else(|| SandboxError::NotSupported {
            backend,
            feature: "a process-count limit for a command running as root without a cgroup".into(),
            remedy: "run the host as an ordinary user, or give it a writable cgroup".into(),
        })?;
        policy.limits.push(LimitRecord {
            limit: "processes",
            value: n,
            mechanism,
        });
        if mechanism == LimitMechanism::Rlimit && !launch.process_rlimit_inside && !inside {
            rlimits.push((libc::RLIMIT_NPROC, n));
        }
    }
    if let Some(s) = limits.cpu_seconds {
        policy.limits.push(LimitRecord {
            limit: "cpu",
            value: s,
            mechanism: LimitMechanism::Rlimit,
        });
        rlimits.push((libc::RLIMIT_CPU, s));
    }
    if let Some(n) = limits.open_files {
        policy.limits.push(LimitRecord {
            limit: "open_files",
            value: n,
            mechanism: LimitMechanism::Rlimit,
        });
        if !inside {
            rlimits.push((libc::RLIMIT_NOFILE, n));
        }
    }

    // The tree kill: the backend's own guarantee, or a cgroup; neither is refused.
    policy.tree_kill = match (launch.tree_kill, cgroups.as_ref().and(host.cgroup_kill)) {
        (Some(own), _) => Some(own),
        (None, Some(cg)) => Some(cg),
        (None, None) => {
            return Err(SandboxError::NotSupported {
                backend,
                feature: "killing every descendant of the command".into(),
                remedy: "give the host a writable cgroup (cgroup v2 delegation, or root), or \
                         use a backend that kills the tree itself (`sandbox doctor` shows \
                         which do: \"tree kill: yes\")"
                    .into(),
            })
        }
    };

    if launch.born_in.user && launch.credentials.is_some() {
        // Core sets credentials with the host's privileges, which a process born in a new
        // user namespace no longer has: a backend asking for both is refused, not half-run.
        return Err(SandboxError::unavailable(
            backend,
            "the launch asks for new credentials and a new user namespace at once",
            "this is a bug in the backend: report it",
        ));
    }
    let setup = ChildSetup {
        parent: std::process::id() as libc::pid_t,
        host_pidfd: -1,
        id_maps: launch.born_in.user.then(super::BornIn::identity_maps),
        v2_procs: cgroups.as_ref().and_then(|c| c.v2_procs().cloned()),
        born_in_v2: false,
        v1_joins: cgroups
            .as_ref()
            .map(|c| c.v1_joins().to_vec())
            .unwrap_or_default(),
        rlimits: rlimits
            .into_iter()
            .map(|(r, v)| (r, v as libc::rlim_t))
            .collect(),
        pass_fds: launch.pass_fds.iter().map(|f| f.as_raw_fd()).collect(),
        credentials: launch.credentials,
        steps: std::mem::take(&mut launch.pre_exec),
    };

    // The seccomp supervisor, for a backend whose filter notifies: started before the
    // spawn, so a host that cannot give it a thread refuses the run before anything runs.
    // It waits on the socket for the listener the child sends before exec.
    let denial_log = super::notify::SharedLog::default();
    let watcher = match launch.seccomp_listener.take() {
        Some(sock) => Some(
            super::notify::Watcher::start(sock, denial_log.clone(), launch.mediation.take())
                .map_err(|e| {
                    SandboxError::unavailable(
                        backend,
                        format!(
                            "cannot start the thread that answers the seccomp filter's \
                         notifications: {e}"
                        ),
                        "the host may be out of threads: check `ulimit -u` and \
                     /proc/sys/kernel/threads-max",
                    )
                })?,
        ),
        None => None,
    };

    let started = Instant::now();
    let spawned = spawn::spawn(
        &launch,
        matches!(plan.stdin, sandbox_core::Stdin::Bytes(_)),
        setup,
        cgroups.as_ref().and_then(|c| c.v2_dir()),
        spawn::how(),
    )
    .map_err(|source| SandboxError::Spawn {
        program: launch.program.clone(),
        source,
    })?;
    // The descriptors were handed over; ours can go.
    launch.pass_fds.clear();
    let spawn::Spawned {
        child,
        stdin,
        stdout,
        stderr,
        fallback,
    } = spawned;
    policy
        .enforced
        .extend(fallback.map(|why| Limits::ForkJoinedCgroups { why }));
    let pgid = child.id().map(|p| Pid::from_raw(p as i32));

    let (handle, control) = run_channel(plan.output_limit);
    let tap = control.tap(plan.output_sink.clone());
    let readers = vec![
        tokio::spawn(drain(stdout, tap.clone(), StreamKind::Stdout)),
        tokio::spawn(drain(stderr, tap, StreamKind::Stderr)),
    ];
    if let (Some(stdin), sandbox_core::Stdin::Bytes(bytes)) = (stdin, &plan.stdin) {
        feed_stdin(stdin, bytes.clone());
    }

    let timeout = plan.timeout;
    let run = Supervised {
        backend,
        plan,
        launch,
        layer,
        cgroups,
        pgid,
        policy,
        child,
        exit: None,
        connections: Connections::default(),
        watcher,
        denial_log,
    };
    supervise(run, control, readers, started, timeout);
    Ok(handle)
}

struct Supervised {
    backend: &'static str,
    plan: Plan,
    launch: Launch,
    /// The layer over the workspace (review or discard), while the command runs.
    layer: Option<Layer>,
    cgroups: Option<Arc<RunCgroups>>,
    pgid: Option<Pid>,
    policy: sandbox_core::EffectivePolicy,
    child: spawn::Child,
    /// The launcher's status once it is reaped.
    exit: Option<std::process::ExitStatus>,
    /// The egress proxy's record, once it is finished in [`Job::stop`].
    connections: Connections,
    watcher: Option<super::notify::Watcher>,
    denial_log: super::notify::SharedLog,
}

#[async_trait]
impl Job for Supervised {
    /// The launcher's status; an error waiting for it counts as killed.
    type Exit = Option<std::process::ExitStatus>;

    async fn exited(&mut self) -> Self::Exit {
        self.child.wait().await.ok()
    }

    async fn stop(&mut self, end: &End<Self::Exit>) {
        // Without a cgroup, a subreaper waiter holds the tree: a SIGKILL to it would leave
        // its descendants to the host's init. Asked with SIGTERM, it kills every one of
        // them, reaps them and exits; only one that does not within the limit is killed.
        let subreaper = self.launch.tree_kill == Some(sandbox_core::TreeKill::Subreaper);
        if subreaper && self.cgroups.is_none() && !matches!(end, End::Exited(_)) {
            self.child.signal(libc::SIGTERM);
            if let Ok(s) = tokio::time::timeout(TEARDOWN_LIMIT, self.child.wait()).await {
                self.exit = s.ok();
            }
        }
        // The launcher itself by its pidfd (it may have left the group: bwrap's
        // `--new-session`), then its group, then the cgroup.
        self.child.start_kill();
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        if let Some(cg) = self.cgroups.clone() {
            // Once here without a wait (usually the cgroup is empty by now); only a tree
            // still dying takes a blocking thread to wait for its end.
            if !cg.kill() {
                let _ = tokio::task::spawn_blocking(move || cg.kill_all(TEARDOWN_LIMIT)).await;
            }
        }
        // The tree is dead (or dying, under SIGKILL); then nor may its proxy outlive the run.
        if let Some(e) = &self.launch.egress {
            self.connections = e.finish().await;
        }
        self.exit = match end {
            End::Exited(s) => *s,
            _ => self.child.wait().await.ok(),
        };
        self.wait_group_gone().await;
    }

    async fn finish(
        mut self,
        end: End<Self::Exit>,
        finished: Finished,
    ) -> Result<SandboxOutcome, SandboxError> {
        let oom = self.cgroups.as_ref().is_some_and(|c| c.oom_killed());
        // The backend's helper knows the command's own status; the launcher's may fold a
        // signal into an exit code. A helper that died before reporting under the OOM
        // killer was killed by it too.
        let reported = self
            .launch
            .exit_status_pipe
            .as_ref()
            .and_then(read_reported_status);
        let unreported = self.launch.exit_status_pipe.is_some() && reported.is_none();
        let status = match end {
            End::TimedOut => Status::TimedOut,
            End::Killed | End::Exited(None) => Status::Killed,
            End::Exited(Some(_)) if oom && unreported => Status::OutOfMemory,
            End::Exited(Some(_)) => decode(reported.or(self.exit), oom),
        };
        // The tree is dead: no call is waiting on the listener any more, and every call that
        // was answered was recorded before its answer. The watcher goes with the run, and
        // its listener is closed when `wait` returns.
        if let Some(w) = self.watcher.take() {
            w.finish().await;
        }
        // The proxy's refusals join the filter's: the proxy decided each one itself, so
        // each is a denial seen, not inferred.
        let denials = self
            .denial_log
            .lock()
            .map(|mut l| {
                if self.plan.report_denials {
                    l.record_connections(&self.connections);
                }
                l.denials().clone()
            })
            .unwrap_or_default();
        let files = match &self.layer {
            // The command's view is the overlay, which is gone with its namespace: read
            // through the layer.
            Some(l) if l.mechanism() == LayerMechanism::Overlay => self
                .plan
                .capture_files
                .iter()
                .filter_map(|n| Some((n.clone(), l.read_merged(n, self.plan.output_limit)?)))
                .collect(),
            _ => files::capture_files(
                &self.plan.workspace,
                &self.plan.capture_files,
                self.plan.output_limit,
            ),
        };
        let Supervised {
            backend,
            cgroups,
            launch,
            layer,
            plan,
            policy,
            connections,
            ..
        } = self;
        // The tree is dead: the layer holds exactly what the command left.
        let changes = match layer {
            Some(l) if plan.changes == Changes::Review => match crate::changes::change_set(l).await
            {
                Ok(set) => Some(set),
                Err(e) => {
                    release(cgroups, launch).await;
                    return Err(e);
                }
            },
            Some(discarded) => {
                // Discard: removing the layer walks its upper tree, off the async threads.
                let _ = tokio::task::spawn_blocking(move || drop(discarded)).await;
                None
            }
            None => None,
        };
        let outcome = SandboxOutcome::new(
            status,
            finished.stdout,
            finished.stderr,
            finished.wall_time,
            backend,
            files,
            policy,
        )
        .with_changes(changes)
        .with_connections(connections)
        .with_denials(denials);
        // Remove the cgroups and the launch's resources (temp dirs, the snapshot copy)
        // before reporting, so that `wait` returning means nothing is left behind.
        release(cgroups, launch).await;
        Ok(outcome)
    }
}

/// Remove the cgroups and the launch's resources (temp dirs, descriptors) off the async
/// threads: removing a large temp dir may take a while.
async fn release(cgroups: Option<Arc<RunCgroups>>, launch: Launch) {
    let _ = tokio::task::spawn_blocking(move || {
        drop(cgroups);
        drop(launch);
    })
    .await;
}

impl Supervised {
    /// SIGKILL is delivered, not waited for: a descendant that was killed may still be
    /// running its exit for a moment. Without a cgroup that waits for it, `wait` would
    /// return while it is still on the host, so wait until no member of the process group
    /// is alive. A zombie (dead, not yet reaped by whoever adopted it: some inits reap
    /// orphans only every second or so) holds nothing but its pid and counts as gone.
    /// Only signal 0 is sent here: once the group is empty its number may, in principle,
    /// be reused, and a new group must never be signalled.
    async fn wait_group_gone(&self) {
        let Some(pgid) = self.pgid else { return };
        let deadline = tokio::time::Instant::now() + TEARDOWN_LIMIT;
        let mut pause = std::time::Duration::from_micros(50);
        while killpg(pgid, None).is_ok() && tokio::time::Instant::now() < deadline {
            let live = tokio::task::spawn_blocking(move || group_has_live_member(pgid))
                .await
                .unwrap_or(true);
            if !live {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(5));
        }
    }
}

/// Whether a process of group `pgid` is alive (not a zombie), from `/proc/*/stat`. Errs on
/// the side of "alive" when `/proc` cannot be read.
fn group_has_live_member(pgid: Pid) -> bool {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return true;
    };
    for e in rd.flatten() {
        if !e
            .file_name()
            .as_encoded_bytes()
            .iter()
            .all(u8::is_ascii_digit)
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let (state, pgrp) = (f.next(), f.nth(1));
        if pgrp.and_then(|p| p.parse::<i32>().ok()) == Some(pgid.as_raw()) && state != Some("Z") {
            return true;
        }
    }
    false
}

/// The status the backend's helper reported, if it wrote exactly one. Called once every
/// writer is dead, so a non-blocking read sees all there will ever be.
fn read_reported_status(fd: &std::os::fd::OwnedFd) -> Option<std::process::ExitStatus> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).ok()?;
    let mut buf = [0u8; 8];
    let mut len = 0;
    while len < buf.len() {
        match nix::unistd::read(fd, &mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    // Anything but exactly one report is not trusted.
    let raw: [u8; 4] = buf[..len].try_into().ok()?;
    Some(std::process::ExitStatus::from_raw(i32::from_ne_bytes(raw)))
}

fn decode(exit: Option<std::process::ExitStatus>, oom: bool) -> Status {
    match exit {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => Status::Exited { code },
            (None, Some(sig)) if oom && sig == libc::SIGKILL => Status::OutOfMemory,
            (None, Some(signal)) => Status::Signaled { signal },
            (None, None) => Status::Killed,
        },
        None => Status::Killed,
    }
}
