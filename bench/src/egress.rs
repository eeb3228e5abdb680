//! Network mode `proxy` (issue 10): what the egress proxy costs.
//!
//! - Start-up of `/bin/true` with `proxy` against the same run with `loopback`, per
//!   backend (the proxy's start, the listener's handover and its end are the difference).
//! - A download through the proxy from inside the sandbox (curl, reading `http_proxy`)
//!   against the same download by curl on the host straight from the server, per backend,
//!   each timed by curl itself (`%{time_total}`: connection to last byte), so the
//!   sandbox's start-up, which the first row measures, is not counted against the
//!   download (a container's start and end add 0.2 to 0.35 s to a 1 GiB run of about a
//!   second; a process backend's, 2 to 5%).
//! - Connection set-up through the proxy against a direct connection, once (the proxy is
//!   the same for every backend): connect, `CONNECT`, the first byte of the answer; the
//!   figure is the median added, not a ratio.
//!
//! The server is in this process on `127.0.0.1`; the name the sandbox asks for resolves to
//! it through a resolver table, so nothing leaves loopback.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::{Allowlist, Enforcement, NetworkMode, SandboxOpts};
use sandbox_proxy::{ProxyConfig, TableResolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::budget::{Budget, Target};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe, Rounds};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, gib_per_sec, Samples};
use crate::subject::Subject;
use crate::table::{Row, Verdict};

pub(crate) const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// The name the sandboxed command asks for.
pub(crate) const NAME: &str = "bench.test";

/// Start-up with `proxy` against `loopback`: at most 1.2×.
const STARTUP: Target = Target::AtMost(1.2);
/// Start-up with a secret against the same run with `--allow-host` alone: at most 1.2×
/// (issue 30: the authority and a certificate made once per run).
const SECRET_STARTUP: Target = Target::AtMost(1.2);
/// A download through the proxy against a direct one: at least 0.5× the throughput.
const DOWNLOAD: Target = Target::AtLeast(0.5);
/// Connection set-up through the proxy: at most 1 ms added (median).
const SETUP_ADDED: Duration = Duration::from_millis(1);

/// An HTTP server on `127.0.0.1`: `GET /bytes/N` answers N zero bytes, anything else `ok`.
/// Stopped when dropped.
pub(crate) struct Server {
    /// Its port on `127.0.0.1`.
    pub(crate) port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_one(mut s: TcpStream) -> std::io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split_whitespace().nth(1).unwrap_or("/");
    let len: u64 = path
        .rsplit_once("/bytes/")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(2);
    s.write_all(
        format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    if !path.contains("/bytes/") {
        return s.write_all(b"ok").await;
    }
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    s.shutdown().await
}

impl Server {
    pub(crate) async fn start() -> Result<Self, BenchError> {
        let l = TcpListener::bind((LO, 0))
            .await
            .map_err(|e| BenchError::io("the egress bench's server", e))?;
        let port = l
            .local_addr()
            .map_err(|e| BenchError::io("the egress bench's server", e))?
            .port();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(serve_one(s));
            }
        });
        Ok(Self { port, task })
    }
}

fn proxy_opts(s: &Subject, argv: Vec<OsString>, port: u16) -> SandboxOpts {
    let mut o = s.opts(argv);
    o.network = NetworkMode::Proxy;
    o.allow_hosts = vec![format!("{NAME}:{port}")];
    o.resolver = Some(Arc::new(TableResolver::new().with(NAME, LO)));
    o
}

fn curl_argv(curl: &OsString, url: &str, direct: bool) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![curl.clone()];
    v.extend(
        ["-sS", "--fail", "-o", "/dev/null", "-w", "%{time_total}"]
            .iter()
            .map(OsString::from),
    );
    if direct {
        v.extend(["--noproxy".into(), "*".into()]);
    }
    v.push(url.into());
    v
}

