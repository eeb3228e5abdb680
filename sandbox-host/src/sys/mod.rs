//! The raw system calls of core's spawn, in one place: `clone3` and the pidfd verbs in the
//! parent, and the calls the child makes on its way to `execve`.
//!
//! # Why the child may not call into glibc
//!
//! A process made by a raw `clone3` is a copy of a multi-threaded host that glibc was not
//! told about: glibc's `fork` would have taken its allocator's and stdio's locks before
//! copying and reset them after, and rebuilt its thread list. Here another host thread may
//! have held any of those locks at the moment of the copy, and the child's glibc still
//! believes the host's threads exist. So between `clone3` and `execve` the child makes
//! plain system calls only: glibc's thin wrappers (`open`, `write`, `dup2`, `chdir`,
//! `prctl`, `execve`, `_exit`, ...) are fine, but not its `fork` (use [`fork_raw`]: the
//! atfork handlers and the allocator's locks) nor its `setuid` family (use [`become`]:
//! glibc signals every thread it knows of to change credentials, waiting on the thread
//! list's lock). std's own `clone3` path (`CommandExt::create_pidfd`) has the same rule.
//!
//! A child of [`clone3_vm`] is not even a copy: it runs in the host's memory, beside the
//! host's other threads, until it execs. On top of the rule above it writes nothing but
//! its own stack (everything else it would write, the host would see).

pub mod door;
pub mod unotify;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `CLONE_INTO_CGROUP` (linux/sched.h, kernel 5.7). libc's constant is a `c_int` that
/// overflows and is deprecated (libc#3584), so it is spelled out here.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `CLONE_CLEAR_SIGHAND` (kernel 5.5): every handled signal starts at its default in the
/// child, so the host runtime's handlers (tokio's `SIGCHLD`) never run in it before exec.
/// Ignored signals stay ignored, as across exec.
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// Which side of [`clone3`] this is.
pub(crate) enum Cloned {
    /// The new process.
    Child,
    /// The caller, with the child's pid and a pidfd for it.
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
}

