//! The waiter: the first program a process backend runs inside its sandbox's pid
//! namespace, as the namespace's init. It starts the command, waits for it, and reports the
//! command's raw `wait` status on a pipe the host reads.
//!
//! Why it exists: an init cannot end as its command did (the kernel drops every signal an
//! init sends itself), and bwrap folds "killed by signal N" into exit code 128+N (in its own
//! exit status and in `--json-status-fd` alike), so from outside `exit 137` and a SIGKILL
//! look the same. The waiter sees the real status and hands it over. It also lets the
//! command see the `argv[0]` it was called by (bwrap 0.8 has no `--argv0`).
//!
//! Two backends run it. bwrap gets it on a descriptor (`--ro-bind-data`) and runs it as its
//! init (`--as-pid-1`). landlock's `strict` lane execs it straight from a sealed in-memory
//! file: core's `clone3` makes the process the new pid namespace's init, the backend's steps
//! confine it, and its exec replaces the host's memory it shared until then with this small
//! program's, so the command is forked from a few hundred KiB instead of a copy of the host.
//!
//! Compiled by core's build script with nothing but `std` (no crates), embedded in the
//! library, so it needs nothing installed on the host.
//!
//! Usage: `waiter STATUS_FD READY_FD FLAGS NPROC PROXY PROGRAM ARGV0 [ARGS...]`
//!
//! - `STATUS_FD`: where to write the status (4 bytes, native endian); closed on exec so the
//!   command never holds it.
//! - `READY_FD`: where to write one byte once everything below is set up, just before the
//!   command is started, then closed. The host reads it to tell "the sandbox was set up
//!   and the command started" from "the launcher (or this waiter) failed before": in the
//!   second case nothing ran, and the host reports an error instead of an exit status.
//! - `FLAGS`: `-`, or letters: `a` confines abstract unix sockets with landlock (so a command
//!   sharing the host's network namespace cannot reach the host's abstract sockets); `p`
//!   removes `PWD` from the environment (bwrap always sets it; the command gets only the
//!   variables the caller named).
//!   `s` puts the command in a landlock domain of its own, nested in the waiter's, that
//!   scopes signals (ABI 6, Linux 6.12): the command and its descendants cannot signal
//!   the waiter, so they cannot kill the one process that kills them (only needed where
//!   the waiter is not a pid namespace's init; the host checked the ABI before asking).
//! - `NPROC`: `-`, or the process cap: `RLIMIT_NPROC` set here, inside the sandbox's user
//!   namespace, counts the processes of this sandbox alone (bwrap's init and the waiter
//!   included), where on the host it would count every process of the user.
//! - `PROXY`: `-`, or `FD:PORT[,PORT...]` for network mode `proxy` and host ports: a
//!   listener on `127.0.0.1:PORT` for each port is made here, in the sandbox's own network
//!   namespace, and all are sent in one message over the unix socket `FD` (`SCM_RIGHTS`)
//!   to the host; all are closed before the command starts, so the command never holds
//!   any.
//! - `PROGRAM`: absolute path to execute; `ARGV0` and `ARGS` its argv.
//!
//! Where it runs as a pid namespace's init, the kernel delivers no signal
//! from inside the namespace to an init that has no handler for it, SIGKILL included, so
//! the command cannot kill the waiter and lose its status. As init it also reaps every
//! orphan, so exited descendants do not pile up as zombies against the process cap; and
//! its end ends every process of the namespace.
//!
//! Where it is not an init (landlock's `fast` and `trusted` lanes, which make no pid
//! namespace), it is a child subreaper (`PR_SET_CHILD_SUBREAPER`) and does the init's work
//! itself: every descendant whose parent dies is re-parented to it, sessions and process
//! groups notwithstanding, so "the waiter has no child left" means "no process of the run
//! is left". When the command ends, or the host sends `SIGTERM` (its kill and timeout),
//! or the host dies (`PR_SET_PDEATHSIG` is `SIGTERM` here), it SIGKILLs every descendant
//! it finds in `/proc` and reaps, again and again, until `waitpid` says it has no child:
//! a process that forked while its parent was being killed is re-parented to the waiter
//! and found by the next round. Only then does it report and exit, so the host's wait on
//! the waiter is a wait on the whole tree. `SIGTERM` and `SIGCHLD` are blocked and taken
//! with `sigtimedwait`, so a signal that arrives between two checks is never lost (the
//! command starts with an empty mask, as std's spawn resets it).
//!
//! Exit: the command's exit code, or 128+N when it was killed by signal N (what bwrap would
//! report anyway); 127/126 when it could not be executed, as shells do.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};

