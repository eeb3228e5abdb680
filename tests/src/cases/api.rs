//! The contract itself: statuses, argv, stdin, timeouts, kill, state errors, logs, caps.

use std::sync::Arc;
use std::time::Duration;

use sandbox_core::{DynSandbox, Sandbox, SandboxError, SandboxExt, Status, Stdin};
use serde_json::Value;

use super::CaseResult;
use crate::context::{describe, token, Context, Failure};

/// Preflight succeeds, and sandboxes report the backend's name and capability.
pub async fn preflight(ctx: Arc<Context>) -> CaseResult {
    let sb = ctx.sandbox();
    let pf = sb.preflight().await?;
    ensure!(
        pf.backend == ctx.backend_name(),
        "preflight names backend `{}`, not `{}`",
        pf.backend,
        ctx.backend_name()
    );
    ensure!(
        sb.backend() == ctx.backend_name(),
        "the sandbox names backend `{}`, the backend `{}`",
        sb.backend(),
        ctx.backend_name()
    );
    ensure!(
        &sb.capability() == ctx.capability(),
        "the sandbox's capability differs from its backend's"
    );
    Ok(())
}

/// Exit codes come back as `Exited { code }`, 137 included (never taken for a signal).
pub async fn exit_codes(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("exit")?;
    for code in [0, 1, 3, 42, 137, 255] {
        let out = ctx
            .run(ctx.opts(ws.path(), ["exit", &code.to_string()]))
            .await?;
        ensure!(
            out.status == Status::Exited { code },
            "`exit {code}` gave {}",
            describe(&out)
        );
    }
    Ok(())
}

/// Death by a signal is `Signaled { signal }`, distinct from exiting with 128+N.
pub async fn signal_status(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("signal")?;
    for signal in [libc::SIGKILL, libc::SIGTERM, libc::SIGUSR1] {
        let out = ctx
            .run(ctx.opts(ws.path(), ["signal", &signal.to_string()]))
            .await?;
        ensure!(
            out.status == Status::Signaled { signal },
            "`signal {signal}` gave {}",
            describe(&out)
        );
    }
    let out = ctx.run(ctx.opts(ws.path(), ["exit", "137"])).await?;
    ensure!(
        out.status == Status::Exited { code: 137 },
        "`exit 137` gave {}, which must not look like SIGKILL",
        describe(&out)
    );
    Ok(())
}

/// Every argument arrives as one argument, byte for byte: spaces, quotes, newlines, globs.
pub async fn argv_roundtrip(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("argv")?;
    let tricky = [
        "with space",
        "  leading and trailing  ",
        "'single quoted'",
        "\"double quoted\"",
        "new\nline",
        "",
        "$HOME",
        "${PATH}",
        "*",
        "a;b|c&&d",
        "back\\slash",
        "-n",
        "--flag=value",
        "tab\there",
        "ünïcødé ✓",
        "`id`",
        "$(id)",
        "> redirect",
    ];
    let mut args = vec!["argv"];
    args.extend(tricky);
    let p = ctx.probe_in(ws.path(), &args).await?;
    let got: Vec<String> = p
        .field("argv")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or("<not a string>").to_owned())
                .collect()
        })
        .ok_or_else(|| Failure::Broken(format!("no argv in the report: {}", p.describe())))?;
    ensure!(p.succeeded(), "the probe failed: {}", p.describe());
    let want: Vec<String> = std::iter::once(ctx.probe().to_string_lossy().into_owned())
        .chain(args.iter().map(|s| s.to_string()))
        .collect();
    ensure!(
        got == want,
        "argv did not round-trip:\n  sent {want:?}\n  got  {got:?}"
    );
    Ok(())
}

/// `argv[0]` is exactly as given when the program is named through links (a venv's
/// `bin/python`, rustup's `cargo`: launchers that look at how they were called): a
/// relative path, a chain of links, an absolute path and a bare name found on `PATH`.
pub async fn argv0_as_given(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("argv0")?;
    let bin = ws.path().join("bin");
    std::fs::create_dir(&bin)?;
    // bin/tool -> the probe (absolute, as the sandbox sees it); bin/py -> tool (relative).
    std::os::unix::fs::symlink(ctx.probe(), bin.join("tool"))?;
    std::os::unix::fs::symlink("tool", bin.join("py"))?;
    let absolute = bin.join("py").to_string_lossy().into_owned();
    let path = format!("{}:{}", bin.display(), sandbox_core::DEFAULT_PATH);
    for (given, on_path) in [
        ("./bin/tool", false),
        ("bin/py", false),
        (absolute.as_str(), false),
        ("tool", true),
    ] {
        let mut opts = ctx.opts(ws.path(), ["argv"]);
        opts.argv[0] = given.into();
        if on_path {
            opts.env.set.push(("PATH".into(), path.clone().into()));
        }
        let p = ctx.probe_run(opts).await?;
        ensure!(
            p.succeeded(),
            "`{given}` did not run the probe: {}",
            p.describe()
        );
        let got = p
            .field("argv")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::Broken(format!("no argv in the report: {}", p.describe())))?;
        ensure!(
            got == given,
            "the program was called `{given}`, and its argv[0] is `{got}`"
        );
    }
    Ok(())
}

