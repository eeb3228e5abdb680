//! Handing the proxy's listening socket from inside the command's network namespace to the
//! host, over a unix socket pair (`SCM_RIGHTS`).
//!
//! A socket belongs to the network namespace it was created in for its whole life, so a
//! listener made inside the command's namespace and accepted on by the host is the proxy's
//! one door into that namespace: no host socket is exposed, no helper process stays
//! inside, and the namespace itself holds nothing else. The sending side runs before the
//! command's program starts (between fork and exec for landlock, in bwrap's waiter), so the
//! command never holds the listener.

use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    sockopt, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketType,
};

use sandbox_core::egress::MAX_LISTENERS;
use tokio::io::Interest;

use crate::ListenerSource;

/// One `recvmsg` (with `flags`, such as `MSG_DONTWAIT`); the descriptors it carried (empty
/// at end of stream), each owned at once, so every descriptor received is closed with us.
pub(crate) fn recv_fds(sock: BorrowedFd<'_>, flags: RecvFlags) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_LISTENERS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | flags,
    )?;
    let mut got = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            got.extend(fds);
        }
    }
    Ok(got)
}

/// Wait for `count` listeners on the host's end of the pair, sent in one message. What
/// arrives must be exactly that many listening IPv4 TCP sockets; anything else is refused.
pub fn receive_listeners(sock: UnixStream, count: usize) -> crate::ListenersSource {
    let all = receive_handover(sock, vec![1; count]);
    Box::pin(async move { Ok(all.await?.0) })
}

/// What a run's child hands over: the listeners, and the network namespace when the run
/// publishes ports.
pub type Received = (Vec<std::net::TcpListener>, Option<OwnedFd>);

/// Wait for what the child sends for `ports` (see the host crate's `sys::door`): a listening
/// IPv4 TCP socket for each port, and for port 0 a network namespace; anything else is
/// refused.
pub fn receive_handover(
    sock: UnixStream,
    ports: Vec<u16>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<Received>> + Send>> {
    Box::pin(async move {
        sock.set_nonblocking(true)?;
        let sock = tokio::net::UnixStream::from_std(sock)?;
        let fds = loop {
            sock.readable().await?;
            match sock.try_io(Interest::READABLE, || {
                recv_fds(sock.as_fd(), RecvFlags::DONTWAIT)
            }) {
                Ok(fds) if fds.is_empty() => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the sandbox ended without handing over the proxy's listeners",
                    ))
                }
                Ok(fds) => break fds,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if fds.len() != ports.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} descriptors handed over, {} expected",
                    fds.len(),
                    ports.len()
                ),
            ));
        }
        let mut listeners = Vec::new();
        let mut netns = None;
        for (fd, port) in fds.into_iter().zip(ports) {
            if port == 0 {
                if crate::sys::namespace_type(fd.as_fd()).ok() != Some(libc::CLONE_NEWNET) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "what the sandbox handed over is not a network namespace",
                    ));
                }
                netns = Some(fd);
                continue;
            }
            if !sockopt::socket_acceptconn(&fd)?
                || sockopt::socket_domain(&fd)? != AddressFamily::INET
                || sockopt::socket_type(&fd)? != SocketType::STREAM
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "what the sandbox handed over is not a listening TCP socket",
                ));
            }
            listeners.push(std::net::TcpListener::from(fd));
        }
        Ok((listeners, netns))
    })
}

/// [`receive_listeners`] for one.
pub fn receive_listener(sock: UnixStream) -> ListenerSource {
    let many = receive_listeners(sock, 1);
    Box::pin(async move {
        many.await?
            .pop()
            .ok_or_else(|| io::Error::other("no listener"))
    })
}

/// Make a listener on `127.0.0.1:PORT` for each of `ports` inside the network namespace
/// `netns` (an open `/proc/PID/ns/net`), for a sandbox whose namespace the host did not make
/// itself but may enter (a container of a local engine, entered by root).
///
/// The same door as the handed-over listeners: a socket stays in the namespace it was made
/// in, so the host accepts on the sandbox's loopback and nothing of the host's is exposed.
/// The entering is done on a thread of its own that ends right after: `setns` moves only
/// the calling thread, and no thread of a pool (tokio's blocking pool) is ever left in the
/// sandbox's namespace. Refuses a namespace that is the caller's own (which would put the
/// proxy on the host's loopback).
pub fn listen_in_namespace(
    netns: OwnedFd,
    ports: &[u16],
) -> io::Result<Vec<std::net::TcpListener>> {
    use std::os::unix::fs::MetadataExt;
    if ports.is_empty() || ports.len() > MAX_LISTENERS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let theirs = std::fs::File::from(netns);
    let (them, us) = (
        theirs.metadata()?,
        std::fs::metadata("/proc/thread-self/ns/net")?,
    );
    if (them.dev(), them.ino()) == (us.dev(), us.ino()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the sandbox's network namespace is the host's own",
        ));
    }
    let ports = ports.to_vec();
    std::thread::Builder::new()
        .name("sandbox-netns".into())
        .spawn(move || {
            // `setns` changes only this thread's network namespace, and this thread ends
            // when the listeners are made.
            rustix::thread::move_into_link_name_space(
                theirs.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            ports
                .iter()
                .map(|&p| std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, p)))
                .collect()
        })?
        .join()
        .map_err(|_| io::Error::other("the thread making the listeners panicked"))?
}
