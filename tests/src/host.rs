//! The host's side of a case: checks that do not trust the probe's word.

use std::ffi::CString;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A listener on the host's `127.0.0.1` that greets every connection with a token and
/// counts them: "was the host's loopback reached?" answered by the host, not the probe.
#[derive(Debug)]
pub struct HostListener {
    addr: SocketAddr,
    token: String,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A thread that accepts on a non-blocking listener until stopped, counting visitors and
/// greeting each with `token`. Polling keeps it stoppable without a self-connection that
/// would count as a visitor.
fn greeter<S: Write>(
    mut accept: impl FnMut() -> io::Result<S> + Send + 'static,
    token: &str,
) -> (Arc<AtomicUsize>, Arc<AtomicBool>, JoinHandle<()>) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (accepted, stop, token) = (accepted.clone(), stop.clone(), token.to_owned());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match accept() {
                    Ok(mut s) => {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        let _ = s.write_all(token.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })
    };
    (accepted, stop, thread)
}

impl HostListener {
    /// Listen on an ephemeral port of `127.0.0.1`: the suite touches loopback only.
    pub fn start(token: &str) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let accept = move || {
            let (s, _) = listener.accept()?;
            s.set_nonblocking(false)?;
            Ok(s)
        };
        let (accepted, stop, thread) = greeter(accept, token);
        Ok(Self {
            addr,
            token: token.to_owned(),
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// `IP:PORT` (`127.0.0.1:PORT` unless started on another address).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The greeting.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for HostListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A listener on an abstract unix socket of the host (no file, so no path rule applies: the
/// host's network namespace is all that scopes it) that greets and counts visitors like
/// [`HostListener`].
#[derive(Debug)]
pub struct AbstractListener {
    name: String,
    token: String,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AbstractListener {
    /// Listen on the abstract name `name` (unique to the caller: a test token).
    pub fn start(name: &str, token: &str) -> io::Result<Self> {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
        let listener = UnixListener::bind_addr(&UnixAddr::from_abstract_name(name.as_bytes())?)?;
        listener.set_nonblocking(true)?;
        let accept = move || {
            let (s, _) = listener.accept()?;
            s.set_nonblocking(false)?;
            Ok(s)
        };
        let (accepted, stop, thread) = greeter(accept, token);
        Ok(Self {
            name: name.to_owned(),
            token: token.to_owned(),
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// The abstract name (without the leading NUL).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The greeting.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for AbstractListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Processes on the host whose command line has `arg` as one of its arguments, with their
/// command lines. Found by scanning `/proc`, so it works whatever pid namespace or
/// container the process is in (a pid written by the process itself would be its
/// namespace's pid, meaningless here). Zombies have an empty command line and do not
/// count: they hold nothing.
pub fn processes_with_arg(arg: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()) {
            let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, shown.trim().to_owned()));
        }
    }
    found
}

/// Poll [`processes_with_arg`] until none is left or `limit` passes; what is left.
pub async fn wait_gone(arg: &str, limit: Duration) -> Vec<(i32, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_with_arg(arg);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Poll until `path` exists (true) or `limit` passes (false).
pub async fn wait_for_file(path: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if path.exists() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A descriptor this process holds *without* close-on-exec, as a careless host (or a
/// library it uses) would: the sandbox must still not hand it to the command.
#[derive(Debug)]
pub struct LeakyFd {
    fds: Vec<i32>,
}

impl LeakyFd {
    /// Open `path` read-only without `O_CLOEXEC`, plus a duplicate at or above `high` (so
    /// a backend that closes only low descriptors is caught). Both are checked to really
    /// lack close-on-exec.
    pub fn open(path: &Path, high: i32) -> io::Result<Self> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: open on a C string we own; the descriptor is owned by the value.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut me = Self { fds: vec![fd] };
        // SAFETY: F_DUPFD (not F_DUPFD_CLOEXEC) on our own descriptor.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD, high) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        me.fds.push(dup);
        for &f in &me.fds {
            // SAFETY: reads the flags of our own descriptor.
            let flags = unsafe { libc::fcntl(f, libc::F_GETFD) };
            if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
                return Err(io::Error::other(format!(
                    "descriptor {f} has close-on-exec set; the case needs one without"
                )));
            }
        }
        Ok(me)
    }

    /// The descriptor numbers.
    pub fn fds(&self) -> &[i32] {
        &self.fds
    }
}

impl Drop for LeakyFd {
    fn drop(&mut self) {
        for &f in &self.fds {
            // SAFETY: our own descriptors, closed once.
            unsafe { libc::close(f) };
        }
    }
}

/// `(mode, uid, gid)` of `path` without following a symlink, or `None` if it is absent.
pub fn owner_and_mode(path: &Path) -> Option<(u32, u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.mode(), m.uid(), m.gid()))
}

/// A directory (mode 0755) holding `public` (0644) and `private` (of `mode`), each a line
/// naming itself in capitals: for the root host's tests of what a command may read.
pub fn public_and_private(
    mode: u32,
) -> io::Result<(tempfile::TempDir, std::path::PathBuf, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let public = dir.path().join("public");
    let private = dir.path().join("private");
    std::fs::write(&public, "PUBLIC\n")?;
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644))?;
    std::fs::write(&private, "PRIVATE\n")?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(mode))?;
    Ok((dir, public, private))
}

