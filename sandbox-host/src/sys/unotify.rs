//! The ioctls of a seccomp filter's listener (`seccomp_unotify(2)`), for the supervisor that
//! answers a run's notified calls: receive one, check it is still pending, answer it, and
//! install a descriptor of the host's in the caller's table.
//!
//! Each wrapper takes the listener as a borrowed descriptor and plain values, and fills or
//! reads a correctly sized struct on its own stack, so the callers above this layer make no
//! raw call.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (linux/seccomp.h, kernel 6.6): the kernel wakes the
/// caller and the supervisor as a pair on one CPU, as a synchronous hand-off, instead of
/// through the scheduler's ordinary wake-up; libc names the ioctl but not the flag.
const SYNC_WAKE_UP: u64 = 1;

/// One notified call, as the kernel reported it.
#[derive(Clone, Copy, Debug)]
pub struct Notification {
    /// The cookie every answer names; valid while the call waits.
    pub id: u64,
    /// The calling thread, in the supervisor's pid namespace.
    pub pid: u32,
    /// The call's number.
    pub nr: i32,
    /// Its `AUDIT_ARCH_*`.
    pub arch: u32,
    /// Its six arguments, as registers (a pointer is an address in the caller's memory).
    pub args: [u64; 6],
}

/// Ask for the synchronous wake-up (speed only: an older kernel refuses the flag and
/// answers as fast as it can anyway).
pub fn set_sync_wake_up(listener: BorrowedFd<'_>) {
    // SAFETY: the ioctl takes a flags word by value; the descriptor is live.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SYNC_WAKE_UP,
        );
    }
}

/// Receive the next notification. Blocks whatever the descriptor's flags, so call it only
/// when a poll says one is pending. `ENOENT`: the caller died before it was read.
pub fn receive(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: `seccomp_notif` is plain data; the kernel requires it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl fills the live, correctly sized struct.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut req,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Notification {
        id: req.id,
        pid: req.pid,
        nr: req.data.nr,
        arch: req.data.arch,
        args: req.data.args,
    })
}

/// Whether the call `id` still waits (its thread has neither died nor been interrupted).
/// Asked after anything read about the caller by its pid (`/proc/PID/mem`): if it still
/// waits, that pid was still the caller's.
pub fn still_pending(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 through the pointer, which is to a live local.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id as *const u64,
        ) == 0
    }
}

/// How the call `id` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It returns `val`.
    Return(i64),
    /// It fails with this errno.
    Fail(i32),
    /// The kernel carries it out as if it had not been notified. Only for a call whose
    /// every outcome the rest of the confinement already judges: the kernel reads its
    /// arguments again, after the supervisor looked at them.
    Continue,
}

/// Answer the call `id`. `ENOENT`: it no longer waits (nothing to answer).
pub fn answer(listener: BorrowedFd<'_>, id: u64, answer: Answer) -> io::Result<()> {
    let (val, error, flags) = match answer {
        Answer::Return(v) => (v, 0, 0),
        Answer::Fail(e) => (0, -e, 0),
        Answer::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
    };
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: the ioctl reads the live, correctly sized struct.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Put a duplicate of `src` into the waiting caller's descriptor table at number `at`,
/// replacing what was there, as `dup3` would (`SECCOMP_IOCTL_NOTIF_ADDFD` with
/// `SECCOMP_ADDFD_FLAG_SETFD`, kernel 5.14); close-on-exec there when `cloexec`. The
/// call `id` still waits afterwards, for [`answer`].
pub fn install_at(
    listener: BorrowedFd<'_>,
    id: u64,
    src: BorrowedFd<'_>,
    at: u32,
    cloexec: bool,
) -> io::Result<()> {
    let mut add = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
        srcfd: src.as_raw_fd() as u32,
        newfd: at,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: the ioctl reads the live, correctly sized struct; both descriptors are live
    // for the call (the kernel takes its own reference to `src`).
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD,
            &mut add,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
