//! What network mode `proxy` shares between core, the proxy and the backends: the resolver
//! seam, the per-connection record, and the handle by which a run owns its proxy.
//!
//! The proxy itself lives in `sandbox-proxy`; a backend starts it in
//! a backend's `prepare` and hands core an
//! [`EgressRun`] in its launch. Core ends it once the command's
//! tree is dead and puts its record in the outcome, so no proxy task outlives `wait`.
//!
//! # Bounded
//!
//! A command can loop on a refused connect. The record ([`ConnectionLog`], as
//! [`DenialLog`](crate::denial::DenialLog) bounds denials) keeps the first
//! [`MAX_CONNECTIONS`] distinct entries, attempts alike in protocol, host, port, decision
//! and error folded into one with a count, the first and last time, and the bytes each way
//! summed; attempts that would make another entry are counted exactly (attempts, denied,
//! bytes) in [`Connections::more`]. The host's memory stays bounded whatever the command
//! does.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use crate::policy::Decision;

/// The port the proxy listens on inside the command's network namespace (on `127.0.0.1`).
/// Fixed, since the namespace is the command's alone: the environment names it.
pub const PROXY_PORT: u16 = 3128;

/// Turns an allowed name into addresses, on the host, after the allowlist check. The
/// default is the host's resolver ([`SystemResolver`]); a test suite injects a table through
/// [`SandboxOpts::resolver`](crate::SandboxOpts::resolver) so that no test touches the real
/// DNS. Only the library's caller can set it: the command-line tool never does.
#[async_trait]
pub trait Resolver: Send + Sync + fmt::Debug + 'static {
    /// The addresses of `host` (a validated name, never an IP literal), with `port`.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>>;
}

/// The host's own resolver, through `getaddrinfo` (tokio's `lookup_host`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// How many distinct entries a run's connection record keeps; attempts that would make
/// another are only counted ([`Connections::more`]). Each entry holds at most
/// [`MAX_HOST_LEN`] bytes of host and a reason of ours, so the record of a run stays under
/// about a megabyte whatever the command does, while a thousand distinct destinations is
/// far more than a build's package fetches make.
pub const MAX_CONNECTIONS: usize = 1000;

/// The most host ports one run may forward (each is a listener handed over at start).
pub const MAX_HOST_PORTS: usize = 32;

/// The most connections one run's proxy (and its host ports) holds open at once; one more
/// is closed as soon as it is accepted. Each holds up to six of the host process's
/// descriptors (the client, the upstream, a pipe each way for `splice`), so a command that
/// opens connections and sends nothing cannot take the host's descriptors or memory, while
/// 128 is several times what a package manager's parallel fetches open.
pub const MAX_OPEN_CONNECTIONS: usize = 128;

/// The most descriptors one run hands over through its door: the proxy, every host port,
/// and the network namespace (for published ports). Both sides of the hand-over size their
/// control message by it.
pub const MAX_LISTENERS: usize = MAX_HOST_PORTS + 2;

/// The longest host an entry keeps, in bytes; a longer one (only a refused, malformed
/// request can carry one) is cut at a character boundary, so a command cannot grow the
/// host's memory through the names it asks for.
pub const MAX_HOST_LEN: usize = 256;

/// How a command asked the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocol {
    /// HTTP `CONNECT` (TLS and anything else passed through untouched).
    Connect,
    /// Plain HTTP with an absolute URI.
    Http,
    /// SOCKS5.
    Socks5,
    /// A host port forwarded by number (`host_ports`): no name, no allowlist.
    HostPort,
}

/// The longest request path an entry keeps, in bytes (cut at a character boundary).
pub const MAX_PATH_LEN: usize = 256;

/// One request on a connection whose TLS the proxy terminated (a host with secrets or
/// request rules): what was asked, and which secrets went into it. The rule that allowed
/// it, or why it was refused, is the entry's decision.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct RequestRecord {
    /// The method (at most 16 bytes).
    pub method: String,
    /// The path without its query: canonical (decoded once, dots resolved) on a host with
    /// rules; at most [`MAX_PATH_LEN`] bytes.
    pub path: String,
    /// The names of the secrets put into it (never a value).
    pub injected: Vec<String>,
}

