//! Network mode `proxy` on a real run: the command reaches an allowed name through the
//! proxy, with only the environment the sandbox sets; everything else is refused and
//! recorded. Upstream servers listen on the host's 127.0.0.1 and stand in for names through
//! a resolver table; nothing leaves loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::Arc;

use common::*;
use sandbox_core::{Decision, NetworkMode};
use sandbox_proxy::TableResolver;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// An HTTP server on the host's loopback answering `hello from upstream`, on a thread.
fn upstream() -> u16 {
    let l = TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "hello from upstream\n";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_name_reached_denied_and_direct_refused() {
    let up = upstream();
    let ws = tempdir();
    let script = format!(
        "curl -sS --max-time 10 http://allowed.test:{up}/; echo allowed=$?; \
         curl -sS --max-time 10 https://denied.test:{up}/ 2>&1; echo denied=$?; \
         curl -sS --max-time 10 --noproxy '*' http://127.0.0.1:{up}/ 2>&1; echo direct=$?"
    );
    let mut o = opts(ws.path(), &["sh", "-c", &script]);
    o.network = NetworkMode::Proxy;
    o.allow_hosts = vec![format!("allowed.test:{up}")];
    o.resolver = Some(Arc::new(
        TableResolver::new()
            .with("allowed.test", LO)
            .with("denied.test", LO),
    ));
    let out = run(o).await;
    let text = out.stdout.text();
    assert!(
        text.contains("hello from upstream\nallowed=0"),
        "{text}\n{}",
        out.stderr.text()
    );
    assert!(!text.contains("denied=0"), "{text}");
    assert!(!text.contains("direct=0"), "{text}");
    assert_eq!(out.connections.len(), 2, "{:#?}", out.connections);
    assert!(out.connections[0].decision.is_allowed());
    assert_eq!(out.connections[1].host, "denied.test");
    assert_eq!(
        out.connections[1].decision,
        Decision::Denied("not in the allowlist".into())
    );
}
