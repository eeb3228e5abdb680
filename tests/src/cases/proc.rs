//! Process lifetime: nothing outlives `wait`, `kill` or a timeout, not even a daemon that
//! double-forked and called `setsid`; host processes stay out of sight.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::{DynSandbox, Status};

use super::CaseResult;
use crate::context::{describe, Context, Failure};
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
    let ws = ctx.workspace("daemon")?;
    let pidfile = ws.join("daemon.pid");
    let release = ws.join("release");
    // The pidfile's path is in the probe's argv, and so in the daemon's (a fork keeps
    // it): a unique mark to find it in the host's /proc, whatever its pid namespace.
    let mark = pidfile.to_string_lossy().into_owned();
    let mut opts = ctx.opts(
        ws.path(),
        [
            OsStr::new("daemonize"),
            pidfile.as_os_str(),
            release.as_os_str(),
        ],
    );
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
        "processes of the run outlived {end:?} (daemon reported `{}`): {left:?}",
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

/// The host's processes are out of the command's sight (it cannot signal the host).
pub async fn host_processes_invisible(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("procs")?;
    let me = std::process::id().to_string();
    let p = ctx.probe_in(ws.path(), ["see-pid", me.as_str()]).await?;
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
