//! The egress proxy of network mode `proxy`: the one way out of a command's private network
//! namespace, connecting only to the hosts of an allowlist.
//!
//! # What it speaks
//!
//! - HTTP `CONNECT host:port`: a byte tunnel; TLS passes through unterminated, its
//!   ClientHello's server name judged ([`sni`]: it must be the tunnel's host, no fronting;
//!   none to a named host, or ECH, is refused; what is not TLS passes), except to a host
//!   with secrets or request rules: its TLS is terminated under the run's authority and
//!   each request on the connection judged ([`terminate`], [`inject`]).
//!   SOCKS5 to such a host is refused; a placeholder in a plain-HTTP request is refused
//!   and recorded by the secret's name.
//! - Plain HTTP with an absolute URI (`GET http://host/path`): the request is sent on with
//!   an origin-form target and `Connection: close`, so one client connection carries one
//!   request to one decided host.
//! - SOCKS5 `CONNECT` without authentication, with a domain name (`socks5h`), an IPv4 or an
//!   IPv6 address.
//!
//! The first byte tells them apart (5 is SOCKS5's version; an HTTP method is a letter).
//!
//! It also serves host ports by number (`host_ports`): a listener per port, each
//! connection relayed to the host's `127.0.0.1:PORT` alone, and recorded; and the other
//! direction, published ports ([`publish`]): the host's listener on `127.0.0.1:HOSTPORT`,
//! each connection relayed to the command's own `127.0.0.1:PORT` through a socket made in
//! the command's namespace (handed over with the listeners as port 0).
//!
//! # The decision, in order
//!
//! 1. The host must be a valid name or IP literal.
//! 2. The proxy's own address (`127.0.0.1:PROXY_PORT` as the command sees it, and where it
//!    listens on the host) is refused, as is any loopback or unspecified address on that
//!    port: a request cannot loop back into the proxy.
//! 3. The allowlist ([`sandbox_core::Allowlist`]): a name only by name patterns, an IP
//!    literal only by IP/CIDR patterns.
//! 4. An allowed name is resolved here, on the host, by the run's [`Resolver`]; never
//!    before the check, so a denied name is never looked up. Every address (resolved, or
//!    the literal) is judged against core's one table of refused addresses
//!    ([`refused`](mod@sandbox_core::policy::refused): loopback, link-local, the cloud
//!    metadata addresses, their IPv4-mapped, -compatible and NAT64 forms): a wildcard
//!    never reaches them, a network rule only from within the refused range.
//! 5. The connection is made to the resolved address; the record gets the peer and the
//!    bytes each way.
//!
//! With an upstream proxy ([`ProxyConfig::upstream`], `--upstream-proxy`), steps 1 to 3
//! are the same and an IP literal is still judged against the refused table; a name is
//! then not resolved here but asked of the upstream proxy (`CONNECT host:port`), which
//! resolves it, so the address it leads to is not judged. Every protocol's connection, a
//! terminated host's too, is made through it by the one function that connects
//! (`upstream::open`); the record's peer is the upstream proxy's address, and its refusal
//! the attempt's error.
//!
//! # Lifetime
//!
//! [`spawn`] starts one task that waits for the listener (a backend hands it over from
//! inside the command's namespace), accepts, and keeps every relay in a `JoinSet`.
//! [`ProxyRun::finish`] (core calls it once the command's tree is dead) stops it, waits for
//! every relay to be dropped, and returns the record; dropping the handle aborts it too.
//!
//! # Dependencies
//!
//! `tokio` (the relays), `httparse` (the HTTP request head, and an upstream proxy's answer:
//! a well-kept parser rather than our own), `nix` (receiving the listener over `SCM_RIGHTS`), `sandbox-core` (the allowlist,
//! the record, the resolver seam), `base64` (a secret inside `Basic` credentials, and the
//! value's encodings looked for in responses: see [`inject`]), `thiserror` (the rewriter's
//! refusals), `rcgen` (the run's certificate authority and a leaf per terminated host, made
//! in memory), `rustls` with `tokio-rustls` (both sides of a terminated connection, on
//! `ring`), `webpki-roots` (the roots an upstream server is verified against; see [`tls`]).
//! SOCKS5 is parsed by hand (a dozen bytes), and tested
//! against curl's `--socks5-hostname`; so is a ClientHello's server name ([`sni`],
//! bounded and fuzzed), for a small reader that refuses what it cannot read.

mod handover;
pub mod inject;
pub mod publish;
mod relay;
mod resolve;
pub mod sni;
mod socks;
mod sys;
pub mod terminate;
pub mod tls;
mod upstream;

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sandbox_core::egress::{
    Attempt, ConnectionLog, Connections, EgressRun, ProxyProtocol, Resolver, Slot,
};
use sandbox_core::policy::{canonical, refused, Target, NOT_IN_ALLOWLIST};
use sandbox_core::{Allowlist, Decision, SandboxError, SystemResolver, PROXY_PORT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use handover::{listen_in_namespace, receive_handover, receive_listener, receive_listeners};
pub use resolve::TableResolver;

/// How long an upstream connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a client has, from its connection, to send its whole request head (the CONNECT
/// line and headers, the HTTP head, the SOCKS5 greeting and request): one deadline rather
/// than one per read, so a byte at a time cannot hold a connection open.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// The first pause after `accept` fails (out of descriptors, out of memory); doubled at
/// each failure in a row up to [`ACCEPT_BACKOFF_MAX`]. Without it, a listener whose
/// backlog holds a connection it cannot take stays ready, and the loop would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between failed accepts.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The largest HTTP request head accepted.
const MAX_HEAD: usize = 64 << 10;

/// What one proxy enforces.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The allowlist.
    pub allowlist: Allowlist,
    /// How allowed names are resolved.
    pub resolver: Arc<dyn Resolver>,
    /// The run's secrets, when it has any: their hosts' TLS is terminated.
    pub secrets: Option<Arc<Secrets>>,
    /// How much a command may hold of the host process.
    pub limits: Limits,
    /// The caller's HTTP proxy every allowed connection goes through (`--upstream-proxy`):
    /// asked with `CONNECT host:port` after the allowlist decided; the names are then
    /// resolved by it, not here.
    pub upstream: Option<sandbox_core::UpstreamProxy>,
}

