//! Chaining to the caller's own HTTP proxy (`--upstream-proxy http://HOST:PORT`): for a
//! host whose only way out is a corporate proxy.
//!
//! Every connection the egress proxy makes for an allowed host (a `CONNECT` tunnel, a
//! plain-HTTP request, SOCKS5, a terminated host's TLS) is opened by [`open`], so one
//! function decides how the bytes leave. Through an upstream proxy it sends
//! `CONNECT host:port HTTP/1.1` with the `Host` header and reads the answer's head, byte
//! by byte and bounded, so not one byte the destination sent after it is taken: the
//! stream is then used exactly as a direct connection (a terminated host's TLS is still
//! verified end to end against its roots and `--upstream-ca`).
//!
//! The upstream proxy's own address is resolved once, when the run's proxy starts
//! ([`Chain::resolve`]), and connected to by address; a name that does not resolve fails
//! each attempt with that reason rather than the run. The names of destinations are not
//! resolved here: the upstream proxy resolves them, so the address a name leads to cannot
//! be judged against the refused table (an IP literal still is, before this is called).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use sandbox_core::egress::Resolver;
use sandbox_core::policy::Target;
use sandbox_core::UpstreamProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::CONNECT_TIMEOUT;

/// The largest answer head read from the upstream proxy: a status line and a few headers.
const MAX_ANSWER_HEAD: usize = 16 << 10;

/// The longest reason phrase of the upstream proxy's kept in the record.
const MAX_REASON: usize = 64;

/// The upstream proxy of a run, and its addresses once resolved.
#[derive(Debug)]
pub(crate) struct Chain {
    proxy: UpstreamProxy,
    addrs: OnceLock<Result<Vec<SocketAddr>, String>>,
}

impl Chain {
    pub(crate) fn new(proxy: UpstreamProxy) -> Self {
        Self {
            proxy,
            addrs: OnceLock::new(),
        }
    }

    /// Resolve the upstream proxy's address, once per run (an IP literal is its own); with
    /// the run's resolver, within the connect timeout.
    pub(crate) async fn resolve(&self, resolver: &Arc<dyn Resolver>) {
        if self.addrs.get().is_some() {
            return;
        }
        let found = match &self.proxy.host {
            Target::Ip(ip) => Ok(vec![SocketAddr::new(*ip, self.proxy.port)]),
            Target::Name(name) => {
                match tokio::time::timeout(CONNECT_TIMEOUT, resolver.resolve(name, self.proxy.port))
                    .await
                {
                    Ok(Ok(a)) if !a.is_empty() => Ok(a),
                    Ok(Ok(_)) => Err(format!("the upstream proxy {} has no address", self.proxy)),
                    Ok(Err(e)) => Err(format!(
                        "the upstream proxy {} did not resolve: {e}",
                        self.proxy
                    )),
                    Err(_) => Err(format!(
                        "the upstream proxy {} did not resolve in time",
                        self.proxy
                    )),
                }
            }
        };
        if let Err(why) = &found {
            tracing::warn!("egress proxy: {why}");
        }
        let _ = self.addrs.set(found);
    }
}

/// How an allowed attempt leaves: straight to the resolved addresses, or through the
/// upstream proxy by name.
pub(crate) enum Route<'a> {
    /// Connect to these, in order, until one answers.
    Direct(Vec<SocketAddr>),
    /// Ask the upstream proxy for `host:port`.
    Chained(&'a Chain, &'a Target),
}

/// Open the byte stream of an allowed attempt to `port` by `route`: the stream and the
/// address connected to (the destination's, or the upstream proxy's), or why it could not
/// be made, for the attempt's record.
pub(crate) async fn open(route: Route<'_>, port: u16) -> Result<(TcpStream, SocketAddr), String> {
    match route {
        Route::Direct(addrs) => {
            let mut last = None;
            for a in addrs {
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
                    Ok(Ok(s)) => {
                        let _ = s.set_nodelay(true);
                        return Ok((s, a));
                    }
                    Ok(Err(e)) => last = Some(e.to_string()),
                    Err(_) => last = Some("timed out".into()),
                }
            }
            Err(last.unwrap_or_else(|| "no address".into()))
        }
        Route::Chained(chain, target) => chained(chain, target, port).await,
    }
}