impl RequestRecord {
    /// `method` and `path` cut to their bounds, so a command cannot grow the record
    /// through what it asks for.
    pub fn bounded(method: &str, path: &str, injected: Vec<String>) -> Self {
        Self {
            method: cut(method, 16).to_owned(),
            path: cut(path, MAX_PATH_LEN).to_owned(),
            injected,
        }
    }
}

fn cut(s: &str, most: usize) -> &str {
    if s.len() <= most {
        return s;
    }
    let mut at = most;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

/// Connection attempts through the proxy that were alike: the same protocol, host, port,
/// decision (with its rule or reason) and error. One entry stands for `count` of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectionRecord {
    /// When the first of them was read.
    #[serde(serialize_with = "unix_secs")]
    pub at: SystemTime,
    /// When the last of them was read (`at` for one attempt).
    #[serde(serialize_with = "unix_secs")]
    pub last_at: SystemTime,
    /// How many attempts this entry stands for.
    pub count: u64,
    /// How it was asked.
    pub protocol: ProxyProtocol,
    /// The host as asked (a name, or an IP literal), at most [`MAX_HOST_LEN`] bytes.
    pub host: String,
    /// The port asked.
    pub port: u16,
    /// Allowed (with the pattern) or denied (with the reason).
    #[serde(flatten)]
    pub decision: Decision,
    /// The address connected to (the first one reached), when allowed and reached. With
    /// an upstream proxy ([`UpstreamProxy`]) that is the upstream proxy's address: the
    /// destination's is the upstream proxy's to resolve.
    pub peer: Option<SocketAddr>,
    /// Bytes from the command to the destination, over all of its attempts.
    pub bytes_out: u64,
    /// Bytes from the destination to the command, over all of its attempts.
    pub bytes_in: u64,
    /// Why an allowed connection could not be made (the name did not resolve, the
    /// destination refused).
    pub error: Option<String>,
    /// For one request on a terminated connection: the request (alike requests, the same
    /// method, path, secrets and decision, are one entry with a count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestRecord>,
}

impl ConnectionRecord {
    /// What was asked, as `host:port` (`[v6]:port` for an IPv6 literal).
    pub fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The line the command-line tool prints for denied attempts (` x3` when there were
    /// three alike), or `None` when allowed.
    pub fn denied_line(&self) -> Option<String> {
        let what = match &self.request {
            Some(r) if self.port == 443 => format!("{} https://{}{}", r.method, self.host, r.path),
            Some(r) => format!("{} https://{}{}", r.method, self.target(), r.path),
            None => format!("connect to {}", self.target()),
        };
        match &self.decision {
            Decision::Denied(why) => Some(format!(
                "sandbox: denied {what} ({why}){}",
                if self.count > 1 {
                    format!(" x{}", self.count)
                } else {
                    String::new()
                }
            )),
            Decision::Allowed(_) => None,
        }
    }

    /// The line the command-line tool prints for an allowed connection the proxy could not
    /// make (the name did not resolve, the destination refused or did not answer), or
    /// `None`: the command sees only a failed connect, which would otherwise read like a
    /// refusal, and the cause is on the host side.
    pub fn failed_line(&self) -> Option<String> {
        match (&self.decision, &self.error) {
            (Decision::Allowed(_), Some(error)) => Some(format!(
                "sandbox: could not connect to {} ({error}){}",
                self.target(),
                if self.count > 1 {
                    format!(" x{}", self.count)
                } else {
                    String::new()
                }
            )),
            _ => None,
        }
    }
}

/// The attempts a full record did not keep: counted exactly, not described.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FoldedConnections {
    /// Attempts in all.
    pub attempts: u64,
    /// Of them, denied.
    pub denied: u64,
    /// Bytes from the command to their destinations.
    pub bytes_out: u64,
    /// Bytes from their destinations to the command.
    pub bytes_in: u64,
}

/// A run's connection record, as the outcome carries it: bounded like
/// [`Denials`](crate::Denials), the first [`MAX_CONNECTIONS`] distinct entries in the
/// order first seen, each with its count, and the attempts beyond them counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Connections {
    /// The distinct entries, in the order first seen.
    pub entries: Vec<ConnectionRecord>,
    /// What did not fit.
    pub more: FoldedConnections,
}

