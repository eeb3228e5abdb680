//! Core's own spawn for process backends: the child is born into the run's cgroup v2
//! (`clone3` with `CLONE_INTO_CGROUP`), with a pidfd that core waits on and kills through,
//! and it shares the host's memory until its exec (`CLONE_VM | CLONE_VFORK`, as glibc's
//! `posix_spawn`) unless a backend's step keeps the spawned process as a waiter.
//!
//! Why share the memory: a fork copies the page tables of the whole host and then both
//! sides fault on every page either one writes. For a host holding a few hundred MiB that
//! costs more than the sandboxed start itself (about 10 ms for 200 MiB on the development
//! machine, against 0.1 ms for a small process), and an agent is such a host. Sharing costs
//! the same whatever the host's size; the price is the child's rule (`sys::clone3_vm`):
//! it writes nothing but its own stack.
//!
//! Why not `std::process::Command`: moving a process into a cgroup after the fork (a write
//! to `cgroup.procs`) takes the cgroup core's threadgroup lock for writing, which waits for
//! an RCU grace period when no writer ran recently: about 10 ms on every run that follows
//! a quiet spell (`bench/PROFILE.md` §1). A child born in the cgroup never moves in v2;
//! in v1 it joins through `tasks` (see [`super::cgroup::RunCgroups::v1_joins`]).
//!
//! What std did for us still holds: stdio (stdin null or a pipe, stdout and stderr
//! pipes), the exact environment, `argv[0]`, the working directory, a new process group,
//! `SIGPIPE` back to its default, our [`ChildSetup`] and the backend's steps, the
//! descriptors handed over and no other (everything is close-on-exec), and an exec failure
//! reported through a close-on-exec pipe as the same `io::Error` (errno) std gave.
//!
//! Where `clone3` is refused (`ENOSYS` on kernels before 5.3 or under a seccomp profile
//! that hides it, `EPERM` from one that denies it, `EINVAL` or `E2BIG` before 5.7, any
//! error about the cgroup descriptor), the spawn falls back to std's fork with the child
//! writing itself into every cgroup as before. That is never weaker: a child that cannot
//! join its cgroups fails the spawn and never runs.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest};

use super::child::{exec_child, ChildSetup, Exec};
use super::Launch;
use crate::sys;

/// How to make the child. Tests force [`How::Fork`] to prove the fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    /// `clone3`, falling back to [`How::Fork`] where it is refused.
    Clone3,
    /// std's fork; the child writes itself into every cgroup.
    #[cfg_attr(not(test), allow(dead_code))]
    Fork,
}

#[cfg(test)]
tokio::task_local! {
    /// Set by a test around a run to force [`How::Fork`].
    pub(crate) static FORCE_FORK: bool;
}

/// The default for this task: [`How::Clone3`] unless a test forced the fork.
pub(crate) fn how() -> How {
    #[cfg(test)]
    if FORCE_FORK.try_with(|f| *f).unwrap_or(false) {
        return How::Fork;
    }
    How::Clone3
}

/// A started child and the host's ends of its stdio.
pub(crate) struct Spawned {
    pub child: Child,
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    /// Why the fallback ran, for the effective policy's record.
    pub fallback: Option<String>,
}

/// Spawn `launch` with `setup` in the child; stdin a pipe when `stdin_piped`, else
/// `/dev/null`; born into the cgroup v2 directory `v2_cgroup` where one is given.
pub(crate) fn spawn(
    launch: &Launch,
    stdin_piped: bool,
    mut setup: ChildSetup,
    v2_cgroup: Option<&Path>,
    how: How,
) -> io::Result<Spawned> {
    let exec = Exec::new(
        &launch.program,
        &launch.arg0,
        &launch.args,
        &launch.env,
        &launch.cwd,
    )?;
    let born = launch.born_in.flags();
    // Held until the clone has returned: the child polls it (see `ChildSetup::host_pidfd`).
    let host_pidfd = match launch.born_in.pid {
        true => Some(rustix::process::pidfd_open(
            rustix::process::getpid(),
            rustix::process::PidfdFlags::empty(),
        )?),
        false => None,
    };
    setup.host_pidfd = host_pidfd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    let fallback = match how {
        How::Fork if born != 0 => return Err(not_born(&launch.born_in, "forced by a test")),
        How::Fork => "forced by a test".to_string(),
        How::Clone3 => {
            let cgroup = v2_cgroup
                .map(|d| {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECTORY)
                        .open(d)
                        .map(OwnedFd::from)
                })
                .transpose()?;
            setup.born_in_v2 = cgroup.is_some();
            match cloned(&exec, &setup, stdin_piped, cgroup.as_ref(), born)? {
                Ok(s) => return Ok(s),
                Err(refused) if born != 0 => {
                    return Err(not_born(&launch.born_in, &refused.to_string()))
                }
                Err(refused) => format!("clone3 was refused: {refused}"),
            }
        }
    };
    setup.born_in_v2 = false;
    drop(exec);
    let mut s = forked(setup, launch, stdin_piped)?;
    s.fallback = Some(fallback);
    Ok(s)
}

