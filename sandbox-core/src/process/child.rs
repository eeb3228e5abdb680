//! What the child does between fork and exec.
//!
//! After `fork` in a multi-threaded process only async-signal-safe calls are allowed: another
//! thread may have held the allocator's lock at the moment of the fork, and the child would
//! deadlock on it. So everything here is prepared in the parent (C strings, numbers, raw
//! descriptors) and the child makes nothing but raw system calls on it: `prctl`, `getppid`,
//! `open`, `write`, `close`, `getrlimit`, `setrlimit`, `close_range`, `fcntl`, `setgroups`,
//! `setresgid`, `setresuid`, all listed as async-signal-safe or plain system calls with no
//! user-space state. No allocation, no locks, no `Drop` of anything allocated.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

/// A step a backend adds between fork and exec (landlock's `restrict_self`, a seccomp
/// filter).
///
/// # Safety
///
/// [`PreExec::pre_exec`] runs in the child of a `fork` in a multi-threaded process, where
/// only async-signal-safe work is sound: another thread may have held the allocator's
/// lock (or any other) at the moment of the fork, and the child would deadlock on it. An
/// implementation must therefore make only system calls on data prepared before the fork:
/// no allocation (no `format!`, no `io::Error::other`; `last_os_error` and
/// `from_raw_os_error` do not allocate), no locks, no `Drop` of anything that frees. The
/// trait is `unsafe` to implement so that every implementation says, in a `SAFETY`
/// comment, why it keeps to this.
pub unsafe trait PreExec: Send + Sync + 'static {
    /// Run in the child. An error aborts the spawn; the command never runs.
    fn pre_exec(&self) -> io::Result<()>;
}

/// `write(2)` the whole of `data` to `path` (opened write-only, not created), then close it:
/// how a child joins a cgroup or writes its user namespace's maps. A short write is `EIO`.
///
/// # Safety
///
/// Only system calls on a C string and a buffer made before the fork, so it is callable
/// between fork and exec; the caller keeps both alive for the call.
pub unsafe fn raw_write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path and a live buffer; `open`, `write` and `close` are
    // async-signal-safe, and neither error path allocates.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(if n < 0 {
                err
            } else {
                io::Error::from_raw_os_error(libc::EIO)
            });
        }
    }
    Ok(())
}

/// Everything the child needs, prepared before the fork.
pub(crate) struct ChildSetup {
    pub parent: libc::pid_t,
    pub cgroup_procs: Vec<CString>,
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
            if libc::getppid() != self.parent {
                // The host died during spawn. A raw errno: building a message would
                // allocate after fork.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Join the run's cgroups before anything else can fork.
            for path in &self.cgroup_procs {
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
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
            }
        }
        for step in &self.steps {
            step.pre_exec()?;
        }
        Ok(())
    }
}
