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

fn serve(mut s: impl Read + Write, seen: &Seen, files: &Files) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
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
    if let Ok(mut seen) = seen.lock() {
        seen.push(String::from_utf8_lossy(&got).into_owned());
    }
    let path = head.split_whitespace().nth(1).unwrap_or("/");
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
        None if path.starts_with("/echo") => ("200 OK", "", head.clone().into_bytes()),
        None => ("200 OK", "", b"ok\n".to_vec()),
    };
    let _ = s.write_all(
        format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
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
