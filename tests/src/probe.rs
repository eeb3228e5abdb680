//! The probe: the program the conformance suite runs inside a sandbox (the
//! `sandbox-probe` binary, and `sandbox __probe` in the command).
//!
//! Each subcommand does one thing and reports through its exit code and one JSON line on
//! stdout, so that a case never depends on a shell's or an interpreter's quirks, and the
//! host can judge the effect independently. Exit codes: 0 the operation succeeded, 1 it was
//! refused or failed (the line says why, with the errno), 2 a usage error.
//!
//! std and libc only: it must run inside a FROM-scratch container that holds nothing but it
//! and its shared libraries, so no `/bin/sh`, no `/proc` assumed (where it matters, the
//! probe says whether it could read `/proc`).
//!
//! Subcommands: `argv`, `argv-hex`, `exit N`, `signal N`, `read PATH`, `write PATH [CONTENT]`,
//! `rename FROM TO`, `link FROM TO`, `remove PATH`,
//! `connect HOST:PORT`, `proxy-connect HOST:PORT`, `proxy-connect-loop SUFFIX DISTINCT N`,
//! `proxy-idle N CLOSED MARK`,
//! `connect-abstract NAME`, `listen-connect`, `dns-udp HOST:PORT`,
//! `udp-route HOST:PORT`, `bind-any PORT HOST:PORT SECS`, `env`, `fds`, `fork N`, `alloc MB`, `spin`,
//! `sleep SECS`, `flood BYTES`, `cat`, `daemonize PIDFILE [RELEASE]`, `pwd`, `id`,
//! `chmod-setuid PATH`, `syscall NAME`, `syscall-loop NAME N`, `see-pid PID`, `open-files N`,
//! `print TEXT [SECS]`, `barrier DIR N ID`, `kill-self N`, `orphan`, `tree DIR`,
//! `blocks PATH`, `kill-parent CODE`, `readable DIR DEPTH`, `tmpfs DIR`,
//! `edit OP ARGS... [, OP ARGS...]...` (ops: `write P C`, `mkdir P`, `chmod P OCTAL`,
//! `symlink TARGET P`, `link FROM TO`, `rename FROM TO`, `remove P`, `mkfifo P`,
//! `say TEXT`, `sleep SECS`, `tree`), `tree` (the working directory's entries, one per line:
//! path, kind, mode, contents or target; sorted).

use std::ffi::{CString, OsString};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::exit;
use std::time::{Duration, Instant};

/// The probe's main: `args` as the process's argv (`args[0]` the probe, then the
/// subcommand). Never returns: the probe reports through its exit code. The
/// `sandbox-probe` binary and the `sandbox __probe` subcommand both call it.
pub fn main(args: Vec<OsString>) -> ! {
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some(cmd) = text.get(1) else {
        usage("no subcommand")
    };
    let rest = &text[2..];
    match (cmd.as_str(), rest) {
        ("argv", _) => argv(&args),
        ("argv-hex", _) => argv_hex(&args),
        ("exit", [n]) => exit(num(n) as i32),
        ("signal", [n]) => signal(num(n) as i32),
        ("kill-self", [n]) => kill_self(num(n) as i32),
        ("orphan", []) => orphan(),
        ("read", [p]) => read(p),
        ("write", [p]) => write(p, "probe"),
        ("write", [p, c]) => write(p, c),
        ("rename", [from, to]) => rename(from, to),
        ("link", [from, to]) => link(from, to),
        ("remove", [p]) => remove(p),
        ("connect", [addr]) => connect(addr),
        ("serve", [port, token, addr]) => serve(num(port) as u16, token, addr),
        ("proxy-connect", [target]) => proxy_connect(target),
        ("proxy-connect-loop", [suffix, distinct, n]) => {
            proxy_connect_loop(suffix, num(distinct), num(n))
        }
        ("proxy-idle", [n, closed, mark]) => proxy_idle(num(n), num(closed), mark),
        ("connect-abstract", [name]) => connect_abstract(name),
        ("listen-connect", []) => listen_connect(),
        ("dns-udp", [addr]) => dns_udp(addr),
        ("udp-route", [addr]) => udp_route(addr),
        ("bind-any", [port, addr, s]) => bind_any(num(port) as u16, addr, secs(s)),
        ("side-ways", [proxy, host, n]) => side_ways(proxy, host, num(n)),
        ("env", []) => env(),
        ("fds", []) => fds(),
        ("fork", [n]) => fork_many(num(n)),
        ("alloc", [mb]) => alloc(num(mb)),
        ("spin", []) => spin(),
        ("sleep", [s]) => {
            std::thread::sleep(secs(s));
            exit(0)
        }
        ("flood", [n]) => flood(num(n)),
        ("cat", []) => cat(),
        ("daemonize", [pidfile]) => daemonize(pidfile, None, false),
        ("daemonize", [pidfile, release]) => daemonize(pidfile, Some(release), false),
        ("daemonize", [pidfile, release, hard]) if hard == "hard" => {
            daemonize(pidfile, Some(release), true)
        }
        ("pwd", []) => pwd(),
        ("id", []) => id(),
        ("chmod-setuid", [p]) => chmod_setuid(p),
        ("syscall", [name]) => syscall(name),
        ("syscall-loop", [name, n]) => syscall_loop(name, num(n)),
        ("see-pid", [pid]) => see_pid(num(pid) as libc::pid_t, None),
        ("see-pid", [pid, start]) => see_pid(num(pid) as libc::pid_t, Some(num(start))),
        ("open-files", [n]) => open_files(num(n)),
        ("print", [t]) => print_then_sleep(t, None),
        ("print", [t, s]) => print_then_sleep(t, Some(secs(s))),
        ("barrier", [dir, n, id]) => barrier(dir, num(n), id),
        ("tree", [dir]) => tree(dir),
        ("blocks", [p]) => blocks(p),
        ("kill-parent", [code]) => kill_parent(num(code) as i32),
        ("readable", [dir, depth]) => readable(dir, num(depth) as usize),
        ("tmpfs", [dir]) => tmpfs(dir),
        ("edit", ops) => edit(ops),
        ("tree", []) => tree_here(),
        _ => usage(&format!(
            "unknown subcommand or arguments: {}",
            text[1..].join(" ")
        )),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("sandbox-probe: {why}");
    exit(2)
}

fn num(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("`{s}` is not a number")))
}

fn secs(s: &str) -> Duration {
    s.parse::<f64>()
        .ok()
        .and_then(|f| Duration::try_from_secs_f64(f).ok())
        .unwrap_or_else(|| usage(&format!("`{s}` is not a number of seconds")))
}

// ---------------------------------------------------------------------------------------
// Reporting: one JSON object on one line.

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON object built field by field; `emit` prints it as the one line.
struct Json(Vec<String>);