/// `clone3` as a fork (no shared memory; `SIGCHLD` at exit, so it is an ordinary child),
/// with `CLONE_PIDFD`, and with `CLONE_INTO_CGROUP` when `cgroup` (a directory descriptor
/// of a cgroup v2) is given: the child is born a member, which takes the cgroup core's
/// threadgroup lock only for reading, where a later write to `cgroup.procs` takes it for
/// writing and waits for an RCU grace period after a quiet spell (about 10 ms). The child
/// is born in the new namespaces `namespaces` names (`CLONE_NEWPID`, `CLONE_NEWUSER`; 0 for
/// none).
///
/// # Safety
///
/// On [`Cloned::Child`] the caller is the child: it must keep to the module's rule (plain
/// system calls on memory prepared before the call, no allocation, no glibc `fork` or
/// `setuid`) and end in `execve` or `_exit`, never returning into code the parent runs.
pub(crate) unsafe fn clone3(cgroup: Option<BorrowedFd<'_>>, namespaces: u64) -> io::Result<Cloned> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: `clone_args` is plain integers; all zero is "no such field".
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = libc::CLONE_PIDFD as u64 | CLONE_CLEAR_SIGHAND | namespaces;
    args.pidfd = std::ptr::addr_of_mut!(pidfd) as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: a valid `clone_args` of the size passed; without `CLONE_VM` the child runs
    // on its own copy of this stack, as after `fork`, so returning from the call is sound
    // on both sides (what the child may do then is the caller's contract).
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match r {
        r if r < 0 => Err(io::Error::last_os_error()),
        0 => Ok(Cloned::Child),
        pid => Ok(Cloned::Parent {
            pid: pid as libc::pid_t,
            // SAFETY: the kernel stored a new descriptor (close-on-exec, ours) there.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        }),
    }
}

/// The stack a child of [`clone3_vm`] runs on until its exec: the child shares the
/// caller's memory, so it cannot use the caller's stack. Mapped for each spawn (only the
/// pages the child touches are ever made), with an unmapped guard page below it so that
/// an overflow kills the child instead of writing into the host's memory.
#[cfg(target_arch = "x86_64")]
pub(crate) struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    /// 1 MiB: a debug build's steps between clone and exec use a few tens of KiB.
    const SIZE: usize = 1 << 20;
    const GUARD: usize = 4096;

    pub(crate) fn new() -> io::Result<Self> {
        let len = Self::SIZE + Self::GUARD;
        // SAFETY: a fresh private anonymous mapping, not aliased by anything; the guard
        // page is inside it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Self { base, len };
            if libc::mprotect(base, Self::GUARD, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; by the time it drops, the child that ran on it
        // has exec'd or exited (`CLONE_VFORK` held the caller until then).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// `clone3` like glibc's `posix_spawn`: the child shares this process's memory
/// (`CLONE_VM`) and the calling thread is suspended until the child execs or exits
/// (`CLONE_VFORK`), so nothing is copied: a fork copies the page tables of the whole host
/// and both sides then fault on every page either writes, which for a host holding a few
/// hundred MiB costs more than the whole sandboxed start. Otherwise as [`clone3`]: a pidfd,
/// `SIGCHLD` at exit, handlers cleared, born into `cgroup` and `namespaces`. The child runs `entry(arg)` on
/// `stack` and never returns; the caller returns only once the child has left this memory.
///
/// Only on x86_64, where the child's first instructions are written here: it must call
/// `entry` on the new stack before touching any memory, which no Rust function returning
/// from the system call in two processes at once can promise. Elsewhere, [`clone3`].
///
/// # Safety
///
/// `entry` keeps to the module's rule and more: until its `execve` or `_exit` it writes
/// no memory but its own stack's, since every write lands in the host (the other threads
/// of the host keep running); it must reach `execve` or `_exit` without waiting for the
/// caller, which is suspended. `arg` stays valid for that whole time (it may point into
/// the caller's stack: the caller is suspended). It must not panic either: the child runs
/// with the spawning thread's thread-local storage, so std's panic count would stay raised
/// in that thread after the child `_exit`s (and its next `MutexGuard` drop would poison).
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn clone3_vm(
    cgroup: Option<BorrowedFd<'_>>,
    namespaces: u64,
    stack: &ChildStack,
    entry: unsafe extern "C" fn(*mut libc::c_void) -> !,
    arg: *mut libc::c_void,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: `clone_args` is plain integers; all zero is "no such field".
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64
        | CLONE_CLEAR_SIGHAND
        | namespaces;
    args.pidfd = std::ptr::addr_of_mut!(pidfd) as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    // The kernel starts the child with its stack pointer at `stack + stack_size`, 16-byte
    // aligned since the mapping is page-aligned and its length a multiple of pages.
    // SAFETY: inside the mapping.
    args.stack = unsafe { stack.base.add(ChildStack::GUARD) } as u64;
    args.stack_size = ChildStack::SIZE as u64;
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    let ret: isize;
    // SAFETY: a valid `clone_args` of the size passed. In the caller, `syscall` changes
    // only `rax` (the result), `rcx` and `r11`, all declared. The child starts after the
    // `syscall` with `rax` 0, every other register as the caller had it and `rsp` at the top
    // of `stack`: it clears the frame pointer (no frame above it to walk into) and calls
    // `entry(arg)` from `r12`/`r13`, which a system call preserves, touching nothing on the
    // caller's stack; `entry` never returns (`ud2` if it did).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") std::ptr::addr_of_mut!(args),
            in("rsi") std::mem::size_of::<libc::clone_args>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret as i32));
    }
    // SAFETY: the kernel stored a new descriptor (close-on-exec, ours) there.
    Ok((ret as libc::pid_t, unsafe { OwnedFd::from_raw_fd(pidfd) }))
}

/// `fork` for a step between core's `clone3` and `execve` (a pid namespace's init, a
/// helper that must not exec): glibc's `fork` runs the atfork handlers and takes the
/// allocator's locks, which this process may have inherited held (module docs). Returns
/// 0 in the new process, its pid in the caller.
///
/// # Safety
///
/// As after `fork` in a multi-threaded process: the new process keeps to the module's rule
/// and ends in `execve` or `_exit` (or returns into a caller that does).
pub unsafe fn fork_raw() -> io::Result<libc::pid_t> {
    // SAFETY: `clone` with only an exit signal is `fork`; no stack, tid or TLS pointers
    // are passed (zero), so their order, which differs between architectures, is moot.
    let r = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as libc::pid_t)
    }
}

