//! Chaining to an upstream proxy (`--upstream-proxy`), with curl as the client and a small
//! real CONNECT proxy on 127.0.0.1 standing in for a corporate one: it logs each request
//! line it reads, resolves names by a table of its own, and relays bytes. The egress
//! proxy's resolver knows the upstream proxy's name alone, so a destination reached at all
//! was reached through the chain, by name. Nothing here leaves loopback or touches the real
//! DNS.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

mod common;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sandbox_core::egress::{EgressRun, ProxyProtocol, Resolver};
use sandbox_core::{
    Allowlist, Connections, Decision, Placement, ResolvedSecret, Secret, UpstreamProxy,
};
use sandbox_proxy::{spawn, ProxyConfig, ProxyRun, Secrets, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
const PH: &str = "sandbox-placeholder-0123456789abcdef0123456789abcdef";
const VALUE: &str = "ghp_realvalue123";

/// The upstream proxy's name, which only the egress proxy's resolver knows.
const CORP: &str = "corp-proxy.test";

/// A real CONNECT proxy on 127.0.0.1: every request line it reads goes into `log`; it
/// answers `refuse` (`403 Forbidden`) when set, else connects to the target (a name by its
/// own table, as a corporate proxy resolves by its DNS) and relays.
struct CorpProxy {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl CorpProxy {
    async fn start(names: &[&str], refuse: bool) -> Self {
        let table: Arc<HashMap<String, IpAddr>> =
            Arc::new(names.iter().map(|n| (n.to_string(), LO)).collect());
        let l = TcpListener::bind((LO, 0)).await.unwrap();
        let port = l.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let (table, seen) = (table.clone(), seen.clone());
                tokio::spawn(Self::serve(client, table, seen, refuse));
            }
        });
        Self { port, log }
    }

    async fn serve(
        mut client: TcpStream,
        table: Arc<HashMap<String, IpAddr>>,
        seen: Arc<Mutex<Vec<String>>>,
        refuse: bool,
    ) {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match client.read(&mut b).await {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let line = head.lines().next().unwrap_or_default().to_string();
        seen.lock().unwrap().push(line.clone());
        let target = line
            .strip_prefix("CONNECT ")
            .and_then(|r| r.strip_suffix(" HTTP/1.1"))
            .filter(|t| head.contains(&format!("\r\nHost: {t}\r\n")));
        let to = target.and_then(|t| {
            let (host, port) = t.rsplit_once(':')?;
            let port: u16 = port.parse().ok()?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let ip = host.parse().ok().or_else(|| table.get(host).copied())?;
            Some(SocketAddr::new(ip, port))
        });
        let answer: &[u8] = match to {
            _ if refuse => b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
            None => b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
            Some(_) => b"HTTP/1.1 200 Connection established\r\n\r\n",
        };
        let Some(to) = to.filter(|_| !refuse) else {
            let _ = client.write_all(answer).await;
            return;
        };
        let Ok(mut server) = TcpStream::connect(to).await else {
            return;
        };
        if client.write_all(answer).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// An HTTP server on 127.0.0.1 that answers every request with `hello from far`.
async fn plain_server() -> u16 {
    let l = TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "hello from far\n";
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

/// An HTTPS server for `api.test` under a test authority (the caller's `--upstream-ca`):
/// each request head it reads goes to the test; it answers `ok`.
async fn tls_server() -> (
    u16,
    rustls::pki_types::CertificateDer<'static>,
    mpsc::UnboundedReceiver<String>,
) {
    let (acceptor, ca, _) = common::test_tls(&["api.test"]);
    let l = TcpListener::bind((LO, 0)).await.unwrap();
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
                let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
                let resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, ca, rx)
}

/// The egress proxy's resolver: the upstream proxy's name alone, every lookup counted.
#[derive(Debug)]
struct Counting(TableResolver, Arc<AtomicUsize>);

#[async_trait]
impl Resolver for Counting {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.resolve(host, port).await
    }
}

/// The egress proxy for `patterns`, chained to the upstream proxy on `corp_port` by its
/// name; `secrets` when the run has them.
fn egress(
    patterns: &[String],
    corp_port: u16,
    secrets: Option<Secrets>,
) -> (ProxyRun, u16, Arc<AtomicUsize>) {
    let lookups = Arc::new(AtomicUsize::new(0));
    let resolver = Counting(TableResolver::new().with(CORP, LO), lookups.clone());
    let mut config = ProxyConfig::new(
        Allowlist::parse(patterns).unwrap(),
        Some(Arc::new(resolver)),
    );
    config.upstream = Some(UpstreamProxy::parse(&format!("http://{CORP}:{corp_port}")).unwrap());
    config.secrets = secrets.map(Arc::new);
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let proxy = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    (proxy, port, lookups)
}

/// curl with `args` (no proxy from the environment): (exit status 0, stdout, stderr).
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
async fn an_allowed_name_goes_through_the_upstream_proxy_by_name_on_every_protocol() {
    let up = plain_server().await;
    let corp = CorpProxy::start(&["far.test"], false).await;
    let pattern = format!("far.test:{up}");
    let (proxy, port, lookups) = egress(std::slice::from_ref(&pattern), corp.port, None);
    let url = format!("http://far.test:{up}/x");
    let via = format!("http://127.0.0.1:{port}");
    for (how, extra) in [
        (
            ProxyProtocol::Http,
            vec!["--proxy".to_string(), via.clone()],
        ),
        (
            ProxyProtocol::Connect,
            vec!["--proxy".into(), via.clone(), "--proxytunnel".into()],
        ),
        (
            ProxyProtocol::Socks5,
            vec!["--socks5-hostname".into(), format!("127.0.0.1:{port}")],
        ),
    ] {
        let mut args = extra;
        args.push(url.clone());
        let (ok, out, err) = curl(args).await;
        assert!(ok, "{how:?}: {err}");
        assert_eq!(out, "hello from far\n", "{how:?}");
        let rec = proxy.records().entries.into_iter().last().unwrap();
        assert_eq!(rec.protocol, how);
        assert_eq!(rec.decision, Decision::Allowed(pattern.clone()));
        // The address connected to is the upstream proxy's: the destination's is its own.
        assert_eq!(rec.peer, Some(SocketAddr::new(LO, corp.port)));
        assert_eq!(rec.error, None);
    }
    // Each protocol's connection was one CONNECT by name, which the egress proxy's
    // resolver could not have answered; the upstream proxy's own name was looked up once.
    assert_eq!(
        corp.log(),
        vec![format!("CONNECT far.test:{up} HTTP/1.1"); 3]
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    proxy.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_name_never_reaches_the_upstream_proxy() {
    let up = plain_server().await;
    let corp = CorpProxy::start(&["far.test", "denied.test"], false).await;
    let (proxy, port, _) = egress(&[format!("far.test:{up}")], corp.port, None);
    let via = format!("http://127.0.0.1:{port}");
    let url = format!("http://denied.test:{up}/");
    let (_, out, _) = curl(vec!["--proxy".into(), via.clone(), url.clone()]).await;
    assert!(out.contains("denied connect to denied.test"), "{out}");
    let (ok, _, err) = curl(vec!["--proxy".into(), via, "--proxytunnel".into(), url]).await;
    assert!(!ok && err.contains("403"), "{err}");
    assert_eq!(corp.log(), Vec::<String>::new());
    let c = proxy.finish().await;
    assert_eq!(denied(&c), ["not in the allowlist"; 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secrets_host_is_terminated_verified_and_injected_through_the_chain() {
    let (up, upstream_ca, mut seen) = tls_server().await;
    let corp = CorpProxy::start(&["api.test"], false).await;
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
    let (proxy, port, _) = egress(&[format!("api.test:{up}")], corp.port, Some(secrets));
    let (ok, out, err) = curl(vec![
        "--cacert".into(),
        ca.path().display().to_string(),
        "--proxy".into(),
        format!("http://127.0.0.1:{port}"),
        "-H".into(),
        format!("Authorization: Bearer {PH}"),
        format!("https://api.test:{up}/user"),
    ])
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "ok");
    let head = tokio::time::timeout(std::time::Duration::from_secs(30), seen.recv())
        .await
        .expect("the upstream read no request")
        .unwrap();
    assert!(
        head.contains(&format!("authorization: Bearer {VALUE}"))
            || head.contains(&format!("Authorization: Bearer {VALUE}")),
        "{head}"
    );
    assert!(!head.contains(PH), "{head}");
    assert_eq!(corp.log(), [format!("CONNECT api.test:{up} HTTP/1.1")]);
    let c = proxy.finish().await;
    let injected: Vec<_> = c
        .entries
        .iter()
        .filter_map(|e| e.request.as_ref())
        .flat_map(|r| r.injected.clone())
        .collect();
    assert_eq!(injected, ["GH_TOKEN"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_upstream_proxy_refusing_is_a_502_and_the_attempts_error() {
    let up = plain_server().await;
    let corp = CorpProxy::start(&["far.test"], true).await;
    let pattern = format!("far.test:{up}");
    let (proxy, port, _) = egress(std::slice::from_ref(&pattern), corp.port, None);
    let via = format!("http://127.0.0.1:{port}");
    let url = format!("http://far.test:{up}/");
    let (ok, out, err) = curl(vec![
        "--proxy".into(),
        via.clone(),
        "-w".into(),
        "%{http_code}".into(),
        "-o".into(),
        "/dev/null".into(),
        url.clone(),
    ])
    .await;
    assert!(ok && out == "502", "{out} {err}");
    let (ok, _, err) = curl(vec!["--proxy".into(), via, "--proxytunnel".into(), url]).await;
    assert!(!ok && err.contains("502"), "{err}");
    assert_eq!(
        corp.log(),
        vec![format!("CONNECT far.test:{up} HTTP/1.1"); 2]
    );
    let c = proxy.finish().await;
    let rec = &c.entries[0];
    assert_eq!(rec.decision, Decision::Allowed(pattern));
    let error = rec.error.clone().unwrap();
    assert!(
        error.starts_with(&format!("the upstream proxy {CORP}:{}", corp.port))
            && error.contains(&format!("answered 403 Forbidden to CONNECT far.test:{up}")),
        "{error}"
    );
    // The line the command-line tool prints after the run names the upstream's answer.
    assert!(
        c.lines().iter().any(|l| l
            .starts_with(&format!("sandbox: could not connect to far.test:{up}"))
            && l.contains("answered 403 Forbidden")),
        "{:?}",
        c.lines()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ip_literal_is_judged_against_the_refused_table_before_the_upstream_proxy() {
    let up = plain_server().await;
    let corp = CorpProxy::start(&[], false).await;
    let (proxy, port, _) = egress(
        &["0.0.0.0/0".into(), format!("127.0.0.1:{up}")],
        corp.port,
        None,
    );
    let via = format!("http://127.0.0.1:{port}");
    // The metadata address, through a rule wider than its range: refused here.
    let (_, out, _) = curl(vec![
        "--proxy".into(),
        via.clone(),
        "http://169.254.169.254/latest/meta-data/".into(),
    ])
    .await;
    assert!(
        out.contains("denied connect to 169.254.169.254:80"),
        "{out}"
    );
    assert_eq!(corp.log(), Vec::<String>::new());
    // A literal its own rule names passes, and goes through the chain as written.
    let (ok, out, err) = curl(vec![
        "--proxy".into(),
        via,
        format!("http://127.0.0.1:{up}/"),
    ])
    .await;
    assert!(ok && out == "hello from far\n", "{out} {err}");
    assert_eq!(corp.log(), [format!("CONNECT 127.0.0.1:{up} HTTP/1.1")]);
    let c = proxy.finish().await;
    let refused = denied(&c);
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("169.254.169.254 is a cloud metadata"),
        "{refused:?}"
    );
}
