//! Real commands through `BwrapSandbox`, each effect checked from the host.
//!
//! Runs as whoever runs it: CI runs it as root and again, the same binary, as uid 65534:
//!
//! ```sh
//! mkdir -p /tmp/u65534 && chown 65534:65534 /tmp/u65534
//! setpriv --reuid=65534 --regid=65534 --clear-groups \
//!     env TMPDIR=/tmp/u65534 HOME=/tmp/u65534 $(ls target/debug/deps/bwrap-* | grep -v '\.d$')
//! ```
//!
//! Assertions that differ between the two say so; none is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::collections::BTreeSet;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_bwrap::{BwrapBackend, BwrapSandbox};
use sandbox_core::{
    NetworkMode, Sandbox, SandboxError, SandboxExt, SandboxOpts, SandboxOutcome, Status, TreeKill,
};

const PERL: &str = "/usr/bin/perl";

fn sandbox() -> BwrapSandbox {
    BwrapSandbox::new(BwrapBackend::new())
}

fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bwrap-test-ws-")
        .tempdir()
        .unwrap()
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().unwrap()
}

async fn run(opts: SandboxOpts) -> SandboxOutcome {
    sandbox().execute(opts).await.unwrap()
}

async fn sh(ws: &Path, script: &str) -> SandboxOutcome {
    run(SandboxOpts::new(ws, ["sh", "-c", script])).await
}

fn is_root() -> bool {
    // SAFETY: a plain system call without arguments.
    unsafe { libc::geteuid() == 0 }
}

/// A number no other process on the host has in its argv: `sleep MARKER` is then findable
/// from the host by its command line.
fn marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("7{}{:06}", std::process::id() % 1000, nanos % 1_000_000)
}

/// Host pids whose argv is `sleep MARKER`.
fn sleepers(marker: &str) -> Vec<u32> {
    let want = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.ends_with(want.as_bytes()) && c.starts_with(b"sleep\0"))
                .unwrap_or(false)
        })
        .collect()
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn preflight_runs_a_real_command_and_reports_the_version() {
    let p = sandbox().preflight().await.unwrap();
    assert_eq!(p.backend, "bwrap");
    let v = p.version.unwrap();
    assert!(v.starts_with(|c: char| c.is_ascii_digit()), "{v}");
}

#[tokio::test]
async fn the_capability_claims_what_the_tests_below_prove() {
    let c = BwrapBackend::new();
    let c = sandbox_core::Backend::capability(&c);
    assert!(c.confine_reads && c.confine_writes && c.readonly_carveouts);
    assert!(c.tree_kill && c.process_isolation && c.signal_status && c.drops_host_root);
    assert!(c.network_none.is_exact() && c.network_loopback.is_exact());
}

#[tokio::test]
async fn argv_is_passed_as_an_argv_with_argv0_as_given() {
    let ws = workspace();
    let tricky = ["a b", "'q'", "$HOME", "; touch pwned", "*"];
    let mut argv = vec!["printf", "%s\\n"];
    argv.extend(tricky);
    let out = run(SandboxOpts::new(ws.path(), argv)).await;
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        out.stderr.text()
    );
    assert_eq!(out.stdout.text(), tricky.join("\n") + "\n");
    assert!(!ws.path().join("pwned").exists());

    // The program is run by its canonical path, but sees the name it was called by.
    let out = sh(ws.path(), "tr '\\0' ' ' < /proc/$$/cmdline").await;
    assert!(
        out.stdout.text().starts_with("sh -c "),
        "{}",
        out.stdout.text()
    );
}

#[tokio::test]
async fn exit_137_and_sigkill_are_kept_apart() {
    let ws = workspace();
    for (script, want) in [
        ("exit 137", Status::Exited { code: 137 }),
        ("kill -KILL $$", Status::Signaled { signal: 9 }),
        ("kill -SEGV $$", Status::Signaled { signal: 11 }),
        ("exit 3", Status::Exited { code: 3 }),
        ("true", Status::Exited { code: 0 }),
    ] {
        let out = sh(ws.path(), script).await;
        assert_eq!(out.status, want, "{script}: {}", out.stderr.text());
    }
    // A command that signals its whole process group still gets its own status reported.
    let out = sh(ws.path(), "kill -TERM 0").await;
    assert_eq!(out.status, Status::Signaled { signal: 15 });
}