impl Json {
    fn new() -> Self {
        Self(Vec::new())
    }
    fn raw(mut self, k: &str, v: String) -> Self {
        self.0.push(format!("{}:{}", esc(k), v));
        self
    }
    fn s(self, k: &str, v: &str) -> Self {
        self.raw(k, esc(v))
    }
    fn n(self, k: &str, v: i64) -> Self {
        self.raw(k, v.to_string())
    }
    fn b(self, k: &str, v: bool) -> Self {
        self.raw(k, v.to_string())
    }
    fn emit(self) {
        let line = format!("{{{}}}\n", self.0.join(","));
        let mut out = io::stdout().lock();
        // Nothing to do if stdout is gone: the exit code still reports.
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Report a failed operation and exit 1.
fn fail(op: &str, e: &io::Error) -> ! {
    Json::new()
        .b("ok", false)
        .s("op", op)
        .n("errno", i64::from(e.raw_os_error().unwrap_or(0)))
        .s("error", &e.to_string())
        .emit();
    exit(1)
}

fn ok() -> Json {
    Json::new().b("ok", true)
}

fn cstr(p: &str) -> CString {
    CString::new(p).unwrap_or_else(|_| usage("path contains a NUL byte"))
}

// ---------------------------------------------------------------------------------------
// Subcommands.

/// Walk `dir` without following links: every regular file's content and every link's
/// target, so the host can see what a copy of a tree holds.
fn tree(dir: &str) -> ! {
    fn visit(p: &Path, files: &mut String, links: &mut String) -> io::Result<()> {
        let mut names: Vec<_> = std::fs::read_dir(p)?.collect::<io::Result<Vec<_>>>()?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let path = e.path();
            let m = std::fs::symlink_metadata(&path)?;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&path)?;
                links.push_str(&format!("{}->{};", path.display(), t.display()));
            } else if m.is_dir() {
                visit(&path, files, links)?;
            } else if m.is_file() {
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&path)?;
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)?;
                files.push_str(&format!(
                    "{}={};",
                    path.display(),
                    String::from_utf8_lossy(&buf)
                ));
            }
        }
        Ok(())
    }
    let (mut files, mut links) = (String::new(), String::new());
    match visit(Path::new(dir), &mut files, &mut links) {
        Ok(()) => {
            ok().s("files", &files).s("links", &links).emit();
            exit(0)
        }
        Err(e) => fail("tree", &e),
    }
}

/// SIGKILL our parent (a backend's helper inside the sandbox), but only when the parent
/// is the pid namespace's init or its child (pid 1 within two hops): inside a sandbox's own
/// pid namespace that is the sandbox's helper, never a host process (on the host, pid 1 is
/// never this close to a test's probe). Then exit with `code`.
fn kill_parent(code: i32) -> ! {
    fn parent_of(pid: i32) -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        after.split_whitespace().nth(1)?.parse().ok()
    }
    // SAFETY: a plain system call.
    let ppid = unsafe { libc::getppid() };
    let nested = ppid == 1 || parent_of(ppid) == Some(1);
    // SAFETY: a plain system call on numbers.
    let killed = nested && unsafe { libc::kill(ppid, libc::SIGKILL) } == 0;
    ok().b("namespaced", nested)
        .n("parent", i64::from(ppid))
        .b("signal_sent", killed)
        .emit();
    std::thread::sleep(Duration::from_millis(300));
    exit(code)
}

/// Walk `dir` to `depth` levels without following links, and list the regular files that
/// opened for reading although their mode gives others no read bit (what an unprivileged
/// user could not open), with how many files were tried.
fn readable(dir: &str, depth: usize) -> ! {
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: usize = 200_000;
    let mut found = Vec::new();
    let mut tried = 0usize;
    let mut stack = vec![(std::path::PathBuf::from(dir), 1usize)];
    while let Some((d, level)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() && level < depth {
                stack.push((p, level + 1));
            } else if m.is_file() && tried < MAX {
                tried += 1;
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(&p)
                    .is_ok();
                if opened && m.mode() & 0o004 == 0 {
                    found.push(p.display().to_string());
                }
            }
        }
    }
    ok().n("tried", tried as i64)
        .s("readable", &found.join("\n"))
        .emit();
    exit(0)
}

/// Whether `dir` is on a tmpfs, its size, and whether we can create a file in it.
fn tmpfs(dir: &str) -> ! {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    // SAFETY: a zeroed statfs is a valid out-parameter; the path outlives the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let c = cstr(dir);
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        fail("statfs", &io::Error::last_os_error());
    }
    let probe = Path::new(dir).join(format!(".probe-{}", std::process::id()));
    let writable = std::fs::write(&probe, b"x").is_ok();
    let _ = std::fs::remove_file(&probe);
    #[allow(clippy::unnecessary_cast)]
    let is_tmpfs = st.f_type as i64 == TMPFS_MAGIC;
    ok().b("tmpfs", is_tmpfs)
        .n(
            "size",
            (st.f_blocks as i64).saturating_mul(st.f_bsize as i64),
        )
        .b("writable", writable)
        .emit();
    exit(0)
}

/// The size of `p` and the bytes the filesystem allocated for it (`st_blocks`).
fn blocks(p: &str) -> ! {
    match std::fs::symlink_metadata(p) {
        Ok(m) => {
            ok().n("size", m.len() as i64)
                .n("allocated", (m.blocks() * 512) as i64)
                .emit();
            exit(0)
        }
        Err(e) => fail("blocks", &e),
    }
}

/// The whole argv, so the host can check every argument arrived byte for byte.
fn argv(args: &[OsString]) -> ! {
    let list: Vec<String> = args.iter().map(|a| esc(&a.to_string_lossy())).collect();
    Json::new()
        .raw("argv", format!("[{}]", list.join(",")))
        .emit();
    exit(0)
}

/// Every argument as hex, so that bytes that are not UTF-8 are reported exactly.
fn argv_hex(args: &[OsString]) -> ! {
    let list: Vec<String> = args
        .iter()
        .map(|a| {
            let hex: String = a.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
            format!("\"{hex}\"")
        })
        .collect();
    Json::new()
        .raw("argv", format!("[{}]", list.join(",")))
        .emit();
    exit(0)
}

/// Die by signal `n`, with its default action, so the host sees "killed by signal n".
fn signal(n: i32) -> ! {
    // SAFETY: plain system calls on our own process.
    unsafe {
        libc::signal(n, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, n);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(n);
    }
    // Still alive: the signal's default action is not to terminate.
    fail(
        "raise",
        &io::Error::other("still alive after raising the signal"),
    )
}

