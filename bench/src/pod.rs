//! The pod case (issue 32): what a run costs where no namespace can be made, as inside a
//! default container or Kubernetes pod, where the landlock backend confines by its seccomp
//! filter and landlock alone and mediates `connect` for network `proxy`.
//!
//! # The condition, made on the host
//!
//! The bench does not run itself in a container (that would need an image of its whole
//! build and of every baseline). It makes the condition a pod gives the backend exactly as
//! `sandbox-landlock/tests/mediated.rs` does: a worker (this binary, `sandbox-bench
//! pod-worker`) starts in a user namespace of its own whose `user.max_user_namespaces` is
//! 0, as an unprivileged uid there (65534 when the bench is root), so the kernel refuses
//! it every namespace and no cgroup is writable. The backend's own probes then find no
//! namespaces and take the paths they take in a pod; each run checks its record says so.
//! What stays different from a default container: the engine's seccomp profile (the
//! backend's own filter is stricter and is applied either way) and a masked `/proc` (read
//! only on `strict`, which is refused there).
//!
//! # Rows
//!
//! - Start-up of `/bin/true` on `fast` through the library in the worker, against
//!   `sandbox-bench-launch` spawned by the worker: a small process of its own that builds
//!   the same launch through the backend's own pure functions (the same ruleset, the same
//!   filter, the same steps between fork and exec) for the same request with the facts the
//!   worker's backend recorded, applies it and execs. Not a fork of the bench: that would
//!   measure the bench's size. A bare spawn in the worker is shown for information.
//! - Connection set-up through the proxy from inside a sandbox (connect, `CONNECT` by name,
//!   the first byte of the answer, timed by the command itself) with the mediated door in
//!   the worker, against the same on the host through the network-namespace door.
//!
//! The worker answers one timed run per line it reads, so the parent interleaves the
//! variants in and out of it with the same loop as every other row.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::record::{Door, Enforced, Namespaces};
use sandbox_core::{Backend, DoorPlace, Enforcement, Lane, NetworkMode, SandboxOpts};
use sandbox_proxy::TableResolver;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::budget::{Budget, Target};
use crate::egress::{Server, LO, NAME};
use crate::error::BenchError;
use crate::measure::{interleaved, Probe};
use crate::runs;
use crate::stats::{fmt_duration, fmt_ratio, Samples};
use crate::subject::{Direct, Host, Subject};
use crate::table::{Row, Verdict};

/// Issue 32: a run with no namespaces on `fast` at most 1.2 times a launcher that applies
/// the same ruleset and filter and execs.
const VS_LAUNCHER: Target = Target::AtMost(1.2);

/// Issue 32: a mediated connect adds at most 1 ms over the namespace door (medians).
const MEDIATED_ADDED: Duration = Duration::from_millis(1);

/// The uid the worker runs as when the bench is root: an unprivileged one, as in a pod.
const NOBODY: u32 = 65534;

/// How the rows say where they ran (the notes under the table say how: [`NOTE`]).
const CONDITION: &str = "without namespaces (a pod's condition made on the host, see the notes)";

/// The note under the table for these rows.
pub const NOTE: &str = "Without namespaces (a pod's condition): a worker process of the \
                        bench in a user namespace of its own whose \
                        `user.max_user_namespaces` is 0, unprivileged there (uid 65534 when \
                        the bench is root), so the kernel refuses it every namespace and no \
                        cgroup is writable, as in a default container; each run's record \
                        must say so (`none` held without a namespace, the mediated door). \
                        Not a container: the engine's seccomp profile is absent (the \
                        backend's own filter is applied either way) and `/proc` is not \
                        masked (only `strict` reads it, and it is refused there). The \
                        launcher baseline is `sandbox-bench-launch` run by the worker, held \
                        once it has built the launch and timed from the go; the \
                        connection set-up is timed by the command inside the sandbox.";

/// What the worker says first: where it stands.
#[derive(Debug)]
struct Hello {
    /// The door the backend uses there.
    door: DoorPlace,
    /// Why the launcher baseline cannot run there (`None`: it can).
    no_launcher: Option<String>,
}