/// What bounds a run's proxy, so a command cannot grow the host process or spin a core.
/// The defaults are core's [`MAX_OPEN_CONNECTIONS`](sandbox_core::MAX_OPEN_CONNECTIONS)
/// and [`REQUEST_DEADLINE`]; tests make them small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections held open at once (proxy and host ports together); one more is closed
    /// when accepted.
    pub max_open: usize,
    /// From a connection's accept to its whole request head.
    pub head_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_open: sandbox_core::MAX_OPEN_CONNECTIONS,
            head_deadline: REQUEST_DEADLINE,
        }
    }
}

impl ProxyConfig {
    /// A proxy for `allowlist`, resolving with `resolver` (the host's resolver when `None`).
    pub fn new(allowlist: Allowlist, resolver: Option<Arc<dyn Resolver>>) -> Self {
        Self {
            allowlist,
            resolver: resolver.unwrap_or_else(|| Arc::new(SystemResolver)),
            secrets: None,
            limits: Limits::default(),
            upstream: None,
        }
    }
}

/// A run's secrets and request rules with what terminating their hosts' TLS needs.
#[derive(Debug)]
pub struct Secrets {
    /// The secrets (values redacted in `Debug`).
    pub list: Vec<sandbox_core::ResolvedSecret>,
    /// The request rules: on a host that has some, only matching requests pass.
    pub rules: Vec<sandbox_core::policy::RequestRule>,
    /// The hosts whose TLS is terminated (`sandbox_core::plan::terminated_hosts`).
    hosts: Vec<String>,
    /// The run's certificate authority, for their hosts.
    pub authority: tls::RunAuthority,
    /// How the real servers are verified.
    pub upstream: Arc<rustls::ClientConfig>,
}

impl Secrets {
    /// An authority for every host of `list`, and upstream verification against Mozilla's
    /// roots plus `extra_cas`.
    pub fn new(
        list: Vec<sandbox_core::ResolvedSecret>,
        extra_cas: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<Self, tls::TlsError> {
        Self::with_rules(list, Vec::new(), extra_cas)
    }

    /// As [`Secrets::new`], with request rules: their hosts are terminated too.
    pub fn with_rules(
        list: Vec<sandbox_core::ResolvedSecret>,
        rules: Vec<sandbox_core::policy::RequestRule>,
        extra_cas: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<Self, tls::TlsError> {
        let hosts = sandbox_core::plan::terminated_hosts(&list, &rules);
        Ok(Self {
            authority: tls::RunAuthority::new(&hosts)?,
            upstream: tls::upstream_config(extra_cas)?,
            list,
            rules,
            hosts,
        })
    }

    /// The secrets and request rules of `plan` made ready for its run: the authority (made
    /// here, once per run) for every terminated host, and upstream verification against
    /// Mozilla's roots plus the plan's `--upstream-ca` certificates. `None` for a run with
    /// neither. A certificate rustls will not take as a root is refused here, naming its
    /// file, before anything runs.
    pub fn for_plan(plan: &sandbox_core::Plan) -> Result<Option<Arc<Self>>, SandboxError> {
        if plan.terminated_hosts().is_empty() {
            return Ok(None);
        }
        let mut extra = Vec::new();
        for ca in &plan.upstream_cas {
            for (i, der) in ca.certs.iter().enumerate() {
                let cert = rustls::pki_types::CertificateDer::from(der.clone());
                rustls::RootCertStore::empty()
                    .add(cert.clone())
                    .map_err(|e| {
                        SandboxError::invalid(
                            "upstream_cas",
                            format!(
                                "{}: certificate {} is not one an authority can be made of \
                                 ({e}); name the authority's own certificate",
                                ca.path.display(),
                                i + 1
                            ),
                        )
                    })?;
                extra.push(cert);
            }
        }
        let secrets = Self::with_rules(plan.secrets.clone(), plan.request_rules.clone(), &extra)
            .map_err(|e| {
                SandboxError::io(
                    "making the run's certificate authority",
                    io::Error::other(e),
                )
            })?;
        Ok(Some(Arc::new(secrets)))
    }

    /// The hosts whose TLS is terminated, sorted.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Whether `host` is a secret's or a rule's host (its TLS is terminated).
    pub fn terminates(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// The first secret whose placeholder `bytes` hold.
    fn placeholder_in(&self, bytes: &[u8]) -> Option<&str> {
        self.list.iter().find_map(|s| {
            let p = s.placeholder.as_bytes();
            bytes
                .windows(p.len())
                .any(|w| w == p)
                .then_some(s.name.as_str())
        })
    }
}

/// A listener still to come (handed over from the command's namespace), or one at hand.
pub type ListenerSource = Pin<Box<dyn Future<Output = io::Result<std::net::TcpListener>> + Send>>;

/// Several listeners to come, in the order of their [`Role`]s.
pub type ListenersSource =
    Pin<Box<dyn Future<Output = io::Result<Vec<std::net::TcpListener>>> + Send>>;

/// What a listener is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The allowlist proxy.
    Proxy,
    /// A host port: every connection goes to the host's `127.0.0.1:PORT`, nothing else.
    HostPort(u16),
}

/// Where one attempt's relay counts its bytes: its entry in the run's bounded record.
#[derive(Debug)]
struct Tally<'a> {
    log: &'a Mutex<ConnectionLog>,
    slot: Slot,
}

impl Tally<'_> {
    fn add(&self, out: u64, into: u64) {
        if let Ok(mut log) = self.log.lock() {
            log.add_bytes(self.slot, out, into);
        }
    }
}

