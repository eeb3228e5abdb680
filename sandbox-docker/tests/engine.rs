//! The docker backend against the local engine: every effect is checked from the host
//! (files, ownership, listeners, processes, the engine's own list of containers), and
//! after every test nothing of this process is left on the engine.
//!
//! Runs as root (CI) and as an unprivileged uid in the `docker` group; where the two
//! differ (which uid the command gets, how a root-owned workspace travels), each test
//! asserts the behaviour for the uid it runs as.
//!
//! What every backend must do is the conformance suite's (`cargo xtask conformance
//! --backend docker`): argv and exit codes, stdin, the output cap, timeouts and kills with
//! the whole tree, state errors, captured files and many runs at once are its cases only,
//! and the soak counts this backend's containers and volumes over many of them. The tests here check
//! what is docker's own, above all that nothing is left on the engine; they use the suite's
//! host-side helpers (its loopback listener, its /proc scanner).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure by design

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use sandbox_conformance::host::{processes_with_arg, HostListener};
use sandbox_core::record::{Container, Layer, TreeVia};
use sandbox_core::{
    Backend, LimitMechanism, NetworkMode, Sandbox, SandboxError, SandboxExt, SandboxOpts, Status,
    Stdin, TreeKill,
};
use sandbox_core::{Enforced, LayerMechanism};
use sandbox_docker::{DockerBackend, DockerConfig, WorkspaceMode, NOBODY};

/// A workspace the command's uid owns, so it is bind-mounted: as root, given to uid 1000
/// (the command then runs as that owner); otherwise our own. Returns the uid to expect.
fn bind_dir() -> (tempfile::TempDir, PathBuf, u32) {
    let (d, p) = dir();
    if is_root() {
        chown_tree(&p, 1000);
        (d, p, 1000)
    } else {
        let me = nix_uid();
        (d, p, me)
    }
}

/// Host processes (in any container) with one of `marks` as an argument: the suite's
/// /proc scanner, which sees through pid namespaces.
fn alive(marks: &[&str]) -> Vec<(i32, String)> {
    marks.iter().flat_map(|m| processes_with_arg(m)).collect()
}

async fn run(b: &DockerBackend, opts: SandboxOpts) -> sandbox_core::SandboxOutcome {
    b.sandbox().execute(opts).await.unwrap()
}

#[tokio::test]
async fn a_dynamically_linked_program_runs_from_the_image_built_without_a_registry() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    // Found on the container's PATH, with libc and the loader copied by the image builder.
    let o = run(
        &backend(WorkspaceMode::Bind),
        SandboxOpts::new(&ws, ["true"]),
    )
    .await;
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert_eq!(o.backend, "docker");
    assert_eq!(o.policy.tree_kill, Some(TreeKill::Container));
    assert_clean();
}

#[tokio::test]
async fn only_the_named_variables_reach_the_command() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    // SAFETY (edition 2021: safe fn): the tests run one at a time under SERIAL, and
    // nothing else in this process reads these variables concurrently.
    std::env::set_var("SANDBOX_DOCKER_TEST_SECRET", "leaked-secret");
    std::env::set_var("SANDBOX_DOCKER_TEST_PASSED", "passed-value");
    let mut opts = SandboxOpts::new(&ws, ["/bin/busybox", "env"]);
    opts.env.set = vec![("FOO".into(), "bar baz".into())];
    opts.env.pass = vec!["SANDBOX_DOCKER_TEST_PASSED".into()];
    let o = run(&backend(WorkspaceMode::Bind), opts).await;
    let text = o.stdout.text();
    let names: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    let want: BTreeSet<&str> = [
        "PATH",
        "HOME",
        "LANG",
        "FOO",
        "SANDBOX_DOCKER_TEST_PASSED",
        "HOSTNAME",
    ]
    .into();
    assert_eq!(names, want, "{text}");
    assert!(text.contains("FOO=bar baz\n"));
    assert!(text.contains(&format!("HOME={}\n", ws.display())));
    assert!(!text.contains("leaked-secret"));
    let recorded: BTreeSet<&str> = o.policy.env_names.iter().map(String::as_str).collect();
    assert_eq!(recorded, want, "the policy lists what the command got");
    assert_clean();
}

#[tokio::test]
async fn host_root_is_never_root_inside_and_holds_no_capabilities() {
    let _g = SERIAL.lock().await;
    let script = "busybox id -u; busybox id -g; busybox grep CapEff /proc/self/status; \
                  busybox grep NoNewPrivs /proc/self/status";
    // A workspace owned by the caller (or, as root, by root).
    let (_d, ws) = dir();
    let o = run(
        &backend(WorkspaceMode::Bind),
        SandboxOpts::new(&ws, sh(script)),
    )
    .await;
    let want = if is_root() { NOBODY } else { nix_uid() };
    let lines: Vec<_> = o.stdout.text().lines().map(str::to_owned).collect();
    assert_eq!(lines[0], want.to_string(), "{lines:?}");
    assert_ne!(lines[1], "0", "never group root: {lines:?}");
    assert_eq!(lines[2].split_whitespace().nth(1), Some("0000000000000000"));
    assert_eq!(lines[3].split_whitespace().nth(1), Some("1"));
    // A workspace owned by an ordinary user: as root, the command runs as that user.
    let (_d2, ws2, owner) = bind_dir();
    let o = run(
        &backend(WorkspaceMode::Bind),
        SandboxOpts::new(&ws2, sh(script)),
    )
    .await;
    assert_eq!(o.stdout.text().lines().next(), Some(&*owner.to_string()));
    assert_clean();
}

