//! Network mode `proxy`: egress by name through the allowlist proxy, and no way around it.
//!
//! Upstream servers listen on the host's `127.0.0.1` and stand in for named hosts through
//! a resolver table given to the library (`SandboxOpts::resolver`), so nothing here touches
//! the real DNS or any address outside loopback. Where a case asks whether a datagram could
//! leave for an outside address it only looks the route up (a UDP `connect`), which sends
//! nothing. Each effect is judged from the host: what the upstream served, what the proxy
//! recorded.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sandbox_core::{Decision, NetworkMode, ProxyProtocol, SandboxError, SandboxExt, SandboxOpts};
use sandbox_proxy::TableResolver;

use super::CaseResult;
use crate::context::{token, Context, Forbidden, Mode};
use crate::host::HostListener;
use crate::Failure;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// An HTTP/1.1 server on the host's `127.0.0.1`: files under `root` by path, `/` answers
/// the token; counts the requests it served.
#[derive(Debug)]
struct Upstream {
    port: u16,
    token: String,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn respond(s: &mut std::net::TcpStream, root: Option<&Path>, token: &str) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&got);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or("/");
    // A directory is served by its `index.html` (how a simple index is laid out).
    let file = root
        .map(|r| r.join(path.trim_start_matches('/')))
        .map(|f| if f.is_dir() { f.join("index.html") } else { f })
        .filter(|f| !path.contains("..") && f.is_file());
    let (status, kind, body) = match (path, file) {
        (_, Some(f)) => (
            "200 OK",
            if f.extension().is_some_and(|e| e == "html") {
                "text/html"
            } else {
                "application/octet-stream"
            },
            std::fs::read(&f).unwrap_or_default(),
        ),
        ("/", None) => ("200 OK", "text/plain", format!("{token}\n").into_bytes()),
        _ => ("404 Not Found", "text/plain", b"not found\n".to_vec()),
    };
    let headers = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(headers.as_bytes());
    let _ = s.write_all(&body);
    true
}

impl Upstream {
    fn start(root: Option<PathBuf>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::new(LO, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let token = format!("upstream-{}", token());
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (hits, stop, token) = (hits.clone(), stop.clone(), token.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut s, _)) => {
                            let _ = s.set_nonblocking(false);
                            if respond(&mut s, root.as_deref(), &token) {
                                hits.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Ok(Self {
            port,
            token,
            hits,
            stop,
            thread: Some(thread),
        })
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The names the cases use, all standing for the host's loopback (the secrets cases'
/// too), some in the IPv6 forms that carry it (and one for a cloud metadata address)
/// behind a wildcard.
pub(crate) fn resolver() -> Arc<TableResolver> {
    let table = [
        "allowed.test",
        "denied.test",
        "a.wild.test",
        "git.test",
        "pypi.test",
        "api.test",
        "other.test",
    ]
    .iter()
    .fold(TableResolver::new(), |t, n| t.with(n, LO));
    Arc::new(
        REFUSED_FORMS
            .iter()
            .fold(table, |t, (n, a)| t.with(n, a.parse().unwrap_or(LO))),
    )
}

/// Wildcard names resolving into the proxy's refused table in forms a naive check misses.
const REFUSED_FORMS: [(&str, &str); 4] = [
    ("mapped.wild.test", "::ffff:127.0.0.1"),
    ("compat.wild.test", "::127.0.0.1"),
    ("nat64.wild.test", "64:ff9b::7f00:1"),
    ("metadata.wild.test", "fd00:ec2::254"),
];

/// `sh -c SCRIPT` in `ws` with network `proxy` allowing `allow`, on the context's lane.
fn proxy_opts(ctx: &Context, ws: &Path, script: &str, allow: &[String]) -> SandboxOpts {
    let mut o = ctx.opts(ws, [""]);
    o.argv = ["sh", "-c", script].iter().map(OsString::from).collect();
    o.network = NetworkMode::Proxy;
    o.allow_hosts = allow.to_vec();
    o.resolver = Some(resolver());
    o.env.set.push(("TMPDIR".into(), ws.join("tmp").into()));
    o
}

/// The probe with `args` in network `proxy`.
fn probe_proxy_opts(ctx: &Context, ws: &Path, args: &[&str], allow: &[String]) -> SandboxOpts {
    let mut o = ctx.opts(ws, args);
    o.network = NetworkMode::Proxy;
    o.allow_hosts = allow.to_vec();
    o.resolver = Some(resolver());
    o
}

fn tmp_in(ws: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(ws.join("tmp"))?;
    Ok(())
}

/// Bad input is refused before anything runs: a malformed pattern, `proxy` with an empty
/// allowlist, a port outside 1-65535, an allowlist with another network mode.
pub async fn bad_input_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-bad")?;
    let marker = ws.join("ran");
    let marker_s = marker.to_string_lossy().into_owned();
    for (mode, allow, why) in [
        (NetworkMode::Proxy, vec![], "at least one allowed host"),
        (
            NetworkMode::Proxy,
            vec!["exa mple.com"],
            "not a valid host name",
        ),
        (NetworkMode::Proxy, vec!["crates.io:0"], "1 to 65535"),
        (NetworkMode::Proxy, vec!["crates.io:65536"], "1 to 65535"),
        (NetworkMode::Proxy, vec!["*.com"], "top-level"),
        (
            NetworkMode::Full,
            vec!["crates.io"],
            "only to network mode `proxy`",
        ),
        (
            NetworkMode::None,
            vec!["crates.io"],
            "only to network mode `proxy`",
        ),
    ] {
        let mut o = ctx.opts(ws.path(), ["write", &marker_s]);
        o.network = mode;
        o.allow_hosts = allow.iter().map(|s| s.to_string()).collect();
        let sb = ctx.sandbox();
        match sb.run(o).await {
            Err(SandboxError::InvalidConfig {
                field: "allow_hosts",
                reason,
            }) if reason.contains(why) => {}
            Err(e) => {
                return Err(Failure::Broken(format!(
                    "{mode} {allow:?}: expected InvalidConfig on allow_hosts mentioning {why:?}, \
                     got: {e}"
                )))
            }
            Ok(()) => {
                let _ = sb.kill().await;
                return Err(Failure::Broken(format!("{mode} {allow:?} was accepted")));
            }
        }
        ensure!(!marker.exists(), "{mode} {allow:?}: the command ran");
    }
    for (mode, ports) in [
        (NetworkMode::Full, vec![5432]),
        (NetworkMode::None, vec![5432]),
        (NetworkMode::Loopback, vec![0]),
        (NetworkMode::Loopback, vec![5432, 5432]),
    ] {
        let mut o = ctx.opts(ws.path(), ["write", &marker_s]);
        o.network = mode;
        o.host_ports = ports.clone();
        let sb = ctx.sandbox();
        match sb.run(o).await {
            Err(SandboxError::InvalidConfig {
                field: "host_ports",
                ..
            }) => {}
            Err(e) => {
                return Err(Failure::Broken(format!(
                    "{mode} host ports {ports:?}: expected InvalidConfig on host_ports, got: {e}"
                )))
            }
            Ok(()) => {
                let _ = sb.kill().await;
                return Err(Failure::Broken(format!(
                    "{mode} host ports {ports:?} was accepted"
                )));
            }
        }
        ensure!(!marker.exists(), "{mode} {ports:?}: the command ran");
    }
    Ok(())
}

/// An allowed name is reached through the proxy with only the sandbox's environment
/// (curl reads `http_proxy`), and the attempt is recorded with its rule and bytes.
pub async fn allowed_name_reached(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-allowed")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let rule = format!("allowed.test:{}", up.port);
    let script = format!("curl -fsS --max-time 20 http://allowed.test:{}/", up.port);
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            std::slice::from_ref(&rule),
        ))
        .await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&up.token),
        "curl did not reach the allowed name: {}",
        crate::context::describe(&o)
    );
    ensure!(up.hits() == 1, "the upstream served {} requests", up.hits());
    let [c] = o.connections.entries.as_slice() else {
        return Err(Failure::Broken(format!(
            "expected one recorded connection: {:?}",
            o.connections
        )));
    };
    ensure!(
        c.host == "allowed.test"
            && c.count == 1
            && c.port == up.port
            && c.protocol == ProxyProtocol::Http
            && c.decision == Decision::Allowed(rule.clone())
            && c.peer == Some(SocketAddr::new(LO, up.port))
            && c.bytes_in > up.token.len() as u64
            && c.bytes_out > 0,
        "the record is wrong: {c:?}"
    );
    Ok(())
}

