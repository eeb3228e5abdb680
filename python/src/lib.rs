//! `sandbox._sandbox`: the library for Python, the native half of the `sandbox` package
//! (the Python half, `pysrc/sandbox/__init__.py`, adds the asyncio API and the exception
//! classes).
//!
//! Thin on purpose: the arguments become a [`SandboxOpts`], [`sandbox::select::select`]
//! picks the backend exactly as `sandbox run` does, and the library checks everything
//! before anything runs; nothing here can make it run what it would refuse. Argument
//! errors are raised as `InvalidOptions` before a backend is even chosen. The arguments
//! are the command's options (`allow_hosts`, `host_ports`, `publish`, `changes`,
//! `snapshot` included), and the exit taxonomy is the command's: a program not found or
//! not executable is an outcome with code 127 or 126, not an exception.
//!
//! # Threads
//!
//! One tokio runtime is shared by every call (started on first use). A command runs with
//! the GIL released (`Python::detach`), so Python threads running commands at once run
//! them at once; a blocking wait wakes every 100 ms to let Ctrl-C in, and on
//! `KeyboardInterrupt` kills the command's whole tree before raising.
//!
//! # Dependencies
//!
//! `pyo3` (the bindings; the `extension-module` feature is maturin's only, so
//! `cargo test --workspace` still links), `tokio` (the runtime), `serde_json` (the policy
//! and the doctor report cross as JSON, decoded by Python's `json`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use sandbox::select::{Choice, Config};
use sandbox::{
    ChangeSet, Changes, DynSandbox, EnvPolicy, Lane, NetworkMode, Publish, PublishSink,
    SandboxError, SandboxOpts, SandboxOutcome, SecretSpec, Stdin,
};

/// How often a blocking wait lets Python's signal handlers run.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

fn runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("sandbox")
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(format!("could not start the async runtime: {e}")))
}

/// An error of the library, as its Python exception: the class, the reason and the remedy.
#[derive(Clone, Debug)]
struct Failure {
    class: &'static str,
    reason: String,
    remedy: String,
}

impl Failure {
    fn invalid(reason: impl Into<String>) -> Self {
        Self {
            class: "InvalidOptions",
            reason: reason.into(),
            remedy: "fix the argument; help(sandbox.run) lists them".to_string(),
        }
    }

    /// Raise it as `sandbox.<class>(reason, remedy)`.
    fn into_py(self, py: Python<'_>) -> PyErr {
        let raised = py
            .import("sandbox._errors")
            .and_then(|m| m.getattr(self.class))
            .and_then(|class| class.call1((self.reason.clone(), self.remedy.clone())));
        match raised {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        }
    }
}

impl From<SandboxError> for Failure {
    fn from(e: SandboxError) -> Self {
        let doctor = "sandbox.doctor() says what works on this host and what to do";
        match e {
            SandboxError::InvalidConfig { field, reason } => Self {
                class: "InvalidOptions",
                reason: format!("{}: {reason}", argument_of(field)),
                remedy: if field == "argv" && reason.contains("not found") {
                    "check the name; the command's PATH is the system one unless env sets \
                     another"
                        .to_string()
                } else {
                    format!("fix `{}`", argument_of(field))
                },
            },
            SandboxError::Unavailable {
                backend,
                reason,
                remedy,
            } => Self {
                class: "SandboxUnavailable",
                reason: format!("backend `{backend}` cannot run here: {reason}"),
                remedy,
            },
            SandboxError::PolicyRefused {
                lane,
                backend,
                reason,
            } => Self {
                class: "PolicyRefused",
                reason: format!("lane `{lane}` refuses backend `{backend}`: {reason}"),
                remedy: format!(
                    "choose a backend that enforces the request, or another lane; {doctor}"
                ),
            },
            SandboxError::NotSupported {
                backend,
                feature,
                remedy,
            } => Self {
                class: "PolicyRefused",
                reason: format!("backend `{backend}` cannot enforce {feature}"),
                remedy,
            },
            other => Self {
                class: "SandboxError",
                reason: other.to_string(),
                remedy: doctor.to_string(),
            },
        }
    }
}

/// The Python argument for a field of the library's options.
fn argument_of(field: &str) -> &str {
    match field {
        "read_only_paths" => "read",
        "writable_paths" => "write",
        "env.set" | "env.pass" => "env",
        "limits.memory_bytes" => "memory_mb",
        "output_limit" => "max_output",
        // The library's own names are the arguments' (`allow_hosts`, `host_ports`,
        // `publish`, `changes`, `snapshot`).
        other => other,
    }
}