/// Die by signal `n` sent with `kill(getpid(), n)`, as `kill -N $$` in a shell does (a
/// process-directed signal, where `signal` raises a thread-directed one).
fn kill_self(n: i32) -> ! {
    // SAFETY: plain system calls on our own process.
    unsafe {
        libc::signal(n, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, n);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), n);
    }
    // A signal can be left pending for a moment after kill returns.
    std::thread::sleep(Duration::from_secs(2));
    fail(
        "kill",
        &io::Error::other("still alive after sending the signal to itself"),
    )
}

/// A child that forks a grandchild and exits at once; the grandchild, an orphan, exits
/// after 100 ms. Then wait up to 10 s for the orphan to be reaped by whoever adopted it
/// (`kill(pid, 0)` finds a zombie until it is reaped). Reports `reaped` and, when not,
/// the orphan's state from /proc.
fn orphan() -> ! {
    let mut pipe = [0; 2];
    // SAFETY: a pipe for the grandchild's pid.
    if unsafe { libc::pipe(pipe.as_mut_ptr()) } != 0 {
        fail("pipe", &io::Error::last_os_error());
    }
    // SAFETY: the probe is single-threaded; the children make only system calls.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail("fork", &io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: as above.
        unsafe {
            let grandchild = libc::fork();
            if grandchild == 0 {
                libc::usleep(100_000);
                libc::_exit(0);
            }
            libc::write(pipe[1], (&grandchild as *const libc::pid_t).cast(), 4);
            libc::_exit(0);
        }
    }
    let mut orphan: libc::pid_t = 0;
    let mut status = 0;
    // SAFETY: reading 4 bytes into a pid; reaping our own child.
    unsafe {
        libc::close(pipe[1]);
        libc::read(pipe[0], (&mut orphan as *mut libc::pid_t).cast(), 4);
        libc::waitpid(child, &mut status, 0);
    }
    if orphan <= 0 {
        fail("fork", &io::Error::other("the grandchild was not forked"));
    }
    let start = Instant::now();
    let reaped = loop {
        // SAFETY: signal 0 only checks existence.
        if unsafe { libc::kill(orphan, 0) } != 0 && errno() == libc::ESRCH {
            break true;
        }
        if start.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let state: String = std::fs::read_to_string(format!("/proc/{orphan}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim().chars().take(1).collect::<String>())
        })
        .unwrap_or_default();
    Json::new()
        .b("ok", reaped)
        .b("reaped", reaped)
        .n("orphan", i64::from(orphan))
        .s("state", &state)
        .emit();
    exit(if reaped { 0 } else { 1 })
}

fn read(p: &str) -> ! {
    match std::fs::read(p) {
        Ok(bytes) => {
            ok().n("bytes", bytes.len() as i64)
                .s("content", &String::from_utf8_lossy(&bytes))
                .emit();
            exit(0)
        }
        Err(e) => fail("read", &e),
    }
}

fn write(p: &str, content: &str) -> ! {
    match std::fs::write(p, content) {
        Ok(()) => {
            ok().emit();
            exit(0)
        }
        Err(e) => fail("write", &e),
    }
}

fn rename(from: &str, to: &str) -> ! {
    match std::fs::rename(from, to) {
        Ok(()) => {
            ok().emit();
            exit(0)
        }
        Err(e) => fail("rename", &e),
    }
}

/// Make a hard link `to` of `from`.
fn link(from: &str, to: &str) -> ! {
    match std::fs::hard_link(from, to) {
        Ok(()) => {
            ok().emit();
            exit(0)
        }
        Err(e) => fail("link", &e),
    }
}

/// Remove a file, or a directory with everything in it.
fn remove(p: &str) -> ! {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        _ => std::fs::remove_file(p),
    };
    match r {
        Ok(()) => {
            ok().emit();
            exit(0)
        }
        Err(e) => fail("remove", &e),
    }
}

/// Serve on `127.0.0.1:PORT`: send `token` on each connection, until one answers `done`
/// (a connection that only closes, as one the host gave up on, does not end it); then try
/// to connect to `addr` (a host service the command must not reach): reports `escaped`.
fn serve(port: u16, token: &str, addr: &str) -> ! {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|_| usage(&format!("`{addr}` is not HOST:PORT")));
    let listener = match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => fail("bind", &e),
    };
    loop {
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.write_all(token.as_bytes());
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut answer = [0u8; 4];
                if s.read_exact(&mut answer).is_ok() && &answer == b"done" {
                    break;
                }
            }
            Err(e) => fail("accept", &e),
        }
    }
    drop(listener);
    let escaped = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok();
    ok().b("served", true).b("escaped", escaped).emit();
    exit(0)
}

/// Connect, then read what the peer says (the host's listener sends a token, so reaching
/// *that* listener is proved, not just some port).
/// What the far end sends first, up to 256 bytes or its close (the host listener's token).
fn greeting(s: &mut impl Read) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < 256 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

fn connect(addr: &str) -> ! {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|_| usage(&format!("`{addr}` is not HOST:PORT")));
    let mut s = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => fail("connect", &e),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let got = greeting(&mut s);
    ok().s("received", &String::from_utf8_lossy(&got)).emit();
    exit(0)
}

/// The proxy the sandbox names in `HTTPS_PROXY` (`http://IP:PORT`).
fn proxy_addr() -> SocketAddr {
    std::env::var("HTTPS_PROXY")
        .ok()
        .and_then(|v| {
            v.trim_start_matches("http://")
                .trim_end_matches('/')
                .parse::<SocketAddr>()
                .ok()
        })
        .unwrap_or_else(|| usage("HTTPS_PROXY does not name a proxy as http://IP:PORT"))
}

/// Ask the proxy for `CONNECT target` and read the response head (a byte at a time, so
/// nothing of the tunnel is read with it): the stream and the status code (0 when none).
fn proxy_ask(proxy: &SocketAddr, target: &str) -> io::Result<(TcpStream, i64)> {
    let mut s = TcpStream::connect_timeout(proxy, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(ask.as_bytes())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match s.read(&mut byte)? {
            0 => break,
            _ => head.push(byte[0]),
        }
    }
    let status = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<i64>().ok())
        .unwrap_or(0);
    Ok((s, status))
}