/// Become `uid`/`gid` with no supplementary groups, for this (single-threaded) process,
/// by the raw calls rather than glibc's wrappers (module docs).
///
/// The parent-death signal survives: the kernel clears it on any change of the effective
/// or filesystem ids (prctl(2)), which would leave a root host's handed-over launch (a pid
/// namespace's init among them) alive after the host is SIGKILLed. It is read first and
/// set again after the change; a host that dies in between is seen by the launch's ready
/// pipe, whose write then fails.
///
/// # Safety
///
/// For a single-threaded process between fork and exec: in a multi-threaded one it would
/// change the calling thread's credentials only.
pub unsafe fn become_ids(uid: u32, gid: u32) -> io::Result<()> {
    use rustix::process::{parent_process_death_signal, set_parent_process_death_signal, Gid, Uid};
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    // rustix makes these system calls directly (no allocation, no locks).
    let death = parent_process_death_signal()?;
    set_thread_groups(&[])?;
    let gid = Gid::from_raw(gid);
    set_thread_res_gid(gid, gid, gid)?;
    let uid = Uid::from_raw(uid);
    set_thread_res_uid(uid, uid, uid)?;
    if death.is_some() {
        set_parent_process_death_signal(death)?;
    }
    Ok(())
}

/// `SIGKILL` to the process behind `pidfd`: never another process, even once it is
/// reaped and its pid reused (then `ESRCH`).
pub(crate) fn pidfd_kill(pidfd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL)?;
    Ok(())
}

/// Send `signal` to the process behind `pidfd`.
pub(crate) fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain system call on a descriptor we hold; the last two arguments are the
    // null info and zero flags the kernel documents for a plain signal.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reap the process behind `pidfd` if it has ended (`waitid(P_PIDFD, WEXITED | WNOHANG)`),