/// The worker process and its two pipes.
struct Worker {
    child: Child,
    io: Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    /// Its directory (its `TMPDIR` and the copies of the binaries it runs).
    _dir: tempfile::TempDir,
}

impl Worker {
    /// Start the worker for backend `name`; `Ok(Err(reason))` where the condition cannot be
    /// made on this host (no unprivileged user namespaces: the bench itself runs in a
    /// container) or the backend cannot run in it.
    async fn start(
        name: &str,
        launcher: Option<&Path>,
    ) -> Result<Result<(Self, Hello), String>, BenchError> {
        let what = "the worker without namespaces";
        let io = |e| BenchError::io(what, e);
        // SAFETY: plain queries.
        let (uid, gid) = if unsafe { libc::geteuid() } == 0 {
            (NOBODY, NOBODY)
        } else {
            // SAFETY: plain queries.
            unsafe { (libc::getuid(), libc::getgid()) }
        };
        // Everything the worker runs sits in a directory it owns: its uid may not reach the
        // build tree.
        let dir = tempfile::Builder::new()
            .prefix("sandbox-bench-pod-")
            .tempdir()
            .map_err(io)?;
        let copy = |from: &Path, to: &str| -> std::io::Result<PathBuf> {
            let to = dir.path().join(to);
            std::fs::copy(from, &to)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
            Ok(to)
        };
        let exe = copy(&std::env::current_exe().map_err(io)?, "sandbox-bench").map_err(io)?;
        let launcher = launcher
            .map(|l| copy(l, "sandbox-bench-launch"))
            .transpose()
            .map_err(io)?;
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).map_err(io)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).map_err(io)?;

        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("pod-worker")
            .arg(name)
            .env("TMPDIR", &tmp)
            .env("HOME", &tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(l) = &launcher {
            cmd.arg(l);
        }
        let maps = IdMaps::new(uid, gid);
        // SAFETY: between fork and exec only raw system calls on data made before the fork
        // (`IdMaps::enter`).
        unsafe {
            cmd.pre_exec(move || maps.enter());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Ok(Err(format!(
                    "the condition cannot be made here (a user namespace of the bench's own, \
                     as uid {uid}): {e}"
                )))
            }
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BenchError::wrong(what, "its pipes were not made"));
        };
        let mut lines = BufReader::new(stdout).lines();
        let first = lines
            .next_line()
            .await
            .map_err(io)?
            .ok_or_else(|| BenchError::wrong(what, "it ended before saying where it stands"))?;
        let hello: serde_json::Value = serde_json::from_str(&first)
            .map_err(|e| BenchError::wrong(what, format!("its first line {first:?}: {e}")))?;
        let worker = Self {
            child,
            io: Mutex::new((stdin, lines)),
            _dir: dir,
        };
        Ok(match hello["unavailable"].as_str() {
            Some(reason) => {
                worker.finish().await;
                Err(reason.to_string())
            }
            None => Ok((
                worker,
                Hello {
                    door: if hello["door"] == "mediated" {
                        DoorPlace::Mediated
                    } else {
                        DoorPlace::Namespace
                    },
                    no_launcher: hello["no_launcher"].as_str().map(String::from),
                },
            )),
        })
    }

    /// One timed run in the worker: its own figure.
    async fn ask(&self, request: String) -> Result<Duration, BenchError> {
        let what = format!("`{request}` in the worker without namespaces");
        let mut io = self.io.lock().await;
        let (stdin, lines) = &mut *io;
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .map_err(|e| BenchError::io(&what, e))?;
        let answer = lines
            .next_line()
            .await
            .map_err(|e| BenchError::io(&what, e))?
            .ok_or_else(|| BenchError::wrong(&what, "the worker ended"))?;
        match answer.split_once(' ') {
            Some(("ok", nanos)) => nanos
                .parse::<u64>()
                .map(Duration::from_nanos)
                .map_err(|e| BenchError::wrong(&what, format!("{answer:?}: {e}"))),
            Some(("err", why)) => Err(BenchError::wrong(&what, why)),
            _ => Err(BenchError::wrong(&what, format!("answered {answer:?}"))),
        }
    }

    /// End the worker: its standard input closes, it exits.
    async fn finish(mut self) {
        drop(self.io);
        let _ = self.child.wait().await;
    }
}