impl Connections {
    /// No attempt was made.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.more.attempts == 0
    }

    /// How many attempts were made in all.
    pub fn attempts(&self) -> u64 {
        self.entries.iter().map(|c| c.count).sum::<u64>() + self.more.attempts
    }

    /// The lines the command-line tool prints after a run: one per denied entry and one
    /// per allowed connection that could not be made ([`ConnectionRecord::failed_line`]),
    /// in the order first seen, then one counting the denied attempts the record did not
    /// keep. The one place the tool, the MCP server and the tests read them from.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| e.denied_line().or_else(|| e.failed_line()))
            .collect();
        lines.extend(self.more_denied_line());
        lines
    }

    fn more_denied_line(&self) -> Option<String> {
        (self.more.denied > 0).then(|| {
            format!(
                "sandbox: denied {} more connect{} (the record keeps {MAX_CONNECTIONS} distinct \
                 entries; the rest are counted)",
                self.more.denied,
                if self.more.denied == 1 { "" } else { "s" }
            )
        })
    }

    /// The denied lines alone: one per denied entry, and one counting the denied attempts
    /// the record did not keep.
    pub fn denied_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .entries
            .iter()
            .filter_map(ConnectionRecord::denied_line)
            .collect();
        lines.extend(self.more_denied_line());
        lines
    }
}

/// One attempt, decided, as the proxy hands it to a [`ConnectionLog`].
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When its request was read.
    pub at: SystemTime,
    /// How it was asked.
    pub protocol: ProxyProtocol,
    /// The host as asked (cut to [`MAX_HOST_LEN`] when recorded).
    pub host: String,
    /// The port asked.
    pub port: u16,
    /// The decision.
    pub decision: Decision,
    /// The address reached, if any.
    pub peer: Option<SocketAddr>,
    /// Why an allowed connection could not be made.
    pub error: Option<String>,
    /// The request, for one on a terminated connection.
    pub request: Option<RequestRecord>,
}

/// Where an attempt's bytes are counted: its entry, or the folded remainder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(Option<usize>);

/// What makes two attempts alike.
type Key = (
    ProxyProtocol,
    String,
    u16,
    Decision,
    Option<String>,
    Option<RequestRecord>,
);

/// Collects a run's connection attempts within a fixed memory bound ([`MAX_CONNECTIONS`]
/// entries, each with at most [`MAX_HOST_LEN`] bytes of host).
#[derive(Debug, Default)]
pub struct ConnectionLog {
    connections: Connections,
    index: HashMap<Key, usize>,
}

impl ConnectionLog {
    /// Record one attempt: counted in its entry (made while there is room), or in the
    /// folded remainder. Its bytes go to the returned slot.
    pub fn record(&mut self, a: Attempt) -> Slot {
        let mut host = a.host;
        if host.len() > MAX_HOST_LEN {
            let mut cut = MAX_HOST_LEN;
            while !host.is_char_boundary(cut) {
                cut -= 1;
            }
            host.truncate(cut);
        }
        let request = a
            .request
            .map(|r| RequestRecord::bounded(&r.method, &r.path, r.injected));
        let key: Key = (a.protocol, host, a.port, a.decision, a.error, request);
        if let Some(&i) = self.index.get(&key) {
            let e = &mut self.connections.entries[i];
            e.count += 1;
            e.last_at = e.last_at.max(a.at);
            e.peer = e.peer.or(a.peer);
            return Slot(Some(i));
        }
        if self.connections.entries.len() >= MAX_CONNECTIONS {
            let more = &mut self.connections.more;
            more.attempts += 1;
            more.denied += u64::from(!key.3.is_allowed());
            return Slot(None);
        }
        let i = self.connections.entries.len();
        let (protocol, host, port, decision, error, request) = key.clone();
        self.connections.entries.push(ConnectionRecord {
            at: a.at,
            last_at: a.at,
            count: 1,
            protocol,
            host,
            port,
            decision,
            peer: a.peer,
            bytes_out: 0,
            bytes_in: 0,
            error,
            request,
        });
        self.index.insert(key, i);
        Slot(Some(i))
    }