/// What one call asked for, checked.
struct Request {
    opts: SandboxOpts,
    choice: Choice,
    config: Config,
    /// Where each published port is, once bound.
    published: Arc<Mutex<Vec<(u16, String)>>>,
}

/// The arguments of `run` and `start` that say what the command may do.
struct Policy<'a, 'py> {
    workspace: Option<PathBuf>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    network: Option<&'a str>,
    allow_hosts: Vec<String>,
    host_ports: Vec<u16>,
    publish: Vec<Bound<'py, PyAny>>,
    lane: &'a str,
    timeout: Option<f64>,
    memory_mb: Option<u64>,
    env: Option<HashMap<String, Option<String>>>,
    backend: &'a str,
    image: Option<String>,
    cwd: Option<PathBuf>,
    stdin: Option<&'a Bound<'py, PyAny>>,
    max_output: Option<usize>,
    changes: &'a str,
    snapshot: bool,
    toolchains: Vec<PathBuf>,
    secrets: Vec<String>,
    allow_requests: Vec<String>,
    upstream_ca: Vec<PathBuf>,
    upstream_proxy: Option<String>,
}

/// The network mode when none is named: as the command's, an allowlist implies the
/// proxy, host ports and published ports a private loopback.
fn implied_network(p: &Policy<'_, '_>) -> NetworkMode {
    if !p.allow_hosts.is_empty() || !p.secrets.is_empty() || !p.allow_requests.is_empty() {
        NetworkMode::Proxy
    } else if !p.host_ports.is_empty() || !p.publish.is_empty() {
        NetworkMode::Loopback
    } else {
        NetworkMode::None
    }
}

/// One `publish` entry: a port, or `"PORT:HOSTPORT"`.
fn publish_entry(entry: &Bound<'_, PyAny>) -> Result<Publish, Failure> {
    let text = if let Ok(port) = entry.extract::<u64>() {
        port.to_string()
    } else if let Ok(spec) = entry.extract::<String>() {
        spec
    } else {
        return Err(Failure::invalid(
            "publish: each entry is a port number or a string \"PORT:HOSTPORT\"",
        ));
    };
    text.parse()
        .map_err(|e: String| Failure::invalid(format!("publish: {e}")))
}