#[tokio::test]
async fn writes_land_only_in_the_workspace_and_belong_to_the_caller() {
    let ws = workspace();
    let out = sh(ws.path(), "echo data > created").await;
    assert!(out.status.success(), "{}", out.stderr.text());
    let meta = std::fs::metadata(ws.path().join("created")).unwrap();
    // SAFETY: plain system calls without arguments.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));

    let sibling = workspace();
    let target = canon(sibling.path()).join("escaped");
    for place in [
        target.display().to_string(),
        "/etc/sandbox-bwrap-escaped".into(),
        "/usr/sandbox-bwrap-escaped".into(),
        "/sandbox-bwrap-escaped".into(),
    ] {
        let out = sh(ws.path(), &format!("echo x > '{place}'")).await;
        assert!(!out.status.success(), "writing {place} succeeded");
        assert!(!Path::new(&place).exists(), "{place} appeared on the host");
    }
}

#[tokio::test]
async fn tmp_and_home_are_private_and_home_is_writable() {
    let ws = workspace();
    let name = format!("sandbox-bwrap-private-{}", marker());
    let out = sh(
        ws.path(),
        &format!("echo x > /tmp/{name} && echo y > \"$HOME/home-file\" && ls -A /root /home"),
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr.text());
    assert!(!Path::new("/tmp").join(&name).exists());
    assert!(
        ws.path().join("home-file").exists(),
        "HOME is the workspace by default"
    );
    // Both private tmpfs are empty: `ls -A` lists nothing under either heading.
    assert_eq!(
        out.stdout.text(),
        "/home:\n\n/root:\n",
        "{}",
        out.stdout.text()
    );

    // A HOME of the caller's choosing inside the private /home exists and is writable.
    let mut o = SandboxOpts::new(
        ws.path(),
        ["sh", "-c", "echo z > \"$HOME/f\" && cat \"$HOME/f\""],
    );
    o.env.set.push(("HOME".into(), "/home/agent".into()));
    let out = run(o).await;
    assert_eq!(out.stdout.text(), "z\n", "{}", out.stderr.text());
}

#[tokio::test]
async fn host_files_outside_the_grants_are_absent_and_named_ones_read_only() {
    let ws = workspace();
    let secret_dir = workspace();
    let secret = canon(secret_dir.path()).join("id_ed25519");
    std::fs::write(&secret, "PRIVATE KEY").unwrap();

    let out = sh(ws.path(), &format!("cat '{}'", secret.display())).await;
    assert!(!out.status.success());
    assert!(!out.stdout.text().contains("PRIVATE KEY"));

    // Named read-only: readable, not writable, unchanged on the host.
    let mut o = SandboxOpts::new(
        ws.path(),
        [
            "sh",
            "-c",
            &format!("cat '{0}'; echo changed > '{0}'", secret.display()),
        ],
    );
    o.read_only_paths = vec![secret_dir.path().to_path_buf()];
    let out = run(o).await;
    assert!(out.stdout.text().contains("PRIVATE KEY"));
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "PRIVATE KEY");

    // Named writable: the write reaches the host.
    let mut o = SandboxOpts::new(
        ws.path(),
        [
            "sh",
            "-c",
            &format!("echo changed > '{}'", secret.display()),
        ],
    );
    o.writable_paths = vec![secret_dir.path().to_path_buf()];
    assert!(run(o).await.status.success());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "changed\n");
}

#[tokio::test]
async fn carveouts_stay_read_only_inside_a_writable_workspace() {
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
    std::fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
    let script = "echo evil > .git/hooks/pre-commit; echo '[alias]' >> .git/config; echo ok > fine";
    let mut o = SandboxOpts::new(ws.path(), ["sh", "-c", script]);
    // A directory and a single file.
    o.readonly_carveouts = vec![".git/hooks".into(), ".git/config".into()];
    let out = run(o).await;
    assert!(out.status.success(), "{}", out.stderr.text());
    let err = out.stderr.text();
    assert_eq!(err.matches("Read-only file system").count(), 2, "{err}");
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    let config = std::fs::read_to_string(ws.path().join(".git/config")).unwrap();
    assert_eq!(config, "[core]\n");
    assert!(ws.path().join("fine").exists());
}

#[tokio::test]
async fn only_the_named_environment_reaches_the_command() {
    std::env::set_var("SANDBOX_BWRAP_IT_SECRET", "hunter2");
    std::env::set_var("SANDBOX_BWRAP_IT_PASSED", "yes");
    let ws = workspace();
    let mut o = SandboxOpts::new(ws.path(), ["env"]);
    o.env.pass.push("SANDBOX_BWRAP_IT_PASSED".into());
    o.env.set.push(("FOO".into(), "bar baz".into()));
    let out = run(o).await;
    let names: BTreeSet<String> = out
        .stdout
        .text()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()))
        .collect();
    let want: BTreeSet<String> = ["PATH", "HOME", "LANG", "SANDBOX_BWRAP_IT_PASSED", "FOO"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, want, "{}", out.stdout.text());
    assert!(out.stdout.text().contains("FOO=bar baz\n"));
}

