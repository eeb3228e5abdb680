//! The `strict` lane: a pid namespace with a private `/proc`, whose init is the spawned
//! process itself, born in it, and execs the sandbox's waiter; the command keeps its own semantics (self-signals, exit codes), orphans
//! are reaped, nothing outlives the run; and where no namespace can be made the lane
//! refuses the backend with the remedy while `fast` still runs it.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::time::Duration;

use common::*;
use sandbox_core::{Backend, Lane, NetworkMode, SandboxError, SandboxExt, Status, TreeKill};

fn strict<S: AsRef<std::ffi::OsStr>>(
    ws: &std::path::Path,
    argv: &[S],
) -> sandbox_core::SandboxOpts {
    let mut o = opts(ws, argv);
    o.lane = Lane::Strict;
    o
}

/// Pids (in the host's namespace) whose command line contains `mark`.
fn host_processes_with(mark: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(mark)
            {
                found.push(pid);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn strict_runs_in_a_pid_namespace_of_its_own() {
    assert!(backend().capability().process_isolation);
    let ws = tempdir();
    let me = std::process::id();
    let o = run(strict(
        ws.path(),
        &[
            "sh",
            "-c",
            &format!(
                "echo self=$$; ls /proc | grep -c '^[0-9]' ; test -e /proc/{me} && echo seen; \
                 kill -0 {me} 2>/dev/null && echo signalled; tr '\\000' ' ' < /proc/1/cmdline; echo"
            ),
        ],
    ))
    .await;
    assert_ok(&o);
    let s = out(&o);
    let lines: Vec<&str> = s.lines().collect();
    // pid 2: the init is pid 1.
    assert_eq!(lines[0], "self=2", "{s}");
    // The init, the shell, ls and grep at most: nothing of the host.
    let n: u32 = lines[1].parse().unwrap();
    assert!((2..=5).contains(&n), "{s}");
    // (The init's command line below holds the script, so whole lines are compared.)
    assert!(
        !lines.contains(&"seen") && !lines.contains(&"signalled"),
        "{s}"
    );
    // The init is the waiter: its command line is its own, nothing of the host's.
    assert!(lines[2].starts_with("sandbox-init "), "{s}");
    let host_program = std::env::args().next().unwrap();
    assert!(!lines[2].contains(&host_program), "{s}");
    assert_eq!(o.policy.tree_kill, Some(TreeKill::PidNamespace));
    assert!(o
        .policy
        .enforced
        .contains(&sandbox_core::record::Namespaces::Pid.into()));
}

#[tokio::test(flavor = "multi_thread")]
async fn fast_has_no_pid_namespace() {
    let ws = tempdir();
    let o = sh(ws.path(), "echo $$").await;
    assert_ok(&o);
    assert_ne!(out(&o).trim(), "2");
    assert_eq!(o.policy.tree_kill, Some(TreeKill::Subreaper));
}

#[tokio::test(flavor = "multi_thread")]
async fn self_signals_and_exit_codes_are_the_commands_own() {
    let ws = tempdir();
    for (sig, name) in [(15, "TERM"), (2, "INT"), (9, "KILL"), (10, "USR1")] {
        let o = run(strict(
            ws.path(),
            &["sh", "-c", &format!("kill -{name} $$")],
        ))
        .await;
        assert_eq!(
            o.status,
            Status::Signaled { signal: sig },
            "{name}: {}",
            err(&o)
        );
    }
    for code in [0, 1, 3, 137, 143, 255] {
        let o = run(strict(ws.path(), &["sh", "-c", &format!("exit {code}")])).await;
        assert_eq!(o.status, Status::Exited { code }, "{}", err(&o));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn orphans_are_reaped_while_the_command_runs() {
    let ws = tempdir();
    // A child that double-forks and exits: its orphan ends before the shell looks.
    let o = run(strict(
        ws.path(),
        &[
            "sh",
            "-c",
            "( sleep 0.2 & ); sleep 1; \
             for f in /proc/[0-9]*/stat; do read -r l < $f 2>/dev/null && echo \"$l\"; done",
        ],
    ))
    .await;
    assert_ok(&o);
    let s = out(&o);
    assert!(
        !s.lines().any(|l| l.contains(") Z ")),
        "a zombie is left: {s}"
    );
    assert!(s.lines().count() >= 2, "{s}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_and_exit_leave_nothing_of_the_namespace() {
    let ws = tempdir();
    let mark = format!("{}", 9_000_000 + std::process::id() % 1_000_000);
    // A background sleeper outlives its shell: the run's end takes it down.
    let o = run(strict(
        ws.path(),
        &["sh", "-c", &format!("sleep {mark} & echo started")],
    ))
    .await;
    assert_ok(&o);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(host_processes_with(&format!("sleep {mark}")).is_empty());

    // Killed while running: the init, the waiter and the command all go.
    let sb = backend().sandbox();
    let mut o = strict(
        ws.path(),
        &["sh", "-c", &format!("sleep {mark} & sleep {mark}")],
    );
    o.timeout = Some(Duration::from_secs(60));
    sb.run(o).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while host_processes_with(&format!("sleep {mark}")).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleepers never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sb.kill().await.unwrap();
    let out = sb.wait().await.unwrap();
    assert_eq!(out.status, Status::Killed);
    assert!(host_processes_with(&format!("sleep {mark}")).is_empty());
}

/// The parent pid of `pid`, from its status file.
fn ppid(pid: u32) -> u32 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("PPid:")).unwrap();
    line["PPid:".len()..].trim().parse().unwrap()
}

/// `kcmp(KCMP_VM)`: whether two processes run in one memory (0), or not (1 or 2).
fn same_memory(a: u32, b: u32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: `kcmp` reads only its integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::pid_t,
            b as libc::pid_t,
            KCMP_VM,
            0,
            0,
        )
    };
    assert!(r >= 0, "kcmp: {}", std::io::Error::last_os_error());
    r == 0
}

/// No process of the run holds a copy of the host: the process core spawned is the pid
/// namespace's init itself (born in it: its `NSpid` ends in 1), it has exec'd the
/// sandbox's waiter from the sealed in-memory file, and the command is its child, each in a
/// memory of its own. Seen from the host with `/proc` and `kcmp(KCMP_VM)` on the live
/// processes. As root only: the waiter is not dumpable, and reading its `exe` or comparing
/// its memory takes `CAP_SYS_PTRACE`.
#[tokio::test(flavor = "multi_thread")]
async fn the_init_is_the_spawned_process_and_holds_no_copy_of_the_host() {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: reading the non-dumpable init needs CAP_SYS_PTRACE (root)");
        return;
    }
    let ws = tempdir();
    let mark = format!("{}.5", 8_000_000 + std::process::id() % 1_000_000);
    let sb = backend().sandbox();
    let mut o = strict(ws.path(), &["sleep", mark.as_str()]);
    o.timeout = Some(Duration::from_secs(60));
    sb.run(o).await.unwrap();
    let me = std::process::id();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // The init's command line names the command too: tell them apart by their parents.
    let (init, command) = loop {
        let found = host_processes_with(&format!("sleep {mark}"));
        let init = found.iter().copied().find(|p| ppid(*p) == me);
        // Once it has exec'd: until then the waiter's spawned child shares its memory.
        let command = init.and_then(|i| {
            found.iter().copied().find(|p| {
                ppid(*p) == i
                    && fs::read_link(format!("/proc/{p}/exe"))
                        .is_ok_and(|e| e.file_name() == Some("sleep".as_ref()))
            })
        });
        if let (Some(i), Some(c)) = (init, command) {
            break (i, c);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let status = fs::read_to_string(format!("/proc/{init}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.trim_end().ends_with("\t1"), "{nspid}");
    let exe = fs::read_link(format!("/proc/{init}/exe")).unwrap();
    assert!(
        exe.to_string_lossy().starts_with("/memfd:sandbox-waiter"),
        "{exe:?}"
    );
    assert!(!same_memory(me, init), "the init runs in the host's memory");
    assert!(
        !same_memory(init, command),
        "the command shares the init's memory"
    );
    sb.kill().await.unwrap();
    assert_eq!(sb.wait().await.unwrap().status, Status::Killed);
    assert!(host_processes_with(&format!("sleep {mark}")).is_empty());
}

/// The probe run as a fresh process, in a user namespace whose `max_user_namespaces` is 0
/// (see [`without_user_namespaces_strict_is_refused_and_fast_runs`]).
const INNER: &str = "SANDBOX_LANDLOCK_NO_USERNS_INNER";

/// As uid 65534 with no user namespace to be had: `process_isolation` is not claimed,
/// `strict` refuses with the remedy, and `fast` still runs, with network `none` too: the
/// filter and landlock enforce it, and the host's /proc/net left readable is recorded
/// (`strict` refuses that).
///
/// No host sysctl is touched: the test re-runs itself in a user namespace of its own whose
/// `user.max_user_namespaces` (a per-namespace limit, checked for every ancestor) it sets
/// to 0, as uid 65534 there. Nothing to restore: the limit dies with the namespace.
#[tokio::test(flavor = "multi_thread")]
async fn without_user_namespaces_strict_is_refused_and_fast_runs() {
    if std::env::var_os(INNER).is_some() {
        return inner().await;
    }
    let uid: u32 = if is_root() {
        65534
    } else {
        unsafe { libc::getuid() }
    };
    let gid: u32 = if is_root() {
        65534
    } else {
        unsafe { libc::getgid() }
    };
    let tmp = tempdir();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let tmp_path = tmp.path().as_os_str().to_owned();
    tokio::task::spawn_blocking(move || {
        sandbox_conformance::host::rerun_in_user_namespace(
            "without_user_namespaces_strict_is_refused_and_fast_runs",
            INNER,
            (uid, gid),
            (uid, gid),
            &[(c"/proc/sys/user/max_user_namespaces", b"0")],
            &[("TMPDIR", &tmp_path)],
        )
    })
    .await
    .unwrap();
}

async fn inner() {
    // SAFETY: plain queries.
    assert_ne!(unsafe { libc::geteuid() }, 0);
    let b = sandbox_landlock::LandlockBackend::new();
    let cap = b.capability();
    assert!(!cap.process_isolation);
    assert_eq!(cap.network_none, sandbox_core::Enforcement::Exact);
    assert!(!cap.network_state_private);
    let ws = tempdir();
    // `full` network, so that the refusal is for the processes alone.
    let mut o = strict(ws.path(), &["true"]);
    o.network = NetworkMode::Full;
    let e = b.sandbox().execute(o).await.unwrap_err();
    match &e {
        SandboxError::PolicyRefused { lane, reason, .. } => {
            assert_eq!(lane, "strict");
            assert!(reason.contains("process isolation"), "{reason}");
            assert!(reason.contains("`fast` lane"), "{reason}");
        }
        other => panic!("{other}"),
    }
    let pre = b.sandbox().preflight().await.unwrap();
    let details = pre.details.join("\n");
    assert!(details.contains("user.max_user_namespaces"), "{details}");
    let mut o = opts(ws.path(), &["sh", "-c", "echo ran"]);
    o.network = NetworkMode::Full;
    let out = b.sandbox().execute(o).await.unwrap();
    assert_eq!(out.status, Status::Exited { code: 0 }, "{}", err(&out));
    assert_eq!(out.stdout.text(), "ran\n");
    // `none` on `fast`: runs, no socket but AF_UNIX, the disclosure in its grants.
    let out = b
        .sandbox()
        .execute(opts(
            ws.path(),
            &[
                "python3",
                "-c",
                "import socket\ntry:\n socket.socket()\nexcept PermissionError:\n print('denied')",
            ],
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout.text(), "denied\n", "{}", err(&out));
    assert!(out.policy.grants.iter().any(|g| {
        g.what == sandbox_core::admission::NETWORK_STATE_UNSEEN
            && matches!(g.enforcement, sandbox_core::Enforcement::OverGrant(_))
    }));
    let e = b
        .sandbox()
        .execute(strict(ws.path(), &["true"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SandboxError::PolicyRefused { reason, .. } if reason.contains("/proc/net")),
        "{e}"
    );
    println!("inner checks passed");
}

/// `fast`, with no pid namespace: the command runs in the waiter's nested landlock domain
/// that scopes signals, and a rename or a hard link across directories of the workspace
/// still works (that domain leaves `REFER` to the sandbox's own layer; a layer that handles
/// no file access would refuse both with `EXDEV`).
#[tokio::test(flavor = "multi_thread")]
async fn fast_lane_renames_and_links_across_directories() {
    let ws = tempdir();
    let w = ws.path();
    fs::create_dir(w.join("a")).unwrap();
    fs::create_dir(w.join("b")).unwrap();
    fs::write(w.join("a/f"), "f").unwrap();
    fs::write(w.join("a/g"), "g").unwrap();
    let out = run(opts(
        w,
        &[
            "python3",
            "-c",
            "import os; os.rename('a/f', 'b/f'); os.link('a/g', 'b/g'); print('ok')",
        ],
    ))
    .await;
    assert_eq!(out.stdout.text(), "ok\n", "{}", err(&out));
    assert!(out.policy.enforced.iter().any(|e| matches!(
        e,
        sandbox_core::Enforced::Namespaces(sandbox_core::record::Namespaces::SubreaperWithoutPid)
    )));
    assert_eq!(fs::read_to_string(w.join("b/f")).unwrap(), "f");
    assert!(!w.join("a/f").exists());
    assert_eq!(fs::read_to_string(w.join("b/g")).unwrap(), "g");
}
