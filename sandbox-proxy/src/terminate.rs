//! One terminated connection: the command's TLS accepted under the run's authority, each
//! request on it judged ([`crate::inject`], and the host's request rules, [`judge_rules`])
//! and sent to the real server over TLS verified there, each response scanned for a
//! secret's value on its way back.
//!
//! # Every request judged, and only judged bytes forwarded
//!
//! The proxy reads the client's bytes as a sequence of requests, never as a stream: a head
//! is read whole, judged and written out anew; then exactly the body its framing declares
//! is relayed, re-framed by the proxy (a `Content-Length` body as so many bytes, a chunked
//! body as chunks of the proxy's own sizes, no extensions, no trailers); and only then is
//! the next head read. Bytes after a body are the next request's head, judged in turn, so
//! neither pipelining nor a body that hides a second request (`CL.TE`, `TE.CL`, refused by
//! the judge anyway) gets a byte upstream unjudged. A refused request ends the connection
//! with the proxy's own `403`: what followed it cannot be framed with confidence.
//!
//! Responses are relayed with their framing honoured (`Content-Length`, chunked re-framed
//! the same way, none for `HEAD`/`204`/`304`, to the end of the connection otherwise), so
//! the command can send its next request on the same connection, and the one upstream
//! connection serves them all while the server keeps it open; when it closes (or says
//! `Connection: close`) the command's connection ends after that response.
//!
//! # WebSocket
//!
//! A request with `Upgrade: websocket` is judged like any other (placeholders in its headers
//! replaced, rules applied); when the server answers `101`, frames are not parsed from then
//! on: a placeholder in a frame the command sends is not seen, and the value cannot be put
//! into one either. What the server sends back is still scanned for the value, as every
//! response is (a server frame is unmasked, so the value would travel in it as written):
//! one that carries it cuts the connection off. `h2c` and every other upgrade are refused
//! by the judge.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use sandbox_core::policy::{canonical_path, RequestRule};
use sandbox_core::ResolvedSecret;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::inject::{judge_request, Framing, StreamScanner};

/// How long the command has for its TLS handshake and each request head (between
/// requests on a kept-alive connection, too).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(30);

/// The longest request or response head accepted.
pub const MAX_HEAD: usize = 64 << 10;

/// The longest chunk-size line (size and extensions) accepted in a chunked body.
pub const MAX_CHUNK_LINE: usize = 1024;

/// The most bytes read at once, and so the largest chunk the proxy writes.
const PIECE: usize = 16 << 10;

/// One request on a terminated connection, for the record. Holds names, never a value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// The request's method, when a head was read.
    pub method: String,
    /// The request's path without its query: canonical on a host with rules (and wherever
    /// it could be made canonical), as sent otherwise.
    pub path: String,
    /// The request rule that allowed it, on a host with rules.
    pub rule: Option<String>,
    /// The secrets put into the request.
    pub injected: Vec<String>,
    /// Why the request was refused, if it was.
    pub refused: Option<String>,
}

/// The decision of a host's rules on one request.
#[derive(Debug, PartialEq, Eq)]
pub struct RuleVerdict {
    /// The canonical path (decoded, for the record and the match).
    pub path: String,
    /// The target to send upstream: the canonical path as written on the wire, and the
    /// original query.
    pub target: String,
    /// The rule that matched.
    pub rule: String,
}

/// Judge `method target` for `host` against `rules` (only the rules for `host` count; the
/// caller terminates a host because it has some). The target's path is made canonical
/// first ([`canonical_path`]), and a path with an ambiguous form is refused, never guessed.
pub fn judge_rules(
    rules: &[RequestRule],
    host: &str,
    method: &str,
    target: &str,
) -> Result<RuleVerdict, String> {
    if target.contains('#') {
        return Err("request refused: a fragment (`#`) in the request target".into());
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let canon = canonical_path(path.as_bytes()).map_err(|e| format!("request refused: {e}"))?;
    let rule = rules
        .iter()
        .filter(|r| r.host == host)
        .find(|r| r.allows(method, &canon))
        .ok_or_else(|| {
            format!(
                "no request rule for {host} allows {method} {}",
                canon.as_str()
            )
        })?;
    let mut out = canon.wire();
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Ok(RuleVerdict {
        path: canon.as_str().to_owned(),
        target: out,
        rule: rule.as_str().to_owned(),
    })
}

/// Serve one connection decided for `host:port`: `client` is the command's side after the
/// `CONNECT` was answered, `upstream` a connection already made to the resolved address.
/// Each request is handed to `record` once decided (and relayed, when allowed); the answer
/// is why the connection itself was refused or cut off, if it was.
#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
pub async fn terminate<C, U>(
    client: C,
    upstream: U,
    host: &str,
    port: u16,
    secrets: &[ResolvedSecret],
    rules: &[RequestRule],
    server: Arc<rustls::ServerConfig>,
    upstream_tls: Arc<rustls::ClientConfig>,
    record: &mut (dyn FnMut(Exchange) + Send),
) -> Option<String>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let accepted = tokio::time::timeout(
        HEAD_DEADLINE,
        tokio_rustls::TlsAcceptor::from(server).accept(client),
    )
    .await;
    let client = match accepted {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Some(format!("TLS from the command refused: {e}")),
        Err(_) => return Some("no TLS handshake in time".into()),
    };
    let mut conn = Conn {
        client: Reader::new(client),
        upstream: Some(upstream),
        up: None,
        host,
        port,
        secrets,
        rules: rules.iter().any(|r| r.host == host).then_some(rules),
        upstream_tls,
        values: StreamScanner::values(secrets),
        held: Vec::new(),
    };
    let why = conn.serve(record).await;
    let _ = conn.client.inner.shutdown().await;
    why
}

