//! What network mode `proxy` shares between core, the proxy and the backends: the resolver
//! seam, the per-connection record, and the handle by which a run owns its proxy.
//!
//! The proxy itself lives in `sandbox-proxy`; a backend starts it in
//! [`Launcher::prepare`](crate::process::Launcher::prepare) and hands core an
//! [`EgressRun`] in the [`Launch`](crate::process::Launch). Core ends it once the command's
//! tree is dead and puts its record in the outcome, so no proxy task outlives `wait`.

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

/// How a command asked the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

/// One connection attempt through the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectionRecord {
    /// When the request was read.
    #[serde(serialize_with = "unix_secs")]
    pub at: SystemTime,
    /// How it was asked.
    pub protocol: ProxyProtocol,
    /// The host as asked (a name, or an IP literal).
    pub host: String,
    /// The port asked.
    pub port: u16,
    /// Allowed (with the pattern) or denied (with the reason).
    #[serde(flatten)]
    pub decision: Decision,
    /// The address connected to, when allowed and reached.
    pub peer: Option<SocketAddr>,
    /// Bytes from the command to the destination.
    pub bytes_out: u64,
    /// Bytes from the destination to the command.
    pub bytes_in: u64,
    /// Why an allowed connection could not be made (the name did not resolve, the
    /// destination refused).
    pub error: Option<String>,
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

    /// The line the command-line tool prints for a denied attempt, or `None` when allowed.
    pub fn denied_line(&self) -> Option<String> {
        match &self.decision {
            Decision::Denied(why) => Some(format!(
                "sandbox: denied connect to {} ({why})",
                self.target()
            )),
            Decision::Allowed(_) => None,
        }
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

/// A run's proxy, as core sees it. Dropping it stops the proxy too (the backstop when a
/// run fails to start).
#[async_trait]
pub trait EgressRun: Send + Sync + fmt::Debug + 'static {
    /// Where the run's ports were published on the host (bound before the command ran).
    fn published(&self) -> Vec<Published>;

    /// Stop accepting, end every relay, close the listener, and return the record. Called
    /// once the command's whole tree is dead; returns once every task and descriptor of the
    /// proxy is gone.
    async fn finish(&self) -> Vec<ConnectionRecord>;
}
