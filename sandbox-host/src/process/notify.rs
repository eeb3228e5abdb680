//! The seccomp supervisor: records each denied system call of a run and answers it `EPERM`,
//! and, for a mediated door, answers each `connect` ([`super::mediate`]).
//!
//! A backend that installs the shared filter built with `notify`
//! ([`crate::seccomp::SeccompProgram::build_with`]) gets, for the table's denied calls only,
//! `SECCOMP_RET_USER_NOTIF` instead of `EPERM`: the calling thread waits while the kernel
//! queues a notification on the filter's listener. The child sends that listener over a
//! socket pair made before the fork ([`crate::seccomp::InstallNotifying`]); [`Watcher`]
//! receives it, then for each notification records the call by its name in
//! [`crate::syscalls::TABLE`] and answers `-EPERM`, exactly what the plain filter would
//! have returned. Allowed calls never leave the kernel.
//!
//! The listener is served on a thread of its own, in blocking calls: a denied call waits
//! in the kernel until it is answered, so each one costs a round trip through this
//! supervisor, and a command that loops over one (a million times, say) is paced by it.
//! Served by a task of the runtime, each round trip was a trip through the runtime's
//! reactor and scheduler as well; a thread blocked in `poll` answers as soon as the kernel
//! queues the call. The thread ends with the run: [`Watcher::finish`] closes its stop pipe
//! and waits until it has dropped the listener (a call still waiting then fails with
//! `ENOSYS`, never succeeds); so does dropping the [`Watcher`], without the wait.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use sandbox_core::denial::{kind_of_call, DenialLog, DenialMechanism};

use super::mediate::Mediation;
use crate::sys::unotify;

/// Where a run's denials are collected while it runs.
pub(crate) type SharedLog = Arc<Mutex<DenialLog>>;

/// The thread serving one run's listener.
pub(crate) struct Watcher {
    /// The write end of the stop pipe: closing it ends the thread.
    stop: OwnedFd,
    /// Completed (by being dropped) when the thread has dropped the listener.
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Watcher {
    /// Serve the listener the child sends on `sock`: receive it, then answer each
    /// notification until [`Watcher::finish`], or until every process under the filter is
    /// gone.
    /// `mediation`: the run's mediated door, for a filter that notifies `connect`; without
    /// one, a notified `connect` is answered as a denial (nothing is ever connected
    /// unmediated).
    pub(crate) fn start(
        sock: OwnedFd,
        log: SharedLog,
        mediation: Option<Arc<Mediation>>,
    ) -> std::io::Result<Self> {
        let (stop_read, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sandbox-seccomp".into())
            .spawn(move || {
                if let Some(listener) = receive_listener(&sock, &stop_read) {
                    drop(sock);
                    serve(&listener, &stop_read, &log, mediation.as_deref());
                }
                // The listener is closed (it was dropped above) before `done` completes.
                drop(done_tx);
            })?;
        Ok(Self { stop, done })
    }

    /// End the thread and wait until the listener is closed. The tree is dead by now: no
    /// call is waiting, and every answered call was recorded before its answer.
    pub(crate) async fn finish(self) {
        let Self { stop, done } = self;
        drop(stop);
        let _ = done.await;
    }
}

/// What a blocking wait on the listener and the stop pipe found.
enum Woken {
    /// The listener is readable.
    Ready,
    /// The stop pipe closed, or the listener hung up (every process under it is gone).
    Stop,
}

/// Block until `fd` is readable or the run is over.
fn wait(fd: BorrowedFd<'_>, stop: &OwnedFd) -> Woken {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds = [
            PollFd::new(&fd, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return Woken::Stop,
        }
        let (me, st) = (fds[0].revents(), fds[1].revents());
        if !st.is_empty() {
            return Woken::Stop;
        }
        if me.contains(PollFlags::IN) {
            return Woken::Ready;
        }
        if me.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
            return Woken::Stop;
        }
    }
}

