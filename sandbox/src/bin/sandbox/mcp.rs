//! `sandbox mcp`: the library as a Model Context Protocol server over stdin and stdout, so
//! an agent host that speaks MCP (Claude Code, Codex, an editor) runs its commands confined
//! without writing Rust.
//!
//! # The host's policy is in charge
//!
//! The policy is built once, at start-up, from the same flags and `--config` file as
//! `sandbox run` ([`config::resolve`], [`run::policy_opts`]), and the backend is chosen for
//! it then: a policy no backend here enforces is refused before anything is served. A tool
//! call chooses only the command (`argv`, or `command` run as `sh -c` *inside* the sandbox),
//! a working directory inside the workspace, a *shorter* timeout and the standard input.
//! Every other key (paths, network, lane, backend, environment) is refused with a tool
//! error that names it, and the input schema says `additionalProperties: false`. The
//! library checks every call's options again, exactly as for `sandbox run`: this door adds
//! no way to run what the library would refuse.
//!
//! # Process lifetime
//!
//! Each command runs in a task of our own (not in rmcp's request handler), tracked so that
//! when the client disconnects (end of stdin) or we get SIGINT/SIGTERM/SIGHUP, every running
//! command's whole tree is killed and waited for before the server exits. A call that the
//! client cancels (`notifications/cancelled`) kills its command too. At most
//! `--max-concurrent` commands run at once; further calls wait for a slot.
//!
//! # Output
//!
//! The result carries the exit status, stdout and stderr as the library captured them
//! (capped at `--max-output`, head and tail kept around a marker, with `*_truncated` set),
//! the effective policy in one line, what was enforced (`notes`, one line per fact, and
//! `enforced`, the same record as data), what the sandbox refused (`denials`) and the
//! proxy's connection record (`connections`); as text for the model and as `structuredContent`
//! for programs, whose shape the tool declares as its `outputSchema` (protocol 2025-06-18).
//! A command that ran is a result whatever its status: `isError` is set only when nothing
//! ran (refused, invalid, cancelled before it started), since an agent reads it as "the
//! tool is broken", which a failing build is not. Where the client sent a `progressToken`, output also streams as
//! `notifications/progress` while the command runs (best effort: a client that reads
//! slowly misses chunks, and the next notification says how many bytes it missed; the
//! result is always complete).
//!
//! `rmcp` is the official Rust SDK of the protocol: the wire format, the handshake and
//! version negotiation are its job, not ours. `tokio-util` gives the cancellation token and
//! the task tracker that the shutdown waits on.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use sandbox::{
    Backend, DynSandbox, EffectivePolicy, Enforcement, Plan, SandboxError, SandboxOpts,
    SandboxOutcome, Status, Stdin, StreamKind,
};

use crate::args::McpArgs;
use crate::config::{self, RunSpec};
use crate::error::{over_grants, CliError, SANDBOX_FAILED};
use crate::run::{self, Signals};
use crate::startup;

/// The tool that runs a command.
const RUN_COMMAND: &str = "run_command";
/// The tool that describes the policy.
const EXPLAIN_POLICY: &str = "explain_policy";
/// The keys a `run_command` call may carry; anything else is a request to widen the
/// policy, and refused.
const INPUTS: [&str; 7] = [
    "argv",
    "command",
    "cwd",
    "timeout_seconds",
    "stdin",
    "toolchains",
    "secrets",
];
/// Progress chunks waiting for the client; past this, chunks are counted and dropped so a
/// slow client cannot make the server hold a command's whole output twice.
const PROGRESS_QUEUE: usize = 256;

/// Serve until the client disconnects; the exit status of `sandbox mcp`.
pub async fn serve(args: McpArgs) -> i32 {
    match serve_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            let (reason, remedy) = e.explain();
            eprintln!("sandbox mcp: {reason}; remedy: {remedy}");
            SANDBOX_FAILED
        }
    }
}

