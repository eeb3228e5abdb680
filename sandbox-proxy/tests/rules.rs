//! Request rules and keep-alive on terminated connections, with real clients: curl, and
//! python (`http.client` for a kept-alive connection, a raw TLS socket for what no
//! well-behaved client sends). The run's authority is trusted by the client as the run's
//! bundle will be inside; the upstream is an HTTPS server on 127.0.0.1 under a test
//! authority of its own (the caller's `--upstream-ca`); names come from a resolver table.
//! Nothing here leaves loopback or touches the real DNS.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

mod common;

use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sandbox_core::egress::EgressRun;
use sandbox_core::policy::RequestRule;
use sandbox_core::{Allowlist, Connections, Decision, Placement, ResolvedSecret, Secret};
use sandbox_proxy::{spawn, ProxyConfig, ProxyRun, Secrets, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
const PH: &str = "sandbox-placeholder-0123456789abcdef0123456789abcdef";
const VALUE: &str = "ghp_realvalue123";

/// An HTTPS server for `api.test` on 127.0.0.1 under its own test authority. It serves
/// requests one after another on each connection (bodies by `Content-Length`), sends each
/// request (head and body) to the test, and answers `ok`; to a websocket upgrade it
/// answers `101` and then echoes every byte.
async fn upstream() -> (
    u16,
    CertificateDer<'static>,
    mpsc::UnboundedReceiver<String>,
) {
    let (acceptor, ca, _) = common::test_tls(&["api.test"]);
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut got: Vec<u8> = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end + 4]).into_owned();
                    let lower = head.to_ascii_lowercase();
                    let len: usize = lower
                        .split("content-length: ")
                        .nth(1)
                        .map_or(0, |l| l.split('\r').next().unwrap().parse().unwrap());
                    while got.len() < end + 4 + len {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let rest = got.split_off(end + 4 + len);
                    let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
                    got = rest;
                    if lower.contains("upgrade: websocket") {
                        let _ = tls
                            .write_all(
                                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                                  Connection: Upgrade\r\n\r\n",
                            )
                            .await;
                        let _ = tls.write_all(&got).await;
                        let (mut r, mut w) = tokio::io::split(tls);
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                        return;
                    }
                    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if tls.write_all(resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, ca, rx)
}

/// Every request the upstream has read so far, waiting a generous bound for at least
/// `least` of them, so a broken proxy fails the test instead of hanging it.
async fn drain(seen: &mut mpsc::UnboundedReceiver<String>, least: usize) -> Vec<String> {
    let mut all = Vec::new();
    while all.len() < least {
        match tokio::time::timeout(std::time::Duration::from_secs(30), seen.recv()).await {
            Ok(Some(r)) => all.push(r),
            _ => break,
        }
    }
    while let Ok(r) = seen.try_recv() {
        all.push(r);
    }
    all
}

struct Fixture {
    proxy: ProxyRun,
    proxy_port: u16,
    up: u16,
    ca: tempfile::NamedTempFile,
    seen: mpsc::UnboundedReceiver<String>,
}

/// The proxy with the secret `GH_TOKEN` for `api.test` and the given rules for it.
async fn fixture(rules: &[&str]) -> Fixture {
    let (up, upstream_ca, seen) = upstream().await;
    let rules: Vec<RequestRule> = rules.iter().map(|r| r.parse().unwrap()).collect();
    let secrets = Secrets::with_rules(
        vec![ResolvedSecret {
            name: "GH_TOKEN".into(),
            value: Secret::new(VALUE.as_bytes().to_vec()),
            hosts: vec!["api.test".into()],
            placement: Placement::Authorization,
            placeholder: PH.into(),
        }],
        rules,
        &[upstream_ca],
    )
    .unwrap();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), secrets.authority.ca_pem()).unwrap();
    let table = TableResolver::new().with("api.test", LO);
    let mut config = ProxyConfig::new(
        Allowlist::parse(&[format!("api.test:{up}")]).unwrap(),
        Some(Arc::new(table)),
    );
    config.secrets = Some(Arc::new(secrets));
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let proxy_port = l.local_addr().unwrap().port();
    let proxy = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    Fixture {
        proxy,
        proxy_port,
        up,
        ca,
        seen,
    }
}

