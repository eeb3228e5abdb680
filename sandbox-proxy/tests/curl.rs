//! The proxy against real clients (curl through `--proxy`, `--proxytunnel` and
//! `--socks5-hostname`), with upstream servers on 127.0.0.1 standing in for named hosts
//! through a resolver table. Nothing here leaves loopback or touches the real DNS.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use sandbox_core::egress::{EgressRun, ProxyProtocol, Resolver};
use sandbox_core::{Allowlist, ConnectionRecord, Decision};
use sandbox_proxy::{spawn, ProxyConfig, ProxyRun, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A table resolver that counts lookups, to prove denied names are never resolved.
#[derive(Debug)]
struct Counting(TableResolver, Arc<AtomicUsize>);

#[async_trait]
impl Resolver for Counting {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.resolve(host, port).await
    }
}

/// An HTTP server on 127.0.0.1 that answers every request with `hello from NAME`.
async fn upstream(name: &'static str) -> u16 {
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!("hello from {name}\n");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

struct Fixture {
    proxy: ProxyRun,
    proxy_port: u16,
    up: u16,
    lookups: Arc<AtomicUsize>,
}

async fn fixture(patterns: &[String]) -> Fixture {
    let up = upstream("allowed").await;
    let table = TableResolver::new()
        .with("allowed.test", LO)
        .with("denied.test", LO)
        .with("a.wild.test", LO)
        .with("db.local.test", LO);
    let lookups = Arc::new(AtomicUsize::new(0));
    let config = ProxyConfig::new(
        Allowlist::parse(patterns).unwrap(),
        Some(Arc::new(Counting(table, lookups.clone()))),
    );
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let proxy_port = l.local_addr().unwrap().port();
    let proxy = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    Fixture {
        proxy,
        proxy_port,
        up,
        lookups,
    }
}

async fn curl(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let o = Command::new("curl")
            .args(["-sS", "--max-time", "20", "--noproxy", ""])
            .args(&args)
            .env_clear()
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

fn only(records: &[ConnectionRecord]) -> &ConnectionRecord {
    assert_eq!(records.len(), 1, "{records:#?}");
    &records[0]
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_name_is_reached_over_http_connect_and_socks5_and_recorded() {
    let up_pattern = |p: u16| format!("allowed.test:{p}");
    let up = upstream("allowed").await;
    let f = fixture(&[up_pattern(up)]).await;
    let url = format!("http://allowed.test:{up}/x");
    let proxy = format!("http://127.0.0.1:{}", f.proxy_port);
    for (how, extra) in [
        (
            ProxyProtocol::Http,
            vec!["--proxy".to_string(), proxy.clone()],
        ),
        (
            ProxyProtocol::Connect,
            vec!["--proxy".into(), proxy.clone(), "--proxytunnel".into()],
        ),
        (
            ProxyProtocol::Socks5,
            vec![
                "--socks5-hostname".into(),
                format!("127.0.0.1:{}", f.proxy_port),
            ],
        ),
    ] {
        let mut args = extra;
        args.push(url.clone());
        let (ok, out, err) = curl(args).await;
        assert!(ok, "{how:?}: {err}");
        assert_eq!(out, "hello from allowed\n", "{how:?}");
        let rec = f.proxy.records().entries.into_iter().last().unwrap();
        assert_eq!(rec.protocol, how);
        assert_eq!(rec.host, "allowed.test");
        assert_eq!(rec.port, up);
        assert_eq!(rec.decision, Decision::Allowed(up_pattern(up)));
        assert_eq!(rec.peer, Some(SocketAddr::new(LO, up)));
        assert!(rec.bytes_in > 19 && rec.bytes_out > 10, "{rec:?}");
    }
    assert_eq!(f.proxy.finish().await.entries.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_name_is_refused_recorded_and_never_resolved() {
    let f = fixture(&["allowed.test".into()]).await;
    let proxy = format!("http://127.0.0.1:{}", f.proxy_port);
    let url = format!("http://denied.test:{}/", f.up);
    let (ok, out, _) = curl(vec!["--proxy".into(), proxy.clone(), url.clone()]).await;
    assert!(!ok || !out.contains("hello"), "{out}");
    assert!(out.contains("denied connect to denied.test"), "{out}");
    let (ok, _, err) = curl(vec![
        "--proxy".into(),
        proxy,
        "--proxytunnel".into(),
        url.clone(),
    ])
    .await;
    assert!(!ok && err.contains("403"), "{err}");
    let (ok, _, _) = curl(vec![
        "--socks5-hostname".into(),
        format!("127.0.0.1:{}", f.proxy_port),
        url,
    ])
    .await;
    assert!(!ok);
    let recs = f.proxy.finish().await;
    assert_eq!(recs.entries.len(), 3, "{recs:#?}");
    for r in &recs.entries {
        assert_eq!(r.decision, Decision::Denied("not in the allowlist".into()));
        assert_eq!((r.bytes_in, r.bytes_out, r.peer), (0, 0, None));
        assert_eq!(
            r.denied_line().unwrap(),
            format!(
                "sandbox: denied connect to denied.test:{} (not in the allowlist)",
                f.up
            )
        );
    }
    assert_eq!(f.lookups.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ip_literal_is_refused_unless_a_cidr_covers_it() {
    let up = upstream("allowed").await;
    let f = fixture(&[format!("allowed.test:{up}")]).await;
    let proxy = format!("http://127.0.0.1:{}", f.proxy_port);
    let (_, out, _) = curl(vec![
        "--proxy".into(),
        proxy,
        format!("http://127.0.0.1:{up}/"),
    ])
    .await;
    assert!(!out.contains("hello"), "{out}");
    assert!(matches!(
        &only(&f.proxy.finish().await.entries).decision,
        Decision::Denied(_)
    ));

    let f = fixture(&[format!("127.0.0.0/8:{up}")]).await;
    let (ok, out, err) = curl(vec![
        "--socks5".into(),
        format!("127.0.0.1:{}", f.proxy_port),
        format!("http://127.0.0.1:{up}/"),
    ])
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "hello from allowed\n");
    assert!(only(&f.proxy.finish().await.entries).decision.is_allowed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_rebound_to_loopback_is_refused_but_an_exact_name_is_not() {
    let up = upstream("allowed").await;
    let f = fixture(&[format!("*.wild.test:{up}"), format!("db.local.test:{up}")]).await;
    let proxy = format!("http://127.0.0.1:{}", f.proxy_port);
    let (_, out, _) = curl(vec![
        "--proxy".into(),
        proxy.clone(),
        format!("http://a.wild.test:{up}/"),
    ])
    .await;
    assert!(!out.contains("hello"), "{out}");
    let (ok, out, err) = curl(vec![
        "--proxy".into(),
        proxy,
        format!("http://db.local.test:{up}/"),
    ])
    .await;
    assert!(ok && out.contains("hello"), "{err}");
    let recs = f.proxy.finish().await;
    assert!(
        matches!(&recs.entries[0].decision, Decision::Denied(why) if why.contains("loopback")),
        "{recs:#?}"
    );
    assert!(recs.entries[1].decision.is_allowed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connect_to_the_proxy_itself_is_refused_even_when_a_cidr_covers_it() {
    // Its address inside the sandbox (127.0.0.1:3128), and where it listens on the host;
    // each allowed by a CIDR.
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let own = l.local_addr().unwrap().port();
    let config = ProxyConfig::new(
        Allowlist::parse(&[format!("127.0.0.0/8:{own}"), "127.0.0.0/8:3128".into()]).unwrap(),
        None,
    );
    let proxy = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    for target in [3128, own] {
        let (ok, _, err) = curl(vec![
            "--proxy".into(),
            format!("http://127.0.0.1:{own}"),
            "--proxytunnel".into(),
            format!("http://127.0.0.1:{target}/"),
        ])
        .await;
        assert!(!ok && err.contains("403"), "{target}: {err}");
    }
    let recs = proxy.finish().await;
    assert_eq!(recs.entries.len(), 2, "{recs:#?}");
    for r in recs.entries {
        assert!(
            matches!(&r.decision, Decision::Denied(why) if why.contains("proxy's own")),
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finish_closes_the_listener_and_ends_open_relays() {
    let f = fixture(&["allowed.test:1".into()]).await;
    let port = f.proxy_port;
    // A client that connects and never sends: its task must end with the proxy.
    let idle = tokio::net::TcpStream::connect((LO, port)).await.unwrap();
    let recs = f.proxy.finish().await;
    assert!(recs.is_empty());
    assert!(tokio::net::TcpStream::connect((LO, port)).await.is_err());
    let mut idle = idle;
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), idle.read(&mut b))
        .await
        .expect("the idle client's connection was closed");
    assert!(matches!(n, Ok(0) | Err(_)));
}

/// SOCKS5 BIND and UDP ASSOCIATE would open ways in and out (UDP included) that the
/// allowlist does not cover: both are refused with "command not supported", nothing is
/// connected, nothing recorded as allowed.
#[tokio::test(flavor = "multi_thread")]
async fn socks5_bind_and_udp_associate_are_refused() {
    let f = fixture(&["allowed.test".into(), "127.0.0.0/8".into()]).await;
    for cmd in [2u8, 3u8] {
        let mut s = tokio::net::TcpStream::connect((LO, f.proxy_port))
            .await
            .unwrap();
        s.write_all(&[5, 1, 0]).await.unwrap();
        let mut greet = [0u8; 2];
        s.read_exact(&mut greet).await.unwrap();
        assert_eq!(greet, [5, 0]);
        s.write_all(&[5, cmd, 0, 1, 127, 0, 0, 1, 0, 80])
            .await
            .unwrap();
        let mut reply = [0u8; 10];
        s.read_exact(&mut reply).await.unwrap();
        assert_eq!(reply[1], 7, "command {cmd}: {reply:?}");
    }
    assert!(f.proxy.finish().await.is_empty());
    assert_eq!(f.lookups.load(Ordering::SeqCst), 0);
}

/// Only `http://` absolute URIs and CONNECT are proxied: anything else is a 400 with a
/// reason, never forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn other_request_forms_are_refused() {
    let f = fixture(&["allowed.test".into()]).await;
    for req in [
        "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        "GET https://allowed.test/ HTTP/1.1\r\n\r\n",
        "GET ftp://allowed.test/ HTTP/1.1\r\n\r\n",
    ] {
        let mut s = tokio::net::TcpStream::connect((LO, f.proxy_port))
            .await
            .unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).await.unwrap();
        assert!(got.starts_with("HTTP/1.1 400"), "{req:?}: {got}");
    }
    assert!(f.proxy.finish().await.is_empty());
}

/// A resolver that never answers: the run ends while a name is being resolved.
#[derive(Debug)]
struct Hanging(Arc<tokio::sync::Notify>);

#[async_trait]
impl Resolver for Hanging {
    async fn resolve(&self, _: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
        self.0.notify_one();
        std::future::pending().await
    }
}

/// An attempt the run ends in the middle of (its name still resolving) is in the record
/// all the same, as not connected.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_cut_short_by_the_end_of_the_run_is_recorded() {
    let asked = Arc::new(tokio::sync::Notify::new());
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let proxy = spawn(
        ProxyConfig::new(
            Allowlist::parse(&["slow.test"]).unwrap(),
            Some(Arc::new(Hanging(asked.clone()))),
        ),
        Box::pin(async move { Ok(l) }),
    )
    .unwrap();
    let mut s = tokio::net::TcpStream::connect((LO, port)).await.unwrap();
    s.write_all(b"CONNECT slow.test:443 HTTP/1.1\r\nHost: slow.test:443\r\n\r\n")
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), asked.notified())
        .await
        .expect("the proxy never resolved the allowed name");
    let recs = proxy.finish().await;
    let [r] = recs.entries.as_slice() else {
        panic!("{recs:#?}")
    };
    assert_eq!((r.host.as_str(), r.port, r.count), ("slow.test", 443, 1));
    assert_eq!(
        r.decision,
        Decision::Denied("the run ended before the connection was made".into())
    );
    assert_eq!(r.peer, None);
}

/// A flood of refused attempts through the proxy itself: the record keeps
/// `MAX_CONNECTIONS` distinct entries, counts each exactly, and counts the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_flood_is_recorded_within_the_bound_and_counted_exactly() {
    use sandbox_core::MAX_CONNECTIONS;
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let proxy = spawn(
        ProxyConfig::new(Allowlist::parse(&["allowed.test"]).unwrap(), None),
        Box::pin(async move { Ok(l) }),
    )
    .unwrap();
    let distinct = MAX_CONNECTIONS + 20;
    let rounds = 2;
    for _ in 0..rounds {
        for i in 0..distinct {
            let mut s = tokio::net::TcpStream::connect((LO, port)).await.unwrap();
            let ask = format!("CONNECT h{i}.test:1 HTTP/1.1\r\n\r\n");
            s.write_all(ask.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            assert!(
                got.starts_with(b"HTTP/1.1 403"),
                "{:?}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    let recs = proxy.finish().await;
    assert_eq!(recs.entries.len(), MAX_CONNECTIONS);
    assert!(recs.entries.iter().all(|e| e.count == rounds as u64));
    assert_eq!(
        recs.more.attempts,
        (rounds * (distinct - MAX_CONNECTIONS)) as u64
    );
    assert_eq!(recs.more.denied, recs.more.attempts);
    assert_eq!(recs.attempts(), (rounds * distinct) as u64);
}