/// as a `wait` status.
pub(crate) fn pidfd_try_reap(pidfd: BorrowedFd<'_>) -> io::Result<Option<libc::c_int>> {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let status = loop {
        match waitid(
            WaitId::PidFd(pidfd),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    Ok(status.map(|s| {
        // Back to the status word `waitpid` gives, which `ExitStatus::from_raw` reads.
        if let Some(code) = s.exit_status() {
            (code & 0xff) << 8
        } else {
            let sig = s.terminating_signal().unwrap_or(libc::SIGKILL);
            sig | if s.dumped() { 0x80 } else { 0 }
        }
    }))
}

/// Wait up to `timeout` (forever for `None`) for the process behind `pidfd` to end (a
/// pidfd turns readable then); whether it has.
pub(crate) fn pidfd_wait_exit(pidfd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    loop {
        match poll(&mut fds, timeout.as_ref()) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// In the child: make `fd` the descriptor `target` (0, 1 or 2), inherited across exec.
/// `dup2` clears close-on-exec on the copy; when `fd` already is `target`, `dup2` does
/// nothing, so the flag is cleared by hand.
///
/// # Safety
///
/// Plain system calls; callable between clone and exec.
pub(crate) unsafe fn dup_onto(fd: libc::c_int, target: libc::c_int) -> io::Result<()> {
    // SAFETY: `dup2` and `fcntl` on descriptor numbers.
    unsafe {
        if fd == target {
            return check(libc::fcntl(fd, libc::F_SETFD, 0));
        }
        loop {
            if libc::dup2(fd, target) >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// In the child: what std's spawn did before its pre-exec steps, after the stdio: enter
/// `cwd`, lead a new process group, and put `SIGPIPE` back to its default (a Rust host
/// ignores it, and an ignored signal stays ignored across exec: `yes | head` in the
/// sandbox would then see `EPIPE` instead of dying quietly). The signal mask is emptied
/// by [`super::child::ChildSetup::run`], on both spawn paths.
///
/// # Safety
///
/// Plain system calls on a C string prepared before the clone.
pub(crate) unsafe fn enter(cwd: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; `chdir`, `setpgid` and `sigaction` are system calls.
    unsafe {
        check(libc::chdir(cwd.as_ptr()))?;
        check(libc::setpgid(0, 0))?;
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        check(libc::sigaction(libc::SIGPIPE, &dfl, std::ptr::null_mut()))?;
    }
    Ok(())
}

/// In the child: `execve`; returns only its error.
///
/// # Safety
///
/// `argv` and `envp` are NUL-terminated arrays of pointers to C strings that outlive the
/// call, prepared before the clone.
pub(crate) unsafe fn execve(
    program: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Error {
    debug_assert!(argv.last().is_some_and(|p| p.is_null()));
    debug_assert!(envp.last().is_some_and(|p| p.is_null()));
    // SAFETY: the caller's contract; `execve` is a system call.
    unsafe { libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// The marker after the errno on the exec-error pipe (as std's spawn writes it), so that
/// a short or stray write is not taken for a report.
pub(crate) const EXEC_ERROR_FOOTER: [u8; 4] = *b"NOEX";

/// In the child: report `errno` on the exec-error pipe and exit. Never returns.
///
/// # Safety
///
/// Plain system calls; `pipe` is the write end made before the clone.
pub(crate) unsafe fn report_and_exit(pipe: libc::c_int, errno: i32) -> ! {
    let mut msg = [0u8; 8];
    msg[..4].copy_from_slice(&errno.to_be_bytes());
    msg[4..].copy_from_slice(&EXEC_ERROR_FOOTER);
    // SAFETY: `write` of a stack buffer and `_exit`; a failed write leaves the parent
    // reading end-of-file with a dead child, which it reports as an error too.
    unsafe {
        let mut off = 0;
        while off < msg.len() {
            let n = libc::write(pipe, msg[off..].as_ptr().cast(), msg.len() - off);
            if n > 0 {
                off += n as usize;
            } else if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            } else {
                break;
            }
        }
        libc::_exit(127)
    }
}

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
/// `from_raw_os_error` do not allocate), no locks, no `Drop` of anything that frees.
///
/// The child may also share the host's memory until it execs (core's vfork-like spawn,
/// `sys::clone3_vm`), with the host's other threads running: a step writes no memory but
/// locals on its own stack, and it returns (or fails) without waiting for the thread that
/// spawned it, which is suspended until the exec. A process that must outlive the exec
/// (a pid namespace's init) is therefore never a step's: the spawned process is born
/// the init ([`super::BornIn`]) and execs a program that is (core's waiter).
///
/// The trait is `unsafe` to implement so that every implementation says, in a `SAFETY`
/// comment, why it keeps to this.
pub unsafe trait PreExec: Send + Sync + 'static {
    /// What the step does, in a few words: how a launch's steps are listed in order, so a
    /// backend's composition (namespaces before the listeners, the filter last) is unit
    /// tested without a fork.
    fn name(&self) -> &'static str;
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

/// Runs `f` when the process exits normally (`exit`, a return from `main`), after the
/// runtime's threads are gone: where a pool of warm containers is removed when its host
/// never dropped it. Registered once per call; `f` runs on the exiting thread.
pub fn at_exit(f: extern "C" fn()) -> io::Result<()> {
    // SAFETY: `atexit` only stores the pointer. `f` is a Rust `extern "C" fn`, which aborts
    // rather than unwinds into its C caller, and which the C library calls with no
    // arguments, as its type says.
    match unsafe { libc::atexit(f) } {
        0 => Ok(()),
        _ => Err(io::Error::other(
            "the C library's table of exit handlers is full",
        )),
    }
}