#[tokio::test]
async fn only_stdio_crosses_and_host_processes_are_invisible() {
    let ws = workspace();
    let out = sh(ws.path(), "ls /proc/$$/fd").await;
    let fds: Vec<&str> = out.stdout.text().leak().lines().collect();
    assert_eq!(fds, ["0", "1", "2"]);

    // The test binary is a process of the host: nothing inside has its command line.
    let me = std::fs::read("/proc/self/cmdline").unwrap();
    let me = String::from_utf8_lossy(&me[..me.iter().position(|b| *b == 0).unwrap()]).into_owned();
    let out = sh(ws.path(), "cat /proc/[0-9]*/cmdline | tr '\\0' '\\n'").await;
    assert!(out.status.success());
    assert!(!out.stdout.text().contains(&me), "{}", out.stdout.text());
    assert!(
        out.stdout.text().contains("cat"),
        "the probe itself must be visible"
    );
}

/// A command whose daemon double-forks and calls setsid, then waits until `go` exists.
fn daemonizing_script(marker: &str) -> String {
    format!("setsid sh -c 'sleep {marker} & exit 0' & while [ ! -e go ]; do sleep 0.05; done")
}

#[tokio::test]
async fn a_setsid_double_fork_dies_when_the_command_ends() {
    let ws = workspace();
    let m = marker();
    let sb = sandbox();
    sb.run(SandboxOpts::new(
        ws.path(),
        ["sh", "-c", &daemonizing_script(&m)],
    ))
    .await
    .unwrap();
    wait_until("the daemon to start", || !sleepers(&m).is_empty()).await;
    std::fs::write(ws.path().join("go"), "").unwrap();
    let out = sb.wait().await.unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(out.policy.tree_kill, Some(TreeKill::PidNamespace));
    assert!(sleepers(&m).is_empty(), "the daemon outlived wait");
}

#[tokio::test]
async fn kill_ends_the_whole_tree() {
    let ws = workspace();
    let m = marker();
    let sb = sandbox();
    sb.run(SandboxOpts::new(
        ws.path(),
        ["sh", "-c", &daemonizing_script(&m)],
    ))
    .await
    .unwrap();
    wait_until("the daemon to start", || !sleepers(&m).is_empty()).await;
    sb.kill().await.unwrap();
    assert_eq!(sb.wait().await.unwrap().status, Status::Killed);
    assert!(sleepers(&m).is_empty(), "the daemon outlived kill");
}

#[tokio::test]
async fn the_timeout_ends_the_whole_tree() {
    let ws = workspace();
    let m = marker();
    let sb = sandbox();
    let mut o = SandboxOpts::new(ws.path(), ["sh", "-c", &daemonizing_script(&m)]);
    o.timeout = Some(Duration::from_secs(3));
    sb.run(o).await.unwrap();
    wait_until("the daemon to start", || !sleepers(&m).is_empty()).await;
    assert_eq!(sb.wait().await.unwrap().status, Status::TimedOut);
    assert!(sleepers(&m).is_empty(), "the daemon outlived the timeout");
}

const CONNECT: &str = r#"use IO::Socket::INET;
my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0], Proto => "tcp", Timeout => 5);
if ($c) { print $c "hello\n"; close($c); exit 0 } print "failed: $!\n"; exit 1;"#;

const SERVE_AND_CONNECT: &str = r#"use IO::Socket::INET;
my $l = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0, Proto => "tcp") or die "listen: $!";
my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $l->sockport, Proto => "tcp") or die "connect: $!";
my $a = $l->accept or die "accept: $!";
print $c "ping\n"; my $got = <$a>; print $got; exit($got eq "ping\n" ? 0 : 3);"#;

/// A host listener on loopback, and whether anyone connected to it.
struct HostListener(TcpListener);

impl HostListener {
    fn new() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Self(l)
    }
    fn port(&self) -> String {
        self.0.local_addr().unwrap().port().to_string()
    }
    fn received(&self) -> Option<String> {
        let (mut s, _) = self.0.accept().ok()?;
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        Some(got)
    }
}

async fn net(ws: &Path, mode: NetworkMode, script: &str, arg: &str) -> SandboxOutcome {
    let mut o = SandboxOpts::new(ws, [PERL, "-e", script, arg]);
    o.network = mode;
    run(o).await
}

