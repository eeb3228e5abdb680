//! The machinery every process-based backend shares: spawn with the scrubbed environment
//! and the limits, capture output, enforce the timeout, kill the whole tree, decode the
//! exit status.
//!
//! A backend implements [`Launcher`]: it turns a [`Plan`] into a [`Launch`] (which program,
//! which argv, which steps between fork and exec). [`ProcessSandbox`] does everything else,
//! identically for every backend.
//!
//! # Process lifetime
//!
//! The command starts in a new process group, in cgroups of its own where the host allows
//! (see [`cgroup`]: born in the cgroup v2 by `clone3`, joining v1 through `tasks`, so no
//! start waits for the cgroup core's global lock), with `PR_SET_PDEATHSIG` so it dies with
//! the host thread that spawned it, and is waited on and killed through a pidfd. When it ends, times out or is killed, the whole tree is killed: the cgroup (which
//! reaches descendants that called `setsid`) and the process group; then the pipes are
//! drained to their end and the cgroups removed. `wait` returns only after all of that.
//! A launch whose tree kill is [`TreeKill::Subreaper`] (core's waiter as a child subreaper)
//! is asked first with `SIGTERM` where no cgroup holds the tree: a SIGKILL would leave the
//! waiter's descendants to the host's init.

pub mod cgroup;
mod child;
mod mediate;
mod notify;
mod spawn;
pub(crate) mod supervise;
#[cfg(feature = "waiter")]
pub mod waiter;

use std::any::Any;
use std::ffi::OsString;
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

pub use crate::fs::{files, tree};
pub use crate::sys::{become_ids, fork_raw, raw_write_file, PreExec};
pub use mediate::{Admissions, Mediation};

use sandbox_core::egress::EgressRun;
use sandbox_core::outcome::{LimitMechanism, TreeKill};
use sandbox_core::{Capability, Plan, Preflight, SandboxError};

/// What to spawn for one run: the result of a backend's pure policy function plus the
/// resources (descriptors, temp dirs) it needs alive while the command runs.
#[non_exhaustive]
pub struct Launch {
    /// The program to execute, absolute.
    pub program: PathBuf,
    /// `argv[0]` as the program sees it.
    pub arg0: OsString,
    /// The arguments after `argv[0]`.
    pub args: Vec<OsString>,
    /// The complete environment of the spawned program.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory of the spawned program.
    pub cwd: PathBuf,
    /// Descriptors handed to the spawned program at their current numbers (bwrap reads its
    /// seccomp program from one). Nothing else but stdio crosses.
    pub pass_fds: Vec<OwnedFd>,
    /// Run the program as this uid and gid (with no supplementary groups).
    pub credentials: Option<(u32, u32)>,
    /// Backend steps between fork and exec, after ours (cgroups, rlimits, descriptors,
    /// credentials). Must be async-signal-safe.
    pub pre_exec: Vec<Box<dyn PreExec>>,
    /// How the backend itself guarantees the tree dies (a pid namespace, or a process group
    /// that seccomp keeps everything in). Core adds a cgroup kill where it can; a run with
    /// neither is refused.
    pub tree_kill: Option<TreeKill>,
    /// Kept alive until the run is over, then dropped (temp dirs, descriptors).
    pub keep_alive: Vec<Box<dyn Any + Send + Sync>>,
    /// What the backend enforced, for the outcome's effective policy.
    pub enforced: sandbox_core::Record,
    /// The read end of a pipe on which the backend's own helper inside the sandbox writes
    /// the command's raw `wait` status (4 bytes, native endian) once the command has ended.
    /// For launchers such as bwrap that fold "killed by signal N" into exit code 128+N:
    /// this keeps the two apart. No report (the helper was itself killed) means the
    /// launcher's own status is used.
    pub exit_status_pipe: Option<OwnedFd>,
    /// The read end of a pipe on which the backend's own helper inside the sandbox writes
    /// one byte once the sandbox is set up, just before it starts the command (or the
    /// launcher itself, once the sandbox exists: runsc's pid file, a FIFO). For
    /// launchers such as bwrap that exit with a status of their own when they cannot set
    /// the sandbox up: a launcher that ends without that byte ran nothing, and `run`
    /// returns [`SandboxError::Unavailable`] with what it printed instead of an outcome
    /// that would look like the command's. `run` returns once the byte is there.
    pub ready_pipe: Option<OwnedFd>,
    /// The backend sets `RLIMIT_NPROC` itself, inside its own user namespace, where it
    /// counts the sandbox's processes alone (on the launcher it would count every process
    /// of the user on the host, and refuse the launcher's own namespace set-up). Core then
    /// leaves it off the launcher; the limit is still recorded.
    pub process_rlimit_inside: bool,
    /// The backend runs the command under a kernel of its own (gVisor's Sentry): the
    /// command's processes, descriptors and address space are not the launcher's, so the
    /// backend sets the process cap, the open-files limit and (where no cgroup can hold
    /// it) the memory limit inside, in its own spec. On the launcher they would bind the
    /// runtime instead (its threads, its descriptors, its reserved address space) and
    /// break it. Core records them as rlimits and leaves them off the launcher and its
    /// cgroup; the CPU-time limit and a cgroup memory limit still bind the launcher's
    /// whole tree, which is where the command's time and memory are spent.
    pub limits_inside: bool,
    /// Network mode `proxy`, host ports, published ports: the run's proxy, started by the
    /// pipeline's door stage. Core ends it once the command's tree is dead and puts its
    /// record in the outcome.
    pub egress: Option<Box<dyn EgressRun>>,
    /// The host's end of a socket pair on which a step of the child sends the listener of
    /// a notifying seccomp filter ([`crate::seccomp::InstallNotifying`]). Core then serves
    /// it for the run: each denied call is recorded in the outcome's denials and answered
    /// `EPERM`.
    pub seccomp_listener: Option<OwnedFd>,
    /// The run's mediated door (network `proxy` without a namespace, set by the pipeline's
    /// door stage): the supervisor serving [`Self::seccomp_listener`] answers each notified
    /// `connect` by it. Without it a notified `connect` is refused like a denied call.
    pub mediation: Option<Arc<Mediation>>,
    /// Namespaces the spawned process is born in, by core's `clone3`, rather than made by a
    /// step after it (see [`BornIn`]).
    pub born_in: BornIn,
    /// A root host's command handed to an unprivileged id, over an overlay layer: the
    /// layers idmapped as its other trees are, for the pipeline's overlay mount
    /// ([`crate::handover::Handover::layer`]).
    pub layer_trees: Option<crate::handover::LayerTrees>,
}