/// The per-backend rows; one "not measured" row where the backend does not enforce
/// `proxy`, and the download row is "not measured" where the sandbox has no curl (the
/// host's, or the one in the bench's image).
pub async fn measure(s: &Subject, budget: &Budget) -> Result<Vec<Row>, BenchError> {
    let cap = s.backend.capability();
    if cap.network_proxy != Enforcement::Exact {
        return Ok(vec![Row::not_measured(
            s.name,
            "egress through the proxy",
            "the backend does not enforce network mode `proxy` here",
        )]);
    }
    let server = Server::start().await?;
    let mut rows = Vec::new();

    // Start-up: `proxy` against `loopback`, interleaved.
    let (rounds, _) = budget.startup_for(s.slow);
    let lo = {
        let mut o = s.opts(vec![s.true_program.clone()]);
        o.network = NetworkMode::Loopback;
        o
    };
    let px = proxy_opts(s, vec![s.true_program.clone()], server.port);
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| {
            let o = lo.clone();
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
        Box::new(|| {
            let o = px.clone();
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
    ];
    let samples = interleaved(&probes, rounds).await?;
    let (lo_t, px_t) = (&samples[0], &samples[1]);
    let r = px_t.median().as_secs_f64() / lo_t.median().as_secs_f64();
    rows.push(Row {
        backend: s.name.into(),
        what: format!(
            "start-up of `/bin/true` with network `proxy` (lane {}), {} runs",
            s.lane,
            px_t.len()
        ),
        median: fmt_duration(px_t.median()),
        p95: fmt_duration(px_t.p95()),
        ratio: fmt_ratio(r),
        baseline: format!(
            "the same run with network `loopback`: {} (p95 {})",
            fmt_duration(lo_t.median()),
            fmt_duration(lo_t.p95())
        ),
        target: STARTUP.cell(),
        verdict: Verdict::judge(STARTUP.met(r), budget.quick),
    });

    // Start-up with a secret: the run's authority, its bundle and the terminated host's
    // certificate made per run, against the same `proxy` run without one.
    if cap.secrets {
        rows.push(secret_startup(s, budget, &px).await?);
    }

    // A download: curl in the sandbox through the proxy, against curl on the host.
    let (Some(inside_curl), Ok(curl)) = (&s.curl_program, which::which("curl")) else {
        rows.push(Row::not_measured(
            s.name,
            "a download through the proxy",
            "no curl: neither on the host nor in the sandbox",
        ));
        return Ok(rows);
    };
    let bytes = budget.flood_bytes;
    let direct_url = format!("http://127.0.0.1:{}/bytes/{bytes}", server.port);
    let named_url = format!("http://{NAME}:{}/bytes/{bytes}", server.port);
    let host_argv = curl_argv(&curl.into_os_string(), &direct_url, true);
    let inside = proxy_opts(s, curl_argv(inside_curl, &named_url, false), server.port);
    // The whole sandbox runs, start-up included, for the row's text.
    let whole = std::sync::Mutex::new(Vec::new());
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(host_transfer(&host_argv))),
        Box::new(|| {
            let o = inside.clone();
            let whole = &whole;
            Box::pin(async move {
                let (took, outcome) = runs::library_run(&s.backend, o).await?;
                // Only a complete transfer through the proxy counts.
                let got = outcome
                    .connections
                    .entries
                    .first()
                    .map_or(0, |c| c.bytes_in);
                if got < bytes {
                    return Err(BenchError::wrong(
                        "the download through the proxy",
                        format!("{got} of {bytes} bytes relayed: {:?}", outcome.connections),
                    ));
                }
                if let Ok(mut w) = whole.lock() {
                    w.push(took);
                }
                transfer_time("curl through the proxy", &outcome.stdout.bytes)
            })
        }),
    ];
    let rounds = budget.flood_for(s.slow);
    let samples = interleaved(&probes, rounds).await?;
    let (bare, ours) = (&samples[0], &samples[1]);
    let r = bare.median().as_secs_f64() / ours.median().as_secs_f64();
    let cell = |d: Duration| format!("{} ({:.2} GiB/s)", fmt_duration(d), gib_per_sec(bytes, d));
    let mut whole_runs = Samples::default();
    for d in whole
        .lock()
        .map(|w| w.iter().skip(rounds.warmup).copied().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        whole_runs.push(d);
    }
    rows.push(Row {
        backend: s.name.into(),
        what: format!(
            "{} MiB downloaded by curl through the proxy, curl's own transfer time (the \
             whole sandbox run, start-up included: {}), {} runs",
            bytes >> 20,
            fmt_duration(whole_runs.median()),
            ours.len()
        ),
        median: cell(ours.median()),
        p95: cell(ours.p95()),
        ratio: fmt_ratio(r),
        baseline: format!(
            "curl on the host straight from the server, its own transfer time: {}",
            cell(bare.median())
        ),
        target: DOWNLOAD.cell(),
        verdict: Verdict::judge(DOWNLOAD.met(r), budget.quick),
    });
    Ok(rows)
}

/// curl on the host, straight from the server: its own transfer time.
async fn host_transfer(argv: &[OsString]) -> Result<Duration, BenchError> {
    let what = "curl on the host";
    let out = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| BenchError::io(what, e))?;
    if !out.status.success() {
        return Err(BenchError::wrong(what, format!("{}", out.status)));
    }
    transfer_time(what, &out.stdout)
}

/// The transfer time curl printed (`-w '%{time_total}'`: from the start of the connection
/// to the last byte, so neither side's process start-up is in it).
fn transfer_time(what: &str, stdout: &[u8]) -> Result<Duration, BenchError> {
    let text = String::from_utf8_lossy(stdout);
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| BenchError::wrong(what, format!("curl printed no time: {text:?}")))
}