/// The worker's user namespace: its ids outside and in (the same numbers), written as
/// `uid_map` and `gid_map` after the `unshare`.
struct IdMaps {
    ids: (u32, u32),
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl IdMaps {
    fn new(uid: u32, gid: u32) -> Self {
        Self {
            ids: (uid, gid),
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        }
    }

    /// In the child between fork and exec: become the ids, enter a new user namespace
    /// that maps them to themselves, and set its `user.max_user_namespaces` to 0, so the
    /// program execed there (an unprivileged uid: no capabilities after the exec) can make
    /// no namespace at all.
    fn enter(&self) -> std::io::Result<()> {
        use sandbox_host::sys::{become_ids, raw_write_file};
        let (uid, gid) = self.ids;
        // SAFETY: the child of a fork has one thread; only raw system calls on data made
        // before the fork follow.
        unsafe {
            if libc::getuid() != uid {
                become_ids(uid, gid)?;
            }
            // A changed uid leaves the process undumpable, and its /proc/self files root's:
            // the maps below could not be written.
            if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            raw_write_file(c"/proc/self/setgroups", b"deny")?;
            raw_write_file(c"/proc/self/uid_map", &self.uid_map)?;
            raw_write_file(c"/proc/self/gid_map", &self.gid_map)?;
            raw_write_file(c"/proc/sys/user/max_user_namespaces", b"0")?;
        }
        Ok(())
    }
}

/// Options for the in-sandbox connection probe through the proxy to the server at `port`.
fn connect_opts(s: &Subject, lane: Lane, port: u16) -> SandboxOpts {
    let mut o = s.opts(vec![
        s.flood_program.clone(),
        "proxy-connect".into(),
        format!("{NAME}:{port}").into(),
    ]);
    o.lane = lane;
    o.network = NetworkMode::Proxy;
    o.allow_hosts = vec![format!("{NAME}:{port}")];
    o.resolver = Some(Arc::new(TableResolver::new().with(NAME, LO)));
    o
}

/// One sandbox run of the connection probe; the set-up time the command measured. The
/// run's record must name the door asked for.
async fn connect_run(
    backend: &Arc<dyn Backend>,
    opts: SandboxOpts,
    mediated: bool,
) -> Result<Duration, BenchError> {
    let what = "connection set-up through the proxy from inside the sandbox";
    let (_, outcome) = runs::library_run(backend, opts).await?;
    let door = outcome.policy.enforced.iter().find_map(|e| match e {
        Enforced::Door(d @ (Door::Mediated { .. } | Door::WaysOut { .. })) => Some(d),
        _ => None,
    });
    match (door, mediated) {
        (Some(Door::Mediated { .. }), true) | (Some(Door::WaysOut { .. }), false) => {}
        _ => {
            return Err(BenchError::wrong(
                what,
                format!(
                    "the run's door is {door:?}, not the {} door",
                    if mediated { "mediated" } else { "namespace" }
                ),
            ))
        }
    }
    let text = outcome.stdout.text();
    text.trim()
        .parse::<u64>()
        .map(Duration::from_nanos)
        .map_err(|e| BenchError::wrong(what, format!("the command printed {text:?}: {e}")))
}

/// The pod rows for `s`, with `launcher` (`sandbox-bench-launch`) as the baseline.
pub async fn measure(
    s: &Subject,
    launcher: Option<&Path>,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let startup_what = format!("start-up of `/bin/true` to outcome on `fast` {CONDITION}");
    let (worker, hello) = match Worker::start(s.name, launcher).await? {
        Ok(started) => started,
        Err(reason) => return Ok(vec![Row::not_measured(s.name, &startup_what, &reason)]),
    };
    let rows = rows(s, &worker, &hello, launcher.is_some(), budget).await;
    worker.finish().await;
    rows
}

async fn rows(
    s: &Subject,
    worker: &Worker,
    hello: &Hello,
    has_launcher: bool,
    budget: &Budget,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let startup_what = format!("start-up of `/bin/true` to outcome on `fast` {CONDITION}");
    let mut probes: Vec<Probe<'_>> = vec![
        Box::new(|| Box::pin(worker.ask("bare".into()))),
        Box::new(|| Box::pin(worker.ask("run".into()))),
    ];
    let no_launcher = match (&hello.no_launcher, has_launcher) {
        (Some(why), _) => Some(why.clone()),
        (None, false) => Some(
            "no launcher given (--launcher-bin PATH; built next to \
                               sandbox-bench)"
                .to_string(),
        ),
        (None, true) => {
            probes.push(Box::new(|| Box::pin(worker.ask("launch".into()))));
            None
        }
    };
    let samples = interleaved(&probes, budget.startup).await?;
    let (bare, ours) = (&samples[0], &samples[1]);
    let row = |base: &Samples, label: &str, target: Option<Target>| {
        let r = ours.median().as_secs_f64() / base.median().as_secs_f64();
        Row {
            backend: s.name.into(),
            what: format!(
                "{startup_what}: `run` + `wait`, back to back, {} runs{}",
                ours.len(),
                if target.is_some() {
                    ""
                } else {
                    ", against a bare spawn"
                }
            ),
            median: fmt_duration(ours.median()),
            p95: fmt_duration(ours.p95()),
            ratio: fmt_ratio(r),
            baseline: format!(
                "{label}: {} (p95 {})",
                fmt_duration(base.median()),
                fmt_duration(base.p95())
            ),
            target: target.map_or("—".into(), |t| t.cell()),
            verdict: target.map_or(Verdict::NoTarget, |t| {
                Verdict::judge(t.met(r), budget.quick)
            }),
        }
    };
    match (no_launcher, samples.get(2)) {
        (None, Some(launch)) => rows.push(row(
            launch,
            "`sandbox-bench-launch` in the same condition, a process of its own that builds \
             the same launch with the backend's own functions (the same landlock ruleset and \
             seccomp filter, the same steps between fork and exec), held once built and timed \
             from the go: applying it, execve of `/bin/true`, its exit; no runtime, cgroup or \
             supervisor",
            Some(VS_LAUNCHER),
        )),
        (why, _) => rows.push(Row::not_measured(
            s.name,
            &format!("{startup_what}, against a launcher that applies the same ruleset and filter"),
            &why.unwrap_or_else(|| "the launcher baseline did not run".into()),
        )),
    }
    rows.push(row(
        bare,
        "bare spawn (tokio::process) in the same condition (for information)",
        None,
    ));