/// The arguments of `run` and `start`, checked.
fn request(argv: &Bound<'_, PyAny>, p: Policy<'_, '_>) -> Result<Request, Failure> {
    // A string is a shell command line; this API takes an argv and never re-quotes it.
    if argv.is_instance_of::<PyString>() {
        return Err(Failure::invalid(
            "argv: a list of strings is needed, not a string (nothing is run through a \
             shell; pass [\"sh\", \"-c\", line] to mean one)",
        ));
    }
    let argv: Vec<OsString> = argv
        .extract::<Vec<PathBuf>>()
        .map_err(|_| Failure::invalid("argv: must be a list of strings"))?
        .into_iter()
        .map(PathBuf::into_os_string)
        .collect();
    if argv.is_empty() {
        return Err(Failure::invalid("argv: must name a program"));
    }
    let network = match p.network {
        Some(n) => n
            .parse::<NetworkMode>()
            .map_err(|e| Failure::invalid(format!("network: {e}")))?,
        None => implied_network(&p),
    };
    let Policy {
        workspace,
        read,
        write,
        allow_hosts,
        host_ports,
        publish,
        lane,
        timeout,
        memory_mb,
        env,
        backend,
        image,
        cwd,
        stdin,
        max_output,
        changes,
        snapshot,
        toolchains,
        secrets,
        allow_requests,
        upstream_ca,
        upstream_proxy,
        ..
    } = p;
    let workspace = match workspace {
        Some(w) => w,
        None => std::env::current_dir()
            .map_err(|e| Failure::invalid(format!("workspace: the current directory: {e}")))?,
    };
    let mut opts = SandboxOpts::new(workspace, argv);
    opts.read_only_paths = read;
    opts.writable_paths = write;
    opts.toolchains = toolchains;
    // A secret is named, with where its value is read from (the caller's environment or
    // a file), never given as a value: `NAME[=file:PATH]@HOST[,HOST...][:header=H]`.
    opts.secrets = secrets
        .iter()
        .map(|s| SecretSpec::parse(s).map_err(|e| Failure::invalid(format!("secrets: {e}"))))
        .collect::<Result<_, _>>()?;
    // Request rules, upstream authorities and the upstream proxy as the command takes them;
    // `Plan::new` checks them (a bad rule, an unreadable or non-PEM file, a URL that is not
    // `http://HOST:PORT`) before anything runs.
    opts.allow_requests = allow_requests;
    opts.upstream_cas = upstream_ca;
    opts.upstream_proxy = upstream_proxy;
    opts.network = network;
    opts.allow_hosts = allow_hosts;
    opts.host_ports = host_ports;
    opts.publish = publish
        .iter()
        .map(publish_entry)
        .collect::<Result<_, _>>()?;
    let published = Arc::new(Mutex::new(Vec::new()));
    if !opts.publish.is_empty() {
        let record = Arc::clone(&published);
        opts.on_published = Some(PublishSink(Arc::new(move |ps| {
            if let Ok(mut r) = record.lock() {
                r.extend(ps.iter().map(|p| (p.port, p.host.to_string())));
            }
        })));
    }
    opts.changes = match changes {
        "direct" => Changes::Direct,
        "discard" => Changes::Discard,
        "review" => Changes::Review,
        other => {
            return Err(Failure::invalid(format!(
                "changes: `{other}` is not one of \"direct\", \"discard\", \"review\""
            )))
        }
    };
    opts.snapshot = snapshot;
    opts.lane = lane
        .parse::<Lane>()
        .map_err(|e| Failure::invalid(format!("lane: {e}")))?;
    if let Some(t) = timeout {
        opts.timeout = Some(
            Duration::try_from_secs_f64(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    Failure::invalid(format!(
                        "timeout: {t} is not a number of seconds above zero"
                    ))
                })?,
        );
    }
    if let Some(mb) = memory_mb {
        opts.limits.memory_bytes = Some(
            mb.checked_mul(1 << 20)
                .filter(|b| *b > 0)
                .ok_or_else(|| Failure::invalid(format!("memory_mb: {mb} is not a limit")))?,
        );
    }
    if let Some(limit) = max_output {
        if limit == 0 {
            return Err(Failure::invalid("max_output: must be at least one byte"));
        }
        opts.output_limit = limit;
    }
    let mut env_policy = EnvPolicy::default();
    for (name, value) in env.unwrap_or_default() {
        match value {
            Some(v) => env_policy.set.push((name, v.into())),
            // None: pass the host's value, when it has one.
            None => env_policy.pass.push(name),
        }
    }
    opts.env = env_policy;
    opts.cwd = cwd;
    if let Some(stdin) = stdin {
        let bytes = if let Ok(s) = stdin.extract::<String>() {
            s.into_bytes()
        } else {
            stdin
                .extract::<Vec<u8>>()
                .map_err(|_| Failure::invalid("stdin: must be bytes or a string"))?
        };
        opts.stdin = Stdin::Bytes(bytes);
    }
    let mut config = Config::default();
    config.image = image;
    Ok(Request {
        opts,
        choice: Choice::parse(backend),
        config,
        published,
    })
}

/// How a run ended, as Python sees it.
#[pyclass(frozen, module = "sandbox")]
#[derive(Debug)]
struct Outcome {
    /// `exited`, `signaled`, `timed_out`, `killed` or `out_of_memory`.
    #[pyo3(get)]
    status: &'static str,
    /// The exit code, when it exited.
    #[pyo3(get)]
    code: Option<i32>,
    /// The signal, when a signal (not ours) ended it.
    #[pyo3(get)]
    signal: Option<i32>,
    /// The shell's number for it: the code, 128+N, 124 for a timeout.
    #[pyo3(get)]
    exit_status: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    #[pyo3(get)]
    stdout_truncated: bool,
    #[pyo3(get)]
    stderr_truncated: bool,
    /// Seconds from start to the last process's end.
    #[pyo3(get)]
    wall_time: f64,
    #[pyo3(get)]
    backend: &'static str,
    policy_json: String,
    denials_json: String,
    connections_json: String,
    /// With `changes="review"`: the change set, to apply or discard.
    changes: Option<ChangeSet>,
}