async fn serve_inner(args: McpArgs) -> Result<i32, CliError> {
    let mut signals = Signals::new()?;
    let cwd = std::env::current_dir().map_err(|source| CliError::Host {
        context: "reading the current directory",
        source,
    })?;
    let spec = config::resolve(args.policy, &cwd)?;
    // The policy is checked, and the backend chosen, for a stand-in command: a policy that
    // nothing here enforces is refused now, not on the model's first call.
    let base = run::policy_opts(&spec, vec![OsString::from("sh")])?;
    let (choice, config) = run::choice_of(&spec);
    // Constructed without a preflight (or `auto` from its cache); a call whose launch
    // fails is diagnosed then.
    let chosen = startup::choose(&choice, &base, &config)
        .await
        .map_err(|e| run::with_hint(e, &base, &config))?;
    let backend = Arc::clone(&chosen.backend);
    let explanation = explain(&spec, &base, backend.as_ref());
    let inner = Arc::new(Inner {
        spec,
        backend,
        chosen,
        slots: Arc::new(Semaphore::new(args.max_concurrent as usize)),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
        explanation,
    });
    let server = Server {
        inner: Arc::clone(&inner),
    };

    let code = match server.serve(rmcp::transport::stdio()).await {
        // The client went away during the handshake: nothing ran.
        Err(_) => 0,
        Ok(service) => {
            tokio::select! {
                _ = service.waiting() => 0,
                n = signals.recv() => 128 + n,
            }
        }
    };
    // Disconnected (or signalled): every running command's tree is killed, and waited for,
    // before we exit.
    inner.shutdown.cancel();
    inner.tasks.close();
    inner.tasks.wait().await;
    Ok(code)
}

/// What every call shares.
#[derive(Debug)]
struct Inner {
    spec: RunSpec,
    backend: Arc<dyn Backend>,
    /// How the backend was chosen, to diagnose a launch that fails.
    chosen: startup::Chosen,
    slots: Arc<Semaphore>,
    /// Cancelled when the client disconnects: each running command kills its tree.
    shutdown: CancellationToken,
    /// The commands' tasks; the shutdown waits for them all.
    tasks: TaskTracker,
    explanation: String,
}

/// The MCP server.
#[derive(Clone, Debug)]
struct Server {
    inner: Arc<Inner>,
}

/// A `run_command` call's inputs, as the client sent them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunInput {
    argv: Option<Vec<String>>,
    command: Option<String>,
    cwd: Option<PathBuf>,
    timeout_seconds: Option<f64>,
    stdin: Option<String>,
    /// Only these of the host's toolchains (paths as the host granted them).
    toolchains: Option<Vec<PathBuf>>,
    /// Only these of the host's secrets, by name: a value never comes through a call.
    secrets: Option<Vec<String>>,
}

/// Why a call ran nothing, as the tool error the model reads.
#[derive(Debug)]
struct Refusal {
    kind: &'static str,
    reason: String,
    remedy: String,
}

impl Refusal {
    fn input(reason: impl Into<String>) -> Self {
        Self {
            kind: "invalid_input",
            reason: reason.into(),
            remedy: "fix the tool input: `argv` (an array) or `command` (a string), and \
                     optionally `cwd`, `timeout_seconds`, `stdin`"
                .to_string(),
        }
    }

    fn result(&self) -> CallToolResult {
        let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
            "refused, nothing ran: {}; remedy: {}",
            self.reason, self.remedy
        ))]);
        r.structured_content = Some(json!({
            "status": "refused",
            "error": self.kind,
            "reason": self.reason,
            "remedy": self.remedy,
        }));
        r
    }
}

impl From<SandboxError> for Refusal {
    fn from(e: SandboxError) -> Self {
        match e {
            // What a call chose is at fault: say it in the tool's terms, not the flags'.
            SandboxError::InvalidConfig { field, reason } if field == "cwd" || field == "argv" => {
                let input = if field == "argv" {
                    "argv/command"
                } else {
                    "cwd"
                };
                Self::input(format!("`{input}`: {reason}"))
            }
            e => {
                let cli = CliError::from(e);
                let (reason, remedy) = cli.explain();
                Self {
                    kind: cli.kind(),
                    reason,
                    remedy,
                }
            }
        }
    }
}

