//! `sandbox run`: options to a sandbox, the program's output to the terminal as it comes,
//! its status to ours.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use tokio::signal::unix::{signal, Signal, SignalKind};

use sandbox::select::{self, Choice, Config};
use sandbox::{
    Changes, Connections, Denials, DynSandbox, EffectivePolicy, EnvPolicy, Plan, SandboxError,
    SandboxOpts, SandboxOutcome, Status,
};

use crate::args::{ChangesArg, RunArgs};
use crate::changes;
use crate::config::{self, RunSpec};
use crate::error::{over_grants, trusted_lane_hint, CliError};
use crate::startup;
use crate::stream::{Dest, Terminal};

/// The signal a shell pipeline's writer dies of when its reader goes away; the same on
/// every Linux architecture.
const SIGPIPE: i32 = 13;

/// Run the command; the exit status of `sandbox`.
pub async fn run(args: RunArgs) -> i32 {
    let json = args.json;
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            let (reason, remedy) = e.explain();
            eprintln!("sandbox: {reason}; remedy: {remedy}");
            if json {
                print_json(&JsonError {
                    status: "error",
                    exit_status: e.exit_code(),
                    error: ErrorBody {
                        kind: e.kind(),
                        reason,
                        remedy,
                    },
                });
            }
            e.exit_code()
        }
    }
}

