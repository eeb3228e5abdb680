//! Handing the proxy's listening socket from inside the command's network namespace to the
//! host, over a unix socket pair (`SCM_RIGHTS`).
//!
//! A socket belongs to the network namespace it was created in for its whole life, so a
//! listener made inside the command's namespace and accepted on by the host is the proxy's
//! one door into that namespace: no host socket is exposed, no helper process stays
//! inside, and the namespace itself holds nothing else. The sending side runs before the
//! command's program starts (between fork and exec for landlock, in bwrap's waiter), so the
//! command never holds the listener.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use sandbox_core::process::PreExec;
use tokio::io::Interest;

use crate::ListenerSource;

/// `CMSG_SPACE(sizeof(int))` on every 64-bit Linux target, as a constant so the child can
/// use a stack buffer.
const CMSG_BUF: usize = 24;

/// Create `127.0.0.1:port` listening in the current network namespace and send it on
/// `sock`. Only raw system calls on stack data: async-signal-safe, for use between fork
/// and exec. The listener is closed here once sent.
pub fn send_listener_raw(sock: RawFd, port: u16) -> io::Result<()> {
    // SAFETY: plain system calls on integers and stack buffers; no allocation, no locks.
    unsafe {
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if l < 0 {
            return Err(io::Error::last_os_error());
        }
        let result = (|| {
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                },
                sin_zero: [0; 8],
            };
            if libc::bind(
                l,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ) < 0
                || libc::listen(l, 1024) < 0
            {
                return Err(io::Error::last_os_error());
            }
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut cbuf = [0u64; CMSG_BUF / 8];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), l);
            if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })();
        libc::close(l);
        result
    }
}

/// The pre-exec step that sends the listener (landlock and any backend whose child makes
/// the namespace itself). Runs after the namespace is made and before anything restricts
/// sockets.
#[derive(Debug)]
pub struct SendListener {
    /// The child's end of the pair (the parent keeps it open until the run ends).
    pub sock: RawFd,
    /// The port inside.
    pub port: u16,
}

impl PreExec for SendListener {
    fn pre_exec(&self) -> io::Result<()> {
        send_listener_raw(self.sock, self.port)
    }
}

fn int_opt(fd: RawFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

/// One `recvmsg` for one descriptor; `Ok(None)` at end of stream.
fn recv_fd(sock: RawFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; every pointer set points at a live local buffer of
    // the length given.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut got = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>().add(i));
                    // Take ownership of every descriptor received, so extras are closed.
                    let owned = OwnedFd::from_raw_fd(fd);
                    if got.is_none() {
                        got = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if n == 0 && got.is_none() {
            return Ok(None);
        }
        Ok(got)
    }
}

/// Wait for the listener on the host's end of the pair. What arrives must be a listening
/// IPv4 TCP socket; anything else is refused.
pub fn receive_listener(sock: UnixStream) -> ListenerSource {
    Box::pin(async move {
        sock.set_nonblocking(true)?;
        let sock = tokio::net::UnixStream::from_std(sock)?;
        let fd = loop {
            sock.readable().await?;
            match sock.try_io(Interest::READABLE, || recv_fd(sock.as_raw_fd())) {
                Ok(Some(fd)) => break fd,
                Ok(None) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the sandbox ended without handing over the proxy's listener",
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        let raw = fd.as_raw_fd();
        if int_opt(raw, libc::SO_ACCEPTCONN)? != 1
            || int_opt(raw, libc::SO_DOMAIN)? != libc::AF_INET
            || int_opt(raw, libc::SO_TYPE)? != libc::SOCK_STREAM
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "what the sandbox handed over is not a listening TCP socket",
            ));
        }
        Ok(std::net::TcpListener::from(fd))
    })
}
