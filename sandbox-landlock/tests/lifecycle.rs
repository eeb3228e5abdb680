//! Process lifetime and concurrency: nothing outlives the run, and many runs started at
//! once from a multi-threaded runtime neither deadlock between fork and exec nor mix up
//! their confinement.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sandbox_core::{Backend, Preflight, Sandbox, Status};

/// Pids of live `sleep MARKER` processes.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            // A zombie has an empty command line; it is not running anything.
            if cmd.trim_end() == format!("sleep {marker}") {
                found.push(pid);
            }
        }
    }
    found
}

/// A `sleep` duration unique to this test process and `tag`, to find our processes by.
fn marker(tag: u32) -> String {
    format!("300{tag}.{}", std::process::id())
}

/// Python that double-forks, tries `setsid` (denied), and sleeps with `marker` in its
/// command line: the shape of a daemon escaping its parent.
fn daemonize(marker: &str) -> String {
    format!(
        r#"
import os, sys, time
if os.fork() == 0:
    try:
        os.setsid()
        print("setsid escaped", flush=True)
    except OSError as e:
        print("setsid", e.errno, flush=True)
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
time.sleep(0.3)
print("started", flush=True)
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_that_tried_setsid_dies_with_the_run() {
    let ws = tempdir();
    let m = marker(1);
    let o = python(ws.path(), &daemonize(&m), |_| {}).await;
    assert_ok(&o);
    assert!(
        out(&o).contains(&format!("setsid {}", libc::EPERM)),
        "{}",
        out(&o)
    );
    assert!(out(&o).contains("started"));
    assert!(
        processes_with(&m).is_empty(),
        "a descendant outlived the run"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_ends_every_descendant_before_it_returns() {
    let ws = tempdir();
    let m = marker(2);
    let script = format!("{}\ntime.sleep(600)\n", daemonize(&m));
    let sb: Arc<dyn Sandbox> = Arc::from(backend().sandbox());
    sb.run(opts(ws.path(), &["python3", "-c", &script]))
        .await
        .unwrap();
    // Wait for the daemon to be up, then kill from another task.
    let mut up = false;
    for _ in 0..200 {
        if !processes_with(&m).is_empty() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the daemon never started");
    let killer = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.kill().await })
    };
    killer.await.unwrap().unwrap();
    assert!(
        processes_with(&m).is_empty(),
        "kill returned with a descendant alive"
    );
    let o = sb.wait().await.unwrap();
    assert_eq!(o.status, Status::Killed);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_ends_every_descendant() {
    let ws = tempdir();
    let m = marker(3);
    let script = format!("{}\ntime.sleep(600)\n", daemonize(&m));
    let mut o = opts(ws.path(), &["python3", "-c", &script]);
    o.timeout = Some(Duration::from_secs(3));
    let o = run(o).await;
    assert_eq!(o.status, Status::TimedOut);
    assert!(processes_with(&m).is_empty());
}

/// 64 sandboxes started at once, 5 times over, on a multi-threaded runtime: a lock held
/// across fork (an allocation between fork and exec) would hang a child here. Each run
/// also checks it got its own workspace and confinement.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn sixty_four_at_once_repeatedly() {
    let parent = tempdir();
    // Next to every workspace, outside each: unreadable to all of them.
    fs::write(parent.path().join("secret"), "SIBLING-SECRET\n").unwrap();
    for round in 0..5 {
        let mut tasks = Vec::new();
        for i in 0..64 {
            let ws = parent.path().join(format!("ws-{round}-{i}"));
            fs::create_dir(&ws).unwrap();
            tasks.push(tokio::spawn(async move {
                let mut o = opts(
                    &ws,
                    &[
                        "sh",
                        "-c",
                        "echo $N > mine; cat ../secret 2>/dev/null; cat mine",
                    ],
                );
                o.env.set.push(("N".into(), format!("{round}-{i}").into()));
                o.timeout = Some(Duration::from_secs(120));
                (ws, round, i, run(o).await)
            }));
        }
        let all = tokio::time::timeout(Duration::from_secs(600), async {
            let mut v = Vec::new();
            for t in tasks {
                v.push(t.await.unwrap());
            }
            v
        })
        .await
        .expect("64 concurrent runs finished");
        for (ws, round, i, o) in all {
            assert_ok(&o);
            // The file next to the workspace is not readable: only its own value shows.
            assert_eq!(out(&o), format!("{round}-{i}\n"), "{}", err(&o));
            assert_eq!(
                fs::read_to_string(ws.join("mine")).unwrap(),
                format!("{round}-{i}\n")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn preflight_runs_a_real_command_and_reports_the_abi() {
    let p: Preflight = backend().sandbox().preflight().await.unwrap();
    assert_eq!(p.backend, "landlock");
    let v = p.version.unwrap();
    assert!(v.starts_with("landlock ABI "), "{v}");
    assert!(
        p.details.iter().any(|d| d.contains("loopback")),
        "{:?}",
        p.details
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_environment_is_scrubbed_and_argv_is_not_reparsed() {
    let ws = tempdir();
    std::env::set_var("SANDBOX_LANDLOCK_TEST_SECRET", "leak");
    let o = run(opts(
        ws.path(),
        &["printf", "%s|", "a b", "$HOME", "*", ";echo x"],
    ))
    .await;
    assert_ok(&o);
    assert_eq!(out(&o), "a b|$HOME|*|;echo x|");
    let o = run(opts(ws.path(), &["env"])).await;
    assert!(
        !out(&o).contains("SANDBOX_LANDLOCK_TEST_SECRET"),
        "{}",
        out(&o)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_capability_states_what_landlock_enforces_here() {
    let c = backend().capability();
    assert!(c.confine_writes && c.confine_reads && c.readonly_carveouts);
    assert!(c.tree_kill && c.drops_host_root && c.host_programs);
    assert!(c.network_full.is_exact());
    // This host allows the namespaces (root, or unprivileged user namespaces): a pid
    // namespace for process isolation, a network namespace for `none` and `loopback`.
    assert!(c.process_isolation, "a pid namespace can be made here");
    assert!(c.network_none.is_exact() && c.network_loopback.is_exact());
}
