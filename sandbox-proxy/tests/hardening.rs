//! What the last audit found in the proxy, closed: names and literals into the refused
//! address table, canonical IPv4-mapped addresses. Upstreams on 127.0.0.1, names from a
//! resolver table; nothing leaves loopback or touches the real DNS.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::egress::EgressRun;
use sandbox_core::policy::refused::{EMBEDDINGS, REFUSED};
use sandbox_core::{Allowlist, Decision};
use sandbox_proxy::{spawn, Limits, ProxyConfig, ProxyRun, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A listener on 127.0.0.1 that counts the connections it accepts (and answers none).
async fn counting_upstream() -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    (port, n)
}

fn proxy(patterns: &[String], table: TableResolver) -> (ProxyRun, u16) {
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let config = ProxyConfig::new(Allowlist::parse(patterns).unwrap(), Some(Arc::new(table)));
    (spawn(config, Box::pin(async move { Ok(l) })).unwrap(), port)
}

/// `CONNECT target` through the proxy: the status line of its answer.
async fn connect_status(proxy: u16, target: &str) -> String {
    let mut s = TcpStream::connect((LO, proxy)).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut got))
        .await
        .expect("the proxy answered")
        .unwrap();
    String::from_utf8_lossy(&got[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// One address in each row of the table, and each IPv4 row in each of its IPv6 forms.
fn every_refused_form() -> Vec<IpAddr> {
    let mut out = Vec::new();
    for r in REFUSED {
        let one = match r.net {
            IpAddr::V4(n) if r.prefix < 32 => IpAddr::V4((u32::from(n) | 1).into()),
            IpAddr::V6(n) if r.prefix < 128 => IpAddr::V6((u128::from(n) | 1).into()),
            a => a,
        };
        out.push(one);
        if let IpAddr::V4(v4) = one {
            for e in EMBEDDINGS {
                out.push(IpAddr::V6(Ipv6Addr::from(
                    u128::from(e.net) | u128::from(u32::from(v4)),
                )));
            }
        }
    }
    out
}

/// A name allowed by a wildcard that resolves into any row of the refused table, in any
/// form (IPv4-mapped, IPv4-compatible, NAT64), is refused, recorded with the reason, and
/// never connected: the loopback upstream standing behind those addresses sees nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_resolving_into_any_refused_form_is_refused_and_recorded() {
    let (up, accepted) = counting_upstream().await;
    let forms = every_refused_form();
    let mut table = TableResolver::new();
    for (i, a) in forms.iter().enumerate() {
        table = table.with(&format!("h{i}.wild.test"), *a);
    }
    let (run, port) = proxy(&[format!("*.wild.test:{up}")], table);
    for (i, form) in forms.iter().enumerate() {
        let status = connect_status(port, &format!("h{i}.wild.test:{up}")).await;
        assert!(status.contains("403"), "{form}: {status}");
    }
    let recs = run.finish().await;
    assert_eq!(recs.entries.len(), forms.len(), "{recs:#?}");
    for (i, r) in recs.entries.iter().enumerate() {
        assert_eq!(r.host, format!("h{i}.wild.test"));
        assert_eq!(r.peer, None);
        let Decision::Denied(why) = &r.decision else {
            panic!("{} allowed: {r:?}", forms[i]);
        };
        assert!(why.contains("wildcard never allows"), "{}: {why}", forms[i]);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

/// An IPv6 network, even `::/0`, never covers an IPv4 address written in mapped form, and
/// `0.0.0.0/0` or `::/0` never names the refused table; a rule within the range does.
#[tokio::test(flavor = "multi_thread")]
async fn broad_networks_never_reach_the_refused_table_but_a_rule_within_it_does() {
    let (up, accepted) = counting_upstream().await;
    let (run, port) = proxy(
        &[format!("[::/0]:{up}"), format!("0.0.0.0/0:{up}")],
        TableResolver::new(),
    );
    for target in [
        format!("[::ffff:127.0.0.1]:{up}"),
        format!("127.0.0.1:{up}"),
        format!("[::1]:{up}"),
        format!("[64:ff9b::7f00:1]:{up}"),
        format!("[::127.0.0.1]:{up}"),
        format!("169.254.169.254:{up}"),
        format!("[fd00:ec2::254]:{up}"),
    ] {
        let status = connect_status(port, &target).await;
        assert!(status.contains("403"), "{target}: {status}");
    }
    let recs = run.finish().await;
    assert_eq!(recs.entries.len(), 7, "{recs:#?}");
    assert!(recs.entries.iter().all(|r| !r.decision.is_allowed()));
    assert_eq!(accepted.load(Ordering::SeqCst), 0);

    let (run, port) = proxy(&[format!("127.0.0.0/8:{up}")], TableResolver::new());
    let status = connect_status(port, &format!("[::ffff:127.0.0.1]:{up}")).await;
    assert!(status.contains("200"), "{status}");
    let recs = run.finish().await;
    assert_eq!(recs.entries[0].peer, Some(SocketAddr::new(LO, up)));
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn bounded_proxy(max_open: usize, head_deadline: Duration) -> (ProxyRun, u16) {
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let mut config = ProxyConfig::new(Allowlist::parse(&["allowed.test"]).unwrap(), None);
    config.limits = Limits {
        max_open,
        head_deadline,
    };
    (spawn(config, Box::pin(async move { Ok(l) })).unwrap(), port)
}

/// Read until the proxy closes the connection (an answer, then the end, or a reset).
async fn closed(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got).await;
    got
}

/// Many connections that send nothing or one byte: the proxy holds at most its bound of
/// them (counted in this process's descriptors, where the proxy runs) and closes every one
/// beyond it; once the head deadline passes, it closes the ones it held too.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_flood_holds_only_the_bound_and_the_deadline_closes_the_rest() {
    let cap = 8;
    let (run, port) = bounded_proxy(cap, Duration::from_secs(2));
    let before = open_fds();
    let n = cap + 40;
    let mut clients = Vec::new();
    for i in 0..n {
        let mut s = TcpStream::connect((LO, port)).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"C").await.unwrap();
        }
        clients.push(s);
    }
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = Vec::new();
    // The readers hold the client ends: `n` descriptors of this process's own.
    for s in clients {
        let done = done_tx.clone();
        readers.push(tokio::spawn(async move {
            let got = closed(s).await;
            let _ = done.send(got);
        }));
    }
    for _ in 0..n - cap {
        tokio::time::timeout(Duration::from_secs(20), done_rx.recv())
            .await
            .expect("the connections beyond the bound were closed");
    }
    // Beyond the clients' own ends, the proxy holds at most its bound (and whatever the
    // runtime made meanwhile, a few at most).
    let held = open_fds().saturating_sub(before + (n - closed_so_far(&readers)));
    assert!(
        held <= cap + 4,
        "the proxy holds {held} descriptors for {cap} connections"
    );
    // The held ones never sent a whole head: the deadline closes them, with a 400.
    for _ in 0..cap {
        let got = tokio::time::timeout(Duration::from_secs(20), done_rx.recv())
            .await
            .expect("the deadline closed the held connections")
            .unwrap();
        assert!(
            got.is_empty() || got.starts_with(b"HTTP/1.1 400"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }
    for r in readers {
        r.await.unwrap();
    }
    assert!(open_fds() <= before + 4, "descriptors left behind");
    // The proxy serves again once the flood is gone.
    assert!(connect_status(port, "denied.test:443")
        .await
        .contains("403"));
    run.finish().await;
}

fn closed_so_far(readers: &[tokio::task::JoinHandle<()>]) -> usize {
    readers.iter().filter(|r| r.is_finished()).count()
}

/// A request head sent a byte at a time is closed at the head deadline, long before it
/// would have been whole: the deadline is for the whole head, not for each read.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_sent_a_byte_at_a_time_is_closed_at_the_deadline() {
    let (run, port) = bounded_proxy(8, Duration::from_secs(1));
    for head in [
        format!(
            "CONNECT allowed.test:443 HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(200)
        )
        .into_bytes(),
        // SOCKS5: the greeting offers 200 methods, never all sent.
        [5u8, 200]
            .into_iter()
            .chain([0u8; 200])
            .collect::<Vec<u8>>(),
    ] {
        let s = TcpStream::connect((LO, port)).await.unwrap();
        let (mut r, mut w) = s.into_split();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let _ = r.read_to_end(&mut got).await;
            got
        });
        let mut sent = 0;
        for b in &head {
            if reader.is_finished() || w.write_all(&[*b]).await.is_err() {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            sent < head.len(),
            "the whole head was taken a byte at a time"
        );
        let got = tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .unwrap()
            .unwrap();
        assert!(
            got.is_empty() || got.starts_with(b"HTTP/1.1 400"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }
    assert!(run.finish().await.is_empty());
}

/// A server on 127.0.0.1 that answers the first request head on each connection with
/// `200 ok`, then keeps every byte it is sent, for the test to read.
async fn recording_upstream() -> (u16, Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let all = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let all = all.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let mut answered = false;
                loop {
                    match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                    if !answered && got.windows(4).any(|w| w == b"\r\n\r\n") {
                        answered = true;
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .await;
                    }
                }
                all.lock().unwrap().push(got);
            });
        }
    });
    (port, seen)
}