/// Through the upstream proxy: the first of its addresses that takes the connection is
/// asked for the tunnel; its answer is final (another address is tried only when one
/// refuses or does not answer the connect).
async fn chained(
    chain: &Chain,
    target: &Target,
    port: u16,
) -> Result<(TcpStream, SocketAddr), String> {
    let proxy = &chain.proxy;
    let addrs = match chain.addrs.get() {
        Some(Ok(a)) => a,
        Some(Err(why)) => return Err(why.clone()),
        None => return Err(format!("the upstream proxy {proxy} was not resolved")),
    };
    let authority = format!("{target}:{port}");
    let mut last = None;
    for &a in addrs {
        // Its address beside its name; an IP literal is said once.
        let proxy = match proxy.host {
            Target::Ip(_) => format!("the upstream proxy {proxy}"),
            Target::Name(_) => format!("the upstream proxy {proxy} ({a})"),
        };
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                last = Some(format!("{proxy}: {e}"));
                continue;
            }
            Err(_) => {
                last = Some(format!("{proxy} timed out"));
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        return match tokio::time::timeout(CONNECT_TIMEOUT, handshake(tcp, &authority)).await {
            Ok(Ok(s)) => Ok((s, a)),
            Ok(Err(why)) => Err(format!("{proxy} {why}")),
            Err(_) => Err(format!(
                "{proxy} did not answer CONNECT {authority} in time"
            )),
        };
    }
    Err(last.unwrap_or_else(|| format!("the upstream proxy {} has no address", chain.proxy)))
}

/// Ask for the tunnel to `authority` on `tcp` and read the answer's head, one byte at a
/// time so nothing after it is consumed (a server that speaks first may have sent bytes
/// behind it). A 2xx answer is the tunnel (RFC 9110, 9.3.6); any other is why not.
async fn handshake(mut tcp: TcpStream, authority: &str) -> Result<TcpStream, String> {
    let ask = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    tcp.write_all(ask.as_bytes())
        .await
        .map_err(|e| format!("could not be asked for {authority}: {e}"))?;
    let mut head = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    loop {
        match tcp.read(&mut byte).await {
            Ok(0) => return Err(format!("closed without answering CONNECT {authority}")),
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(format!("failed while answering CONNECT {authority}: {e}")),
        }
        if byte[0] != b'\n' {
            if head.len() >= MAX_ANSWER_HEAD {
                return Err(format!(
                    "answered CONNECT {authority} with a head over {MAX_ANSWER_HEAD} bytes"
                ));
            }
            continue;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {
                let code = answer.code.unwrap_or(0);
                if (200..300).contains(&code) {
                    return Ok(tcp);
                }
                let reason = shown(answer.reason.unwrap_or(""));
                return Err(format!(
                    "answered {code}{}{reason} to CONNECT {authority}",
                    if reason.is_empty() { "" } else { " " }
                ));
            }
            Ok(httparse::Status::Partial) if head.len() < MAX_ANSWER_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err(format!(
                    "answered CONNECT {authority} with a head over {MAX_ANSWER_HEAD} bytes"
                ))
            }
            Err(e) => return Err(format!("answered CONNECT {authority} with no HTTP ({e})")),
        }
    }
}