#[tokio::test]
async fn writes_land_in_the_workspace_and_named_paths_only() {
    let _g = SERIAL.lock().await;
    let (_d, ws, owner) = bind_dir();
    let (_o, other) = dir();
    let rw = other.join("rw");
    let ro = other.join("ro");
    let hidden = other.join("hidden");
    for d in [&rw, &ro, &hidden] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(ro.join("f"), "read-only content\n").unwrap();
    std::fs::set_permissions(ro.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::write(hidden.join("secret"), "hidden content\n").unwrap();
    if is_root() {
        chown_tree(&rw, owner);
    }
    let script = format!(
        "pwd; echo a > {ws}/new; echo b > {rw}/new; \
         echo c > {ro}/f && echo RO-WRITTEN; busybox cat {ro}/f; \
         busybox touch /etc/x && echo ETC-WRITTEN; busybox touch /tmp/x && echo TMP-OK; \
         busybox cat {hidden}/secret && echo HIDDEN-READ; busybox ls {other} || echo NO-OTHER; true",
        ws = ws.display(),
        rw = rw.display(),
        ro = ro.display(),
        hidden = hidden.display(),
        other = other.display(),
    );
    let mut opts = SandboxOpts::new(&ws, sh(&script));
    opts.writable_paths = vec![rw.clone()];
    opts.read_only_paths = vec![ro.clone()];
    let o = run(&backend(WorkspaceMode::Bind), opts).await;
    let out = o.stdout.text();
    assert_eq!(
        out.lines().next(),
        Some(&*ws.display().to_string()),
        "cwd: {out}"
    );
    assert!(out.contains("read-only content"), "{out}");
    assert!(out.contains("TMP-OK"), "{out}");
    for bad in ["RO-WRITTEN", "ETC-WRITTEN", "HIDDEN-READ", "hidden content"] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
    // From the host.
    assert_eq!(std::fs::read_to_string(ws.join("new")).unwrap(), "a\n");
    assert_eq!(std::fs::metadata(ws.join("new")).unwrap().uid(), owner);
    assert_eq!(std::fs::read_to_string(rw.join("new")).unwrap(), "b\n");
    assert_eq!(
        std::fs::read_to_string(ro.join("f")).unwrap(),
        "read-only content\n"
    );
    assert!(!Path::new("/etc/x").exists());
    assert_clean();
}

#[tokio::test]
async fn no_setuid_or_setgid_file_is_left_in_the_workspace() {
    let _g = SERIAL.lock().await;
    for mode in [WorkspaceMode::Bind, WorkspaceMode::Copy] {
        let (_d, ws) = dir();
        let script = "echo x > planted; busybox chmod 4755 planted; echo y > planted2; \
                      busybox chmod 2755 planted2; busybox chmod 755 planted2; \
                      busybox ls -ln planted planted2";
        let o = run(&backend(mode), SandboxOpts::new(&ws, sh(script))).await;
        assert!(
            o.stderr.text().contains("Operation not permitted"),
            "{mode:?}: the filter refuses the bits: {}",
            o.stderr.text()
        );
        for (f, want) in [("planted", 0o644), ("planted2", 0o755)] {
            let m = std::fs::symlink_metadata(ws.join(f)).unwrap();
            assert_eq!(m.mode() & 0o7777, want, "{mode:?} {f}");
            // Root's tree stays root's on disk; otherwise it is the caller's own.
            assert_eq!(m.uid(), nix_uid(), "{mode:?} {f}");
        }
        if is_root() && mode == WorkspaceMode::Bind {
            assert!(idmap_recorded(&o), "{:?}", o.policy.enforced);
        }
    }
    assert_clean();
}

#[tokio::test]
async fn the_workspace_is_shared_live_in_bind_mode_even_when_root_owns_it() {
    let _g = SERIAL.lock().await;
    // As root: root's tree, handed to `nobody` through an idmapped mount. Otherwise: ours.
    let (_d, ws) = dir();
    std::fs::write(ws.join("from-host-before"), "before\n").unwrap();
    let sb: Arc<Box<sandbox_core::DynSandbox>> = Arc::new(backend(WorkspaceMode::Bind).sandbox());
    sb.run(SandboxOpts::new(
        &ws,
        sh("busybox cat from-host-before; echo during > from-sandbox; \
            while [ ! -e release ]; do busybox sleep 0.1; done; busybox cat release"),
    ))
    .await
    .unwrap();
    // The host sees the command's write while it runs, and the command sees the host's.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.join("from-sandbox").exists() {
        assert!(
            Instant::now() < deadline,
            "the write never appeared on the host"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = std::fs::metadata(ws.join("from-sandbox")).unwrap();
    assert_eq!(m.uid(), nix_uid(), "stored as the tree's owner on disk");
    std::fs::write(ws.join("release"), "released\n").unwrap();
    let o = tokio::time::timeout(Duration::from_secs(60), sb.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert_eq!(o.stdout.text(), "before\nreleased\n");
    if is_root() {
        assert!(o.stdout.text().contains("released"));
        assert!(idmap_recorded(&o), "{:?}", o.policy.enforced);
    }
    assert_clean();
    assert_no_staging_left();
}

#[tokio::test]
async fn a_named_writable_file_is_writable_and_cannot_travel_by_copy() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let (_o, other) = dir();
    let file = other.join("log.txt");
    std::fs::write(&file, "host\n").unwrap();
    let script = format!("echo sandbox >> {}", file.display());
    let mut opts = SandboxOpts::new(&ws, sh(&script));
    opts.writable_paths = vec![file.clone()];
    // Bind mode: as root through an idmapped mount of the file itself.
    let o = run(&backend(WorkspaceMode::Bind), opts.clone()).await;
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "host\nsandbox\n");
    assert_eq!(std::fs::metadata(&file).unwrap().uid(), nix_uid());
    // Copy mode: a volume holds a directory, so a file is refused before anything runs.
    let e = backend(WorkspaceMode::Copy)
        .sandbox()
        .execute(opts)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            SandboxError::InvalidConfig {
                field: "writable_paths",
                ..
            }
        ),
        "{e}"
    );
    assert_clean();
}

#[tokio::test]
async fn a_root_only_file_in_a_granted_directory_stays_unreadable() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let (_o, other) = dir();
    std::fs::write(other.join("root-only"), "top secret\n").unwrap();
    std::fs::set_permissions(
        other.join("root-only"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(other.join("public"), "public\n").unwrap();
    let script = format!(
        "busybox cat {0}/public; busybox cat {0}/root-only && echo READ-IT; true",
        other.display()
    );
    let mut opts = SandboxOpts::new(&ws, sh(&script));
    opts.read_only_paths = vec![other.clone()];
    let o = run(&backend(WorkspaceMode::Bind), opts).await;
    let out = o.stdout.text();
    assert!(out.contains("public"), "{out}");
    if is_root() {
        // Root's 0600 file: the command is not root, so it cannot read it.
        assert!(
            !out.contains("top secret") && !out.contains("READ-IT"),
            "{out}"
        );
    } else {
        // The caller's own file: the command has exactly the caller's rights on it.
        assert!(out.contains("top secret"), "{out}");
    }
    assert_clean();
}

#[tokio::test]
async fn carveouts_stay_read_only_in_both_modes() {
    let _g = SERIAL.lock().await;
    for mode in [WorkspaceMode::Bind, WorkspaceMode::Copy] {
        let (_d, ws, _) = bind_dir();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/hooks/pre-commit"), "original\n").unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        if is_root() {
            chown_tree(&ws, 1000);
        }
        let script = "echo evil > .git/hooks/pre-commit && echo HOOK-WRITTEN; \
                      echo evil > .git/hooks/post-checkout && echo HOOK-ADDED; \
                      echo evil >> .git/config && echo CONFIG-WRITTEN; \
                      echo fine > ok.txt; busybox cat .git/hooks/pre-commit; true";
        let mut opts = SandboxOpts::new(&ws, sh(script));
        opts.readonly_carveouts = vec![".git/hooks".into(), ".git/config".into()];
        let o = run(&backend(mode), opts).await;
        let out = o.stdout.text();
        assert!(
            out.contains("original"),
            "{mode:?}: the carve-out stays readable: {out}"
        );
        for bad in ["HOOK-WRITTEN", "HOOK-ADDED", "CONFIG-WRITTEN"] {
            assert!(!out.contains(bad), "{mode:?}: {bad}: {out}");
        }
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/hooks/pre-commit")).unwrap(),
            "original\n"
        );
        assert!(!ws.join(".git/hooks/post-checkout").exists(), "{mode:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("ok.txt")).unwrap(),
            "fine\n"
        );
    }
    assert_clean();
}