/// Arguments of arbitrary bytes (anything but NUL, which no argv can hold: not UTF-8,
/// control characters, leading dashes) arrive unchanged, over several runs of random
/// arguments. A backend whose transport carries only text (a container engine's JSON API)
/// must instead refuse bytes that are not UTF-8 before anything runs, with an error naming
/// `argv`; random text must still arrive unchanged there. The seed is in the failure
/// message, to replay it.
pub async fn argv_arbitrary_bytes(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("argv-bytes")?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut state = seed;
    let mut next = move || {
        // xorshift64: enough to spread bytes; nothing here needs to be unpredictable.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for run in 0..8 {
        // Even runs: raw bytes; odd runs: text (any scalar value but NUL).
        let raw = run % 2 == 0;
        let mut sent: Vec<Vec<u8>> = vec![b"argv-hex".to_vec()];
        for _ in 0..8 {
            let len = (next() % 16) as usize;
            let mut arg: Vec<u8> = if raw {
                (0..len).map(|_| (next() % 255 + 1) as u8).collect()
            } else {
                (0..len)
                    .filter_map(|_| char::from_u32((next() % 0x2_0000) as u32 + 1))
                    .collect::<String>()
                    .into_bytes()
            };
            let dashes: &[u8] = match next() % 6 {
                0 => b"--",
                1 => b"-",
                _ => b"",
            };
            arg.splice(0..0, dashes.iter().copied());
            sent.push(arg);
        }
        let args: Vec<std::ffi::OsString> = sent
            .iter()
            .map(|b| std::os::unix::ffi::OsStringExt::from_vec(b.clone()))
            .collect();
        let utf8 = sent.iter().all(|a| std::str::from_utf8(a).is_ok());
        let marker = ws.join(format!("ran-{run}"));
        let mut opts = ctx.opts(ws.path(), &args);
        opts.capture_files = Vec::new();
        let outcome = match ctx.sandbox().execute(opts).await {
            Err(SandboxError::InvalidConfig {
                field: "argv",
                reason,
            }) if !utf8 => {
                ensure!(
                    reason.contains("UTF-8"),
                    "run {run} (seed {seed}): argv refused, but not for being bytes: {reason}"
                );
                ensure!(
                    !marker.exists(),
                    "run {run}: something ran after the refusal"
                );
                continue;
            }
            Err(e) => return Err(Failure::Broken(format!("run {run} (seed {seed}): {e}"))),
            Ok(o) => o,
        };
        let p = crate::context::Probed {
            report: crate::context::parse_report(&outcome.stdout.bytes),
            outcome,
        };
        ensure!(p.succeeded(), "run {run} (seed {seed}): {}", p.describe());
        let got: Vec<String> = p
            .field("argv")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap_or("?").to_owned())
                    .collect()
            })
            .ok_or_else(|| Failure::Broken(format!("no argv in the report: {}", p.describe())))?;
        let want: Vec<String> = sent
            .iter()
            .map(|a| a.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        ensure!(
            got.get(1..) == Some(&want[..]),
            "run {run} (seed {seed}): argv did not arrive unchanged:\n  sent {want:?}\n  got  {:?}",
            got.get(1..)
        );
    }
    Ok(())
}

/// Given stdin bytes arrive exactly and end with EOF; by default stdin is empty.
pub async fn stdin(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("stdin")?;
    let mut data: Vec<u8> = b"first line\n\0binary\xff\xfe\nlast line without newline".to_vec();
    data.extend((0..200_000u32).map(|i| (i % 251) as u8));
    let mut opts = ctx.opts(ws.path(), ["cat"]);
    opts.stdin = Stdin::Bytes(data.clone());
    let out = ctx.run(opts).await?;
    ensure!(out.status.success(), "cat failed: {}", describe(&out));
    ensure!(
        out.stdout.bytes == data,
        "stdin did not arrive intact: sent {} bytes, got {} back",
        data.len(),
        out.stdout.bytes.len()
    );
    let out = ctx.run(ctx.opts(ws.path(), ["cat"])).await?;
    ensure!(
        out.status.success() && out.stdout.bytes.is_empty(),
        "with the default stdin, cat should see an immediate end of file: {}",
        describe(&out)
    );
    Ok(())
}