/// The spawn's error where a launch must be born in namespaces and `clone3` cannot do it:
/// std's fork, the fallback otherwise, cannot.
fn not_born(born: &super::BornIn, why: &str) -> io::Error {
    let what = match (born.pid, born.user) {
        (true, true) => "a pid namespace and a user namespace",
        (true, false) => "a pid namespace",
        _ => "a user namespace",
    };
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "the command must be born in {what} of its own, which only clone3 can do, and \
             clone3 was refused ({why}); nothing ran. Remedy: a kernel of 5.7 or later, with \
             clone3 allowed by any seccomp profile the host itself runs under, or a lane \
             without process isolation (`--lane fast`)"
        ),
    )
}

/// A pipe whose child end is never 0, 1 or 2 (so placing the stdio cannot overwrite
/// another of them when the host runs with a standard descriptor closed).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// The `clone3` spawn. The outer error fails the spawn; the inner one is a refusal of
/// `clone3` itself, after which nothing was started and the caller falls back.
fn cloned(
    exec: &Exec,
    setup: &ChildSetup,
    stdin_piped: bool,
    cgroup: Option<&OwnedFd>,
    born: u64,
) -> io::Result<Result<Spawned, io::Error>> {
    // Every descriptor is close-on-exec: the child places its three by `dup2`, and any
    // other spawn's copies vanish at their exec.
    let (stdin_child, stdin) = if stdin_piped {
        let (r, w) = pipe()?;
        let w: Box<dyn AsyncWrite + Send + Unpin> =
            Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(w)?);
        (r, Some(w))
    } else {
        let null = std::fs::File::open("/dev/null")?;
        (above_stdio(null.into())?, None)
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let stdout: Box<dyn AsyncRead + Send + Unpin> =
        Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(out_r)?);
    let stderr: Box<dyn AsyncRead + Send + Unpin> =
        Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(err_r)?);
    let (report_r, report_w) = pipe()?;
    let stdio = [
        stdin_child.as_raw_fd(),
        out_w.as_raw_fd(),
        err_w.as_raw_fd(),
    ];
    let report = report_w.as_raw_fd();

    let (pid, pidfd) =
        match clone_child(stdio, exec, setup, report, cgroup.map(|c| c.as_fd()), born) {
            Ok(child) => child,
            Err(e) if refused(&e) => return Ok(Err(e)),
            Err(e) => return Err(e),
        };
    // The child's ends are its own now; the report pipe reads end-of-file once every
    // copy of its write end is gone, at the child's exec or exit.
    drop((stdin_child, out_w, err_w, report_w));
    // SAFETY: an OwnedFd, owned by the AsyncFd until it drops or `into_inner`: open and
    // the same descriptor throughout.
    let pidfd = match unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            // No reactor to wait with: the child must not run unwatched.
            let (pidfd, e) = e.into_parts();
            let _ = sys::pidfd_kill(pidfd.as_fd());
            sys::pidfd_wait_exit(pidfd.as_fd(), None);
            let _ = sys::pidfd_try_reap(pidfd.as_fd());
            return Err(e);
        }
    };
    let mut child = PidfdChild {
        pid,
        pidfd: Some(pidfd),
        status: None,
    };
    if let Some(errno) = read_report(&report_r)? {
        // The child exits right after its report; reap it before answering, as std does.
        child.reap_blocking();
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Ok(Spawned {
        child: Child(Inner::Pidfd(child)),
        stdin,
        stdout,
        stderr,
        fallback: None,
    }))
}

/// What a vfork-like child reads, on the stack of the thread that spawns it.
#[cfg(target_arch = "x86_64")]
struct VmChild<'a> {
    stdio: [libc::c_int; 3],
    exec: &'a Exec,
    setup: &'a ChildSetup,
    report: libc::c_int,
}

/// The first Rust code of a vfork-like child (see [`sys::clone3_vm`]).
///
/// # Safety
///
/// Only as `clone3_vm`'s entry, with `arg` a [`VmChild`] that outlives the child's time in
/// the host's memory.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn vm_child(arg: *mut libc::c_void) -> ! {
    // SAFETY: `arg` is the `VmChild` on the stack of the thread `clone3_vm` holds until
    // this process execs or exits; it is only read.
    let c = unsafe { &*arg.cast::<VmChild<'_>>() };
    // SAFETY: `exec_child` writes only its own stack and ends in `execve` or `_exit`; the
    // backend's steps promise the same (`PreExec`'s contract).
    unsafe { exec_child(c.stdio, c.exec, c.setup, c.report) }
}