// The few libc functions std does not wrap; std links libc, so declaring them is enough.
// The constants are those of the generic Linux ABI, shared by every architecture the
// seccomp program supports (x86_64, aarch64, riscv64).
extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn fcntl(fd: i32, cmd: i32, arg: i32) -> i32;
    fn syscall(nr: i64, a: u64, b: u64, c: u64, d: u64) -> i64;
    fn open(path: *const std::ffi::c_char, flags: i32, ...) -> i32;
    fn close(fd: i32) -> i32;
    fn setrlimit(resource: i32, rlim: *const Rlimit) -> i32;
    fn sendmsg(fd: i32, msg: *const Msghdr, flags: i32) -> isize;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn getpid() -> i32;
    fn kill(pid: i32, sig: i32) -> i32;
    fn sigemptyset(set: *mut SigSet) -> i32;
    fn sigaddset(set: *mut SigSet, sig: i32) -> i32;
    fn sigprocmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
    fn sigtimedwait(set: *const SigSet, info: *mut SigInfo, timeout: *const Timespec) -> i32;
}
/// `sigset_t`: 1024 bits in glibc and musl alike (the kernel reads the first 64).
#[repr(C)]
struct SigSet([u64; 16]);
/// `siginfo_t`: 128 bytes; only the signal number is read, from `sigtimedwait`'s result.
#[repr(C)]
struct SigInfo([u64; 16]);
/// `struct timespec` of 64-bit Linux.
#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
const SIG_BLOCK: i32 = 0;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;
const SIGCHLD: i32 = 17;
const WNOHANG: i32 = 1;
const ECHILD: i32 = 10;
const EINTR: i32 = 4;
const PR_SET_PDEATHSIG: i32 = 1;
const PR_SET_CHILD_SUBREAPER: i32 = 36;
// pidfd_send_signal and pidfd_open: one number on every architecture (Linux 5.3).
const SYS_PIDFD_SEND_SIGNAL: i64 = 424;
const SYS_PIDFD_OPEN: i64 = 434;
const LANDLOCK_SCOPE_SIGNAL: u64 = 2;
/// `struct iovec`.
#[repr(C)]
struct Iovec {
    base: *mut u8,
    len: usize,
}
/// `struct msghdr` of 64-bit Linux.
#[repr(C)]
struct Msghdr {
    name: *mut u8,
    namelen: u32,
    iov: *mut Iovec,
    iovlen: usize,
    control: *mut u8,
    controllen: usize,
    flags: i32,
}
const SOL_SOCKET: i32 = 1;
const SCM_RIGHTS: i32 = 1;
const MSG_NOSIGNAL: i32 = 0x4000;
/// `sizeof(struct cmsghdr)` on 64-bit Linux (the descriptors follow it).
const CMSG_HDR: usize = 16;
/// `struct rlimit`: two `rlim_t` (64-bit on every 64-bit Linux target).
#[repr(C)]
struct Rlimit {
    cur: u64,
    max: u64,
}
const RLIMIT_NPROC: i32 = 6;
const PR_SET_DUMPABLE: i32 = 4;
const F_SETFD: i32 = 2;
const FD_CLOEXEC: i32 = 1;
// landlock_create_ruleset and landlock_restrict_self: one number on every architecture.
const SYS_LANDLOCK_CREATE_RULESET: i64 = 444;
const SYS_LANDLOCK_ADD_RULE: i64 = 445;
const SYS_LANDLOCK_RESTRICT_SELF: i64 = 446;
const LANDLOCK_RULE_PATH_BENEATH: u64 = 1;
/// `LANDLOCK_ACCESS_FS_REFER` (ABI 2; scopes need ABI 6, so the kernel has it).
const LANDLOCK_ACCESS_FS_REFER: u64 = 1 << 13;
const O_PATH: i32 = 0o10_000_000;
const O_CLOEXEC: i32 = 0o2_000_000;
/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}
const LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1;