/// The signals that end `sandbox` itself. Once we handle them the program would
/// otherwise outlive us, so each one kills the program's tree before we exit 128+N.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub fn new() -> Result<Self, CliError> {
        let on = |kind: SignalKind| {
            signal(kind).map_err(|source| CliError::Host {
                context: "installing signal handlers",
                source,
            })
        };
        Ok(Self {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The number of the next signal that arrives.
    pub async fn recv(&mut self) -> i32 {
        let kind = tokio::select! {
            _ = self.int.recv() => SignalKind::interrupt(),
            _ = self.term.recv() => SignalKind::terminate(),
            _ = self.hup.recv() => SignalKind::hangup(),
        };
        kind.as_raw_value()
    }
}

async fn run_inner(args: RunArgs) -> Result<i32, CliError> {
    let mut signals = Signals::new()?;
    let cwd = std::env::current_dir().map_err(|source| CliError::Host {
        context: "reading the current directory",
        source,
    })?;
    let json = args.json;
    let changes_diff = args.changes_diff;
    let changes_force = args.changes_force;
    let args_quiet = args.quiet;
    let spec = config::resolve(args.policy, &cwd)?;
    // `--snapshot` (policy) is `--changes discard` (how this run's writes are handled).
    let changes_mode = match (args.changes, spec.snapshot) {
        (Some(c), true) if c != ChangesArg::Discard => {
            return Err(CliError::option(
                "changes",
                "--snapshot means --changes discard; give one or the other",
            ))
        }
        (c, true) => c.or(Some(ChangesArg::Discard)),
        (c, false) => c,
    };
    if changes_diff && changes_mode.is_none() {
        return Err(CliError::option(
            "changes-diff",
            "shows the change set of --changes ask|apply|discard; give one",
        ));
    }
    if changes_force && !matches!(changes_mode, Some(ChangesArg::Apply | ChangesArg::Ask)) {
        return Err(CliError::option(
            "changes-force",
            "forces --changes apply|ask over a conflict; give one",
        ));
    }
    let terminal = Terminal::new(
        if json { Dest::Stderr } else { Dest::Stdout },
        spec.max_output,
    );
    let mut opts = policy_opts(&spec, args.command)?;
    opts.changes = match changes_mode {
        None => Changes::Direct,
        Some(ChangesArg::Discard) => Changes::Discard,
        Some(ChangesArg::Ask | ChangesArg::Apply) => Changes::Review,
    };
    // A person in a subdirectory of the workspace means to run the command there.
    if let (Ok(ws), Ok(here)) = (spec.workspace.canonicalize(), cwd.canonicalize()) {
        if here.starts_with(&ws) {
            opts.cwd = Some(here);
        }
    }
    opts.output_sink = Some(terminal.sink());
    let memory_limit = opts.limits.memory_bytes;
    let (choice, config) = choice_of(&spec);

    // No preflight here unless `auto` has nothing cached: a launch that fails is
    // diagnosed below.
    let chosen = tokio::select! {
        s = startup::choose(&choice, &opts, &config) => {
            s.map_err(|e| with_hint(e, &opts, &config))?
        }
        n = signals.recv() => return Ok(128 + n),
    };
    let backend = Arc::clone(&chosen.backend);
    // A discarded change set is still shown (`--changes-diff`) and listed (`--json`):
    // the layer is kept for the review where the backend can, and thrown away after it.
    if changes_mode == Some(ChangesArg::Discard) && (changes_diff || json) {
        let mut review = opts.clone();
        review.changes = Changes::Review;
        if Plan::new(&review, backend.name(), &backend.capability()).is_ok() {
            opts = review;
        } else if changes_diff {
            eprintln!(
                "sandbox: backend `{}` keeps no change set to show: the changes will be \
                 discarded unseen",
                backend.name()
            );
        }
    }
    if !json {
        match &chosen.plan {
            Some(plan) => warn_over_grants(plan, backend.name()),
            None => {
                if let Ok(plan) = Plan::new(&opts, backend.name(), &backend.capability()) {
                    warn_over_grants(&plan, backend.name());
                }
            }
        }
    }

    let sandbox: Arc<DynSandbox> = Arc::from(backend.sandbox());
    // Raced against the signals: `run` may first copy the workspace (`--snapshot`), which
    // can take long; a signal then drops it, which stops the copy and removes what it
    // made, and nothing was started. Once the command runs, a signal is handled below.
    // A launch that fails started nothing; the preflight says why.
    tokio::select! {
        r = sandbox.run(opts) => {
            if let Err(e) = r {
                let e = startup::diagnose(&chosen, e).await;
                // A program missing from an image: the backend works (doctor would say
                // so); the image lacks it.
                let hint = (e.is_not_found() && !backend.capability().host_programs).then(|| {
                    format!(
                        "check the name, or run it in an image that holds it: `sandbox image \
                         --from-host` builds one of this host's system directories (then \
                         `--image {}`)",
                        crate::args::HOST_IMAGE_TAG
                    )
                });
                return Err(CliError::Sandbox { source: e, hint });
            }
        }
        n = signals.recv() => return Ok(128 + n),
    }
    let (outcome, by_signal) = tokio::select! {
        o = sandbox.wait() => (o?, None),
        n = signals.recv() => {
            sandbox.kill().await?;
            (sandbox.wait().await?, Some(n))
        }
        () = terminal.closed() => {
            sandbox.kill().await?;
            (sandbox.wait().await?, Some(SIGPIPE))
        }
    };
    terminal.finish();
    // An exit status of 124 or 137 alone does not say the sandbox ended the command.
    if by_signal.is_none() {
        if let Some(line) = ended_by_sandbox(outcome.status, spec.timeout, memory_limit) {
            eprintln!("{line}");
        }
    }
    // After the command's own output: what the proxy refused, and each allowed connection
    // it could not make, one line each with its reason; then the summary, which counts the
    // refusals without naming them again.
    // A host name is the command's choice (SOCKS5 takes any bytes): escaped on a terminal.
    let on_terminal = std::io::stderr().is_terminal();
    for line in outcome.connection_lines() {
        if on_terminal {
            eprintln!("{}", sandbox::escape(line.as_bytes()));
        } else {
            eprintln!("{line}");
        }
    }
    if !args_quiet {
        if let Some(line) = outcome
            .denials
            .summary_besides(Some(sandbox::DenialMechanism::Proxy))
        {
            eprintln!("sandbox: {line}");
        }
    }
    let mut code = by_signal.map_or(outcome.status.shell_code(), |n| 128 + n);
    // A change set is only acted on when the command ended by itself.
    let settled = match (&outcome.changes, changes_mode, by_signal) {
        (Some(set), Some(mode), None) => Some(changes::settle(
            set,
            changes::Review {
                mode,
                diff: changes_diff,
                force: changes_force,
            },
        )),
        (Some(set), Some(_), Some(_)) => {
            set.discard();
            eprintln!("sandbox: interrupted: the command's changes were discarded");
            None
        }
        _ => None,
    };
    if settled.as_ref().is_some_and(|s| s.failed) {
        code = crate::error::SANDBOX_FAILED;
    }
    if json {
        let mut j = JsonOutcome::new(&outcome, code);
        j.changes_settled = settled.as_ref();
        print_json(&j);
    }
    Ok(code)
}

/// The line that says the sandbox ended the command, with the option that decided it: a
/// timeout, or the out-of-memory killer at the memory limit.
fn ended_by_sandbox(
    status: Status,
    timeout: Option<std::time::Duration>,
    memory: Option<u64>,
) -> Option<String> {
    match status {
        Status::TimedOut => Some(format!(
            "sandbox: timed out after {} s: the command's whole process tree was killed \
             (exit 124); remedy: a longer --timeout",
            timeout.map_or(0.0, |t| t.as_secs_f64())
        )),
        Status::OutOfMemory => Some(format!(
            "sandbox: out of memory: the command used its whole {} and was killed (exit \
             137); remedy: a higher --memory",
            memory.map_or("memory limit".to_string(), |m| format!(
                "memory limit of {} MiB",
                m >> 20
            ))
        )),
        _ => None,
    }
}

/// The backend the policy names (or `auto`), and the selection's configuration, with this
/// user's record of the backends' host facts (so the command forks no host probe).
pub fn choice_of(spec: &RunSpec) -> (Choice, Config) {
    let choice = Choice::parse(spec.backend.name());
    let mut config = Config::default();
    config.image = spec.image.clone();
    (choice, startup::with_fact_cache(config))
}

/// A policy refusal gets the command line's remedy when `--lane trusted` is what it takes
/// (how `--backend none` learns where it runs).
pub fn with_hint(e: SandboxError, opts: &SandboxOpts, config: &Config) -> CliError {
    let hint = match &e {
        SandboxError::PolicyRefused { backend, .. } => select::backend(backend, config)
            .ok()
            .and_then(|b| trusted_lane_hint(opts, b.name(), &b.capability())),
        _ => None,
    };
    CliError::Sandbox { source: e, hint }
}

/// On a lane that accepts over-grants, say on stderr what `plan` does not enforce, before
/// the run.
fn warn_over_grants(plan: &Plan, backend: &str) {
    let over = over_grants(&plan.grants);
    if !over.is_empty() {
        eprintln!(
            "sandbox: warning: on lane `{}` backend `{backend}` does not enforce: {}",
            plan.lane,
            over.join(", ")
        );
    }
}

/// The library's options for running `argv` under the host's policy `spec`: the one place
/// both `sandbox run` and `sandbox mcp` turn the policy into options.
pub fn policy_opts(spec: &RunSpec, argv: Vec<OsString>) -> Result<SandboxOpts, CliError> {
    let mut opts = SandboxOpts::new(&spec.workspace, argv);
    if !spec.writable_git {
        opts.readonly_carveouts = crate::git::carveouts(&spec.workspace);
    }
    opts.read_only_paths = spec.read.clone();
    opts.writable_paths = spec.write.clone();
    opts.network = spec.network;
    opts.allow_hosts = spec.allow_hosts.clone();
    opts.secrets = spec.secrets.clone();
    opts.upstream_cas = spec.upstream_ca.clone();
    opts.upstream_proxy = spec.upstream_proxy.clone();
    opts.allow_requests = spec.allow_requests.clone();
    opts.host_ports = spec.host_ports.clone();
    opts.publish = spec.publish.clone();
    if !opts.publish.is_empty() {
        // Where each port is, as soon as it is bound: the caller connects while it runs.
        opts.on_published = Some(sandbox_core::PublishSink(std::sync::Arc::new(|ps| {
            for p in ps {
                eprintln!(
                    "sandbox: published the command's 127.0.0.1:{} on {}",
                    p.port, p.host
                );
            }
        })));
    }
    opts.lane = spec.lane;
    opts.timeout = spec.timeout;
    if let Some(limit) = spec.max_output {
        opts.output_limit = limit;
    }
    if let Some(limit) = spec.memory_bytes {
        opts.limits.memory_bytes = limit;
    }
    opts.snapshot = spec.snapshot;
    opts.env = env_policy(&spec.env)?;
    opts.toolchains = spec.toolchains.clone();
    toolchain_env(&spec.toolchains, &mut opts.env);
    Ok(opts)
}

/// With toolchains: the caller's `PATH`, and `RUSTUP_HOME`/`CARGO_HOME` at the caller's
/// real homes when one is granted (inside, `HOME` is the workspace, where rustup and
/// cargo would look otherwise). What `--env` names itself is left as given.
fn toolchain_env(toolchains: &[PathBuf], env: &mut EnvPolicy) {
    if toolchains.is_empty() {
        return;
    }
    let named = |env: &EnvPolicy, n: &str| {
        env.pass.iter().any(|p| p == n) || env.set.iter().any(|(k, _)| k == n)
    };
    if !named(env, "PATH") {
        env.pass.push("PATH".into());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let canon = |p: PathBuf| p.canonicalize().unwrap_or(p);
    let granted: Vec<PathBuf> = toolchains.iter().cloned().map(canon).collect();
    for (var, default) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
        if named(env, var) {
            continue;
        }
        let Some(dir) = std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
            .map(canon)
        else {
            continue;
        };
        // Cargo's home counts as granted when its `bin` is: that is what it finds tools by.
        if granted.iter().any(|g| g == &dir || g.starts_with(&dir)) {
            env.set.push((var.into(), dir.into_os_string()));
        }
    }
}

/// `NAME` passes the host's value, `NAME=VALUE` sets one.
fn env_policy(items: &[OsString]) -> Result<EnvPolicy, CliError> {
    let mut env = EnvPolicy::default();
    for item in items {
        let bytes = item.as_bytes();
        let (name, value) = match bytes.iter().position(|&b| b == b'=') {
            Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
            None => (bytes, None),
        };
        let name = std::str::from_utf8(name)
            .ok()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                CliError::option(
                    "env",
                    format!(
                        "`{}` does not start with a variable name",
                        item.to_string_lossy()
                    ),
                )
            })?
            .to_string();
        match value {
            Some(v) => env.set.push((name, OsString::from_vec(v.to_vec()))),
            None => env.pass.push(name),
        }
    }
    Ok(env)
}