/// Namespaces core's `clone3` makes the spawned process in.
///
/// Why at birth: `unshare(CLONE_NEWPID)` puts only the caller's *children* in the new pid
/// namespace, so a step could make the namespace's init only by forking, and a fork of a
/// host that holds a few hundred MiB copies its page tables and then faults on every page
/// either side writes. Born in the namespace, the spawned process is its init itself and
/// shares the host's memory until its exec, as every other spawn does. A pid namespace
/// that a host without root makes must belong to a user namespace of the run's (mounting
/// its `/proc` needs `CAP_SYS_ADMIN` there), so that one is made at birth too; the step
/// that writes its id maps then runs first among the backend's.
///
/// Where `clone3` is refused, the spawn fails with the cause: the fork it falls back to
/// otherwise cannot be born in a namespace, and nothing runs with less than was asked.
/// Core's own steps that need the host's privileges (credentials) are refused with a new
/// user namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BornIn {
    /// `CLONE_NEWPID`: the spawned process is the namespace's init (pid 1).
    pub pid: bool,
    /// `CLONE_NEWUSER`: in a new user namespace that maps the host's own uid and gid to
    /// themselves (core writes the maps before any step runs; a step makes no user
    /// namespace of its own then, core's overlay mount included).
    pub user: bool,
}

impl BornIn {
    /// Whether the launch is born in any namespace: then only core's `clone3` makes it
    /// without copying its host (a fork and `enter_by_fork` otherwise).
    pub fn any(self) -> bool {
        self.pid || self.user
    }

    /// The `clone3` (and `unshare`) flags.
    pub(crate) fn flags(self) -> u64 {
        let mut f = 0;
        if self.pid {
            f |= libc::CLONE_NEWPID as u64;
        }
        if self.user {
            f |= libc::CLONE_NEWUSER as u64;
        }
        f
    }