/// A reason phrase as the record keeps it: printable ASCII (anything else a space), bounded.
fn shown(reason: &str) -> String {
    reason
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
        .take(MAX_REASON)
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A one-connection upstream proxy that answers `answer` and then sends `after`: what
    /// it read up to the end of the request head.
    async fn one_shot(answer: &'static [u8]) -> (SocketAddr, tokio::task::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before the request head");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer).await.unwrap();
            // Hold the connection until the test is done with it.
            let _ = s.read(&mut buf).await;
            String::from_utf8(got).unwrap()
        });
        (at, task)
    }

    fn chain_at(at: SocketAddr) -> Chain {
        let chain = Chain::new(UpstreamProxy::parse(&format!("http://{at}")).unwrap());
        let _ = chain.addrs.set(Ok(vec![at]));
        chain
    }

    #[tokio::test]
    async fn the_bytes_after_the_answer_stay_in_the_stream() {
        let (at, asked) =
            one_shot(b"HTTP/1.1 200 Connection established\r\nVia: x\r\n\r\nSSH-2.0-banner\r\n")
                .await;
        let chain = chain_at(at);
        let target = Target::Name("git.example".into());
        let (mut s, peer) = open(Route::Chained(&chain, &target), 22).await.unwrap();
        assert_eq!(peer, at);
        let mut banner = [0u8; 16];
        s.read_exact(&mut banner).await.unwrap();
        assert_eq!(&banner, b"SSH-2.0-banner\r\n");
        drop(s);
        assert_eq!(
            asked.await.unwrap(),
            "CONNECT git.example:22 HTTP/1.1\r\nHost: git.example:22\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn an_ipv6_target_is_asked_in_brackets() {
        let (at, asked) = one_shot(b"HTTP/1.0 200 OK\r\n\r\n").await;
        let chain = chain_at(at);
        let target = Target::Ip("2001:db8::1".parse().unwrap());
        let (s, _) = open(Route::Chained(&chain, &target), 443).await.unwrap();
        drop(s);
        assert!(asked
            .await
            .unwrap()
            .starts_with("CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n"));
    }

    #[tokio::test]
    async fn a_refusal_is_the_reason_with_the_status_and_a_bounded_phrase() {
        let (at, _asked) = one_shot(
            b"HTTP/1.1 403 Forbidden by policy\tand then some more words that go on \
              and on past any sensible length\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        let chain = chain_at(at);
        let target = Target::Name("x.example".into());
        let why = open(Route::Chained(&chain, &target), 443)
            .await
            .err()
            .unwrap();
        assert!(
            why.starts_with(&format!(
                "the upstream proxy 127.0.0.1:{} answered 403 Forbidden by policy",
                at.port()
            )),
            "{why}"
        );
        let phrase = why
            .split_once("answered 403 ")
            .and_then(|(_, r)| r.strip_suffix(" to CONNECT x.example:443"))
            .unwrap();
        assert!(
            phrase.len() <= MAX_REASON && !phrase.contains('\t'),
            "{why}"
        );
    }

    #[tokio::test]
    async fn an_endless_head_and_no_http_are_refused() {
        let (at, _a) = one_shot(b"SSH-2.0-not-http\r\n\r\n").await;
        let target = Target::Name("x.example".into());
        let why = open(Route::Chained(&chain_at(at), &target), 443)
            .await
            .err()
            .unwrap();
        assert!(why.contains("with no HTTP"), "{why}");

        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
            let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
            while s.write_all(line.as_bytes()).await.is_ok() {}
        });
        let why = open(Route::Chained(&chain_at(at), &target), 443)
            .await
            .err()
            .unwrap();
        assert!(why.contains("a head over"), "{why}");
    }

    #[tokio::test]
    async fn an_upstream_proxy_that_is_not_there_is_the_reason() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        drop(l);
        let target = Target::Name("x.example".into());
        let why = open(Route::Chained(&chain_at(at), &target), 443)
            .await
            .err()
            .unwrap();
        assert!(
            why.starts_with(&format!("the upstream proxy 127.0.0.1:{}", at.port())),
            "{why}"
        );
        let unresolved = Chain::new(UpstreamProxy::parse("http://proxy.corp.test:3128").unwrap());
        let _ = unresolved.addrs.set(Err(
            "the upstream proxy proxy.corp.test:3128 did not resolve: no".into(),
        ));
        let why = open(Route::Chained(&unresolved, &target), 443)
            .await
            .err()
            .unwrap();
        assert!(why.contains("did not resolve"), "{why}");
    }
}
