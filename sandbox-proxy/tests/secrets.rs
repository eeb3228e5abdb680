//! Secrets through the proxy, with curl as the client: the run's authority trusted by
//! curl (`--cacert`, as the run's bundle will be inside), an HTTPS server on 127.0.0.1
//! under a test authority of its own (the caller's `--upstream-ca`), names from a resolver
//! table. Nothing here leaves loopback or touches the real DNS.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

mod common;

use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use sandbox_core::egress::EgressRun;
use sandbox_core::{Allowlist, Connections, Decision, Placement, ResolvedSecret, Secret};
use sandbox_proxy::{spawn, ProxyConfig, ProxyRun, Secrets, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
const PH: &str = "sandbox-placeholder-0123456789abcdef0123456789abcdef";
const VALUE: &str = "ghp_realvalue123";

/// An HTTPS server for `api.test` on 127.0.0.1 under its own test authority: every
/// request head it reads goes to the test; it answers `ok`, or the head when `echo`.
async fn upstream(
    echo: bool,
) -> (
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
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let body = if echo { head.clone() } else { "ok".into() };
                let _ = tx.send(head);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, ca, rx)
}

/// The next head the upstream read, within a generous bound, so a broken proxy fails the
/// test instead of hanging it.
async fn next(seen: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(30), seen.recv())
        .await
        .expect("the upstream read no request")
        .expect("the upstream is gone")
}

struct Fixture {
    proxy: ProxyRun,
    proxy_port: u16,
    up: u16,
    ca: tempfile::NamedTempFile,
    seen: mpsc::UnboundedReceiver<String>,
}

/// The proxy with one secret, `GH_TOKEN` for `api.test`; `other.test` allowed without one.
async fn fixture(echo: bool) -> Fixture {
    let (up, upstream_ca, seen) = upstream(echo).await;
    let secrets = Secrets::new(
        vec![ResolvedSecret {
            name: "GH_TOKEN".into(),
            value: Secret::new(VALUE.as_bytes().to_vec()),
            hosts: vec!["api.test".into()],
            placement: Placement::Authorization,
            placeholder: PH.into(),
        }],
        &[upstream_ca],
    )
    .unwrap();
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), secrets.authority.ca_pem()).unwrap();
    let table = TableResolver::new()
        .with("api.test", LO)
        .with("other.test", LO);
    let mut config = ProxyConfig::new(
        Allowlist::parse(&[format!("api.test:{up}"), format!("other.test:{up}")]).unwrap(),
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
        tokio::task::spawn_blocking(move || {
            let o = Command::new("curl")
                .args(&all)
                .env_clear()
                .output()
                .unwrap();
            (
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    }

    async fn finish(self) -> (Connections, mpsc::UnboundedReceiver<String>) {
        (self.proxy.finish().await, self.seen)
    }
}

fn denied(c: &Connections) -> Vec<String> {
    c.entries
        .iter()
        .filter_map(|e| match &e.decision {
            Decision::Denied(why) => Some(why.clone()),
            Decision::Allowed(_) => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_sends_the_placeholder_and_the_upstream_receives_the_value() {
    let f = fixture(false).await;
    let auth = format!("Authorization: Bearer {PH}");
    let (out, err) = f.curl(&["-H", &auth, "https://api.test:PORT/user"]).await;
    assert_eq!(out, "ok", "{err}");
    let (record, mut seen) = f.finish().await;
    let head = next(&mut seen).await;
    assert!(
        head.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
        "{head}"
    );
    assert!(!head.contains(PH), "{head}");
    assert!(denied(&record).is_empty(), "{record:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_placeholder_in_another_header_is_refused_and_recorded_by_name() {
    let f = fixture(false).await;
    let hdr = format!("X-Debug: {PH}");
    let (out, _) = f.curl(&["-H", &hdr, "https://api.test:PORT/"]).await;
    assert!(
        out.contains("secret GH_TOKEN sent to api.test in header x-debug"),
        "{out}"
    );
    let (record, mut seen) = f.finish().await;
    assert_eq!(
        denied(&record),
        ["secret GH_TOKEN sent to api.test in header x-debug: refused as an exfiltration attempt"]
    );
    assert!(seen.try_recv().is_err(), "the upstream got a request");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_placeholder_over_plain_http_to_another_host_is_refused_and_recorded() {
    let f = fixture(false).await;
    let auth = format!("Authorization: Bearer {PH}");
    let (out, _) = f.curl(&["-H", &auth, "http://other.test:PORT/"]).await;
    assert!(out.contains("over plain HTTP"), "{out}");
    let (record, _) = f.finish().await;
    assert_eq!(
        denied(&record),
        ["secret GH_TOKEN sent to other.test over plain HTTP: refused as an exfiltration attempt"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_placeholder_in_a_body_is_refused_and_recorded() {
    let f = fixture(false).await;
    let body = format!("{{\"public\":false,\"files\":{{\"t\":{{\"content\":\"{PH}\"}}}}}}");
    let (out, _) = f
        .curl(&["--data-binary", &body, "https://api.test:PORT/gists"])
        .await;
    assert!(!out.contains("ok"), "{out}");
    let (record, _) = f.finish().await;
    assert_eq!(
        denied(&record),
        ["secret GH_TOKEN sent to api.test in the body: refused as an exfiltration attempt"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_echoing_endpoint_cannot_hand_the_value_back_to_curl() {
    let f = fixture(true).await;
    let auth = format!("Authorization: Bearer {PH}");
    let (out, _) = f
        .curl(&["-H", &auth, "https://api.test:PORT/headers"])
        .await;
    assert!(!out.contains(VALUE), "curl got the value: {out}");
    let (record, mut seen) = f.finish().await;
    assert!(next(&mut seen).await.contains(VALUE));
    assert_eq!(
        denied(&record),
        ["the response from api.test carried the value of secret GH_TOKEN: cut off"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fronted_host_and_socks5_to_a_secret_host_are_refused() {
    let f = fixture(false).await;
    let (out, _) = f
        .curl(&["-H", "Host: other.test", "https://api.test:PORT/"])
        .await;
    assert!(out.contains("fronting"), "{out}");
    let socks = format!("socks5h://127.0.0.1:{}", f.proxy_port);
    let (out, _) = f.curl(&["--proxy", &socks, "https://api.test:PORT/"]).await;
    assert!(!out.contains("ok"), "{out}");
    let (record, mut seen) = f.finish().await;
    let d = denied(&record);
    assert!(d.iter().any(|w| w.contains("fronting")), "{d:?}");
    assert!(d.iter().any(|w| w.contains("not SOCKS5")), "{d:?}");
    assert!(seen.try_recv().is_err(), "the upstream got a request");
}