#[tokio::test]
async fn copy_mode_uploads_before_and_brings_every_change_back_after() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    std::fs::write(ws.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(ws.join("change.txt"), "old\n").unwrap();
    std::fs::write(ws.join("delete.txt"), "bye\n").unwrap();
    std::fs::create_dir_all(ws.join("sub/dir")).unwrap();
    std::fs::write(ws.join("sub/dir/file"), "deep\n").unwrap();
    std::fs::set_permissions(ws.join("keep.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let keep_ino = std::fs::metadata(ws.join("keep.txt")).unwrap().ino();
    let script =
        "busybox cat keep.txt sub/dir/file; echo new > change.txt; busybox rm delete.txt; \
                  busybox mkdir -p made/deep; echo m > made/deep/f; busybox ln -s keep.txt lnk; \
                  busybox rm -r sub";
    let o = run(
        &backend(WorkspaceMode::Copy),
        SandboxOpts::new(&ws, sh(script)),
    )
    .await;
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert_eq!(
        o.stdout.text(),
        "keep\ndeep\n",
        "the upload reached the container"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("change.txt")).unwrap(),
        "new\n"
    );
    assert!(!ws.join("delete.txt").exists());
    assert!(!ws.join("sub").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("made/deep/f")).unwrap(),
        "m\n"
    );
    assert_eq!(
        std::fs::read_link(ws.join("lnk")).unwrap(),
        PathBuf::from("keep.txt")
    );
    let keep = std::fs::metadata(ws.join("keep.txt")).unwrap();
    assert_eq!(keep.ino(), keep_ino, "an unchanged file is left alone");
    assert_eq!(keep.mode() & 0o777, 0o640);
    assert!(
        o.policy.enforced.iter().any(|e| matches!(
            e,
            Enforced::Container(Container::Tree {
                via: TreeVia::VolumeWrittenBack,
                ..
            })
        )),
        "{:?}",
        o.policy.enforced
    );
    assert_clean();
}

#[tokio::test]
async fn snapshot_leaves_the_original_untouched_and_captures_from_the_copy() {
    let _g = SERIAL.lock().await;
    let (_d, ws, _) = bind_dir();
    std::fs::write(ws.join("orig.txt"), "original\n").unwrap();
    let mut opts = SandboxOpts::new(
        &ws,
        sh("echo changed > orig.txt; echo captured > out.txt; busybox rm -f gone; busybox cat orig.txt"),
    );
    opts.snapshot = true;
    opts.capture_files = vec!["out.txt".into(), "missing.txt".into()];
    let o = run(&backend(WorkspaceMode::Bind), opts).await;
    assert_eq!(o.stdout.text(), "changed\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("orig.txt")).unwrap(),
        "original\n"
    );
    assert!(!ws.join("out.txt").exists());
    assert_eq!(
        o.files.get(Path::new("out.txt")).map(Vec::as_slice),
        Some(&b"captured\n"[..])
    );
    assert!(!o.files.contains_key(Path::new("missing.txt")));
    assert_clean();
}