#[tokio::test]
async fn network_none_and_loopback_reach_nothing_of_the_hosts() {
    let ws = workspace();
    let host = HostListener::new();
    for mode in [NetworkMode::None, NetworkMode::Loopback] {
        let out = net(ws.path(), mode, CONNECT, &host.port()).await;
        assert_eq!(
            out.status,
            Status::Exited { code: 1 },
            "{mode}: {}",
            out.stdout.text()
        );
        assert!(
            host.received().is_none(),
            "{mode}: the host listener was reached"
        );
    }
    // Without any network, not even a socket of the internet family can be made.
    let out = net(ws.path(), NetworkMode::None, SERVE_AND_CONNECT, "").await;
    assert!(!out.status.success());
    assert!(
        out.stderr.text().contains("listen"),
        "{}",
        out.stderr.text()
    );
}

#[tokio::test]
async fn network_loopback_serves_and_connects_on_its_own_loopback() {
    let ws = workspace();
    let out = net(ws.path(), NetworkMode::Loopback, SERVE_AND_CONNECT, "").await;
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        out.stderr.text()
    );
    assert_eq!(out.stdout.text(), "ping\n");
}

#[tokio::test]
async fn network_full_reaches_the_host() {
    let ws = workspace();
    let host = HostListener::new();
    let out = net(ws.path(), NetworkMode::Full, CONNECT, &host.port()).await;
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        out.stdout.text()
    );
    assert_eq!(host.received().as_deref(), Some("hello\n"));
}

const CONNECT_ABSTRACT: &str = r#"use Socket;
socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
if (connect($s, pack_sockaddr_un("\0" . $ARGV[0]))) { exit 0 } print "refused: $!\n"; exit 1;"#;

#[tokio::test]
async fn abstract_unix_sockets_of_the_host_are_out_of_reach_even_with_the_full_network() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("sandbox-bwrap-test-{}", marker());
    let l =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    l.set_nonblocking(true).unwrap();
    // Control: the same script run on the host does connect, so a refusal below is the
    // sandbox's doing.
    let host = std::process::Command::new(PERL)
        .args(["-e", CONNECT_ABSTRACT, &name])
        .status()
        .unwrap();
    assert!(host.success());
    assert!(l.accept().is_ok());

    let ws = workspace();
    for mode in [NetworkMode::Full, NetworkMode::Loopback, NetworkMode::None] {
        let out = net(ws.path(), mode, CONNECT_ABSTRACT, &name).await;
        assert_eq!(
            out.status,
            Status::Exited { code: 1 },
            "{mode}: {}",
            out.stderr.text()
        );
        assert!(
            l.accept().is_err(),
            "{mode}: reached the host's abstract socket"
        );
    }
}

