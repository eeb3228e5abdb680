//! Published ports (`publish`): the host reaches a server the command runs on its own
//! `127.0.0.1:PORT`, without the command gaining any way out.
//!
//! The host listens on its `127.0.0.1:HOSTPORT`. For each connection it accepts there, it
//! gets a fresh socket made *inside* the command's network namespace (a socket belongs to
//! the namespace it was created in, for its whole life) and connects that to
//! `127.0.0.1:PORT`, then relays bytes. The command sees connections arrive on its loopback
//! from its loopback, and nothing in its namespace leads out: the host-side listener is in
//! the host's namespace, which the command cannot reach, and every socket made inside is
//! the host's, connected by the host to the one published port.
//!
//! The host's listeners are bound before anything runs ([`bind_for_plan`]), so a named host
//! port already in use is a clear error and nothing is started. [`PublishRun::finish`]
//! (called once the command has ended) stops accepting and ends every relay; dropping it
//! aborts them too.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_core::{Plan, Published, SandboxError};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// How long the connect to the command's port may take (loopback: at once, or refused).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes an unconnected TCP socket inside the command's network namespace. Blocking.
pub trait SocketMaker: Send + Sync + std::fmt::Debug + 'static {
    /// A new `AF_INET` stream socket of the command's namespace.
    fn make(&self) -> io::Result<OwnedFd>;
}

/// Sockets made by entering the namespace (an open `/proc/PID/ns/net`), on a thread of
/// its own per socket that ends right after, so that no thread of a pool is ever left in
/// the command's namespace. Needs `CAP_SYS_ADMIN` over the namespace (root).
#[derive(Debug)]
pub struct NetnsSockets(pub OwnedFd);

impl SocketMaker for NetnsSockets {
    fn make(&self) -> io::Result<OwnedFd> {
        let ns = self.0.try_clone()?;
        std::thread::Builder::new()
            .name("sandbox-netns".into())
            .spawn(move || {
                // SAFETY: `setns` on a descriptor we own; it moves only this thread, which
                // ends once the socket is made.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: a plain system call; the descriptor it returns is owned at once.
                let fd = unsafe {
                    libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `fd` is a new descriptor nothing else owns.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            })?
            .join()
            .map_err(|_| io::Error::other("the thread making a socket panicked"))?
    }
}

/// The host's listeners for `plan`'s published ports, bound now on `127.0.0.1`, with where
/// each is. A host port in use (or not ours to bind) is an error naming it.
pub fn bind_for_plan(plan: &Plan) -> Result<Vec<(StdListener, Published)>, SandboxError> {
    plan.publish
        .iter()
        .map(|p| {
            let want = SocketAddr::from((Ipv4Addr::LOCALHOST, p.host_port.unwrap_or(0)));
            let l = StdListener::bind(want).map_err(|e| {
                SandboxError::invalid(
                    "publish",
                    format!(
                        "cannot publish port {} on the host's {want}: {e}{}",
                        p.port,
                        if e.kind() == io::ErrorKind::AddrInUse {
                            " (something else listens there; name another host port, or \
                             none to let the kernel choose)"
                        } else {
                            ""
                        }
                    ),
                )
            })?;
            let host = l
                .local_addr()
                .map_err(|e| SandboxError::io("reading a published port's address", e))?;
            Ok((l, Published { port: p.port, host }))
        })
        .collect()
}

/// The relays of one run's published ports.
#[derive(Debug)]
pub struct PublishRun {
    published: Vec<Published>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl PublishRun {
    /// Where each port was published.
    pub fn published(&self) -> &[Published] {
        &self.published
    }

    /// Stop accepting and end every relay; returns once they are gone.
    pub async fn finish(&self) {
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for PublishRun {
    fn drop(&mut self) {
        if let Ok(mut t) = self.task.lock() {
            if let Some(t) = t.take() {
                t.abort();
            }
        }
    }
}

/// Serve `bound` (from [`bind_for_plan`]) with sockets from `maker`, on the current tokio
/// runtime; `None` when nothing is published.
pub fn serve(
    bound: Vec<(StdListener, Published)>,
    maker: Arc<dyn SocketMaker>,
) -> io::Result<Option<PublishRun>> {
    if bound.is_empty() {
        return Ok(None);
    }
    let published: Vec<Published> = bound.iter().map(|(_, p)| *p).collect();
    let mut listeners = Vec::new();
    for (l, p) in bound {
        l.set_nonblocking(true)?;
        listeners.push((TcpListener::from_std(l)?, p.port));
    }
    let task = tokio::spawn(async move {
        let mut tasks = JoinSet::new();
        for (l, port) in listeners {
            let maker = maker.clone();
            tasks.spawn(accept_loop(l, port, maker));
        }
        while tasks.join_next().await.is_some() {}
    });
    Ok(Some(PublishRun {
        published,
        task: Mutex::new(Some(task)),
    }))
}

/// Accept on the host, relay each connection to the command's port; every relay is owned
/// here, so aborting this ends them all.
async fn accept_loop(listener: TcpListener, port: u16, maker: Arc<dyn SocketMaker>) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    relays.spawn(relay(client, port, maker.clone()));
                }
                Err(e) => tracing::debug!("published port {port}: accept: {e}"),
            },
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
}

async fn relay(mut client: TcpStream, port: u16, maker: Arc<dyn SocketMaker>) {
    let made = tokio::task::spawn_blocking(move || maker.make()).await;
    let fd = match made {
        Ok(Ok(fd)) => fd,
        Ok(Err(e)) => return tracing::debug!("published port {port}: socket: {e}"),
        Err(e) => return tracing::debug!("published port {port}: socket: {e}"),
    };
    let std = std::net::TcpStream::from(fd);
    if std.set_nonblocking(true).is_err() {
        return;
    }
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let connect = TcpSocket::from_std_stream(std).connect(to);
    let mut inside = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        // Nothing listens there (yet): the host's client sees its connection closed.
        _ => return,
    };
    let _ = client.set_nodelay(true);
    let _ = inside.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut inside).await;
}
