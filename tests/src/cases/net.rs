//! The network: `none`, a private `loopback`, and `full`, judged by a listener on the
//! host that counts its visitors.

use std::sync::Arc;

use sandbox_core::NetworkMode;

use super::CaseResult;
use crate::context::{token, Context};
use crate::host::{host_address, HostListener};

/// Network `none`: a listener on the host's 127.0.0.1 is not reachable.
pub async fn none_blocks_host(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-none")?;
    let listener = HostListener::start(&format!("host-listener-{}", token()))?;
    let mut opts = ctx.opts(ws.path(), ["connect", &listener.addr().to_string()]);
    opts.network = NetworkMode::None;
    let p = ctx.probe_run(opts).await?;
    p.report()?;
    forbid!(
        p.succeeded() || p.stdout_contains(listener.token()) || listener.accepted() > 0,
        "with network `none` the command reached the host's listener on {} ({} connection(s)): {}",
        listener.addr(),
        listener.accepted(),
        p.describe()
    );
    Ok(())
}

/// Network `loopback`: serving and connecting on its own 127.0.0.1 works, and a listener
/// on the host's 127.0.0.1 is not reachable.
pub async fn loopback_private(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-loopback")?;
    let mut opts = ctx.opts(ws.path(), ["listen-connect"]);
    opts.network = NetworkMode::Loopback;
    let p = ctx.probe_run(opts).await?;
    ensure!(
        p.succeeded(),
        "with network `loopback` the command cannot serve and connect on its own loopback: {}",
        p.describe()
    );
    let listener = HostListener::start(&format!("host-listener-{}", token()))?;
    let mut opts = ctx.opts(ws.path(), ["connect", &listener.addr().to_string()]);
    opts.network = NetworkMode::Loopback;
    let p = ctx.probe_run(opts).await?;
    p.report()?;
    forbid!(
        p.succeeded() || p.stdout_contains(listener.token()) || listener.accepted() > 0,
        "with network `loopback` the command reached the host's own listener on {}: {}",
        listener.addr(),
        p.describe()
    );
    Ok(())
}

/// Network `full`: a listener on the host is reachable. It listens on the host's own
/// address (127.0.0.1 when there is none): `full` for a container is the engine's bridge,
/// which reaches the host but never the host's loopback, while a backend in the host's
/// network namespace reaches that address just the same.
pub async fn full_reaches_host(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-full")?;
    let token = format!("host-listener-{}", token());
    let listener = match host_address() {
        Some(ip) => HostListener::start_on(ip, &token)?,
        None => HostListener::start(&token)?,
    };
    let mut opts = ctx.opts(ws.path(), ["connect", &listener.addr().to_string()]);
    opts.network = NetworkMode::Full;
    let p = ctx.probe_run(opts).await?;
    ensure!(
        p.succeeded() && p.stdout_contains(listener.token()),
        "with network `full` the command did not reach the host's listener on {}: {}",
        listener.addr(),
        p.describe()
    );
    ensure!(
        listener.accepted() > 0,
        "the host's listener saw no connection"
    );
    Ok(())
}
