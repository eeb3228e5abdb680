//! Network `proxy` where no namespace can be made (a default container or pod): the door
//! the run's supervisor mediates. Judged from the host: the allowed server is reached
//! through the proxy, a listener reached around it sees no one, a given host port is
//! reached and recorded, and the record says the door was mediated.
//!
//! The host's namespaces are not touched: the test re-runs itself in a user namespace of
//! its own whose `user.max_user_namespaces` is 0, as an unprivileged uid there, where the
//! backend can make none (as in a pod) and chooses the mediated door.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use sandbox_conformance::host::HostListener;
use sandbox_core::record::{Door, Enforced};
use sandbox_core::{Backend, DenialKind, DoorPlace, Enforcement, NetworkMode};

const INNER: &str = "SANDBOX_LANDLOCK_MEDIATED_INNER";

#[tokio::test(flavor = "multi_thread")]
async fn without_namespaces_proxy_and_host_ports_go_through_the_mediated_door() {
    if std::env::var_os(INNER).is_some() {
        return inner().await;
    }
    // SAFETY: plain queries.
    let (uid, gid) = if is_root() {
        (65534, 65534)
    } else {
        unsafe { (libc::getuid(), libc::getgid()) }
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
            "without_namespaces_proxy_and_host_ports_go_through_the_mediated_door",
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

/// An HTTP server on the host's loopback that answers `mediated-ok` and counts requests.
fn server() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut head = [0u8; 4096];
            let n = s.read(&mut head).unwrap_or(0);
            if String::from_utf8_lossy(&head[..n]).starts_with("GET /via-proxy ") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 11\r\n\r\nmediated-ok");
        }
    });
    (port, seen)
}

async fn inner() {
    let cap = backend().capability();
    assert_eq!(cap.door, DoorPlace::Mediated, "{cap:?}");
    assert_eq!(cap.network_proxy, Enforcement::Exact);
    assert!(cap.host_ports && !cap.publish && cap.secrets);

    let (port, seen) = server();
    let forbidden = HostListener::start("forbidden").unwrap();
    let given = HostListener::start("given-port").unwrap();
    let ws = tempdir();
    let script = format!(
        "env -u no_proxy -u NO_PROXY curl -sS --max-time 20 -x http://127.0.0.1:3128 \
         http://127.0.0.1:{port}/via-proxy; \
         echo proxied=$?; \
         curl -s --max-time 5 --noproxy '*' http://{forbidden}/; echo direct=$?; \
         python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {hp})); \
         print(s.recv(64).decode())\"; echo hostport=$?",
        forbidden = forbidden.addr(),
        hp = given.addr().port()
    );
    let mut o = opts(ws.path(), &["sh", "-c", &script]);
    o.network = NetworkMode::Proxy;
    o.allow_hosts = vec![format!("127.0.0.0/8:{port}")];
    o.host_ports = vec![given.addr().port()];
    let out_ = run(o).await;
    let text = out(&out_);
    assert!(
        text.contains("mediated-ok") && text.contains("proxied=0"),
        "{text}\n{}\n{:?}",
        err(&out_),
        out_.connections
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "the server saw the one request"
    );
    assert!(text.contains("direct=7"), "curl around the proxy: {text}");
    assert_eq!(
        forbidden.accepted(),
        0,
        "a listener was reached around the proxy"
    );
    assert!(
        text.contains("given-port") && text.contains("hostport=0"),
        "{text}"
    );
    assert_eq!(given.accepted(), 1);
    // The record: the door was mediated; the connections and the refusal are in it.
    assert!(
        out_.policy.enforced.iter().any(|e| matches!(
            e,
            Enforced::Door(Door::Mediated { host_ports, .. }) if host_ports == &[given.addr().port()]
        )),
        "{:?}",
        out_.policy.enforced
    );
    let c = &out_.connections.entries;
    assert!(
        c.iter()
            .any(|c| c.port == port && c.decision.is_allowed() && c.bytes_in > 0),
        "{c:?}"
    );
    assert!(
        out_.denials
            .entries
            .iter()
            .any(|d| d.kind == DenialKind::NetworkConnect
                && d.target == forbidden.addr().to_string()),
        "{:?}",
        out_.denials
    );
    println!("inner checks passed");
}