impl Outcome {
    /// What a program that could not be started ends as, the way a shell (and the
    /// command) says it: 127 when not found, 126 when not executable, the reason on
    /// stderr. Any other failure is given back, to be raised.
    fn not_started(e: SandboxError) -> Result<Self, SandboxError> {
        let code = if e.is_not_found() {
            127
        } else if e.is_not_executable() {
            126
        } else {
            return Err(e);
        };
        let f = Failure::from(e);
        Ok(Self {
            status: "exited",
            code: Some(code),
            signal: None,
            exit_status: code,
            stdout: Vec::new(),
            stderr: format!("sandbox: {}; remedy: {}\n", f.reason, f.remedy).into_bytes(),
            stdout_truncated: false,
            stderr_truncated: false,
            wall_time: 0.0,
            backend: "",
            policy_json: "{}".into(),
            denials_json: r#"{"entries":[],"more":0}"#.into(),
            connections_json: serde_json::to_string(&sandbox::Connections::default())
                .unwrap_or_else(|_| "{}".into()),
            changes: None,
        })
    }
}

fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".into())
}

impl From<&SandboxOutcome> for Outcome {
    fn from(o: &SandboxOutcome) -> Self {
        Self {
            status: o.status.kind(),
            code: o.status.code(),
            signal: o.status.signal(),
            exit_status: o.status.shell_code(),
            stdout: o.stdout.bytes.clone(),
            stderr: o.stderr.bytes.clone(),
            stdout_truncated: o.stdout.truncated,
            stderr_truncated: o.stderr.truncated,
            wall_time: o.wall_time.as_secs_f64(),
            backend: o.backend,
            policy_json: json_text(&o.policy),
            denials_json: json_text(&o.denials),
            connections_json: json_text(&o.connections),
            changes: o.changes.clone(),
        }
    }
}

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl Outcome {
    /// Standard output (head and tail around a marker line when truncated).
    #[getter]
    fn stdout<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.stdout)
    }

    /// Standard error (head and tail around a marker line when truncated).
    #[getter]
    fn stderr<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.stderr)
    }

    /// What was enforced, with the mechanism behind each limit (a dict).
    #[getter]
    fn policy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.policy_json)
    }

    /// What the sandbox refused while the command ran (a dict: `entries`, each with
    /// `kind`, `target`, `mechanism`, `count`; and `more`), as `sandbox run --json`.
    #[getter]
    fn denials<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.denials_json)
    }

    /// With network `proxy`: every connection attempt, allowed or denied (a dict:
    /// `entries` and `more`), as `sandbox run --json`.
    #[getter]
    fn connections<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.connections_json)
    }

    /// With `changes="review"`: what the command changed in its layer (a dict), else
    /// None. `apply_changes()` writes it into the workspace, `discard_changes()` drops it.
    #[getter]
    fn changes<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.changes
            .as_ref()
            .map(|set| json_loads(py, &json_text(set)))
            .transpose()
    }

    /// Write the reviewed changes into the workspace; a dict of what was done. Raises
    /// `SandboxError` and writes nothing when a change escapes the workspace or (unless
    /// `force`) a file it touches changed there since the run started.
    #[pyo3(signature = (force=false))]
    fn apply_changes<'py>(&self, py: Python<'py>, force: bool) -> PyResult<Bound<'py, PyAny>> {
        let set = self.changes.as_ref().ok_or_else(|| {
            Failure::invalid("changes: there is nothing to apply without changes=\"review\"")
                .into_py(py)
        })?;
        let report = py.detach(|| set.apply(force)).map_err(|e| {
            Failure {
                class: "SandboxError",
                reason: e.to_string(),
                remedy: "apply_changes(force=True) overwrites files that changed meanwhile; \
                         discard_changes() drops the change set"
                    .into(),
            }
            .into_py(py)
        })?;
        json_loads(py, &json_text(&report))
    }

    /// Drop the reviewed changes (the layer they are in is removed).
    fn discard_changes(&self) {
        if let Some(set) = &self.changes {
            set.discard();
        }
    }

    /// True when it exited with code 0.
    #[getter]
    fn ok(&self) -> bool {
        self.code == Some(0)
    }

    fn __repr__(&self) -> String {
        let opt = |v: Option<i32>| v.map_or("None".to_string(), |n| n.to_string());
        format!(
            "Outcome(status='{}', code={}, signal={}, backend='{}', wall_time={:.3}, \
             stdout={} bytes, stderr={} bytes)",
            self.status,
            opt(self.code),
            opt(self.signal),
            self.backend,
            self.wall_time,
            self.stdout.len(),
            self.stderr.len()
        )
    }
}

type Ended = Option<Result<Arc<Outcome>, Failure>>;