/// The wall-clock timeout kills the command and reports `TimedOut`.
pub async fn timeout(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("timeout")?;
    let mut opts = ctx.opts(ws.path(), ["sleep", "600"]);
    opts.timeout = Some(Duration::from_secs(2));
    let out = ctx.run(opts).await?;
    ensure!(
        out.status == Status::TimedOut,
        "a 2 s timeout on `sleep 600` gave {}",
        describe(&out)
    );
    ensure!(
        out.wall_time < Duration::from_secs(300),
        "the timed-out run took {:?}",
        out.wall_time
    );
    Ok(())
}

/// `kill` from another task ends a pending `wait` with `Killed`.
pub async fn kill_during_wait(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("kill")?;
    let sb: Arc<DynSandbox> = Arc::from(ctx.sandbox());
    sb.run(ctx.opts(ws.path(), ["sleep", "600"])).await?;
    let waiter = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.wait().await })
    };
    // Let the waiter get to its await; whether it has does not change what must happen.
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensure!(!waiter.is_finished(), "wait returned before any kill");
    tokio::time::timeout(Duration::from_secs(60), sb.kill())
        .await
        .map_err(|_| Failure::Broken("kill did not return within 60 s".into()))??;
    let out = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .map_err(|_| Failure::Broken("the pending wait did not return within 60 s".into()))?
        .map_err(|e| Failure::Broken(format!("the waiting task failed: {e}")))??;
    ensure!(
        out.status == Status::Killed,
        "kill during wait gave {}",
        describe(&out)
    );
    // After the end, kill does nothing and succeeds.
    sb.kill().await?;
    Ok(())
}

/// `kill` while `run` is still starting the command (copying a large workspace for its
/// throwaway layer, where the backend copies) cancels the start: `kill` returns, `run`
/// returns `Ok`, and the outcome is `Killed`; never "still starting". (Where the start is
/// quick, the kill lands on the running command instead: the same outcome.)
pub async fn kill_during_start(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("killstart")?;
    // Dense data, so that a copy takes a while: 16 files of 4 MiB.
    for i in 0..16 {
        std::fs::write(ws.path().join(format!("blob{i}")), vec![0x5au8; 4 << 20])
            .map_err(|e| Failure::Broken(format!("writing the workspace: {e}")))?;
    }
    let mut opts = ctx.opts(ws.path(), ["sleep", "600"]);
    opts.changes = sandbox_core::Changes::Discard;
    let sb: Arc<DynSandbox> = Arc::from(ctx.sandbox());
    let runner = {
        let sb = sb.clone();
        tokio::spawn(async move { sb.run(opts).await })
    };
    // As soon as `run` has begun (before that, kill is "not started": try again).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout(Duration::from_secs(120), sb.kill()).await {
            Err(_) => return Err(Failure::Broken("kill did not return within 120 s".into())),
            Ok(Err(SandboxError::State { state, .. }))
                if state.starts_with("not started") && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(r) => {
                r?;
                break;
            }
        }
    }
    let started = tokio::time::timeout(Duration::from_secs(60), runner)
        .await
        .map_err(|_| Failure::Broken("run did not return after the kill".into()))?
        .map_err(|e| Failure::Broken(format!("the running task failed: {e}")))?;
    started?;
    let out = sb.wait().await?;
    ensure!(
        out.status == Status::Killed,
        "kill during the start gave {}",
        describe(&out)
    );
    Ok(())
}

fn is_state(r: &Result<impl std::fmt::Debug, SandboxError>) -> bool {
    matches!(r, Err(SandboxError::State { .. }))
}

/// Verbs out of order are typed state errors; a sandbox runs exactly one command.
pub async fn state_errors(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("state")?;
    let sb = ctx.sandbox();
    let w = sb.wait().await;
    ensure!(is_state(&w), "wait before run gave {w:?}");
    let k = sb.kill().await;
    ensure!(is_state(&k), "kill before run gave {k:?}");
    let l = sb.logs().await;
    ensure!(is_state(&l), "logs before run gave {l:?}");

    let marker = ws.join("second-run-ran");
    sb.run(ctx.opts(ws.path(), ["exit", "0"])).await?;
    let again = sb
        .run(ctx.opts(
            ws.path(),
            [std::ffi::OsStr::new("write"), marker.as_os_str()],
        ))
        .await;
    ensure!(is_state(&again), "a second run gave {again:?}");
    let first = sb.wait().await?;
    ensure!(
        first.status.success(),
        "the first run's outcome: {}",
        describe(&first)
    );
    let second = sb.wait().await?;
    ensure!(
        second.status == first.status,
        "a second wait gave a different outcome: {}",
        describe(&second)
    );
    sb.logs().await?;
    ensure!(
        !marker.exists(),
        "the refused second run ran anyway: {} exists",
        marker.display()
    );
    Ok(())
}