/// Why serving a connection stopped.
enum Stop {
    /// The exchange ended as it should (the command closed, or the server did).
    Done,
    /// A request was refused (recorded with it) and answered; nothing more is read.
    Refused,
    /// The connection was refused or cut off for this reason (recorded by the caller).
    Cut(String),
}

struct Conn<'a, C, U> {
    client: Reader<tokio_rustls::server::TlsStream<C>>,
    /// The TCP connection to the server, until its TLS is started.
    upstream: Option<U>,
    up: Option<Reader<tokio_rustls::client::TlsStream<U>>>,
    host: &'a str,
    port: u16,
    secrets: &'a [ResolvedSecret],
    /// The rules, when this host has some.
    rules: Option<&'a [RequestRule]>,
    upstream_tls: Arc<rustls::ClientConfig>,
    /// The values looked for in everything sent back to the command.
    values: StreamScanner,
    /// Bytes for the command held back until the scanner has seen what follows them.
    held: Vec<u8>,
}

impl<C, U> Conn<'_, C, U>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    async fn serve(&mut self, record: &mut (dyn FnMut(Exchange) + Send)) -> Option<String> {
        loop {
            match self.one(record).await {
                Ok(true) => {}
                Ok(false) | Err(Stop::Done) | Err(Stop::Refused) => return None,
                Err(Stop::Cut(why)) => return Some(why),
            }
        }
    }

    /// Serve one request: `Ok(true)` when the connection may carry another.
    async fn one(&mut self, record: &mut (dyn FnMut(Exchange) + Send)) -> Result<bool, Stop> {
        let head = match tokio::time::timeout(HEAD_DEADLINE, self.client.head()).await {
            Ok(Ok(Some(h))) => h,
            // The command closed between requests, or stayed idle: an ordinary end.
            Ok(Ok(None)) | Err(_) if self.client.buf.is_empty() => return Err(Stop::Done),
            Ok(Err(why)) => return Err(self.refuse(record, Exchange::default(), why).await),
            Ok(Ok(None)) => {
                let why = "the connection ended inside a request head".to_owned();
                return Err(self.refuse(record, Exchange::default(), why).await);
            }
            Err(_) => {
                let why = "no request head in time".to_owned();
                return Err(self.refuse(record, Exchange::default(), why).await);
            }
        };
        let mut ex = Exchange::default();
        let (method, target) = first_line(&head).unwrap_or_default();
        ex.method = method.chars().take(16).collect();
        let raw_path = target.split(['?', '#']).next().unwrap_or_default();
        ex.path = canonical_path(raw_path.as_bytes())
            .map(|c| c.as_str().to_owned())
            .unwrap_or_else(|_| raw_path.to_owned());
        let judged = match judge_request(self.secrets, self.host, self.port, true, &head) {
            Ok(j) => j,
            Err(r) => return Err(self.refuse(record, ex, r.to_string()).await),
        };
        ex.injected = judged.injected.clone();
        let mut out = judged.head;
        if let Some(rules) = self.rules {
            let (_, judged_target) = first_line(&out).unwrap_or_default();
            match judge_rules(rules, self.host, &method, &judged_target) {
                Ok(v) => {
                    out = with_target(&out, &method, &v.target);
                    ex.path = v.path;
                    ex.rule = Some(v.rule);
                }
                Err(why) => return Err(self.refuse(record, ex, why).await),
            }
        }
        // `Expect: 100-continue` is answered here: the body is judged as it passes, so the
        // server's early answer would change nothing, and a client that waits for it must
        // not wait on the proxy.
        let (out, expect) = strip_expect(&out);
        let head_method_is_head = method == "HEAD";
        if let Err(why) = self.connect().await {
            return Err(self.answer(record, ex, "502 Bad Gateway", why).await);
        }
        if expect
            && self
                .client
                .inner
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return Err(Stop::Done);
        }
        let Some(up) = self.up.as_mut() else {
            return Err(Stop::Done);
        };
        if up.inner.write_all(&out).await.is_err() {
            // The server closed the kept-alive connection: the command's ends too, and
            // the client retries on a new one.
            record(ex);
            return Err(Stop::Done);
        }
        // The body, re-framed; a placeholder in it ends the connection.
        let mut scanner = StreamScanner::placeholders(self.secrets);
        let sent = match judged.framing {
            Framing::None => Ok(()),
            Framing::Length(n) => {
                copy_length(&mut self.client, &mut up.inner, n, &mut scanner).await
            }
            Framing::Chunked => {
                copy_chunked_request(&mut self.client, &mut up.inner, &mut scanner).await
            }
        };
        match sent {
            Ok(()) => {}
            Err(BodyError::Placeholder(name)) => {
                ex.refused = Some(format!(
                    "secret {name} sent to {} in the body: refused as an exfiltration attempt",
                    self.host
                ));
                record(ex);
                return Err(Stop::Refused);
            }
            Err(BodyError::Malformed(why)) => {
                ex.refused = Some(format!("request refused: {why}"));
                record(ex);
                return Err(Stop::Refused);
            }
            Err(BodyError::Closed) => {
                record(ex);
                return Err(Stop::Done);
            }
        }
        record(ex);
        let again = self.response(head_method_is_head, judged.websocket).await?;
        Ok(again && !asks_close(&out))
    }

    /// Start TLS to the server, once per connection.
    async fn connect(&mut self) -> Result<(), String> {
        if self.up.is_some() {
            return Ok(());
        }
        let Some(tcp) = self.upstream.take() else {
            return Err(format!("the connection to {} is gone", self.host));
        };
        let name = ServerName::try_from(self.host.to_owned())
            .map_err(|_| format!("`{}` is not a server name", self.host))?;
        let connected = tokio::time::timeout(
            HEAD_DEADLINE,
            tokio_rustls::TlsConnector::from(self.upstream_tls.clone()).connect(name, tcp),
        )
        .await;
        match connected {
            Ok(Ok(u)) => {
                self.up = Some(Reader::new(u));
                Ok(())
            }
            Ok(Err(e)) => Err(format!("TLS to {} failed: {e}", self.host)),
            Err(_) => Err(format!("TLS to {} did not complete in time", self.host)),
        }
    }

    /// Relay one response (and any `1xx` before it): `Ok(true)` when the connection may
    /// carry another request.
    async fn response(&mut self, to_head: bool, websocket: bool) -> Result<bool, Stop> {
        loop {
            let Some(up) = self.up.as_mut() else {
                return Err(Stop::Done);
            };
            let head = match up.head().await {
                Ok(Some(h)) => h,
                Ok(None) => return Err(Stop::Done),
                Err(why) => {
                    return Err(Stop::Cut(format!("the response from {}: {why}", self.host)))
                }
            };
            let resp = ResponseHead::parse(&head)
                .ok_or_else(|| Stop::Cut(format!("a malformed response from {}", self.host)))?;
            self.send(&head).await?;
            if resp.status == 101 {
                if !websocket {
                    return Err(Stop::Cut(format!(
                        "{} switched protocols without a websocket request",
                        self.host
                    )));
                }
                self.flush().await?;
                return self.tunnel().await;
            }
            if (100..200).contains(&resp.status) {
                continue;
            }
            let body = if to_head || resp.status == 204 || resp.status == 304 {
                Framing::None
            } else if resp.chunked {
                Framing::Chunked
            } else if let Some(n) = resp.length {
                Framing::Length(n)
            } else {
                // Delimited by the end of the connection.
                self.copy_to_end().await?;
                self.flush().await?;
                return Ok(false);
            };
            match body {
                Framing::None => {}
                Framing::Length(n) => self.copy_response_length(n).await?,
                Framing::Chunked => self.copy_response_chunked().await?,
            }
            self.flush().await?;
            return Ok(!resp.close);
        }
    }

    /// Bytes for the command, scanned for a value; held back until the scanner has seen
    /// enough after them that no part of a value passes before it is seen whole.
    async fn send(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        if let Some(name) = self.values.feed(bytes) {
            return Err(Stop::Cut(format!(
                "the response from {} carried the value of secret {name}: cut off",
                self.host
            )));
        }
        self.held.extend_from_slice(bytes);
        let keep = self.values.holds_back().min(self.held.len());
        let send = self.held.len() - keep;
        if send > 0 {
            if self
                .client
                .inner
                .write_all(&self.held[..send])
                .await
                .is_err()
            {
                return Err(Stop::Done);
            }
            self.held.drain(..send);
        }
        Ok(())
    }

    /// The end of a response: what was held back goes out (the scanner keeps its tail, so
    /// a value spread over two responses is still caught, in the second).
    async fn flush(&mut self) -> Result<(), Stop> {
        let held = std::mem::take(&mut self.held);
        if self.client.inner.write_all(&held).await.is_err() {
            return Err(Stop::Done);
        }
        Ok(())
    }

    async fn copy_response_length(&mut self, mut left: u64) -> Result<(), Stop> {
        while left > 0 {
            let piece = self.up_piece(left).await?;
            left -= piece.len() as u64;
            self.send(&piece).await?;
        }
        Ok(())
    }

    async fn copy_response_chunked(&mut self) -> Result<(), Stop> {
        loop {
            let size = {
                let Some(up) = self.up.as_mut() else {
                    return Err(Stop::Done);
                };
                match up.chunk_size().await {
                    Ok(s) => s,
                    Err(why) => {
                        return Err(Stop::Cut(format!("the response from {}: {why}", self.host)))
                    }
                }
            };
            if size == 0 {
                let Some(up) = self.up.as_mut() else {
                    return Err(Stop::Done);
                };
                // Trailers are read and dropped: the command gets the body alone.
                loop {
                    match up.line(MAX_HEAD).await {
                        Ok(Some(l)) if l.is_empty() => break,
                        Ok(Some(_)) => {}
                        _ => {
                            return Err(Stop::Cut(format!(
                                "the response from {} ended in its trailers",
                                self.host
                            )))
                        }
                    }
                }
                return self.send(b"0\r\n\r\n").await;
            }
            let mut left = size;
            while left > 0 {
                let piece = self.up_piece(left).await?;
                left -= piece.len() as u64;
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(&piece);
                framed.extend_from_slice(b"\r\n");
                self.send(&framed).await?;
            }
            let Some(up) = self.up.as_mut() else {
                return Err(Stop::Done);
            };
            if !matches!(up.line(2).await, Ok(Some(l)) if l.is_empty()) {
                return Err(Stop::Cut(format!("a malformed chunk from {}", self.host)));
            }
        }
    }

    async fn copy_to_end(&mut self) -> Result<(), Stop> {
        loop {
            let piece = match self.up_piece(u64::MAX).await {
                Ok(p) => p,
                Err(Stop::Cut(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            self.send(&piece).await?;
        }
    }

    /// Up to `most` bytes of the response body (at least one).
    async fn up_piece(&mut self, most: u64) -> Result<Vec<u8>, Stop> {
        let Some(up) = self.up.as_mut() else {
            return Err(Stop::Done);
        };
        match up.piece(most).await {
            Some(p) => Ok(p),
            None => Err(Stop::Cut(format!(
                "the response from {} ended before its body",
                self.host
            ))),
        }
    }

    /// After `101`: bytes both ways until either side ends; the command's unparsed, the
    /// server's scanned for the value (held back as in [`Conn::send`]), cut off when one
    /// carries it.
    async fn tunnel(&mut self) -> Result<bool, Stop> {
        let Some(up) = self.up.as_mut() else {
            return Err(Stop::Done);
        };
        let early = std::mem::take(&mut self.client.buf);
        if !early.is_empty() && up.inner.write_all(&early).await.is_err() {
            return Err(Stop::Done);
        }
        let late = std::mem::take(&mut up.buf);
        let (mut client_rd, mut client_wr) = tokio::io::split(&mut self.client.inner);
        let (mut up_rd, mut up_wr) = tokio::io::split(&mut up.inner);
        let values = &mut self.values;
        let held = &mut self.held;
        let host = self.host;
        let to_server = async {
            let _ = tokio::io::copy(&mut client_rd, &mut up_wr).await;
            let _ = up_wr.shutdown().await;
        };
        let to_command = async {
            let mut buf = vec![0u8; 16 << 10];
            let mut chunk = late;
            loop {
                if !chunk.is_empty() {
                    if let Some(name) = values.feed(&chunk) {
                        return Err(Stop::Cut(format!(
                            "the response from {host} carried the value of secret {name}: \
                             cut off"
                        )));
                    }
                    held.extend_from_slice(&chunk);
                    let send = held.len() - values.holds_back().min(held.len());
                    if client_wr.write_all(&held[..send]).await.is_err() {
                        return Err(Stop::Done);
                    }
                    held.drain(..send);
                }
                let n = match up_rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                chunk = buf[..n].to_vec();
            }
            // The end: what was held back cannot hold a whole value.
            let _ = client_wr.write_all(held).await;
            held.clear();
            Err(Stop::Done)
        };
        tokio::pin!(to_server);
        tokio::pin!(to_command);
        let mut server_done = false;
        loop {
            tokio::select! {
                () = &mut to_server, if !server_done => server_done = true,
                r = &mut to_command => return r,
            }
        }
    }

    /// Refuse a request with the proxy's `403`, record it, and end the connection.
    async fn refuse(
        &mut self,
        record: &mut (dyn FnMut(Exchange) + Send),
        ex: Exchange,
        why: String,
    ) -> Stop {
        self.answer(record, ex, "403 Forbidden", why).await
    }

    async fn answer(
        &mut self,
        record: &mut (dyn FnMut(Exchange) + Send),
        mut ex: Exchange,
        status: &str,
        why: String,
    ) -> Stop {
        let body = format!("sandbox: {why}\n");
        let msg = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
             close\r\n\r\n{body}",
            body.len()
        );
        let _ = self.client.inner.write_all(msg.as_bytes()).await;
        ex.refused = Some(why);
        record(ex);
        Stop::Refused
    }
}

/// Why a request body was not relayed whole.
enum BodyError {
    Placeholder(String),
    Malformed(String),
    Closed,
}

async fn copy_length<C, W>(
    from: &mut Reader<C>,
    to: &mut W,
    mut left: u64,
    scanner: &mut StreamScanner,
) -> Result<(), BodyError>
where
    C: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    while left > 0 {
        let piece = from.piece(left).await.ok_or(BodyError::Closed)?;
        left -= piece.len() as u64;
        if let Some(name) = scanner.feed(&piece) {
            return Err(BodyError::Placeholder(name.to_owned()));
        }
        to.write_all(&piece).await.map_err(|_| BodyError::Closed)?;
    }
    Ok(())
}

