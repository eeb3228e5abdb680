//! The system-call filters of a landlock run: the shared one from core, and one of this
//! backend's own for what landlock cannot confine on older ABIs.
//!
//! # The shared filter
//!
//! [`sandbox_host::seccomp`], the same program bwrap installs, on every lane: sessions and
//! process groups are the command's own (`setsid`, `setpgid`), since no tree kill here
//! depends on them (the pid namespace on `strict`, core's subreaper waiter elsewhere).
//!
//! # Unix sockets by path
//!
//! Until landlock ABI 9 (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`) connecting to a unix socket by
//! its path is not a landlock access at all: only the socket file's mode is checked. A
//! command could then talk to `/var/run/docker.sock` (root on the host), a gpg or ssh agent
//! under `/run/user/UID`, or the session bus, whatever the filesystem rules say. The filter
//! cannot read the address `connect(2)` is given, so on those kernels it denies
//! `socket(AF_UNIX, ...)` with `EPERM`; `socketpair(2)`, which reaches nothing outside,
//! stays allowed. A program that runs a unix-socket server of its own inside the sandbox
//! fails there, with a clear error, rather than the host's services being reachable.
//!
//! It is a second filter, stacked under the shared one: the kernel runs both and the
//! stricter answer wins. It is compiled once per process.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, OnceLock};

use sandbox_core::{NetworkMode, SandboxError};
use sandbox_host::process::PreExec;
use sandbox_host::seccomp::{SeccompProgram, SyscallPolicy};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The shared filter's policy for a run with `network`, its door `mediated` or not.
pub(crate) fn shared_policy(network: NetworkMode, mediated: bool) -> SyscallPolicy {
    SyscallPolicy { network, mediated }
}

/// The shared filter, compiled once per policy.
pub(crate) fn shared(
    network: NetworkMode,
    mediated: bool,
) -> Result<Arc<SeccompProgram>, SandboxError> {
    SeccompProgram::cached(&shared_policy(network, mediated))
}

/// The shared filter whose denied calls notify a supervisor instead of failing at once.
pub(crate) fn shared_notifying(
    network: NetworkMode,
    mediated: bool,
) -> Result<Arc<SeccompProgram>, SandboxError> {
    SeccompProgram::cached_with(&shared_policy(network, mediated), true)
}

fn build_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::io(
        "building the unix-socket seccomp filter",
        io::Error::other(e.to_string()),
    )
}

/// The deny rules of the unix-socket filter: `socket(AF_UNIX, ...)`.
pub(crate) fn unix_socket_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let cond = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_UNIX as u64,
    )
    .map_err(build_error)?;
    let rule = SeccompRule::new(vec![cond]).map_err(build_error)?;
    Ok(BTreeMap::from([(libc::SYS_socket, vec![rule])]))
}

/// The unix-socket filter, compiled once per process.
pub(crate) fn unix_socket_filter() -> Result<Arc<BpfProgram>, SandboxError> {
    static PROGRAM: OnceLock<Arc<BpfProgram>> = OnceLock::new();
    if let Some(p) = PROGRAM.get() {
        return Ok(p.clone());
    }
    let filter = SeccompFilter::new(
        unix_socket_rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        sandbox_host::seccomp::target_arch()?,
    )
    .map_err(build_error)?;
    let program: BpfProgram = filter.try_into().map_err(build_error)?;
    Ok(PROGRAM.get_or_init(|| Arc::new(program)).clone())
}

/// Installs a compiled filter between fork and exec.
#[derive(Debug)]
pub(crate) struct InstallFilter(pub Arc<BpfProgram>);

// SAFETY: core's `install` is async-signal-safe (two system calls, no allocation), on a
// program compiled before the fork and kept alive by the Arc. It sets `no_new_privs`
// again after the restrict step: that costs nothing and keeps this step correct alone.
unsafe impl PreExec for InstallFilter {
    fn name(&self) -> &'static str {
        "seccomp filter"
    }

    fn pre_exec(&self) -> io::Result<()> {
        sandbox_host::seccomp::install(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_policy_follows_the_network() {
        for n in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            assert_eq!(
                shared_policy(n, false),
                SyscallPolicy {
                    network: n,
                    mediated: false
                }
            );
        }
    }

    #[test]
    fn unix_socket_filter_matches_only_socket_af_unix() {
        let rules = unix_socket_rules().unwrap();
        assert_eq!(
            rules.keys().copied().collect::<Vec<_>>(),
            [libc::SYS_socket]
        );
        let p = unix_socket_filter().unwrap();
        assert!(!p.is_empty() && p.len() < 64);
        assert!(Arc::ptr_eq(&p, &unix_socket_filter().unwrap()));
    }

    /// Installed in a forked child (an irreversible restriction must not touch the test
    /// process): `socket(AF_UNIX)` fails with EPERM, `socketpair` and inet sockets work.
    #[test]
    fn installed_unix_filter_denies_socket_af_unix_only() {
        let step = InstallFilter(unix_socket_filter().unwrap());
        // SAFETY: the child makes only raw system calls and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                let errno = || *libc::__errno_location();
                let mut bad = 0;
                if step.pre_exec().is_err() {
                    libc::_exit(100);
                }
                if libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 1;
                }
                if libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 2;
                }
                let mut fds = [0; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) != 0 {
                    bad |= 4;
                }
                if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) < 0 {
                    bad |= 8;
                }
                bad
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "failed checks bitmask");
    }
}
