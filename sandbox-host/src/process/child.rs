//! What the child does between fork and exec.
//!
//! After `fork` (or core's `clone3`, see [`super::sys`]) in a multi-threaded process only
//! async-signal-safe calls are allowed: another thread may have held the allocator's lock at
//! the moment of the fork, and the child would deadlock on it. So everything here is prepared
//! in the parent (C strings, numbers, raw descriptors) and the child makes nothing but raw
//! system calls on it: `dup2`, `fcntl`, `chdir`, `setpgid`, `sigaction`, `sigprocmask`,
//! `prctl`, `getppid`, `open`, `write`, `close`, `getrlimit`, `setrlimit`, `close_range`,
//! the raw `setgroups`, `setresgid`, `setresuid`, `execve`, `_exit`: all listed as
//! async-signal-safe or plain system calls with no user-space state. No allocation, no
//! locks, no `Drop` of anything allocated.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use crate::sys::{self, raw_write_file, PreExec};

/// Everything the child needs, prepared before the fork.
pub(crate) struct ChildSetup {
    pub parent: libc::pid_t,
    /// A pidfd of the host process, for a child born in a pid namespace of its own (where
    /// its parent has no pid: `getppid` answers 0): it turns readable once the host has
    /// exited. -1 otherwise.
    pub host_pidfd: RawFd,
    /// The uid and gid map lines of a child born in a user namespace of its own
    /// ([`super::BornIn::user`]): the host's own ids mapped to themselves, written first,
    /// so every step after (an overlay's mount, the backend's namespaces) runs with them.
    pub id_maps: Option<(Vec<u8>, Vec<u8>)>,
    /// The run's cgroup v2 `cgroup.procs`, written unless the child was born in that cgroup
    /// (`born_in_v2`, set by the spawn just before the clone that does so).
    pub v2_procs: Option<CString>,
    pub born_in_v2: bool,
    /// The run's cgroup v1 files to write `0` to: `tasks` where it exists, see
    /// [`super::cgroup::RunCgroups::v1_joins`].
    pub v1_joins: Vec<CString>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    pub pass_fds: Vec<RawFd>,
    pub credentials: Option<(libc::uid_t, libc::gid_t)>,
    pub steps: Vec<Box<dyn PreExec>>,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

impl ChildSetup {
    /// Runs in the child; see the module docs for why each call is safe here.
    pub(crate) fn run(&self) -> io::Result<()> {
        // SAFETY (whole block): raw system calls on values and C strings prepared before the
        // fork; none allocates or takes a lock.
        unsafe {
            // Die with the host: SIGKILL when the thread that forked us goes away. Checked
            // against the parent's pid afterwards, since the parent may already be gone.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            let host_gone = if self.host_pidfd >= 0 {
                let mut host = libc::pollfd {
                    fd: self.host_pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut host, 1, 0) != 0
            } else {
                libc::getppid() != self.parent
            };
            if host_gone {
                // The host died during spawn. A raw errno: building a message would
                // allocate after fork.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some((uid_map, gid_map)) = &self.id_maps {
                // `setgroups` must be denied before an unprivileged gid map is accepted.
                raw_write_file(c"/proc/self/setgroups", b"deny")?;
                raw_write_file(c"/proc/self/uid_map", uid_map)?;
                raw_write_file(c"/proc/self/gid_map", gid_map)?;
            }
            // No signal blocked: the child starts with the mask of the host thread that
            // spawned it (neither `clone3` nor std's fork resets it), and a mask survives
            // exec, so a host that blocks `SIGTERM` in its threads to read it from a
            // signalfd would start every command deaf to it.
            let mut none: libc::sigset_t = std::mem::zeroed();
            check(libc::sigemptyset(&mut none))?;
            check(libc::sigprocmask(
                libc::SIG_SETMASK,
                &none,
                std::ptr::null_mut(),
            ))?;
            // Join the run's cgroups before anything else can fork (v2 unless born there).
            if let (Some(path), false) = (&self.v2_procs, self.born_in_v2) {
                raw_write_file(path, b"0")?;
            }
            for path in &self.v1_joins {
                raw_write_file(path, b"0")?;
            }
            // Limits, clamped to the hard limit (an unprivileged process cannot raise it);
            // soft and hard set alike so the command cannot raise its own soft limit.
            for &(resource, value) in &self.rlimits {
                let mut cur = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                check(libc::getrlimit(resource, &mut cur))?;
                let v = value.min(cur.rlim_max);
                let new = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                check(libc::setrlimit(resource, &new))?;
            }
            // No descriptor of the host crosses except stdio and the named ones: mark every
            // other close-on-exec (not close: the runtime's exec-error pipe must survive to
            // report a failed exec), then clear the flag on the ones handed over on purpose.
            if libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            ) < 0
            {
                // Kernels before 5.11: walk the table up to the descriptor limit.
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                check(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim))?;
                let max = lim.rlim_cur.min(1 << 20) as libc::c_int;
                for fd in 3..max {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            for &fd in &self.pass_fds {
                check(libc::fcntl(fd, libc::F_SETFD, 0))?;
            }
            // Credentials last among ours: joining a root-owned cgroup needs root.
            if let Some((uid, gid)) = self.credentials {
                sys::become_ids(uid, gid)?;
            }
        }
        for step in &self.steps {
            step.pre_exec()?;
        }
        Ok(())
    }
}