/// A chunked request body, re-framed: each piece read is sent as a chunk of its own size
/// (at most [`PIECE`] bytes), extensions dropped, trailers refused (a header after the
/// body would be a header no judge saw).
async fn copy_chunked_request<C, W>(
    from: &mut Reader<C>,
    to: &mut W,
    scanner: &mut StreamScanner,
) -> Result<(), BodyError>
where
    C: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let size = from.chunk_size().await.map_err(BodyError::Malformed)?;
        if size == 0 {
            return match from.line(MAX_CHUNK_LINE).await {
                Ok(Some(l)) if l.is_empty() => to
                    .write_all(b"0\r\n\r\n")
                    .await
                    .map_err(|_| BodyError::Closed),
                Ok(Some(_)) => Err(BodyError::Malformed("trailers after a chunked body".into())),
                Ok(None) => Err(BodyError::Closed),
                Err(why) => Err(BodyError::Malformed(why)),
            };
        }
        let mut left = size;
        while left > 0 {
            let piece = from.piece(left).await.ok_or(BodyError::Closed)?;
            left -= piece.len() as u64;
            if let Some(name) = scanner.feed(&piece) {
                return Err(BodyError::Placeholder(name.to_owned()));
            }
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            to.write_all(&framed).await.map_err(|_| BodyError::Closed)?;
        }
        match from.line(2).await {
            Ok(Some(l)) if l.is_empty() => {}
            Ok(None) => return Err(BodyError::Closed),
            _ => return Err(BodyError::Malformed("a chunk not ended by CRLF".into())),
        }
    }
}

