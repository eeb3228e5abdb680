//! What landlock's network modes deny beyond the suite's cases (every socket family
//! without a network, the reply on its private loopback, unix sockets of the host), judged
//! from the host with the suite's own listener ([`HostListener`]), which counts visitors.
//! That `full` reaches the host, and that `none` and `loopback` do not, are the suite's
//! cases: `cargo xtask conformance --backend landlock -- net::`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::ErrorKind;
use std::os::unix::net::UnixListener;

use common::*;
use sandbox_conformance::host::HostListener;
use sandbox_core::record::Namespaces;
use sandbox_core::{Enforced, NetworkMode};

/// A host listener on an ephemeral port of 127.0.0.1.
fn host_listener() -> HostListener {
    HostListener::start("host-listener").unwrap()
}

fn connect_script(port: u16) -> String {
    format!(
        r#"
import socket
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=10)
    s.sendall(b"hello-from-sandbox")
    s.close()
    print("host", 0)
except OSError as e:
    print("host", e.errno)
"#
    )
}

const OWN_LOOPBACK: &str = r#"
import socket, threading
try:
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    port = srv.getsockname()[1]
    def serve():
        c, _ = srv.accept(); c.sendall(c.recv(100).upper()); c.close()
    threading.Thread(target=serve).start()
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"ping"); got = c.recv(100)
    print("own", 0 if got == b"PING" else 99)
except OSError as e:
    print("own", e.errno)
"#;

const OTHER_FAMILIES: &str = r#"
import socket
for name, fam, typ in [("inet", socket.AF_INET, socket.SOCK_STREAM),
                       ("inet6", socket.AF_INET6, socket.SOCK_DGRAM),
                       ("netlink", socket.AF_NETLINK, socket.SOCK_RAW),
                       ("packet", socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ).close(); print(name, 0)
    except OSError as e:
        print(name, e.errno)
try:
    a, b = socket.socketpair(); a.sendall(b"x"); print("socketpair", 0 if b.recv(1) == b"x" else 99)
except OSError as e:
    print("socketpair", e.errno)
"#;

fn errno_of(o: &sandbox_core::SandboxOutcome, name: &str) -> i32 {
    results(o)
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {}\n{}", out(o), err(o)))
        .1
}

#[tokio::test(flavor = "multi_thread")]
async fn network_none_denies_every_socket_family_and_reaches_nothing() {
    let ws = tempdir();
    let host = host_listener();
    let body = format!("{}\n{OTHER_FAMILIES}", connect_script(host.addr().port()));
    let o = python(ws.path(), &body, |_| {}).await;
    assert_ok(&o);
    assert_eq!(errno_of(&o, "host"), libc::EPERM);
    for fam in ["inet", "inet6", "netlink", "packet"] {
        assert_eq!(errno_of(&o, fam), libc::EPERM, "{fam}");
    }
    assert_eq!(errno_of(&o, "socketpair"), 0);
    assert_eq!(host.accepted(), 0, "the host's listener was reached");
}

#[tokio::test(flavor = "multi_thread")]
async fn network_loopback_is_private_the_host_loopback_is_out_of_reach() {
    let ws = tempdir();
    let host = host_listener();
    let body = format!("{}\n{OWN_LOOPBACK}", connect_script(host.addr().port()));
    let o = python(ws.path(), &body, |o| o.network = NetworkMode::Loopback).await;
    assert_ok(&o);
    assert_eq!(errno_of(&o, "own"), 0, "own loopback: {}", err(&o));
    assert_eq!(errno_of(&o, "host"), libc::ECONNREFUSED);
    assert_eq!(host.accepted(), 0, "the host's listener was reached");
    assert!(
        o.policy.enforced.iter().any(|e| matches!(
            e,
            Enforced::Namespaces(Namespaces::Network { loopback: true, .. })
        )),
        "{:?}",
        o.policy.enforced
    );
    assert!(!o.policy.can_reach_network());
}

/// Before landlock ABI 9 a unix socket reached by path is not confined by landlock, so
/// `socket(AF_UNIX)` is denied: a host service (docker.sock, an ssh or gpg agent) stays out
/// of reach even when its directory is readable.
#[tokio::test(flavor = "multi_thread")]
async fn host_unix_sockets_are_out_of_reach_in_every_network_mode() {
    let ws = tempdir();
    let run_dir = tempdir();
    let path = run_dir.path().join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let body = format!(
        r#"
import socket
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("{}")
    s.sendall(b"x")
    print("agent", 0)
except OSError as e:
    print("agent", e.errno)
"#,
        path.display()
    );
    for mode in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
        let o = python(ws.path(), &body, |o| {
            o.network = mode;
            o.read_only_paths = vec![run_dir.path().into()];
        })
        .await;
        assert_ok(&o);
        let e = errno_of(&o, "agent");
        assert!(e == libc::EPERM || e == libc::EACCES, "{mode}: errno {e}");
        match listener.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("{mode}: the host's unix socket was reached: {other:?}"),
        }
    }
}