/// A name not in the allowlist is refused (plain HTTP and CONNECT), never resolved or
/// reached, recorded, and its denied line reads as the command-line tool prints it.
pub async fn denied_name_refused_and_recorded(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-denied")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = format!(
        "curl -fsS --max-time 20 http://denied.test:{p}/; echo http=$?; \
         curl -fsS --max-time 20 -p -x \"$HTTPS_PROXY\" http://denied.test:{p}/; echo connect=$?",
        p = up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("allowed.test:{}", up.port)],
        ))
        .await?;
    let out = o.stdout.text();
    ensure!(
        !out.contains(&up.token) && !out.contains("http=0") && !out.contains("connect=0"),
        "a denied name was reached: {}",
        crate::context::describe(&o)
    );
    ensure!(up.hits() == 0, "the upstream served {} requests", up.hits());
    ensure!(
        o.connections.entries.len() == 2
            && o.connections.entries.iter().all(|c| c.host == "denied.test"
                && c.decision == Decision::Denied("not in the allowlist".into())
                && c.peer.is_none()
                && c.bytes_in == 0),
        "the records are wrong: {:?}",
        o.connections
    );
    let want = format!(
        "sandbox: denied connect to denied.test:{} (not in the allowlist)",
        up.port
    );
    ensure!(
        o.denied_lines() == [want.clone(), want.clone()],
        "denied lines: {:?}",
        o.denied_lines()
    );
    Ok(())
}

/// An IP literal is refused through the proxy unless a CIDR allows it, and cannot be
/// reached directly either.
pub async fn ip_literal_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-ip")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = format!(
        "curl -fsS --max-time 10 --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{p}/; \
         curl -fsS --max-time 10 --noproxy '*' http://127.0.0.1:{p}/; exit 0",
        p = up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("allowed.test:{}", up.port)],
        ))
        .await?;
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the upstream on 127.0.0.1 reached by IP literal",
        up.hits() > 0 || o.stdout.text().contains(&up.token),
        || crate::context::describe(&o),
    );
    if ctx.mode() == Mode::Conform {
        ensure!(
            o.connections.entries.len() == 1
                && o.connections.entries[0].host == "127.0.0.1"
                && !o.connections.entries[0].decision.is_allowed(),
            "the proxy did not record the refused IP literal: {:?}",
            o.connections
        );
    }
    f.finish()
}

