//! Process lifetime: nothing outlives `wait`, `kill` or a timeout, not even a daemon that
//! double-forked and called `setsid`; host processes stay out of sight.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::{DynSandbox, Lane, SandboxOpts, Status};

use super::CaseResult;
use crate::context::{admits, describe, Context, Failure};
use crate::host::{processes_with_arg, wait_for_file, wait_gone};

/// How a daemon case ends its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Wait,
    Kill,
    Timeout,
}

/// How long after `wait`/`kill` returns the host keeps looking before it calls a process
/// a survivor (the contract says none is left when they return; this only absorbs the
/// host's own scheduling).
const GONE_LIMIT: Duration = Duration::from_secs(5);

async fn daemon(ctx: Arc<Context>, end: End) -> CaseResult {
    let lane = ctx.lane();
    daemon_with(ctx, end, false, lane).await
}

/// The context's lane, and `fast` too where the backend runs on it: a backend may hold the
/// tree another way there (landlock's `fast` has no pid namespace; its waiter is a child
/// subreaper), and sessions must be the command's own on both.
fn lanes(ctx: &Context) -> Vec<Lane> {
    let mut lanes = vec![ctx.lane()];
    if ctx.lane() != Lane::Fast && admits(ctx.backend_name(), ctx.capability(), Lane::Fast) {
        lanes.push(Lane::Fast);
    }
    lanes
}

/// A daemon as [`daemon`]'s, made `hard` (it ignores SIGTERM and keeps forking for two
/// seconds) and required to have had its `setsid`.
async fn daemon_with(ctx: Arc<Context>, end: End, hard: bool, lane: Lane) -> CaseResult {
    let ws = ctx.workspace("daemon")?;
    let pidfile = ws.join("daemon.pid");
    let release = ws.join("release");
    // The pidfile's path is in the probe's argv, and so in the daemon's (a fork keeps
    // it): a unique mark to find it in the host's /proc, whatever its pid namespace.
    let mark = pidfile.to_string_lossy().into_owned();
    let mut args = vec![
        OsStr::new("daemonize"),
        pidfile.as_os_str(),
        release.as_os_str(),
    ];
    if hard {
        args.push(OsStr::new("hard"));
    }
    let mut opts = ctx.opts(ws.path(), args);
    opts.lane = lane;
    if end == End::Timeout {
        opts.timeout = Some(Duration::from_secs(10));
    }
    let sb: Arc<DynSandbox> = Arc::from(ctx.sandbox());
    sb.run(opts).await?;
    if !wait_for_file(&pidfile, Duration::from_secs(60)).await {
        let _ = sb.kill().await;
        let out = sb.wait().await?;
        return Err(Failure::Broken(format!(
            "the daemon never wrote its pidfile: {}",
            describe(&out)
        )));
    }
    let daemon_line = std::fs::read_to_string(&pidfile).unwrap_or_default();
    if hard {
        // `PID SETSID_OK ERRNO`: the daemon must have had its session.
        let mut f = daemon_line.split_whitespace().skip(1);
        if f.next() != Some("1") {
            let _ = sb.kill().await;
            let _ = sb.wait().await;
            kill_all(&wait_gone(&mark, GONE_LIMIT).await);
            return Err(Failure::Broken(format!(
                "the daemon's setsid was refused (errno {}): sessions must be the command's \
                 own on every backend",
                f.next().unwrap_or("?")
            )));
        }
    }
    // The daemon's heartbeat: how the host sees it where its processes are not the
    // host's (a user-space kernel such as gVisor's runs them inside its own process).
    let beat = ws.join("daemon.pid.beat");
    if end != End::Timeout {
        // The host's view works: the daemon is visible before the run ends.
        let alive = processes_with_arg(&mark);
        if alive.is_empty() && !beating(&beat).await {
            let _ = sb.kill().await;
            return Err(Failure::Broken(
                "the daemon can be seen neither in the host's /proc nor by its heartbeat \
                 while the run is going, so its survival could not be judged"
                    .into(),
            ));
        }
    }
    let out = match end {
        End::Wait => {
            std::fs::write(&release, "go")?;
            sb.wait().await?
        }
        End::Kill => {
            sb.kill().await?;
            sb.wait().await?
        }
        End::Timeout => sb.wait().await?,
    };
    let expected = match end {
        End::Wait => Status::Exited { code: 0 },
        End::Kill => Status::Killed,
        End::Timeout => Status::TimedOut,
    };
    ensure!(
        out.status == expected,
        "expected {expected:?}: {}",
        describe(&out)
    );
    let left = wait_gone(&mark, GONE_LIMIT).await;
    // Survivors are reported, then ended, so a failing backend does not litter the host.
    kill_all(&left);
    ensure!(
        left.is_empty(),
        "processes of the run outlived {end:?} on lane {lane} (daemon reported `{}`): \
         {left:?}",
        daemon_line.trim()
    );
    ensure!(
        !beating(&beat).await,
        "the daemon's heartbeat in the workspace still advances after {end:?} returned: \
         it survived (daemon reported `{}`)",
        daemon_line.trim()
    );
    Ok(())
}