/// The tool inputs, checked: what the call asked, narrowed onto the host's policy.
fn call_opts(inner: &Inner, args: JsonObject) -> Result<SandboxOpts, Refusal> {
    if let Some(key) = args.keys().find(|k| !INPUTS.contains(&k.as_str())) {
        return Err(Refusal {
            kind: "policy_refused",
            reason: format!(
                "`{key}` is not an input of {RUN_COMMAND}: paths, network, lane, backend, \
                 environment and limits are the host's policy, and a tool call cannot \
                 change them"
            ),
            remedy: format!(
                "call {EXPLAIN_POLICY} to see what the sandbox allows, and work within it; \
                 the inputs are {}",
                INPUTS.join(", ")
            ),
        });
    }
    let input: RunInput = serde_json::from_value(Value::Object(args))
        .map_err(|e| Refusal::input(format!("the input does not match the schema: {e}")))?;
    let argv: Vec<OsString> = match (input.argv, input.command) {
        (Some(_), Some(_)) => {
            return Err(Refusal::input("give `argv` or `command`, not both"));
        }
        (None, None) => return Err(Refusal::input("give `argv` or `command`")),
        (Some(argv), None) if argv.is_empty() => {
            return Err(Refusal::input("`argv` is empty"));
        }
        (Some(argv), None) => argv.into_iter().map(OsString::from).collect(),
        // The shell runs inside the sandbox, under the same policy as any program.
        (None, Some(command)) => vec!["sh".into(), "-c".into(), command.into()],
    };
    let mut opts = run::policy_opts(&inner.spec, argv).map_err(|e| {
        let (reason, remedy) = e.explain();
        Refusal {
            kind: e.kind(),
            reason,
            remedy,
        }
    })?;
    if let Some(cwd) = input.cwd {
        // Relative to the workspace; the library refuses one that leads out of it.
        if cwd.is_absolute() {
            return Err(Refusal::input(format!(
                "`cwd` {} must be relative to the workspace",
                cwd.display()
            )));
        }
        opts.cwd = Some(cwd);
    }
    if let Some(secs) = input.timeout_seconds {
        let asked = Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                Refusal::input(format!(
                    "`timeout_seconds` {secs} must be a number of seconds more than zero"
                ))
            })?;
        // Only ever shorter than the host's.
        opts.timeout = Some(opts.timeout.map_or(asked, |host| host.min(asked)));
    }
    if let Some(stdin) = input.stdin {
        opts.stdin = Stdin::Bytes(stdin.into_bytes());
    }
    // Toolchains and secrets: a call may only leave out some of the host's, never add.
    if let Some(asked) = input.toolchains {
        let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let mut chosen = Vec::new();
        for t in asked {
            let Some(granted) = opts.toolchains.iter().find(|g| canon(g) == canon(&t)) else {
                return Err(not_the_hosts("toolchain", &t.display().to_string()));
            };
            chosen.push(granted.clone());
        }
        opts.toolchains = chosen;
    }
    if let Some(names) = input.secrets {
        if let Some(n) = names
            .iter()
            .find(|n| !opts.secrets.iter().any(|s| &s.name == *n))
        {
            return Err(not_the_hosts("secret", n));
        }
        opts.secrets.retain(|s| names.contains(&s.name));
    }
    Ok(opts)
}

/// A call named a toolchain or secret the host did not configure.
fn not_the_hosts(what: &str, name: &str) -> Refusal {
    Refusal {
        kind: "policy_refused",
        reason: format!(
            "the {what} `{}` is not one the host configured: a call may only choose among \
             the host's",
            sandbox::escape(name.as_bytes())
        ),
        remedy: format!("call {EXPLAIN_POLICY} to see the {what}s the host configured"),
    }
}

