//! The network: `none`, a private `loopback`, and `full`, judged by a listener on the
//! host's own loopback that counts its visitors. Only loopback is ever touched.

use std::sync::Arc;

use sandbox_core::NetworkMode;

use super::CaseResult;
use crate::context::{token, Context};
use crate::host::{AbstractListener, HostListener};

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

/// Network `full`: a listener on the host's 127.0.0.1 is reachable (for backends whose
/// `full` is the host's own network namespace: the suite touches loopback only).
pub async fn full_reaches_host(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-full")?;
    let listener = HostListener::start(&format!("host-listener-{}", token()))?;
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

/// Network `none`: the host's network state is out of sight. A unix socket and a TCP
/// listener the test makes on the host do not show in the command's `/proc/net/unix` and
/// `/proc/net/tcp` (a file that cannot be read hides them too).
pub async fn none_hides_host_network(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-none-proc")?;
    let dir = tempfile::tempdir()?;
    let sock_path = dir.path().join(format!("host-sock-{}", token()));
    let _unix = std::os::unix::net::UnixListener::bind(&sock_path)?;
    let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = tcp.local_addr()?.port();
    let sock_name = sock_path.to_string_lossy().into_owned();
    // The host's view shows both: the check below can see them if they leak.
    let host_unix = std::fs::read_to_string("/proc/net/unix")?;
    ensure!(
        host_unix.contains(&sock_name),
        "the host's own /proc/net/unix does not list {sock_name}"
    );
    let listen = format!("0100007F:{port:04X}");
    let host_tcp = std::fs::read_to_string("/proc/net/tcp")?;
    ensure!(
        host_tcp.contains(&listen),
        "the host's own /proc/net/tcp does not list {listen}"
    );
    for (file, needle) in [("/proc/net/unix", &sock_name), ("/proc/net/tcp", &listen)] {
        let mut opts = ctx.opts(ws.path(), ["read", file]);
        opts.network = NetworkMode::None;
        let p = ctx.probe_run(opts).await?;
        p.report()?;
        forbid!(
            p.stdout_contains(needle),
            "with network `none` the command's {file} shows the host's {needle}"
        );
    }
    Ok(())
}

/// An abstract unix socket of the host (a service that has no file, so no path rule
/// covers it) is out of reach in every network mode the backend enforces exactly.
pub async fn host_abstract_socket_unreachable(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("net-abstract")?;
    let t = token();
    let listener = AbstractListener::start(&format!("sandbox-conformance-{t}"), &t)?;
    let cap = ctx.capability();
    let modes: Vec<NetworkMode> = [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full]
        .into_iter()
        .filter(|m| cap.network(*m).is_exact())
        .collect();
    ensure!(
        !modes.is_empty(),
        "the backend enforces no network mode exactly, so nothing could be judged"
    );
    for mode in modes {
        let mut opts = ctx.opts(ws.path(), ["connect-abstract", listener.name()]);
        opts.network = mode;
        let p = ctx.probe_run(opts).await?;
        p.report()?;
        forbid!(
            p.succeeded() || p.stdout_contains(listener.token()) || listener.accepted() > 0,
            "with network `{mode}` the command reached the host's abstract unix socket \
             @{} ({} connection(s)): {}",
            listener.name(),
            listener.accepted(),
            p.describe()
        );
    }
    Ok(())
}