/// What the child executes, as C strings and pointer arrays prepared before the clone.
/// Holds raw pointers into its own strings, so it stays on the spawning thread.
pub(crate) struct Exec {
    program: CString,
    cwd: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// Own the bytes `argv` and `envp` point into (a `CString`'s buffer does not move when
    /// the `CString` does).
    _strings: Vec<CString>,
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    // std's spawn refuses the same, with the same kind and words.
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

impl Exec {
    /// `program` with `argv` (`arg0` first) and exactly `env`, in `cwd`. As std's `Command`
    /// with `env_clear`: a name given twice keeps its last value, and the environment is
    /// passed sorted by name; a `program` without a slash is looked up on the `PATH` of
    /// `env` (std's `execvp` did it in the child, on the new environment).
    pub(crate) fn new(
        program: &std::path::Path,
        arg0: &OsStr,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
    ) -> io::Result<Self> {
        let env: BTreeMap<&OsStr, &OsStr> = env
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
            .collect();
        let program = if program.as_os_str().as_bytes().contains(&b'/') {
            program.to_path_buf()
        } else {
            let path = env.get(OsStr::new("PATH")).copied();
            which::which_in(program, path.or(Some(OsStr::new("/bin:/usr/bin"))), cwd)
                .map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?
        };
        let mut strings = Vec::with_capacity(1 + args.len() + env.len());
        strings.push(c_string(arg0)?);
        for a in args {
            strings.push(c_string(a)?);
        }
        for (k, v) in &env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            strings.push(c_string(OsStr::from_bytes(&kv))?);
        }
        let ptrs = |s: &[CString]| -> Vec<*const libc::c_char> {
            s.iter()
                .map(|c| c.as_ptr())
                .chain([std::ptr::null()])
                .collect()
        };
        let argv = ptrs(&strings[..=args.len()]);
        let envp = ptrs(&strings[args.len() + 1..]);
        Ok(Self {
            program: c_string(program.as_os_str())?,
            cwd: c_string(cwd.as_os_str())?,
            argv,
            envp,
            _strings: strings,
        })
    }
}

/// The child's whole life between `clone3` and `execve`, in std's order: the stdio, the
/// working directory, the process group and `SIGPIPE`, then [`ChildSetup::run`] (ours, then
/// the backend's steps), then the exec. Any failure is reported on `error_pipe` as its
/// errno (one that is not an OS error as `EINVAL`, as std does) and the child exits.
///
/// # Safety
///
/// Only in the child of [`sys::clone3`] (or a fork), on data prepared before it; every
/// call here is a plain system call (module docs) and the function never returns.
pub(crate) unsafe fn exec_child(
    stdio: [RawFd; 3],
    exec: &Exec,
    setup: &ChildSetup,
    error_pipe: RawFd,
) -> ! {
    /// A panic in a backend's step must not unwind into the host's code in this copy of
    /// it: whatever happens, this process ends here.
    struct ExitOnUnwind;
    impl Drop for ExitOnUnwind {
        fn drop(&mut self) {
            // SAFETY: `_exit` is a system call.
            unsafe { libc::_exit(127) }
        }
    }
    let _guard = ExitOnUnwind;
    let run = || -> io::Result<()> {
        // SAFETY: plain system calls on descriptors and C strings made before the clone.
        unsafe {
            for (target, &fd) in stdio.iter().enumerate() {
                sys::dup_onto(fd, target as libc::c_int)?;
            }
            sys::enter(&exec.cwd)?;
        }
        setup.run()?;
        // SAFETY: both arrays end in a null pointer and point into `exec`'s strings.
        Err(unsafe { sys::execve(&exec.program, &exec.argv, &exec.envp) })
    };
    let errno = match run() {
        Ok(()) => libc::EINVAL,
        Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
    };
    // SAFETY: the write end of the exec-error pipe, made before the clone.
    unsafe { sys::report_and_exit(error_pipe, errno) }
}