/// Options that run `sh -c SCRIPT probe PUBLIC PRIVATE` in `ws` (so the script reads the
/// two files as `$1` and `$2`), with `data`, the directory [`public_and_private`] made,
/// granted read-only.
pub fn read_both(
    ws: &Path,
    script: &str,
    data: &Path,
    public: &Path,
    private: &Path,
) -> sandbox_core::SandboxOpts {
    let mut o = sandbox_core::SandboxOpts::new(
        ws,
        [
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
            "probe".as_ref(),
            public.as_os_str(),
            private.as_os_str(),
        ],
    );
    o.read_only_paths = vec![data.to_path_buf()];
    o
}

/// A ramfs mounted at a directory (root only): a filesystem without idmapped mounts, for
/// the tests of a root host's fallback. Unmounted (lazily) on drop.
#[derive(Debug)]
pub struct Ramfs(std::path::PathBuf);

impl Ramfs {
    /// Mount one at `at`, an existing empty directory.
    pub fn mount(at: &Path) -> io::Result<Self> {
        let target = CString::new(at.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
        // SAFETY: mount(2) with NUL-terminated strings.
        let r = unsafe {
            libc::mount(
                c"ramfs".as_ptr(),
                target.as_ptr(),
                c"ramfs".as_ptr(),
                0,
                c"mode=0700".as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(at.to_path_buf()))
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        if let Ok(target) = CString::new(self.0.as_os_str().as_bytes()) {
            // SAFETY: umount2(2) with a NUL-terminated path.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Run the test `name` of the running test binary again, as a fresh process, in a user
/// namespace of its own: the way a test puts itself where namespaces are limited (a
/// sysctl of that namespace set) without changing the host. The copy runs as `ids` outside
/// (this process changes to them first when it is root) and as `inside` in the namespace
/// (`(0, 0)`: root there, with its capabilities there), with `inner_var=1` and `env` set;
/// each of `sysctls` is written in the namespace before the exec (the `user.max_*` limits
/// are a namespace's own, and checked for every ancestor). The copy must succeed and print
/// `inner checks passed`; its output is returned (and shown with `--nocapture`).
pub fn rerun_in_user_namespace(
    name: &str,
    inner_var: &str,
    ids: (u32, u32),
    inside: (u32, u32),
    sysctls: &[(&'static std::ffi::CStr, &'static [u8])],
    env: &[(&str, &std::ffi::OsStr)],
) -> String {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = ids;
    // Digits and spaces: no NUL to refuse.
    let uid_map = CString::new(format!("{} {uid} 1", inside.0)).unwrap_or_default();
    let gid_map = CString::new(format!("{} {gid} 1", inside.1)).unwrap_or_default();
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("the running test binary cannot be found: {e}"));
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(inner_var, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let sysctls = sysctls.to_vec();
    // SAFETY: only raw system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let write = |path: &std::ffi::CStr, data: &[u8]| -> io::Result<()> {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, data.as_ptr().cast(), data.len());
                let e = io::Error::last_os_error();
                libc::close(fd);
                if n != data.len() as isize {
                    return Err(e);
                }
                Ok(())
            };
            // The ids first (a process may map only its own uid into a namespace it made).
            if libc::getuid() != uid
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0)
            {
                return Err(io::Error::last_os_error());
            }
            // A changed uid leaves the process undumpable, its /proc/self root's.
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            // Full capabilities in the new namespace, until the exec.
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(io::Error::last_os_error());
            }
            write(c"/proc/self/setgroups", b"deny")?;
            write(c"/proc/self/uid_map", uid_map.as_bytes())?;
            write(c"/proc/self/gid_map", gid_map.as_bytes())?;
            for (path, value) in &sysctls {
                write(path, value)?;
            }
            Ok(())
        });
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("the test binary cannot run again: {e}"));
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(all.contains("inner checks passed"), "{all}");
    eprintln!("{all}");
    all
}