/// Whether the daemon's heartbeat file changes within a second (it is rewritten every
/// 100 ms while the daemon lives).
async fn beating(beat: &std::path::Path) -> bool {
    let first = std::fs::read_to_string(beat).ok();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = std::fs::read_to_string(beat).ok();
        if now.is_some() && now != first {
            return true;
        }
    }
    false
}

/// SIGKILL each listed process (found by its unique mark, so nothing else is hit).
fn kill_all(procs: &[(i32, String)]) {
    for &(pid, _) in procs {
        // SAFETY: a signal to a process whose command line carries this case's mark.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// No process survives `wait`, not even a double-forked `setsid` daemon.
pub async fn no_survivor_after_wait(ctx: Arc<Context>) -> CaseResult {
    daemon(ctx, End::Wait).await
}

/// No process survives `kill`, not even a double-forked `setsid` daemon.
pub async fn no_survivor_after_kill(ctx: Arc<Context>) -> CaseResult {
    daemon(ctx, End::Kill).await
}

/// No process survives a timeout, not even a double-forked `setsid` daemon.
pub async fn no_survivor_after_timeout(ctx: Arc<Context>) -> CaseResult {
    daemon(ctx, End::Timeout).await
}

/// A double-forked daemon that had its `setsid`, ignores SIGTERM and keeps forking is gone
/// with `wait`: no process of the run is left in the host's process table.
pub async fn setsid_daemon_gone_after_wait(ctx: Arc<Context>) -> CaseResult {
    for lane in lanes(&ctx) {
        daemon_with(ctx.clone(), End::Wait, true, lane).await?;
    }
    Ok(())
}

/// A double-forked daemon that had its `setsid`, ignores SIGTERM and keeps forking is gone
/// with `kill`: no process of the run is left in the host's process table.
pub async fn setsid_daemon_gone_after_kill(ctx: Arc<Context>) -> CaseResult {
    for lane in lanes(&ctx) {
        daemon_with(ctx.clone(), End::Kill, true, lane).await?;
    }
    Ok(())
}

/// `sh -c SCRIPT` in `ws` on `lane`, with `HOME` in the workspace.
fn sh(ctx: &Context, lane: Lane, ws: &Path, script: &str) -> SandboxOpts {
    let mut o = ctx.opts(ws, [""]);
    o.lane = lane;
    o.argv = ["sh", "-c", script].iter().map(OsString::from).collect();
    o.env.set.push(("HOME".into(), ws.into()));
    o
}

/// `setsid true` runs: a session of its own is the command's business on every backend.
pub async fn setsid_program_runs(ctx: Arc<Context>) -> CaseResult {
    for lane in lanes(&ctx) {
        let ws = ctx.workspace("setsid")?;
        let o = ctx
            .run(sh(&ctx, lane, ws.path(), "setsid true && echo session-ok"))
            .await?;
        ensure!(
            o.status.success() && o.stdout.text().contains("session-ok"),
            "`setsid true` failed on lane {lane}: {}",
            describe(&o)
        );
    }
    Ok(())
}

/// Python's `subprocess.run(..., start_new_session=True)` runs, and the child leads a
/// session of its own.
pub async fn python_new_session_runs(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("new-session")?;
    let script = "python3 -c 'import subprocess, sys; \
         r = subprocess.run([sys.executable, \"-c\", \"import os; print(os.getsid(0) == os.getpid())\"], \
         start_new_session=True, capture_output=True, text=True); \
         print(\"leader=\" + r.stdout.strip())'";
    for lane in lanes(&ctx) {
        let o = ctx.run(sh(&ctx, lane, ws.path(), script)).await?;
        ensure!(
            o.status.success() && o.stdout.text().contains("leader=True"),
            "subprocess.run(start_new_session=True) failed on lane {lane}: {}",
            describe(&o)
        );
    }
    Ok(())
}

/// `git commit` in a repository the run creates detaches its automatic maintenance
/// (`setsid`) without a `fatal: setsid failed`, and the commit is there, read by the host.
pub async fn git_commit_detaches_its_maintenance(ctx: Arc<Context>) -> CaseResult {
    let script = "export GIT_CONFIG_NOSYSTEM=1; git init -q repo && cd repo && echo a > a && \
         git add a && git -c user.name=t -c user.email=t@example.invalid \
         -c maintenance.auto=true -c gc.auto=1 commit -q -m one && echo committed";
    for lane in lanes(&ctx) {
        git_commit_on(&ctx, lane, script).await?;
    }
    Ok(())
}

async fn git_commit_on(ctx: &Context, lane: Lane, script: &str) -> CaseResult {
    let ws = ctx.workspace("git-commit")?;
    let o = ctx.run(sh(ctx, lane, ws.path(), script)).await?;
    let err = o.stderr.text();
    ensure!(
        o.status.success() && o.stdout.text().contains("committed"),
        "git commit failed on lane {lane}: {}",
        describe(&o)
    );
    ensure!(
        !err.contains("setsid failed"),
        "git could not detach its maintenance on lane {lane}: {}",
        describe(&o)
    );
    let log = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "log", "--format=%s"])
        .current_dir(ws.join("repo"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()?;
    ensure!(
        String::from_utf8_lossy(&log.stdout).trim() == "one",
        "the host sees no commit `one` in the run's repository: {}",
        String::from_utf8_lossy(&log.stderr)
    );
    Ok(())
}

/// The host's processes are out of the command's sight (it cannot signal the host).
pub async fn host_processes_invisible(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("procs")?;
    let me = std::process::id().to_string();
    // Its start time too: in a container the suite is pid 1, the number the sandbox's own
    // init has in its pid namespace.
    let start = crate::probe::start_time(std::process::id() as libc::pid_t)
        .ok_or_else(|| Failure::Broken("cannot read this process's start time".into()))?
        .to_string();
    let p = ctx
        .probe_in(ws.path(), ["see-pid", me.as_str(), start.as_str()])
        .await?;
    p.report()?;
    forbid!(
        p.succeeded(),
        "the command can see the host's test process (pid {me}): {}",
        p.describe()
    );
    Ok(())
}

/// A command that signals itself (`kill(getpid(), N)`, as `kill -N $$` does, and
/// `raise`) dies of that signal, and the outcome says so: a pid namespace's init must not
/// be the command, since pid 1 ignores its own signals.
pub async fn self_signals(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("self-signals")?;
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGKILL] {
        for how in ["kill-self", "signal"] {
            let out = ctx
                .run(ctx.opts(ws.path(), [how, &signal.to_string()]))
                .await?;
            ensure!(
                out.status == Status::Signaled { signal },
                "`{how} {signal}` gave {} (expected killed by signal {signal})",
                describe(&out)
            );
        }
    }
    Ok(())
}

/// An orphan (a grandchild whose parent exited) is reaped while the command runs: no
/// zombie is left for the run's lifetime.
pub async fn orphans_reaped(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("orphans")?;
    let p = ctx.probe_in(ws.path(), ["orphan"]).await?;
    p.report()?;
    ensure!(
        p.succeeded(),
        "the orphan was not reaped within 10 s (a zombie nobody waits for): {}",
        p.describe()
    );
    Ok(())
}

/// The command SIGKILLs its parent inside the sandbox (a backend's helper that reports its
/// status) and exits 3: the outcome is exit 3, not a status forged by the helper's death.
pub async fn helper_survives_the_command(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("helper")?;
    let p = ctx.probe_in(ws.path(), ["kill-parent", "3"]).await?;
    ensure!(
        p.field("namespaced").and_then(|v| v.as_bool()) == Some(true),
        "the probe is not in a pid namespace of its own, so it sent nothing: {}",
        p.describe()
    );
    forbid!(
        !matches!(p.outcome.status, sandbox_core::Status::Exited { code: 3 }),
        "the command exited 3 after killing its parent, but the outcome is {:?}",
        p.outcome.status
    );
    Ok(())
}