#[tokio::test]
async fn a_relative_link_climbing_out_of_the_workspace_travels_as_a_link_in_copy_mode() {
    let _g = SERIAL.lock().await;
    let (_d, ws, _) = bind_dir();
    std::fs::create_dir(ws.join("sub")).unwrap();
    let target = "../../../../../../etc/hostname";
    std::os::unix::fs::symlink(target, ws.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("../../..", ws.join("top")).unwrap();
    for (snapshot, mode) in [(true, WorkspaceMode::Bind), (false, WorkspaceMode::Copy)] {
        let mut opts = SandboxOpts::new(
            &ws,
            sh("busybox readlink sub/up; busybox readlink top; echo ok > new.txt"),
        );
        opts.snapshot = snapshot;
        let o = run(&backend(mode), opts).await;
        assert_eq!(
            o.status,
            Status::Exited { code: 0 },
            "snapshot {snapshot}: {}",
            o.stderr.text()
        );
        assert_eq!(o.stdout.text(), format!("{target}\n../../..\n"));
        // The host's links are untouched, and the copy's changes come back only when
        // they should.
        assert_eq!(
            std::fs::read_link(ws.join("sub/up")).unwrap(),
            Path::new(target)
        );
        assert_eq!(ws.join("new.txt").exists(), !snapshot);
        assert_clean();
    }
}

/// Network modes, judged without sending anything beyond loopback: the suite never targets
/// the bridge's private-range address. `none` and `loopback` leave the container nothing
/// but `lo` and never reach the host's own 127.0.0.1; `loopback` serves and connects on its
/// own 127.0.0.1; `full` gives the container an interface of the engine's bridge.
#[tokio::test]
async fn network_modes_give_the_interfaces_asked_and_never_the_hosts_loopback() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let b = backend(WorkspaceMode::Bind);
    let interfaces = "busybox ls /sys/class/net 2>/dev/null || busybox ip -o link | busybox awk -F': ' '{print $2}'";
    for mode in [NetworkMode::None, NetworkMode::Loopback] {
        let host = HostListener::start("host-listener").unwrap();
        let port = host.addr().port();
        let script =
            format!("echo hi | busybox nc -w 3 127.0.0.1 {port} && echo CONNECTED; {interfaces}");
        let mut opts = SandboxOpts::new(&ws, sh(&script));
        opts.network = mode;
        let o = run(&b, opts).await;
        let out = o.stdout.text();
        assert!(!out.contains("CONNECTED"), "{mode}: {out}");
        let ifaces: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(ifaces, ["lo"], "{mode}: {out} {}", o.stderr.text());
        assert_eq!(host.accepted(), 0, "{mode}: the host saw a connection");
        assert!(!o.policy.can_reach_network());
    }
    // Loopback: the command serves and connects on its own 127.0.0.1. Each attempt is a
    // server (bounded by `timeout`) and a client, retried until the server has the line:
    // under load the server may not listen yet when the client connects.
    let mut opts = SandboxOpts::new(
        &ws,
        sh("for i in 1 2 3 4 5 6 7 8 9 10; do \
              busybox timeout 5 busybox nc -l -p 9123 >> /tmp/got & srv=$!; \
              busybox sleep 0.3; echo ping | busybox nc -w 3 127.0.0.1 9123; \
              wait $srv; busybox grep -q ping /tmp/got && break; \
            done; busybox cat /tmp/got"),
    );
    opts.network = NetworkMode::Loopback;
    let o = run(&b, opts).await;
    assert_eq!(o.stdout.text(), "ping\n", "{}", o.stderr.text());
    // Full: an interface beyond `lo` (the bridge's), and the policy says so.
    let mut opts = SandboxOpts::new(&ws, sh(interfaces));
    opts.network = NetworkMode::Full;
    let o = run(&b, opts).await;
    let out = o.stdout.text();
    assert!(
        out.split_whitespace().any(|i| i != "lo"),
        "{out} {}",
        o.stderr.text()
    );
    assert!(o.policy.can_reach_network());
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn limits_are_enforced_by_the_engine() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let b = backend(WorkspaceMode::Bind);
    // Open files and CPU time: rlimits set by the engine.
    let mut opts = SandboxOpts::new(&ws, sh("ulimit -n; ulimit -t"));
    opts.limits.open_files = Some(64);
    opts.limits.cpu_seconds = Some(5);
    let o = run(&b, opts).await;
    assert_eq!(o.stdout.text(), "64\n5\n");
    let mech = |l: &str| {
        o.policy
            .limits
            .iter()
            .find(|r| r.limit == l)
            .map(|r| r.mechanism)
    };
    assert_eq!(mech("open_files"), Some(LimitMechanism::Rlimit));
    assert_eq!(mech("processes"), Some(LimitMechanism::Container));

    // Processes: a fork bomb stops at the cap (tini and the shell count too). Each child
    // that started leaves a line in the workspace, counted from the host; the shell dies
    // at the first fork the cap refuses.
    let mut opts = SandboxOpts::new(
        &ws,
        sh(
            "i=0; while [ $i -lt 60 ]; do (echo x >> started; exec busybox sleep 5) & \
            i=$((i+1)); done",
        ),
    );
    opts.limits.max_processes = Some(16);
    opts.timeout = Some(Duration::from_secs(60));
    let o = run(&b, opts).await;
    assert!(
        o.stderr.text().contains("can't fork"),
        "{}",
        o.stderr.text()
    );
    let n = std::fs::read_to_string(ws.join("started"))
        .unwrap_or_default()
        .lines()
        .count();
    assert!(n < 16, "{n} processes started under a cap of 16");

    // Memory: the OOM killer ends it and the outcome says so.
    let mut opts = SandboxOpts::new(&ws, sh("v=$(busybox yes); echo survived"));
    opts.limits.memory_bytes = Some(32 << 20);
    opts.timeout = Some(Duration::from_secs(120));
    let o = run(&b, opts).await;
    assert_eq!(o.status, Status::OutOfMemory, "{}", o.stderr.text());
    assert!(!o.stdout.text().contains("survived"));

    // CPU time: a spinning command is stopped by the rlimit (SIGXCPU, reported as 128+24).
    let mut opts = SandboxOpts::new(&ws, sh("while :; do :; done"));
    opts.limits.cpu_seconds = Some(1);
    opts.timeout = Some(Duration::from_secs(120));
    let o = run(&b, opts).await;
    assert!(
        matches!(o.status, Status::Exited { code } if code == 128 + 24 || code == 137),
        "{:?}",
        o.status
    );
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn dropping_a_running_sandbox_removes_its_container() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let sb = backend(WorkspaceMode::Bind).sandbox();
    sb.run(SandboxOpts::new(&ws, sh("busybox sleep 7791")))
        .await
        .unwrap();
    assert_eq!(ours().0.len(), 1);
    drop(sb);
    let deadline = Instant::now() + Duration::from_secs(60);
    while ours() != (vec![], vec![]) {
        assert!(Instant::now() < deadline, "left behind: {:?}", ours());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(alive(&["7791"]).is_empty());
}

#[tokio::test]
async fn a_missing_or_unexecutable_program_is_an_error_and_nothing_is_left() {
    let _g = SERIAL.lock().await;
    let (_d, ws, _) = bind_dir();
    let b = backend(WorkspaceMode::Bind);
    for argv0 in ["no-such-program", "/bin/no-such-program", "./nope"] {
        let e = b
            .sandbox()
            .execute(SandboxOpts::new(&ws, [argv0]))
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{argv0}: {e}");
        assert_clean();
    }
    std::fs::write(ws.join("script"), "#!/bin/sh\necho hi\n").unwrap();
    if is_root() {
        chown_tree(&ws, 1000);
    }
    let e = b
        .sandbox()
        .execute(SandboxOpts::new(&ws, ["./script"]))
        .await
        .unwrap_err();
    assert!(e.is_not_executable(), "{e}");
    // A symlinked program is followed, as exec would.
    let o = run(&b, SandboxOpts::new(&ws, ["busybox", "true"])).await;
    assert_eq!(o.status, Status::Exited { code: 0 });
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn a_missing_image_is_named_with_its_remedy_and_never_pulled() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let image = "sandbox-docker-test-missing:never";
    let b = DockerBackend::new(DockerConfig::new(image)).unwrap();
    let e = b
        .sandbox()
        .execute(SandboxOpts::new(&ws, ["true"]))
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, SandboxError::Unavailable { .. }), "{text}");
    assert!(
        text.contains(image) && text.contains("docker load"),
        "{text}"
    );
    let e = b.sandbox().preflight().await.unwrap_err();
    assert!(e.to_string().contains(image), "{e}");
    let out = std::process::Command::new("docker")
        .args(["images", "-q", image])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "nothing was pulled");
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn preflight_runs_a_real_container_and_reports_the_engine() {
    let _g = SERIAL.lock().await;
    let b = backend(WorkspaceMode::Bind);
    let p = b.sandbox().preflight().await.unwrap();
    assert_eq!(p.backend, "docker");
    assert!(
        p.version.as_deref().unwrap_or("").starts_with("API 1."),
        "{p:?}"
    );
    assert!(
        p.details.iter().any(|d| d.contains("tini version")),
        "{p:?}"
    );
    assert_clean();
    // Copy mode's preflight exercises the uploads too.
    let p = backend(WorkspaceMode::Copy)
        .sandbox()
        .preflight()
        .await
        .unwrap();
    assert!(p.details.iter().any(|d| d.contains("Copy")), "{p:?}");
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn an_unreachable_engine_is_unavailable_with_a_remedy() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let old = std::env::var_os("DOCKER_HOST");
    // Under SERIAL no other test reads the variable meanwhile.
    std::env::set_var("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let b = backend(WorkspaceMode::Bind);
    let pre = b.sandbox().preflight().await;
    let run = b.sandbox().execute(SandboxOpts::new(&ws, ["true"])).await;
    // Bad input is reported as such, before the engine is even asked.
    let bad = {
        use std::os::unix::ffi::OsStringExt;
        let argv = vec![
            std::ffi::OsString::from("true"),
            std::ffi::OsString::from_vec(vec![0xff]),
        ];
        b.sandbox().execute(SandboxOpts::new(&ws, argv)).await
    };
    match old {
        Some(v) => std::env::set_var("DOCKER_HOST", v),
        None => std::env::remove_var("DOCKER_HOST"),
    }
    for e in [pre.unwrap_err(), run.unwrap_err()] {
        let text = e.to_string();
        assert!(matches!(e, SandboxError::Unavailable { .. }), "{text}");
        assert!(text.contains("systemctl start docker"), "{text}");
    }
    let e = bad.unwrap_err();
    assert!(
        matches!(e, SandboxError::InvalidConfig { field: "argv", .. }),
        "{e}"
    );
}

#[tokio::test]
async fn cleanup_leftovers_removes_what_dead_owners_left_and_nothing_live() {
    let _g = SERIAL.lock().await;
    // A dead process of this machine: a child that has exited.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let me = sandbox_docker::owner();
    let machine = me.rsplitn(3, '/').nth(2).unwrap().to_string();
    let dead = format!("{machine}/{dead_pid}/1");
    let label = |owner: &str| {
        vec![
            "--label".to_string(),
            format!("{}={}", sandbox_docker::LABEL, sandbox_docker::LABEL_VALUE),
            "--label".to_string(),
            format!("{}={owner}", sandbox_docker::LABEL_OWNER),
        ]
    };
    let create = |owner: &str| {
        let mut args = vec!["create".to_string()];
        args.extend(label(owner));
        args.extend([image().to_string(), "true".to_string()]);
        let out = std::process::Command::new("docker")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let leftover = create(&dead);
    let live = create(&me);
    let mut vol_args = vec!["volume".to_string(), "create".to_string()];
    vol_args.extend(label(&dead));
    let out = std::process::Command::new("docker")
        .args(&vol_args)
        .output()
        .unwrap();
    let dead_volume = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let docker = sandbox_docker::connect().await.unwrap();
    // As root, runs also stage idmapped mounts under /run/sandbox-docker: a dead owner's
    // (still mounted) is unmounted and removed, a live one's is left.
    let staged = |name: &str, owner: &str| {
        let dir = PathBuf::from("/run/sandbox-docker").join(name);
        std::fs::create_dir_all(dir.join("0")).unwrap();
        std::fs::write(dir.join("owner"), owner).unwrap();
        dir
    };
    let (_src, src) = dir();
    let dead_stage = is_root().then(|| {
        let d = staged(&format!("sandbox-test-dead-{dead_pid}"), &dead);
        let st = std::process::Command::new("mount")
            .args(["--bind"])
            .arg(&src)
            .arg(d.join("0"))
            .status()
            .unwrap();
        assert!(st.success());
        d
    });
    let live_stage = is_root().then(|| staged(&format!("sandbox-test-live-{dead_pid}"), &me));
    let removed = sandbox_docker::cleanup_leftovers(&docker, sandbox_docker::Scope::DeadOwners)
        .await
        .unwrap();
    if let (Some(dead_stage), Some(live_stage)) = (&dead_stage, &live_stage) {
        assert!(removed.staging.contains(dead_stage), "{removed:?}");
        assert!(!dead_stage.exists());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&*dead_stage.to_string_lossy()),
            "still mounted"
        );
        assert!(live_stage.exists());
        std::fs::remove_dir_all(live_stage).unwrap();
    }
    assert!(removed.containers.contains(&leftover), "{removed:?}");
    assert!(!removed.containers.contains(&live), "{removed:?}");
    // Other dead owners' leftovers on the same engine (a crashed earlier run) go too: the
    // engine is shared, so only ours are asserted on.
    assert!(removed.volumes.contains(&dead_volume), "{removed:?}");
    let still = ours().0;
    assert_eq!(still.len(), 1);
    assert!(live.starts_with(&still[0]));
    // `Scope::All` would remove every labelled object on the engine, other processes' live
    // runs included (the engine is shared): this test removes only its own.
    let out = std::process::Command::new("docker")
        .args(["rm", "-f", &live])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_clean();
}