/// Make the child: sharing the host's memory until its exec (nothing copied, so the cost
/// does not grow with the host's size) where the architecture allows, else a copy of it.
/// A refusal of the shared kind falls back to the copy before anything else.
fn clone_child(
    stdio: [libc::c_int; 3],
    exec: &Exec,
    setup: &ChildSetup,
    report: libc::c_int,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    born: u64,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    #[cfg(target_arch = "x86_64")]
    {
        let stack = sys::ChildStack::new()?;
        let mut arg = VmChild {
            stdio,
            exec,
            setup,
            report,
        };
        // SAFETY: `vm_child` keeps to `clone3_vm`'s contract (its doc), and `arg` lives on
        // this frame, which stays put while the child runs in this memory.
        let r = unsafe {
            sys::clone3_vm(
                cgroup,
                born,
                &stack,
                vm_child,
                std::ptr::addr_of_mut!(arg).cast(),
            )
        };
        match r {
            Err(e) if refused(&e) => {}
            r => return r,
        }
    }
    // SAFETY: the child runs `exec_child` only, which keeps to `sys`'s rule on data made
    // above, and never returns.
    match unsafe { sys::clone3(cgroup, born) } {
        Ok(sys::Cloned::Child) => unsafe { exec_child(stdio, exec, setup, report) },
        Ok(sys::Cloned::Parent { pid, pidfd }) => Ok((pid, pidfd)),
        Err(e) => Err(e),
    }
}

/// Whether `clone3` failing with `e` means "not here" rather than "cannot now": resource
/// exhaustion (`EAGAIN`: a process limit; `ENOMEM`) would fail a fork as well.
fn refused(e: &io::Error) -> bool {
    !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOMEM))
}

/// Read the exec-error pipe to its end: `None` when the child exec'd, its errno when it
/// reported one.
fn read_report(fd: &OwnedFd) -> io::Result<Option<i32>> {
    let mut buf = [0u8; 8];
    let mut len = 0;
    loop {
        match nix::unistd::read(fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len == buf.len() {
                    break;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    match len {
        0 => Ok(None),
        8 if buf[4..] == sys::EXEC_ERROR_FOOTER => {
            Ok(Some(i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]])))
        }
        _ => Err(io::Error::other(
            "the child's report of a failed exec was cut short",
        )),
    }
}

/// The fallback: std's fork (tokio's `Command` on top, for the wait), with the child
/// writing itself into every cgroup, as before `clone3`.
fn forked(setup: ChildSetup, launch: &Launch, stdin_piped: bool) -> io::Result<Spawned> {
    let mut cmd = std::process::Command::new(&launch.program);
    {
        use std::os::unix::process::CommandExt;
        cmd.arg0(&launch.arg0)
            .args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&launch.cwd)
            .process_group(0);
        // SAFETY: `ChildSetup::run` makes only async-signal-safe system calls on data
        // prepared before the fork (see `child.rs`).
        unsafe {
            cmd.pre_exec(move || setup.run());
        }
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(if stdin_piped {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("the spawned child has no output pipes"));
    };
    let stdin = child
        .stdin
        .take()
        .map(|w| Box::new(w) as Box<dyn AsyncWrite + Send + Unpin>);
    Ok(Spawned {
        child: Child(Inner::Forked(child)),
        stdin,
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        fallback: None,
    })
}

/// A spawned child: waited on and killed through its pidfd (or, after the fallback,
/// through tokio's child). Dropped before it was reaped, it is killed and reaped.
pub(crate) struct Child(Inner);

enum Inner {
    Pidfd(PidfdChild),
    Forked(tokio::process::Child),
}

impl Child {
    /// The child's pid (its process group's id too).
    pub fn id(&self) -> Option<u32> {
        match &self.0 {
            Inner::Pidfd(c) => Some(c.pid as u32),
            Inner::Forked(c) => c.id(),
        }
    }

    /// Wait for the child's end and reap it. Cancel-safe: a status reaped is kept.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.0 {
            Inner::Pidfd(c) => c.wait().await,
            Inner::Forked(c) => c.wait().await,
        }
    }

    /// `signal` to the child itself (never to a process that reused its pid), if it has
    /// not been reaped yet.
    pub fn signal(&mut self, signal: libc::c_int) {
        match &mut self.0 {
            Inner::Pidfd(c) => {
                if let Some(fd) = &c.pidfd {
                    let _ = sys::pidfd_signal(fd.get_ref().as_fd(), signal);
                }
            }
            Inner::Forked(c) => {
                if let Some(pid) = c.id() {
                    // SAFETY: a signal to our own unreaped child, whose pid is still ours.
                    unsafe { libc::kill(pid as libc::pid_t, signal) };
                }
            }
        }
    }

    /// `SIGKILL` to the child itself (never to a process that reused its pid).
    pub fn start_kill(&mut self) {
        match &mut self.0 {
            Inner::Pidfd(c) => {
                if let Some(fd) = &c.pidfd {
                    let _ = sys::pidfd_kill(fd.get_ref().as_fd());
                }
            }
            Inner::Forked(c) => {
                let _ = c.start_kill();
            }
        }
    }
}