/// `struct landlock_ruleset_attr` of ABI 6: nothing handled but the abstract-socket scope.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

fn fail(what: &str) -> ExitCode {
    eprintln!("sandbox waiter: {what}");
    ExitCode::from(126)
}

/// Connecting to abstract unix sockets created outside this process's landlock domain is
/// denied from here on (Linux 6.12+; the host checked the ABI before asking).
fn scope_abstract_unix() -> std::io::Result<()> {
    scope(LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
}

/// A landlock domain of this process's own that handles nothing but `scoped`: what it
/// scopes is denied towards every process (or socket) outside the new domain.
///
/// It also handles `REFER` and grants it beneath `/`, which leaves renames and links to
/// the outer layers: the kernel denies `REFER` in every layer of a domain that handles
/// any file access unless that layer grants it (it is "initially denied", handled or
/// not), so a scope-only layer nested in the sandbox's own would refuse every rename or
/// link across directories with `EXDEV`, `mv` and `cargo` alike.
fn scope(scoped: u64) -> std::io::Result<()> {
    let attr = RulesetAttr {
        handled_access_fs: LANDLOCK_ACCESS_FS_REFER,
        handled_access_net: 0,
        scoped,
    };
    // SAFETY: the attribute struct lives across the call and its size is passed with it.
    let fd = unsafe {
        syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            &attr as *const RulesetAttr as u64,
            std::mem::size_of::<RulesetAttr>() as u64,
            0,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a constant NUL-terminated path; an `O_PATH` open is no file access landlock
    // judges, and allocates nothing (this runs between fork and exec too).
    let root = unsafe { open(c"/".as_ptr(), O_PATH | O_CLOEXEC) };
    if root < 0 {
        let err = std::io::Error::last_os_error();
        // SAFETY: we own the ruleset descriptor and close it once.
        drop(unsafe { File::from_raw_fd(fd as i32) });
        return Err(err);
    }
    let rule = PathBeneathAttr {
        allowed_access: LANDLOCK_ACCESS_FS_REFER,
        parent_fd: root,
    };
    // SAFETY: the rule lives across the call; both descriptors are ours.
    let added = unsafe {
        syscall(
            SYS_LANDLOCK_ADD_RULE,
            fd as u64,
            LANDLOCK_RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr as u64,
            0,
        )
    };
    let add_err = std::io::Error::last_os_error();
    // SAFETY: the descriptor opened above, closed once.
    unsafe { close(root) };
    if added < 0 {
        // SAFETY: we own the ruleset descriptor and close it once.
        drop(unsafe { File::from_raw_fd(fd as i32) });
        return Err(add_err);
    }
    // SAFETY: a descriptor the kernel just returned; no_new_privs is already set by bwrap.
    let r = unsafe { syscall(SYS_LANDLOCK_RESTRICT_SELF, fd as u64, 0, 0, 0) };
    let err = std::io::Error::last_os_error();
    // SAFETY: we own the ruleset descriptor and close it once.
    drop(unsafe { File::from_raw_fd(fd as i32) });
    if r < 0 {
        return Err(err);
    }
    Ok(())
}

/// Make a listener on `127.0.0.1:PORT` for each of `ports` here and send them all on
/// `sock` in one message; then close everything. Port 0 stands for this network
/// namespace itself (`/proc/self/ns/net`), which the host needs to make the sockets of
/// published ports in.
fn hand_over_listeners(sock: i32, ports: &[u16]) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, OwnedFd};
    // SAFETY: the descriptor was named by the host for us alone; owned (and closed) here.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    let listeners = ports
        .iter()
        .map(|p| match p {
            0 => std::fs::File::open("/proc/self/ns/net").map(OwnedFd::from),
            // An address, not a name: a name goes through the resolver, which a static
            // C library cannot load its modules for (and which needs nothing here).
            p => std::net::TcpListener::bind(std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
                .map(OwnedFd::from),
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    // struct cmsghdr { size_t len; int level; int type; } then the descriptors, in a
    // buffer of u64 words so it is aligned as the kernel expects.
    let len = CMSG_HDR + 4 * listeners.len();
    let mut words = vec![0u64; len.div_ceil(8)];
    {
        // SAFETY: viewing the words as bytes; the length is the buffer's own.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8)
        };
        bytes[..8].copy_from_slice(&len.to_ne_bytes());
        bytes[8..12].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
        bytes[12..16].copy_from_slice(&SCM_RIGHTS.to_ne_bytes());
        for (i, l) in listeners.iter().enumerate() {
            let at = CMSG_HDR + 4 * i;
            bytes[at..at + 4].copy_from_slice(&l.as_raw_fd().to_ne_bytes());
        }
    }
    let mut byte = [0u8; 1];
    let mut iov = Iovec {
        base: byte.as_mut_ptr(),
        len: 1,
    };
    let msg = Msghdr {
        name: std::ptr::null_mut(),
        namelen: 0,
        iov: &mut iov,
        iovlen: 1,
        control: words.as_mut_ptr().cast(),
        controllen: words.len() * 8,
        flags: 0,
    };
    // SAFETY: every pointer in `msg` points at a live local of the length given.
    if unsafe { sendmsg(sock.as_raw_fd(), &msg, MSG_NOSIGNAL) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The signals the subreaper takes with `sigtimedwait`: the host's kill, and a child's end.
fn waited_signals() -> SigSet {
    let mut set = SigSet([0; 16]);
    // SAFETY: plain libc calls on a local set.
    unsafe {
        sigemptyset(&mut set);
        sigaddset(&mut set, SIGTERM);
        sigaddset(&mut set, SIGCHLD);
    }
    set
}

/// Wait for one of `set`'s signals, at most `timeout` (forever with `None`); the signal, or
/// `None` on a timeout or an interruption.
fn take_signal(set: &SigSet, timeout: Option<std::time::Duration>) -> Option<i32> {
    let mut info = SigInfo([0; 16]);
    let ts = timeout.map(|t| Timespec {
        sec: t.as_secs() as i64,
        nsec: i64::from(t.subsec_nanos()),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const Timespec);
    // SAFETY: every pointer is to a live local (or null for no timeout).
    let sig = unsafe { sigtimedwait(set, &mut info, ts_ptr) };
    (sig > 0).then_some(sig)
}

/// Reap every child that has ended, noting `command`'s status; whether a child is left.
fn reap_ended(command: i32, status: &mut Option<i32>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: a plain system call writing into a local that lives across it.
        let got = unsafe { waitpid(-1, &mut st, WNOHANG) };
        if got > 0 {
            if got == command {
                *status = Some(st);
            }
            continue;
        }
        if got == 0 {
            return true;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(EINTR) => continue,
            Some(ECHILD) => return false,
            // Any other error: assume children remain, and look again.
            _ => return true,
        }
    }
}

/// `(pid, ppid, is_zombie)` of every process in `/proc`.
fn process_table() -> Vec<(i32, i32, bool)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let (ppid, zombie) = stat_of(pid)?;
            Some((pid, ppid, zombie))
        })
        .collect()
}

/// `(ppid, is_zombie)` from `/proc/PID/stat` (`pid (comm) state ppid ...`; comm may hold
/// spaces and parentheses, so it is cut at the last `)`).
fn stat_of(pid: i32) -> Option<(i32, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

/// SIGKILL every live descendant of this process found in `/proc` now. Each is opened as a
/// pidfd and its parent checked again through it before the signal, so a pid that ended
/// and was reused by a process outside the tree between the scan and the signal is never
/// signalled.
fn kill_descendants() {
    // SAFETY: a plain query.
    let me = unsafe { getpid() };
    let table = process_table();
    let mut tree = std::collections::HashSet::from([me]);
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, ppid, _) in &table {
            if tree.contains(ppid) && tree.insert(*pid) {
                grew = true;
            }
        }
    }
    for (pid, _, zombie) in table {
        if pid == me || zombie || !tree.contains(&pid) {
            continue;
        }
        // SAFETY: plain system calls on a number; the descriptor is closed below.
        let fd = unsafe { syscall(SYS_PIDFD_OPEN, pid as u64, 0, 0, 0) };
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(38) {
                // ENOSYS (before Linux 5.3): the pid, checked as closely as it can be.
                if stat_of(pid).is_some_and(|(ppid, _)| tree.contains(&ppid)) {
                    // SAFETY: a signal to a process whose parent is in the run's tree.
                    unsafe { kill(pid, SIGKILL) };
                }
            }
            continue;
        }
        // SAFETY: the descriptor the kernel just returned, owned and closed here.
        let fd = unsafe { File::from_raw_fd(fd as i32) };
        if stat_of(pid).is_some_and(|(ppid, _)| tree.contains(&ppid)) {
            use std::os::fd::AsRawFd;
            // SAFETY: a signal through a pidfd to a process of the run's tree.
            unsafe {
                syscall(
                    SYS_PIDFD_SEND_SIGNAL,
                    fd.as_raw_fd() as u64,
                    SIGKILL as u64,
                    0,
                    0,
                )
            };
        }
    }
}