impl Inner {
    /// Run `opts` to the end, or kill its tree when the server shuts down, the client
    /// cancels the call or the caller goes away.
    async fn execute(
        &self,
        opts: SandboxOpts,
        call: CancellationToken,
        reply: &mut oneshot::Sender<Result<SandboxOutcome, Refusal>>,
    ) -> Result<SandboxOutcome, Refusal> {
        let stopped = || Refusal {
            kind: "cancelled",
            reason: "the call was cancelled or the server is shutting down before the \
                     command started"
                .to_string(),
            remedy: "call again".to_string(),
        };
        let _slot = tokio::select! {
            slot = Arc::clone(&self.slots).acquire_owned() => slot.map_err(|_| stopped())?,
            () = self.shutdown.cancelled() => return Err(stopped()),
            () = call.cancelled() => return Err(stopped()),
            () = reply.closed() => return Err(stopped()),
        };
        if self.shutdown.is_cancelled() {
            return Err(stopped());
        }
        let sandbox: Arc<DynSandbox> = Arc::from(self.backend.sandbox());
        if let Err(e) = sandbox.run(opts).await {
            return Err(startup::diagnose(&self.chosen, e).await.into());
        }
        let outcome = tokio::select! {
            o = sandbox.wait() => o?,
            () = self.shutdown.cancelled() => stop(&sandbox).await?,
            () = call.cancelled() => stop(&sandbox).await?,
            () = reply.closed() => stop(&sandbox).await?,
        };
        Ok(outcome)
    }
}

async fn stop(sandbox: &DynSandbox) -> Result<SandboxOutcome, SandboxError> {
    sandbox.kill().await?;
    sandbox.wait().await
}

/// Output as progress notifications, for a client that sent a progress token.
struct Progress {
    tx: mpsc::Sender<(StreamKind, Vec<u8>)>,
    missed: Arc<AtomicU64>,
}

impl Progress {
    /// The sink to give the library, and the task that forwards what it sees.
    fn start(
        peer: Peer<RoleServer>,
        token: ProgressToken,
        tasks: &TaskTracker,
    ) -> (sandbox::OutputSink, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::channel::<(StreamKind, Vec<u8>)>(PROGRESS_QUEUE);
        let missed = Arc::new(AtomicU64::new(0));
        let progress = Progress {
            tx,
            missed: Arc::clone(&missed),
        };
        let sink = sandbox::OutputSink(Arc::new(move |kind, bytes: &[u8]| {
            // The library calls this on its reading task: never block it.
            if progress.tx.try_send((kind, bytes.to_vec())).is_err() {
                progress
                    .missed
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
        }));
        let forward = tasks.spawn(async move {
            let mut seen: u64 = 0;
            while let Some((kind, bytes)) = rx.recv().await {
                seen += bytes.len() as u64;
                let mut message = String::new();
                let lost = missed.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let _ = write!(message, "[{lost} bytes of output not streamed] ");
                }
                let stream = match kind {
                    StreamKind::Stdout => "stdout",
                    StreamKind::Stderr => "stderr",
                };
                let _ = write!(message, "[{stream}] {}", String::from_utf8_lossy(&bytes));
                let param = ProgressNotificationParam::new(token.clone(), seen as f64)
                    .with_message(message);
                if peer.notify_progress(param).await.is_err() {
                    break;
                }
            }
        });
        (sink, forward)
    }
}

impl Server {
    async fn run_command(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut opts = match call_opts(&self.inner, request.arguments.unwrap_or_default()) {
            Ok(opts) => opts,
            Err(refusal) => return refusal.result(),
        };
        let token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let forward = token.map(|token| {
            let (sink, forward) = Progress::start(context.peer.clone(), token, &self.inner.tasks);
            opts.output_sink = Some(sink);
            forward
        });
        let timeout = opts.timeout;
        let (mut tx, rx) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        let call = context.ct.clone();
        self.inner.tasks.spawn(async move {
            let result = inner.execute(opts, call, &mut tx).await;
            let _ = tx.send(result);
        });
        let result = rx.await;
        // The sink went with the sandbox: the forwarder ends once it has sent what it had,
        // so every notification is out before the result.
        if let Some(forward) = forward {
            let _ = tokio::time::timeout(Duration::from_secs(5), forward).await;
        }
        match result {
            Ok(Ok(outcome)) => outcome_result(&outcome, timeout),
            Ok(Err(refusal)) => refusal.result(),
            Err(_) => Refusal {
                kind: "sandbox_failed",
                reason: "the command's task ended without an outcome".to_string(),
                remedy: "call again; `sandbox doctor` checks the backend".to_string(),
            }
            .result(),
        }
    }
}