struct PidfdChild {
    pid: libc::pid_t,
    /// Until the child is reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl PidfdChild {
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.status {
                return Ok(s);
            }
            let Some(fd) = &self.pidfd else {
                return Err(io::Error::other("the child's pidfd is gone"));
            };
            // A pidfd turns readable when its process ends.
            let mut ready = fd.readable().await?;
            match sys::pidfd_try_reap(fd.get_ref().as_fd())? {
                Some(raw) => {
                    drop(ready);
                    self.status = Some(ExitStatus::from_raw(raw));
                    self.pidfd = None;
                }
                None => ready.clear_ready(),
            }
        }
    }

    /// After a reported exec failure: the child is exiting; wait for it, bounded, and
    /// kill it if it lingers.
    fn reap_blocking(&mut self) {
        let Some(fd) = self.pidfd.take() else { return };
        let fd = fd.into_inner();
        if !sys::pidfd_wait_exit(fd.as_fd(), Some(Duration::from_secs(5))) {
            let _ = sys::pidfd_kill(fd.as_fd());
            sys::pidfd_wait_exit(fd.as_fd(), None);
        }
        if let Ok(Some(raw)) = sys::pidfd_try_reap(fd.as_fd()) {
            self.status = Some(ExitStatus::from_raw(raw));
        }
    }
}

impl Drop for PidfdChild {
    /// The backstop when the run is dropped before its end was waited for: kill and reap,
    /// so neither a process nor a zombie nor the pidfd is left. A killed process is gone
    /// within microseconds unless it sleeps uninterruptibly (a hung filesystem); such a
    /// one is reaped from a thread of its own rather than holding this one.
    fn drop(&mut self) {
        let Some(fd) = self.pidfd.take() else { return };
        let fd = fd.into_inner();
        let _ = sys::pidfd_kill(fd.as_fd());
        if sys::pidfd_wait_exit(fd.as_fd(), Some(Duration::from_millis(100))) {
            let _ = sys::pidfd_try_reap(fd.as_fd());
            return;
        }
        let _ = std::thread::Builder::new()
            .name("sandbox-reaper".into())
            .spawn(move || {
                sys::pidfd_wait_exit(fd.as_fd(), None);
                let _ = sys::pidfd_try_reap(fd.as_fd());
            });
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use async_trait::async_trait;

    use super::*;
    use crate::pipeline::ProcessSandbox;
    use crate::process::cgroup::CgroupSupport;
    use crate::process::{DoorEnd, HostSupport, Launcher};
    use sandbox_core::record::Limits;
    use sandbox_core::Enforced;
    use sandbox_core::{
        Capability, Enforcement, Lane, NetworkMode, Plan, Preflight, Sandbox, SandboxError,
        SandboxOpts,
    };

    /// The plan's program itself, or `program` in its place (to make a spawn fail after
    /// the plan accepted the options).
    #[derive(Debug, Default)]
    struct Direct {
        program: Option<PathBuf>,
        /// The namespaces the launch is born in.
        born_in: crate::process::BornIn,
        /// A FIFO whose reader, opened for reading and writing (as gVisor's pid file is),
        /// is the launch's ready pipe.
        ready_fifo: Option<PathBuf>,
    }

    #[async_trait]
    impl Launcher for Direct {
        fn name(&self) -> &'static str {
            "spawn-test"
        }
        fn capability(&self) -> Capability {
            let host = HostSupport::detect(false);
            let mut cap = Capability {
                network_full: Enforcement::Exact,
                tree_kill: host.cgroup_kill.is_some(),
                signal_status: true,
                host_programs: true,
                full_network_is_host: true,
                ..Capability::default()
            };
            host.apply(&mut cap);
            cap
        }
        async fn preflight(&self) -> Result<Preflight, SandboxError> {
            Ok(Preflight::new("spawn-test", None, Vec::new()))
        }
        fn prepare(&self, plan: &Plan, _door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
            let mut l = Launch::direct(plan);
            if let Some(p) = &self.program {
                l.program = p.clone();
            }
            l.born_in = self.born_in;
            if let Some(fifo) = &self.ready_fifo {
                let fd = nix::fcntl::open(
                    fifo,
                    nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )
                .map_err(|e| SandboxError::io("opening the test's ready FIFO", e.into()))?;
                l.ready_pipe = Some(fd);
            }
            Ok(l)
        }
    }

    /// [`Direct`] with one step between fork and exec, made by the function.
    struct Stepped<F>(F);