    /// The uid and gid map lines of the user namespace a process is born in: this
    /// process's own ids mapped to themselves. Read here, in the host, where the ids are
    /// still the host's.
    pub fn identity_maps() -> (Vec<u8>, Vec<u8>) {
        let (u, g) = (nix::unistd::getuid(), nix::unistd::getgid());
        (
            format!("{u} {u} 1").into_bytes(),
            format!("{g} {g} 1").into_bytes(),
        )
    }

    /// For a process that core's `clone3` did not make (a host probe, a bench's baseline):
    /// the same birth by `unshare` and the next child, as `unshare --fork` does. Returns
    /// `Ok` only in that child, born in the namespaces with `maps` (from
    /// [`BornIn::identity_maps`], made before the fork) written as core writes them; the
    /// caller waits for it and `_exit`s with its exit code (255 if it did not exit). An
    /// error returns in the caller, before any child exists.
    ///
    /// # Safety
    ///
    /// Between fork and exec (raw calls only, on data made before the fork), in a process
    /// that ends when its child does.
    pub unsafe fn enter_by_fork(self, maps: &(Vec<u8>, Vec<u8>)) -> std::io::Result<()> {
        // SAFETY: raw system calls on data made before the fork; the caller's contract.
        unsafe {
            if libc::unshare(self.flags() as libc::c_int) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if self.user {
                // `setgroups` must be denied before an unprivileged gid map is accepted.
                raw_write_file(c"/proc/self/setgroups", b"deny")?;
                raw_write_file(c"/proc/self/uid_map", &maps.0)?;
                raw_write_file(c"/proc/self/gid_map", &maps.1)?;
            }
            match fork_raw()? {
                0 => Ok(()),
                child => {
                    let mut st = 0;
                    if libc::waitpid(child, &mut st, 0) != child || !libc::WIFEXITED(st) {
                        libc::_exit(255);
                    }
                    libc::_exit(libc::WEXITSTATUS(st))
                }
            }
        }
    }
}

impl fmt::Debug for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Launch")
            .field("program", &self.program)
            .field("arg0", &self.arg0)
            .field("args", &self.args)
            .field("env", &self.env)
            .field("cwd", &self.cwd)
            .field("pass_fds", &self.pass_fds)
            .field("credentials", &self.credentials)
            .field("pre_exec", &self.pre_exec.len())
            .field("tree_kill", &self.tree_kill)
            .field("enforced", &self.enforced)
            .field("exit_status_pipe", &self.exit_status_pipe)
            .field("ready_pipe", &self.ready_pipe)
            .field("process_rlimit_inside", &self.process_rlimit_inside)
            .field("limits_inside", &self.limits_inside)
            .field("egress", &self.egress)
            .field("seccomp_listener", &self.seccomp_listener)
            .field("mediation", &self.mediation)
            .field("born_in", &self.born_in)
            .finish()
    }
}

impl Launch {
    /// The steps between fork and exec, by name, in the order the child runs them.
    pub fn step_names(&self) -> Vec<&'static str> {
        self.pre_exec.iter().map(|s| s.name()).collect()
    }

    /// Whether something on the host must stay alive while the command runs (a temp dir
    /// such as an OCI bundle, the run's proxy). A process that becomes the command by exec,
    /// as the bench's minimal launcher does, cannot keep them, so it cannot stand for such a
    /// launch.
    pub fn needs_host_alive(&self) -> bool {
        !self.keep_alive.is_empty() || self.egress.is_some()
    }

    /// Run the plan's program itself, with the plan's argv, environment and cwd.
    pub fn direct(plan: &Plan) -> Self {
        Self {
            program: plan.program.clone(),
            arg0: plan.argv[0].clone(),
            args: plan.argv[1..].to_vec(),
            env: plan.env.clone(),
            cwd: plan.cwd.clone(),
            pass_fds: Vec::new(),
            credentials: None,
            pre_exec: Vec::new(),
            tree_kill: None,
            keep_alive: Vec::new(),
            enforced: sandbox_core::Record::new(),
            exit_status_pipe: None,
            ready_pipe: None,
            process_rlimit_inside: false,
            limits_inside: false,
            egress: None,
            seccomp_listener: None,
            mediation: None,
            born_in: BornIn::default(),
            layer_trees: None,
        }
    }

    /// Run `program` (a launcher such as bwrap) with `args`, in the plan's cwd, with `env`.
    pub fn wrapped(
        program: PathBuf,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
        plan: &Plan,
    ) -> Self {
        Self {
            arg0: program.as_os_str().to_owned(),
            program,
            args,
            env,
            ..Self::direct(plan)
        }
    }
}

