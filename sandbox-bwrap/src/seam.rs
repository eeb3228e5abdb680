//! The thin seam between the pure policy and the host: the descriptors bwrap reads (the
//! seccomp program, the waiter, the options), the status and ready pipes, and the
//! `Launch`.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sandbox_core::{Plan, Record, SandboxError, TreeKill};
use sandbox_host::process::{waiter, DoorEnd, Launch};
use sandbox_host::seccomp::{SeccompProgram, SyscallPolicy};

use crate::argv::{self, BwrapArgs, Fds, Layout};
use crate::rootview::Hidden;

/// An anonymous in-memory file holding `data`, positioned at its start (bwrap reads it from
/// the shared offset). Close-on-exec here; core hands it to bwrap alone.
fn memfd(name: &str, data: &[u8]) -> io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut f = File::from(fd);
    f.write_all(data)?;
    f.rewind()?;
    Ok(f.into())
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// NUL-terminated arguments, as `--args` reads them.
fn nul_separated(args: &[OsString]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in args {
        out.extend_from_slice(a.as_bytes());
        out.push(0);
    }
    out
}

fn io_err(what: &str) -> impl FnOnce(io::Error) -> SandboxError + '_ {
    move |e| SandboxError::io(format!("preparing bwrap: {what}"), e)
}

/// Everything for one run: build the descriptors, the arguments, and the launch.
pub(crate) fn launch(
    bwrap: &Path,
    plan: &Plan,
    layout: &Layout<'_>,
    hidden: &[Hidden],
    record: Record,
    door: Option<DoorEnd>,
) -> Result<Launch, SandboxError> {
    // The same program the landlock backend installs, so both deny the same kernel surface.
    let program = SeccompProgram::cached(&SyscallPolicy {
        network: plan.network,
        mediated: false,
    })?;
    let seccomp = memfd("sandbox-seccomp", program.as_bytes()).map_err(io_err("seccomp"))?;
    // Core's waiter, which bwrap runs as its init: a reader of the process's one sealed
    // copy, which bwrap copies into the sandbox.
    let waiter = waiter::readable().map_err(io_err("the waiter"))?;
    let (status_r, status_w) = pipe().map_err(io_err("the status pipe"))?;
    let (ready_r, ready_w) = pipe().map_err(io_err("the ready pipe"))?;
    // The door (network mode `proxy`, host and published ports): the waiter makes the
    // listeners inside bwrap's network namespace and sends them to the host on its end.
    let BwrapArgs { options, command } = argv::build(
        plan,
        layout,
        hidden,
        Fds {
            seccomp: seccomp.as_raw_fd(),
            waiter: waiter.as_raw_fd(),
            status: status_w.as_raw_fd(),
            ready: ready_w.as_raw_fd(),
            proxy: door.as_ref().map(|d| (d.sock.as_raw_fd(), d.ports.clone())),
        },
    )?;
    let opts_fd = memfd("sandbox-bwrap-args", &nul_separated(&options))
        .map_err(io_err("the argument list"))?;

    let mut args: Vec<OsString> = vec!["--args".into(), opts_fd.as_raw_fd().to_string().into()];
    args.extend(command);
    // bwrap itself needs no environment: the command's is set with --clearenv/--setenv.
    let mut launch = Launch::wrapped(bwrap.to_path_buf(), args, Vec::new(), plan);
    launch.pass_fds = vec![opts_fd, seccomp, waiter, status_w, ready_w];
    if let Some(d) = door {
        launch.pass_fds.push(d.sock);
    }
    launch.exit_status_pipe = Some(status_r);
    // bwrap that cannot set the sandbox up (user namespaces refused since the set-up
    // probe was recorded) exits 1 before the waiter runs: an error, not the command's 1.
    launch.ready_pipe = Some(ready_r);
    launch.process_rlimit_inside = true;
    launch.tree_kill = Some(TreeKill::PidNamespace);
    launch.enforced = record;
    Ok(launch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn memfd_reads_back_from_the_start() {
        let fd = memfd("t", b"abc").unwrap();
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "abc");
    }

    #[test]
    fn args_are_nul_terminated() {
        let v = nul_separated(&["--a".into(), "b c".into()]);
        assert_eq!(v, b"--a\0b c\0");
    }
}
