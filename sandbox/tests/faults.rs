//! Faults of the host, each a test, judged from the host: the `sandbox` command SIGKILLed
//! mid-run, the workspace's disk full, the host's temp dir unwritable. (An engine's
//! restart is its backend's own test.)
//!
//! Each case runs per compiled-in backend that confines (the faults are about what a
//! confining run leaves on the host); a backend whose preflight fails here is skipped with
//! its reason printed, unless `SANDBOX_TEST_REQUIRE` names it (as CI does).

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use support::{available, backend_flags, confines, report, text, BIN};

#[macro_use]
mod support;

/// Generous bounds: the machine is shared and slow; nothing here asserts a timing.
const SETTLE: Duration = Duration::from_secs(60);

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

fn skip(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// A name no other process on the machine carries.
fn token(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("faulttok{what}{}x{nanos}", std::process::id())
}

/// Every process on the host whose command line holds `token`, with that command line.
fn processes_with(token: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        // A zombie has an empty command line and holds nothing.
        if cmd.contains(token) {
            out.push((pid, cmd));
        }
    }
    out
}

/// Poll `f` until it holds or `SETTLE` passes; whether it held.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + SETTLE;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The run cgroups of host process `pid` (named `sandbox-<pid>-<start>-<n>`), in every
/// mounted hierarchy.
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("sandbox-{pid}-");
    let mut out = Vec::new();
    let mut stack = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                out.push(e.path());
            } else if depth < 6 && !name.starts_with("sandbox-") {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    out
}

/// Entries of `tmp` made by host process `pid` (`sandbox-<kind>@<pid>-...`).
fn temp_dirs_of(tmp: &Path, pid: u32) -> Vec<PathBuf> {
    let mark = format!("@{pid}-");
    // The temp dir itself and its runs directory (`sandbox-runs-EUID`), where each run's
    // own directories are made.
    let runs = tmp.join(sandbox_core::runs_dir().file_name().unwrap());
    [tmp.to_path_buf(), runs]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&mark))
        .map(|e| e.path())
        .collect()
}

/// Mount points at or below `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&d))
        .collect()
}

/// What `backend`'s runs make on the host beyond what core makes (its registry entry's
/// `leaves`: an engine's containers) that host process `pid` made.
fn objects_of(backend: &str, pid: u32) -> Vec<String> {
    let Some(leaves) = sandbox::registry::known(backend)
        .and_then(|k| k.info)
        .and_then(|i| i.leaves)
    else {
        return Vec::new();
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on((leaves.made_by)(pid))
        .unwrap_or_else(|e| panic!("{backend}: counting its {}: {e}", leaves.what))
}

fn capability(backend: &str) -> &'static Value {
    &report(backend)["capability"]
}

/// How a run of `backend` keeps the workspace's changes off it: a layer held for review
/// where the backend has one, else a throwaway snapshot (either makes host-side objects).
fn layer_flags(backend: &str) -> Vec<&'static str> {
    if capability(backend)["change_layer"].is_null() {
        vec!["--snapshot"]
    } else {
        vec!["--changes", "apply"]
    }
}

fn sandbox(tmp: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.env("TMPDIR", tmp);
    c
}

/// A directory an unprivileged uid running these tests can use too.
fn dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

// ---------------------------------------------------------------------------------------
// The host SIGKILLed mid-run.