/// A running command: `wait()` for its outcome, `kill()` it from any thread.
#[pyclass(frozen, module = "sandbox")]
#[derive(Debug)]
struct Process {
    /// `None` when the program could not be started (its outcome is 127 or 126).
    sandbox: Option<Arc<DynSandbox>>,
    ended: watch::Receiver<Ended>,
    published: Arc<Mutex<Vec<(u16, String)>>>,
}

/// Choose the backend and start the command; the GIL is released meanwhile.
fn start_request(py: Python<'_>, req: Request) -> PyResult<Process> {
    let rt = runtime()?;
    let published = req.published;
    let started = py.detach(|| {
        rt.block_on(async move {
            let chosen = sandbox::select::select(&req.choice, &req.opts, &req.config).await?;
            let sandbox: Arc<DynSandbox> = Arc::from(chosen.backend.sandbox());
            sandbox.run(req.opts).await?;
            Ok::<_, SandboxError>(sandbox)
        })
    });
    let sandbox = match started {
        Ok(sandbox) => sandbox,
        Err(e) => match Outcome::not_started(e) {
            // A mistyped program is the command's failure, as in a shell: an outcome.
            Ok(outcome) => {
                let (_tx, ended) = watch::channel(Some(Ok(Arc::new(outcome))));
                return Ok(Process {
                    sandbox: None,
                    ended,
                    published,
                });
            }
            Err(e) => return Err(Failure::from(e).into_py(py)),
        },
    };
    let (tx, ended) = watch::channel(None);
    let waiter = Arc::clone(&sandbox);
    rt.spawn(async move {
        let r = waiter
            .wait()
            .await
            .map(|o| Arc::new(Outcome::from(&o)))
            .map_err(Failure::from);
        let _ = tx.send(Some(r));
    });
    Ok(Process {
        sandbox: Some(sandbox),
        ended,
        published,
    })
}

/// The task that waits for the command ended without an outcome (it panicked).
fn lost_waiter() -> Failure {
    Failure {
        class: "SandboxError",
        reason: "the command's waiter ended without an outcome".into(),
        remedy: "report this as a bug".into(),
    }
}

fn outcome_or_raise(py: Python<'_>, r: Result<Arc<Outcome>, Failure>) -> PyResult<Py<Outcome>> {
    match r {
        Ok(o) => Py::new(py, clone_outcome(&o)),
        Err(f) => Err(f.into_py(py)),
    }
}

fn clone_outcome(o: &Outcome) -> Outcome {
    Outcome {
        status: o.status,
        code: o.code,
        signal: o.signal,
        exit_status: o.exit_status,
        stdout: o.stdout.clone(),
        stderr: o.stderr.clone(),
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        wall_time: o.wall_time,
        backend: o.backend,
        policy_json: o.policy_json.clone(),
        denials_json: o.denials_json.clone(),
        connections_json: o.connections_json.clone(),
        changes: o.changes.clone(),
    }
}

#[pymethods]
impl Process {
    /// Block until the command and all its descendants are gone; the `Outcome`. The GIL
    /// is released while waiting; Ctrl-C kills the command's tree, then raises
    /// `KeyboardInterrupt`.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<Outcome>> {
        let rt = runtime()?;
        loop {
            let mut ended = self.ended.clone();
            let r = py.detach(|| {
                rt.block_on(async {
                    match tokio::time::timeout(SIGNAL_POLL, ended.wait_for(Option::is_some)).await {
                        Err(_elapsed) => None,
                        Ok(Ok(v)) => v.clone(),
                        Ok(Err(_)) => Some(Err(lost_waiter())),
                    }
                })
            });
            if let Some(r) = r {
                return outcome_or_raise(py, r);
            }
            if let Err(interrupted) = py.check_signals() {
                self.kill(py)?;
                return Err(interrupted);
            }
        }
    }

    /// Call `callback(outcome, error)` (one of them None) from a runtime thread once the
    /// command has ended: how the asyncio API waits without a thread of its own.
    fn on_done(&self, callback: Py<PyAny>) -> PyResult<()> {
        let rt = runtime()?;
        let mut ended = self.ended.clone();
        rt.spawn(async move {
            let r = match ended.wait_for(Option::is_some).await {
                Ok(v) => v.clone(),
                Err(_) => None,
            };
            let r = r.unwrap_or_else(|| Err(lost_waiter()));
            // The GIL may take a while to get: not on a runtime worker.
            let _ = tokio::task::spawn_blocking(move || {
                Python::attach(|py| {
                    let (outcome, error): (Option<Py<Outcome>>, Option<PyErr>) = match r {
                        Ok(o) => match Py::new(py, clone_outcome(&o)) {
                            Ok(o) => (Some(o), None),
                            Err(e) => (None, Some(e)),
                        },
                        Err(f) => (None, Some(f.into_py(py))),
                    };
                    let error = error.map(|e| e.into_value(py));
                    if let Err(e) = callback.call1(py, (outcome, error)) {
                        e.write_unraisable(py, None);
                    }
                })
            })
            .await;
        });
        Ok(())
    }

    /// Kill the command and every descendant; returns once they are gone. Does nothing
    /// after the end.
    fn kill(&self, py: Python<'_>) -> PyResult<()> {
        let rt = runtime()?;
        let Some(sandbox) = self.sandbox.clone() else {
            return Ok(());
        };
        py.detach(|| rt.block_on(async move { sandbox.kill().await }))
            .map_err(|e| Failure::from(e).into_py(py))
    }

    /// With `publish`: where each of the command's ports is reached on the host, as
    /// {port: "127.0.0.1:HOSTPORT"}, known once bound (before the command starts).
    #[getter]
    fn published(&self) -> HashMap<u16, String> {
        self.published
            .lock()
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// True once the command and every descendant are gone.
    #[getter]
    fn done(&self) -> bool {
        self.ended.borrow().is_some()
    }
}