    /// Count bytes relayed for the attempt recorded in `slot`.
    pub fn add_bytes(&mut self, slot: Slot, out: u64, into: u64) {
        let (o, i) = match slot.0.and_then(|i| self.connections.entries.get_mut(i)) {
            Some(e) => (&mut e.bytes_out, &mut e.bytes_in),
            None => (
                &mut self.connections.more.bytes_out,
                &mut self.connections.more.bytes_in,
            ),
        };
        *o += out;
        *i += into;
    }

    /// The record so far.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }
}

fn unix_secs<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    )
}

/// A port the command serves inside its namespace, published on the host's loopback
/// (`--publish PORT[:HOSTPORT]`): the host reaches the command's `127.0.0.1:PORT` at
/// `127.0.0.1:HOSTPORT`. The command gains no way out: each connection is made by the host
/// with a socket created in the command's namespace, to that one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Publish {
    /// The port the command listens on, on its own `127.0.0.1`.
    pub port: u16,
    /// The host's port on `127.0.0.1`; `None` lets the kernel choose a free one (the
    /// address is then told by [`SandboxOpts::on_published`](crate::SandboxOpts) and the
    /// outcome's policy).
    pub host_port: Option<u16>,
}

impl std::str::FromStr for Publish {
    type Err = String;
    /// `PORT` or `PORT:HOSTPORT`, each from 1 to 65535.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let num = |t: &str| -> Result<u16, String> {
            match t.parse::<u16>() {
                Ok(0) | Err(_) => Err(format!(
                    "`{t}` in `{s}` is not a port from 1 to 65535 (expected PORT or \
                     PORT:HOSTPORT)"
                )),
                Ok(p) => Ok(p),
            }
        };
        match s.split_once(':') {
            None => Ok(Self {
                port: num(s)?,
                host_port: None,
            }),
            Some((p, h)) => Ok(Self {
                port: num(p)?,
                host_port: Some(num(h)?),
            }),
        }
    }
}

/// Where a published port ended up: the command's port and the host address that reaches
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Published {
    /// The command's port on its own `127.0.0.1`.
    pub port: u16,
    /// The host address (on `127.0.0.1`) that reaches it.
    pub host: SocketAddr,
}

/// Told where each published port is, once the host's listeners are bound and before the
/// command starts: how a caller learns a port the kernel chose while the command runs.
#[derive(Clone)]
pub struct PublishSink(pub std::sync::Arc<PublishFn>);

/// The callback behind a [`PublishSink`].
pub type PublishFn = dyn Fn(&[Published]) + Send + Sync;

impl fmt::Debug for PublishSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PublishSink(..)")
    }
}

/// The caller's own HTTP proxy the egress proxy chains to (`--upstream-proxy
/// http://HOST:PORT`): for a host behind a corporate proxy, every connection the egress
/// proxy makes for an allowed host goes through it with `CONNECT host:port`. The allowlist
/// is still decided first, by the egress proxy; the upstream proxy resolves the names.
///
/// Only `http://HOST:PORT`: the scheme and the port are required (there is no default
/// port worth guessing: proxies listen on 3128, 8080 and others), a lone trailing `/` is
/// taken, and credentials in the URL are refused, since they would be a secret carried in
/// the run's options and record. TLS to the proxy itself and SOCKS are not spoken.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UpstreamProxy {
    /// Its host: a name (lowercase, no trailing dot) or an IP literal.
    pub host: crate::policy::Target,
    /// Its port.
    pub port: u16,
}

/// Why an `--upstream-proxy` URL was refused. No variant holds the URL's credentials.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamProxyError {
    /// Written without `http://`.
    #[error("`{0}` names no scheme; write it as `http://HOST:PORT`")]
    NoScheme(String),
    /// A scheme other than `http`.
    #[error(
        "scheme `{0}` is not supported: only an HTTP proxy that takes `CONNECT` is (TLS to \
         the proxy itself and SOCKS are not spoken; the tunnels through it still carry the \
         command's TLS end to end); name its `http://HOST:PORT`"
    )]
    Scheme(String),
    /// `user:pass@` in the URL.
    #[error(
        "credentials in the URL are not supported: they would be a secret carried in the \
         run's options and record; name a proxy that admits this host without them, such as \
         an authenticating proxy on the host's own loopback, by its `http://HOST:PORT`"
    )]
    Credentials,
    /// No `:PORT`.
    #[error(
        "`{0}` names no port; write `http://HOST:PORT` (there is no default: proxies listen \
         on 3128, 8080 and others)"
    )]
    NoPort(String),
    /// A port that is not 1 to 65535.
    #[error("`{0}` is not a port from 1 to 65535")]
    Port(String),
    /// A path, query or fragment after the authority.
    #[error("`{0}` has a path, query or fragment; an upstream proxy is `http://HOST:PORT` alone")]
    Path(String),
    /// A host that is neither a valid name nor an IP literal.
    #[error("`{0}` is not a host name or an IP address")]
    Host(String),
}

