//! Terminated TLS (issue 30): 1,000 small requests on one kept-alive connection to a host
//! with request rules (TLS terminated by the proxy, each request judged, re-written and
//! sent on over a second TLS connection), against the same 1,000 through a plain `CONNECT`
//! tunnel to a host without rules (the client's TLS straight to the server). The target is
//! at most 2×: a decrypting proxy that costs 25× on small requests (capsem#96) is one an
//! agent routes around.
//!
//! Everything is in this process on `127.0.0.1`: the HTTPS server under a test authority
//! made with rcgen, the proxy (the same code that serves a sandbox; only the listener's
//! namespace differs), and the client (rustls); names resolve through a resolver table.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sandbox_core::policy::RequestRule;
use sandbox_core::Allowlist;
use sandbox_proxy::{ProxyConfig, Secrets, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::budget::{Budget, Target};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe, Rounds};
use crate::stats::{fmt_duration, fmt_ratio, Samples};
use crate::table::{Row, Verdict};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The host with a request rule (terminated).
const RULED: &str = "ruled.test";
/// The host without one (a tunnel).
const PLAIN: &str = "plain.test";
/// Requests per run.
const REQUESTS: usize = 1000;
/// The answer to each.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
/// Terminated against tunnelled: at most 2× the time.
const KEEPALIVE: Target = Target::AtMost(2.0);

fn wrong(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::wrong(what, e.to_string())
}

/// An HTTPS server for both names under its own authority, answering every request on a
/// connection in turn; stopped when dropped. The authority's certificate is `ca`.
struct Server {
    port: u16,
    ca: CertificateDer<'static>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start() -> Result<Self, BenchError> {
        let what = "the bench's HTTPS server";
        let ca_key = KeyPair::generate().map_err(|e| wrong(what, e))?;
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).map_err(|e| wrong(what, e))?;
        let key = KeyPair::generate().map_err(|e| wrong(what, e))?;
        let leaf = CertificateParams::new(vec![RULED.into(), PLAIN.into()])
            .map_err(|e| wrong(what, e))?
            .signed_by(&key, &ca, &ca_key)
            .map_err(|e| wrong(what, e))?;
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| wrong(what, e))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let l = TcpListener::bind((LO, 0))
            .await
            .map_err(|e| BenchError::io(what, e))?;
        let port = l.local_addr().map_err(|e| BenchError::io(what, e))?.port();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut got = Vec::new();
                    let mut buf = [0u8; 16 << 10];
                    loop {
                        while let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            got.drain(..i + 4);
                            if tls.write_all(ANSWER).await.is_err() {
                                return;
                            }
                        }
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                });
            }
        });
        Ok(Self {
            port,
            ca: ca.der().clone(),
            task,
        })
    }
}

/// One run: `CONNECT host` through the proxy, TLS trusting `roots`, then [`REQUESTS`]
/// requests one after another on that connection, each answer read whole.
async fn run(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Duration, BenchError> {
    let what = "a kept-alive connection through the proxy";
    let io = |e| BenchError::io(what, e);
    let start = Instant::now();
    let mut s = TcpStream::connect(proxy).await.map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    s.write_all(
        format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(io)?;
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.map_err(io)? == 0 {
            return Err(BenchError::wrong(what, "the proxy closed"));
        }
        got.push(b[0]);
    }
    if !got.starts_with(b"HTTP/1.1 200") {
        return Err(BenchError::wrong(what, String::from_utf8_lossy(&got)));
    }
    let name = ServerName::try_from(host.to_owned()).map_err(|e| wrong(what, e))?;
    let mut t = tokio_rustls::TlsConnector::from(tls)
        .connect(name, s)
        .await
        .map_err(io)?;
    let request = format!("GET /v1/item HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
    let mut answer = vec![0u8; ANSWER.len()];
    for _ in 0..REQUESTS {
        t.write_all(request.as_bytes()).await.map_err(io)?;
        t.read_exact(&mut answer).await.map_err(io)?;
        if answer != ANSWER {
            return Err(BenchError::wrong(what, String::from_utf8_lossy(&answer)));
        }
    }
    Ok(start.elapsed())
}

fn client(root: CertificateDer<'static>) -> Result<Arc<rustls::ClientConfig>, BenchError> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(root)
        .map_err(|e| wrong("the client's roots", e))?;
    Ok(Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// The row: terminated against tunnelled, 1,000 requests a run.
pub async fn keepalive(budget: &Budget) -> Result<Row, BenchError> {
    let server = Server::start().await?;
    let rule: RequestRule = format!("GET https://{RULED}/v1/**")
        .parse()
        .map_err(|e| wrong("the bench's rule", e))?;
    let secrets = Secrets::with_rules(Vec::new(), vec![rule], std::slice::from_ref(&server.ca))
        .map_err(|e| wrong("the run's authority", e))?;
    let run_ca = secrets.authority.ca_der();
    let listener = std::net::TcpListener::bind((LO, 0))
        .map_err(|e| BenchError::io("the proxy's listener", e))?;
    let proxy_addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("the proxy's listener", e))?;
    let allow = Allowlist::parse(&[
        format!("{RULED}:{}", server.port),
        format!("{PLAIN}:{}", server.port),
    ])
    .map_err(|e| wrong("the allowlist", e))?;
    let table = TableResolver::new().with(RULED, LO).with(PLAIN, LO);
    let mut config = ProxyConfig::new(allow, Some(Arc::new(table)));
    config.secrets = Some(Arc::new(secrets));
    let proxy = sandbox_proxy::spawn(config, Box::pin(async move { Ok(listener) }))
        .map_err(|e| BenchError::io("starting the proxy", e))?;
    let (terminated_tls, tunnel_tls) = (client(run_ca)?, client(server.ca.clone())?);
    let port = server.port;
    let rounds = Rounds {
        warmup: 1,
        runs: if budget.quick { 3 } else { 10 },
        idle: Duration::ZERO,
    };
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(run(proxy_addr, PLAIN, port, tunnel_tls.clone()))),
        Box::new(|| Box::pin(run(proxy_addr, RULED, port, terminated_tls.clone()))),
    ];
    let samples: Vec<Samples> = interleaved(&probes, rounds).await?;
    // Every terminated request is in the record: the proxy did judge them.
    let record = sandbox_core::egress::EgressRun::finish(&proxy).await;
    let judged: u64 = record
        .entries
        .iter()
        .filter(|e| e.request.is_some() && e.decision.is_allowed())
        .map(|e| e.count)
        .sum();
    let want = (REQUESTS * (rounds.warmup + rounds.runs)) as u64;
    if judged != want {
        return Err(BenchError::wrong(
            "the terminated requests",
            format!("the record judged {judged}, not {want}"),
        ));
    }
    let (tunnel, terminated) = (&samples[0], &samples[1]);
    let ratio = terminated.median().as_secs_f64() / tunnel.median().as_secs_f64();
    Ok(Row {
        backend: "egress proxy".into(),
        what: format!(
            "{REQUESTS} small requests on one kept-alive connection to a host with request \
             rules (TLS terminated, each judged), {} runs",
            terminated.len()
        ),
        median: fmt_duration(terminated.median()),
        p95: fmt_duration(terminated.p95()),
        ratio: fmt_ratio(ratio),
        baseline: format!(
            "the same through a CONNECT tunnel: {} (p95 {})",
            fmt_duration(tunnel.median()),
            fmt_duration(tunnel.p95())
        ),
        target: KEEPALIVE.cell(),
        verdict: Verdict::judge(KEEPALIVE.met(ratio), budget.quick),
    })
}