/// What a process-based backend implements: its name, what it can enforce, how to check
/// the host, and the pure turn of a plan into a launch.
#[async_trait]
pub trait Launcher: Send + Sync + fmt::Debug + 'static {
    /// The backend's name.
    fn name(&self) -> &'static str;
    /// What it can enforce here.
    fn capability(&self) -> Capability;
    /// See [`Sandbox::preflight`].
    async fn preflight(&self) -> Result<Preflight, SandboxError>;
    /// Turn a checked plan into what to spawn. Called once per run, before anything runs;
    /// an error here starts nothing. `door` is the sandbox's end of the run's door (the
    /// egress proxy, host ports, published ports), made by the pipeline's door stage when
    /// the plan asks for one: the launch makes its listeners inside the command's network
    /// namespace and sends them on it before the command runs ([`DoorEnd::send_step`], or
    /// the waiter). A launcher whose capability claims none of those never gets one.
    fn prepare(&self, plan: &Plan, door: Option<DoorEnd>) -> Result<Launch, SandboxError>;
}

/// The sandbox's end of a run's door, as the pipeline hands it to [`Launcher::prepare`].
#[derive(Debug)]
pub struct DoorEnd {
    /// The socket the listeners are sent on (the host holds the other end).
    pub sock: OwnedFd,
    /// What to make, in the order the host expects them: a listener on `127.0.0.1:PORT`,
    /// or for `0` the network namespace itself (for published ports).
    pub ports: Vec<u16>,
}

impl DoorEnd {
    /// The step that makes and sends the listeners between fork and exec, for a launch
    /// whose child makes the network namespace itself: put it right after the namespaces
    /// are made and before anything restricts sockets, and keep [`sock`](Self::sock) alive
    /// in the launch.
    pub fn send_step(&self) -> crate::sys::door::SendListener {
        crate::sys::door::SendListener {
            sock: std::os::fd::AsRawFd::as_raw_fd(&self.sock),
            ports: self.ports.clone(),
        }
    }
}

/// How the host enforces limits and tree kill for process-based backends: the part of a
/// capability that core decides.
#[derive(Clone, Copy, Debug)]
pub struct HostSupport {
    /// Tree kill by a cgroup, if one can be made.
    pub cgroup_kill: Option<TreeKill>,
    /// How a memory limit is enforced (a cgroup, else `RLIMIT_AS`).
    pub memory: LimitMechanism,
    /// How a process cap is enforced: a cgroup; else `RLIMIT_NPROC`, which binds only a
    /// command that does not run as root.
    pub processes: Option<LimitMechanism>,
    /// Whether the host process runs as root.
    pub is_root: bool,
}

impl HostSupport {
    /// This host, for a command that runs as root exactly when the host does (`drops_uid`
    /// false) or as an unprivileged uid (`drops_uid` true).
    pub fn detect(drops_uid: bool) -> Self {
        let cg = cgroup::CgroupSupport::get();
        let is_root = nix::unistd::geteuid().is_root();
        let command_is_root = is_root && !drops_uid;
        Self {
            cgroup_kill: cg.tree_kill(),
            memory: cg.memory().unwrap_or(LimitMechanism::Rlimit),
            processes: cg
                .pids()
                .or((!command_is_root).then_some(LimitMechanism::Rlimit)),
            is_root,
        }
    }

    /// Fill in the limit fields of `cap` from this host.
    pub fn apply(&self, cap: &mut Capability) {
        cap.memory_limit = true;
        cap.cpu_limit = true;
        cap.open_files_limit = true;
        cap.process_limit = self.processes.is_some();
        cap.oom_status = matches!(
            self.memory,
            LimitMechanism::CgroupV1 | LimitMechanism::CgroupV2
        );
        cap.snapshot = true;
        cap.sparse_snapshot = true;
        // Overlay is tried first, and only when a run asks for a layer: once per
        // filesystem of a workspace, a forked child mounts one there (`Layer::prepare`);
        // where that is refused the run takes a copy and its outcome says so. No probe
        // here: a run that asks for no layer (nearly all) should not pay one, and the lane
        // check needs only that some layer can be made, which the copy guarantees.
        cap.change_layer = Some(sandbox_core::LayerMechanism::Overlay);
    }
}
