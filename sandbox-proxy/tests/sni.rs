//! The server name of TLS inside a plain (not terminated) tunnel: real clients (curl,
//! rustls) through CONNECT and SOCKS5 to an HTTPS server on 127.0.0.1 that serves two
//! names, as a shared front does. Names from a resolver table; nothing leaves loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

mod common;

use std::net::IpAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use sandbox_core::egress::EgressRun;
use sandbox_core::{Allowlist, Connections, Decision};
use sandbox_proxy::{spawn, ProxyConfig, ProxyRun, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// An HTTPS front on 127.0.0.1 for `allowed.test` and `evil.test` under a test authority;
/// answers `hello NAME` with the server name of each handshake it completed, which it
/// also keeps for the test.
struct Front {
    port: u16,
    ca: CertificateDer<'static>,
    ca_file: tempfile::NamedTempFile,
    served: Arc<Mutex<Vec<String>>>,
}

async fn front() -> Front {
    let (acceptor, ca, ca_pem) = common::test_tls(&["allowed.test", "evil.test"]);
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let served = Arc::new(Mutex::new(Vec::new()));
    let seen = served.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let name = tls.get_ref().1.server_name().unwrap_or("-").to_string();
                seen.lock().unwrap().push(name.clone());
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = format!("hello {name}");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), ca_pem).unwrap();
    Front {
        port,
        ca,
        ca_file,
        served,
    }
}

fn proxy(allow: &[String]) -> (ProxyRun, u16) {
    let table = TableResolver::new()
        .with("allowed.test", LO)
        .with("evil.test", LO);
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let config = ProxyConfig::new(Allowlist::parse(allow).unwrap(), Some(Arc::new(table)));
    (spawn(config, Box::pin(async move { Ok(l) })).unwrap(), port)
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

fn denied(c: &Connections) -> Vec<String> {
    c.entries
        .iter()
        .filter_map(|e| match &e.decision {
            Decision::Denied(why) => Some(why.clone()),
            Decision::Allowed(_) => None,
        })
        .collect()
}

/// curl through CONNECT and SOCKS5: the server name of the allowed host passes; TLS for
/// another name on the same front (`--connect-to`: the tunnel is to the allowed host, the
/// server name is not) is refused and recorded, and the front never serves it.
#[tokio::test(flavor = "multi_thread")]
async fn curl_a_matching_server_name_passes_and_a_fronted_one_is_refused() {
    let f = front().await;
    let (run, port) = proxy(&[format!("allowed.test:{}", f.port)]);
    let ca = f.ca_file.path().display().to_string();
    let ways = [
        vec!["--proxy".to_string(), format!("http://127.0.0.1:{port}")],
        vec!["--socks5-hostname".to_string(), format!("127.0.0.1:{port}")],
    ];
    for way in &ways {
        let mut args = way.clone();
        args.extend([
            "--cacert".into(),
            ca.clone(),
            format!("https://allowed.test:{}/", f.port),
        ]);
        let (ok, out, err) = curl(args).await;
        assert!(ok, "{way:?}: {err}");
        assert_eq!(out, "hello allowed.test");

        let mut args = way.clone();
        args.extend([
            "--cacert".into(),
            ca.clone(),
            "--connect-to".into(),
            format!("evil.test:{0}:allowed.test:{0}", f.port),
            format!("https://evil.test:{}/", f.port),
        ]);
        let (ok, out, _) = curl(args).await;
        assert!(!ok && !out.contains("hello"), "{way:?}: {out}");
    }
    let recs = run.finish().await;
    let refused = denied(&recs);
    assert_eq!(refused.len(), 2, "{recs:#?}");
    for why in &refused {
        assert!(
            why.contains("evil.test") && why.contains("fronting"),
            "{why}"
        );
    }
    assert!(recs.entries.iter().all(|e| e.host == "allowed.test"));
    assert_eq!(*f.served.lock().unwrap(), ["allowed.test", "allowed.test"]);
}

/// `CONNECT target`, answered 200: the tunnel.
async fn tunnel(proxy: u16, target: &str) -> TcpStream {
    let mut s = TcpStream::connect((LO, proxy)).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1);
        got.push(b[0]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    s
}

fn client_config(ca: &CertificateDer<'static>, sni: bool) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut c = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.enable_sni = sni;
    Arc::new(c)
}

/// rustls: the matching server name completes a request; a mismatched one and one without
/// a server name (to a named host) do not, and each refusal is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn rustls_without_or_with_another_server_name_is_refused() {
    let f = front().await;
    let (run, port) = proxy(&[format!("allowed.test:{}", f.port)]);
    let target = format!("allowed.test:{}", f.port);
    for (name, sni, passes) in [
        ("allowed.test", true, true),
        ("evil.test", true, false),
        ("allowed.test", false, false),
    ] {
        let tcp = tunnel(port, &target).await;
        let connector = tokio_rustls::TlsConnector::from(client_config(&f.ca, sni));
        let done = tokio::time::timeout(Duration::from_secs(20), async {
            let mut tls = connector
                .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
                .await?;
            tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await?;
            let mut body = String::new();
            tls.read_to_string(&mut body).await?;
            Ok::<_, std::io::Error>(body)
        })
        .await
        .expect("the exchange ended");
        assert_eq!(done.is_ok(), passes, "{name} sni={sni}: {done:?}");
    }
    let recs = run.finish().await;
    let refused = denied(&recs);
    assert_eq!(refused.len(), 2, "{recs:#?}");
    assert!(refused[0].contains("evil.test"), "{}", refused[0]);
    assert!(
        refused[1].contains("without a server name"),
        "{}",
        refused[1]
    );
    assert_eq!(*f.served.lock().unwrap(), ["allowed.test"]);
}

