//! One terminated connection: the command's TLS accepted under the run's authority, one
//! request judged ([`crate::inject`]) and sent to the real server over TLS verified there,
//! the response scanned for the value on its way back.
//!
//! # One request per connection, for now
//!
//! The request goes upstream with `Connection: close` and the connection ends after its
//! response, so no second request (pipelined, or smuggled after a body) reaches the server
//! unjudged: bytes after the first request's body are never forwarded. A chunked request
//! body and a websocket upgrade are refused with that reason until the relay frames them.
//! Keep-alive (every request judged on one connection) is what the speed target needs next.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use sandbox_core::ResolvedSecret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::inject::{judge_request, Framing, StreamScanner};

/// How long the command has for its TLS handshake and its request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(30);

/// The longest request head accepted.
pub const MAX_HEAD: usize = 64 << 10;

/// What happened on one terminated connection, for the record. Holds names, never a value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// The request's method, when a head was read.
    pub method: String,
    /// The request's path without its query, when a head was read.
    pub path: String,
    /// The secrets put into the request.
    pub injected: Vec<String>,
    /// Why the request was refused or the response cut off, if it was.
    pub refused: Option<String>,
}

/// Serve one connection decided for `host:port`: `client` is the command's side after the
/// `CONNECT` was answered, `upstream` a connection already made to the resolved address.
pub async fn terminate<C, U>(
    client: C,
    upstream: U,
    host: &str,
    port: u16,
    secrets: &[ResolvedSecret],
    server: Arc<rustls::ServerConfig>,
    upstream_tls: Arc<rustls::ClientConfig>,
) -> Exchange
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let mut ex = Exchange::default();
    let accepted = tokio::time::timeout(
        HEAD_DEADLINE,
        tokio_rustls::TlsAcceptor::from(server).accept(client),
    )
    .await;
    let mut client = match accepted {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            ex.refused = Some(format!("TLS from the command refused: {e}"));
            return ex;
        }
        Err(_) => {
            ex.refused = Some("no TLS handshake in time".into());
            return ex;
        }
    };
    let (head, rest) = match tokio::time::timeout(HEAD_DEADLINE, read_head(&mut client)).await {
        Ok(Ok(v)) => v,
        Ok(Err(why)) => return refuse(&mut client, ex, why).await,
        Err(_) => return refuse(&mut client, ex, "no request head in time".into()).await,
    };
    if let Some((method, target)) = first_line(&head) {
        ex.method = method;
        ex.path = target.split('?').next().unwrap_or_default().to_owned();
    }
    let judged = match judge_request(secrets, host, port, true, &head) {
        Ok(j) => j,
        Err(r) => return refuse(&mut client, ex, r.to_string()).await,
    };
    ex.injected = judged.injected.clone();
    let length = match judged.framing {
        Framing::None => 0,
        Framing::Length(n) => n,
        Framing::Chunked => {
            let why = "a chunked request body (not framed by the proxy yet): send a \
                       Content-Length";
            return refuse(&mut client, ex, why.into()).await;
        }
    };
    if judged.websocket {
        let why = "a websocket upgrade (not relayed on a terminated host yet)";
        return refuse(&mut client, ex, why.into()).await;
    }
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return refuse(&mut client, ex, format!("`{host}` is not a server name")).await;
    };
    let connected = tokio::time::timeout(
        HEAD_DEADLINE,
        tokio_rustls::TlsConnector::from(upstream_tls).connect(name, upstream),
    )
    .await;
    let mut up = match connected {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            let why = format!("TLS to {host} failed: {e}");
            return answer(&mut client, ex, "502 Bad Gateway", why).await;
        }
        Err(_) => {
            let why = format!("TLS to {host} did not complete in time");
            return answer(&mut client, ex, "504 Gateway Timeout", why).await;
        }
    };
    let head = close_after(&judged.head);
    if up.write_all(&head).await.is_err() {
        return ex;
    }
    // The body: exactly `length` bytes, scanned for a placeholder; nothing after it.
    let mut scanner = StreamScanner::placeholders(secrets);
    let mut left = length;
    let first = &rest[..rest.len().min(usize::try_from(left).unwrap_or(usize::MAX))];
    if let Some(name) = scanner.feed(first) {
        ex.refused = Some(body_refusal(name, host));
        return ex;
    }
    if up.write_all(first).await.is_err() {
        return ex;
    }
    left -= first.len() as u64;
    let mut buf = vec![0u8; 16 << 10];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = match client.read(&mut buf[..want]).await {
            Ok(0) | Err(_) => return ex,
            Ok(n) => n,
        };
        if let Some(name) = scanner.feed(&buf[..n]) {
            ex.refused = Some(body_refusal(name, host));
            return ex;
        }
        if up.write_all(&buf[..n]).await.is_err() {
            return ex;
        }
        left -= n as u64;
    }
    // The response, scanned for a value; cut off at the first sight of one.
    let mut values = StreamScanner::values(secrets);
    let mut held: Vec<u8> = Vec::new();
    loop {
        let n = match up.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(name) = values.feed(&buf[..n]) {
            ex.refused = Some(format!(
                "the response from {host} carried the value of secret {name}: cut off"
            ));
            return ex;
        }
        // Hold back what could be the start of a value cut by this read, so no byte of
        // one reaches the command before the scanner has seen all of it.
        held.extend_from_slice(&buf[..n]);
        let keep = values.holds_back().min(held.len());
        let send = held.len() - keep;
        if client.write_all(&held[..send]).await.is_err() {
            return ex;
        }
        held.drain(..send);
    }
    let _ = client.write_all(&held).await;
    let _ = client.shutdown().await;
    ex
}