    // The mediated connect against the namespace door on the host.
    let connect_what = format!(
        "connection set-up through the proxy from inside the sandbox (connect, CONNECT by \
         name, first byte of the answer, timed by the command) with the mediated door \
         {CONDITION}"
    );
    let host_cap = s.backend.capability();
    let host_lane = if s.accepts(Lane::Fast) {
        Lane::Fast
    } else {
        s.lane
    };
    if hello.door != DoorPlace::Mediated {
        rows.push(Row::not_measured(
            s.name,
            &connect_what,
            "the backend does not mediate connect where no namespace can be made",
        ));
        return Ok(rows);
    }
    if host_cap.network_proxy != Enforcement::Exact || host_cap.door != DoorPlace::Namespace {
        rows.push(Row::not_measured(
            s.name,
            &connect_what,
            "on this host the backend has no network-namespace door to compare with",
        ));
        return Ok(rows);
    }
    let server = Server::start().await?;
    let host_opts = connect_opts(s, host_lane, server.port);
    let request = format!("connect {}", server.port);
    let probes: Vec<Probe<'_>> = vec![
        Box::new(|| {
            let o = host_opts.clone();
            Box::pin(async move { connect_run(&s.backend, o, false).await })
        }),
        Box::new(|| Box::pin(worker.ask(request.clone()))),
    ];
    let samples = interleaved(&probes, budget.startup).await?;
    drop(server);
    let (ns, mediated) = (&samples[0], &samples[1]);
    let added = mediated.median().saturating_sub(ns.median());
    rows.push(Row {
        backend: s.name.into(),
        what: format!(
            "{connect_what}, one connection per run, {} runs",
            mediated.len()
        ),
        median: fmt_duration(mediated.median()),
        p95: fmt_duration(mediated.p95()),
        ratio: format!("+{} added", fmt_duration(added)),
        baseline: format!(
            "the same from a sandbox on the host (lane {host_lane}) through the \
             network-namespace door: {} (p95 {})",
            fmt_duration(ns.median()),
            fmt_duration(ns.p95())
        ),
        target: format!("≤ {} added", fmt_duration(MEDIATED_ADDED)),
        verdict: Verdict::judge(added <= MEDIATED_ADDED, budget.quick),
    });
    Ok(rows)
}

