//! The seccomp supervisor: records each denied system call of a run and answers it `EPERM`.
//!
//! A backend that installs the shared filter built with `notify`
//! ([`crate::seccomp::SeccompProgram::build_with`]) gets, for the table's denied calls only,
//! `SECCOMP_RET_USER_NOTIF` instead of `EPERM`: the calling thread waits while the kernel
//! queues a notification on the filter's listener. The child sends that listener over a
//! socket pair made before the fork ([`crate::seccomp::InstallNotifying`]); [`watch`]
//! receives it, then for each notification records the call by its name in
//! [`crate::syscalls::TABLE`] and answers `-EPERM`, exactly what the plain filter would
//! have returned. Allowed calls never leave the kernel.
//!
//! The task ends with the run: the supervisor aborts it once the tree is dead, which drops
//! the listener (a call still waiting then fails with `ENOSYS`, never succeeds).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::denial::{kind_of_call, DenialLog, DenialMechanism};

/// Where a run's denials are collected while it runs.
pub(crate) type SharedLog = Arc<Mutex<DenialLog>>;

/// Receive the listener on `sock`, then serve it until the task is aborted or every
/// process under the filter is gone.
pub(crate) async fn watch(sock: OwnedFd, log: SharedLog) {
    let Some(listener) = receive_listener(sock).await else {
        return;
    };
    // SAFETY: an OwnedFd, owned by the AsyncFd until it drops: open and the same throughout.
    let Ok(listener) = (unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) })
    else {
        return;
    };
    loop {
        let Ok(mut ready) = listener.readable().await else {
            return;
        };
        // `NOTIF_RECV` blocks whatever the descriptor's flags, so it is only called when a
        // poll now says a notification is pending (tokio's readiness may be stale).
        match pending(listener.get_ref()) {
            Pending::Yes => {}
            Pending::No => {
                ready.clear_ready();
                continue;
            }
            Pending::Gone => return,
        }
        // SAFETY: `seccomp_notif` is plain data; the kernel requires it zeroed.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl fills the live, correctly sized struct.
        let r = unsafe {
            libc::ioctl(
                listener.get_ref().as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut req,
            )
        };
        if r < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // The caller died before we read it, or a signal: try again.
                Some(libc::ENOENT) | Some(libc::EINTR) => continue,
                _ => return,
            }
        }
        drop(ready);
        let name = call_name(req.data.nr);
        if let Ok(mut l) = log.lock() {
            l.record(kind_of_call(name), name, DenialMechanism::Seccomp);
        }
        let mut resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error: -libc::EPERM,
            flags: 0,
        };
        // SAFETY: the ioctl reads the live, correctly sized struct. It fails with ENOENT
        // when the caller died meanwhile: nothing to answer then.
        unsafe {
            libc::ioctl(
                listener.get_ref().as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            );
        }
    }
}

enum Pending {
    Yes,
    No,
    /// Every process under the filter is gone, and nothing is left to read.
    Gone,
}

fn pending(fd: &OwnedFd) -> Pending {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, a zero timeout.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r < 0 {
        return Pending::No;
    }
    if p.revents & libc::POLLIN != 0 {
        Pending::Yes
    } else if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Pending::Gone
    } else {
        Pending::No
    }
}

/// The call's name in the table; a number the table does not know cannot reach the
/// listener (only the table's rules notify), but is named rather than dropped.
fn call_name(nr: libc::c_int) -> &'static str {
    crate::syscalls::TABLE
        .iter()
        .find(|d| d.nr == Some(nr as i64))
        .map_or("unknown system call", |d| d.name)
}

/// The one descriptor the child sends on `sock`, or `None` when it closed without sending.
async fn receive_listener(sock: OwnedFd) -> Option<OwnedFd> {
    // SAFETY: an OwnedFd, owned by the AsyncFd until it drops: open and the same throughout.
    let sock = unsafe { AsyncFd::register_with_interest(sock, Interest::READABLE) }.ok()?;
    loop {
        let mut ready = sock.readable().await.ok()?;
        match recv_fd(sock.get_ref()) {
            Ok(fd) => return fd,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
            Err(_) => return None,
        }
    }
}

fn recv_fd(sock: &OwnedFd) -> std::io::Result<Option<OwnedFd>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    for c in msg.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            let mut owned: Vec<OwnedFd> = fds
                .into_iter()
                // SAFETY: SCM_RIGHTS installed these descriptors in this process, ours alone.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            if owned.len() == 1 {
                return Ok(owned.pop());
            }
            return Ok(None);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_names_come_from_the_table() {
        assert_eq!(call_name(libc::SYS_ptrace as libc::c_int), "ptrace");
        assert_eq!(call_name(libc::SYS_mount as libc::c_int), "mount");
        assert_eq!(
            call_name(libc::SYS_read as libc::c_int),
            "unknown system call"
        );
    }
}