/// claude-code#87381, a CONNECT relayed inside an allowed connection: sent after a plain
/// HTTP request to an allowed host, or inside a CONNECT tunnel to it, it is bytes for that
/// host, never a request to the proxy. The proxy decides nothing for the inner target,
/// never resolves it, and never connects it: its server sees nothing, the record holds
/// the allowed host alone. (An absolute-form `CONNECT` is not a CONNECT target: refused.)
#[tokio::test(flavor = "multi_thread")]
async fn a_connect_relayed_inside_an_allowed_connection_opens_no_second_way_out() {
    let (allowed, seen) = recording_upstream().await;
    let (evil, evil_accepted) = counting_upstream().await;
    let table = TableResolver::new()
        .with("allowed.test", LO)
        .with("evil.test", LO);
    let (run, port) = proxy(&[format!("allowed.test:{allowed}")], table);
    let inner = format!("CONNECT evil.test:{evil} HTTP/1.1\r\nHost: evil.test:{evil}\r\n\r\n");

    // Pipelined after a plain-HTTP request.
    let mut s = TcpStream::connect((LO, port)).await.unwrap();
    let outer = format!(
        "GET http://allowed.test:{allowed}/ HTTP/1.1\r\nHost: allowed.test:{allowed}\r\n\r\n"
    );
    s.write_all(format!("{outer}{inner}").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200 OK"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(!String::from_utf8_lossy(&got).contains("Connection established"));

    // Inside a CONNECT tunnel.
    let mut s = TcpStream::connect((LO, port)).await.unwrap();
    s.write_all(format!("CONNECT allowed.test:{allowed} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    s.write_all(inner.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got);
    // The proxy's answer, then the allowed host's: never a second tunnel.
    assert!(
        got.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"),
        "{got}"
    );

    // An absolute-form CONNECT names no host:port.
    let status = connect_status(port, &format!("http://evil.test:{evil}/")).await;
    assert!(status.contains("400"), "{status}");

    let recs = run.finish().await;
    assert_eq!(recs.entries.len(), 2, "{recs:#?}");
    assert!(recs
        .entries
        .iter()
        .all(|r| r.host == "allowed.test" && r.decision.is_allowed()));
    assert_eq!(evil_accepted.load(Ordering::SeqCst), 0);
    // The inner CONNECT reached the allowed host as bytes, both times.
    for _ in 0..200 {
        if seen.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for got in seen.iter() {
        assert!(
            String::from_utf8_lossy(got).contains(&format!("CONNECT evil.test:{evil}")),
            "{:?}",
            String::from_utf8_lossy(got)
        );
    }
}