/// A runtime shut down mid-run drops the supervisor: what the run made is still removed.
#[test]
fn a_runtime_shut_down_mid_run_still_removes_the_container() {
    let g = SERIAL.blocking_lock();
    let (_d, ws) = dir();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sb = backend(WorkspaceMode::Bind).sandbox();
    rt.block_on(sb.run(SandboxOpts::new(&ws, sh("busybox sleep 7795"))))
        .unwrap();
    assert_eq!(ours().0.len(), 1);
    // No kill, no wait: the runtime goes away with the supervisor task in it.
    drop(rt);
    drop(sb);
    let deadline = Instant::now() + Duration::from_secs(60);
    while ours() != (vec![], vec![]) {
        assert!(Instant::now() < deadline, "left behind: {:?}", ours());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive(&["7795"]).is_empty());
    drop(g);
}

#[tokio::test]
async fn bad_configuration_is_refused_at_construction() {
    assert!(DockerBackend::new(DockerConfig::new("")).is_err());
    let mut c = DockerConfig::new("img");
    c.cpus = Some(0.0);
    assert!(DockerBackend::new(c).is_err());
    let b = DockerBackend::new(DockerConfig::new("img")).unwrap();
    assert_eq!(b.name(), "docker");
    assert!(!b.capability().host_programs);
}

#[tokio::test]
async fn rebuilding_an_image_keeps_one_copy_and_skips_unchanged_contents() {
    let _g = SERIAL.lock().await;
    let docker = sandbox_docker::connect().await.unwrap();
    let tag = "sandbox-docker-test-rebuild:latest";
    // Asked of the engine with its own client: the crate's connection is opaque.
    let id = |_: &sandbox_docker::DockerEngine| async move {
        let o = std::process::Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", tag])
            .output()
            .unwrap();
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let exists = |image: &str| {
        std::process::Command::new("docker")
            .args(["image", "inspect", image])
            .output()
            .unwrap()
            .status
            .success()
    };
    let one = [(PathBuf::from("/usr/bin/true"), PathBuf::from("/t"))];
    let two = [(PathBuf::from("/usr/bin/false"), PathBuf::from("/t"))];
    sandbox_docker::build_image_from_binaries(&docker, tag, &one)
        .await
        .unwrap();
    let first = id(&docker).await.unwrap();
    sandbox_docker::build_image_from_binaries(&docker, tag, &one)
        .await
        .unwrap();
    assert_eq!(id(&docker).await.unwrap(), first, "unchanged: kept");
    sandbox_docker::build_image_from_binaries(&docker, tag, &two)
        .await
        .unwrap();
    let second = id(&docker).await.unwrap();
    assert_ne!(second, first);
    assert!(!exists(&first), "the replaced image is removed");
    let removed = std::process::Command::new("docker")
        .args(["image", "rm", tag])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{removed:?}");
    assert!(!exists(tag));
}

fn pooled(o: &sandbox_core::SandboxOutcome) -> bool {
    o.policy.enforced.contains(&Container::WarmPool.into())
}

/// The record says an idmapped mount was used for a tree, or why none could be.
fn idmap_recorded(o: &sandbox_core::SandboxOutcome) -> bool {
    o.policy.enforced.iter().any(|e| {
        matches!(
            e,
            Enforced::Container(Container::Tree {
                via: TreeVia::IdmappedBind { .. },
                ..
            }) | Enforced::Container(Container::CopiedWithoutIdmap { .. })
        )
    })
}

#[tokio::test]
async fn repeated_runs_come_from_the_warm_pool_exactly_and_a_dropped_backend_leaves_nothing() {
    let _g = SERIAL.lock().await;
    // Bound as it is: a tree that needs idmapped staging is staged per run, unpooled.
    let (_d, ws, _) = bind_dir();
    let b = backend(WorkspaceMode::Bind);
    let script = r#"printf '[%s]' "$@"; read -r x; echo "in=$x"; echo err >&2; exit 7"#;
    let mut from_pool = 0;
    for i in 0..4 {
        let mut argv = sh(script);
        argv.extend([
            "argv0".into(),
            "a b".into(),
            i.to_string(),
            String::new(),
            "x\ny".into(),
        ]);
        let mut opts = SandboxOpts::new(&ws, argv);
        opts.stdin = Stdin::Bytes(b"hello\nmore\n".to_vec());
        let o = run(&b, opts).await;
        assert_eq!(o.status, Status::Exited { code: 7 }, "{}", o.stderr.text());
        assert_eq!(o.stdout.text(), format!("[a b][{i}][][x\ny]in=hello\n"));
        assert_eq!(o.stderr.text(), "err\n");
        from_pool += usize::from(pooled(&o));
    }
    // The first two runs have no pool yet (the second starts it); each later one takes
    // the container its predecessor had made ready.
    assert_eq!(from_pool, 2);

    // A command with no input reads end-of-file at once; a signal's status is the
    // init's, as in a fresh container.
    let o = run(&b, SandboxOpts::new(&ws, sh("busybox cat; kill -TERM $$"))).await;
    assert!(pooled(&o));
    assert_eq!(o.status, Status::Exited { code: 143 });

    // Another policy (one more variable) never takes this policy's container.
    let mut opts = SandboxOpts::new(&ws, ["true"]);
    opts.env.set = vec![("OTHER".into(), "1".into())];
    let o = run(&b, opts).await;
    assert!(!pooled(&o), "{:?}", o.policy.enforced);

    // Idle pooled containers exist while the backend lives, and go with it.
    assert!(!ours().0.is_empty(), "a container is kept ready");
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn a_pooled_run_is_killed_timed_out_and_cleaned_like_a_fresh_one() {
    let _g = SERIAL.lock().await;
    // Bound as it is: a tree that needs idmapped staging is staged per run, unpooled.
    let (_d, ws, _) = bind_dir();
    let b = backend(WorkspaceMode::Bind);
    for _ in 0..2 {
        let fresh = run(&b, SandboxOpts::new(&ws, ["true"])).await;
        assert!(!pooled(&fresh));
    }

    // Timeout, with a double-forked descendant.
    let mut opts = SandboxOpts::new(
        &ws,
        sh("busybox setsid busybox sleep 7801 & busybox sleep 7802"),
    );
    opts.timeout = Some(Duration::from_secs(2));
    let o = run(&b, opts).await;
    assert!(pooled(&o), "{:?}", o.policy.enforced);
    assert_eq!(o.status, Status::TimedOut);
    assert!(alive(&["7801", "7802"]).is_empty());

    // Kill from another task while one waits.
    let sb: Arc<Box<sandbox_core::DynSandbox>> = Arc::new(b.sandbox());
    sb.run(SandboxOpts::new(
        &ws,
        sh("echo started; busybox setsid busybox sleep 7811 & busybox sleep 7812"),
    ))
    .await
    .unwrap();
    let waiter = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.wait().await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(&["7811", "7812"]).len() < 2 {
        assert!(Instant::now() < deadline, "descendants never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sb.kill().await.unwrap();
    let o = waiter.await.unwrap().unwrap();
    assert!(pooled(&o));
    assert_eq!(o.status, Status::Killed);
    assert!(alive(&["7811", "7812"]).is_empty());
    assert_eq!(o.stdout.text(), "started\n");

    // A missing program is still an error before anything runs, on a pooled container.
    let e = b
        .sandbox()
        .execute(SandboxOpts::new(&ws, ["/no/such/program"]))
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");

    // A pooled run outlives its backend value: the pool goes, the run ends whole.
    let late = b.sandbox();
    late.run(SandboxOpts::new(&ws, sh("busybox sleep 1; echo late")))
        .await
        .unwrap();
    drop(b);
    let o = late.wait().await.unwrap();
    assert!(pooled(&o), "{:?}", o.policy.enforced);
    assert_eq!(o.status, Status::Exited { code: 0 });
    assert_eq!(o.stdout.text(), "late\n");
    drop(sb);
    assert_clean();
}

/// The inodes of this process's sockets whose network namespace is not this process's
/// own (a container's), which must not outlive a run.
///
/// Each socket is asked for its namespace (`SIOCGSKNS`) rather than looked up in this
/// namespace's socket tables: a table read races with the engine client's own
/// connections opening and closing meanwhile (one opened between the two reads looked
/// like another namespace's), and a socket that is created but not yet bound is in no
/// table at all.
fn sockets_of_other_namespaces() -> BTreeSet<u64> {
    use std::os::fd::FromRawFd;
    // A namespace is named by its device and inode together.
    let id = |m: std::fs::Metadata| (m.dev(), m.ino());
    let ours = id(std::fs::metadata("/proc/self/ns/net").unwrap());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let fd: libc::c_int = e.file_name().to_str()?.parse().ok()?;
            let link = std::fs::read_link(e.path()).ok()?;
            let link = link.to_string_lossy();
            let ino: u64 = link
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()?;
            // SAFETY: an ioctl that only makes a new descriptor; on a descriptor closed (or
            // reused) since the listing it fails or answers for that one, both harmless.
            let ns = unsafe { libc::ioctl(fd, libc::SIOCGSKNS as _) };
            if ns < 0 {
                return None;
            }
            // SAFETY: `ns` was just made for this process and is owned here alone.
            let ns = std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(ns) });
            (id(ns.metadata().ok()?) != ours).then_some(ino)
        })
        .collect()
}

