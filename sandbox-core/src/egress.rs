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

/// A run's proxy, as core sees it. Dropping it stops the proxy too (the backstop when a
/// run fails to start).
#[async_trait]
pub trait EgressRun: Send + Sync + fmt::Debug + 'static {
    /// Stop accepting, end every relay, close the listener, and return the record. Called
    /// once the command's whole tree is dead; returns once every task and descriptor of the
    /// proxy is gone.
    async fn finish(&self) -> Vec<ConnectionRecord>;
}