/// `N` CONNECTs through the proxy, the i-th to `h{i mod DISTINCT}.SUFFIX:1`, from four
/// threads at once: how a command floods the proxy's record. Reports how many were refused
/// (403) and how many got anything else.
fn proxy_connect_loop(suffix: &str, distinct: u64, n: u64) -> ! {
    const THREADS: u64 = 4;
    let proxy = proxy_addr();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let suffix = suffix.to_string();
            std::thread::spawn(move || {
                let (mut refused, mut other) = (0u64, 0u64);
                let mut i = t;
                while i < n {
                    match proxy_ask(&proxy, &format!("h{}.{suffix}:1", i % distinct.max(1))) {
                        Ok((_, 403)) => refused += 1,
                        _ => other += 1,
                    }
                    i += THREADS;
                }
                (refused, other)
            })
        })
        .collect();
    let (mut refused, mut other) = (0u64, 0u64);
    for w in workers {
        let (r, o) = w.join().unwrap_or((0, n));
        refused += r;
        other += o;
    }
    Json::new()
        .b("ok", other == 0)
        .n("attempts", n as i64)
        .n("refused", refused as i64)
        .n("other", other as i64)
        .emit();
    exit(if other == 0 { 0 } else { 1 })
}

/// `N` connections to the proxy that send nothing or one byte, held open: how a command
/// would take the host's descriptors. Waits (up to 30 s) until `CLOSED` of them were closed
/// by the proxy, then writes `MARK` (the host measures while they are held), holds them 3
/// s more, and reports how many were opened and closed.
fn proxy_idle(n: u64, want_closed: u64, mark: &str) -> ! {
    let proxy = proxy_addr();
    let mut conns = Vec::new();
    for i in 0..n {
        match TcpStream::connect_timeout(&proxy, Duration::from_secs(5)) {
            Ok(mut s) => {
                if i % 2 == 0 {
                    let _ = s.write_all(b"C");
                }
                let _ = s.set_nonblocking(true);
                conns.push(Some(s));
            }
            Err(e) => fail("connect", &e),
        }
    }
    let mut closed = 0u64;
    let until = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 64];
    while closed < want_closed && Instant::now() < until {
        for c in conns.iter_mut() {
            let gone = match c.as_mut().map(|s| s.read(&mut buf)) {
                Some(Ok(0)) => true,
                Some(Err(e)) => e.kind() != io::ErrorKind::WouldBlock,
                _ => false,
            };
            if gone {
                *c = None;
                closed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::write(mark, b"held");
    std::thread::sleep(Duration::from_secs(3));
    Json::new()
        .b("ok", closed >= want_closed)
        .n("opened", n as i64)
        .n("closed", closed as i64)
        .emit();
    exit(if closed >= want_closed { 0 } else { 1 })
}

/// Ask the proxy that `HTTPS_PROXY` names (`http://IP:PORT`) for a tunnel to `target` with
/// HTTP `CONNECT`, without a client library or a shell: exit 0 with the proxy's status and
/// what the far end sent when it answered 200, 1 with its status when it refused.
fn proxy_connect(target: &str) -> ! {
    let proxy = proxy_addr();
    let (mut s, status) = match proxy_ask(&proxy, target) {
        Ok(x) => x,
        Err(e) => fail("ask the proxy", &e),
    };
    if status != 200 {
        Json::new()
            .b("ok", false)
            .s("op", "proxy-connect")
            .n("status", status)
            .emit();
        exit(1)
    }
    let got = greeting(&mut s);
    ok().n("status", status)
        .s("received", &String::from_utf8_lossy(&got))
        .emit();
    exit(0)
}

/// Send a DNS query (for `example.invalid`, type A) over UDP and wait for any answer: a
/// resolver reached is a side channel out, whatever it answers.
fn dns_udp(addr: &str) -> ! {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|_| usage(&format!("`{addr}` is not HOST:PORT")));
    let run = || -> io::Result<usize> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in ["example", "invalid"] {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        s.send_to(&q, addr)?;
        let mut buf = [0u8; 512];
        let (n, _) = s.recv_from(&mut buf)?;
        Ok(n)
    };
    match run() {
        Ok(n) => {
            ok().n("answer_bytes", n as i64).emit();
            exit(0)
        }
        Err(e) => fail("dns-udp", &e),
    }
}

/// `connect` a UDP socket: a route lookup only, no packet is sent. Succeeds where the
/// address has a route: how a case asks "could a datagram leave for there?" without
/// sending one to an address outside loopback.
fn udp_route(addr: &str) -> ! {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|_| usage(&format!("`{addr}` is not HOST:PORT")));
    let run = || -> io::Result<()> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect(addr)
    };
    match run() {
        Ok(()) => {
            ok().emit();
            exit(0)
        }
        Err(e) => fail("udp-route", &e),
    }
}

/// Bind TCP and UDP on every address (`0.0.0.0:PORT`) and listen; then, from a socket
/// bound to every address too, connect to `addr` (a bind must not open a way out); then
/// keep listening `SECS` seconds, counting who reaches the listener (a bind must not open a
/// way in). Reports `escaped` and `accepted`; exit 0 when it could bind.
fn bind_any(port: u16, addr: &str, listen_for: Duration) -> ! {
    let addr: SocketAddr = addr
        .parse()
        .unwrap_or_else(|_| usage(&format!("`{addr}` is not HOST:PORT")));
    let listener = match TcpListener::bind(("0.0.0.0", port)) {
        Ok(l) => l,
        Err(e) => fail("bind tcp 0.0.0.0", &e),
    };
    let _udp = match std::net::UdpSocket::bind(("0.0.0.0", port)) {
        Ok(u) => u,
        Err(e) => fail("bind udp 0.0.0.0", &e),
    };
    // SAFETY: plain socket calls on a descriptor this function owns and closes; the
    // address is a valid sockaddr_in for its length.
    let escaped = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let mut any: libc::sockaddr_in = std::mem::zeroed();
        any.sin_family = libc::AF_INET as libc::sa_family_t;
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let bound = fd >= 0 && libc::bind(fd, (&any as *const libc::sockaddr_in).cast(), len) == 0;
        let mut to: libc::sockaddr_in = std::mem::zeroed();
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_port = addr.port().to_be();
        if let std::net::IpAddr::V4(v4) = addr.ip() {
            to.sin_addr.s_addr = u32::from(v4).to_be();
        }
        let connected =
            bound && libc::connect(fd, (&to as *const libc::sockaddr_in).cast(), len) == 0;
        if fd >= 0 {
            libc::close(fd);
        }
        connected
    };
    let _ = listener.set_nonblocking(true);
    let until = Instant::now() + listen_for;
    let mut accepted = 0i64;
    while Instant::now() < until {
        match listener.accept() {
            Ok(_) => accepted += 1,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    ok().b("escaped", escaped).n("accepted", accepted).emit();
    exit(0)
}

/// The ways around a door other than `connect` to the proxy, each tried against `HOST`
/// (an address the command must not reach): `listen` on an unbound TCP socket (which
/// binds one itself), a `sendto` with `MSG_FASTOPEN` (a send that connects), and `N`
/// connects racing a second thread that keeps switching the address between `PROXY` and
/// `HOST` while each connect is on its way. Reports what each got; the host judges by its
/// listener, which must see no one.
fn side_ways(proxy: &str, host: &str, n: u64) -> ! {
    use std::sync::atomic::{AtomicBool, Ordering};
    let parse = |a: &str| -> libc::sockaddr_in {
        let a: SocketAddr = a
            .parse()
            .unwrap_or_else(|_| usage(&format!("`{a}` is not HOST:PORT")));
        // SAFETY: plain data.
        let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        s.sin_family = libc::AF_INET as libc::sa_family_t;
        s.sin_port = a.port().to_be();
        if let std::net::IpAddr::V4(v4) = a.ip() {
            s.sin_addr.s_addr = u32::from(v4).to_be();
        }
        s
    };
    let (to_proxy, to_host) = (parse(proxy), parse(host));
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY (every block below): plain socket calls on descriptors this function owns and
    // closes, with addresses that are valid `sockaddr_in`s for `len`.
    let listened = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let r = fd >= 0 && libc::listen(fd, 1) == 0;
        if fd >= 0 {
            libc::close(fd);
        }
        r
    };
    let fastopen = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let r = fd >= 0
            && libc::sendto(
                fd,
                b"x".as_ptr().cast(),
                1,
                libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL,
                (&to_host as *const libc::sockaddr_in).cast(),
                len,
            ) >= 0;
        if fd >= 0 {
            libc::close(fd);
        }
        r
    };
    // One address in memory that the racer rewrites while the main thread connects with it.
    let shared: &'static mut libc::sockaddr_in = Box::leak(Box::new(to_proxy));
    let at = shared as *mut libc::sockaddr_in as usize;
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let racer = std::thread::spawn(move || {
        let mut flip = false;
        while !stop.load(Ordering::Relaxed) {
            let a = if flip { to_host } else { to_proxy };
            // SAFETY: the leaked address lives for the process; a torn read by the other
            // thread is the point of the race, and any bytes are a valid sockaddr_in.
            unsafe { std::ptr::write_volatile(at as *mut libc::sockaddr_in, a) };
            flip = !flip;
        }
    });
    let (mut connected, mut refused) = (0i64, 0i64);
    for _ in 0..n {
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                continue;
            }
            if libc::connect(fd, (at as *const libc::sockaddr_in).cast(), len) == 0 {
                connected += 1;
            } else {
                refused += 1;
            }
            libc::close(fd);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = racer.join();
    ok().b("listened", listened)
        .b("fastopen_sent", fastopen)
        .n("connected", connected)
        .n("refused", refused)
        .emit();
    exit(0)
}