/// Threads of this process with `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == name)
        .count()
}

#[tokio::test]
async fn host_ports_reach_exactly_the_hosts_port_fresh_and_pooled_and_nothing_is_left() {
    let _g = SERIAL.lock().await;
    let (_d, ws, _) = bind_dir();
    let b = backend(WorkspaceMode::Bind);
    let host = HostListener::start("host-port").unwrap();
    let port = host.addr().port();
    let neighbour = port.wrapping_add(1).max(1);
    let script = format!(
        "echo hi | busybox nc -w 5 127.0.0.1 {port} && echo REACHED; \
         echo hi | busybox nc -w 2 127.0.0.1 {neighbour} || echo NEIGHBOUR-REFUSED"
    );
    let opts = || {
        let mut o = SandboxOpts::new(&ws, sh(&script));
        o.network = NetworkMode::Loopback;
        o.host_ports = vec![port];
        o
    };
    if !sandbox_docker::capability().host_ports {
        // Not root, or a remote engine: refused before anything runs, saying so.
        let e = b.sandbox().execute(opts()).await.unwrap_err();
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
        assert_clean();
        return;
    }
    let mut from_pool = 0;
    for i in 0..4 {
        let o = run(&b, opts()).await;
        let out = o.stdout.text();
        assert!(out.contains("REACHED"), "{out} {}", o.stderr.text());
        assert!(out.contains("NEIGHBOUR-REFUSED"), "{out}");
        // The listener counts on a thread of its own: give it time to catch up.
        let deadline = Instant::now() + Duration::from_secs(30);
        while host.accepted() < i + 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(host.accepted(), i + 1);
        assert!(
            matches!(o.connections.entries.as_slice(), [c] if c.port == port && c.decision.is_allowed()),
            "{:?}",
            o.connections
        );
        from_pool += usize::from(pooled(&o));
        assert_eq!(sockets_of_other_namespaces(), BTreeSet::new(), "run {i}");
    }
    assert_eq!(from_pool, 2, "pooled containers get their listeners too");
    // Killed while it holds a connection: the relay and the listener go too. While it
    // runs, the listener is seen in another namespace (the check above can fail).
    let mut o = opts();
    o.argv = sh(&format!(
        "busybox nc 127.0.0.1 {port} </dev/zero; busybox sleep 60"
    ))
    .into_iter()
    .map(Into::into)
    .collect();
    let sb = b.sandbox();
    sb.run(o).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while host.accepted() < 5 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        host.accepted(),
        5,
        "the held connection never reached the host"
    );
    assert!(!sockets_of_other_namespaces().is_empty());
    sb.kill().await.unwrap();
    assert_eq!(sb.wait().await.unwrap().status, Status::Killed);
    assert_eq!(sockets_of_other_namespaces(), BTreeSet::new());
    assert_eq!(threads_named("sandbox-netns"), 0);

    // A published port: the host reaches the command's server at the address it was told;
    // afterwards no descriptor of a namespace (the maker's) is left.
    let told: Arc<std::sync::Mutex<Vec<sandbox_core::Published>>> = Arc::default();
    let mut o = SandboxOpts::new(&ws, sh("echo served | busybox nc -l -p 18080"));
    o.network = NetworkMode::Loopback;
    o.publish = vec!["18080".parse().unwrap()];
    let t = told.clone();
    o.on_published = Some(sandbox_core::PublishSink(Arc::new(move |p| {
        *t.lock().unwrap() = p.to_vec();
    })));
    let sb = b.sandbox();
    sb.run(o).await.unwrap();
    let at = told.lock().unwrap()[0].host;
    let got = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut got = String::new();
            if let Ok(mut c) = std::net::TcpStream::connect(at) {
                let _ = std::io::Read::read_to_string(&mut c, &mut got);
            }
            if got.contains("served") || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    assert_eq!(got, "served\n");
    let out = sb.wait().await.unwrap();
    assert_eq!(out.policy.published, *told.lock().unwrap());
    let namespaces = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("net:["))
        .count();
    assert_eq!(namespaces, 0, "a namespace descriptor outlived the run");
    assert!(std::net::TcpStream::connect(at).is_err(), "still published");
    drop(b);
    assert_clean();
}