/// The same without a layer: a plain run's tree, which on a root host is handed to an
/// unprivileged id (a change of ids clears the parent-death signal, which made a root
/// host's landlock tree outlive it), dies with the SIGKILLed host where the backend says so.
fn sigkill_of_the_host_ends_a_plain_runs_tree(backend: &str) {
    if capability(backend)["dies_with_host"] != true {
        skip(&format!(
            "{backend}: its capability says the tree does not die with the host \
             (dies_with_host false)"
        ));
        return;
    }
    let ws = dir();
    let tmp = dir();
    let tok = token("plainkill");
    let script = format!("( (setsid sh -c 'sleep 600; :' {tok}d) &); echo started; sleep 600; :");
    let mut child = sandbox(tmp.path())
        .current_dir(ws.path())
        .arg("run")
        .args(backend_flags(backend))
        .args([
            "--timeout",
            "900",
            "--",
            "sh",
            "-c",
            &script,
            &format!("{tok}m"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().map(|l| l.unwrap_or_default());
    assert_eq!(first.as_deref(), Some("started"), "the run did not start");
    assert!(
        eventually(|| !processes_with(&tok).is_empty()),
        "the run's processes are not visible from the host: the test proves nothing"
    );
    child.kill().unwrap();
    let _ = child.wait().unwrap();
    assert!(
        eventually(|| processes_with(&tok).is_empty()),
        "the run's processes outlived the SIGKILLed host: {:?}",
        processes_with(&tok)
    );
    // The next start sweeps what the dead host left (a staging mount, its temp dirs), so
    // this test leaves nothing on the machine either.
    let next = sandbox(tmp.path())
        .current_dir(ws.path())
        .arg("run")
        .args(backend_flags(backend))
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(next.status.success(), "{}", text(&next.stderr));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let tmp_path = tmp.path().to_string_lossy().into_owned();
    assert!(
        !mounts.contains(&tmp_path),
        "the dead host's mounts outlived the next start: {mounts}"
    );
}

/// `sandbox run` is SIGKILLed while its command (and a double-forked, setsid daemon of it)
/// runs over a layer: where the backend says its tree dies with the host, nothing of the
/// run keeps running; and the next `sandbox run` removes what the dead one left (cgroups,
/// temp dirs and the mounts in them, containers), and nothing of a live owner.
fn sigkill_of_the_host_leaves_nothing_behind_after_the_next_start(backend: &str) {
    let ws = dir();
    let tmp = dir();
    std::fs::write(ws.path().join("file"), b"contents").unwrap();
    let tok = token("kill");
    // The daemon: a double fork with setsid, which every backend allows.
    let script = format!("( (setsid sh -c 'sleep 600; :' {tok}d) &); echo started; sleep 600; :");
    // A live owner's leftover-looking directory: this test process is alive.
    let me = std::process::id();
    let start = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start = start[start.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    let live = tmp.path().join(format!("sandbox-live@{me}-{start}-x"));
    std::fs::create_dir(&live).unwrap();
    std::fs::write(live.join("keep"), b"mine").unwrap();

    let mut child = sandbox(tmp.path())
        .current_dir(ws.path())
        .arg("run")
        .args(backend_flags(backend))
        .args(layer_flags(backend))
        .args([
            "--timeout",
            "900",
            "--",
            "sh",
            "-c",
            &script,
            &format!("{tok}m"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let host = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().map(|l| l.unwrap_or_default());
    assert_eq!(first.as_deref(), Some("started"), "the run did not start");
    // The daemon is up before the kill (as seen from the host, where the backend's
    // processes are visible there).
    let tree_dies = capability(backend)["dies_with_host"] == true;
    let cgroups = cgroups_of(host);
    let dirs = temp_dirs_of(tmp.path(), host);
    let objects = objects_of(backend, host);
    assert!(
        !cgroups.is_empty() || !dirs.is_empty() || !objects.is_empty(),
        "the run made nothing on the host to leave behind: the test proves nothing"
    );
    // `Child::kill` is SIGKILL: the host gets no chance to clean up.
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    if tree_dies {
        assert!(
            eventually(|| processes_with(&tok).is_empty()),
            "the run's processes outlived the SIGKILLed host: {:?}",
            processes_with(&tok)
        );
    } else {
        skip(&format!(
            "{backend}: its capability says the tree does not die with the host \
             (dies_with_host false): it must be gone after the next start instead"
        ));
    }
    // What the dead host left is still there (nobody cleaned up).
    let left_dirs = temp_dirs_of(tmp.path(), host);
    let left_cgroups = cgroups_of(host);
    let left_objects = objects_of(backend, host);
    let _ = writeln!(
        std::io::stderr(),
        "{backend}: the SIGKILLed host left {} temp dirs, {} cgroups, {} engine objects",
        left_dirs.len(),
        left_cgroups.len(),
        left_objects.len()
    );

    // The next start.
    let o = sandbox(tmp.path())
        .current_dir(ws.path())
        .arg("run")
        .args(backend_flags(backend))
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        eventually(|| processes_with(&tok).is_empty()),
        "the dead host's run still runs after the next start: {:?}",
        processes_with(&tok)
    );
    assert_eq!(temp_dirs_of(tmp.path(), host), Vec::<PathBuf>::new());
    assert_eq!(mounts_under(tmp.path()), Vec::<String>::new());
    assert_eq!(cgroups_of(host), Vec::<PathBuf>::new());
    assert_eq!(objects_of(backend, host), Vec::<String>::new());
    // A live owner's directory is never touched.
    assert_eq!(std::fs::read(live.join("keep")).unwrap(), b"mine");
    // The workspace is as it was: nothing of the killed run's layer reached it.
    assert_eq!(std::fs::read(ws.path().join("file")).unwrap(), b"contents");
}

// ---------------------------------------------------------------------------------------
// The host's temp dir unwritable.

/// `TMPDIR` names a directory the run cannot write (read-only: a read-only mount as root,
/// mode 0555 otherwise): a run that needs a host-side temp dir (a layer, a snapshot) fails
/// before anything runs, with an error naming that directory; nothing is left, and the
/// command never ran. A run that needs none may run.
fn an_unwritable_temp_dir_is_a_clear_error_naming_it(backend: &str) {
    let ws = dir();
    let base = dir();
    let tmp = base.path().join("ro-tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mounted = is_root();
    if mounted {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "ro,size=1m",
                "sandbox-faults",
                tmp.to_str().unwrap(),
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "could not mount a read-only tmpfs (root)");
    } else {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let marker = ws.path().join("ran");
    let o: Output = sandbox(&tmp)
        .current_dir(ws.path())
        .arg("run")
        .args(backend_flags(backend))
        .args(layer_flags(backend))
        .args(["--", "sh", "-c", "echo x > ran"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    if mounted {
        let _ = Command::new("umount").arg(&tmp).status();
    }
    assert!(left.is_empty(), "left in the temp dir: {left:?}");
    match o.status.code() {
        // It needed no host-side temp dir: then it ran, whole.
        Some(0) => {
            assert!(
                capability(backend)["change_layer"].is_null(),
                "{backend} makes its layer in the host's temp dir, yet ran: {err}"
            );
        }
        Some(125) => {
            assert!(
                err.contains(tmp.to_str().unwrap()),
                "the error does not name the temp dir {}: {err}",
                tmp.display()
            );
            assert!(
                err.contains("TMPDIR"),
                "the error does not say TMPDIR: {err}"
            );
            assert!(!marker.exists(), "the command ran");
        }
        other => panic!("{other:?}: {err}"),
    }
}

// ---------------------------------------------------------------------------------------
// The workspace's disk full.

/// The workspace is on a small filesystem of the test's own, beside a sentinel file; the
/// command (in its layer) writes a file larger than the free space and changes a small
/// one. `--changes apply` then says the disk is full (ENOSPC) and applies nothing, not
/// even the small change; the sentinel and every other file keep their bytes.
fn a_full_workspace_disk_applies_nothing_and_says_so(backend: &str) {
    if capability(backend)["change_layer"].is_null() {
        skip(&format!(
            "{backend}: no change layer (capability change_layer), so no change set to apply"
        ));
        return;
    }
    if !is_root() {
        skip("mounting the small filesystem needs root");
        return;
    }
    let base = dir();
    let fs = base.path().join("small");
    std::fs::create_dir(&fs).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=4m,mode=0755",
            "sandbox-faults",
            fs.to_str().unwrap(),
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not mount the small tmpfs (root)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(fs.clone());
    let ws = fs.join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sentinel_bytes: Vec<u8> = (0..512 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(fs.join("sentinel"), &sentinel_bytes).unwrap();
    std::fs::write(ws.join("small"), b"old").unwrap();
    std::fs::write(ws.join("other"), b"untouched").unwrap();
    let before = snapshot(&fs);

    // 6 MiB into a 4 MiB filesystem (the layer lives in the host's temp dir, which has
    // the room), and a small change that alone would fit.
    let o = sandbox(&std::env::temp_dir())
        .current_dir(&ws)
        .arg("run")
        .args(backend_flags(backend))
        .args(["--changes", "apply", "--", "sh", "-c"])
        .arg("echo new > small && dd if=/dev/zero of=big bs=1M count=6 2>/dev/null && echo done")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert!(
        text(&o.stdout).contains("done"),
        "the command did not run: {err}"
    );
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("ENOSPC") || err.contains("No space left"),
        "the error does not say the disk is full: {err}"
    );
    assert!(
        err.contains(ws.to_str().unwrap()),
        "the error does not name the workspace: {err}"
    );
    assert_eq!(snapshot(&fs), before, "the filesystem changed");
}

/// Every file under `root` with its bytes, and every other entry's name.
fn snapshot(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
                out.push((e.path(), None));
            } else {
                out.push((e.path(), std::fs::read(e.path()).ok()));
            }
        }
    }
    out.sort();
    out
}

macro_rules! backend_cases {
    ($module:ident, $feature:literal) => {
        #[cfg(feature = $feature)]
        mod $module {
            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        if super::available($feature) && super::confines($feature) {
                            super::$name($feature);
                        }
                    }
                };
            }
            case!(sigkill_of_the_host_leaves_nothing_behind_after_the_next_start);
            case!(sigkill_of_the_host_ends_a_plain_runs_tree);
            case!(an_unwritable_temp_dir_is_a_clear_error_naming_it);
            case!(a_full_workspace_disk_applies_nothing_and_says_so);
        }
    };
}

sandbox::with_backend_list!(every_backend);