/// `sandbox-bench pod-worker NAME [LAUNCHER]`: run in the condition [`Worker::start`]
/// makes. Says where it stands in one JSON line, then answers each request line with
/// `ok NANOS` or `err WHY`, until its standard input ends.
pub async fn worker(name: &str, launcher: Option<PathBuf>) -> ExitCode {
    let say = |v: serde_json::Value| {
        println!("{v}");
        let _ = std::io::stdout().flush();
    };
    let host = match Host::new() {
        Ok(h) => h,
        Err(e) => {
            say(json!({ "unavailable": format!("cannot set up the workspace: {e}") }));
            return ExitCode::FAILURE;
        }
    };
    let s = match Subject::open(name, &host).await {
        Ok(s) => s,
        Err(reason) => {
            say(json!({ "unavailable": format!("it cannot run here: {reason}") }));
            return ExitCode::SUCCESS;
        }
    };
    if s.lane != Lane::Fast {
        say(json!({
            "unavailable": format!("the strictest lane that runs it here is `{}`, not `fast`", s.lane)
        }));
        return ExitCode::SUCCESS;
    }
    let opts = s.opts(vec![s.true_program.clone()]);
    let facts = match host.write_facts() {
        Ok(f) => f,
        Err(e) => {
            say(json!({ "unavailable": format!("cannot write the facts: {e}") }));
            return ExitCode::FAILURE;
        }
    };
    let no_launcher = match (&s.direct, &launcher) {
        (Some(Direct::Launch { prepare, .. }), Some(_)) => match prepare(&opts) {
            Ok(l) if l.needs_host_alive() => Some(
                "the launch keeps host state alive while the command runs, which a launcher \
                 that execs the command cannot"
                    .to_string(),
            ),
            Ok(_) => None,
            Err(e) => Some(format!("preparing the launch: {e}")),
        },
        (_, None) => Some("no launcher given".to_string()),
        (_, Some(_)) => Some("it has no launch of its own".to_string()),
    };
    let door = match s.backend.capability().door {
        DoorPlace::Mediated => "mediated",
        DoorPlace::Namespace => "namespace",
    };
    say(json!({ "door": door, "no_launcher": no_launcher }));
    let launcher_args: Vec<OsString> = vec![
        s.name.into(),
        Lane::Fast.as_str().into(),
        s.workspace.clone().into_os_string(),
        facts.into_os_string(),
        "--".into(),
        s.true_program.clone(),
    ];
    let bare_argv = vec![host.true_program.as_os_str().to_owned()];
    // A blocking read on a thread of its own (the runtime here has no async stdin); not
    // in any timed span.
    let next_line = || {
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => None,
                Ok(_) => Some(line),
            }
        })
    };
    while let Ok(Some(line)) = next_line().await {
        let r = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["bare"] => runs::bare_spawn(&bare_argv).await,
            ["run"] => no_namespace_run(&s, opts.clone()).await,
            ["launch"] => match &launcher {
                Some(l) => held_launch(l, &launcher_args).await,
                None => Err(BenchError::wrong("the launcher", "none given")),
            },
            ["connect", port] => match port.parse::<u16>() {
                Ok(port) => connect_run(&s.backend, connect_opts(&s, Lane::Fast, port), true).await,
                Err(e) => Err(BenchError::wrong("the request", e.to_string())),
            },
            _ => Err(BenchError::wrong(
                "the request",
                format!("unknown: {line:?}"),
            )),
        };
        match r {
            Ok(d) => say_line(&format!("ok {}", d.as_nanos())),
            Err(e) => say_line(&format!("err {}", e.to_string().replace('\n', " "))),
        }
    }
    ExitCode::SUCCESS
}