/// The head (up to the empty line) and whatever followed it in the same reads.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("a request head over {MAX_HEAD} bytes"));
        }
        match s.read(&mut chunk).await {
            Ok(0) => return Err("the connection ended inside the request head".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("reading the request head: {e}")),
        }
    }
}

fn first_line(head: &[u8]) -> Option<(String, String)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// The judged head with `Connection: close` in place of the client's own.
fn close_after(head: &[u8]) -> Vec<u8> {
    let text = &head[..head.len().saturating_sub(2)];
    let mut out = Vec::with_capacity(head.len() + 20);
    for line in text.split_inclusive(|&b| b == b'\n') {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with(b"connection:") || lower.starts_with(b"keep-alive:") {
            continue;
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

fn body_refusal(name: &str, host: &str) -> String {
    format!("secret {name} sent to {host} in the body: refused as an exfiltration attempt")
}

async fn refuse<S: AsyncWrite + Unpin>(client: &mut S, ex: Exchange, why: String) -> Exchange {
    answer(client, ex, "403 Forbidden", why).await
}

/// Answer the command ourselves and end the connection.
async fn answer<S: AsyncWrite + Unpin>(
    client: &mut S,
    mut ex: Exchange,
    status: &str,
    why: String,
) -> Exchange {
    let body = format!("sandbox: {why}\n");
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(msg.as_bytes()).await;
    let _ = client.shutdown().await;
    ex.refused = Some(why);
    ex
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{upstream_config, RunAuthority};
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use sandbox_core::{Placement, Secret};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

    /// The next head the upstream read, within a generous bound, so a broken proxy fails the
    /// test instead of hanging it.
    async fn next(seen: &mut mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(std::time::Duration::from_secs(30), seen.recv())
            .await
            .expect("the upstream read no request")
            .expect("the upstream is gone")
    }

    const PH: &str = "sandbox-placeholder-0123456789abcdef0123456789abcdef";
    const VALUE: &str = "ghp_realvalue123";

    fn secrets() -> Vec<ResolvedSecret> {
        vec![ResolvedSecret {
            name: "GH_TOKEN".into(),
            value: Secret::new(VALUE.as_bytes().to_vec()),
            hosts: vec!["api.test".into()],
            placement: Placement::Authorization,
            placeholder: PH.into(),
        }]
    }

    /// An HTTPS server on loopback under a test authority of its own (what
    /// `--upstream-ca` names): it sends every request head it reads to the test, and
    /// answers `ok`, or with the head it read when `echo`.
    async fn upstream(
        echo: bool,
    ) -> (
        std::net::SocketAddr,
        CertificateDer<'static>,
        mpsc::UnboundedReceiver<String>,
    ) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["api.test".into()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let Ok((head, _)) = read_head(&mut tls).await else {
                    continue;
                };
                let head = String::from_utf8_lossy(&head).into_owned();
                let body = if echo { head.clone() } else { "ok".into() };
                let _ = tx.send(head);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        });
        (addr, ca.der().clone(), rx)
    }

    /// The command's side: TLS to `sni` trusting the run's authority, `request` sent, the
    /// whole answer read; and the proxy's record of the connection.
    async fn through(
        echo: bool,
        sni: &str,
        request: String,
    ) -> (String, Exchange, mpsc::UnboundedReceiver<String>) {
        let (addr, upstream_ca, rx) = upstream(echo).await;
        let auth = RunAuthority::new(&["api.test".into()]).unwrap();
        let (c, s) = tokio::io::duplex(64 << 10);
        let server = auth.server_config("api.test").unwrap();
        let up_tls = upstream_config(&[upstream_ca]).unwrap();
        let proxy = tokio::spawn(async move {
            let up = TcpStream::connect(addr).await.unwrap();
            terminate(s, up, "api.test", 443, &secrets(), server, up_tls).await
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(auth.ca_der()).unwrap();
        let cfg = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let mut answer = Vec::new();
        if let Ok(mut tls) = connector
            .connect(ServerName::try_from(sni.to_owned()).unwrap(), c)
            .await
        {
            tls.write_all(request.as_bytes()).await.unwrap();
            let _ = tls.read_to_end(&mut answer).await;
        }
        let ex = proxy.await.unwrap();
        (String::from_utf8_lossy(&answer).into_owned(), ex, rx)
    }

    #[tokio::test]
    async fn the_upstream_receives_the_value_the_command_only_the_answer() {
        let req = format!(
            "GET /user?x=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PH}\r\n\r\n"
        );
        let (answer, ex, mut rx) = through(false, "api.test", req).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        let seen = next(&mut rx).await;
        assert!(
            seen.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{seen}"
        );
        assert!(seen.contains("Connection: close\r\n"), "{seen}");
        assert!(!seen.contains(PH), "{seen}");
        assert_eq!(ex.injected, ["GH_TOKEN"]);
        assert_eq!((ex.method.as_str(), ex.path.as_str()), ("GET", "/user"));
        assert_eq!(ex.refused, None);
    }

    #[tokio::test]
    async fn the_placeholder_in_another_header_never_reaches_the_upstream() {
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nX-Debug: {PH}\r\n\r\n");
        let (answer, ex, mut rx) = through(false, "api.test", req).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("secret GH_TOKEN sent to api.test in header x-debug"));
        assert!(!answer.contains(VALUE));
        assert!(ex.refused.unwrap().contains("exfiltration attempt"));
        assert!(rx.try_recv().is_err(), "the upstream got a request");
    }

    #[tokio::test]
    async fn the_placeholder_in_a_body_is_cut_off() {
        let body = format!("{{\"token\":\"{PH}\"}}");
        let req = format!(
            "POST /gists HTTP/1.1\r\nHost: api.test\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (answer, ex, mut rx) = through(false, "api.test", req).await;
        assert!(!answer.contains("200 OK"), "{answer}");
        assert_eq!(
            ex.refused.as_deref(),
            Some(
                "secret GH_TOKEN sent to api.test in the body: refused as an exfiltration attempt"
            )
        );
        // The server saw the head, never a whole request: it holds no placeholder.
        if let Ok(h) = rx.try_recv() {
            assert!(!h.contains(PH));
        }
    }

    #[tokio::test]
    async fn an_echoing_endpoint_cannot_hand_the_value_back() {
        let req = format!(
            "GET /headers HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PH}\r\n\r\n"
        );
        let (answer, ex, mut rx) = through(true, "api.test", req).await;
        assert!(
            next(&mut rx).await.contains(VALUE),
            "the upstream got the value"
        );
        assert!(
            !answer.contains(VALUE),
            "the command got the value back: {answer}"
        );
        assert_eq!(
            ex.refused.as_deref(),
            Some("the response from api.test carried the value of secret GH_TOKEN: cut off")
        );
    }

    #[tokio::test]
    async fn a_fronted_host_and_a_mismatched_server_name_are_refused() {
        let req =
            format!("GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer {PH}\r\n\r\n");
        let (answer, ex, mut rx) = through(false, "api.test", req).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(ex.refused.unwrap().contains("fronting"));
        assert!(rx.try_recv().is_err());
        let req = "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n".to_owned();
        let (answer, ex, mut rx) = through(false, "evil.test", req).await;
        assert!(answer.is_empty(), "{answer}");
        assert!(ex.refused.unwrap().contains("TLS from the command refused"));
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn nothing_after_the_first_request_reaches_the_upstream() {
        let req = format!(
            "GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nGET /b HTTP/1.1\r\nHost: api.test\r\nX-Leak: {PH}\r\n\r\n"
        );
        let (answer, ex, mut rx) = through(false, "api.test", req).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert_eq!(ex.path, "/a");
        let seen = next(&mut rx).await;
        assert!(seen.starts_with("GET /a "), "{seen}");
        assert!(!seen.contains(PH));
    }
}
