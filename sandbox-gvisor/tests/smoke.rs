//! Real commands under runsc, judged from the host: what only this backend does (its
//! bundle, its uid rules, runsc's leftovers). The shared behaviour is the conformance
//! suite's (`cargo xtask conformance --backend gvisor`).
//!
//! Skipped, with a message, on a host without runsc; `SANDBOX_REQUIRE_GVISOR=1` makes that
//! a failure (CI installs runsc).

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use sandbox_core::{Sandbox, SandboxError, SandboxExt, SandboxOpts, Status};
use sandbox_gvisor::GvisorBackend;

/// One test at a time: the leftover checks look at every run of this process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn available() -> bool {
    let found = which::which("runsc").is_ok();
    if !found {
        assert!(
            std::env::var_os("SANDBOX_REQUIRE_GVISOR").is_none(),
            "runsc is required here but not installed"
        );
        eprintln!("skipped: runsc is not installed");
    }
    found
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A workspace the command may write: on a root host, handed to `nobody` (a root-owned
/// one is refused, see `root_owned_workspace_is_refused`).
fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    if is_root() {
        nix::unistd::chown(
            d.path(),
            Some(nix::unistd::Uid::from_raw(65534)),
            Some(nix::unistd::Gid::from_raw(65534)),
        )
        .unwrap();
    }
    d
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

fn bundles() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sandbox-gvisor-"))
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
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "made\n");
    // A root host runs the command as the workspace's owner; otherwise as the caller.
    let expected = if is_root() {
        65534
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_eq!(std::fs::metadata(&made).unwrap().uid(), expected);
    // Nothing of runsc is left: no process of this run, no bundle, no mount.
    let ours = format!("sandbox-{}-", std::process::id());
    assert_eq!(runsc_processes(&ours), Vec::<String>::new());
    let after: Vec<_> = bundles()
        .into_iter()
        .filter(|b| !before.contains(b))
        .collect();
    assert_eq!(after, Vec::<PathBuf>::new());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("sandbox-gvisor-"), "{mounts}");
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
    let ours = format!("sandbox-{}-", std::process::id());
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
async fn root_owned_workspace_is_refused_on_a_root_host() {
    if !available() || !is_root() {
        return;
    }
    let _one = SERIAL.lock().await;
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let opts = SandboxOpts::new(
        ws.path(),
        [
            "/bin/sh",
            "-c",
            "touch \"$1\"",
            "sh",
            marker.to_str().unwrap(),
        ],
    );
    let e = sandbox_gvisor::sandbox().run(opts).await.unwrap_err();
    assert!(
        matches!(&e, SandboxError::NotSupported { backend: "gvisor", feature, .. }
            if feature.contains("workspace")),
        "{e}"
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn preflight_runs_a_real_command() {
    if !available() {
        return;
    }
    let _one = SERIAL.lock().await;
    let p = GvisorBackend::new();
    let pre = sandbox_core::process::ProcessSandbox::new(p)
        .preflight()
        .await
        .unwrap();
    assert_eq!(pre.backend, "gvisor");
    assert!(
        pre.version.as_deref().unwrap_or("").contains("runsc"),
        "{pre:?}"
    );
}