/// Written with `writeln!`, not `println!`: a reader that closed its end (`| head`) is no
/// reason to panic after the run; the outcome's exit code still tells what happened.
fn print_json<T: Serialize>(value: &T) {
    use std::io::Write;
    match serde_json::to_string(value) {
        Ok(s) => {
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, "{s}").and_then(|()| out.flush()) {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("sandbox: could not write the JSON outcome: {e}");
                }
            }
        }
        Err(e) => eprintln!("sandbox: could not write the JSON outcome: {e}"),
    }
}

/// The `--json` outcome.
#[derive(Debug, Serialize)]
struct JsonOutcome<'a> {
    /// `exited`, `signaled`, `timed_out`, `killed` or `out_of_memory`.
    status: &'static str,
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    wall_time_secs: f64,
    stdout_truncated: bool,
    stderr_truncated: bool,
    stdout_bytes: u64,
    stderr_bytes: u64,
    backend: &'static str,
    /// What `sandbox run` exits with.
    exit_status: i32,
    policy: &'a EffectivePolicy,
    /// With `--changes`: every change the command made in its layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<changes::JsonChanges<'a>>,
    /// With `--changes`: whether they were applied, and why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    changes_settled: Option<&'a changes::Settled>,
    /// Network `proxy`: every connection attempt, allowed or denied (alike ones one entry
    /// with a count; bounded, the rest counted).
    connections: &'a Connections,
    /// What was refused while it ran, as far as the backend sees (`doctor` shows which
    /// kinds each backend reports).
    denials: &'a Denials,
}