#[derive(Debug)]
struct Shared {
    /// The allowlist proxy's configuration; `None` when only host ports are served.
    config: Option<ProxyConfig>,
    /// The record: bounded, alike attempts folded (see `sandbox_core::egress`).
    log: Mutex<ConnectionLog>,
    /// Where the proxy listens on the host side (filled in once known).
    local: Mutex<Option<SocketAddr>>,
    /// The bounds, from the configuration (the defaults when only host ports are served).
    limits: Limits,
    /// The upstream proxy, resolved once when the run's listeners are awaited.
    chain: Option<upstream::Chain>,
}

impl Shared {
    /// Record a decided attempt; its relay counts bytes in the tally.
    fn record(&self, attempt: Attempt) -> Tally<'_> {
        let slot = match self.log.lock() {
            Ok(mut log) => log.record(attempt),
            // Poisoned only by a panic while recording, which the record cannot survive
            // anyway; the bytes then go nowhere.
            Err(p) => p.into_inner().record(attempt),
        };
        Tally {
            log: &self.log,
            slot,
        }
    }
}

/// An attempt being decided: recorded once decided, or, when the run ends first (the task
/// is dropped), as refused, so every attempt the proxy read is in the record.
struct Pending<'a> {
    shared: &'a Shared,
    attempt: Attempt,
    settled: bool,
}

impl<'a> Pending<'a> {
    fn new(shared: &'a Shared, protocol: ProxyProtocol, host: &str, port: u16) -> Self {
        Self {
            shared,
            attempt: Attempt {
                at: SystemTime::now(),
                protocol,
                host: host.to_string(),
                port,
                decision: Decision::Denied(ENDED_UNDECIDED.into()),
                peer: None,
                error: None,
                request: None,
            },
            settled: false,
        }
    }

    /// Record it as `decision`, with the peer reached or the error.
    fn settle(
        mut self,
        decision: Decision,
        peer: Option<SocketAddr>,
        error: Option<String>,
    ) -> Tally<'a> {
        self.settled = true;
        self.shared.record(Attempt {
            decision,
            peer,
            error,
            ..self.attempt.clone()
        })
    }
}

impl Pending<'_> {
    /// The attempt as `decision`, for a record made by the caller instead (one request on
    /// a terminated connection).
    fn settled_attempt(mut self, decision: Decision) -> Attempt {
        self.settled = true;
        Attempt {
            decision,
            ..self.attempt.clone()
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.shared.record(self.attempt.clone());
        }
    }
}

/// The reason recorded for an attempt the run ended before it was decided or connected.
const ENDED_UNDECIDED: &str = "the run ended before the connection was made";

/// A running proxy (and host-port forwarders), owned by one run.
#[derive(Debug)]
pub struct ProxyRun {
    /// The run's published ports, served with sockets made in the namespace handed over.
    publish: Option<publish::PublishRun>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Start the proxy on the listener `source` yields, on the current tokio runtime.
pub fn spawn(config: ProxyConfig, source: ListenerSource) -> io::Result<ProxyRun> {
    spawn_roles(
        Some(config),
        vec![Role::Proxy],
        Box::pin(async move { Ok(vec![source.await?]) }),
    )
}

/// Start serving each listener `source` yields in its role (the allowlist proxy, host
/// ports), on the current tokio runtime.
pub fn spawn_roles(
    config: Option<ProxyConfig>,
    roles: Vec<Role>,
    source: ListenersSource,
) -> io::Result<ProxyRun> {
    spawn_admitting(config, roles, source, None)
}

/// Connections a supervisor makes on the command's behalf, for a door without a
/// namespace: the proxy then listens on the host's own loopback, where any process of the
/// host could reach it, so it serves only a connection from a source it was told of
/// (each once) and closes any other at once.
#[derive(Clone, Debug, Default)]
pub struct Expected(Arc<Mutex<std::collections::HashSet<SocketAddr>>>);

impl Expected {
    /// A connection from `from` is coming.
    pub fn expect(&self, from: SocketAddr) {
        if let Ok(mut e) = self.0.lock() {
            e.insert(from);
        }
    }

    /// The connection from `from` will not come.
    pub fn forget(&self, from: SocketAddr) {
        if let Ok(mut e) = self.0.lock() {
            e.remove(&from);
        }
    }

    /// Whether a connection from `peer` was expected; it no longer is.
    fn admit(&self, peer: SocketAddr) -> bool {
        let peer = SocketAddr::new(canonical_ip(peer.ip()), peer.port());
        self.0.lock().is_ok_and(|mut e| e.remove(&peer))
    }
}

/// `ip` with an IPv4-mapped address as the IPv4 one it stands for.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// A door without a namespace, served: the run's proxy and host ports, and where the
/// supervisor connects the command's connections to them.
#[derive(Debug)]
pub struct Mediated {
    /// The running service.
    pub run: ProxyRun,
    /// For each port the command dials on its `127.0.0.1` ([`inside_ports`]: the proxy's,
    /// then each host port), the listener on the host's loopback that serves it.
    pub routes: Vec<(u16, SocketAddr)>,
    /// The connections the supervisor announces; no other is served.
    pub expected: Expected,
}

/// Serve `plan`'s proxy and host ports for a door without a namespace: a listener on the
/// host's loopback for each, serving only the connections the run's supervisor announces.
/// Published ports have no such door (a backend's capability refuses them before).
pub fn serve_mediated(
    plan: &sandbox_core::Plan,
    secrets: Option<Arc<Secrets>>,
) -> Result<Mediated, SandboxError> {
    if plan.network != sandbox_core::NetworkMode::Proxy || !plan.publish.is_empty() {
        return Err(SandboxError::NotSupported {
            backend: "proxy",
            feature: "a door without a network namespace for anything but network mode \
                      `proxy` and its host ports"
                .into(),
            remedy: "run `sandbox doctor` to see what this host can make".into(),
        });
    }
    let config = config_for(plan, secrets)?;
    let start = || -> io::Result<Mediated> {
        let listeners = inside_ports(plan)
            .into_iter()
            .map(|_| std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)))
            .collect::<io::Result<Vec<_>>>()?;
        let routes = inside_ports(plan)
            .into_iter()
            .zip(&listeners)
            .map(|(p, l)| Ok((p, l.local_addr()?)))
            .collect::<io::Result<Vec<_>>>()?;
        let expected = Expected::default();
        let run = spawn_admitting(
            config,
            roles(plan),
            Box::pin(async move { Ok(listeners) }),
            Some(expected.clone()),
        )?;
        Ok(Mediated {
            run,
            routes,
            expected,
        })
    };
    start().map_err(|e| SandboxError::io("starting the egress proxy", e))
}

