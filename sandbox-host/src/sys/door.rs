//! The sandbox's side of the door: listeners made inside the command's network namespace
//! and sent to the host over a unix socket pair (`SCM_RIGHTS`), between fork and exec.
//!
//! A socket belongs to the network namespace it was created in for its whole life, so a
//! listener made inside the command's namespace and accepted on by the host is the proxy's
//! one door into that namespace: no host socket is exposed, no helper process stays
//! inside. The host's side (receiving them, serving them) is `sandbox-proxy`'s.

use std::io;
use std::os::fd::RawFd;

use sandbox_core::egress::MAX_LISTENERS;

use super::PreExec;

/// Room for a control message carrying [`MAX_LISTENERS`] descriptors, as 8-byte words so
/// it is aligned for `cmsghdr`: a 16-byte header and 4 bytes per descriptor, rounded up.
const CMSG_WORDS: usize = (16 + 4 * MAX_LISTENERS).div_ceil(8) + 1;

/// Create a listener on `127.0.0.1:PORT` for each of `ports` in the current network
/// namespace (port 0: open the namespace itself, `/proc/self/ns/net`) and send them all, in
/// order, in one message on `sock`. Only raw system calls
/// on stack data: async-signal-safe, for use between fork and exec. The listeners are
/// closed here once sent.
pub fn send_listeners_raw(sock: RawFd, ports: &[u16]) -> io::Result<()> {
    if ports.is_empty() || ports.len() > MAX_LISTENERS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut fds: [RawFd; MAX_LISTENERS] = [-1; MAX_LISTENERS];
    // SAFETY: plain system calls on integers and stack buffers; no allocation, no locks.
    let result = unsafe {
        (|| {
            for (i, &port) in ports.iter().enumerate() {
                if port == 0 {
                    // This network namespace itself, for the sockets of published ports.
                    let ns = libc::open(
                        c"/proc/self/ns/net".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    );
                    if ns < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    fds[i] = ns;
                    continue;
                }
                let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                if l < 0 {
                    return Err(io::Error::last_os_error());
                }
                fds[i] = l;
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
            }
            let n = ports.len();
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut cbuf = [0u64; CMSG_WORDS];
            let data_len = (n * std::mem::size_of::<RawFd>()) as u32;
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(data_len) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().take(n).enumerate() {
                std::ptr::write_unaligned(data.add(i), *fd);
            }
            if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })()
    };
    for fd in fds.iter().filter(|fd| **fd >= 0) {
        // SAFETY: closing descriptors this function opened.
        unsafe { libc::close(*fd) };
    }
    result
}

/// The pre-exec step that sends the listeners (landlock and any backend whose child makes
/// the namespace itself). Runs after the namespace is made and before anything restricts
/// sockets.
#[derive(Debug)]
pub struct SendListener {
    /// The child's end of the pair (the parent keeps it open until the run ends).
    pub sock: RawFd,
    /// The ports inside, in the order the host expects them (allocated before the fork;
    /// the child only reads it).
    pub ports: Vec<u16>,
}

// SAFETY: `send_listeners_raw` makes only `socket`, `bind`, `listen`, `sendmsg` and
// `close` on stack arrays and the port list allocated before the fork (only read here);
// its errors are raw errnos (`last_os_error`, `from_raw_os_error`), which do not allocate.
unsafe impl PreExec for SendListener {
    fn name(&self) -> &'static str {
        "send the door's listeners"
    }

    fn pre_exec(&self) -> io::Result<()> {
        send_listeners_raw(self.sock, &self.ports)
    }
}