/// The host path of the layer a running review's container binds at `ws`: the bind's
/// source itself, or (through an idmapped staging mount, as root) the tree that mount
/// shows, as the host's mount table names it.
fn running_layer(ws: &Path) -> PathBuf {
    let source = running_source(ws);
    let source = source.to_str().unwrap();
    // The layer's own directory: the path up to its `sandbox-layer@` component (in the
    // runs directory, `$TMPDIR/sandbox-runs-UID`).
    let named = |p: &str| {
        let p = Path::new(p);
        p.ancestors()
            .find(|a| {
                a.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("sandbox-layer@"))
            })
            .map(Path::to_path_buf)
    };
    if let Some(p) = named(source) {
        return p;
    }
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[4] == source)
        .and_then(|f| named(f[3]))
        .unwrap_or_else(|| panic!("the staging mount {source} shows no layer"))
}

/// The host path the one running container's mount at `ws` comes from, as the engine
/// reports it: a layer, a staging mount of one, or a volume's directory.
fn running_source(ws: &Path) -> PathBuf {
    let ids = ours().0;
    assert_eq!(ids.len(), 1, "one container runs: {ids:?}");
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{range .Mounts}}{{.Source}} {{.Destination}}\n{{end}}",
            &ids[0],
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(_, dst)| Path::new(dst) == ws)
        .map(|(src, _)| PathBuf::from(src))
        .unwrap_or_else(|| panic!("no mount at the workspace: {text}"))
}

#[tokio::test]
async fn a_snapshot_keeps_a_sparse_files_holes_as_the_host_counts_them() {
    let _g = SERIAL.lock().await;
    // As root: a root-owned workspace (through an idmapped mount) and a user's.
    let mut trees = vec![dir()];
    if is_root() {
        let (d, p, _) = bind_dir();
        trees.push((d, p));
    }
    let b = backend(WorkspaceMode::Bind);
    for (_d, ws) in trees {
        let f = std::fs::File::create(ws.join("hole")).unwrap();
        f.set_len(300 << 20).unwrap();
        drop(f);
        let mut opts = SandboxOpts::new(&ws, sh("echo started; busybox sleep 7824"));
        opts.snapshot = true;
        let sb = b.sandbox();
        sb.run(opts).await.unwrap();
        started(sb.as_ref()).await;
        // The copy the command sees, counted by the host's kernel: a dense one allocates
        // 300 MiB.
        let copy = running_source(&ws).join("hole");
        assert_ne!(copy, ws.join("hole"), "the original itself is bound");
        let m = std::fs::metadata(&copy).unwrap();
        sb.kill().await.unwrap();
        let o = sb.wait().await.unwrap();
        assert_eq!(o.status, Status::Killed);
        assert_eq!(m.len(), 300 << 20);
        assert!(
            m.blocks() * 512 < 16 << 20,
            "the snapshot of a sparse file allocated {} MiB",
            (m.blocks() * 512) >> 20
        );
        // Discarded: by the layer under the snapshot, or with the volume it was copied to.
        assert!(
            o.policy.enforced.iter().any(|e| matches!(
                e,
                Enforced::Layer(Layer::Workspace {
                    changes: sandbox_core::Changes::Discard,
                    ..
                }) | Enforced::Container(Container::Tree {
                    via: TreeVia::VolumeDiscarded,
                    ..
                })
            )),
            "{:?}",
            o.policy.enforced
        );
        assert!(o.changes.is_none());
        drop(sb);
        assert!(alive(&["7824"]).is_empty());
        assert_no_staging_left();
        assert!(!copy.exists(), "the snapshot's copy was left");
        assert_clean();
    }
    assert!(b.capability().sparse_snapshot);
}

/// Wait until the command has printed `started`.
async fn started(sb: &dyn Sandbox) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sb.logs().await.unwrap().stdout.text().contains("started") {
        assert!(Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// No idmapped staging mount of this process's runs is left (another process's live run
/// on this host may have its own).
fn assert_no_staging_left() {
    let me = sandbox_docker::owner();
    let ours: Vec<PathBuf> = std::fs::read_dir("/run/sandbox-docker")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| std::fs::read_to_string(p.join("owner")).is_ok_and(|o| o == me))
                .collect()
        })
        .unwrap_or_default();
    assert!(ours.is_empty(), "staging mounts left behind: {ours:?}");
}

/// Nothing of a review is left on the host: its layer, its staging mounts.
fn assert_no_layer_left(layer: &Path) {
    assert!(!layer.exists(), "the layer {} was left", layer.display());
    let name = layer.file_name().unwrap().to_string_lossy().into_owned();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!table.contains(&name), "a mount of {name} was left");
    assert_no_staging_left();
}

