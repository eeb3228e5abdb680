//! The proxy's raw system calls, in one place: the ones no safe crate wraps. Everything
//! else the proxy asks of the kernel goes through rustix's safe calls.
//!
//! The proxy cannot use the host crate's `sys` (the host crate depends on the proxy), so
//! it keeps its own: the two namespace ioctls rustix offers only as an unsafe `ioctl`, and
//! the forked socket helper of [`crate::publish::ForkedSockets`], whose child makes only
//! plain system calls on integers and stack buffers prepared before the fork.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `ioctl(NS_GET_USERNS)`: the user namespace owning a namespace (Linux 4.9).
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// `ioctl(NS_GET_NSTYPE)`: the `CLONE_NEW*` type of a namespace descriptor (Linux 4.11).
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The `CLONE_NEW*` type of namespace descriptor `fd`; an error when it is not one.
pub(crate) fn namespace_type(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: an ioctl without an argument on a descriptor the caller keeps open for the
    // call; it writes no memory and returns the type or -1.
    let kind = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE) };
    if kind < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(kind)
    }
}

/// The user namespace owning namespace `fd`, as a new descriptor.
pub(crate) fn owning_user_namespace(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: an ioctl without an argument on a descriptor the caller keeps open for the
    // call; it writes no memory and returns a new descriptor or -1.
    let user = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_USERNS) };
    if user < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `user` is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(user) })
}

/// Fork the socket helper (see [`crate::publish::ForkedSockets`]): its descriptors 0, 1
/// and 2 become `sock` (its end of the pair), `net` (the network namespace) and `user` (its
/// owning user namespace); it enters them (the user namespace only when `join_user`) and
/// answers each byte read on the pair with one new socket. The caller's pid of the child.
pub(crate) fn fork_socket_helper(
    sock: i32,
    net: i32,
    user: i32,
    join_user: bool,
) -> io::Result<libc::pid_t> {
    // SAFETY: the child makes only async-signal-safe system calls (dup2, close_range,
    // setns, read, socket, sendmsg, close, _exit) on integers and stack buffers
    // prepared before the fork, and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe { helper(sock, net, user, join_user) }
    }
    Ok(pid)
}

/// The helper's body: descriptors 0, 1 and 2 become the pair, the network namespace and
/// its user namespace; every other is closed; it enters the namespaces and answers each
/// byte read with one new socket (or none, when it cannot make one).
///
/// # Safety
///
/// Only in a freshly forked child; never returns.
unsafe fn helper(sock: i32, net: i32, user: i32, join_user: bool) -> ! {
    // SAFETY: raw system calls on integers and stack buffers, in the forked child only.
    unsafe {
        // Up out of the way first, so that no dup2 below closes one not yet moved.
        let (s, n, u) = (
            libc::fcntl(sock, libc::F_DUPFD, 1000),
            libc::fcntl(net, libc::F_DUPFD, 1000),
            libc::fcntl(user, libc::F_DUPFD, 1000),
        );
        if s < 0
            || n < 0
            || u < 0
            || libc::dup2(s, 0) < 0
            || libc::dup2(n, 1) < 0
            || libc::dup2(u, 2) < 0
            || libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) < 0
        {
            libc::_exit(120);
        }
        if join_user && libc::setns(2, libc::CLONE_NEWUSER) != 0 {
            libc::_exit(121);
        }
        if libc::setns(1, libc::CLONE_NEWNET) != 0 {
            libc::_exit(122);
        }
        libc::close(1);
        libc::close(2);
        let mut byte = [0u8; 1];
        loop {
            if libc::read(0, byte.as_mut_ptr().cast(), 1) != 1 {
                libc::_exit(0);
            }
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            let mut cbuf = [0u64; 4];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            if fd >= 0 {
                msg.msg_control = cbuf.as_mut_ptr().cast();
                msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
            }
            let sent = libc::sendmsg(0, &msg, libc::MSG_NOSIGNAL);
            if fd >= 0 {
                libc::close(fd);
            }
            if sent < 0 {
                libc::_exit(0);
            }
        }
    }
}