/// A ClientHello carrying `encrypted_client_hello` hides its real server name: refused,
/// whatever its outer name says.
#[tokio::test(flavor = "multi_thread")]
async fn an_encrypted_client_hello_is_refused() {
    let f = front().await;
    let (run, port) = proxy(&[format!("allowed.test:{}", f.port)]);
    let mut tcp = tunnel(port, &format!("allowed.test:{}", f.port)).await;
    tcp.write_all(&hello_with_ech("allowed.test"))
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut got))
        .await
        .expect("the proxy closed the tunnel");
    assert!(got.is_empty(), "{got:?}");
    let recs = run.finish().await;
    let refused = denied(&recs);
    assert_eq!(refused.len(), 1, "{recs:#?}");
    assert!(refused[0].contains("ECH"), "{}", refused[0]);
}

/// A ClientHello (as a TLS 1.3 client writes one, reduced) naming `name` and carrying an
/// `encrypted_client_hello` extension.
fn hello_with_ech(name: &str) -> Vec<u8> {
    let mut sni = vec![0u8];
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name.as_bytes());
    let mut sni_ext = (sni.len() as u16).to_be_bytes().to_vec();
    sni_ext.extend_from_slice(&sni);
    let mut exts = Vec::new();
    for (kind, data) in [(0u16, sni_ext), (0xfe0d, vec![0u8; 32])] {
        exts.extend_from_slice(&kind.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(&data);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[1; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A protocol whose server speaks first (SSH, SMTP, MySQL) is not TLS: its tunnel passes
/// as before, the client's first bytes sent after the server's.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_speaks_first_passes_unjudged() {
    let l = tokio::net::TcpListener::bind((LO, 0)).await.unwrap();
    let up = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(b"SSH-2.0-test\r\n").await.unwrap();
        let mut b = [0u8; 14];
        s.read_exact(&mut b).await.unwrap();
        s.write_all(&b).await.unwrap();
    });
    let (run, port) = proxy(&[format!("allowed.test:{up}")]);
    let mut tcp = tunnel(port, &format!("allowed.test:{up}")).await;
    let mut banner = [0u8; 14];
    tcp.read_exact(&mut banner).await.unwrap();
    assert_eq!(&banner, b"SSH-2.0-test\r\n");
    tcp.write_all(b"SSH-2.0-mine\r\n").await.unwrap();
    let mut echo = [0u8; 14];
    tcp.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"SSH-2.0-mine\r\n");
    drop(tcp);
    let recs = run.finish().await;
    assert!(denied(&recs).is_empty(), "{recs:#?}");
}