/// [`spawn_roles`], serving only the connections `expected` admits where it is given.
fn spawn_admitting(
    config: Option<ProxyConfig>,
    roles: Vec<Role>,
    source: ListenersSource,
    expected: Option<Expected>,
) -> io::Result<ProxyRun> {
    if roles.contains(&Role::Proxy) && config.is_none() {
        return Err(io::Error::other("the proxy role needs its configuration"));
    }
    let rt = tokio::runtime::Handle::try_current()
        .map_err(|e| io::Error::other(format!("the proxy needs a tokio runtime: {e}")))?;
    let limits = config.as_ref().map(|c| c.limits).unwrap_or_default();
    let chain = config
        .as_ref()
        .and_then(|c| c.upstream.clone())
        .map(upstream::Chain::new);
    let shared = Arc::new(Shared {
        config,
        log: Mutex::new(ConnectionLog::default()),
        local: Mutex::new(None),
        limits,
        chain,
    });
    let (stop, stop_rx) = watch::channel(false);
    let task = rt.spawn(accept_loop(
        shared.clone(),
        roles,
        source,
        stop_rx,
        expected,
    ));
    Ok(ProxyRun {
        publish: None,
        shared,
        stop,
        task: Mutex::new(Some(task)),
    })
}

/// Start the proxy for a run whose listener will be handed over from inside the command's
/// namespace: the pair's other end (to give to the child, which sends the listener on it)
/// and the running proxy. Call from within the tokio runtime (`Launcher::prepare`).
pub fn start_for_handover(config: ProxyConfig) -> io::Result<(OwnedFd, ProxyRun)> {
    let (host, child) = std::os::unix::net::UnixStream::pair()?;
    let run = spawn_roles(Some(config), vec![Role::Proxy], receive_listeners(host, 1))?;
    Ok((OwnedFd::from(child), run))
}

/// What a backend needs for a run with the proxy or host ports: the ports to listen on
/// inside (in the order they are to be sent), the pair's child end, and the running
/// service. `None` when the plan asks for neither.
#[derive(Debug)]
pub struct Handover {
    /// The ports the child must listen on, on `127.0.0.1`, and send in this order.
    pub ports: Vec<u16>,
    /// The child's end of the pair.
    pub child_end: OwnedFd,
    /// The running service (core ends it after the command's tree).
    pub run: ProxyRun,
}

/// The listeners `plan` needs, in the order they are handed over: the proxy first, then
/// each host port.
pub fn roles(plan: &sandbox_core::Plan) -> Vec<Role> {
    let mut roles = Vec::new();
    if plan.network == sandbox_core::NetworkMode::Proxy {
        roles.push(Role::Proxy);
    }
    roles.extend(plan.host_ports.iter().map(|&p| Role::HostPort(p)));
    roles
}

/// What a backend tells its child (or bwrap's waiter) to make and send, in order: the
/// ports to listen on inside ([`inside_ports`]), then 0, standing for the network namespace
/// itself, when the run publishes ports.
pub fn handover_ports(plan: &sandbox_core::Plan) -> Vec<u16> {
    let mut ports = inside_ports(plan);
    if !plan.publish.is_empty() {
        ports.push(0);
    }
    ports
}

/// The ports to listen on inside for `plan`, in [`roles`] order.
pub fn inside_ports(plan: &sandbox_core::Plan) -> Vec<u16> {
    roles(plan)
        .into_iter()
        .map(|r| match r {
            Role::Proxy => PROXY_PORT,
            Role::HostPort(p) => p,
        })
        .collect()
}

/// The proxy's configuration for `plan` (`None` when it serves only host ports); an
/// allowlist proxy with nothing allowed is refused. `secrets` is the run's, made once before
/// the backend placed the bundle ([`Secrets::for_plan`]); a plan with secrets and none is
/// refused rather than served without them.
fn config_for(
    plan: &sandbox_core::Plan,
    secrets: Option<Arc<Secrets>>,
) -> Result<Option<ProxyConfig>, SandboxError> {
    let proxy = plan.network == sandbox_core::NetworkMode::Proxy;
    if proxy && plan.allowlist.is_empty() {
        return Err(SandboxError::invalid(
            "allow_hosts",
            "the egress proxy needs a non-empty allowlist",
        ));
    }
    if !proxy {
        return Ok(None);
    }
    let mut config = ProxyConfig::new(plan.allowlist.clone(), plan.resolver.clone());
    config.upstream = plan.upstream_proxy.clone();
    if !plan.terminated_hosts().is_empty() {
        let Some(secrets) = secrets else {
            return Err(SandboxError::invalid(
                "secrets",
                "the run's secrets and request rules were not made ready before its door \
                 (the door stage makes their authority and bundle); start the run through \
                 the backend's pipeline",
            ));
        };
        config.secrets = Some(secrets);
    }
    Ok(Some(config))
}

