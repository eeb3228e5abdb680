//! Real commands under runsc, judged from the host: what only this backend does (its
//! bundle, its uid rules, runsc's leftovers). The shared behaviour is the conformance
//! suite's (`cargo xtask conformance --backend gvisor`).
//!
//! Skipped, with a message, on a host without runsc; `SANDBOX_TEST_REQUIRE=gvisor` (or
//! `all`) makes that a failure, as CI does.

#![allow(clippy::unwrap_used)] // test helpers: a failed step is a failed test

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use sandbox_core::{Sandbox, SandboxExt, SandboxOpts, Status};
use sandbox_gvisor::GvisorBackend;

/// One test at a time: the leftover checks look at every run of this process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn available() -> bool {
    let found = which::which("runsc").is_ok();
    if !found {
        let required = std::env::var("SANDBOX_TEST_REQUIRE").is_ok_and(|v| {
            v.split(',')
                .any(|b| b.trim() == "gvisor" || b.trim() == "all")
        });
        assert!(
            !required,
            "gvisor is required (SANDBOX_TEST_REQUIRE) but runsc is not installed"
        );
        eprintln!("skipped: runsc is not installed");
    }
    found
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A workspace owned by `uid` (on a root host; otherwise the caller's own).
fn workspace_of(uid: Option<u32>) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    if let (Some(uid), true) = (uid, is_root()) {
        nix::unistd::chown(
            d.path(),
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(uid)),
        )
        .unwrap();
    }
    d
}

fn workspace() -> tempfile::TempDir {
    workspace_of(None)
}

/// What every runsc process of this binary's runs has in its command line, the gofer
/// included: the bundle directory's prefix (`--root=TMP/sandbox-runs-UID/sandbox-gvisor@…/state`).
fn ours() -> String {
    sandbox_core::runs_dir()
        .join("sandbox-gvisor@")
        .to_string_lossy()
        .into_owned()
}

/// The runsc processes whose command line names `needle`.
fn runsc_processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains("runsc") && cmd.contains(needle) {
            found.push(cmd);
        }
    }
    found
}

/// The pids of [`runsc_processes`].
fn runsc_pids(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains("runsc") && cmd.contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// No runsc process of ours, no bundle made since `before`, no staging mount.
fn assert_nothing_left(before: &[PathBuf]) {
    assert_eq!(runsc_processes(&ours()), Vec::<String>::new());
    let after: Vec<_> = bundles()
        .into_iter()
        .filter(|b| !before.contains(b))
        .collect();
    assert_eq!(after, Vec::<PathBuf>::new());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("sandbox-gvisor@"), "{mounts}");
}

/// The run directories of gVisor bundles: in the runs directory (`$TMPDIR/sandbox-runs-UID`)
/// and, from before it, the temp dir itself.
fn bundles() -> Vec<PathBuf> {
    [sandbox_core::runs_dir(), std::env::temp_dir()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sandbox-gvisor@"))
        })
        .collect()
}

#[tokio::test]
async fn a_command_runs_writes_its_workspace_and_leaves_nothing() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    let mut opts = SandboxOpts::new(
        ws.path(),
        [
            "/bin/sh",
            "-c",
            "echo made > out.txt; cat \"$1\" && echo READ; exit 7",
            "sh",
            secret.to_str().unwrap(),
        ],
    );
    opts.timeout = Some(Duration::from_secs(60));
    let before = bundles();
    let sb = sandbox_gvisor::sandbox();
    let out = sb.execute(opts).await.unwrap();
    assert_eq!(
        out.status,
        Status::Exited { code: 7 },
        "{}",
        out.stderr.text()
    );
    assert!(!out.stdout.text().contains("READ"), "{}", out.stdout.text());
    let made = ws.path().join("out.txt");
    assert_eq!(
        std::fs::read_to_string(&made).ok().as_deref(),
        Some("made\n"),
        "{}",
        out.stderr.text()
    );
    // The file belongs to the workspace's owner on disk: the caller, or on a root host
    // root (the command ran as `nobody` through an idmapped mount).
    assert_eq!(
        std::fs::metadata(&made).unwrap().uid(),
        nix::unistd::geteuid().as_raw()
    );
    // Nothing of runsc is left: no process of this run, no bundle, no mount.
    assert_nothing_left(&before);
}