/// A stream read in requests, lines and pieces, keeping what was read past them.
struct Reader<S> {
    inner: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + Unpin> Reader<S> {
    fn new(inner: S) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    /// Read more; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; PIECE];
        match self.inner.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next head (up to and including the empty line); `None` at the end of the
    /// stream, an error past [`MAX_HEAD`].
    async fn head(&mut self) -> Result<Option<Vec<u8>>, String> {
        let mut from = 0;
        loop {
            if let Some(i) = self.buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = self.buf.split_off(from + i + 4);
                return Ok(Some(std::mem::replace(&mut self.buf, rest)));
            }
            if self.buf.len() > MAX_HEAD {
                return Err(format!("a head over {MAX_HEAD} bytes"));
            }
            from = self.buf.len().saturating_sub(3);
            if !self.fill().await {
                return Ok(None);
            }
        }
    }

    /// The next line without its CRLF (a bare LF is refused); `None` at the end.
    async fn line(&mut self, most: usize) -> Result<Option<Vec<u8>>, String> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                if i == 0 || self.buf[i - 1] != b'\r' {
                    return Err("a line not ended by CRLF".into());
                }
                let rest = self.buf.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.truncate(i - 1);
                return Ok(Some(line));
            }
            if self.buf.len() > most + 2 {
                return Err(format!("a line over {most} bytes"));
            }
            if !self.fill().await {
                return Ok(None);
            }
        }
    }

    /// A chunk-size line: hex digits (at most 15, so no overflow), extensions dropped.
    async fn chunk_size(&mut self) -> Result<u64, String> {
        let line = self
            .line(MAX_CHUNK_LINE)
            .await?
            .ok_or("the body ended before its last chunk")?;
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        if size.is_empty() || size.len() > 15 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err("a chunk size that is not a hex number".into());
        }
        let text = std::str::from_utf8(size).map_err(|_| "a chunk size that is not text")?;
        u64::from_str_radix(text, 16).map_err(|_| "a chunk size that is not a number".into())
    }

    /// Up to `most` bytes (at least one), from what is buffered or one read; `None` at the
    /// end of the stream.
    async fn piece(&mut self, most: u64) -> Option<Vec<u8>> {
        if self.buf.is_empty() && !self.fill().await {
            return None;
        }
        let n = self
            .buf
            .len()
            .min(usize::try_from(most).unwrap_or(usize::MAX));
        let rest = self.buf.split_off(n);
        Some(std::mem::replace(&mut self.buf, rest))
    }
}