/// Start `argv` in a sandbox and return the running `Process` (`sandbox.run` is this, then
/// `wait()`).
#[pyfunction]
#[pyo3(signature = (
    argv, *, workspace=None, read=Vec::new(), write=Vec::new(), network=None,
    allow_hosts=Vec::new(), host_ports=Vec::new(), publish=Vec::new(), lane="strict",
    timeout=None, memory_mb=None, env=None, backend="auto", image=None, cwd=None, stdin=None,
    max_output=None, changes="direct", snapshot=false, toolchains=Vec::new(),
    secrets=Vec::new(), allow_requests=Vec::new(), upstream_ca=Vec::new(), upstream_proxy=None
))]
#[allow(clippy::too_many_arguments)]
fn start<'py>(
    py: Python<'py>,
    argv: &Bound<'py, PyAny>,
    workspace: Option<PathBuf>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    network: Option<&str>,
    allow_hosts: Vec<String>,
    host_ports: Vec<u16>,
    publish: Vec<Bound<'py, PyAny>>,
    lane: &str,
    timeout: Option<f64>,
    memory_mb: Option<u64>,
    env: Option<HashMap<String, Option<String>>>,
    backend: &str,
    image: Option<String>,
    cwd: Option<PathBuf>,
    stdin: Option<&Bound<'py, PyAny>>,
    max_output: Option<usize>,
    changes: &str,
    snapshot: bool,
    toolchains: Vec<PathBuf>,
    secrets: Vec<String>,
    allow_requests: Vec<String>,
    upstream_ca: Vec<PathBuf>,
    upstream_proxy: Option<String>,
) -> PyResult<Process> {
    let policy = Policy {
        workspace,
        read,
        write,
        network,
        allow_hosts,
        host_ports,
        publish,
        lane,
        timeout,
        memory_mb,
        env,
        backend,
        image,
        cwd,
        stdin,
        max_output,
        changes,
        snapshot,
        toolchains,
        secrets,
        allow_requests,
        upstream_ca,
        upstream_proxy,
    };
    let req = request(argv, policy).map_err(|f| f.into_py(py))?;
    start_request(py, req)
}

/// What each compiled-in backend can do on this host, and the fix where it cannot, as the
/// JSON text of `sandbox doctor --json`.
#[pyfunction]
#[pyo3(signature = (image=None))]
fn doctor_json(py: Python<'_>, image: Option<String>) -> PyResult<String> {
    let rt = runtime()?;
    let mut config = Config::default();
    config.image = image;
    let report = py.detach(|| rt.block_on(sandbox::doctor::doctor(&config)));
    serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The same report as `sandbox doctor` prints it.
#[pyfunction]
#[pyo3(signature = (image=None))]
fn doctor_text(py: Python<'_>, image: Option<String>) -> PyResult<String> {
    let rt = runtime()?;
    let mut config = Config::default();
    config.image = image;
    let report = py.detach(|| rt.block_on(sandbox::doctor::doctor(&config)));
    Ok(report.to_string())
}

#[pymodule]
fn _sandbox(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Outcome>()?;
    m.add_class::<Process>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_json, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_text, m)?)?;
    Ok(())
}