impl<'a> JsonOutcome<'a> {
    fn new(o: &'a SandboxOutcome, exit_status: i32) -> Self {
        Self {
            status: o.status.kind(),
            exit_code: o.status.code(),
            signal: o.status.signal(),
            timed_out: o.status == Status::TimedOut,
            wall_time_secs: o.wall_time.as_secs_f64(),
            stdout_truncated: o.stdout.truncated,
            stderr_truncated: o.stderr.truncated,
            stdout_bytes: o.stdout.total_bytes,
            stderr_bytes: o.stderr.total_bytes,
            backend: o.backend,
            exit_status,
            policy: &o.policy,
            changes: o.changes.as_ref().map(changes::JsonChanges),
            changes_settled: None,
            connections: &o.connections,
            denials: &o.denials,
        }
    }
}

/// The `--json` object when nothing ran, or the run failed.
#[derive(Debug, Serialize)]
struct JsonError {
    status: &'static str,
    exit_status: i32,
    error: ErrorBody,
}

#[derive(Debug, Serialize)]
struct ErrorBody {
    kind: &'static str,
    reason: String,
    remedy: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_and_an_oom_kill_each_say_so_in_one_line() {
        use std::time::Duration;
        let t =
            ended_by_sandbox(Status::TimedOut, Some(Duration::from_millis(1500)), None).unwrap();
        assert!(
            t.contains("timed out after 1.5 s") && t.contains("--timeout"),
            "{t}"
        );
        let m = ended_by_sandbox(Status::OutOfMemory, None, Some(64 << 20)).unwrap();
        assert!(m.contains("64 MiB") && m.contains("--memory"), "{m}");
        for line in [t, m] {
            assert!(!line.contains('\n') && line.len() < 160, "{line}");
        }
        assert_eq!(
            ended_by_sandbox(Status::Exited { code: 124 }, None, None),
            None
        );
        assert_eq!(ended_by_sandbox(Status::Killed, None, None), None);
    }

    #[test]
    fn env_items_pass_or_set() {
        let env = env_policy(&["HOME_X".into(), "A=b=c".into(), "E=".into()]).unwrap();
        assert_eq!(env.pass, ["HOME_X"]);
        assert_eq!(
            env.set,
            [
                ("A".to_string(), "b=c".into()),
                ("E".to_string(), "".into())
            ]
        );
        assert!(env_policy(&["=x".into()]).is_err());
        assert!(env_policy(&["".into()]).is_err());
    }
}