/// Serve `listeners` (made inside the command's namespace, in [`inside_ports`] order) in
/// the roles `plan` gives them: for a backend that makes them itself rather than having
/// them handed over (see [`listen_in_namespace`]). Call from within the tokio runtime.
pub fn serve_for_plan(
    plan: &sandbox_core::Plan,
    secrets: Option<Arc<Secrets>>,
    listeners: Vec<std::net::TcpListener>,
) -> Result<ProxyRun, SandboxError> {
    let config = config_for(plan, secrets)?;
    spawn_roles(config, roles(plan), Box::pin(async move { Ok(listeners) }))
        .map_err(|e| SandboxError::io("starting the egress proxy", e))
}

/// Start what `plan` asks for (network mode `proxy`, host ports); called from a backend's
/// `prepare`; errors say what failed. `secrets`: the run's ([`Secrets::for_plan`]).
pub fn start_for_plan(
    plan: &sandbox_core::Plan,
    secrets: Option<Arc<Secrets>>,
) -> Result<Option<Handover>, SandboxError> {
    let config = config_for(plan, secrets)?;
    let roles = roles(plan);
    let ports = handover_ports(plan);
    if ports.is_empty() {
        return Ok(None);
    }
    // The host side of published ports first: a host port in use fails the run here,
    // before anything runs.
    let bound = publish::bind_for_plan(plan)?;
    let (maker_tx, maker_rx) = watch::channel(None);
    let published = publish::serve(bound, maker_rx)
        .map_err(|e| SandboxError::io("serving the published ports", e))?;
    let start = || -> io::Result<Handover> {
        let (host, child) = std::os::unix::net::UnixStream::pair()?;
        let want = ports.clone();
        let source: ListenersSource = Box::pin(async move {
            let (listeners, netns) = receive_handover(host, want).await?;
            if let Some(ns) = netns {
                let maker = tokio::task::spawn_blocking(move || publish::maker_for(ns))
                    .await
                    .map_err(io::Error::other)??;
                let _ = maker_tx.send(Some(maker));
            }
            Ok(listeners)
        });
        let mut run = spawn_roles(config, roles, source)?;
        run.publish = published;
        Ok(Handover {
            ports: ports.clone(),
            child_end: OwnedFd::from(child),
            run,
        })
    };
    let handover = start().map_err(|e| SandboxError::io("starting the egress proxy", e))?;
    if let (Some(p), Some(sink)) = (&handover.run.publish, &plan.on_published) {
        (sink.0)(p.published());
    }
    Ok(Some(handover))
}

impl ProxyRun {
    /// Where the run's ports were published (empty when none were).
    pub fn published(&self) -> &[sandbox_core::Published] {
        self.publish.as_ref().map_or(&[], |p| p.published())
    }

    /// The record so far.
    pub fn records(&self) -> Connections {
        match self.shared.log.lock() {
            Ok(log) => log.connections().clone(),
            Err(p) => p.into_inner().connections().clone(),
        }
    }
}

#[async_trait]
impl EgressRun for ProxyRun {
    fn published(&self) -> Vec<sandbox_core::Published> {
        ProxyRun::published(self).to_vec()
    }

    async fn finish(&self) -> Connections {
        if let Some(p) = &self.publish {
            p.finish().await;
        }
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            let _ = t.await;
        }
        self.records()
    }
}

impl Drop for ProxyRun {
    fn drop(&mut self) {
        if let Ok(mut t) = self.task.lock() {
            if let Some(t) = t.take() {
                t.abort();
            }
        }
    }
}

async fn accept_loop(
    shared: Arc<Shared>,
    roles: Vec<Role>,
    source: ListenersSource,
    mut stop: watch::Receiver<bool>,
    expected: Option<Expected>,
) {
    // The upstream proxy's address is resolved once, while the listeners are on their way.
    let resolve_upstream = async {
        if let (Some(chain), Some(config)) = (&shared.chain, &shared.config) {
            chain.resolve(&config.resolver).await;
        }
    };
    let listeners = tokio::select! {
        (l, ()) = async { tokio::join!(source, resolve_upstream) } => l,
        _ = stop.wait_for(|s| *s) => return,
    };
    let listeners = match listeners.and_then(|ls| {
        ls.into_iter()
            .map(|l| {
                l.set_nonblocking(true)?;
                TcpListener::from_std(l)
            })
            .collect::<io::Result<Vec<_>>>()
    }) {
        Ok(l) if l.len() == roles.len() => l,
        Ok(l) => {
            tracing::warn!(
                "the egress proxy got {} listeners for {} roles",
                l.len(),
                roles.len()
            );
            return;
        }
        Err(e) => {
            tracing::warn!("the egress proxy got no listener: {e}");
            return;
        }
    };
    // One acceptor per listener hands connections to this loop, which owns every relay.
    // Every connection holds one of the run's permits until its task ends.
    let open = Arc::new(tokio::sync::Semaphore::new(shared.limits.max_open));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Accepted>(64);
    let mut acceptors = JoinSet::new();
    for (role, listener) in roles.into_iter().zip(listeners) {
        if role == Role::Proxy {
            if let Ok(mut local) = shared.local.lock() {
                *local = listener.local_addr().ok();
            }
        }
        acceptors.spawn(accept_each(
            listener,
            role,
            open.clone(),
            shared.limits.head_deadline,
            tx.clone(),
            expected.clone(),
        ));
    }
    drop(tx);
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            Some(Accepted { role, stream, deadline, permit }) = rx.recv() => match role {
                Role::Proxy => {
                    let shared = shared.clone();
                    relays.spawn(async move {
                        serve(shared, stream, deadline).await;
                        drop(permit);
                    });
                }
                Role::HostPort(port) => {
                    let shared = shared.clone();
                    relays.spawn(async move {
                        serve_host_port(shared, stream, port).await;
                        drop(permit);
                    });
                }
            },
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    acceptors.shutdown().await;
    relays.shutdown().await;
}