/// A wildcard pattern whose name resolves to loopback is refused: a wildcard is never
/// rebound to the host's own services.
pub async fn wildcard_rebound_to_loopback_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-rebind")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = format!("curl -fsS --max-time 10 http://a.wild.test:{}/", up.port);
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("*.wild.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        up.hits() == 0 && !o.stdout.text().contains(&up.token),
        "a wildcard name resolving to loopback was reached: {}",
        crate::context::describe(&o)
    );
    ensure!(
        matches!(o.connections.entries.as_slice(),
            [c] if matches!(&c.decision, Decision::Denied(why) if why.contains("loopback"))),
        "the record does not say why: {:?}",
        o.connections
    );
    Ok(())
}

/// A wildcard name resolving to loopback in its IPv4-mapped, IPv4-compatible or NAT64
/// form, or to the IPv6 cloud metadata address, is refused and recorded with the reason;
/// the loopback upstream is never reached.
pub async fn wildcard_into_refused_forms_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-refused-forms")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = REFUSED_FORMS
        .iter()
        .map(|(n, _)| format!("curl -fsS --max-time 10 http://{n}:{}/; ", up.port))
        .collect::<String>()
        + "exit 0";
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("*.wild.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        up.hits() == 0 && !o.stdout.text().contains(&up.token),
        "a wildcard name resolving into the refused table was reached: {}",
        crate::context::describe(&o)
    );
    let refused: Vec<&str> = o
        .connections
        .entries
        .iter()
        .filter_map(|c| match &c.decision {
            Decision::Denied(why) if why.contains("wildcard never allows") => Some(c.host.as_str()),
            _ => None,
        })
        .collect();
    let want: Vec<&str> = REFUSED_FORMS.iter().map(|(n, _)| *n).collect();
    ensure!(
        refused == want && o.connections.entries.len() == want.len(),
        "the record does not refuse each form with the reason: {:?}",
        o.connections
    );
    Ok(())
}

/// TLS for another name inside a tunnel to an allowed one (domain fronting: curl's
/// `--connect-to` asks the proxy for the allowed host and sends the other as the server
/// name) is refused at its ClientHello and recorded.
pub async fn fronted_server_name_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-fronting")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let p = up.port;
    let script = format!(
        "curl -sS --max-time 10 --connect-to denied.test:{p}:allowed.test:{p} \
         https://denied.test:{p}/; exit 0"
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("allowed.test:{p}")],
        ))
        .await?;
    let fronting = o.connections.entries.iter().any(|c| {
        c.host == "allowed.test"
            && matches!(&c.decision, Decision::Denied(why)
                if why.contains("denied.test") && why.contains("fronting"))
    });
    ensure!(
        fronting
            && o.connections
                .entries
                .iter()
                .all(|c| c.host == "allowed.test"),
        "the fronted server name was not refused at the proxy: {:?}",
        o.connections
    );
    Ok(())
}

/// Idle connections the command opens to the proxy.
const IDLE_FLOOD: usize = 320;
/// What the host's descriptors may grow by while they are held, beyond the proxy's bound:
/// other cases run beside this one in the same process.
const IDLE_FLOOD_SLACK: usize = 64;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// An idle-connection flood (connections to the proxy that send nothing or one byte) holds
/// at most the proxy's bound of the host's descriptors (the proxy runs in this process:
/// counted here while the command holds them all), and the connections beyond the bound
/// are closed.
pub async fn idle_flood_bounded(ctx: Arc<Context>) -> CaseResult {
    use sandbox_core::MAX_OPEN_CONNECTIONS;
    let ws = ctx.workspace("egress-idle-flood")?;
    let mark = ws.path().join("held.mark");
    let closed = IDLE_FLOOD - MAX_OPEN_CONNECTIONS;
    let o = probe_proxy_opts(
        &ctx,
        ws.path(),
        &[
            "proxy-idle",
            &IDLE_FLOOD.to_string(),
            &closed.to_string(),
            &mark.to_string_lossy(),
        ],
        &["allowed.test".to_string()],
    );
    let before = open_fds();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, mark) = (done.clone(), mark.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::SeqCst) {
                if mark.exists() {
                    most = most.max(open_fds());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    let p = ctx.probe_run(o).await;
    done.store(true, Ordering::SeqCst);
    let most = sampler.join().unwrap_or(usize::MAX);
    let p = p?;
    ensure!(
        p.succeeded() && p.int("closed")? >= closed as i64,
        "the proxy did not close the connections beyond its bound: {}",
        p.describe()
    );
    let grown = most.saturating_sub(before);
    forbid!(
        most == 0 || grown > MAX_OPEN_CONNECTIONS + IDLE_FLOOD_SLACK,
        "the host's descriptors grew by {grown} while {IDLE_FLOOD} idle connections were held \
         (bound {MAX_OPEN_CONNECTIONS})"
    );
    Ok(())
}

/// The first IPv4 nameserver of the host's resolver configuration, or a documentation
/// address: only ever the target of a route lookup, never of a packet.
fn host_nameserver() -> SocketAddr {
    let ip = std::fs::read_to_string("/etc/resolv.conf")
        .ok()
        .and_then(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("nameserver"))
                .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
                .find(|a| !a.is_loopback())
        })
        .unwrap_or(Ipv4Addr::new(192, 0, 2, 53));
    SocketAddr::new(IpAddr::V4(ip), 53)
}