/// A python client: CONNECT through the proxy by hand, TLS to `api.test` trusting the
/// run's authority, `REQUEST` sent as raw bytes, everything read until the proxy closes.
const PY_RAW: &str = r#"
import socket, ssl, sys
proxy, port, ca, request = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
s = socket.create_connection(("127.0.0.1", proxy), timeout=20)
s.sendall(f"CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n".encode())
answer = b""
while b"\r\n\r\n" not in answer:
    answer += s.recv(1)
ctx = ssl.create_default_context(cafile=ca)
t = ctx.wrap_socket(s, server_hostname="api.test")
t.sendall(request.encode())
out = b""
try:
    while True:
        b = t.recv(65536)
        if not b:
            break
        out += b
        if out.endswith(b"frame-bytes"):
            break
except (ssl.SSLError, OSError):
    pass
sys.stdout.write(out.decode("latin-1"))
"#;

/// A python client: `http.client` through the proxy (`set_tunnel`), `N` requests on one
/// kept-alive connection; prints each status.
const PY_KEEPALIVE: &str = r#"
import http.client, ssl, sys
proxy, port, ca, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
c = http.client.HTTPSConnection("127.0.0.1", proxy, context=ctx, timeout=20)
c.set_tunnel("api.test", port)
for i in range(n):
    c.request("GET", f"/repos/o/r/issues/{i}", headers={"Authorization": "Bearer " + sys.argv[5]})
    r = c.getresponse()
    body = r.read()
    print(r.status, body.decode())
"#;

impl Fixture {
    /// curl through the proxy, trusting the run's authority alone: (stdout, stderr).
    async fn curl(&self, args: &[&str]) -> (String, String) {
        let mut all: Vec<String> = vec![
            "-sS".into(),
            "--max-time".into(),
            "20".into(),
            "--cacert".into(),
            self.ca.path().display().to_string(),
            "--proxy".into(),
            format!("http://127.0.0.1:{}", self.proxy_port),
        ];
        all.extend(args.iter().map(|a| a.replace("PORT", &self.up.to_string())));
        run("curl", all).await
    }

