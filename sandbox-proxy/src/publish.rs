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
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_core::{Plan, Published, SandboxError};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
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
                // `setns` moves only this thread, which ends once the socket is made.
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )?;
                Ok(rustix::net::socket_with(
                    rustix::net::AddressFamily::INET,
                    rustix::net::SocketType::STREAM,
                    rustix::net::SocketFlags::CLOEXEC,
                    None,
                )?)
            })?
            .join()
            .map_err(|_| io::Error::other("the thread making a socket panicked"))?
    }
}

/// Sockets made by a helper process forked from the host that joined the namespace's owning
/// user namespace and then the namespace: for a host that is not root, which cannot enter a
/// network namespace from its own user namespace, but owns the sandbox's user namespace
/// (and so has every capability in it). A forked child of this multi-threaded process, it
/// makes only raw system calls on data prepared before the fork, closes every descriptor
/// but its two, and ends when the host closes its end of the pair (or dies); the drop
/// closes it and reaps it.
#[derive(Debug)]
pub struct ForkedSockets {
    sock: Mutex<std::os::unix::net::UnixStream>,
    pid: libc::pid_t,
}

impl ForkedSockets {
    /// Fork the helper for network namespace `netns`.
    pub fn spawn(netns: OwnedFd) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let user = crate::sys::owning_user_namespace(netns.as_fd())?;
        let theirs = std::fs::File::from(user.try_clone()?).metadata()?;
        let ours = std::fs::metadata("/proc/self/ns/user")?;
        let join_user = (theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino());
        let (host, child) = std::os::unix::net::UnixStream::pair()?;
        let (c, n, u) = (child.as_raw_fd(), netns.as_raw_fd(), user.as_raw_fd());
        let pid = crate::sys::fork_socket_helper(c, n, u, join_user)?;
        drop(child);
        Ok(Self {
            sock: Mutex::new(host),
            pid,
        })
    }
}

impl SocketMaker for ForkedSockets {
    fn make(&self) -> io::Result<OwnedFd> {
        use std::io::Write;
        let sock = self
            .sock
            .lock()
            .map_err(|_| io::Error::other("the socket helper's lock is poisoned"))?;
        (&*sock).write_all(&[1])?;
        crate::handover::recv_fds(sock.as_fd(), rustix::net::RecvFlags::empty())?
            .into_iter()
            .next()
            .ok_or_else(|| {
                io::Error::other("the socket helper could not make a socket in the sandbox")
            })
    }
}

impl Drop for ForkedSockets {
    fn drop(&mut self) {
        if let Ok(s) = self.sock.lock() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Reaping our own child, which ends at the shutdown above.
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        }
    }
}

/// The way to make sockets in network namespace `netns` from this host: entering it
/// directly as root, through a forked helper otherwise.
pub fn maker_for(netns: OwnedFd) -> io::Result<Arc<dyn SocketMaker>> {
    if rustix_is_root() {
        Ok(Arc::new(NetnsSockets(netns)))
    } else {
        Ok(Arc::new(ForkedSockets::spawn(netns)?))
    }
}

fn rustix_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A socket maker still to come (the namespace is handed over once the sandbox starts).
pub type MakerSource = watch::Receiver<Option<Arc<dyn SocketMaker>>>;

/// A socket maker at hand.
pub fn ready(maker: Arc<dyn SocketMaker>) -> MakerSource {
    watch::channel(Some(maker)).1
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
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl PublishRun {
    /// Where each port was published.
    pub fn published(&self) -> &[Published] {
        &self.published
    }

    /// Stop accepting and end every relay; returns once they are gone, with the host
    /// listeners and the socket maker (and a forked helper, reaped).
    pub async fn finish(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
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
    maker: MakerSource,
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
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut tasks = JoinSet::new();
        for (l, port) in listeners {
            tasks.spawn(accept_loop(l, port, maker.clone(), stop_rx.clone()));
        }
        // Each loop ends (its relays shut down and awaited) once stopped; then this task's
        // own handle on the maker goes too.
        while tasks.join_next().await.is_some() {}
        drop(maker);
    });
    Ok(Some(PublishRun {
        published,
        stop,
        task: Mutex::new(Some(task)),
    }))
}

/// Accept on the host, relay each connection to the command's port; every relay is owned
/// here, and once `stop` is set they are ended and awaited before this returns.
async fn accept_loop(
    listener: TcpListener,
    port: u16,
    maker: MakerSource,
    mut stop: watch::Receiver<bool>,
) {
    let mut relays = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    relays.spawn(relay(client, port, maker.clone()));
                }
                Err(e) => tracing::debug!("published port {port}: accept: {e}"),
            },
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
        }
    }
    drop(listener);
    relays.shutdown().await;
}

async fn relay(mut client: TcpStream, port: u16, mut maker: MakerSource) {
    // Until the sandbox has handed over its namespace, the connection waits in line.
    let Ok(maker) = maker.wait_for(|m| m.is_some()).await.map(|m| m.clone()) else {
        return;
    };
    let Some(maker) = maker else { return };
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;

    /// Sockets of this process's own namespace: the forwarder without a sandbox.
    #[derive(Debug)]
    struct Here;

    impl SocketMaker for Here {
        fn make(&self) -> io::Result<OwnedFd> {
            // SAFETY: a plain system call; the descriptor is owned at once.
            let fd =
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    }

    fn plan_publishing(publish: Vec<sandbox_core::Publish>) -> (tempfile::TempDir, Plan) {
        let d = tempfile::tempdir().unwrap();
        let mut o = sandbox_core::SandboxOpts::new(d.path(), ["/bin/true"]);
        o.network = sandbox_core::NetworkMode::Loopback;
        o.publish = publish;
        let plan = Plan::new(&o, "t", &sandbox_core::Capability::everything()).unwrap();
        (d, plan)
    }

    #[tokio::test]
    async fn a_published_port_relays_to_the_inside_port_and_finish_closes_it() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let (_d, plan) = plan_publishing(vec![sandbox_core::Publish {
            port,
            host_port: None,
        }]);
        let bound = bind_for_plan(&plan).unwrap();
        let at = bound[0].1.host;
        assert!(at.ip().is_loopback() && at.port() != 0 && at.port() != port);
        let run = serve(bound, ready(Arc::new(Here))).unwrap().unwrap();
        let served = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            s.write_all(b"inside").unwrap();
        });
        let got = tokio::task::spawn_blocking(move || {
            let mut c = std::net::TcpStream::connect(at).unwrap();
            let mut got = String::new();
            c.read_to_string(&mut got).unwrap();
            got
        })
        .await
        .unwrap();
        served.join().unwrap();
        assert_eq!(got, "inside");
        run.finish().await;
        assert!(std::net::TcpStream::connect(at).is_err(), "still listening");
    }

    #[test]
    fn a_host_port_in_use_is_refused_naming_it() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = taken.local_addr().unwrap().port();
        let (_d, plan) = plan_publishing(vec![sandbox_core::Publish {
            port: 80,
            host_port: Some(busy),
        }]);
        let e = bind_for_plan(&plan).unwrap_err();
        assert!(
            matches!(&e, SandboxError::InvalidConfig { field: "publish", reason }
                if reason.contains(&busy.to_string()) && reason.contains("something else")),
            "{e}"
        );
    }
}