/// DNS from inside fails: a resolver on the host's loopback is reached neither over UDP
/// nor over TCP, and no route exists to the host's own nameserver.
pub async fn dns_from_inside_fails(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-dns")?;
    let allow = ["allowed.test".to_string()];
    // A resolver on the host's loopback: counts the queries that arrive, answers each.
    let udp = UdpSocket::bind(SocketAddr::new(LO, 0))?;
    udp.set_read_timeout(Some(Duration::from_millis(50)))?;
    let udp_addr = udp.local_addr()?;
    let queries = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (queries, stop) = (queries.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    queries.fetch_add(1, Ordering::SeqCst);
                    let _ = udp.send_to(&buf[..n], from);
                }
            }
        })
    };
    let tcp = HostListener::start(&format!("dns-tcp-{}", token()))?;
    let udp_run = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["dns-udp", &udp_addr.to_string()],
            &allow,
        ))
        .await;
    let tcp_run = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["connect", &tcp.addr().to_string()],
            &allow,
        ))
        .await;
    let ns = host_nameserver();
    let route_run = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["udp-route", &ns.to_string()],
            &allow,
        ))
        .await;
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    let (udp_run, tcp_run, route_run) = (udp_run?, tcp_run?, route_run?);
    for p in [&udp_run, &tcp_run, &route_run] {
        p.report()?;
    }
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a DNS query over UDP reached a resolver on the host",
        queries.load(Ordering::SeqCst) > 0 || udp_run.succeeded(),
        || udp_run.describe(),
    );
    f.check(
        "a TCP connection reached a resolver on the host",
        tcp.accepted() > 0 || tcp_run.succeeded(),
        || tcp_run.describe(),
    );
    f.check(
        &format!("a route exists to the host's nameserver {ns}"),
        route_run.succeeded(),
        || route_run.describe(),
    );
    f.finish()
}

/// A direct connection that ignores the proxy variables fails: the host's loopback is not
/// reached over TCP, and no outside address has a route.
pub async fn direct_connect_fails(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-direct")?;
    let listener = HostListener::start(&format!("direct-{}", token()))?;
    // Even with the listener's own address allowed through the proxy, going around it
    // must not work.
    let allow = [format!("127.0.0.0/8:{}", listener.addr().port())];
    let direct = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["connect", &listener.addr().to_string()],
            &allow,
        ))
        .await?;
    direct.report()?;
    let route = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["udp-route", "192.0.2.1:443"],
            &allow,
        ))
        .await?;
    route.report()?;
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a direct TCP connection reached the host's listener",
        listener.accepted() > 0 || direct.stdout_contains(listener.token()),
        || direct.describe(),
    );
    f.check(
        "a route exists to an outside address (192.0.2.1)",
        route.succeeded(),
        || route.describe(),
    );
    f.finish()
}

/// A request to the proxy's own address (its port inside the sandbox) is refused, even
/// when a CIDR covers it.
pub async fn proxy_itself_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-self")?;
    tmp_in(ws.path())?;
    // `--noproxy ''`: the sandbox's NO_PROXY keeps 127.0.0.1 direct, and here the
    // request must go to the proxy.
    let script = "curl -fsS --max-time 10 --noproxy '' -p -x \"$HTTP_PROXY\" \
                  http://127.0.0.1:3128/; echo connect=$?; \
                  curl -fsS --max-time 10 --noproxy '' --socks5 127.0.0.1:3128 \
                  http://127.0.0.1:3128/; echo socks=$?";
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            script,
            &["127.0.0.0/8:3128".to_string()],
        ))
        .await?;
    let out = o.stdout.text();
    ensure!(
        !out.contains("connect=0") && !out.contains("socks=0"),
        "a request to the proxy itself went through: {}",
        crate::context::describe(&o)
    );
    ensure!(
        o.connections.entries.len() == 2
            && o.connections.entries.iter().all(
                |c| matches!(&c.decision, Decision::Denied(why) if why.contains("proxy's own"))
            ),
        "the records are wrong: {:?}",
        o.connections
    );
    Ok(())
}

