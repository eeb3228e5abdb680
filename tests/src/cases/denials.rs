//! The outcome's denials: a backend that claims to report a kind lists each refusal of
//! that kind with its target and mechanism, and never lists an allowed operation.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use sandbox_core::{Denial, DenialKind, DenialMechanism, NetworkMode, SandboxOutcome};
use sandbox_proxy::TableResolver;

use super::CaseResult;
use crate::host::HostListener;
use crate::{token, Context, Failure};

fn entry(o: &SandboxOutcome, kind: DenialKind, target: &str) -> Option<u64> {
    o.denials
        .entries
        .iter()
        .find(|d| d.kind == kind && d.target == target && d.mechanism == DenialMechanism::Seccomp)
        .map(|d| d.count)
}

/// Denied system calls are listed by name (`ptrace`, `mount`), refused by seccomp, once each.
pub async fn syscalls_reported(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("denied-calls")?;
    for (call, kind) in [
        ("ptrace", DenialKind::Ptrace),
        ("mount", DenialKind::Syscall),
    ] {
        let p = ctx.probe_in(ws.path(), ["syscall", call]).await?;
        p.report()?;
        if p.field("denied").and_then(|v| v.as_bool()) != Some(true) {
            return Err(Failure::Broken(format!(
                "`{call}` was not refused, so there is no denial to report: {}",
                p.describe()
            )));
        }
        match entry(&p.outcome, kind, call) {
            Some(1) => {}
            other => {
                return Err(Failure::Violation(format!(
                    "the refused `{call}` is not reported once ({kind:?}, seccomp): found \
                     {other:?} in {:?}",
                    p.outcome.denials
                )))
            }
        }
    }
    Ok(())
}

/// Allowed operations (a write and a read in the workspace, a loopback socket pair, a
/// fork) never appear as denials.
pub async fn allowed_not_reported(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("allowed")?;
    for args in [
        vec!["write", "f", "hello"],
        vec!["read", "f"],
        vec!["fork", "3"],
        vec!["argv"],
    ] {
        let p = ctx.probe_in(ws.path(), &args).await?;
        if !p.succeeded() {
            return Err(Failure::Broken(format!(
                "the allowed `{}` failed: {}",
                args.join(" "),
                p.describe()
            )));
        }
        if !p.outcome.denials.is_empty() {
            return Err(Failure::Violation(format!(
                "the allowed `{}` reported denials: {:?}",
                args.join(" "),
                p.outcome.denials
            )));
        }
    }
    Ok(())
}

/// A million refused calls: the run finishes, each refusal is counted in one entry (the
/// record is bounded, not a list of a million).
pub async fn million_refusals_bounded(ctx: Arc<Context>) -> CaseResult {
    const N: u64 = 1_000_000;
    let ws = ctx.workspace("million")?;
    let p = ctx
        .probe_in(ws.path(), ["syscall-loop", "ptrace", &N.to_string()])
        .await?;
    if p.int("refused")? != N as i64 {
        return Err(Failure::Broken(format!(
            "not every call was refused: {}",
            p.describe()
        )));
    }
    let d = &p.outcome.denials;
    if entry(&p.outcome, DenialKind::Ptrace, "ptrace") != Some(N) || d.entries.len() != 1 {
        return Err(Failure::Violation(format!(
            "{N} refused ptrace calls are not one entry counting {N}: {} entries, {:?}",
            d.entries.len(),
            d.entries.first()
        )));
    }
    Ok(())
}

/// Through the proxy (network `proxy`), a connect it refuses is listed once (network
/// connect, `host:port` as asked, the proxy) and a connect it allows is not listed: both
/// aim at one listener on the host's loopback, under names of the test resolver, and the
/// listener counts who reached it.
pub async fn proxy_refusals_reported(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("proxy-denials")?;
    let listener = HostListener::start(&format!("proxied-{}", token()))?;
    let port = listener.addr().port();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let resolver = Arc::new(
        TableResolver::new()
            .with("allowed.test", lo)
            .with("denied.test", lo),
    );
    let opts = |target: &str| {
        let mut o = ctx.opts(ws.path(), ["proxy-connect", target]);
        o.network = NetworkMode::Proxy;
        o.allow_hosts = vec![format!("allowed.test:{port}")];
        o.resolver = Some(resolver.clone());
        o
    };

    let allowed = ctx.probe_run(opts(&format!("allowed.test:{port}"))).await?;
    ensure!(
        allowed.succeeded()
            && allowed.stdout_contains(listener.token())
            && listener.accepted() == 1,
        "the allowed connect did not reach the host's listener through the proxy \
         ({} accepted): {}",
        listener.accepted(),
        allowed.describe()
    );
    if !allowed.outcome.denials.is_empty() {
        return Err(Failure::Violation(format!(
            "the allowed connect is listed as denied: {:?}",
            allowed.outcome.denials
        )));
    }

    let target = format!("denied.test:{port}");
    let denied = ctx.probe_run(opts(&target)).await?;
    denied.report()?;
    ensure!(
        !denied.succeeded() && listener.accepted() == 1 && denied.int("status")? == 403,
        "the proxy did not refuse `{target}` ({} accepted): {}",
        listener.accepted(),
        denied.describe()
    );
    let want = Denial {
        kind: DenialKind::NetworkConnect,
        target: target.clone(),
        mechanism: DenialMechanism::Proxy,
        count: 1,
    };
    if denied.outcome.denials.entries != [want] || denied.outcome.denials.more != 0 {
        return Err(Failure::Violation(format!(
            "the refused connect to `{target}` is not listed once as a network connect the \
             proxy refused: {:?}",
            denied.outcome.denials
        )));
    }
    Ok(())
}