/// Connect, ask, and read the answer's first byte: directly, or through the proxy with
/// `CONNECT`.
async fn one_request(to: SocketAddr, connect_to: Option<&str>) -> Result<Duration, BenchError> {
    let what = "a connection for the set-up measurement";
    let io = |e| BenchError::io(what, e);
    let start = Instant::now();
    let mut s = TcpStream::connect(to).await.map_err(io)?;
    s.set_nodelay(true).map_err(io)?;
    if let Some(target) = connect_to {
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await
            .map_err(io)?;
        let mut got = Vec::new();
        let mut b = [0u8; 256];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).await.map_err(io)?;
            if n == 0 {
                return Err(BenchError::wrong(what, "the proxy closed"));
            }
            got.extend_from_slice(&b[..n]);
        }
        if !got.starts_with(b"HTTP/1.1 200") {
            return Err(BenchError::wrong(
                what,
                String::from_utf8_lossy(&got).into_owned(),
            ));
        }
    }
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .map_err(io)?;
    let mut b = [0u8; 1];
    if s.read(&mut b).await.map_err(io)? != 1 {
        return Err(BenchError::wrong(what, "no answer"));
    }
    Ok(start.elapsed())
}

/// The connection set-up row: the proxy in this process on a host listener (the same
/// code that serves a sandbox; only the listener's namespace differs).
pub async fn setup(budget: &Budget) -> Result<Row, BenchError> {
    let server = Server::start().await?;
    let listener = std::net::TcpListener::bind((LO, 0))
        .map_err(|e| BenchError::io("the proxy's listener", e))?;
    let proxy_addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("the proxy's listener", e))?;
    let allow = Allowlist::parse(&[format!("{NAME}:{}", server.port)])
        .map_err(|e| BenchError::wrong("the allowlist", e.to_string()))?;
    let proxy = sandbox_proxy::spawn(
        ProxyConfig::new(allow, Some(Arc::new(TableResolver::new().with(NAME, LO)))),
        Box::pin(async move { Ok(listener) }),
    )
    .map_err(|e| BenchError::io("starting the proxy", e))?;
    let upstream = SocketAddr::new(LO, server.port);
    let target = format!("{NAME}:{}", server.port);
    let rounds = Rounds {
        warmup: budget.startup.warmup,
        runs: budget.startup.runs,
        idle: Duration::ZERO,
    };
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(one_request(upstream, None))),
        Box::new(|| {
            let t = target.clone();
            Box::pin(async move { one_request(proxy_addr, Some(&t)).await })
        }),
    ];
    let samples: Vec<Samples> = interleaved(&probes, rounds).await?;
    drop(proxy);
    let (direct, through) = (&samples[0], &samples[1]);
    let added = through.median().saturating_sub(direct.median());
    Ok(Row {
        backend: "egress proxy".into(),
        what: format!(
            "connection set-up through the proxy (connect, CONNECT by name, first byte of \
             the answer), {} runs",
            through.len()
        ),
        median: fmt_duration(through.median()),
        p95: fmt_duration(through.p95()),
        ratio: format!("+{} added", fmt_duration(added)),
        baseline: format!(
            "a direct connection and request: {} (p95 {})",
            fmt_duration(direct.median()),
            fmt_duration(direct.p95())
        ),
        target: format!("≤ {} added", fmt_duration(SETUP_ADDED)),
        verdict: Verdict::judge(added <= SETUP_ADDED, budget.quick),
    })
}

/// The start-up row for a run with one secret (read from a file, for the host the proxy
/// allows) against `px`, the same run with the host allowed and no secret.
async fn secret_startup(s: &Subject, budget: &Budget, px: &SandboxOpts) -> Result<Row, BenchError> {
    let dir = tempfile::tempdir().map_err(|e| BenchError::io("the secret's file", e))?;
    let file = dir.path().join("token");
    std::fs::write(&file, "bench-token-value\n")
        .map_err(|e| BenchError::io("the secret's file", e))?;
    let spec =
        sandbox_core::SecretSpec::parse(&format!("BENCH_TOKEN=file:{}@{NAME}", file.display()))
            .map_err(|e| BenchError::wrong("the bench's secret", e.to_string()))?;
    let mut with_secret = px.clone();
    with_secret.secrets = vec![spec];
    let (rounds, _) = budget.startup_for(s.slow);
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| {
            let o = px.clone();
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
        Box::new(|| {
            let o = with_secret.clone();
            Box::pin(async move { runs::library_run(&s.backend, o).await.map(|(d, _)| d) })
        }),
    ];
    let samples = interleaved(&probes, rounds).await?;
    let (plain, secret) = (&samples[0], &samples[1]);
    let r = secret.median().as_secs_f64() / plain.median().as_secs_f64();
    Ok(Row {
        backend: s.name.into(),
        what: format!(
            "start-up of `/bin/true` with a secret (its run's authority, bundle and \
             certificate; lane {}), {} runs",
            s.lane,
            secret.len()
        ),
        median: fmt_duration(secret.median()),
        p95: fmt_duration(secret.p95()),
        ratio: fmt_ratio(r),
        baseline: format!(
            "the same `proxy` run with the host allowed and no secret: {} (p95 {})",
            fmt_duration(plain.median()),
            fmt_duration(plain.p95())
        ),
        target: SECRET_STARTUP.cell(),
        verdict: Verdict::judge(SECRET_STARTUP.met(r), budget.quick),
    })
}