/// A connection accepted within the run's bound, for the loop that owns every relay.
struct Accepted {
    role: Role,
    stream: TcpStream,
    /// When its request head must have arrived by.
    deadline: tokio::time::Instant,
    permit: tokio::sync::OwnedSemaphorePermit,
}

/// Accept on `listener` for as long as the run lasts: a connection beyond the run's bound
/// is closed at once; a failed accept (out of descriptors: `EMFILE`, `ENFILE`) is retried
/// after a pause that grows while it keeps failing, never in a spin.
async fn accept_each(
    listener: TcpListener,
    role: Role,
    open: Arc<tokio::sync::Semaphore>,
    head_deadline: Duration,
    tx: tokio::sync::mpsc::Sender<Accepted>,
    expected: Option<Expected>,
) {
    let mut backoff = ACCEPT_BACKOFF;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF;
                if expected.as_ref().is_some_and(|e| !e.admit(peer)) {
                    tracing::debug!("egress proxy: connection from {peer}, not announced, closed");
                    drop(stream);
                    continue;
                }
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    tracing::debug!("egress proxy: connection over the run's bound closed");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let accepted = Accepted {
                    role,
                    stream,
                    deadline: tokio::time::Instant::now() + head_deadline,
                    permit,
                };
                if tx.send(accepted).await.is_err() {
                    return;
                }
            }
            // The peer gave up between its connect and our accept: nothing to wait for.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                tracing::debug!("egress proxy accept: {e}; pausing {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// A host port: relay to the host's `127.0.0.1:PORT`, recorded like any connection.
async fn serve_host_port(shared: Arc<Shared>, client: TcpStream, port: u16) {
    let to = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port);
    let pending = Pending::new(&shared, ProxyProtocol::HostPort, &to.ip().to_string(), port);
    let rule = Decision::Allowed(format!("host port {port}"));
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to)).await {
        Ok(Ok(upstream)) => {
            let _ = upstream.set_nodelay(true);
            let tally = pending.settle(rule, Some(to), None);
            relay::run(&tally, client, upstream).await;
        }
        Ok(Err(e)) => {
            pending.settle(rule, None, Some(e.to_string()));
        }
        Err(_) => {
            pending.settle(rule, None, Some("timed out".into()));
        }
    }
}

/// One client connection: find the protocol, decide, relay. Its request head must be in
/// by `deadline`.
async fn serve(shared: Arc<Shared>, mut client: TcpStream, deadline: tokio::time::Instant) {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout_at(deadline, client.peek(&mut first)).await;
    match peeked {
        Ok(Ok(1)) if first[0] == socks::VERSION => socks::serve(&shared, client, deadline).await,
        Ok(Ok(1)) => serve_http(&shared, client, deadline).await,
        _ => {
            let _ = client.shutdown().await;
        }
    }
}

/// A request head: how much of the buffer it took, and what it asks.
struct Head {
    len: usize,
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
}

async fn read_head(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> Result<Head, &'static str> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err("the client closed before its request"),
            Ok(Ok(n)) => n,
            Err(_) => return Err("the request did not arrive in time"),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(len)) => {
                return Ok(Head {
                    len,
                    method: req.method.unwrap_or_default().to_string(),
                    target: req.path.unwrap_or_default().to_string(),
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_string(), h.value.to_vec()))
                        .collect(),
                })
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err("the request head is too large"),
            Err(_) => return Err("the request is not HTTP"),
        }
    }
}

/// Split `host:port` (`[v6]:port`) as written in a CONNECT target or a URI authority.
fn split_authority(auth: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        (format!("[{h}]"), port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (auth.to_string(), default_port?),
        }
    };
    (port != 0 && !host.is_empty()).then_some((host, port))
}

async fn respond(client: &mut TcpStream, status: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(msg.as_bytes()).await;
    let _ = client.shutdown().await;
}