#[tokio::test]
async fn kill_leaves_no_runsc_process_behind() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let mut opts = SandboxOpts::new(
        ws.path(),
        ["/bin/sh", "-c", "(setsid sleep 300 &) ; sleep 300"],
    );
    opts.timeout = Some(Duration::from_secs(120));
    let sb = sandbox_gvisor::sandbox();
    sb.run(opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ours = ours();
    assert!(
        !runsc_processes(&ours).is_empty(),
        "runsc is not running after 1.5 s"
    );
    sb.kill().await.unwrap();
    let out = sb.wait().await.unwrap();
    assert_eq!(out.status, Status::Killed);
    assert_eq!(runsc_processes(&ours), Vec::<String>::new());
}

#[tokio::test]
async fn sigkill_of_runsc_from_outside_leaves_nothing() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let mut opts = SandboxOpts::new(ws.path(), ["/bin/sh", "-c", "sleep 300"]);
    opts.timeout = Some(Duration::from_secs(120));
    let before = bundles();
    let sb = sandbox_gvisor::sandbox();
    sb.run(opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ours = ours();
    // Every runsc process of the run, the Sentry and the gofer included, killed by someone
    // else (the OOM killer, an operator).
    let pids = runsc_pids(&ours);
    assert!(pids.len() >= 2, "runsc's processes: {pids:?}");
    for pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = tokio::time::timeout(Duration::from_secs(60), sb.wait())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(out.status, Status::Exited { code: 0 });
    assert_nothing_left(&before);
}

#[tokio::test]
async fn setuid_bits_are_refused() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let f = ws.path().join("f");
    let opts = SandboxOpts::new(
        ws.path(),
        [
            "/bin/sh",
            "-c",
            "touch f && chmod 755 f && echo PLAIN; chmod 4755 f || echo REFUSED",
        ],
    );
    let out = sandbox_gvisor::sandbox().execute(opts).await.unwrap();
    let text = out.stdout.text();
    assert!(text.contains("PLAIN") && text.contains("REFUSED"), "{text}");
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o755);
}

#[tokio::test]
async fn a_root_host_runs_the_command_as_the_workspace_owner_or_nobody() {
    if !available() || !is_root() {
        return;
    }
    let _one = SERIAL.lock().await;
    let root_only = tempfile::tempdir().unwrap();
    let secret = root_only.path().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for (owner, expected_uid) in [(Some(4242), 4242), (None, 65534)] {
        let ws = workspace_of(owner);
        let mut opts = SandboxOpts::new(
            ws.path(),
            [
                "/bin/sh",
                "-c",
                "id -u > uid.txt; cat \"$1\" && echo READ",
                "sh",
                secret.to_str().unwrap(),
            ],
        );
        opts.read_only_paths.push(root_only.path().into());
        let out = sandbox_gvisor::sandbox().execute(opts).await.unwrap();
        assert!(!out.stdout.text().contains("READ"), "{}", out.stdout.text());
        let uid = std::fs::read_to_string(ws.path().join("uid.txt")).unwrap();
        assert_eq!(uid.trim(), expected_uid.to_string(), "{owner:?}");
        // On disk the file is the workspace owner's.
        let on_disk = std::fs::metadata(ws.path().join("uid.txt")).unwrap().uid();
        assert_eq!(on_disk, owner.unwrap_or(0));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("sandbox-gvisor@"), "{mounts}");
}

#[tokio::test]
async fn preflight_runs_a_real_command() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let p = GvisorBackend::new();
    let pre = sandbox_host::ProcessSandbox::new(p)
        .preflight()
        .await
        .unwrap();
    assert_eq!(pre.backend, "gvisor");
    assert!(
        pre.version.as_deref().unwrap_or("").contains("runsc"),
        "{pre:?}"
    );
}