#[tokio::test]
async fn the_command_holds_no_root_power_over_the_host() {
    let ws = workspace();
    // No capability at all, whoever the host is.
    let out = sh(
        ws.path(),
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
    )
    .await;
    let caps = out.stdout.text();
    assert_eq!(caps.lines().count(), 5, "{caps}");
    for l in caps.lines() {
        assert!(l.ends_with("0000000000000000"), "{l}");
    }

    // Root-only files of the host are not readable (the host has them root-only).
    for f in ["/etc/shadow", "/etc/gshadow"] {
        let Ok(meta) = std::fs::metadata(f) else {
            continue;
        };
        assert_eq!(meta.mode() & 0o004, 0, "{f} is world-readable on this host");
        let out = sh(ws.path(), &format!("cat {f}")).await;
        assert!(
            !out.status.success(),
            "{f} was readable: is_root={}",
            is_root()
        );
        assert!(out.stdout.bytes.is_empty());
    }

    // Global sysctls are read-only (`: >>` opens for writing and writes nothing).
    let out = sh(ws.path(), ": >> /proc/sys/kernel/core_pattern").await;
    assert!(!out.status.success(), "core_pattern opened for writing");

    // No setuid or setgid file can be made in the workspace, by chmod or by creation.
    std::fs::write(ws.path().join("tool"), "#!/bin/sh\n").unwrap();
    let out = sh(ws.path(), "chmod 4755 tool; chmod 2755 tool").await;
    assert!(!out.status.success());
    let mode = std::fs::metadata(ws.path().join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0, "setuid/setgid bit set: {mode:o}");
    let out = run(SandboxOpts::new(
        ws.path(),
        [
            PERL,
            "-e",
            "use Fcntl; sysopen(my $f, 'made', O_CREAT|O_WRONLY, 04755) or exit 1; exit 0",
        ],
    ))
    .await;
    assert_eq!(out.status, Status::Exited { code: 1 });
    if let Ok(m) = std::fs::metadata(ws.path().join("made")) {
        assert_eq!(m.permissions().mode() & 0o6000, 0);
    }
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_runs() {
    let ws = workspace();
    let mut o = SandboxOpts::new(ws.path(), ["true"]);
    o.read_only_paths = vec!["/".into()];
    let sb = sandbox();
    let e = sb.run(o).await.unwrap_err();
    // `/` holds /proc, /sys and the engine's socket: refused as a control grant.
    assert!(
        matches!(
            e,
            SandboxError::ControlGrant {
                field: "read_only_paths",
                ..
            }
        ),
        "{e}"
    );
    // Nothing started: the sandbox has no run to wait for.
    assert!(matches!(sb.wait().await, Err(SandboxError::State { .. })));

    let mut o = SandboxOpts::new(ws.path(), ["true"]);
    o.writable_paths = vec!["/proc/self".into()];
    let e = sandbox().run(o).await.unwrap_err();
    assert!(
        matches!(
            e,
            SandboxError::ControlGrant {
                field: "writable_paths",
                ..
            }
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_program_outside_the_grants_runs_but_its_directory_stays_hidden() {
    let ws = workspace();
    let elsewhere = workspace();
    let dir = canon(elsewhere.path());
    std::fs::write(dir.join("secret"), "sibling secret").unwrap();
    let prog = dir.join("tool");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\necho ran\ncat '{}'\n",
            dir.join("secret").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(SandboxOpts::new(ws.path(), [prog.as_os_str()])).await;
    assert_eq!(out.stdout.text(), "ran\n", "{}", out.stderr.text());
    assert!(!out.status.success());
}

#[tokio::test]
async fn snapshot_runs_against_a_copy() {
    let ws = workspace();
    std::fs::write(ws.path().join("f"), "original").unwrap();
    let mut o = SandboxOpts::new(ws.path(), ["sh", "-c", "echo changed > f; echo new > g"]);
    o.snapshot = true;
    o.capture_files = vec!["f".into()];
    let out = run(o).await;
    assert!(out.status.success(), "{}", out.stderr.text());
    assert_eq!(out.files[Path::new("f")], b"changed\n");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f")).unwrap(),
        "original"
    );
    assert!(!ws.path().join("g").exists());
}

#[tokio::test]
async fn the_process_cap_counts_this_sandbox_alone() {
    // Threads of this test process count towards the caller's own processes on the host;
    // inside the sandbox's user namespace only the sandbox's processes count, so the cap
    // is reached by the command's forks, not before the first one.
    let ws = workspace();
    let script = r#"my $n = 0; my @kids;
for (1..40) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 30; exit 0 } push @kids, $p; $n++ }
kill 'KILL', @kids; waitpid($_, 0) for @kids; print "$n\n"; exit 0;"#;
    let mut o = SandboxOpts::new(ws.path(), [PERL, "-e", script]);
    o.limits.max_processes = Some(12);
    let out = run(o).await;
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        out.stderr.text()
    );
    let n: u32 = out.stdout.text().trim().parse().unwrap();
    // The cap counts bwrap's init, the waiter and perl itself.
    assert!(
        (5..12).contains(&n),
        "forked {n} children under a cap of 12"
    );
}

#[tokio::test]
async fn nested_and_repeated_paths_do_what_was_meant() {
    // A project directory granted read-only, the workspace inside it, a vendored tree
    // inside the workspace granted read-only, and a cache named both read-only and
    // writable.
    let outer = workspace();
    let root = canon(outer.path());
    let ws = root.join("proj");
    let vendor = ws.join("vendor");
    let cache = root.join("cache");
    for d in [&vendor, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    let script = "echo a > ../outside; echo b > inside; echo c > vendor/planted; \
                  echo d > ../cache/entry; cat ../cache/entry";
    let mut o = SandboxOpts::new(&ws, ["sh", "-c", script]);
    o.read_only_paths = vec![root.clone(), vendor.clone(), cache.clone()];
    o.writable_paths = vec![cache.clone()];
    let out = run(o).await;
    assert_eq!(out.stdout.text(), "d\n", "{}", out.stderr.text());
    assert!(
        !root.join("outside").exists(),
        "the read-only parent was written"
    );
    assert!(
        ws.join("inside").exists(),
        "the workspace inside it is not writable"
    );
    assert!(
        !vendor.join("planted").exists(),
        "the read-only tree inside was written"
    );
    assert_eq!(std::fs::read_to_string(cache.join("entry")).unwrap(), "d\n");
}
