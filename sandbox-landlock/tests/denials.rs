//! The outcome's denials: the table's denied calls are reported by name (seccomp user
//! notification), allowed operations never are, and a command looping over a denied call
//! keeps the host's memory bounded.

// Test helpers panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use sandbox_core::{Backend, Denial, DenialKind, DenialMechanism, Sandbox};

fn find<'a>(o: &'a sandbox_core::SandboxOutcome, target: &str) -> Option<&'a Denial> {
    o.denials.entries.iter().find(|d| d.target == target)
}

#[tokio::test(flavor = "multi_thread")]
async fn denied_calls_are_reported_by_name_and_still_fail_with_eperm() {
    let kinds = backend().sandbox().capability().reports_denials;
    if !kinds.syscall {
        eprintln!("skipped: this kernel has no seccomp user notification");
        return;
    }
    let ws = tempdir();
    // ptrace(PTRACE_TRACEME) twice, mount once: denied by the table.
    let o = python(
        ws.path(),
        &format!(
            "sc('ptrace', {p}, 0, 0, 0, 0)\nsc('ptrace', {p}, 0, 0, 0, 0)\nsc('mount', {m}, 0, 0, 0, 0, 0)",
            p = libc::SYS_ptrace,
            m = libc::SYS_mount
        ),
        |_| {},
    )
    .await;
    assert_ok(&o);
    assert_eq!(
        results(&o),
        [
            ("ptrace".to_string(), libc::EPERM),
            ("ptrace".to_string(), libc::EPERM),
            ("mount".to_string(), libc::EPERM)
        ],
        "stderr: {}",
        err(&o)
    );
    let p = find(&o, "ptrace").expect("ptrace reported");
    assert_eq!(
        (p.kind, p.mechanism, p.count),
        (DenialKind::Ptrace, DenialMechanism::Seccomp, 2)
    );
    let m = find(&o, "mount").expect("mount reported");
    assert_eq!(
        (m.kind, m.mechanism, m.count),
        (DenialKind::Syscall, DenialMechanism::Seccomp, 1)
    );
    assert_eq!(o.denials.entries.len(), 2, "{:?}", o.denials);
    assert_eq!(o.denials.more, 0);
    assert_eq!(
        o.denials.summary().unwrap(),
        "denied 3 operations: ptrace (seccomp) x2, mount (seccomp)"
    );
}

/// A refused socket names its family and type (issue 33: a bare `socket (seccomp)` read as
/// the command reaching for the network where it was glibc's UDP probe while ordering
/// addresses): with network `none`, an AF_INET datagram socket and a netlink one are
/// refused with EPERM and each reported as what it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_socket_is_reported_with_its_family_and_type() {
    let kinds = backend().sandbox().capability().reports_denials;
    if !kinds.syscall {
        eprintln!("skipped: this kernel has no seccomp user notification");
        return;
    }
    let ws = tempdir();
    let o = python(
        ws.path(),
        &format!(
            "sc('udp', {s}, {inet}, {dgram}, 0)\nsc('netlink', {s}, {nl}, {raw}, 0)",
            s = libc::SYS_socket,
            inet = libc::AF_INET,
            dgram = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            nl = libc::AF_NETLINK,
            raw = libc::SOCK_RAW,
        ),
        |_| {},
    )
    .await;
    assert_ok(&o);
    assert_eq!(
        results(&o),
        [
            ("udp".to_string(), libc::EPERM),
            ("netlink".to_string(), libc::EPERM)
        ],
        "stderr: {}",
        err(&o)
    );
    for target in [
        "socket(AF_INET, SOCK_DGRAM)",
        "socket(AF_NETLINK, SOCK_RAW)",
    ] {
        let d = find(&o, target).unwrap_or_else(|| panic!("{target} not in {:?}", o.denials));
        assert_eq!((d.mechanism, d.count), (DenialMechanism::Seccomp, 1));
    }
    assert!(
        o.denials
            .summary()
            .is_some_and(|s| s.contains("socket(AF_INET, SOCK_DGRAM) (seccomp)")),
        "{:?}",
        o.denials.summary()
    );
}

/// Allowed operations (reads, writes in the workspace, processes, an allowed socket)
/// never appear as denials.
#[tokio::test(flavor = "multi_thread")]
async fn allowed_operations_are_not_denials() {
    let ws = tempdir();
    let o = sh(
        ws.path(),
        "ls . >/dev/null && cat /etc/passwd >/dev/null && echo hi > f && cat f && \
         (sleep 0 &) && wait && python3 -c 'import socket; socket.socketpair()'",
    )
    .await;
    assert_ok(&o);
    assert_eq!(out(&o), "hi\n");
    assert!(o.denials.is_empty(), "{:?}", o.denials);
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A million denied calls: the run finishes, each is counted, and the host's memory
/// stays put (one entry, a count).
#[tokio::test(flavor = "multi_thread")]
async fn a_million_denied_calls_keep_host_memory_bounded() {
    if !backend().sandbox().capability().reports_denials.syscall {
        eprintln!("skipped: this kernel has no seccomp user notification");
        return;
    }
    let ws = tempdir();
    let body = format!(
        "f = libc.syscall\nn = 0\nfor _ in range(1000000):\n    n += f({}, 0, 0, 0, 0) == -1\nprint('failed', n)",
        libc::SYS_ptrace
    );
    // Warm the backend and the runtime first, so their one-off allocations do not count.
    assert_ok(&sh(ws.path(), "true").await);
    let before = rss_kib();
    let o = python(ws.path(), &body, |_| {}).await;
    let after = rss_kib();
    assert_ok(&o);
    assert_eq!(out(&o), "failed 1000000\n", "stderr: {}", err(&o));
    let p = find(&o, "ptrace").expect("ptrace reported");
    assert_eq!(p.count, 1_000_000);
    assert_eq!(o.denials.entries.len(), 1);
    assert!(
        after.saturating_sub(before) < 10 * 1024,
        "host RSS grew from {before} KiB to {after} KiB"
    );
}