/// The filter as this runsc build applies it: the table's denials refused (`EPERM`),
/// `clone`'s namespace flags judged by argument (a plain fork and a thread still work),
/// `clone3` answered `ENOSYS` by the Sentry (so the C library falls back; see
/// `spec::profile`), `openat2` refused, and a call the profile cannot name refused with `EPERM`: this
/// runsc ignores `defaultErrnoRet`, the reason `clone3` is not refused by the filter.
#[tokio::test]
async fn the_syscall_table_applies_with_its_errnos() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let script = r#"
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
# unshare(CLONE_NEWUSER), clone(CLONE_NEWUSER | SIGCHLD), io_uring_setup(0, NULL),
# clone3(NULL, 0), openat2(AT_FDCWD, NULL, NULL, 0), a number past every table.
print("unshare", call(272, 0x10000000))
print("clone-newuser", call(56, 0x10000000 | 17, 0, 0, 0, 0))
print("io_uring_setup", call(425, 0, 0))
print("clone3", call(435, 0, 0))
# openat2: this runsc cannot name it, so the filter refuses it (EPERM); either way
# the call is not reached.
print("openat2", "refused" if call(437, -100, 0, 0, 0) in (1, 38) else "reached")
print("unnamed", call(1000))
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
t = threading.Thread(target=lambda: None)
t.start()
t.join()
print("fork and thread")
"#;
    let opts = SandboxOpts::new(ws.path(), ["/usr/bin/python3", "-c", script]);
    let out = sandbox_gvisor::sandbox().execute(opts).await.unwrap();
    let want = format!(
        "unshare {eperm}\nclone-newuser {eperm}\nio_uring_setup {eperm}\nclone3 {enosys}\n\
         openat2 refused\nunnamed {eperm}\nfork and thread\n",
        eperm = libc::EPERM,
        enosys = libc::ENOSYS,
    );
    assert_eq!(out.stdout.text(), want, "{}", out.stderr.text());
}

/// A program named through a link runs as that name: a venv's `bin/python` in the
/// workspace is a venv (`sys.prefix` is the venv, found next to the link), and a link to
/// Python in a directory the sandbox hides (rustup's `cargo` in the caller's home) is
/// called by that path.
#[tokio::test]
async fn a_program_named_through_a_link_runs_as_that_name() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = workspace();
    let venv = ws.path().canonicalize().unwrap().join(".venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", venv.join("bin/python")).unwrap();
    std::fs::write(
        venv.join("pyvenv.cfg"),
        "home = /usr/bin\ninclude-system-site-packages = false\n",
    )
    .unwrap();
    let hidden = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let hidden_bin = hidden.path().canonicalize().unwrap();
    // Readable and searchable by the command's uid (the workspace's owner, or nobody).
    std::fs::set_permissions(
        &hidden_bin,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let named = hidden_bin.join("cargo");
    std::os::unix::fs::symlink("/usr/bin/python3", &named).unwrap();
    let script = "import sys; print(sys.prefix); print(sys.executable)";
    for (argv0, prefix, executable) in [
        (
            ".venv/bin/python".to_owned(),
            venv.display().to_string(),
            venv.join("bin/python").display().to_string(),
        ),
        (
            named.display().to_string(),
            "/usr".to_owned(),
            named.display().to_string(),
        ),
    ] {
        let opts = SandboxOpts::new(ws.path(), [argv0.as_str(), "-c", script]);
        let out = sandbox_gvisor::sandbox().execute(opts).await.unwrap();
        assert_eq!(
            out.stdout.text(),
            format!("{prefix}\n{executable}\n"),
            "{argv0}: {}",
            out.stderr.text()
        );
    }
}

/// A fork storm stops at the process cap: the Sentry enforces `RLIMIT_NPROC` for the
/// sandbox's own processes (`fork` fails with `EAGAIN` at the cap, the parent counted),
/// and the outcome names that mechanism. It is the only bound: core leaves the cgroup's
/// pids controller off runsc's tree (`Launch::limits_inside`), whose processes are the
/// Sentry's, not the command's.
#[tokio::test]
async fn a_fork_storm_stops_at_the_process_cap() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    const CAP: u64 = 48;
    let ws = workspace();
    let script = r#"
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(n, e.errno, flush=True)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
"#;
    let mut opts = SandboxOpts::new(ws.path(), ["/usr/bin/python3", "-c", script]);
    opts.limits.max_processes = Some(CAP);
    opts.timeout = Some(Duration::from_secs(120));
    let out = sandbox_gvisor::sandbox().execute(opts).await.unwrap();
    let text = out.stdout.text();
    let got: Vec<i64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(got.len(), 2, "{text} {}", out.stderr.text());
    assert!(got[0] < CAP as i64, "{got:?}");
    assert_eq!(got[1], i64::from(libc::EAGAIN), "{got:?}");
    let record = out
        .policy
        .limits
        .iter()
        .find(|l| l.limit == "processes")
        .unwrap();
    assert_eq!(record.value, CAP);
    assert_eq!(record.mechanism, sandbox_core::LimitMechanism::Rlimit);
}