/// Answer each notification on `listener`: a mediated `connect` as the door decides, any
/// other call `EPERM`, recorded first.
fn serve(listener: &OwnedFd, stop: &OwnedFd, log: &SharedLog, mediation: Option<&Mediation>) {
    unotify::set_sync_wake_up(listener.as_fd());
    loop {
        // `NOTIF_RECV` blocks whatever the descriptor's flags, so it is only called when a
        // poll says a notification is pending.
        if let Woken::Stop = wait(listener.as_fd(), stop) {
            return;
        }
        let n = match unotify::receive(listener.as_fd()) {
            Ok(n) => n,
            // The caller died before we read it, or a signal: try again.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EINTR)) => {
                continue
            }
            Err(_) => return,
        };
        if let (Some(m), true) = (mediation, n.nr as libc::c_long == libc::SYS_connect) {
            super::mediate::answer_connect(listener.as_fd(), &n, m, log);
            continue;
        }
        let name = call_name(n.nr);
        let target = call_target(name, &n.args);
        if let Ok(mut l) = log.lock() {
            l.record(kind_of_call(name), &target, DenialMechanism::Seccomp);
        }
        // ENOENT when the caller died meanwhile: nothing to answer then.
        let _ = unotify::answer(listener.as_fd(), n.id, unotify::Answer::Fail(libc::EPERM));
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

/// What a denial names: the call, and for `socket` and `socketpair` the family and type
/// asked for. A C library opens sockets for itself (glibc's `getaddrinfo` connects a UDP
/// socket to each address it found, to order them; its interface query opens a netlink
/// one), and `socket(AF_INET, SOCK_DGRAM)` tells a person which of those was refused where
/// a bare `socket` reads as the command reaching for the network.
fn call_target(name: &'static str, args: &[u64; 6]) -> std::borrow::Cow<'static, str> {
    if !matches!(name, "socket" | "socketpair") {
        return name.into();
    }
    // Only the low 32 bits are the C `int` arguments; the flags ride on the type.
    let (domain, kind) = (args[0] as u32 as libc::c_int, args[1] as u32 as libc::c_int);
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    let family = match domain {
        libc::AF_UNIX => "AF_UNIX".into(),
        libc::AF_INET => "AF_INET".into(),
        libc::AF_INET6 => "AF_INET6".into(),
        libc::AF_NETLINK => "AF_NETLINK".into(),
        libc::AF_PACKET => "AF_PACKET".into(),
        libc::AF_VSOCK => "AF_VSOCK".into(),
        libc::AF_BLUETOOTH => "AF_BLUETOOTH".into(),
        libc::AF_ALG => "AF_ALG".into(),
        libc::AF_XDP => "AF_XDP".into(),
        other => std::borrow::Cow::Owned(format!("family {other}")),
    };
    let kind = match kind & !flags {
        libc::SOCK_STREAM => "SOCK_STREAM".into(),
        libc::SOCK_DGRAM => "SOCK_DGRAM".into(),
        libc::SOCK_RAW => "SOCK_RAW".into(),
        libc::SOCK_SEQPACKET => "SOCK_SEQPACKET".into(),
        other => std::borrow::Cow::<str>::Owned(format!("type {other}")),
    };
    format!("{name}({family}, {kind})").into()
}

/// The one descriptor the child sends on `sock`, or `None` when it closed without sending
/// or the run ended first.
fn receive_listener(sock: &OwnedFd, stop: &OwnedFd) -> Option<OwnedFd> {
    loop {
        match wait(sock.as_fd(), stop) {
            Woken::Ready => {}
            // A hang-up with the descriptor still queued reads as readable.
            Woken::Stop => return None,
        }
        match recv_fd(sock) {
            Ok(fd) => return fd,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
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
    fn a_refused_socket_names_its_family_and_type_and_other_calls_their_name() {
        let args = |d: libc::c_int, t: libc::c_int| [d as u64, t as u64, 0, 0, 0, 0];
        let dgram = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
        assert_eq!(
            call_target("socket", &args(libc::AF_INET, dgram)),
            "socket(AF_INET, SOCK_DGRAM)"
        );
        assert_eq!(
            call_target("socket", &args(libc::AF_NETLINK, libc::SOCK_RAW)),
            "socket(AF_NETLINK, SOCK_RAW)"
        );
        assert_eq!(
            call_target("socketpair", &args(1234, 77)),
            "socketpair(family 1234, type 77)"
        );
        // The upper half of a register is not part of the C `int`.
        let mut high = args(libc::AF_INET6, libc::SOCK_STREAM);
        high[0] |= 0xffff_ffff_0000_0000;
        assert_eq!(
            call_target("socket", &high),
            "socket(AF_INET6, SOCK_STREAM)"
        );
        assert_eq!(call_target("ptrace", &args(0, 0)), "ptrace");
    }

    fn seccomp_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "sandbox-seccomp")
            })
            .count()
    }

    /// A watcher whose child never sends a listener (its socket stays open) still ends
    /// when the run does: its thread is gone once `finish` has returned.
    #[tokio::test]
    async fn a_finished_watcher_leaves_no_thread() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let w = Watcher::start(OwnedFd::from(ours), SharedLog::default(), None).unwrap();
        // The thread names itself once it runs: wait for it, so the check below can fail.
        let running = (0..10_000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            seccomp_threads() == 1
        });
        assert!(running, "the watcher's thread never ran");
        tokio::time::timeout(std::time::Duration::from_secs(10), w.finish())
            .await
            .expect("finish returned");
        // `done` completes just before the thread returns: give it the moment to exit.
        let gone = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            seccomp_threads() == 0
        });
        assert!(gone, "the watcher's thread outlived finish");
        drop(theirs);
    }

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