/// What the relay needs of a response head.
struct ResponseHead {
    status: u16,
    length: Option<u64>,
    chunked: bool,
    close: bool,
}

impl ResponseHead {
    fn parse(head: &[u8]) -> Option<Self> {
        let mut fields = [httparse::EMPTY_HEADER; crate::inject::MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut fields);
        match resp.parse(head) {
            Ok(httparse::Status::Complete(n)) if n == head.len() => {}
            _ => return None,
        }
        let mut out = Self {
            status: resp.code?,
            length: None,
            chunked: false,
            close: resp.version != Some(1),
        };
        for h in resp.headers.iter() {
            let value = std::str::from_utf8(h.value).ok()?.trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                let n: u64 = value.parse().ok()?;
                if out.length.is_some_and(|l| l != n) {
                    return None;
                }
                out.length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                // Chunked is the last coding or the body runs to the end (RFC 9112 6.3).
                let last = value.rsplit(',').next().unwrap_or_default().trim();
                if last.eq_ignore_ascii_case("chunked") {
                    out.chunked = true;
                } else {
                    out.close = true;
                    out.length = None;
                }
            } else if h.name.eq_ignore_ascii_case("connection")
                && value
                    .split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("close"))
            {
                out.close = true;
            }
        }
        if out.chunked {
            out.length = None;
        }
        Some(out)
    }
}

fn first_line(head: &[u8]) -> Option<(String, String)> {
    let line = head.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// `head` (written by the judge: `METHOD TARGET HTTP/1.1\r\n...`) with another target.
fn with_target(head: &[u8], method: &str, target: &str) -> Vec<u8> {
    let rest = head
        .iter()
        .position(|&b| b == b'\r')
        .map_or(&head[head.len()..], |i| &head[i..]);
    let mut out = format!("{method} {target} HTTP/1.1").into_bytes();
    out.extend_from_slice(rest);
    out
}

/// Whether a request head says `Connection: close`: the command's last request.
fn asks_close(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n').any(|line| {
        let lower = line.to_ascii_lowercase();
        lower.starts_with(b"connection:") && lower.windows(5).any(|w| w == b"close")
    })
}