/// `logs` shows output while the command is still running.
pub async fn logs_while_running(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("logs")?;
    let t = format!("hello-{}", token());
    let sb = ctx.sandbox();
    sb.run(ctx.opts(ws.path(), ["print", t.as_str(), "600"]))
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut seen = false;
    while tokio::time::Instant::now() < deadline {
        if sb.logs().await?.stdout.text().contains(&t) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sb.kill().await?;
    let out = sb.wait().await?;
    ensure!(
        seen,
        "the line printed by the running command never showed in logs(): {}",
        describe(&out)
    );
    // It was still running when its output was read: only the kill ended it.
    ensure!(
        out.status == Status::Killed,
        "the command should have been running until killed: {}",
        describe(&out)
    );
    Ok(())
}

/// A 200 MB flood comes back capped, keeping its beginning and its end, promptly.
pub async fn output_cap(ctx: Arc<Context>) -> CaseResult {
    const TOTAL: u64 = 200_000_000;
    const CAP: usize = 1 << 20;
    let ws = ctx.workspace("flood")?;
    let mut opts = ctx.opts(ws.path(), ["flood", &TOTAL.to_string()]);
    opts.output_limit = CAP;
    let out = ctx.run(opts).await?;
    let s = &out.stdout;
    ensure!(out.status.success(), "flood failed: {}", describe(&out));
    ensure!(
        s.bytes.len() <= CAP,
        "kept {} bytes, over the {CAP}-byte cap",
        s.bytes.len()
    );
    ensure!(s.truncated, "the capture is not marked truncated");
    ensure!(
        s.total_bytes == TOTAL,
        "counted {} bytes written, not {TOTAL}",
        s.total_bytes
    );
    ensure!(
        s.bytes.starts_with(b"BEGIN\n"),
        "the beginning of the stream was not kept"
    );
    ensure!(
        s.bytes.ends_with(b"\nEND\n"),
        "the end of the stream was not kept"
    );
    Ok(())
}

/// The same command works through `Box<dyn Sandbox>` and `Arc<dyn Sandbox>`.
pub async fn boxed_and_arc(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("dyn")?;
    let boxed: Box<DynSandbox> = ctx.sandbox();
    let out = boxed
        .execute(ctx.opts(ws.path(), ["argv", "through-box"]))
        .await?;
    ensure!(
        out.status.success() && out.stdout.text().contains("through-box"),
        "through Box<dyn Sandbox>: {}",
        describe(&out)
    );
    let shared: Arc<DynSandbox> = Arc::from(ctx.sandbox());
    let out = shared
        .execute(ctx.opts(ws.path(), ["argv", "through-arc"]))
        .await?;
    ensure!(
        out.status.success() && out.stdout.text().contains("through-arc"),
        "through Arc<dyn Sandbox>: {}",
        describe(&out)
    );
    ensure!(
        out.backend == ctx.backend_name(),
        "the outcome names backend `{}`",
        out.backend
    );
    Ok(())
}

/// The outcome's effective policy is honest: backend, lane, limits, tree kill, and
/// answers that match what the backend claims.
pub async fn effective_policy(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("policy")?;
    let cap = ctx.capability();
    let mut opts = ctx.opts(ws.path(), ["exit", "0"]);
    if cap.open_files_limit {
        opts.limits.open_files = Some(512);
    }
    if !cap.process_limit {
        opts.limits.max_processes = None;
    }
    let asked = opts.limits.clone();
    let out = ctx.run(opts).await?;
    ensure!(out.status.success(), "{}", describe(&out));
    let p = &out.policy;
    ensure!(
        p.backend == ctx.backend_name(),
        "policy names backend `{}`",
        p.backend
    );
    ensure!(
        p.lane == ctx.lane(),
        "policy names lane {}, the run asked {}",
        p.lane,
        ctx.lane()
    );
    ensure!(
        p.tree_kill.is_some(),
        "the policy records no tree-kill mechanism"
    );
    for (name, value) in [
        ("processes", asked.max_processes),
        ("open_files", asked.open_files),
    ] {
        if let Some(v) = value {
            ensure!(
                p.limits.iter().any(|l| l.limit == name && l.value == v),
                "the {name} limit of {v} is not recorded: {:?}",
                p.limits
            );
        }
    }
    ensure!(
        p.can_read_beyond_workspace() != cap.confine_reads,
        "can_read_beyond_workspace() is {} but capability.confine_reads is {}",
        p.can_read_beyond_workspace(),
        cap.confine_reads
    );
    ensure!(
        p.can_write_beyond_workspace() != cap.confine_writes,
        "can_write_beyond_workspace() is {} but capability.confine_writes is {}",
        p.can_write_beyond_workspace(),
        cap.confine_writes
    );
    ensure!(
        p.can_reach_network() != cap.network_none.is_exact(),
        "with network `none`, can_reach_network() is {} but the backend enforces `none` as {:?}",
        p.can_reach_network(),
        cap.network_none
    );
    Ok(())
}