#[tokio::test]
async fn a_review_runs_on_a_layer_bound_at_the_workspace_path_and_lists_what_it_did() {
    let _g = SERIAL.lock().await;
    // As root: a root-owned workspace (the command is nobody) and a user's (the command
    // is its owner); both get the root-owned layer through an idmapped mount.
    let mut trees = vec![{
        let (d, p) = dir();
        (d, p, if is_root() { NOBODY } else { nix_uid() })
    }];
    if is_root() {
        trees.push(bind_dir());
    }
    let b = backend(WorkspaceMode::Bind);
    assert_eq!(
        b.capability().change_layer,
        Some(sandbox_core::LayerMechanism::Copy)
    );
    for (_d, ws, uid) in trees {
        std::fs::write(ws.join("a.txt"), "old\n").unwrap();
        let mut opts = SandboxOpts::new(
            &ws,
            sh("pwd; echo new > a.txt; echo x > b.txt; busybox mkfifo p; \
                busybox stat -c %u b.txt; busybox cat a.txt"),
        );
        opts.changes = sandbox_core::Changes::Review;
        opts.capture_files = vec!["b.txt".into()];
        let o = run(&b, opts).await;
        assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
        // The command saw the workspace's own path, its uid, its own writes.
        assert_eq!(
            o.stdout.text(),
            format!("{}\n{uid}\nnew\n", ws.display()),
            "{:?}",
            o.policy.enforced
        );
        assert!(!pooled(&o));
        assert!(
            o.policy.enforced.iter().any(|e| matches!(
                e,
                Enforced::Layer(Layer::Workspace {
                    made_by: LayerMechanism::Copy,
                    ..
                })
            )),
            "{:?}",
            o.policy.enforced
        );
        // Captured from the command's view, the layer.
        assert_eq!(
            o.files.get(Path::new("b.txt")).map(Vec::as_slice),
            Some(&b"x\n"[..])
        );
        // The real workspace is untouched.
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "old\n");
        assert!(!ws.join("b.txt").exists() && !ws.join("p").exists());
        let set = o.changes.clone().expect("a change set");
        assert_eq!(set.mechanism(), sandbox_core::LayerMechanism::Copy);
        let got: Vec<(String, String)> = set
            .changes()
            .iter()
            .map(|c| {
                (
                    c.path.display().to_string(),
                    format!("{:?}", c.kind).to_lowercase(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a.txt".into(), "modified".into()),
                ("b.txt".into(), "added".into()),
                ("p".into(), "special".into()),
            ]
        );
        // The container and the staging mount are gone; the layer waits for the host.
        assert_clean();
        let layer = set.layer_dir().expect("a pending layer");
        assert!(layer.exists());
        drop(o);
        set.discard();
        assert_no_layer_left(&layer);
    }
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn a_killed_or_dropped_review_leaves_no_layer_mount_or_container() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let b = backend(WorkspaceMode::Bind);
    let review = |script: &str| {
        let mut opts = SandboxOpts::new(&ws, sh(script));
        opts.changes = sandbox_core::Changes::Review;
        opts
    };
    // Killed: the outcome still carries what the command wrote before.
    let sb = b.sandbox();
    sb.run(review("echo w > w.txt; echo started; busybox sleep 7821"))
        .await
        .unwrap();
    started(sb.as_ref()).await;
    let layer = running_layer(&ws);
    assert!(layer.exists());
    sb.kill().await.unwrap();
    let o = sb.wait().await.unwrap();
    assert_eq!(o.status, Status::Killed);
    assert!(alive(&["7821"]).is_empty());
    assert_clean();
    let set = o.changes.clone().expect("a change set after a kill");
    assert_eq!(set.changes().len(), 1, "{:?}", set.changes());
    assert!(!ws.join("w.txt").exists());
    // Dropping the outcome (the last holder of the set) removes the layer.
    drop((o, set));
    drop(sb);
    assert_no_layer_left(&layer);

    // Timed out: the same.
    let mut opts = review("echo started; busybox sleep 7822");
    opts.timeout = Some(Duration::from_secs(3));
    let sb = b.sandbox();
    sb.run(opts).await.unwrap();
    started(sb.as_ref()).await;
    let layer = running_layer(&ws);
    let o = sb.wait().await.unwrap();
    assert_eq!(o.status, Status::TimedOut);
    drop(o);
    drop(sb);
    assert_no_layer_left(&layer);
    assert_clean();

    // Dropped mid-run: nobody takes the outcome; the container and the layer still go.
    let sb = b.sandbox();
    sb.run(review("echo started; busybox sleep 7823"))
        .await
        .unwrap();
    started(sb.as_ref()).await;
    let layer = running_layer(&ws);
    drop(sb);
    let deadline = Instant::now() + Duration::from_secs(60);
    while ours() != (vec![], vec![]) || layer.exists() {
        assert!(Instant::now() < deadline, "left behind: {:?}", ours());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(alive(&["7823"]).is_empty());
    assert_no_layer_left(&layer);
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn a_review_never_takes_a_pooled_container_made_before_its_layer() {
    let _g = SERIAL.lock().await;
    // Bound as it is, so the direct runs of this policy are pooled.
    let (_d, ws, _) = bind_dir();
    let b = backend(WorkspaceMode::Bind);
    let script = "echo cmd > out.txt; busybox cat out.txt";
    for _ in 0..3 {
        let o = run(&b, SandboxOpts::new(&ws, sh(script))).await;
        assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    }
    std::fs::remove_file(ws.join("out.txt")).unwrap();
    // A container for this policy is ready; the same command as a review must not take
    // it (its workspace is the real one): a fresh container on the layer instead.
    let mut opts = SandboxOpts::new(&ws, sh(script));
    opts.changes = sandbox_core::Changes::Review;
    let o = run(&b, opts).await;
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert!(!pooled(&o), "{:?}", o.policy.enforced);
    assert_eq!(o.stdout.text(), "cmd\n");
    assert!(
        !ws.join("out.txt").exists(),
        "the review wrote the real workspace"
    );
    let set = o.changes.clone().expect("a change set");
    assert_eq!(set.changes().len(), 1);
    assert_eq!(set.changes()[0].path, Path::new("out.txt"));
    let layer = set.layer_dir().unwrap();
    drop((o, set));
    assert_no_layer_left(&layer);
    // The ready container is still there for the policy it was made for.
    let o = run(&b, SandboxOpts::new(&ws, sh(script))).await;
    assert!(pooled(&o), "{:?}", o.policy.enforced);
    assert!(ws.join("out.txt").exists());
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn copy_mode_refuses_a_review_by_capability_before_anything_is_made() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let b = backend(WorkspaceMode::Copy);
    assert_eq!(b.capability().change_layer, None);
    let mut opts = SandboxOpts::new(&ws, sh("echo x > x.txt"));
    opts.changes = sandbox_core::Changes::Review;
    let e = b.sandbox().execute(opts).await.unwrap_err();
    assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
    assert!(!ws.join("x.txt").exists());
    // Discarding (a snapshot) still works in copy mode.
    let mut opts = SandboxOpts::new(&ws, sh("echo x > x.txt"));
    opts.changes = sandbox_core::Changes::Discard;
    let o = run(&b, opts).await;
    assert_eq!(o.status, Status::Exited { code: 0 }, "{}", o.stderr.text());
    assert!(o.changes.is_none() && !ws.join("x.txt").exists());
    drop(b);
    assert_clean();
}

#[tokio::test]
async fn a_read_path_named_through_a_host_symlink_shows_its_target_at_the_name() {
    let _g = SERIAL.lock().await;
    let (_d, ws, _) = bind_dir();
    let (_o, other) = dir();
    std::fs::create_dir(other.join("real")).unwrap();
    std::fs::write(other.join("real/f"), "through the link\n").unwrap();
    std::os::unix::fs::symlink("real", other.join("link")).unwrap();
    let link = other.join("link");
    for mode in [WorkspaceMode::Bind, WorkspaceMode::Copy] {
        let mut opts = SandboxOpts::new(
            &ws,
            vec![
                "/bin/busybox".to_string(),
                "cat".into(),
                link.join("f").display().to_string(),
            ],
        );
        opts.read_only_paths = vec![link.clone()];
        let o = run(&backend(mode), opts).await;
        assert_eq!(o.status, Status::Exited { code: 0 }, "{mode:?}: {o:?}");
        assert_eq!(o.stdout.text(), "through the link\n");
        assert!(
            o.policy.enforced.iter().any(|e| matches!(
                e,
                Enforced::Container(Container::Tree { path, link_to: Some(_), .. })
                    if *path == link
            )),
            "{:?}",
            o.policy.enforced
        );
        assert_clean();
    }
}

#[tokio::test]
async fn an_image_whose_sbin_leads_under_a_handed_over_path_is_one_line_with_its_remedy() {
    let _g = SERIAL.lock().await;
    // `/sbin -> usr/sbin`, as on a merged-/usr host, and busybox.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "sbin", "usr/sbin").unwrap();
    let busybox = std::fs::read("/bin/busybox").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(busybox.len() as u64);
    h.set_mode(0o755);
    b.append_data(&mut h, "bin/busybox", &busybox[..]).unwrap();
    let archive = b.into_inner().unwrap();
    let tag = "sandbox-docker-test-sbin-link:latest";
    let mut import = std::process::Command::new("docker")
        .args(["import", "-", tag])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut import.stdin.take().unwrap(), &archive).unwrap();
    assert!(import.wait().unwrap().success());

    let (_d, ws, _) = bind_dir();
    let backend = DockerBackend::new(DockerConfig::new(tag)).unwrap();
    let mut opts = SandboxOpts::new(&ws, ["/bin/busybox", "true"]);
    opts.read_only_paths = vec!["/usr".into()];
    let e = backend.sandbox().execute(opts).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, SandboxError::Unavailable { .. }), "{text}");
    assert!(!text.contains("shim") && !text.contains('\n'), "{text}");
    assert!(
        text.contains("/sbin/docker-init") && text.contains("--read /usr"),
        "{text}"
    );
    drop(backend);
    assert_clean();
    let _ = std::process::Command::new("docker")
        .args(["rmi", tag])
        .output();
}