/// The result of a command that ran.
fn outcome_result(o: &SandboxOutcome, timeout: Option<Duration>) -> CallToolResult {
    let policy = policy_line(&o.policy, timeout);
    let stdout = o.stdout.text();
    let stderr = o.stderr.text();
    let mut text = match o.status {
        Status::Exited { code } => format!("exit status {code}\n"),
        Status::Signaled { signal } => format!("killed by signal {signal}\n"),
        Status::TimedOut => "timed out; the whole process tree was killed\n".to_string(),
        Status::Killed => "killed; the whole process tree was killed\n".to_string(),
        Status::OutOfMemory => "killed by the out-of-memory killer\n".to_string(),
    };
    let _ = writeln!(text, "policy: {policy}");
    for (name, captured, body) in [
        ("stdout", &o.stdout, &stdout),
        ("stderr", &o.stderr, &stderr),
    ] {
        let note = if captured.truncated {
            format!(
                " (truncated: {} bytes in all, head and tail kept)",
                captured.total_bytes
            )
        } else {
            String::new()
        };
        let _ = writeln!(text, "--- {name}{note} ---\n{body}");
    }
    // What was refused, as `sandbox run` prints it: the proxy's refusals and the
    // connections it could not make one line each, then the rest counted.
    for line in o.connection_lines() {
        let _ = writeln!(text, "{line}");
    }
    if let Some(line) = o
        .denials
        .summary_besides(Some(sandbox::DenialMechanism::Proxy))
    {
        let _ = writeln!(text, "sandbox: {line}");
    }
    // A command that ran is a result whatever its status: `isError` tells an agent the
    // tool itself is broken, which a failing build or test is not.
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "status": o.status.kind(),
        "exit_code": o.status.code(),
        "signal": o.status.signal(),
        "exit_status": o.status.shell_code(),
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": o.stdout.truncated,
        "stderr_truncated": o.stderr.truncated,
        "stdout_bytes": o.stdout.total_bytes,
        "stderr_bytes": o.stderr.total_bytes,
        "wall_time_secs": o.wall_time.as_secs_f64(),
        "policy": policy,
        "notes": o.policy.enforced.notes(),
        "enforced": &o.policy.enforced[..],
        "backend": o.backend,
        "denials": &o.denials,
        "connections": &o.connections,
    }));
    r
}