    impl<F> std::fmt::Debug for Stepped<F> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Stepped")
        }
    }

    #[async_trait]
    impl<F: Fn() -> Box<dyn PreExec> + Send + Sync + 'static> Launcher for Stepped<F> {
        fn name(&self) -> &'static str {
            "spawn-test"
        }
        fn capability(&self) -> Capability {
            Direct::default().capability()
        }
        async fn preflight(&self) -> Result<Preflight, SandboxError> {
            Ok(Preflight::new("spawn-test", None, Vec::new()))
        }
        fn prepare(&self, plan: &Plan, _door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
            let mut l = Launch::direct(plan);
            l.pre_exec.push((self.0)());
            Ok(l)
        }
    }

    fn opts(ws: &Path, argv: &[&str]) -> SandboxOpts {
        let mut o = SandboxOpts::new(ws, argv.iter().copied());
        o.lane = Lane::Trusted;
        o.network = NetworkMode::Full;
        o
    }

    /// Run `fut` with the spawn forced onto the fork path when `fork`.
    async fn with<F: std::future::Future>(fork: bool, fut: F) -> F::Output {
        FORCE_FORK.scope(fork, fut).await
    }

    /// Whether this kernel has `clone3` for us (a call with a zero size is `EINVAL` where
    /// it exists, `ENOSYS` where it does not or a seccomp profile hides it).
    fn clone3_here() -> bool {
        // SAFETY: a null pointer with size 0 is rejected before anything is read.
        let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
        r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
    }

    /// The lines of a `/proc/PID/cgroup` file that name v2 (`0::`), `pids` or `memory`:
    /// (hierarchy, path).
    fn placed(cgroup_file: &str) -> Vec<(String, String)> {
        cgroup_file
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(3, ':');
                let (_, ctrls, path) = (p.next()?, p.next()?, p.next()?);
                let key = match ctrls {
                    "" => "v2",
                    c if c.split(',').any(|x| x == "pids") => "pids",
                    c if c.split(',').any(|x| x == "memory") => "memory",
                    _ => return None,
                };
                Some((key.to_string(), path.to_string()))
            })
            .collect()
    }

    /// The hierarchies this host gives runs a cgroup in, as `placed` names them.
    fn expected_hierarchies() -> Vec<&'static str> {
        let s = CgroupSupport::get();
        let mut h = Vec::new();
        if s.tree_kill() == Some(sandbox_core::TreeKill::CgroupV2Kill) {
            h.push("v2");
        }
        if s.v1_pids.is_some() {
            h.push("pids");
        }
        if s.v1_memory.is_some() {
            h.push("memory");
        }
        h
    }

    /// `cat /proc/self/cgroup` as the command itself (the process core spawned, after its
    /// exec): in every hierarchy it sits in one run cgroup directly below the host's own,
    /// the same one everywhere; and the policy says which spawn ran.
    async fn lands_in_the_run_cgroups(fork: bool) {
        let hierarchies = expected_hierarchies();
        if hierarchies.is_empty() {
            eprintln!("skipped: this host gives a run no cgroup (not root, no delegation)");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let sb = ProcessSandbox::new(Direct::default());
        let out = with(fork, async {
            sb.run(opts(ws.path(), &["/bin/cat", "/proc/self/cgroup"]))
                .await
                .unwrap();
            sb.wait().await.unwrap()
        })
        .await;
        assert_eq!(
            out.status,
            sandbox_core::Status::Exited { code: 0 },
            "{out:?}"
        );
        let own = placed(&std::fs::read_to_string("/proc/self/cgroup").unwrap());
        let child = placed(&out.stdout.text());
        let mut names = Vec::new();
        for h in &hierarchies {
            let host = &own.iter().find(|(k, _)| k == h).unwrap().1;
            let theirs = &child
                .iter()
                .find(|(k, _)| k == h)
                .unwrap_or_else(|| panic!("no {h} line in {child:?}"))
                .1;
            let (parent, name) = theirs.rsplit_once('/').unwrap();
            let parent = if parent.is_empty() { "/" } else { parent };
            assert_eq!(
                parent, host,
                "{h}: the command is in {theirs}, not below {host}"
            );
            assert!(name.starts_with("sandbox-"), "{h}: {theirs}");
            names.push(name.to_string());
        }
        names.dedup();
        assert_eq!(names.len(), 1, "not one run cgroup: {names:?}");
        let fallback = out.policy.enforced.iter().find_map(|e| match e {
            Enforced::Limits(Limits::ForkJoinedCgroups { why }) => Some(why),
            _ => None,
        });
        if fork {
            assert!(
                fallback.is_some_and(|why| why.contains("forced by a test")),
                "{:?}",
                out.policy.enforced
            );
        } else {
            assert_eq!(
                fallback.is_some(),
                !clone3_here(),
                "{:?}",
                out.policy.enforced
            );
        }
    }

    #[tokio::test]
    async fn the_command_is_born_in_the_run_cgroups() {
        lands_in_the_run_cgroups(false).await;
    }

    #[tokio::test]
    async fn the_fork_fallback_lands_in_the_run_cgroups_too() {
        lands_in_the_run_cgroups(true).await;
    }

    /// Judged from the host while the command runs: its `/proc/PID/cgroup` names the run's
    /// cgroups, and each of those directories lists it (v2 `cgroup.procs`, v1 `tasks`);
    /// after `kill`, neither it nor the `setsid` daemon it double-forked is alive.
    async fn host_sees_it_in_the_run_cgroups(fork: bool) {
        let hierarchies = expected_hierarchies();
        if hierarchies.is_empty() {
            eprintln!("skipped: this host gives a run no cgroup (not root, no delegation)");
            return;
        }
        let support = CgroupSupport::get();
        let ws = tempfile::tempdir().unwrap();
        let sb = ProcessSandbox::new(Direct::default());
        with(fork, async {
            sb.run(opts(
                ws.path(),
                &[
                    "/bin/sh",
                    "-c",
                    "(setsid sleep 30 & echo $! > daemon); echo $$; exec sleep 30",
                ],
            ))
            .await
            .unwrap();
            let pid = wait_for_line(&sb).await;
            let daemon: i32 = std::fs::read_to_string(ws.path().join("daemon"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let file = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
            for (h, path) in placed(&file) {
                if !hierarchies.contains(&h.as_str()) {
                    continue;
                }
                let base = match h.as_str() {
                    "v2" => support.v2.as_ref(),
                    "pids" => support.v1_pids.as_ref(),
                    _ => support.v1_memory.as_ref(),
                }
                .unwrap();
                let name = path.rsplit('/').next().unwrap();
                assert!(name.starts_with("sandbox-"), "{h}: {path}");
                let list = if h == "v2" { "cgroup.procs" } else { "tasks" };
                let members = std::fs::read_to_string(base.join(name).join(list)).unwrap();
                assert!(
                    members.lines().any(|l| l.trim() == pid.to_string()),
                    "{h}: {pid} not in {}: {members}",
                    base.join(name).display()
                );
            }
            sb.kill().await.unwrap();
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "{pid} outlived kill"
            );
            // The daemon is nobody's child of ours: dead, or a zombie its new parent has
            // not reaped yet.
            let state = std::fs::read_to_string(format!("/proc/{daemon}/stat"))
                .ok()
                .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string()));
            assert!(
                state.as_deref().is_none_or(|s| s == "Z"),
                "the setsid daemon {daemon} outlived kill: {state:?}"
            );
        })
        .await;
    }

    /// The first line of the run's output, as a pid.
    async fn wait_for_line(sb: &impl Sandbox) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = sb.logs().await.unwrap().stdout.text();
            if let Some((line, _)) = text.split_once('\n') {
                return line.trim().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "no pid printed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn the_host_sees_the_command_in_the_run_cgroups() {
        host_sees_it_in_the_run_cgroups(false).await;
    }

    #[tokio::test]
    async fn the_host_sees_the_fork_fallback_in_the_run_cgroups() {
        host_sees_it_in_the_run_cgroups(true).await;
    }

    /// A program that vanished after the plan, or is not executable, fails the spawn with
    /// the errno std's spawn gave (`ENOENT`, `EACCES`), on both paths.
    #[tokio::test]
    async fn a_failed_exec_is_the_same_spawn_error_on_both_paths() {
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let not_exec = ws.path().join("not-exec");
        std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
        for (program, errno) in [
            (ws.path().join("missing"), libc::ENOENT),
            (not_exec.clone(), libc::EACCES),
        ] {
            for fork in [false, true] {
                let sb = ProcessSandbox::new(Direct {
                    program: Some(program.clone()),
                    ..Direct::default()
                });
                let r = with(fork, sb.run(opts(ws.path(), &["/bin/true"]))).await;
                match r {
                    Err(SandboxError::Spawn { program: p, source }) => {
                        assert_eq!(p, program);
                        assert_eq!(source.raw_os_error(), Some(errno), "fork {fork}: {source}");
                    }
                    other => panic!("fork {fork}, {}: {other:?}", program.display()),
                }
            }
        }
        // And as callers match on it.
        let sb = ProcessSandbox::new(Direct {
            program: Some(ws.path().join("missing")),
            ..Direct::default()
        });
        assert!(sb
            .run(opts(ws.path(), &["/bin/true"]))
            .await
            .unwrap_err()
            .is_not_found());
    }

    /// The spawn shares the host's memory with the child until its exec (nothing copied):
    /// seen from the host, a write the child makes to a static lands in the host's memory.
    /// The write breaks `PreExec`'s contract on purpose, to observe which kind of child
    /// ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_child_shares_the_hosts_memory_until_exec() {
        use std::sync::atomic::{AtomicI32, Ordering};
        static SEEN: AtomicI32 = AtomicI32::new(0);
        struct Mark;
        // SAFETY: `getpid` and an atomic store; the store is the test's observation.
        unsafe impl PreExec for Mark {
            fn name(&self) -> &'static str {
                "mark"
            }

            fn pre_exec(&self) -> io::Result<()> {
                // SAFETY: a system call with no arguments.
                SEEN.store(unsafe { libc::getpid() }, Ordering::SeqCst);
                Ok(())
            }
        }
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let sb = ProcessSandbox::new(Stepped(|| -> Box<dyn PreExec> { Box::new(Mark) }));
        sb.run(opts(ws.path(), &["/bin/true"])).await.unwrap();
        let out = sb.wait().await.unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            !out.policy
                .enforced
                .iter()
                .any(|e| matches!(e, Enforced::Limits(Limits::ForkJoinedCgroups { .. }))),
            "{out:?}"
        );
        let shared = SEEN.load(Ordering::SeqCst);
        if cfg!(target_arch = "x86_64") {
            assert!(
                shared > 0 && shared != std::process::id() as i32,
                "the child's write did not reach the host: {shared}"
            );
        } else {
            assert_eq!(shared, 0, "no shared spawn on this architecture");
        }
    }

    /// This host's pid-namespace birth: a new user namespace too where the host is not
    /// root (as landlock's `strict` asks).
    fn born_in_a_pid_namespace() -> crate::process::BornIn {
        crate::process::BornIn {
            pid: true,
            user: !nix::unistd::geteuid().is_root(),
        }
    }

    /// A launch born in a pid namespace is its init: the command sees itself as pid 1, and
    /// the host sees it in two namespaces (`NSpid` lists its pid in each), still a member
    /// of the run's cgroup and still waited for through its pidfd.
    #[tokio::test]
    async fn a_launch_born_in_a_pid_namespace_is_its_init() {
        if !Direct::default().capability().tree_kill || !clone3_here() {
            eprintln!("skipped: no cgroup or no clone3 here, so no such run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let sb = ProcessSandbox::new(Direct {
            born_in: born_in_a_pid_namespace(),
            ..Direct::default()
        });
        let mut o = opts(
            ws.path(),
            &[
                "/bin/sh",
                "-c",
                "echo $$; exec grep NSpid /proc/self/status",
            ],
        );
        o.timeout = Some(Duration::from_secs(30));
        sb.run(o).await.unwrap();
        let out = sb.wait().await.unwrap();
        assert_eq!(
            out.status,
            sandbox_core::Status::Exited { code: 0 },
            "{out:?}"
        );
        let text = out.stdout.text();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("1"), "{text}");
        // /proc is still the host's here (no step mounted the namespace's own), so the
        // status file of "self" is the init's (grep, exec'd in the shell's place) as the
        // host sees it.
        let nspid: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        assert_eq!(nspid.len(), 3, "{text}");
        assert_eq!(nspid[2], "1", "{text}");
    }

    /// A ready pipe that the host holds open for writing too (a FIFO opened for reading and
    /// writing, as gVisor's pid file is) never reads end-of-file: a launcher that ends
    /// without the byte is still "nothing ran", and one that writes it and ends at once is
    /// still a run. Bounded by a generous timeout: the bug this guards against was a hang.
    #[tokio::test]
    async fn a_ready_fifo_the_host_also_writes_tells_set_up_from_nothing_ran() {
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let fifo = ws.path().join("ready");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let limit = Duration::from_secs(60);
        let sandbox = || {
            ProcessSandbox::new(Direct {
                ready_fifo: Some(fifo.clone()),
                ..Direct::default()
            })
        };

        let sb = sandbox();
        let r = tokio::time::timeout(limit, sb.run(opts(ws.path(), &["/bin/sh", "-c", "exit 3"])))
            .await
            .expect("run hung on a ready FIFO the host holds open for writing");
        match r {
            Err(SandboxError::Unavailable { reason, .. }) => {
                assert!(reason.contains("exited with 3"), "{reason}")
            }
            other => panic!("{other:?}"),
        }

        let sb = sandbox();
        let write = format!("printf x > {}", fifo.display());
        let r = tokio::time::timeout(limit, sb.run(opts(ws.path(), &["/bin/sh", "-c", &write])))
            .await
            .expect("run hung on a ready FIFO the host holds open for writing");
        r.unwrap();
        let out = sb.wait().await.unwrap();
        assert_eq!(
            out.status,
            sandbox_core::Status::Exited { code: 0 },
            "{out:?}"
        );
    }

    /// Where the spawn cannot be born in the namespaces (the fork fallback), it fails with
    /// the cause and nothing runs: never a command in the host's pid namespace instead.
    #[tokio::test]
    async fn a_launch_that_cannot_be_born_in_its_namespaces_does_not_run() {
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let marker = ws.path().join("ran");
        let sb = ProcessSandbox::new(Direct {
            born_in: born_in_a_pid_namespace(),
            ..Direct::default()
        });
        let cmd = format!("touch {}", marker.display());
        let r = with(true, sb.run(opts(ws.path(), &["/bin/sh", "-c", &cmd]))).await;
        match r {
            Err(SandboxError::Spawn { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::Unsupported, "{source}");
                assert!(source.to_string().contains("clone3"), "{source}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!marker.exists(), "the command ran");
    }

    /// A step that fails between clone and exec fails the spawn with its errno, and the
    /// command does not run.
    #[tokio::test]
    async fn a_failing_step_fails_the_spawn_with_its_errno() {
        struct Refuse;
        // SAFETY: returns a raw errno; no allocation, no call at all.
        unsafe impl PreExec for Refuse {
            fn name(&self) -> &'static str {
                "refuse"
            }

            fn pre_exec(&self) -> io::Result<()> {
                Err(io::Error::from_raw_os_error(libc::EXDEV))
            }
        }
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let marker = ws.path().join("ran");
        for fork in [false, true] {
            let sb = ProcessSandbox::new(Stepped(|| -> Box<dyn PreExec> { Box::new(Refuse) }));
            let cmd = format!("touch {}", marker.display());
            let r = with(fork, sb.run(opts(ws.path(), &["/bin/sh", "-c", &cmd]))).await;
            match r {
                Err(SandboxError::Spawn { source, .. }) => {
                    assert_eq!(source.raw_os_error(), Some(libc::EXDEV), "fork {fork}");
                }
                other => panic!("fork {fork}: {other:?}"),
            }
            assert!(!marker.exists(), "the command ran");
        }
    }

    use super::super::PreExec;

    /// stdio, environment, `argv[0]`, cwd, process group and `SIGPIPE` are what std gave:
    /// stdin bytes arrive, stderr is apart, the environment is exactly the plan's, and the
    /// command leads its own process group with `SIGPIPE` at its default.
    #[tokio::test]
    async fn the_child_gets_what_std_gave_it() {
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let script = "read line; echo \"in:$line\"; echo err >&2; pwd; \
                      echo \"$0\"; env | sort | tr '\\n' ' '; echo; \
                      read -r pid comm state ppid pgrp rest < /proc/$$/stat; \
                      echo \"$pid $pgrp\"; grep SigIgn /proc/$$/status";
        for fork in [false, true] {
            let sb = ProcessSandbox::new(Direct::default());
            let mut o = opts(&ws_path, &["/bin/sh", "-c", script, "zero"]);
            o.stdin = sandbox_core::Stdin::Bytes(b"hello\n".to_vec());
            o.env.set = vec![("B_VAR".into(), "2".into()), ("A_VAR".into(), "1".into())];
            let out = with(fork, async {
                sb.run(o).await.unwrap();
                sb.wait().await.unwrap()
            })
            .await;
            let text = out.stdout.text();
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(
                out.status,
                sandbox_core::Status::Exited { code: 0 },
                "{out:?}"
            );
            assert_eq!(lines[0], "in:hello", "fork {fork}: {text}");
            assert_eq!(out.stderr.text(), "err\n", "fork {fork}");
            assert_eq!(lines[1], ws_path.to_str().unwrap(), "fork {fork}");
            assert_eq!(lines[2], "zero", "fork {fork}");
            assert!(
                lines[3].contains("A_VAR=1 ") && lines[3].contains("B_VAR=2 "),
                "{text}"
            );
            // Exactly the plan's names, besides what the shell sets itself.
            let mut names: Vec<&str> = lines[3]
                .split_whitespace()
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
                .filter(|k| !["PWD", "OLDPWD", "SHLVL", "_"].contains(k))
                .collect();
            names.sort_unstable();
            let mut want: Vec<&str> = out.policy.env_names.iter().map(String::as_str).collect();
            want.sort_unstable();
            assert_eq!(names, want, "fork {fork}: {text}");
            let ids: Vec<&str> = lines[4].split_whitespace().collect();
            assert_eq!(ids[0], ids[1], "fork {fork}: not a group leader: {text}");
            // SIGPIPE is signal 13: bit 12 of the ignored mask.
            let ign = u64::from_str_radix(lines[5].split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(ign & (1 << 12), 0, "fork {fork}: SIGPIPE ignored: {text}");
        }
    }

    /// A signal the spawning thread blocks is not blocked in the command: the mask is
    /// emptied before exec, on both paths, as std does.
    #[tokio::test]
    async fn the_spawning_threads_blocked_signals_are_not_the_commands() {
        if !Direct::default().capability().tree_kill {
            eprintln!("skipped: no cgroup here, so no run starts at all");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        // This test's runtime is current-thread: the spawn happens on this thread. The
        // command is grep itself: a shell clears its inherited mask at start.
        let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigemptyset(&mut blocked);
            libc::sigaddset(&mut blocked, libc::SIGTERM);
            libc::sigaddset(&mut blocked, libc::SIGUSR2);
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, std::ptr::null_mut()),
                0
            );
        }
        for fork in [false, true] {
            let sb = ProcessSandbox::new(Direct::default());
            let o = opts(&ws_path, &["/bin/grep", "SigBlk", "/proc/self/status"]);
            let out = with(fork, async {
                sb.run(o).await.unwrap();
                sb.wait().await.unwrap()
            })
            .await;
            let text = out.stdout.text();
            let blk = u64::from_str_radix(text.split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(
                blk, 0,
                "fork {fork}: the command starts with signals blocked: {text}"
            );
        }
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &blocked, std::ptr::null_mut());
        }
    }
}