async fn serve_http(shared: &Shared, mut client: TcpStream, deadline: tokio::time::Instant) {
    let mut buf = Vec::new();
    let head = match read_head(&mut client, &mut buf, deadline).await {
        Ok(h) => h,
        Err(why) => {
            respond(
                &mut client,
                "400 Bad Request",
                &format!("sandbox proxy: {why}\n"),
            )
            .await;
            return;
        }
    };
    let (protocol, authority, path) = if head.method.eq_ignore_ascii_case("CONNECT") {
        (ProxyProtocol::Connect, head.target.clone(), None)
    } else if let Some(rest) = head.target.strip_prefix("http://") {
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        // Userinfo in the authority is not a host.
        let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
        (
            ProxyProtocol::Http,
            auth.to_string(),
            Some(path.to_string()),
        )
    } else {
        respond(
            &mut client,
            "400 Bad Request",
            "sandbox proxy: only CONNECT and absolute http:// URIs are proxied\n",
        )
        .await;
        return;
    };
    let default_port = if protocol == ProxyProtocol::Http {
        Some(80)
    } else {
        None
    };
    let Some((host, port)) = split_authority(&authority, default_port) else {
        respond(
            &mut client,
            "400 Bad Request",
            &format!("sandbox proxy: `{authority}` is not host:port\n"),
        )
        .await;
        return;
    };
    let secrets = shared.config.as_ref().and_then(|c| c.secrets.clone());
    if let Some(secrets) = &secrets {
        // A placeholder over plain HTTP is never replaced; seen in what was read (the head,
        // and any body that came with it), it is refused and recorded by name. A body sent
        // later on a plain connection is not scanned.
        if protocol == ProxyProtocol::Http {
            // A host with request rules is judged on terminated TLS alone: over plain HTTP
            // its requests would pass unjudged.
            let bare = host.strip_suffix('.').unwrap_or(&host);
            if secrets
                .rules
                .iter()
                .any(|r| r.host.eq_ignore_ascii_case(bare))
            {
                let why = format!("{host} has request rules: it is reached over HTTPS only");
                Pending::new(shared, protocol, &host, port).settle(
                    Decision::Denied(why.clone()),
                    None,
                    None,
                );
                respond(&mut client, "403 Forbidden", &format!("sandbox: {why}\n")).await;
                return;
            }
            if let Some(name) = secrets.placeholder_in(&buf) {
                let why = format!(
                    "secret {name} sent to {host} over plain HTTP: refused as an exfiltration \
                     attempt"
                );
                Pending::new(shared, protocol, &host, port).settle(
                    Decision::Denied(why.clone()),
                    None,
                    None,
                );
                respond(&mut client, "403 Forbidden", &format!("sandbox: {why}\n")).await;
                return;
            }
        }
    }
    let (tally, upstream) = match connect(shared, protocol, &host, port).await {
        Ok(x) => x,
        Err(Refusal { status, text }) => {
            respond(&mut client, status, &format!("{text}\n")).await;
            return;
        }
    };
    if let Some(secrets) =
        secrets.filter(|s| protocol == ProxyProtocol::Connect && s.terminates(&host))
    {
        serve_terminated(
            shared,
            client,
            upstream,
            &host,
            port,
            &secrets,
            &buf[head.len..],
        )
        .await;
        return;
    }
    let mut upstream = upstream;
    let rest = buf[head.len..].to_vec();
    let preface = match path {
        None => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            match judge_tunnel(shared, &mut client, &upstream, &host, rest).await {
                Ok(first) => first,
                Err(why) => {
                    refuse_tunnel(shared, protocol, &host, port, why, client, upstream).await;
                    return;
                }
            }
        }
        Some(path) => {
            let mut out = format!("{} {} HTTP/1.1\r\n", head.method, path).into_bytes();
            for (name, value) in &head.headers {
                let lower = name.to_ascii_lowercase();
                if lower.starts_with("proxy-") || lower == "connection" || lower == "keep-alive" {
                    continue;
                }
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            out.extend_from_slice(&rest);
            out
        }
    };
    if !preface.is_empty() {
        tally.add(preface.len() as u64, 0);
        if upstream.write_all(&preface).await.is_err() {
            return;
        }
    }
    relay::run(&tally, client, upstream).await;
}

/// The first bytes of a tunnel the proxy does not terminate (after `early`, what came with
/// the request): when they are a TLS ClientHello, its server name must be the tunnel's
/// (no fronting); one without a server name to a name, with ECH, or malformed is refused.
/// What is not TLS passes, as does a tunnel whose server speaks first (TLS never does).
/// Returns the bytes read, to be sent on, or why the tunnel is refused.
async fn judge_tunnel(
    shared: &Shared,
    client: &mut TcpStream,
    upstream: &TcpStream,
    host: &str,
    early: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let mut buf = early;
    if buf.is_empty() {
        tokio::select! {
            r = client.readable() => if r.is_err() { return Ok(buf) },
            _ = upstream.readable() => return Ok(buf),
        }
    }
    let deadline = tokio::time::Instant::now() + shared.limits.head_deadline;
    let mut chunk = [0u8; 4096];
    loop {
        match sni::parse(&buf) {
            sni::Hello::NotTls => return Ok(buf),
            sni::Hello::Incomplete => {}
            sni::Hello::Malformed(why) => {
                return Err(format!("a malformed TLS ClientHello: {why}"))
            }
            sni::Hello::ClientHello { ech: true, .. } => {
                return Err(
                    "an encrypted ClientHello (ECH) hides the server name from the allowlist"
                        .into(),
                )
            }
            sni::Hello::ClientHello { server_name, .. } => {
                return match (Target::parse(host), server_name) {
                    (Some(Target::Name(want)), Some(sent))
                        if sandbox_core::policy::normalize_name(&sent).as_ref() == Some(&want) =>
                    {
                        Ok(buf)
                    }
                    (Some(Target::Ip(_)), None) => Ok(buf),
                    (_, Some(sent)) => Err(format!(
                        "TLS server name {} is not the tunnel's host (domain fronting)",
                        sent
                    )),
                    (_, None) => {
                        Err("a TLS ClientHello without a server name to a named host".into())
                    }
                };
            }
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(0)) if buf.is_empty() => return Ok(buf),
            Ok(Ok(0)) | Ok(Err(_)) => return Err("the client closed within its ClientHello".into()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return Err("the TLS ClientHello did not arrive in time".into()),
        }
    }
}

/// Close a tunnel [`judge_tunnel`] refused, recorded as a refused attempt beside the
/// connect that was allowed.
async fn refuse_tunnel(
    shared: &Shared,
    protocol: ProxyProtocol,
    host: &str,
    port: u16,
    why: String,
    mut client: TcpStream,
    upstream: TcpStream,
) {
    Pending::new(shared, protocol, host, port).settle(Decision::Denied(why), None, None);
    drop(upstream);
    let _ = client.shutdown().await;
}