impl UpstreamProxy {
    /// Parse `http://HOST:PORT` (`http://[v6]:PORT`; a trailing `/` is taken).
    pub fn parse(url: &str) -> Result<Self, UpstreamProxyError> {
        // Checked first, so no message below ever echoes a password.
        if url.contains('@') {
            return Err(UpstreamProxyError::Credentials);
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(UpstreamProxyError::NoScheme(url.into()));
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(UpstreamProxyError::Scheme(scheme.to_ascii_lowercase()));
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(UpstreamProxyError::Path(url.into()));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => match v6.split_once(']') {
                Some((h, after)) => match after.strip_prefix(':') {
                    Some(p) => (format!("[{h}]"), p),
                    None if after.is_empty() => return Err(UpstreamProxyError::NoPort(url.into())),
                    None => return Err(UpstreamProxyError::Host(authority.into())),
                },
                None => return Err(UpstreamProxyError::Host(authority.into())),
            },
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p),
                None => return Err(UpstreamProxyError::NoPort(url.into())),
            },
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(UpstreamProxyError::Port(port.into())),
        };
        let Some(host) = crate::policy::Target::parse(&host) else {
            return Err(UpstreamProxyError::Host(host));
        };
        Ok(Self { host, port })
    }
}

impl fmt::Display for UpstreamProxy {
    /// `host:port` (`[v6]:port`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for UpstreamProxy {
    type Err = UpstreamProxyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A run's proxy, as core sees it. Dropping it stops the proxy too (the backstop when a
/// run fails to start).
#[async_trait]
pub trait EgressRun: Send + Sync + fmt::Debug + 'static {
    /// Where the run's ports were published on the host (bound before the command ran).
    fn published(&self) -> Vec<Published>;

    /// Stop accepting, end every relay, close the listener, and return the record. Called
    /// once the command's whole tree is dead; returns once every task and descriptor of the
    /// proxy is gone.
    async fn finish(&self) -> Connections;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn attempt(host: &str, port: u16, decision: Decision, secs: u64) -> Attempt {
        Attempt {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            protocol: ProxyProtocol::Connect,
            host: host.into(),
            port,
            decision,
            peer: None,
            error: None,
            request: None,
        }
    }

    fn denied() -> Decision {
        Decision::Denied("not in the allowlist".into())
    }

    #[test]
    fn an_upstream_proxy_is_http_host_and_port_alone() {
        use crate::policy::Target;
        let p = UpstreamProxy::parse("http://Proxy.Corp.example:3128").unwrap();
        assert_eq!(p.host, Target::Name("proxy.corp.example".into()));
        assert_eq!(p.port, 3128);
        assert_eq!(p.to_string(), "proxy.corp.example:3128");
        assert_eq!(
            UpstreamProxy::parse("HTTP://10.0.0.1:8080/")
                .unwrap()
                .to_string(),
            "10.0.0.1:8080"
        );
        assert_eq!(
            UpstreamProxy::parse("http://[fd00::1]:3128")
                .unwrap()
                .to_string(),
            "[fd00::1]:3128"
        );
        use UpstreamProxyError as E;
        for (url, want) in [
            ("proxy:3128", E::NoScheme("proxy:3128".into())),
            ("https://proxy:3128", E::Scheme("https".into())),
            ("socks5://proxy:1080", E::Scheme("socks5".into())),
            ("socks5h://proxy:1080", E::Scheme("socks5h".into())),
            ("http://proxy", E::NoPort("http://proxy".into())),
            ("http://[fd00::1]", E::NoPort("http://[fd00::1]".into())),
            ("http://proxy:0", E::Port("0".into())),
            ("http://proxy:70000", E::Port("70000".into())),
            ("http://proxy:", E::Port("".into())),
            (
                "http://proxy:3128/pac",
                E::Path("http://proxy:3128/pac".into()),
            ),
            (
                "http://proxy:3128?x=1",
                E::Path("http://proxy:3128?x=1".into()),
            ),
            ("http://proxy:3128#f", E::Path("http://proxy:3128#f".into())),
            ("http://:3128", E::Host("".into())),
            ("http://bad_name!:3128", E::Host("bad_name!".into())),
        ] {
            assert_eq!(UpstreamProxy::parse(url), Err(want), "{url}");
        }
    }