    async fn python(&self, script: &str, args: &[&str]) -> (String, String) {
        let mut all: Vec<String> = vec![
            "-c".into(),
            script.into(),
            self.proxy_port.to_string(),
            self.up.to_string(),
            self.ca.path().display().to_string(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        run("python3", all).await
    }

    async fn finish(self) -> (Connections, mpsc::UnboundedReceiver<String>) {
        (self.proxy.finish().await, self.seen)
    }
}

async fn run(program: &'static str, args: Vec<String>) -> (String, String) {
    tokio::task::spawn_blocking(move || {
        let o = Command::new(program).args(&args).output().unwrap();
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// The record's request entries: (method, path, decision text, count).
fn requests(c: &Connections) -> Vec<(String, String, String, u64)> {
    c.entries
        .iter()
        .filter_map(|e| {
            let r = e.request.as_ref()?;
            let d = match &e.decision {
                Decision::Allowed(rule) => format!("allowed: {rule}"),
                Decision::Denied(why) => format!("denied: {why}"),
            };
            Some((r.method.clone(), r.path.clone(), d, e.count))
        })
        .collect()
}

const ISSUES: &str = "GET https://api.test/repos/*/*/issues/**";

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_passes_get_and_refuses_post_on_the_same_path_with_curl() {
    let f = fixture(&[ISSUES]).await;
    let url = "https://api.test:PORT/repos/o/r/issues";
    let (out, err) = f.curl(&[url]).await;
    assert_eq!(out, "ok", "{err}");
    let (out, _) = f.curl(&["--data-binary", "x", url]).await;
    assert!(
        out.contains("no request rule for api.test allows POST /repos/o/r/issues"),
        "{out}"
    );
    let (record, mut seen) = f.finish().await;
    let got = drain(&mut seen, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("GET /repos/o/r/issues HTTP/1.1\r\n"),
        "{got:?}"
    );
    assert_eq!(
        requests(&record),
        [
            (
                "GET".into(),
                "/repos/o/r/issues".into(),
                format!("allowed: {ISSUES}"),
                1
            ),
            (
                "POST".into(),
                "/repos/o/r/issues".into(),
                "denied: no request rule for api.test allows POST /repos/o/r/issues".into(),
                1
            ),
        ]
    );
    let line = record.denied_lines().join("\n");
    assert!(
        line.contains("sandbox: denied POST https://api.test:"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_ambiguous_path_form_is_refused_and_recorded() {
    let f = fixture(&["GET https://api.test/allowed/**"]).await;
    let forms = [
        "/allowed/..;/admin",
        "/allowed/%2e%2e;/admin",
        "/allowed/..%3b/admin",
        "/allowed;jsessionid=x/../admin",
        "/allowed/a%2Fb",
        "/allowed/a%5Cb",
        "/allowed/a\\b",
        "/allowed/%252e%252e/admin",
        "/allowed/a%00",
        "/allowed/../../admin",
        "/allowed/%FF",
    ];
    for path in forms {
        let url = format!("https://api.test:PORT{path}");
        let (out, _) = f.curl(&["--path-as-is", &url]).await;
        assert!(out.starts_with("sandbox: request refused"), "{path}: {out}");
    }
    // Resolved dots are judged where they land, and the upstream reads that path.
    let (out, _) = f
        .curl(&["--path-as-is", "https://api.test:PORT/allowed/../admin"])
        .await;
    assert!(
        out.contains("no request rule for api.test allows GET /admin"),
        "{out}"
    );
    let (out, _) = f
        .curl(&["--path-as-is", "https://api.test:PORT/allowed//x/./%7Ey"])
        .await;
    assert_eq!(out, "ok");
    let (record, mut seen) = f.finish().await;
    let got = drain(&mut seen, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("GET /allowed/x/~y HTTP/1.1\r\n"),
        "{got:?}"
    );
    let denied = requests(&record)
        .into_iter()
        .filter(|r| r.2.starts_with("denied"))
        .count();
    assert_eq!(denied, forms.len() + 1, "{record:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_smuggled_second_request_is_refused_and_never_forwarded() {
    let f = fixture(&["GET,POST https://api.test/**"]).await;
    for request in [
        // CL.TE
        "POST /a HTTP/1.1\r\nContent-Length: 35\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
        // TE.CL
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n1e\r\nGET /smuggled HTTP/1.1\r\n\r\n\r\n0\r\n\r\n",
        // TE obfuscated
        "POST /a HTTP/1.1\r\nTransfer-Encoding: xchunked\r\nContent-Length: 4\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
    ] {
        let (out, err) = f.python(PY_RAW, &[request]).await;
        assert!(out.starts_with("HTTP/1.1 403"), "{request:?}: {out} {err}");
    }
    // A body that hides a request is the next request, judged: here refused.
    let request = "POST /a HTTP/1.1\r\nContent-Length: 1\r\n\r\nxPOST /smuggled HTTP/1.1\r\nX-Leak: sandbox-placeholder-0123456789abcdef0123456789abcdef\r\n\r\n";
    let (out, err) = f.python(PY_RAW, &[request]).await;
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out} {err}");
    assert!(out.contains("HTTP/1.1 403"), "{out}");
    let (record, mut seen) = f.finish().await;
    let got = drain(&mut seen, 1).await;
    assert!(got.iter().all(|r| !r.contains("smuggled")), "{got:?}");
    assert_eq!(got.len(), 1, "{got:?}");
    let denied: Vec<_> = requests(&record)
        .into_iter()
        .filter(|r| r.2.starts_with("denied"))
        .collect();
    // Alike refusals are one entry with a count.
    assert_eq!(denied.iter().map(|r| r.3).sum::<u64>(), 4, "{denied:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_requests_on_one_kept_alive_connection_are_each_judged() {
    let f = fixture(&[ISSUES]).await;
    let (out, err) = f.python(PY_KEEPALIVE, &["100", PH]).await;
    assert_eq!(
        out.lines().filter(|l| *l == "200 ok").count(),
        100,
        "{out} {err}"
    );
    let (record, mut seen) = f.finish().await;
    let got = drain(&mut seen, 100).await;
    assert_eq!(got.len(), 100);
    for (i, r) in got.iter().enumerate() {
        assert!(
            r.starts_with(&format!("GET /repos/o/r/issues/{i} HTTP/1.1\r\n")),
            "{r}"
        );
        assert!(
            r.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{r}"
        );
    }
    let reqs = requests(&record);
    assert_eq!(reqs.len(), 100, "one entry per distinct request");
    // One connection made for all of them.
    let connects: u64 = record
        .entries
        .iter()
        .filter(|e| e.request.is_none())
        .map(|e| e.count)
        .sum();
    assert_eq!(connects, 1, "{record:#?}");
    assert!(record.entries.iter().all(|e| e.decision.is_allowed()));
    assert!(record
        .entries
        .iter()
        .filter_map(|e| e.request.as_ref())
        .all(|r| r.injected == ["GH_TOKEN"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_upgrade_carries_the_real_value_and_h2c_is_refused() {
    let f = fixture(&["GET https://api.test/socket"]).await;
    let request = format!(
        "GET /socket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {PH}\r\n\r\nframe-bytes"
    );
    let (out, err) = f.python(PY_RAW, &[&request]).await;
    assert!(out.starts_with("HTTP/1.1 101"), "{out} {err}");
    assert!(out.ends_with("frame-bytes"), "{out}");
    let h2c = "GET /socket HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
    let (out, _) = f.python(PY_RAW, &[h2c]).await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("h2c"), "{out}");
    let (_, mut seen) = f.finish().await;
    let got = drain(&mut seen, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{got:?}"
    );
    assert!(!got[0].contains(PH), "{got:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_reuses_its_connection_and_each_request_is_judged() {
    let f = fixture(&[ISSUES]).await;
    let auth = format!("Authorization: Bearer {PH}");
    let (out, err) = f
        .curl(&[
            "-H",
            &auth,
            "https://api.test:PORT/repos/o/r/issues/1",
            "https://api.test:PORT/repos/o/r/issues/2",
            "https://api.test:PORT/repos/o/r/pulls",
        ])
        .await;
    assert!(out.starts_with("okok"), "{out} {err}");
    assert!(
        out.contains("no request rule for api.test allows GET /repos/o/r/pulls"),
        "{out}"
    );
    let (record, mut seen) = f.finish().await;
    let got = drain(&mut seen, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert!(
            r.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{r}"
        );
    }
    let connects: u64 = record
        .entries
        .iter()
        .filter(|e| e.request.is_none())
        .map(|e| e.count)
        .sum();
    assert_eq!(connects, 1, "one connection for all three: {record:#?}");
    let reqs = requests(&record);
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert!(reqs[2].2.starts_with("denied: no request rule"), "{reqs:?}");
}

/// SOCKS5 to a host with request rules and no secret is refused too, naming the rules: a
/// SOCKS tunnel would carry its requests unjudged. Nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn socks5_to_a_host_with_rules_alone_is_refused() {
    let (up, upstream_ca, mut seen) = upstream().await;
    let rules: Vec<RequestRule> = vec![ISSUES.parse().unwrap()];
    let secrets = Secrets::with_rules(Vec::new(), rules, &[upstream_ca]).unwrap();
    assert!(secrets.terminates("api.test"));
    let mut config = ProxyConfig::new(
        Allowlist::parse(&[format!("api.test:{up}")]).unwrap(),
        Some(Arc::new(TableResolver::new().with("api.test", LO))),
    );
    config.secrets = Some(Arc::new(secrets));
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let proxy = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    let (_, err) = run(
        "curl",
        vec![
            "-sS".into(),
            "--max-time".into(),
            "20".into(),
            "-k".into(),
            "--socks5-hostname".into(),
            format!("127.0.0.1:{port}"),
            format!("https://api.test:{up}/repos/o/r/issues"),
        ],
    )
    .await;
    assert!(!err.is_empty(), "curl got through: {err}");
    let record = proxy.finish().await;
    let denied: Vec<String> = record
        .entries
        .iter()
        .filter_map(|e| match &e.decision {
            Decision::Denied(why) => Some(why.clone()),
            Decision::Allowed(_) => None,
        })
        .collect();
    assert!(
        denied
            .iter()
            .any(|w| w.contains("request rules") && w.contains("not SOCKS5")),
        "{denied:?}"
    );
    assert!(seen.try_recv().is_err(), "the upstream got a request");
}