/// A bind opens no way out and no way in: with `proxy` (and `loopback`), a command that
/// binds TCP and UDP on every address (`0.0.0.0`) and listens is not reached by the host at
/// that port on its loopback, and a socket bound to every address does not reach a host
/// listener either.
pub async fn bind_opens_no_way(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-bind")?;
    let listener = HostListener::start(&format!("bind-{}", token()))?;
    let mut f = Forbidden::new(&ctx);
    let mut modes = vec![NetworkMode::Proxy];
    if ctx.claimed().network_loopback == sandbox_core::Enforcement::Exact {
        modes.push(NetworkMode::Loopback);
    }
    for mode in modes {
        // A port free on the host now: the command binds it on every address it has.
        let port = TcpListener::bind(SocketAddr::new(LO, 0))?
            .local_addr()?
            .port();
        let mut o = probe_proxy_opts(
            &ctx,
            ws.path(),
            &[
                "bind-any",
                &port.to_string(),
                &listener.addr().to_string(),
                "3",
            ],
            &["allowed.test".to_string()],
        );
        if mode == NetworkMode::Loopback {
            o.network = mode;
            o.allow_hosts.clear();
            o.resolver = None;
        }
        let sb = ctx.sandbox();
        sb.run(o).await?;
        // Knock at the port on the host's loopback while the command listens.
        let knocked = tokio::task::spawn_blocking(move || {
            let until = std::time::Instant::now() + Duration::from_millis(2500);
            let mut reached = 0;
            while std::time::Instant::now() < until {
                let to = SocketAddr::new(LO, port);
                if std::net::TcpStream::connect_timeout(&to, Duration::from_millis(200)).is_ok() {
                    reached += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            reached
        })
        .await
        .unwrap_or(0);
        let outcome = tokio::time::timeout(Duration::from_secs(120), sb.wait())
            .await
            .map_err(|_| Failure::Broken("the binding run did not end".into()))??;
        let p = crate::context::Probed {
            report: crate::context::parse_report(&outcome.stdout.bytes),
            outcome,
        };
        p.report()?;
        if mode == NetworkMode::Proxy && ctx.claimed().door == sandbox_core::DoorPlace::Mediated {
            // No namespace to bind in: the bind itself is refused (landlock), so nothing
            // listens at the port the host knocked at.
            f.check(
                &format!("{mode}: a mediated door let the command bind 0.0.0.0:{port}"),
                p.succeeded() || knocked > 0,
                || p.describe(),
            );
            continue;
        }
        ensure!(
            p.succeeded(),
            "{mode}: the command could not bind: {}",
            p.describe()
        );
        let accepted = p.int("accepted")?;
        ensure!(
            knocked == 0 || accepted > 0,
            "{mode}: the host reached port {port} on its loopback, but not the command's \
             listener (another program took the port): run again"
        );
        f.check(
            &format!("{mode}: the host reached the command's listener bound on 0.0.0.0:{port}"),
            accepted > 0,
            || p.describe(),
        );
        f.check(
            &format!("{mode}: a socket bound to 0.0.0.0 reached the host's listener"),
            p.field("escaped") == Some(&serde_json::Value::Bool(true)) || listener.accepted() > 0,
            || p.describe(),
        );
    }
    f.finish()
}

/// A door without a namespace holds against the ways around `connect`: `listen` on an
/// unbound socket, a send with `MSG_FASTOPEN`, and a second thread switching the address
/// between the proxy's and a host listener's while connects are mediated. The host's
/// listener sees no one; connects to the proxy still work (the race ran both ways).
pub async fn mediated_door_holds_against_side_ways(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-side")?;
    let listener = HostListener::start(&format!("side-{}", token()))?;
    let proxy = format!("127.0.0.1:{}", sandbox_core::PROXY_PORT);
    let host = listener.addr().to_string();
    let p = ctx
        .probe_run(probe_proxy_opts(
            &ctx,
            ws.path(),
            &["side-ways", &proxy, &host, "400"],
            &["allowed.test".to_string()],
        ))
        .await?;
    p.report()?;
    ensure!(p.succeeded(), "the probe did not run: {}", p.describe());
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the host's listener was reached around the proxy",
        listener.accepted() > 0,
        || p.describe(),
    );
    f.check(
        "listen on an unbound TCP socket succeeded",
        p.field("listened") == Some(&serde_json::Value::Bool(true)),
        || p.describe(),
    );
    f.check(
        "a send with MSG_FASTOPEN to the host's listener went out",
        p.field("fastopen_sent") == Some(&serde_json::Value::Bool(true)),
        || p.describe(),
    );
    f.finish()?;
    // The race is only a test if both addresses were tried: some connects reached the
    // proxy, some were refused.
    ensure!(
        p.int("connected")? > 0 && p.int("refused")? > 0,
        "the racing connects did not alternate: {}",
        p.describe()
    );
    Ok(())
}

/// Raw and packet sockets and io_uring fail inside with a clear error.
pub async fn raw_sockets_and_io_uring_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-raw")?;
    let allow = ["allowed.test".to_string()];
    for call in [
        "socket-packet",
        "socket-raw-icmp",
        "socket-raw-udp",
        "io_uring_setup",
    ] {
        let p = ctx
            .probe_run(probe_proxy_opts(
                &ctx,
                ws.path(),
                &["syscall", call],
                &allow,
            ))
            .await?;
        p.report()?;
        ensure!(
            !p.succeeded() && p.field("denied") == Some(&serde_json::Value::Bool(true)),
            "{call} was not refused: {}",
            p.describe()
        );
    }
    Ok(())
}

/// A SOCKS5 client (curl through `ALL_PROXY`, `socks5h`) reaches an allowed name.
pub async fn socks5_works(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-socks")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = format!(
        "curl -fsS --max-time 20 --proxy \"$ALL_PROXY\" http://allowed.test:{}/",
        up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("allowed.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&up.token) && up.hits() == 1,
        "the SOCKS5 client did not reach the allowed name: {}",
        crate::context::describe(&o)
    );
    ensure!(
        matches!(o.connections.entries.as_slice(),
            [c] if c.protocol == ProxyProtocol::Socks5 && c.decision.is_allowed()),
        "the record is wrong: {:?}",
        o.connections
    );
    Ok(())
}