/// Connect to the abstract unix socket `NAME` (no file: only the network namespace, or a
/// filter, stands between it and the host's), then read what the peer says.
fn connect_abstract(name: &str) -> ! {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
    let addr = match UnixAddr::from_abstract_name(name.as_bytes()) {
        Ok(a) => a,
        Err(e) => fail("connect-abstract", &e),
    };
    let mut s = match UnixStream::connect_addr(&addr) {
        Ok(s) => s,
        Err(e) => fail("connect-abstract", &e),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let got = greeting(&mut s);
    ok().s("received", &String::from_utf8_lossy(&got)).emit();
    exit(0)
}

/// Serve and connect on our own loopback: what a test suite inside a sandbox does.
fn listen_connect() -> ! {
    let run = || -> io::Result<u16> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        let (mut srv, _) = l.accept()?;
        srv.write_all(b"x")?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut b = [0u8; 1];
        c.read_exact(&mut b)?;
        if &b != b"x" {
            return Err(io::Error::other("wrong byte back"));
        }
        Ok(addr.port())
    };
    match run() {
        Ok(port) => {
            ok().n("port", i64::from(port)).emit();
            exit(0)
        }
        Err(e) => fail("listen-connect", &e),
    }
}

fn env() -> ! {
    let vars: Vec<String> = std::env::vars_os()
        .map(|(k, v)| {
            format!(
                "{}:{}",
                esc(&k.to_string_lossy()),
                esc(&v.to_string_lossy())
            )
        })
        .collect();
    Json::new()
        .raw("env", format!("{{{}}}", vars.join(",")))
        .emit();
    exit(0)
}

fn fd_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Every open descriptor and what it points to. The descriptor `read_dir` uses is closed
/// once the listing ends, so it is left out by checking each entry again afterwards.
fn fds() -> ! {
    let mut found: Vec<(i32, String)> = Vec::new();
    let proc_ok = match std::fs::read_dir("/proc/self/fd") {
        Ok(rd) => {
            for e in rd.flatten() {
                if let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() {
                    let target = std::fs::read_link(e.path())
                        .map(|t| t.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    found.push((fd, target));
                }
            }
            found.retain(|(fd, _)| fd_open(*fd));
            true
        }
        Err(_) => {
            found = (0..4096)
                .filter(|&fd| fd_open(fd))
                .map(|fd| (fd, String::new()))
                .collect();
            false
        }
    };
    found.sort();
    let list: Vec<String> = found
        .iter()
        .map(|(fd, t)| format!("{{\"fd\":{fd},\"target\":{}}}", esc(t)))
        .collect();
    Json::new()
        .b("proc", proc_ok)
        .raw("fds", format!("[{}]", list.join(",")))
        .emit();
    exit(0)
}

/// Try to hold `n` children alive at once; report how many we got. A fork bomb in
/// miniature: the process cap must stop it.
fn fork_many(n: u64) -> ! {
    let mut kids: Vec<libc::pid_t> = Vec::new();
    let mut err = 0;
    for _ in 0..n {
        // SAFETY: the probe is single-threaded; the child makes only raw system calls.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => {
                err = errno();
                break;
            }
            0 => unsafe {
                // SAFETY: raw calls in the child; it dies with us, or when killed below.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                loop {
                    libc::pause();
                }
            },
            pid => kids.push(pid),
        }
    }
    let got = kids.len() as u64;
    for &k in &kids {
        // SAFETY: our own children.
        unsafe { libc::kill(k, libc::SIGKILL) };
    }
    for &k in &kids {
        // SAFETY: reaping our own children.
        unsafe { libc::waitpid(k, std::ptr::null_mut(), 0) };
    }
    Json::new()
        .b("ok", got == n)
        .n("wanted", n as i64)
        .n("got", got as i64)
        .n("errno", i64::from(err))
        .emit();
    exit(if got == n { 0 } else { 1 })
}

/// Map and touch `mb` MiB, so the memory is really used (not just reserved).
fn alloc(mb: u64) -> ! {
    let len = (mb as usize) << 20;
    // SAFETY: an anonymous private mapping of our own; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        fail("mmap", &io::Error::last_os_error());
    }
    let base = p.cast::<u8>();
    let mut off = 0;
    while off < len {
        // SAFETY: `off < len`, inside the mapping just made.
        unsafe { std::ptr::write_volatile(base.add(off), 1) };
        off += 4096;
    }
    ok().n("mb", mb as i64).emit();
    exit(0)
}

fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Write exactly `n` bytes to stdout: `BEGIN\n`, filler, `\nEND\n`, so the host can tell
/// that a capped capture kept the beginning and the end.
fn flood(n: u64) -> ! {
    let head = b"BEGIN\n";
    let tail = b"\nEND\n";
    let mut out = io::stdout().lock();
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = n;
    let mut put = |b: &[u8], left: &mut u64| {
        let take = (b.len() as u64).min(*left) as usize;
        if out.write_all(&b[..take]).is_err() {
            exit(1);
        }
        *left -= take as u64;
    };
    put(head, &mut left);
    while left > tail.len() as u64 {
        let room = (left - tail.len() as u64).min(chunk.len() as u64) as usize;
        put(&chunk[..room], &mut left);
    }
    put(tail, &mut left);
    let _ = out.flush();
    exit(0)
}

fn cat() -> ! {
    let r = io::copy(&mut io::stdin().lock(), &mut io::stdout().lock());
    match r {
        Ok(_) => exit(0),
        Err(e) => {
            eprintln!("sandbox-probe: cat: {e}");
            exit(1)
        }
    }
}

/// Double fork with `setsid` in between, as a daemon escaping its parent does. The
/// grandchild writes `PID SETSID_OK ERRNO` to PIDFILE, then lives forever, rewriting a
/// counter in `PIDFILE.beat` every 100 ms; the host checks from outside that it does not
/// outlive the run (in its `/proc`, and by the heartbeat stopping). With RELEASE, the probe itself stays
/// until that file exists (so the host can look while the run is still going). `hard`: the
/// daemon also ignores SIGTERM and, for its first two seconds, forks a SIGTERM-ignoring
/// sleeper every 5 ms (each a fork of the probe, so its argv carries the pidfile too), so
/// that a tree kill races a tree that is still growing.
fn daemonize(pidfile: &str, release: Option<&str>, hard: bool) -> ! {
    // SAFETY: the probe is single-threaded, so the children may use std freely.
    let child = unsafe { libc::fork() };
    if child < 0 {
        fail("fork", &io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: plain system calls.
        let sid = unsafe { libc::setsid() };
        let sid_errno = if sid < 0 { errno() } else { 0 };
        // SAFETY: as above.
        let grandchild = unsafe { libc::fork() };
        if grandchild == 0 {
            detach_stdio();
            // SAFETY: getpid cannot fail.
            let me = unsafe { libc::getpid() };
            let line = format!("{me} {} {sid_errno}\n", u8::from(sid >= 0));
            let tmp = format!("{pidfile}.tmp");
            if std::fs::write(&tmp, line).is_ok() {
                let _ = std::fs::rename(&tmp, pidfile);
            }
            // A heartbeat the host can watch where the daemon is not a host process
            // (under a user-space kernel such as gVisor's): it stops only when we die.
            let beat = format!("{pidfile}.beat");
            if hard {
                ignore_sigterm();
                let until = Instant::now() + Duration::from_secs(2);
                // The heartbeat beats while it forks too (its own count, below zero).
                let mut tick = 0i64;
                while Instant::now() < until {
                    tick -= 1;
                    let _ = std::fs::write(&beat, tick.to_string());
                    // SAFETY: the daemon is single-threaded; the child only sleeps.
                    if unsafe { libc::fork() } == 0 {
                        loop {
                            std::thread::sleep(Duration::from_secs(600));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            for n in 0u64.. {
                let _ = std::fs::write(&beat, n.to_string());
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // SAFETY: leave at once, without running anything of the parent's.
        unsafe { libc::_exit(if grandchild < 0 { 1 } else { 0 }) };
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let content = loop {
        if let Ok(c) = std::fs::read_to_string(pidfile) {
            break c;
        }
        if Instant::now() > deadline {
            fail("daemonize", &io::Error::other("the pidfile never appeared"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut parts = content.split_whitespace();
    let pid: i64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(-1);
    let setsid_ok = parts.next() == Some("1");
    let setsid_errno: i64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    ok().n("daemon_pid", pid)
        .b("setsid", setsid_ok)
        .n("setsid_errno", setsid_errno)
        .emit();
    if let Some(release) = release {
        let deadline = Instant::now() + Duration::from_secs(600);
        while !Path::new(release).exists() {
            if Instant::now() > deadline {
                exit(1);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    exit(0)
}

/// SIGTERM ignored, as a daemon that wants to outlive a polite kill does (kept across its
/// forks).
fn ignore_sigterm() {
    // SAFETY: setting a signal's disposition to "ignore" is a plain system call.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
}

/// A daemon lets go of the terminal and the pipes; so does ours, so that nothing but the
/// sandbox's own tree kill can end it.
fn detach_stdio() {
    // SAFETY: plain system calls on our own descriptors.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        } else {
            for fd in 0..3 {
                libc::close(fd);
            }
        }
    }
}

fn pwd() -> ! {
    match std::env::current_dir() {
        Ok(d) => {
            ok().s("cwd", &d.to_string_lossy()).emit();
            exit(0)
        }
        Err(e) => fail("getcwd", &e),
    }
}

/// Who we are: ids from the kernel, capabilities from `/proc/self/status` where readable.
fn id() -> ! {
    // SAFETY: these calls cannot fail.
    let (uid, euid, gid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    let mut j = ok()
        .n("uid", i64::from(uid))
        .n("euid", i64::from(euid))
        .n("gid", i64::from(gid))
        .n("egid", i64::from(egid));
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for (key, name) in [
        ("CapEff:", "cap_eff"),
        ("CapPrm:", "cap_prm"),
        ("CapBnd:", "cap_bnd"),
        ("NoNewPrivs:", "no_new_privs"),
        ("Groups:", "groups"),
        ("Seccomp:", "seccomp"),
    ] {
        if let Some(v) = status
            .lines()
            .find_map(|l| l.strip_prefix(key).map(str::trim))
        {
            j = j.s(name, v);
        }
    }
    j.emit();
    exit(0)
}

/// Create a file and try to make it setuid and setgid (06755); report what the file ended
/// up as. Exit 0 when the setuid bit is on the file afterwards.
fn chmod_setuid(p: &str) -> ! {
    let created = std::fs::write(p, "#!/bin/sh\nid\n");
    let path = cstr(p);
    // SAFETY: chmod on a C string we own.
    let r = unsafe { libc::chmod(path.as_ptr(), 0o6755) };
    let chmod_errno = if r < 0 { errno() } else { 0 };
    let meta = std::fs::metadata(p);
    let (mode, uid) = meta
        .as_ref()
        .map(|m| (i64::from(m.mode()), i64::from(m.uid())))
        .unwrap_or((-1, -1));
    let setuid = mode >= 0 && (mode & 0o4000) != 0;
    Json::new()
        .b("ok", setuid)
        .b("created", created.is_ok())
        .b("chmod_ok", r == 0)
        .n("chmod_errno", i64::from(chmod_errno))
        .n("mode", mode)
        .n("uid", uid)
        .emit();
    exit(if setuid { 0 } else { 1 })
}

/// Is host process `pid` visible (signal 0: nothing is delivered)?
/// Whether process `pid` exists here; with `start`, only the process that started at that
/// time (`/proc/PID/stat` field 22, clock ticks since boot: one kernel, one clock), so that
/// a process of the sandbox's own with the same number (its init is pid 1, as a
/// container's first process is) is not taken for it. Where the start cannot be read, the
/// number alone decides (seen: the safe answer for a check that it is not).
fn see_pid(pid: libc::pid_t, start: Option<u64>) -> ! {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    let e = if r < 0 { errno() } else { 0 };
    let mut exists = r == 0 || e == libc::EPERM;
    if let (true, Some(want)) = (exists, start) {
        if let Some(got) = start_time(pid) {
            exists = got == want;
        }
    }
    Json::new()
        .b("ok", exists)
        .b("exists", exists)
        .n("errno", i64::from(e))
        .emit();
    exit(if exists { 0 } else { 1 })
}

/// Field 22 of `/proc/PID/stat` (the fields after the command's closing parenthesis start
/// at field 3).
pub fn start_time(pid: libc::pid_t) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Open `/dev/null` up to `n` times, keeping every descriptor; report how many opened.
fn open_files(n: u64) -> ! {
    let mut got = 0u64;
    let mut err = 0;
    for _ in 0..n {
        // SAFETY: open on a static C string; descriptors are kept open on purpose.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            err = errno();
            break;
        }
        got += 1;
    }
    Json::new()
        .b("ok", got == n)
        .n("wanted", n as i64)
        .n("got", got as i64)
        .n("errno", i64::from(err))
        .emit();
    exit(if got == n { 0 } else { 1 })
}

fn print_then_sleep(text: &str, sleep: Option<Duration>) -> ! {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
    drop(out);
    if let Some(d) = sleep {
        std::thread::sleep(d);
    }
    exit(0)
}

/// Mark ourselves present in DIR, then wait until N probes are: proves N ran at once.
fn barrier(dir: &str, n: u64, id: &str) -> ! {
    let me = Path::new(dir).join(format!("barrier-{id}"));
    if let Err(e) = std::fs::write(&me, id) {
        fail("barrier", &e);
    }
    let count = || {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().as_bytes().starts_with(b"barrier-"))
                    .count() as u64
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = count();
        if seen >= n {
            ok().n("seen", seen as i64).emit();
            exit(0)
        }
        if Instant::now() > deadline {
            Json::new().b("ok", false).n("seen", seen as i64).emit();
            exit(1)
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// `syscall NAME`: is a dangerous call reachable? Each is invoked so that, when the kernel
// lets it through, it fails harmlessly on bad arguments (EFAULT, EINVAL, ESRCH) or does
// something confined to this process; a filter's refusal shows as EPERM, EACCES, ENOSYS
// (or EAFNOSUPPORT for socket families).

fn syscall(name: &str) -> ! {
    let (ret, e) = match invoke(name) {
        Some(r) => r,
        None => usage(&format!("unknown syscall probe `{name}`")),
    };
    let mut denied_errnos = vec![libc::EPERM, libc::EACCES, libc::ENOSYS];
    if name.starts_with("socket-") {
        denied_errnos.push(libc::EAFNOSUPPORT);
    }
    let denied = ret < 0 && denied_errnos.contains(&e);
    Json::new()
        .b("ok", !denied)
        .s("syscall", name)
        .n("ret", ret)
        .n("errno", i64::from(e))
        .b("denied", denied)
        .emit();
    exit(if denied { 1 } else { 0 })
}

/// `syscall NAME`, `n` times: how many were refused (the denial report's bound is
/// checked against this many refusals).
fn syscall_loop(name: &str, n: u64) -> ! {
    let mut refused = 0u64;
    for _ in 0..n {
        match invoke(name) {
            Some((ret, e)) if ret < 0 && matches!(e, libc::EPERM | libc::EACCES | libc::ENOSYS) => {
                refused += 1
            }
            Some(_) => {}
            None => usage(&format!("unknown syscall probe `{name}`")),
        }
    }
    Json::new()
        .b("ok", refused == 0)
        .s("syscall", name)
        .n("calls", n as i64)
        .n("refused", refused as i64)
        .emit();
    exit(if refused == n { 1 } else { 0 })
}

/// Run `f` in a forked child and return what it reported through its exit code
/// (0 = success, else the errno): for calls that would change the probe itself in a way
/// that breaks the report (a new session).
fn in_child(f: fn() -> libc::c_long) -> (i64, i32) {
    // SAFETY: the probe is single-threaded; the child runs one call and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return (-1, errno());
    }
    if pid == 0 {
        let r = f();
        let code = if r < 0 { errno() } else { 0 };
        // SAFETY: leave at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let code = libc::WEXITSTATUS(status);
    if code == 0 {
        (0, 0)
    } else {
        (-1, code)
    }
}

fn sys(r: libc::c_long) -> (i64, i32) {
    (r, if r < 0 { errno() } else { 0 })
}

fn socket(domain: i32, ty: i32, proto: i32) -> (i64, i32) {
    // SAFETY: a socket we close at once.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    let r = sys(libc::c_long::from(fd));
    if fd >= 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
    }
    r
}

fn child_unshare_mountns() -> libc::c_long {
    // SAFETY: changes only the forked child's own namespace.
    libc::c_long::from(unsafe { libc::unshare(libc::CLONE_NEWNS) })
}

fn clone_newuser() -> (i64, i32) {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY: a raw fork-like clone (no new stack: the child runs on a copy of ours) whose
    // child leaves at once without touching anything.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, null, null, null, 0) };
    if pid == 0 {
        // SAFETY: leave at once.
        unsafe { libc::_exit(0) };
    }
    let r = sys(pid);
    if pid > 0 {
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    }
    r
}

fn child_setsid() -> libc::c_long {
    // SAFETY: a new session for the forked child only.
    libc::c_long::from(unsafe { libc::setsid() })
}

fn child_setpgid() -> libc::c_long {
    // SAFETY: a new process group for the forked child only.
    libc::c_long::from(unsafe { libc::setpgid(0, 0) })
}

fn invoke(name: &str) -> Option<(i64, i32)> {
    let null = std::ptr::null::<libc::c_void>();
    // SAFETY (every arm): each call gets arguments that make it fail harmlessly or act only
    // on this process, as the section comment says.
    let r = unsafe {
        match name {
            // No process has pid -1: ESRCH when ptrace is reachable.
            "ptrace" => sys(libc::syscall(
                libc::SYS_ptrace,
                libc::PTRACE_ATTACH,
                -1 as libc::pid_t,
                null,
                null,
            )),
            // A new user namespace for this short-lived process only.
            "unshare" => sys(libc::c_long::from(libc::unshare(libc::CLONE_NEWUSER))),
            // A new mount namespace, in a child that exits at once.
            "unshare-mountns" => in_child(child_unshare_mountns),
            // A child born in a new user namespace (`clone`'s flags, which a filter reads
            // as an argument), that exits at once.
            "clone-newuser" => clone_newuser(),
            // NULL target: EFAULT when mount is reachable.
            "mount" => sys(libc::syscall(libc::SYS_mount, null, null, null, 0, null)),
            "umount" => sys(libc::syscall(libc::SYS_umount2, null, 0)),
            "pivot_root" => sys(libc::syscall(libc::SYS_pivot_root, null, null)),
            "chroot" => sys(libc::syscall(libc::SYS_chroot, null)),
            // Reads our own session keyring's id.
            "keyctl" => sys(libc::syscall(libc::SYS_keyctl, 0, -3, 0)),
            "add_key" => sys(libc::syscall(libc::SYS_add_key, null, null, null, 0, 0)),
            "request_key" => sys(libc::syscall(libc::SYS_request_key, null, null, null, 0)),
            // An invalid command: EINVAL when bpf is reachable.
            "bpf" => sys(libc::syscall(libc::SYS_bpf, -1, null, 0)),
            "userfaultfd" => {
                let r = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC);
                let out = sys(r);
                if r >= 0 {
                    libc::close(r as i32);
                }
                out
            }
            // Zero entries: EINVAL when io_uring is reachable.
            "io_uring_setup" => sys(libc::syscall(libc::SYS_io_uring_setup, 0, null)),
            "perf_event_open" => sys(libc::syscall(libc::SYS_perf_event_open, null, 0, -1, -1, 0)),
            // An empty image: ENOEXEC (or EPERM without the capability).
            "init_module" => sys(libc::syscall(libc::SYS_init_module, null, 0, null)),
            // NULL args: EFAULT (or EINVAL) when clone3 is reachable.
            "clone3" => sys(libc::syscall(libc::SYS_clone3, null, 0)),
            "setsid" => in_child(child_setsid),
            "setpgid" => in_child(child_setpgid),
            // Query only.
            "personality" => sys(libc::c_long::from(libc::personality(0xffff_ffff))),
            // On a descriptor of our own to /dev/null: ENOTTY when the ioctl is reachable;
            // never on a real terminal.
            "ioctl-tiocsti" => {
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Some((-1, errno()));
                }
                let c: u8 = b'x';
                let r = sys(libc::c_long::from(libc::ioctl(
                    fd,
                    libc::TIOCSTI,
                    &c as *const u8,
                )));
                libc::close(fd);
                r
            }
            "socket-inet" => socket(libc::AF_INET, libc::SOCK_STREAM, 0),
            "socket-inet6" => socket(libc::AF_INET6, libc::SOCK_STREAM, 0),
            "socket-unix" => socket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
            "socket-netlink" => socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
            "socket-packet" => socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
            "socket-raw-icmp" => socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
            "socket-raw-udp" => socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP),
            _ => return None,
        }
    };
    Some(r)
}

/// Several file operations in order, separated by `,`; stops at the first that fails.
fn edit(ops: &[String]) -> ! {
    for op in ops.split(|a| a == ",") {
        let r = match op {
            [o, p, c] if o == "write" => std::fs::write(p, c),
            [o, p] if o == "mkdir" => std::fs::create_dir(p),
            [o, p, m] if o == "chmod" => {
                use std::os::unix::fs::PermissionsExt;
                let mode = u32::from_str_radix(m, 8).unwrap_or_else(|_| usage("bad mode"));
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            }
            [o, t, p] if o == "symlink" => std::os::unix::fs::symlink(t, p),
            [o, a, b] if o == "link" => std::fs::hard_link(a, b),
            // As `mv` does: where the kernel refuses to reparent (EXDEV, which landlock
            // also answers for a cross-directory rename it will not allow), copy and
            // remove.
            [o, a, b] if o == "rename" => match std::fs::rename(a, b) {
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    std::fs::copy(a, b).and_then(|_| std::fs::remove_file(a))
                }
                r => r,
            },
            [o, p] if o == "remove" => match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
                _ => std::fs::remove_file(p),
            },
            [o, p] if o == "mkfifo" => {
                let c = cstr(p);
                // SAFETY: mkfifo on a C string we own.
                if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
            [o, t] if o == "say" => {
                let mut out = io::stdout().lock();
                writeln!(out, "{t}").and_then(|()| out.flush())
            }
            [o] if o == "tree" => tree_lines().and_then(|lines| {
                let mut out = io::stdout().lock();
                for l in lines {
                    writeln!(out, "{l}")?;
                }
                out.flush()
            }),
            [o, t] if o == "sleep" => {
                std::thread::sleep(secs(t));
                Ok(())
            }
            _ => usage(&format!("edit: unknown op {op:?}")),
        };
        if let Err(e) = r {
            fail(&op.join(" "), &e);
        }
    }
    ok().emit();
    exit(0)
}

/// Every entry under the working directory: `path kind mode contents-or-target`, sorted.
fn tree_here() -> ! {
    let lines = tree_lines().unwrap_or_else(|e| fail("tree", &e));
    let mut o = io::stdout().lock();
    for l in lines {
        let _ = writeln!(o, "{l}");
    }
    let _ = o.flush();
    exit(0)
}

fn tree_lines() -> io::Result<Vec<String>> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let m = std::fs::symlink_metadata(e.path())?;
            let mode = m.mode() & 0o7777;
            let t = m.file_type();
            if t.is_dir() {
                out.push(format!("{path} dir {mode:o}"));
                walk(&e.path(), &path, out)?;
            } else if t.is_symlink() {
                let target = std::fs::read_link(e.path())?;
                out.push(format!("{path} symlink -> {}", target.display()));
            } else if t.is_file() {
                let c = std::fs::read(e.path())?;
                out.push(format!(
                    "{path} file {mode:o} {}",
                    esc(&String::from_utf8_lossy(&c))
                ));
            } else {
                out.push(format!("{path} special {mode:o}"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(Path::new("."), "", &mut out)?;
    out.sort();
    Ok(out)
}