/// A `CONNECT` to a host with secrets: answered, then its TLS terminated
/// ([`terminate`]); a refusal or a cut-off response is recorded as a refused attempt
/// beside the allowed connect, naming the secret.
async fn serve_terminated(
    shared: &Shared,
    mut client: TcpStream,
    upstream: TcpStream,
    host: &str,
    port: u16,
    secrets: &Secrets,
    early: &[u8],
) {
    let record = |why: String| {
        Pending::new(shared, ProxyProtocol::Connect, host, port).settle(
            Decision::Denied(why),
            None,
            None,
        );
    };
    // Bytes sent before the tunnel was answered would be read as TLS by no one; a client
    // that does not wait for the answer is refused rather than guessed at.
    if !early.is_empty() {
        record("bytes sent before the tunnel was established".into());
        let _ = client.shutdown().await;
        return;
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let server = match secrets.authority.server_config(&host) {
        Ok(s) => s,
        Err(e) => {
            record(e.to_string());
            respond(&mut client, "502 Bad Gateway", &format!("sandbox: {e}\n")).await;
            return;
        }
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let mut record_request = |ex: terminate::Exchange| {
        let decision = match (ex.refused, ex.rule) {
            (Some(why), _) => Decision::Denied(why),
            (None, Some(rule)) => Decision::Allowed(rule),
            (None, None) => Decision::Allowed(NO_RULES.into()),
        };
        shared.record(Attempt {
            request: Some(sandbox_core::RequestRecord::bounded(
                &ex.method,
                &ex.path,
                ex.injected,
            )),
            ..Pending::new(shared, ProxyProtocol::Connect, &host, port).settled_attempt(decision)
        });
    };
    let cut = terminate::terminate(
        client,
        upstream,
        &host,
        port,
        &secrets.list,
        &secrets.rules,
        server,
        secrets.upstream.clone(),
        &mut record_request,
    )
    .await;
    if let Some(why) = cut {
        record(why);
    }
}

/// The rule recorded for a request allowed on a host with secrets and no request rules.
const NO_RULES: &str = "a secret's host without request rules";

/// Why a request was not connected: the status line for HTTP and the text.
struct Refusal {
    status: &'static str,
    text: String,
}

/// Decide, resolve, connect, and record: the one place every allowed attempt (CONNECT,
/// plain HTTP, SOCKS5, a terminated host) is connected, directly or through the upstream
/// proxy (`upstream::open`). The record is made whatever happens (when the run ends
/// mid-decision too).
async fn connect<'a>(
    shared: &'a Shared,
    protocol: ProxyProtocol,
    host: &str,
    port: u16,
) -> Result<(Tally<'a>, TcpStream), Refusal> {
    let pending = Pending::new(shared, protocol, host, port);
    let deny = |pending: Pending<'_>, why: String| {
        let text = format!("sandbox: denied connect to {host}:{port} ({why})");
        pending.settle(Decision::Denied(why), None, None);
        Refusal {
            status: "403 Forbidden",
            text,
        }
    };
    let fail = |pending: Pending<'_>, rule: &str, why: String| {
        let text = format!("sandbox: could not connect to {host}:{port} ({why})");
        pending.settle(Decision::Allowed(rule.to_string()), None, Some(why));
        Refusal {
            status: "502 Bad Gateway",
            text,
        }
    };
    let Some(target) = Target::parse(host) else {
        return Err(deny(pending, "not a valid host name or IP address".into()));
    };
    let own_local = shared.local.lock().ok().and_then(|l| *l);
    let host_own = |ip: IpAddr| refused(ip).is_some_and(|r| r.kind.is_host());
    let is_self = |a: SocketAddr| {
        Some(a) == own_local
            || (a.port() == PROXY_PORT && host_own(a.ip()))
            || own_local.is_some_and(|l| l.port() == a.port() && host_own(a.ip()))
    };
    if let Target::Ip(ip) = target {
        if is_self(SocketAddr::new(ip, port)) {
            return Err(deny(pending, "the proxy's own address".into()));
        }
    }
    let Some(config) = shared.config.as_ref() else {
        return Err(deny(pending, "no proxy in this run".into()));
    };
    let Some(rule) = config.allowlist.check(&target, port).cloned() else {
        return Err(deny(pending, NOT_IN_ALLOWLIST.into()));
    };
    let rule_text = rule.to_string();
    let route = match (&shared.chain, &target) {
        // Through the upstream proxy, which resolves a name: only an IP literal can be
        // judged against the refused table here, and is, before anything is sent.
        (Some(chain), Target::Ip(ip)) => match Allowlist::check_resolved(&rule, *ip) {
            Some(why) => return Err(deny(pending, why)),
            None => upstream::Route::Chained(chain, &target),
        },
        (Some(chain), Target::Name(_)) => upstream::Route::Chained(chain, &target),
        (None, Target::Ip(ip)) => upstream::Route::Direct(vec![SocketAddr::new(*ip, port)]),
        (None, Target::Name(name)) => match config.resolver.resolve(name, port).await {
            // Judged and connected as the kernel will use them (a mapped address as IPv4).
            Ok(a) if !a.is_empty() => upstream::Route::Direct(
                a.into_iter()
                    .map(|a| SocketAddr::new(canonical(a.ip()), a.port()))
                    .collect(),
            ),
            Ok(_) => return Err(fail(pending, &rule_text, "the name has no address".into())),
            Err(e) => {
                return Err(fail(
                    pending,
                    &rule_text,
                    format!("the name did not resolve: {e}"),
                ))
            }
        },
    };
    if let upstream::Route::Direct(addrs) = &route {
        for a in addrs {
            if is_self(*a) {
                return Err(deny(pending, "resolves to the proxy's own address".into()));
            }
            if let Some(why) = Allowlist::check_resolved(&rule, a.ip()) {
                return Err(deny(pending, why));
            }
        }
    }
    match upstream::open(route, port).await {
        Ok((s, reached)) => {
            let tally = pending.settle(Decision::Allowed(rule_text), Some(reached), None);
            Ok((tally, s))
        }
        Err(why) => Err(fail(pending, &rule_text, why)),
    }
}

/// An IP for a SOCKS5 reply.
fn unspecified() -> IpAddr {
    IpAddr::from([0, 0, 0, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_with_and_without_ports() {
        assert_eq!(
            split_authority("crates.io:443", None),
            Some(("crates.io".into(), 443))
        );
        assert_eq!(
            split_authority("crates.io", Some(80)),
            Some(("crates.io".into(), 80))
        );
        assert_eq!(split_authority("crates.io", None), None);
        assert_eq!(
            split_authority("[::1]:8080", None),
            Some(("[::1]".into(), 8080))
        );
        assert_eq!(split_authority("x:0", None), None);
        assert_eq!(split_authority("x:99999", None), None);
    }
}