fn say_line(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{s}");
    let _ = out.flush();
}

/// `sandbox-bench-launch` held once it has built the launch (`SANDBOX_BENCH_LAUNCH_HOLD`),
/// timed from the go to its exit: applying the launch and running the command, not
/// building it (the library builds its launch from caches, the launcher from nothing).
async fn held_launch(launcher: &Path, args: &[OsString]) -> Result<Duration, BenchError> {
    let what = "the held launcher";
    let io = |e| BenchError::io(what, e);
    let mut child = tokio::process::Command::new(launcher)
        .args(args)
        .env("SANDBOX_BENCH_LAUNCH_HOLD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io)?;
    let (Some(mut stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
        return Err(BenchError::wrong(what, "its pipes were not made"));
    };
    let mut lines = BufReader::new(stderr).lines();
    match lines.next_line().await.map_err(io)? {
        Some(l) if l == "prepared" => {}
        other => return Err(BenchError::wrong(what, format!("said {other:?}"))),
    }
    let start = Instant::now();
    stdin.write_all(b"g").await.map_err(io)?;
    drop(stdin);
    let status = child.wait().await.map_err(io)?;
    let took = start.elapsed();
    if !status.success() {
        let mut rest = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            rest.push(l);
        }
        return Err(BenchError::wrong(
            what,
            format!("{status}: {}", rest.join(" ")),
        ));
    }
    Ok(took)
}

/// A library run that must have made no namespace: its record says `none` was held
/// without one.
async fn no_namespace_run(s: &Subject, opts: SandboxOpts) -> Result<Duration, BenchError> {
    let (took, outcome) = runs::library_run(&s.backend, opts).await?;
    let without = outcome
        .policy
        .enforced
        .iter()
        .any(|e| matches!(e, Enforced::Namespaces(Namespaces::NoneWithoutNamespace)));
    if !without {
        return Err(BenchError::wrong(
            "a run without namespaces",
            format!("its record shows namespaces: {:?}", outcome.policy.enforced),
        ));
    }
    Ok(took)
}

/// `sandbox-bench proxy-connect HOST:PORT`, run inside a sandbox with network `proxy`:
/// connect to the proxy `http_proxy` names, `CONNECT` to the target, send a request and
/// read the first byte of the answer; prints the nanoseconds that took. Blocking calls on
/// purpose: the connect is the one call the mediated door traps.
pub fn proxy_connect(target: &str) -> Result<Duration, String> {
    let proxy = std::env::var("http_proxy").map_err(|_| "no http_proxy in the environment")?;
    let addr = proxy
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let start = Instant::now();
    let mut s =
        std::net::TcpStream::connect(addr.as_str()).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .map_err(|e| format!("CONNECT: {e}"))?;
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut b).map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err("the proxy closed".into());
        }
        got.extend_from_slice(&b[..n]);
    }
    if !got.starts_with(b"HTTP/1.1 200") {
        return Err(String::from_utf8_lossy(&got).into_owned());
    }
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .map_err(|e| format!("GET: {e}"))?;
    let mut one = [0u8; 1];
    if s.read(&mut one).map_err(|e| format!("reading: {e}"))? != 1 {
        return Err("no answer".into());
    }
    Ok(start.elapsed())
}