/// Kill and reap every descendant until none is left (the subreaper's tree kill).
fn end_the_tree(set: &SigSet, command: i32, status: &mut Option<i32>) {
    let mut pause = std::time::Duration::from_millis(1);
    while reap_ended(command, status) {
        kill_descendants();
        // A child's end wakes this at once; the pause only bounds a round that found
        // nothing to kill yet (a process forked between the scan and its parent's death).
        let _ = take_signal(set, Some(pause));
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
}

/// As a child subreaper: wait for the command's end or the host's `SIGTERM`, then end
/// the tree. The command's raw status, or `None` when the host asked for the kill first.
fn supervise(set: &SigSet, command: i32) -> Option<i32> {
    let mut status = None;
    loop {
        reap_ended(command, &mut status);
        if status.is_some() {
            break;
        }
        if take_signal(set, None) == Some(SIGTERM) {
            break;
        }
    }
    end_the_tree(set, command, &mut status);
    status
}

/// Reap every child (orphans reparent to us, the namespace's init) until `pid` ends;
/// returns its raw wait status.
fn reap_until(pid: i32) -> std::io::Result<i32> {
    loop {
        let mut status = 0;
        // SAFETY: a plain system call writing into a local that lives across it.
        let got = unsafe { waitpid(-1, &mut status, 0) };
        if got == pid {
            return Ok(status);
        }
        if got < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.len() < 8 {
        return fail(
            "usage: waiter STATUS_FD READY_FD FLAGS NPROC PROXY PROGRAM ARGV0 [ARGS...]",
        );
    }
    let fd_arg = |i: usize| {
        std::str::from_utf8(args[i].as_bytes())
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .filter(|fd| *fd > 2)
    };
    let Some(status_fd) = fd_arg(1) else {
        return fail("STATUS_FD is not a descriptor number above 2");
    };
    let Some(ready_fd) = fd_arg(2).filter(|fd| *fd != status_fd) else {
        return fail("READY_FD is not another descriptor number above 2");
    };
    let flags = args[3].as_bytes();
    // SAFETY: plain system calls on descriptor numbers and a constant. Not dumpable: the
    // command (same uid) cannot open /proc/<waiter>/fd to reach the status pipe; closed on
    // exec: the command never inherits either pipe.
    unsafe {
        if fcntl(status_fd, F_SETFD, FD_CLOEXEC) != 0 {
            return fail("STATUS_FD is not open");
        }
        if fcntl(ready_fd, F_SETFD, FD_CLOEXEC) != 0 {
            return fail("READY_FD is not open");
        }
        if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            return fail("cannot make the waiter non-dumpable");
        }
    }
    if flags.contains(&b'a') {
        if let Err(e) = scope_abstract_unix() {
            return fail(&format!("cannot confine abstract unix sockets: {e}"));
        }
    }
    if args[4] != "-" {
        let Some(n) = std::str::from_utf8(args[4].as_bytes())
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            return fail("NPROC is not a number");
        };
        let lim = Rlimit { cur: n, max: n };
        // SAFETY: a plain system call on a struct that lives across it.
        if unsafe { setrlimit(RLIMIT_NPROC, &lim) } != 0 {
            return fail(&format!(
                "cannot set the process cap: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if args[5] != "-" {
        let parsed = std::str::from_utf8(args[5].as_bytes())
            .ok()
            .and_then(|s| s.split_once(':'))
            .and_then(|(fd, ports)| {
                let ports = ports
                    .split(',')
                    .map(|p| p.parse::<u16>().ok())
                    .collect::<Option<Vec<_>>>()?;
                Some((fd.parse::<i32>().ok()?, ports))
            })
            .filter(|(fd, ports)| {
                *fd > 2 && *fd != status_fd && *fd != ready_fd && !ports.is_empty()
            });
        let Some((fd, ports)) = parsed else {
            return fail("PROXY is not FD:PORT[,PORT...]");
        };
        if let Err(e) = hand_over_listeners(fd, &ports) {
            return fail(&format!("cannot hand the host its listeners: {e}"));
        }
    }
    // Not a pid namespace's init: the waiter holds the tree as a child subreaper instead.
    // SAFETY: a plain query.
    let subreaper = unsafe { getpid() } != 1;
    let waited = waited_signals();
    if subreaper {
        // SAFETY: plain system calls on constants and a local set. The death signal
        // replaces the host's SIGKILL (kept across the exec until here), so the host's
        // death ends the tree too rather than only the waiter.
        unsafe {
            if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                return fail(&format!(
                    "cannot become the run's subreaper: {}",
                    std::io::Error::last_os_error()
                ));
            }
            if sigprocmask(SIG_BLOCK, &waited, std::ptr::null_mut()) != 0 {
                return fail("cannot block the signals the waiter waits for");
            }
            if prctl(PR_SET_PDEATHSIG, SIGTERM as u64, 0, 0, 0) != 0 {
                return fail("cannot set the waiter's death signal");
            }
        }
    }
    // SAFETY: the descriptors were checked open above and are owned here alone.
    let mut status_out = unsafe { File::from_raw_fd(status_fd) };
    // SAFETY: as above.
    let mut ready_out = unsafe { File::from_raw_fd(ready_fd) };

    let mut cmd = Command::new(&args[6]);
    if flags.contains(&b'p') {
        cmd.env_remove("PWD");
    }
    cmd.arg0(&args[7]).args(&args[8..]);
    // Its own process group: a command that signals its group (`kill 0`) does not take
    // the waiter, and so its report, down with it.
    cmd.process_group(0);
    if flags.contains(&b's') {
        // SAFETY: in the forked child of this single-threaded program, before its exec:
        // `scope` makes only system calls and allocates nothing.
        unsafe {
            cmd.pre_exec(|| scope(LANDLOCK_SCOPE_SIGNAL));
        }
    }
    // Everything is set up: from here the command runs (or fails to execute, which is its
    // own outcome, 126/127). A host that gets no byte reports that nothing ran.
    if ready_out.write_all(b"r").is_err() {
        return fail("cannot tell the host the sandbox is set up");
    }
    drop(ready_out);
    let raw = match cmd.spawn() {
        Ok(child) if subreaper => match supervise(&waited, child.id() as i32) {
            Some(status) => status,
            // The host's kill: the tree is gone; the host reports the kill itself.
            None => return ExitCode::from(128 + SIGKILL as u8),
        },
        Ok(child) => match reap_until(child.id() as i32) {
            Ok(status) => status,
            Err(e) => return fail(&format!("waiting for the command: {e}")),
        },
        Err(e) => {
            eprintln!(
                "sandbox: cannot execute {}: {e}",
                std::path::Path::new(&args[6]).display()
            );
            // As shells report it: 127 not found, 126 found but not executable.
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            code << 8
        }
    };
    // A failed report only loses precision (the host falls back to the exit status).
    let _ = status_out.write_all(&raw.to_ne_bytes());
    drop(status_out);
    let status = std::process::ExitStatus::from_raw(raw);
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::from(255),
    }
}