    #[test]
    fn credentials_in_an_upstream_proxy_are_refused_without_echoing_them() {
        for url in [
            "http://user:hunter2@proxy:3128",
            "http://user@proxy:3128",
            "user:hunter2@proxy:3128",
            "https://user:hunter2@proxy:3128",
        ] {
            let e = UpstreamProxy::parse(url).unwrap_err();
            assert_eq!(e, UpstreamProxyError::Credentials, "{url}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn alike_attempts_are_one_entry_with_a_count_times_and_summed_bytes() {
        let mut log = ConnectionLog::default();
        let allowed = Decision::Allowed("crates.io".into());
        let a = log.record(attempt("crates.io", 443, allowed.clone(), 10));
        log.add_bytes(a, 100, 1000);
        let d = log.record(attempt("pastebin.com", 443, denied(), 11));
        let b = log.record(attempt("crates.io", 443, allowed.clone(), 12));
        assert_eq!(a, b);
        log.add_bytes(b, 1, 10);
        // Another port, another protocol, another error: other entries.
        log.record(attempt("crates.io", 80, allowed.clone(), 13));
        log.record(Attempt {
            protocol: ProxyProtocol::Socks5,
            ..attempt("crates.io", 443, allowed.clone(), 14)
        });
        log.record(Attempt {
            error: Some("refused".into()),
            ..attempt("crates.io", 443, allowed.clone(), 15)
        });
        assert_ne!(a, d);
        let c = log.connections();
        assert_eq!(c.entries.len(), 5);
        let e = &c.entries[0];
        assert_eq!((e.count, e.bytes_out, e.bytes_in), (2, 101, 1010));
        assert_eq!(e.at, SystemTime::UNIX_EPOCH + Duration::from_secs(10));
        assert_eq!(e.last_at, SystemTime::UNIX_EPOCH + Duration::from_secs(12));
        assert_eq!(c.attempts(), 6);
        assert_eq!(c.more, FoldedConnections::default());
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["entries"][0]["count"], 2);
        assert_eq!(json["entries"][0]["decision"], "allowed");
        assert_eq!(json["entries"][0]["rule"], "crates.io");
        assert_eq!(json["entries"][0]["at"], 10.0);
        assert_eq!(json["entries"][0]["last_at"], 12.0);
        assert_eq!(json["more"]["attempts"], 0);
    }

    #[test]
    fn past_the_bound_attempts_are_counted_exactly_and_kept_entries_still_count() {
        let mut log = ConnectionLog::default();
        for i in 0..MAX_CONNECTIONS {
            log.record(attempt(&format!("h{i}.test"), 443, denied(), 0));
        }
        // Beyond the bound: 50 new distinct attempts (10 allowed), with bytes.
        for i in 0..50 {
            let decision = if i < 10 {
                Decision::Allowed("*.test".into())
            } else {
                denied()
            };
            let s = log.record(attempt(&format!("new{i}.test"), 443, decision, 0));
            log.add_bytes(s, 2, 3);
        }
        // A repeat of a kept entry is still counted in it.
        for _ in 0..7 {
            log.record(attempt("h0.test", 443, denied(), 1));
        }
        let c = log.connections();
        assert_eq!(c.entries.len(), MAX_CONNECTIONS);
        assert_eq!(c.entries[0].count, 8);
        assert_eq!(
            c.more,
            FoldedConnections {
                attempts: 50,
                denied: 40,
                bytes_out: 100,
                bytes_in: 150
            }
        );
        assert_eq!(c.attempts(), MAX_CONNECTIONS as u64 + 7 + 50);
        let lines = c.denied_lines();
        assert_eq!(lines.len(), MAX_CONNECTIONS + 1);
        assert_eq!(
            lines[0],
            "sandbox: denied connect to h0.test:443 (not in the allowlist) x8"
        );
        assert_eq!(
            lines[1],
            "sandbox: denied connect to h1.test:443 (not in the allowlist)"
        );
        assert!(
            lines[MAX_CONNECTIONS]
                .starts_with("sandbox: denied 40 more connects (the record keeps"),
            "{}",
            lines[MAX_CONNECTIONS]
        );
    }

    #[test]
    fn requests_on_terminated_connections_are_entries_folded_and_bounded() {
        let mut log = ConnectionLog::default();
        let req = |method: &str, path: &str, decision: Decision| Attempt {
            request: Some(RequestRecord::bounded(
                method,
                path,
                vec!["GH_TOKEN".into()],
            )),
            ..attempt("api.github.com", 443, decision, 1)
        };
        let rule = Decision::Allowed("GET https://api.github.com/repos/**".into());
        for _ in 0..3 {
            log.record(req("GET", "/repos/o/r", rule.clone()));
        }
        let why = "no request rule for api.github.com allows POST /repos/o/r".to_owned();
        log.record(req("POST", "/repos/o/r", Decision::Denied(why.clone())));
        let long = format!("/{}", "x".repeat(10_000));
        log.record(req("GET", &long, rule.clone()));
        log.record(req("GET", &format!("{long}y"), rule.clone()));
        let c = log.connections();
        assert_eq!(c.entries.len(), 3);
        assert_eq!(c.entries[0].count, 3);
        let r = c.entries[0].request.as_ref().unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/repos/o/r"));
        assert_eq!(r.injected, ["GH_TOKEN"]);
        assert_eq!(
            c.entries[2].request.as_ref().unwrap().path.len(),
            MAX_PATH_LEN
        );
        assert_eq!(c.entries[2].count, 2);
        assert_eq!(
            c.denied_lines(),
            [format!(
                "sandbox: denied POST https://api.github.com/repos/o/r ({why})"
            )]
        );
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["entries"][1]["request"]["method"], "POST");
        assert_eq!(json["entries"][1]["decision"], "denied");
        assert_eq!(
            json["entries"][0]["rule"],
            "GET https://api.github.com/repos/**"
        );
        assert!(json["entries"][0]["request"]["injected"][0] == "GH_TOKEN");
    }