/// `head` without an `Expect: 100-continue` field, and whether it had one.
fn strip_expect(head: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(head.len());
    let mut found = false;
    for line in head.split_inclusive(|&b| b == b'\n') {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with(b"expect:") && lower.windows(12).any(|w| w == b"100-continue") {
            found = true;
            continue;
        }
        out.extend_from_slice(line);
    }
    (out, found)
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

    /// The next request the upstream read (head and body), within a generous bound, so a
    /// broken proxy fails the test instead of hanging it.
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

    /// How the test server answers.
    #[derive(Clone, Copy, PartialEq)]
    enum Serve {
        /// `ok`, keeping the connection open unless asked to close.
        Ok,
        /// The request head it read, as the body.
        Echo,
        /// `ok` in two chunks.
        Chunked,
        /// `101` to a websocket upgrade, then every byte back as read.
        Socket,
        /// `101`, then the request head it read as a first frame, then every byte back.
        SocketEchoHead,
    }

    /// An HTTPS server on loopback under a test authority of its own (what
    /// `--upstream-ca` names): it reads requests on each connection in turn (bodies framed
    /// by `Content-Length` or chunked, decoded) and sends each to the test as its head and
    /// body, then answers as `serve` says.
    async fn upstream(
        serve: Serve,
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
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut r = Reader::new(tls);
                while let Ok(Some(head)) = r.head().await {
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let lower = text.to_ascii_lowercase();
                    let mut body = Vec::new();
                    if let Some(l) = lower.split("content-length: ").nth(1) {
                        let n: u64 = l.split('\r').next().unwrap().parse().unwrap();
                        let mut left = n;
                        while left > 0 {
                            let p = r.piece(left).await.unwrap();
                            left -= p.len() as u64;
                            body.extend_from_slice(&p);
                        }
                    } else if lower.contains("transfer-encoding: chunked") {
                        loop {
                            let n = r.chunk_size().await.unwrap();
                            let mut left = n;
                            while left > 0 {
                                let p = r.piece(left).await.unwrap();
                                left -= p.len() as u64;
                                body.extend_from_slice(&p);
                            }
                            assert_eq!(r.line(2).await.unwrap().unwrap(), b"");
                            if n == 0 {
                                break;
                            }
                        }
                    }
                    let _ = tx.send(format!("{text}{}", String::from_utf8_lossy(&body)));
                    let answer = match serve {
                        Serve::Ok => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".into(),
                        Serve::Echo => format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                            text.len()
                        ),
                        Serve::Chunked => {
                            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\no\r\n1;x=y\r\nk\r\n0\r\nX-T: 1\r\n\r\n".into()
                        }
                        Serve::Socket => "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".into(),
                        Serve::SocketEchoHead => format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n{text}"),
                    };
                    if r.inner.write_all(answer.as_bytes()).await.is_err() {
                        break;
                    }
                    if matches!(serve, Serve::Socket | Serve::SocketEchoHead) {
                        let early = std::mem::take(&mut r.buf);
                        let _ = r.inner.write_all(&early).await;
                        let (mut rd, mut wr) = tokio::io::split(r.inner);
                        let _ = tokio::io::copy(&mut rd, &mut wr).await;
                        break;
                    }
                    if lower.contains("connection: close") {
                        let _ = r.inner.shutdown().await;
                        break;
                    }
                }
            }
        });
        (addr, ca.der().clone(), rx)
    }

    /// What one connection through the proxy gave: the command's answer, the requests the
    /// proxy recorded, why the connection was cut (if it was), and what the upstream read.
    struct Through {
        answer: String,
        requests: Vec<Exchange>,
        cut: Option<String>,
        seen: mpsc::UnboundedReceiver<String>,
    }

    /// The command's side: TLS to `sni` trusting the run's authority, `request` sent, the
    /// whole answer read (until the proxy ends the connection).
    async fn through(serve: Serve, sni: &str, rules: &[&str], request: String) -> Through {
        let rules: Vec<RequestRule> = rules.iter().map(|r| r.parse().unwrap()).collect();
        let (addr, upstream_ca, seen) = upstream(serve).await;
        let auth = RunAuthority::new(&["api.test".into()]).unwrap();
        let (c, s) = tokio::io::duplex(64 << 10);
        let server = auth.server_config("api.test").unwrap();
        let up_tls = upstream_config(&[upstream_ca]).unwrap();
        let proxy = tokio::spawn(async move {
            let up = TcpStream::connect(addr).await.unwrap();
            let mut requests = Vec::new();
            let cut = terminate(
                s,
                up,
                "api.test",
                443,
                &secrets(),
                &rules,
                server,
                up_tls,
                &mut |ex| requests.push(ex),
            )
            .await;
            (requests, cut)
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
            // To the end of the connection, or to the bytes a websocket test echoes
            // (that connection stays open until the command closes it).
            let read = async {
                let mut buf = [0u8; 4096];
                while !answer.ends_with(b"frame-bytes") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    }
                }
            };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), read).await;
        }
        let (requests, cut) = proxy.await.unwrap();
        Through {
            answer: String::from_utf8_lossy(&answer).into_owned(),
            requests,
            cut,
            seen,
        }
    }

    fn close(req: &str) -> String {
        req.replacen("\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
    }

    #[tokio::test]
    async fn the_upstream_receives_the_value_the_command_only_the_answer() {
        let req = close(&format!(
            "GET /user?x=1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PH}\r\n\r\n"
        ));
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(t.answer.starts_with("HTTP/1.1 200 OK"), "{}", t.answer);
        assert!(t.answer.ends_with("ok"), "{}", t.answer);
        let seen = next(&mut t.seen).await;
        assert!(
            seen.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{seen}"
        );
        assert!(seen.starts_with("GET /user?x=1 HTTP/1.1\r\n"), "{seen}");
        assert!(!seen.contains(PH), "{seen}");
        let ex = &t.requests[0];
        assert_eq!(ex.injected, ["GH_TOKEN"]);
        assert_eq!((ex.method.as_str(), ex.path.as_str()), ("GET", "/user"));
        assert_eq!((ex.refused.as_deref(), t.cut), (None, None));
    }

    #[tokio::test]
    async fn the_placeholder_in_another_header_never_reaches_the_upstream() {
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nX-Debug: {PH}\r\n\r\n");
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(t.answer.starts_with("HTTP/1.1 403"), "{}", t.answer);
        assert!(t
            .answer
            .contains("secret GH_TOKEN sent to api.test in header x-debug"));
        assert!(!t.answer.contains(VALUE));
        let why = t.requests[0].refused.as_deref().unwrap();
        assert!(why.contains("exfiltration attempt"), "{why}");
        assert!(t.seen.try_recv().is_err(), "the upstream got a request");
    }

    #[tokio::test]
    async fn the_placeholder_in_a_body_is_cut_off() {
        let body = format!("{{\"token\":\"{PH}\"}}");
        let req = format!(
            "POST /gists HTTP/1.1\r\nHost: api.test\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(!t.answer.contains("200 OK"), "{}", t.answer);
        assert_eq!(
            t.requests[0].refused.as_deref(),
            Some(
                "secret GH_TOKEN sent to api.test in the body: refused as an exfiltration attempt"
            )
        );
        // The server never read a whole request: nothing reached the test.
        assert!(t.seen.try_recv().is_err());
    }

    #[tokio::test]
    async fn the_placeholder_in_a_chunked_body_is_cut_off_wherever_the_chunks_cut_it() {
        let (a, b) = PH.split_at(20);
        let req = format!(
            "POST /gists HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(!t.answer.contains("200 OK"), "{}", t.answer);
        assert!(t.requests[0]
            .refused
            .as_deref()
            .unwrap()
            .contains("in the body"));
        assert!(t.seen.try_recv().is_err());
    }

    #[tokio::test]
    async fn an_echoing_endpoint_cannot_hand_the_value_back() {
        let req = format!(
            "GET /headers HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {PH}\r\n\r\n"
        );
        let mut t = through(Serve::Echo, "api.test", &[], req).await;
        assert!(
            next(&mut t.seen).await.contains(VALUE),
            "the upstream got the value"
        );
        assert!(
            !t.answer.contains(VALUE),
            "the command got the value back: {}",
            t.answer
        );
        assert_eq!(
            t.cut.as_deref(),
            Some("the response from api.test carried the value of secret GH_TOKEN: cut off")
        );
    }

    #[tokio::test]
    async fn a_fronted_host_and_a_mismatched_server_name_are_refused() {
        let req =
            format!("GET / HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer {PH}\r\n\r\n");
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(t.answer.starts_with("HTTP/1.1 403"), "{}", t.answer);
        assert!(t.requests[0]
            .refused
            .as_deref()
            .unwrap()
            .contains("fronting"));
        assert!(t.seen.try_recv().is_err());
        let req = "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n".to_owned();
        let mut t = through(Serve::Ok, "evil.test", &[], req).await;
        assert!(t.answer.is_empty(), "{}", t.answer);
        assert!(t.cut.unwrap().contains("TLS from the command refused"));
        assert!(t.seen.try_recv().is_err());
    }

    #[tokio::test]
    async fn every_request_on_a_kept_alive_connection_is_judged_in_turn() {
        // Pipelined: the second carries a placeholder in another header; the third
        // would be fine but comes after a refusal, so it is never read.
        let req = format!(
            "GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzGET /c HTTP/1.1\r\nX-Leak: {PH}\r\n\r\nGET /d HTTP/1.1\r\n\r\n"
        );
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert_eq!(
            t.answer.matches("HTTP/1.1 200 OK").count(),
            2,
            "{}",
            t.answer
        );
        assert!(t.answer.contains("HTTP/1.1 403"), "{}", t.answer);
        assert!(next(&mut t.seen).await.starts_with("GET /a "));
        let b = next(&mut t.seen).await;
        assert!(
            b.starts_with("POST /b ") && b.ends_with("\r\n\r\nxyz"),
            "{b}"
        );
        assert!(
            t.seen.try_recv().is_err(),
            "a third request reached the upstream"
        );
        let paths: Vec<_> = t.requests.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/a", "/b", "/c"]);
        assert!(t.requests[2].refused.as_deref().unwrap().contains("x-leak"));
    }

    #[tokio::test]
    async fn a_smuggled_second_request_is_refused_before_it_is_forwarded() {
        // CL.TE: a body that, read by its Transfer-Encoding, ends early and leaves a
        // second request behind.
        let req = "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: api.test\r\n\r\n".to_owned();
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(t.answer.starts_with("HTTP/1.1 403"), "{}", t.answer);
        assert!(t.requests[0]
            .refused
            .as_deref()
            .unwrap()
            .contains("both Content-Length"));
        assert_eq!(t.requests.len(), 1);
        assert!(t.seen.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_chunked_body_and_a_chunked_response_are_re_framed_and_the_connection_reused() {
        let req = "POST /up HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET /again HTTP/1.1\r\nConnection: close\r\n\r\n".to_owned();
        let mut t = through(Serve::Chunked, "api.test", &[], req).await;
        let first = next(&mut t.seen).await;
        assert!(first.ends_with("\r\n\r\nabcde"), "{first}");
        assert!(!first.contains("ext"), "{first}");
        assert!(next(&mut t.seen).await.starts_with("GET /again "));
        // The response's chunks, re-framed by the proxy, its trailer dropped; twice.
        let one =
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\no\r\n1\r\nk\r\n0\r\n\r\n";
        assert_eq!(t.answer, format!("{one}{one}"));
        assert_eq!(t.requests.len(), 2);
        assert_eq!(t.cut, None);
    }

    #[tokio::test]
    async fn chunk_trailers_and_bad_sizes_are_refused() {
        for body in [
            "3\r\nabc\r\n0\r\nX-Smuggled: 1\r\n\r\n",
            "fffffffffffffffff\r\nabc\r\n0\r\n\r\n",
            "-3\r\nabc\r\n0\r\n\r\n",
            "3\nabc\r\n0\r\n\r\n",
        ] {
            let req = format!(
                "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}"
            );
            let t = through(Serve::Ok, "api.test", &[], req).await;
            let why = t.requests[0].refused.as_deref().unwrap_or_default();
            assert!(why.starts_with("request refused"), "{body:?}: {why}");
        }
    }

    #[tokio::test]
    async fn a_rule_passes_its_method_and_refuses_another_on_the_same_path() {
        let rules = ["GET https://api.test/repos/*/issues"];
        let req = "GET /repos/o/issues?page=2 HTTP/1.1\r\nHost: api.test\r\n\r\nPOST /repos/o/issues HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_owned();
        let mut t = through(Serve::Ok, "api.test", &rules, req).await;
        assert!(next(&mut t.seen)
            .await
            .starts_with("GET /repos/o/issues?page=2 HTTP/1.1\r\n"));
        assert!(t.seen.try_recv().is_err());
        assert!(t.answer.starts_with("HTTP/1.1 200 OK"), "{}", t.answer);
        assert!(t.answer.contains("HTTP/1.1 403"), "{}", t.answer);
        assert_eq!(t.requests[0].rule.as_deref(), Some(rules[0]));
        assert_eq!(
            t.requests[1].refused.as_deref(),
            Some("no request rule for api.test allows POST /repos/o/issues")
        );
    }

    #[tokio::test]
    async fn the_upstream_receives_the_canonical_path_that_was_matched() {
        let rules = ["GET https://api.test/a/**"];
        let req =
            "GET /a/x/./y/../%7Ez%20w//q?k=%2F HTTP/1.1\r\nConnection: close\r\n\r\n".to_owned();
        let mut t = through(Serve::Ok, "api.test", &rules, req).await;
        let seen = next(&mut t.seen).await;
        assert!(
            seen.starts_with("GET /a/x/~z%20w/q?k=%2F HTTP/1.1\r\n"),
            "{seen}"
        );
        assert_eq!(t.requests[0].path, "/a/x/~z w/q");
    }

    #[tokio::test]
    async fn an_ambiguous_path_is_refused_on_a_host_with_rules() {
        let rules = ["GET https://api.test/allowed/**"];
        for path in [
            "/allowed/..;/admin",
            "/allowed;x/y",
            "/allowed/%2e%2e%3b/admin",
            "/allowed/a%2Fb",
            "/allowed/a%5Cb",
            "/allowed/%252e%252e/admin",
            "/allowed/%00",
            "/allowed/../../etc",
            "/allowed/%C3",
            "/allowed/../admin",
        ] {
            let req = format!("GET {path} HTTP/1.1\r\nHost: api.test\r\n\r\n");
            let mut t = through(Serve::Ok, "api.test", &rules, req).await;
            assert!(t.answer.starts_with("HTTP/1.1 403"), "{path}: {}", t.answer);
            assert!(t.requests[0].refused.is_some(), "{path}");
            assert!(t.seen.try_recv().is_err(), "{path} reached the upstream");
        }
    }

    #[tokio::test]
    async fn a_websocket_upgrade_carries_the_value_and_then_bytes_both_ways() {
        let req = format!(
            "GET /socket HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer {PH}\r\n\r\nframe-bytes"
        );
        let mut t = through(
            Serve::Socket,
            "api.test",
            &["GET https://api.test/socket"],
            req,
        )
        .await;
        let seen = next(&mut t.seen).await;
        assert!(
            seen.contains(&format!("Authorization: Bearer {VALUE}\r\n")),
            "{seen}"
        );
        assert!(t.answer.starts_with("HTTP/1.1 101"), "{}", t.answer);
        assert!(t.answer.ends_with("frame-bytes"), "{}", t.answer);
        assert_eq!(t.requests[0].injected, ["GH_TOKEN"]);
    }

    /// A server that sends the upgrade request's head back in a frame (the value in its
    /// `Authorization`) is cut off: after `101` the server's bytes are scanned still.
    #[tokio::test]
    async fn a_websocket_server_cannot_hand_the_value_back_in_a_frame() {
        let req = format!(
            "GET /socket HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer {PH}\r\n\r\nframe-bytes"
        );
        let mut t = through(
            Serve::SocketEchoHead,
            "api.test",
            &["GET https://api.test/socket"],
            req,
        )
        .await;
        assert!(
            next(&mut t.seen).await.contains(VALUE),
            "the upstream got the value"
        );
        assert!(
            !t.answer.contains(VALUE),
            "the command got the value back: {}",
            t.answer
        );
        assert!(t.answer.starts_with("HTTP/1.1 101"), "{}", t.answer);
        assert_eq!(
            t.cut.as_deref(),
            Some("the response from api.test carried the value of secret GH_TOKEN: cut off")
        );
    }

    #[tokio::test]
    async fn an_h2c_upgrade_is_refused() {
        let req = "GET / HTTP/1.1\r\nHost: api.test\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n".to_owned();
        let mut t = through(Serve::Ok, "api.test", &[], req).await;
        assert!(t.answer.starts_with("HTTP/1.1 403"), "{}", t.answer);
        assert!(t.requests[0].refused.as_deref().unwrap().contains("h2c"));
        assert!(t.seen.try_recv().is_err());
    }

    #[test]
    fn rules_judge_the_canonical_path_and_keep_the_query() {
        let rules: Vec<RequestRule> = [
            "GET,HEAD https://api.test/v1/**",
            "POST https://other.test/**",
        ]
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();
        let v = judge_rules(&rules, "api.test", "GET", "/v1/a/../b?q=1&r").unwrap();
        assert_eq!(v.target, "/v1/b?q=1&r");
        assert_eq!(v.path, "/v1/b");
        assert_eq!(v.rule, "GET,HEAD https://api.test/v1/**");
        // Another host's rule never applies.
        assert!(judge_rules(&rules, "api.test", "POST", "/v1/x").is_err());
        assert!(judge_rules(&rules, "api.test", "GET", "/v2").is_err());
        assert!(judge_rules(&rules, "api.test", "GET", "/v1/x#f").is_err());
        assert!(judge_rules(&rules, "api.test", "GET", "/v1/..;/x").is_err());
    }
}