/// Python's urllib, with only the sandbox's environment, reaches an allowed name.
pub async fn python_urllib_through_the_proxy(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-urllib")?;
    tmp_in(ws.path())?;
    let up = Upstream::start(None)?;
    let script = format!(
        "python3 -c 'import urllib.request; \
         print(urllib.request.urlopen(\"http://allowed.test:{}/\", timeout=20).read().decode())'",
        up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("allowed.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&up.token) && up.hits() == 1,
        "urllib did not reach the allowed name: {}",
        crate::context::describe(&o)
    );
    ensure!(
        o.connections.entries.len() == 1 && o.connections.entries[0].decision.is_allowed(),
        "{:?}",
        o.connections
    );
    Ok(())
}

pub(crate) fn host_cmd(dir: &Path, argv: &[&str]) -> Result<(), Failure> {
    let o = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()?;
    ensure!(
        o.status.success(),
        "host setup `{}` failed: {}",
        argv.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

/// `git clone` over http, from a dumb http server standing in for a named host.
pub async fn git_clone_over_http(ctx: Arc<Context>) -> CaseResult {
    let srv = ctx.dir("egress-git-srv", 0o755)?;
    let content = format!("content-{}", token());
    host_cmd(srv.path(), &["git", "init", "-q", "src"])?;
    std::fs::write(srv.join("src/hello.txt"), &content)?;
    host_cmd(&srv.join("src"), &["git", "add", "hello.txt"])?;
    host_cmd(
        &srv.join("src"),
        &[
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
    )?;
    host_cmd(
        srv.path(),
        &["git", "clone", "-q", "--bare", "src", "repo.git"],
    )?;
    host_cmd(&srv.join("repo.git"), &["git", "update-server-info"])?;
    let up = Upstream::start(Some(srv.path().to_path_buf()))?;

    let ws = ctx.workspace("egress-git")?;
    tmp_in(ws.path())?;
    let script = format!(
        "git clone -q http://git.test:{}/repo.git out && cat out/hello.txt",
        up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("git.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&content),
        "git clone over http through the proxy failed: {}",
        crate::context::describe(&o)
    );
    ensure!(
        std::fs::read_to_string(ws.join("out/hello.txt"))
            .ok()
            .as_deref()
            == Some(&content),
        "the clone is not in the workspace"
    );
    ensure!(
        !o.connections.is_empty()
            && o.connections
                .entries
                .iter()
                .all(|c| c.decision.is_allowed()),
        "{:?}",
        o.connections
    );
    Ok(())
}

/// Build a one-module wheel and a simple index for it under `root`.
fn build_index(root: &Path, value: &str) -> Result<(), Failure> {
    let script = format!(
        r#"
import os, zipfile
root = {root:?}
os.makedirs(os.path.join(root, "simple", "egressprobe"), exist_ok=True)
os.makedirs(os.path.join(root, "packages"), exist_ok=True)
whl = "egressprobe-1.0-py3-none-any.whl"
files = {{
    "egressprobe/__init__.py": 'VALUE = {value:?}\n',
    "egressprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: egressprobe\nVersion: 1.0\n",
    "egressprobe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: conformance\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}}
record = "".join(f"{{n}},,\n" for n in files) + "egressprobe-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(os.path.join(root, "packages", whl), "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
    z.writestr("egressprobe-1.0.dist-info/RECORD", record)
with open(os.path.join(root, "simple", "index.html"), "w") as f:
    f.write('<html><body><a href="egressprobe/">egressprobe</a></body></html>')
with open(os.path.join(root, "simple", "egressprobe", "index.html"), "w") as f:
    f.write(f'<html><body><a href="../../packages/{{whl}}">{{whl}}</a></body></html>')
"#,
        root = root.to_string_lossy()
    );
    host_cmd(root, &["/usr/bin/python3", "-c", &script])
}

/// `pip install` from a local simple index (a wheel served over http), through the proxy.
pub async fn pip_install_from_a_local_index(ctx: Arc<Context>) -> CaseResult {
    let srv = ctx.dir("egress-pypi", 0o755)?;
    let value = format!("wheel-{}", token());
    build_index(srv.path(), &value)?;
    let up = Upstream::start(Some(srv.path().to_path_buf()))?;
    let ws = ctx.workspace("egress-pip")?;
    tmp_in(ws.path())?;
    let script = format!(
        "python3 -m pip install -q --disable-pip-version-check --no-cache-dir \
         --index-url http://pypi.test:{p}/simple/ --trusted-host pypi.test \
         --target site egressprobe && \
         python3 -c 'import sys; sys.path.insert(0, \"site\"); import egressprobe; \
         print(egressprobe.VALUE)'",
        p = up.port
    );
    let o = ctx
        .run(proxy_opts(
            &ctx,
            ws.path(),
            &script,
            &[format!("pypi.test:{}", up.port)],
        ))
        .await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&value),
        "pip install through the proxy failed: {}",
        crate::context::describe(&o)
    );
    ensure!(
        ws.join("site/egressprobe/__init__.py").is_file(),
        "the package is not in the workspace"
    );
    ensure!(
        up.hits() >= 2
            && o.connections
                .entries
                .iter()
                .all(|c| c.decision.is_allowed()),
        "hits {}, records {:?}",
        up.hits(),
        o.connections
    );
    Ok(())
}

/// Refused attempts in the flood: enough that an unbounded record (a few hundred bytes
/// per attempt) would grow the host by far more than [`FLOOD_RSS_LIMIT_KIB`].
const FLOOD_ATTEMPTS: u64 = 200_000;

/// How much the host's resident set may grow over the flood, in KiB, with the outcome
/// still held: the bounded record grew it by about 1 MiB; a record of one entry per
/// attempt grew it by 47 MiB (measured with the bound lifted); the rest is room for the
/// cases that run alongside.
const FLOOD_RSS_LIMIT_KIB: u64 = 24 << 10;

/// A command looping on refused connects cannot grow the host's memory: the proxy's
/// record keeps `MAX_CONNECTIONS` distinct entries, each counting its attempts exactly,
/// and counts the attempts beyond them exactly (so do the denials, where reported); the
/// host's resident set stays bounded.
pub async fn refused_flood_bounded(ctx: Arc<Context>) -> CaseResult {
    use sandbox_core::MAX_CONNECTIONS;
    let ws = ctx.workspace("egress-flood")?;
    let distinct = MAX_CONNECTIONS as u64 + 200;
    let suffix = "flood.test";
    let mut o = probe_proxy_opts(
        &ctx,
        ws.path(),
        &[
            "proxy-connect-loop",
            suffix,
            &distinct.to_string(),
            &FLOOD_ATTEMPTS.to_string(),
        ],
        &["allowed.test".to_string()],
    );
    o.timeout = Some(Duration::from_secs(540));
    let before = crate::soak::rss_kib();
    let p = ctx.probe_run(o).await?;
    let after = crate::soak::rss_kib();
    ensure!(
        p.succeeded() && p.int("refused")? == FLOOD_ATTEMPTS as i64,
        "not every connect was refused by the proxy: {}",
        p.describe()
    );
    let grown = after.saturating_sub(before);
    forbid!(
        grown > FLOOD_RSS_LIMIT_KIB,
        "the host's resident set grew by {grown} KiB over {FLOOD_ATTEMPTS} refused connects \
         ({before} -> {after} KiB)"
    );
    let c = &p.outcome.connections;
    // Host h{j} was asked this often (the i-th attempt asks for h{i mod distinct}).
    let asked = |j: u64| FLOOD_ATTEMPTS / distinct + u64::from(j < FLOOD_ATTEMPTS % distinct);
    let mut kept = 0u64;
    for e in &c.entries {
        let j = e
            .host
            .strip_prefix('h')
            .and_then(|h| h.strip_suffix(&format!(".{suffix}")))
            .and_then(|j| j.parse::<u64>().ok());
        forbid!(
            j.is_none_or(|j| e.count != asked(j))
                || e.decision != Decision::Denied("not in the allowlist".into())
                || e.port != 1,
            "an entry does not count its attempts exactly: {e:?}"
        );
        kept += e.count;
    }
    forbid!(
        c.entries.len() != MAX_CONNECTIONS
            || c.more.attempts != FLOOD_ATTEMPTS - kept
            || c.more.denied != c.more.attempts
            || c.attempts() != FLOOD_ATTEMPTS,
        "the record is not {MAX_CONNECTIONS} entries plus an exact count of the rest: {} \
         entries counting {kept}, more {:?}",
        c.entries.len(),
        c.more
    );
    if ctx.claimed().reports_denials.network_connect {
        let d = &p.outcome.denials;
        forbid!(
            d.total() != FLOOD_ATTEMPTS || d.entries.len() > sandbox_core::denial::MAX_DISTINCT,
            "the denials do not count the {FLOOD_ATTEMPTS} refusals exactly within their \
             bound: {} entries, {} in all",
            d.entries.len(),
            d.total()
        );
    }
    Ok(())
}

/// Host ports by number: with `loopback` and with `proxy`, the command's `127.0.0.1:PORT`
/// reaches the host's, and a neighbouring host port stays out of reach.
pub async fn host_port_reaches_exactly_that_port(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("egress-host-port")?;
    let given = HostListener::start(&format!("given-{}", token()))?;
    let neighbour = HostListener::start(&format!("neighbour-{}", token()))?;
    // Host ports come with `loopback` or `proxy`; a backend whose `loopback` is no network
    // of its own (a mediated door: no namespace) gives them with `proxy` alone.
    let mut modes = vec![NetworkMode::Proxy];
    if ctx.claimed().network_loopback == sandbox_core::Enforcement::Exact {
        modes.insert(0, NetworkMode::Loopback);
    }
    for &mode in &modes {
        let run = |addr: SocketAddr| {
            let mut o = ctx.opts(ws.path(), ["connect".to_string(), addr.to_string()]);
            o.network = mode;
            if mode == NetworkMode::Proxy {
                o.allow_hosts = vec!["allowed.test".into()];
                o.resolver = Some(resolver());
            }
            o.host_ports = vec![given.addr().port()];
            o
        };
        let reached = ctx.probe_run(run(given.addr())).await?;
        ensure!(
            reached.succeeded() && reached.stdout_contains(given.token()),
            "{mode}: the command's 127.0.0.1:{} did not reach the host's: {}",
            given.addr().port(),
            reached.describe()
        );
        ensure!(
            matches!(reached.outcome.connections.entries.as_slice(),
                [c] if c.protocol == ProxyProtocol::HostPort && c.port == given.addr().port()
                    && c.bytes_in >= given.token().len() as u64),
            "{mode}: the host-port connection is not recorded: {:?}",
            reached.outcome.connections
        );
        let before = neighbour.accepted();
        let other = ctx.probe_run(run(neighbour.addr())).await?;
        other.report()?;
        ensure!(
            !other.succeeded() && neighbour.accepted() == before,
            "{mode}: a host port that was not given ({}) was reached: {}",
            neighbour.addr().port(),
            other.describe()
        );
    }
    ensure!(
        given.accepted() == modes.len(),
        "the given port saw {} connections",
        given.accepted()
    );
    Ok(())
}

/// The port inside the sandbox the publish case serves on (the namespace is the command's
/// alone, so any port will do).
const PUBLISHED_PORT: u16 = 18080;

/// Publish serves the host: a server the command runs on its own loopback is reached from
/// the host at the address the run reports, while the command still reaches nothing of the
/// host's; a host port in use and bad input are refused before anything runs.
pub async fn publish_serves_the_host(ctx: Arc<Context>) -> CaseResult {
    use sandbox_core::{Publish, PublishSink, Published};
    let ws = ctx.workspace("egress-publish")?;
    let outside = HostListener::start(&format!("outside-{}", token()))?;
    let served = format!("served-{}", token());
    let told: Arc<std::sync::Mutex<Vec<Published>>> = Arc::default();
    let opts = |publish: Vec<Publish>, network: NetworkMode| {
        let mut o = ctx.opts(
            ws.path(),
            [
                "serve".to_string(),
                PUBLISHED_PORT.to_string(),
                served.clone(),
                outside.addr().to_string(),
            ],
        );
        o.network = network;
        o.publish = publish;
        let told = told.clone();
        o.on_published = Some(PublishSink(Arc::new(move |p: &[Published]| {
            if let Ok(mut t) = told.lock() {
                *t = p.to_vec();
            }
        })));
        o
    };
    let one = |host_port| {
        vec![Publish {
            port: PUBLISHED_PORT,
            host_port,
        }]
    };

    // Refused before anything runs: a host port in use, `full` and `none`, port 0.
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let taken_port = taken.local_addr()?.port();
    for (o, what) in [
        (
            opts(one(Some(taken_port)), NetworkMode::Loopback),
            "a host port in use",
        ),
        (opts(one(None), NetworkMode::Full), "network full"),
        (opts(one(None), NetworkMode::None), "network none"),
        (
            opts(
                vec![Publish {
                    port: 0,
                    host_port: None,
                }],
                NetworkMode::Loopback,
            ),
            "port 0",
        ),
    ] {
        match ctx.sandbox().execute(o).await {
            Err(SandboxError::InvalidConfig {
                field: "publish", ..
            }) => {}
            other => {
                return Err(Failure::Broken(format!(
                    "publish with {what} was not refused as invalid: {other:?}"
                )))
            }
        }
    }
    drop(taken);
    ensure!(
        told.lock().map(|t| t.is_empty()).unwrap_or(false),
        "a refused run told of published ports"
    );

    // Served: the host connects to the address it was told, until the server listens.
    let sb = ctx.sandbox();
    sb.run(opts(one(None), NetworkMode::Loopback)).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut got = String::new();
    let mut addr = None;
    while std::time::Instant::now() < deadline && !got.contains(&served) {
        addr = told.lock().ok().and_then(|t| t.first().map(|p| p.host));
        if let Some(a) = addr {
            // Blocking I/O off the runtime, whose tasks (the relays, where the backend runs
            // them on it) must make progress meanwhile.
            let want = served.clone();
            got = tokio::task::spawn_blocking(move || {
                let Ok(mut s) = std::net::TcpStream::connect_timeout(&a, Duration::from_secs(5))
                else {
                    return String::new();
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = vec![0u8; want.len()];
                let got = match s.read_exact(&mut buf) {
                    Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
                    Err(_) => String::new(),
                };
                if got == want {
                    // Tell the server it was reached: it ends then.
                    let _ = s.write_all(b"done");
                }
                got
            })
            .await
            .unwrap_or_default();
        }
        if !got.contains(&served) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let outcome = tokio::time::timeout(Duration::from_secs(180), sb.wait())
        .await
        .map_err(|_| Failure::Broken("the serving run did not end".into()))??;
    let p = crate::context::Probed {
        report: crate::context::parse_report(&outcome.stdout.bytes),
        outcome,
    };
    ensure!(
        got.contains(&served),
        "the host did not reach the command's server at {addr:?} (got {got:?}): {}",
        p.describe()
    );
    ensure!(
        addr.is_some_and(|a| a.ip() == IpAddr::from(Ipv4Addr::LOCALHOST)),
        "published on {addr:?}, not the host's loopback"
    );
    ensure!(
        p.outcome
            .policy
            .published
            .iter()
            .map(|x| x.host)
            .collect::<Vec<_>>()
            == addr.into_iter().collect::<Vec<_>>(),
        "the outcome's policy does not say where: {:?}",
        p.outcome.policy.published
    );
    ensure!(
        p.succeeded() && p.field("served") == Some(&serde_json::Value::Bool(true)),
        "the server did not run: {}",
        p.describe()
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a command with a published port reached a host service",
        outside.accepted() > 0 || p.field("escaped") == Some(&serde_json::Value::Bool(true)),
        || p.describe(),
    );
    f.finish()
}