    #[test]
    fn an_allowed_connection_that_failed_is_one_line_beside_the_refusals() {
        let mut log = ConnectionLog::default();
        let allowed = Decision::Allowed("*.test".into());
        let failed = |host: &str| Attempt {
            error: Some("the name did not resolve: no such host".into()),
            ..attempt(host, 443, allowed.clone(), 0)
        };
        log.record(failed("gone.test"));
        log.record(attempt("denied.example", 443, denied(), 0));
        log.record(attempt("ok.test", 443, allowed.clone(), 0));
        log.record(failed("gone.test"));
        let c = log.connections();
        assert_eq!(
            c.lines(),
            [
                "sandbox: could not connect to gone.test:443 (the name did not resolve: no \
                 such host) x2",
                "sandbox: denied connect to denied.example:443 (not in the allowlist)",
            ]
        );
        assert_eq!(c.denied_lines().len(), 1);
    }

    #[test]
    fn a_long_host_is_cut_so_an_entry_stays_small() {
        let mut log = ConnectionLog::default();
        let long = format!("{}é{}", "a".repeat(MAX_HOST_LEN - 1), "b".repeat(10_000));
        log.record(attempt(&long, 1, denied(), 0));
        // Another long host with the same first MAX_HOST_LEN bytes folds into it.
        let other = format!("{}é{}", "a".repeat(MAX_HOST_LEN - 1), "c".repeat(10));
        log.record(attempt(&other, 1, denied(), 0));
        let c = log.connections();
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.entries[0].host, "a".repeat(MAX_HOST_LEN - 1));
        assert_eq!(c.entries[0].count, 2);
    }

    #[test]
    fn the_target_brackets_an_ipv6_literal() {
        let mut log = ConnectionLog::default();
        log.record(attempt("::1", 443, denied(), 0));
        assert_eq!(log.connections().entries[0].target(), "[::1]:443");
        assert_eq!(
            log.connections().denied_lines(),
            ["sandbox: denied connect to [::1]:443 (not in the allowlist)"]
        );
    }
}