fn paths(ps: &[PathBuf]) -> String {
    ps.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The effective policy in one line.
fn policy_line(p: &EffectivePolicy, timeout: Option<Duration>) -> String {
    let mut s = format!(
        "backend={} lane={} network={} workspace={}",
        p.backend,
        p.lane,
        p.network,
        p.workspace.display()
    );
    if !p.read_only_paths.is_empty() {
        let _ = write!(s, " read={}", paths(&p.read_only_paths));
    }
    if !p.writable_paths.is_empty() {
        let _ = write!(s, " write={}", paths(&p.writable_paths));
    }
    if !p.readonly_carveouts.is_empty() {
        let _ = write!(
            s,
            " read-only-in-workspace={}",
            paths(&p.readonly_carveouts)
        );
    }
    let _ = write!(s, " env={}", p.env_names.join(","));
    for l in &p.limits {
        let _ = write!(s, " {}={}", l.limit, l.value);
    }
    if let Some(t) = timeout {
        let _ = write!(s, " timeout={}s", t.as_secs_f64());
    }
    let over = over_grants(&p.grants);
    if !over.is_empty() {
        let _ = write!(s, " not-enforced=[{}]", over.join("; "));
    }
    s
}

/// What the sandbox allows, in plain text, for `explain_policy`.
fn explain(spec: &RunSpec, base: &SandboxOpts, backend: &dyn Backend) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Commands run confined by the `{}` backend on the `{}` lane.",
        backend.name(),
        spec.lane
    );
    let _ = writeln!(
        s,
        "Workspace (readable and writable; commands start here): {}{}",
        spec.workspace.display(),
        if spec.snapshot {
            " (a throwaway copy per command: changes are discarded)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "Also readable: {}",
        if spec.read.is_empty() {
            "nothing beyond the workspace and the system's programs and libraries".to_string()
        } else {
            paths(&spec.read)
        }
    );
    let _ = writeln!(
        s,
        "Also writable: {}",
        if spec.write.is_empty() {
            "nothing".to_string()
        } else {
            paths(&spec.write)
        }
    );
    let _ = writeln!(
        s,
        "Network: {}",
        match spec.network {
            sandbox::NetworkMode::None => "none at all".to_string(),
            sandbox::NetworkMode::Loopback => {
                "a private loopback only (nothing of the host's)".to_string()
            }
            sandbox::NetworkMode::Proxy => format!(
                "only these hosts, through the sandbox's proxy (HTTP_PROXY is set; no DNS, \
                 no other address): {}{}",
                spec.allow_hosts.join(", "),
                // Parsed, so what is shown is `host:port` alone, never a URL's userinfo.
                match spec
                    .upstream_proxy
                    .as_deref()
                    .and_then(|u| sandbox_core::UpstreamProxy::parse(u).ok())
                {
                    Some(up) => format!(" (reached through the host's upstream proxy {up})"),
                    None => String::new(),
                }
            ),
            sandbox::NetworkMode::Full => "the host's network".to_string(),
        }
    );
    if !spec.host_ports.is_empty() {
        let ports: Vec<String> = spec.host_ports.iter().map(u16::to_string).collect();
        let _ = writeln!(
            s,
            "Host ports: 127.0.0.1:{} reach the host's own (nothing else of the host's)",
            ports.join(", 127.0.0.1:")
        );
    }
    if !spec.publish.is_empty() {
        let ports: Vec<String> = spec.publish.iter().map(|p| p.port.to_string()).collect();
        let _ = writeln!(
            s,
            "Published ports: a server on 127.0.0.1:{} is reachable from the host (nothing \
             leads out)",
            ports.join(", 127.0.0.1:")
        );
    }
    if !base.toolchains.is_empty() {
        let _ = writeln!(
            s,
            "Toolchains (readable, credentials inside hidden; a call may choose among them): {}",
            paths(&base.toolchains)
        );
    }
    if !base.secrets.is_empty() {
        let names: Vec<&str> = base.secrets.iter().map(|x| x.name.as_str()).collect();
        let _ = writeln!(
            s,
            "Secrets (placeholders only; a call may choose among them by name): {}",
            names.join(", ")
        );
    }
    let mut env: Vec<String> = vec!["PATH".into(), "HOME".into(), "LANG".into()];
    env.extend(base.env.set.iter().map(|(n, _)| n.clone()));
    env.extend(base.env.pass.iter().cloned());
    let _ = writeln!(s, "Environment variables: {}", env.join(", "));
    let _ = writeln!(
        s,
        "Timeout: {}",
        match spec.timeout {
            Some(t) => format!("{} s (a call may ask for less)", t.as_secs_f64()),
            None => "none (a call may set one)".to_string(),
        }
    );
    if let Some(m) = base.limits.memory_bytes {
        let _ = writeln!(s, "Memory: {} MiB for the whole command", m >> 20);
    }
    if let Some(n) = base.limits.max_processes {
        let _ = writeln!(s, "Processes: at most {n}");
    }
    let _ = writeln!(
        s,
        "Output: each of stdout and stderr kept up to {} bytes (head and tail, marked when cut)",
        base.output_limit
    );
    if let Ok(plan) = Plan::new(base, backend.name(), &backend.capability()) {
        let _ = writeln!(s, "How each is enforced:");
        for g in &plan.grants {
            let how = match g.enforcement {
                Enforcement::Exact => "exactly".to_string(),
                Enforcement::OverGrant(gives) => format!("NOT enforced: the command gets {gives}"),
                Enforcement::Unsupported => "not supported".to_string(),
            };
            let _ = writeln!(s, "  {}: {how}", g.what);
        }
    }
    let _ = write!(
        s,
        "A call to {RUN_COMMAND} chooses the command (`argv`, or `command` run by sh -c \
         inside the sandbox), `cwd` inside the workspace, a shorter `timeout_seconds`, \
         `stdin`, and which of the toolchains and secrets above it gets; nothing above can \
         be widened by a call."
    );
    s
}

fn run_command_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "The program and its arguments, passed as they are (no shell)."
            },
            "command": {
                "type": "string",
                "description": "A shell command line, run as `sh -c COMMAND` inside the sandbox."
            },
            "cwd": {
                "type": "string",
                "description": "The working directory, relative to the workspace (default: the workspace)."
            },
            "timeout_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Kill the command's whole process tree after this many seconds; only shortens the host's timeout."
            },
            "stdin": {
                "type": "string",
                "description": "The command's standard input (default: empty)."
            },
            "toolchains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only these of the toolchains the host granted (paths as explain_policy lists them; default: all of them)."
            },
            "secrets": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only these of the secrets the host configured, by name (default: all of them); a value is never given here."
            }
        },
        "oneOf": [{"required": ["argv"]}, {"required": ["command"]}],
        "additionalProperties": false
    });
    Tool::new(
        RUN_COMMAND,
        "Run a command in the sandbox the host configured, and return its exit status, \
         stdout and stderr. It can write only inside the workspace, and reach only the \
         network the host allows; call explain_policy to see exactly what it allows.",
        json_object(schema),
    )
    .with_raw_output_schema(json_object(run_command_output_schema()))
}

/// The shape of `run_command`'s `structuredContent`: a command that ran (whatever its
/// status), or a call that ran nothing (`refused`). Declared so that a client can check
/// and read it without parsing the text; the entries of `denials` and `connections` are
/// the library's own records, as `sandbox run --json` prints them.
fn run_command_output_schema() -> Value {
    let int = json!({"type": "integer", "minimum": 0});
    let opt_int = json!({"type": ["integer", "null"]});
    let denial = json!({
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": [
                "file_read", "file_write", "exec", "network_connect", "network_bind",
                "syscall", "signal", "ptrace"
            ]},
            "target": {"type": "string"},
            "mechanism": {"type": "string", "enum": [
                "landlock", "seccomp", "namespace", "proxy", "engine"
            ]},
            "count": int
        },
        "required": ["kind", "target", "mechanism", "count"],
        "additionalProperties": false
    });
    let connection = json!({
        "type": "object",
        "properties": {
            "at": {"type": "number", "description": "Unix seconds of the first attempt."},
            "last_at": {"type": "number", "description": "Unix seconds of the last attempt."},
            "count": int,
            "protocol": {"type": "string", "enum": ["connect", "http", "socks5", "host_port"]},
            "host": {"type": "string"},
            "port": int,
            "decision": {"type": "string", "enum": ["allowed", "denied"]},
            "rule": {
                "type": "string",
                "description": "The allowlist pattern or request rule that allowed it, or why \
                                it was denied."
            },
            "peer": {"type": ["string", "null"]},
            "bytes_out": int,
            "bytes_in": int,
            "error": {
                "type": ["string", "null"],
                "description": "Why an allowed connection could not be made."
            },
            "request": {
                "type": "object",
                "description": "One request on a terminated connection (a host with secrets \
                                or request rules); absent for a connection.",
                "properties": {
                    "method": {"type": "string"},
                    "path": {
                        "type": "string",
                        "description": "Without the query; canonical on a host with rules."
                    },
                    "injected": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The names of the secrets put into it."
                    }
                },
                "required": ["method", "path", "injected"],
                "additionalProperties": false
            }
        },
        "required": [
            "at", "last_at", "count", "protocol", "host", "port", "decision", "rule", "peer",
            "bytes_out", "bytes_in", "error"
        ],
        "additionalProperties": false
    });
    let ran = json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": [
                "exited", "signaled", "timed_out", "killed", "out_of_memory"
            ]},
            "exit_code": opt_int,
            "signal": opt_int,
            "exit_status": {
                "type": "integer",
                "description": "What `sandbox run` would exit with: the code, 128+signal, 124 on a timeout."
            },
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "stdout_truncated": {"type": "boolean"},
            "stderr_truncated": {"type": "boolean"},
            "stdout_bytes": int,
            "stderr_bytes": int,
            "wall_time_secs": {"type": "number"},
            "policy": {"type": "string"},
            "notes": {
                "type": "array",
                "items": {"type": "string"},
                "description": "What was enforced, one line per fact."
            },
            "enforced": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "mechanism": {"type": "string"},
                        "fact": {"type": "string"}
                    },
                    "required": ["mechanism", "fact"]
                },
                "description": "The same record as data, each fact tagged by `mechanism` and `fact`."
            },
            "backend": {"type": "string"},
            "denials": {
                "type": "object",
                "description": "What the sandbox refused while the command ran.",
                "properties": {
                    "entries": {"type": "array", "items": denial},
                    "more": int
                },
                "required": ["entries", "more"],
                "additionalProperties": false
            },
            "connections": {
                "type": "object",
                "description": "Network `proxy`: every connection attempt, allowed or denied.",
                "properties": {
                    "entries": {"type": "array", "items": connection},
                    "more": {
                        "type": "object",
                        "properties": {
                            "attempts": int, "denied": int, "bytes_out": int, "bytes_in": int
                        },
                        "required": ["attempts", "denied", "bytes_out", "bytes_in"],
                        "additionalProperties": false
                    }
                },
                "required": ["entries", "more"],
                "additionalProperties": false
            }
        },
        "required": [
            "status", "exit_code", "signal", "exit_status", "stdout", "stderr",
            "stdout_truncated", "stderr_truncated", "stdout_bytes", "stderr_bytes",
            "wall_time_secs", "policy", "notes", "enforced", "backend", "denials",
            "connections"
        ],
        "additionalProperties": false
    });
    let refused = json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["refused"]},
            "error": {"type": "string"},
            "reason": {"type": "string"},
            "remedy": {"type": "string"}
        },
        "required": ["status", "error", "reason", "remedy"],
        "additionalProperties": false
    });
    json!({"type": "object", "oneOf": [ran, refused]})
}

fn explain_policy_tool() -> Tool {
    Tool::new(
        EXPLAIN_POLICY,
        "Describe what commands run by run_command may do: the workspace, readable and \
         writable paths, network, environment and limits.",
        json_object(json!({"type": "object", "properties": {}, "additionalProperties": false})),
    )
}

fn json_object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs commands in a sandbox whose policy the host set. Call explain_policy \
                 first to see what is allowed.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            run_command_tool(),
            explain_policy_tool(),
        ]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match name {
            RUN_COMMAND => Some(run_command_tool()),
            EXPLAIN_POLICY => Some(explain_policy_tool()),
            _ => None,
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            RUN_COMMAND => Ok(self.run_command(request, context).await.into()),
            EXPLAIN_POLICY => {
                if let Some(key) = request.arguments.as_ref().and_then(|a| a.keys().next()) {
                    return Ok(Refusal::input(format!(
                        "{EXPLAIN_POLICY} takes no input, and `{key}` was given"
                    ))
                    .result()
                    .into());
                }
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    self.inner.explanation.clone(),
                )])
                .into())
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool `{other}`; the tools are {RUN_COMMAND} and {EXPLAIN_POLICY}"),
                None,
            )),
        }
    }
}
