//! The door without a namespace: how the supervisor answers a command's `connect`.
//!
//! Where no network namespace can be made (a default container or pod), network `proxy`
//! cannot rest on a private loopback whose one listener is the proxy. Instead the filter
//! of a mediated door ([`crate::syscalls::SyscallPolicy::mediated`]) notifies the run's
//! supervisor of every `connect`, and refuses what would open a way the supervisor does not
//! see (`listen`, sockets other than `AF_UNIX` and TCP, sends that name an address or
//! connect by themselves); landlock denies every TCP bind and connect of the command's own.
//!
//! For each notified `connect` the supervisor reads the address from the caller's memory,
//! once, and decides on what it read:
//!
//! - `AF_INET`/`AF_INET6` to an address of the run's door (the proxy's `127.0.0.1:PORT`
//!   as the command's environment names it): the supervisor makes a TCP socket of its own,
//!   tells the proxy to expect a connection from it, connects it to the proxy's listener on
//!   the host, and installs it over the caller's descriptor (`SECCOMP_IOCTL_NOTIF_ADDFD`
//!   with `SECCOMP_ADDFD_FLAG_SETFD`, allowed by the engines' default profiles, where
//!   `pidfd_getfd` needs `CAP_SYS_PTRACE`), keeping the caller's non-blocking and
//!   close-on-exec flags; the call then returns 0. The caller's own socket is never
//!   connected, so an address changed by another thread after it was read changes nothing.
//! - Any other inet address: refused (`EACCES`, as landlock answers) and recorded.
//! - Any other family (`AF_UNIX`, `AF_UNSPEC`): carried out by the kernel as if it had not
//!   been notified. The kernel reads the address again then, so what it connects to is
//!   judged by what holds without the supervisor: landlock denies every TCP connect (an
//!   address swapped to inet in the meantime fails), and unix sockets are as confined as
//!   they are with network `none`.
//!
//! Each step that read something of the caller by its pid is followed by a check that the
//! call still waits (`SECCOMP_IOCTL_NOTIF_ID_VALID`): the pid was then still the caller's.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use sandbox_core::denial::{DenialKind, DenialMechanism};

use super::notify::SharedLog;
use crate::sys::unotify::{self, Answer, Notification};

/// `sizeof(struct sockaddr_storage)`: the kernel refuses a longer address.
const MAX_ADDR: usize = 128;

/// How long the supervisor waits for the proxy's listener to take a connection.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Who is told of a connection the supervisor is about to make, so that it serves that one
/// and no other (the run's proxy, which listens on the host's loopback where anyone on the
/// host could reach it).
pub trait Admissions: Send + Sync + fmt::Debug {
    /// A connection from `from` is coming: serve it.
    fn expect(&self, from: SocketAddr);
    /// The connection from `from` was not made after all.
    fn forget(&self, from: SocketAddr);
}

/// Where a run's mediated door leads.
#[derive(Clone, Debug)]
pub struct Mediation {
    /// Each address the command may dial, and the host's listener dialled instead.
    routes: Vec<(SocketAddr, SocketAddr)>,
    /// Told of each connection before it is made.
    admissions: Arc<dyn Admissions>,
}

impl Mediation {
    /// A door whose `routes` map each address the command dials (`127.0.0.1:PORT`) to the
    /// host's listener that serves it; `admissions` is told of each connection first.
    pub fn new(routes: Vec<(SocketAddr, SocketAddr)>, admissions: Arc<dyn Admissions>) -> Self {
        Self { routes, admissions }
    }

    /// The host's listener for `dialled`, an address of the door. A door address on the
    /// loopback is reached by any loopback spelling of it (`127.0.0.1`, `::1`, the mapped
    /// form), since that is what a client may turn `localhost` into.
    fn route(&self, dialled: SocketAddr) -> Option<SocketAddr> {
        let ip = canonical(dialled.ip());
        self.routes.iter().find_map(|&(door, real)| {
            let same = door.port() == dialled.port()
                && (canonical(door.ip()) == ip
                    || (door.ip().is_loopback() && is_loopback_alias(ip)));
            same.then_some(real)
        })
    }
}

/// `ip` with an IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The loopback spellings a client uses for the door: `127.0.0.1` and `::1`.
fn is_loopback_alias(ip: IpAddr) -> bool {
    ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
}

/// Answer the notified `connect` `n` for `mediation`, recording a refusal in `log`.
pub(crate) fn answer_connect(
    listener: BorrowedFd<'_>,
    n: &Notification,
    mediation: &Mediation,
    log: &SharedLog,
) {
    let answer = match decide(listener, n, mediation) {
        Ok(a) => a,
        Err(Refusal::Errno(e)) => Answer::Fail(e),
        Err(Refusal::NotInDoor(to)) => {
            if let Ok(mut l) = log.lock() {
                l.record(
                    DenialKind::NetworkConnect,
                    &to.to_string(),
                    DenialMechanism::Seccomp,
                );
            }
            Answer::Fail(libc::EACCES)
        }
    };
    // ENOENT: the caller is gone or was interrupted; nothing waits for the answer.
    let _ = unotify::answer(listener, n.id, answer);
}

/// Why a connect fails.
enum Refusal {
    /// With this errno, as the kernel would have answered it.
    Errno(i32),
    /// The address is not one of the door's.
    NotInDoor(SocketAddr),
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Self {
        Self::Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

fn decide(
    listener: BorrowedFd<'_>,
    n: &Notification,
    mediation: &Mediation,
) -> Result<Answer, Refusal> {
    let pending = || {
        if unotify::still_pending(listener, n.id) {
            Ok(())
        } else {
            Err(Refusal::Errno(libc::ENOENT))
        }
    };
    let fd = u32::try_from(n.args[0] as i32).map_err(|_| Refusal::Errno(libc::EBADF))?;
    let len = n.args[2] as u32 as usize;
    if !(2..=MAX_ADDR).contains(&len) {
        return Err(Refusal::Errno(libc::EINVAL));
    }
    let mut addr = [0u8; MAX_ADDR];
    let mem = std::fs::File::open(format!("/proc/{}/mem", n.pid))?;
    let read = mem.read_exact_at(&mut addr[..len], n.args[1]);
    pending()?;
    read.map_err(|_| Refusal::Errno(libc::EFAULT))?;
    let Some(dialled) = parse(&addr[..len])? else {
        return Ok(Answer::Continue);
    };
    let Some(real) = mediation.route(dialled) else {
        return Err(Refusal::NotInDoor(dialled));
    };
    let flags = descriptor_flags(n.pid, fd)?;
    pending()?;
    let sock = connect_for(dialled, real, mediation.admissions.as_ref())?;
    if flags.nonblocking {
        rustix::io::ioctl_fionbio(&sock, true).map_err(io::Error::from)?;
    }
    pending()?;
    unotify::install_at(listener, n.id, sock.as_fd(), fd, flags.cloexec)?;
    Ok(Answer::Return(0))
}

/// The inet address in `raw` (a `sockaddr` as the caller passed it); `None` for another
/// family, which the kernel judges itself.
fn parse(raw: &[u8]) -> Result<Option<SocketAddr>, Refusal> {
    let family = u16::from_ne_bytes([raw[0], raw[1]]) as i32;
    let port = |r: &[u8]| u16::from_be_bytes([r[2], r[3]]);
    match family {
        libc::AF_INET if raw.len() >= 16 => Ok(Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(raw[4], raw[5], raw[6], raw[7]),
            port(raw),
        )))),
        libc::AF_INET6 if raw.len() >= 28 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&raw[8..24]);
            let flow = u32::from_be_bytes([raw[4], raw[5], raw[6], raw[7]]);
            let scope = u32::from_ne_bytes([raw[24], raw[25], raw[26], raw[27]]);
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                ip.into(),
                port(raw),
                flow,
                scope,
            ))))
        }
        libc::AF_INET | libc::AF_INET6 => Err(Refusal::Errno(libc::EINVAL)),
        _ => Ok(None),
    }
}

/// What the caller's descriptor is opened with, for the socket put in its place.
struct Flags {
    nonblocking: bool,
    cloexec: bool,
}

/// The flags of descriptor `fd` of process `pid`, which must be a socket
/// (`/proc/PID/fd/FD` and `fdinfo`, readable to the process's owner).
fn descriptor_flags(pid: u32, fd: u32) -> Result<Flags, Refusal> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map_err(|_| Refusal::Errno(libc::EBADF))?;
    if !link.as_os_str().as_encoded_bytes().starts_with(b"socket:") {
        return Err(Refusal::Errno(libc::ENOTSOCK));
    }
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
        .map_err(|_| Refusal::Errno(libc::EBADF))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or(Refusal::Errno(libc::EBADF))?;
    Ok(Flags {
        nonblocking: flags & libc::O_NONBLOCK as u32 != 0,
        cloexec: flags & libc::O_CLOEXEC as u32 != 0,
    })
}

/// A TCP socket of the family the caller dialled with, connected to `real`, the proxy
/// told to expect it first.
fn connect_for(
    dialled: SocketAddr,
    real: SocketAddr,
    admissions: &dyn Admissions,
) -> Result<OwnedFd, Refusal> {
    use rustix::net::{bind, connect, getsockname, socket_with, AddressFamily, SocketFlags};
    let v6 = dialled.is_ipv6();
    let family = if v6 {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let errno = |e: rustix::io::Errno| Refusal::Errno(e.raw_os_error());
    let sock = socket_with(
        family,
        rustix::net::SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(errno)?;
    // The proxy listens on the host's IPv4 loopback: a v6 socket reaches it mapped.
    let as_family = |a: SocketAddr| match a {
        SocketAddr::V4(a) if v6 => {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        }
        a => a,
    };
    // Bound first, so the proxy is told the source before the connection can arrive.
    let here = as_family(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
    bind(&sock, &here).map_err(errno)?;
    let local = SocketAddr::try_from(getsockname(&sock).map_err(errno)?)
        .map_err(|_| Refusal::Errno(libc::EAFNOSUPPORT))?;
    let from = SocketAddr::new(canonical(local.ip()), local.port());
    admissions.expect(from);
    // Bounded: this thread answers every notification of the run, and a listener whose
    // backlog is full would keep a plain connect retrying for minutes. Cleared after, so
    // the command's own sends keep the blocking semantics it asked for.
    use rustix::net::sockopt::{set_socket_timeout, Timeout};
    set_socket_timeout(&sock, Timeout::Send, Some(CONNECT_TIMEOUT)).map_err(errno)?;
    if let Err(e) = connect(&sock, &as_family(real)) {
        admissions.forget(from);
        // A blocking connect whose timeout ran out says EINPROGRESS.
        if e == rustix::io::Errno::INPROGRESS {
            return Err(Refusal::Errno(libc::ETIMEDOUT));
        }
        return Err(errno(e));
    }
    set_socket_timeout(&sock, Timeout::Send, None).map_err(errno)?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct Seen(Mutex<Vec<SocketAddr>>);
    impl Admissions for Seen {
        fn expect(&self, from: SocketAddr) {
            self.0.lock().unwrap().push(from);
        }
        fn forget(&self, from: SocketAddr) {
            self.0.lock().unwrap().retain(|a| *a != from);
        }
    }

    fn door(real: SocketAddr) -> Mediation {
        Mediation::new(
            vec![("127.0.0.1:3128".parse().unwrap(), real)],
            Arc::new(Seen::default()),
        )
    }

    #[test]
    fn the_door_is_reached_by_every_loopback_spelling_and_nothing_else() {
        let real: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let m = door(real);
        for ok in ["127.0.0.1:3128", "[::1]:3128", "[::ffff:127.0.0.1]:3128"] {
            assert_eq!(m.route(ok.parse().unwrap()), Some(real), "{ok}");
        }
        for no in [
            "127.0.0.1:3129",
            "127.0.0.2:3128",
            "10.0.0.1:3128",
            "[::]:3128",
            "0.0.0.0:3128",
            "[::ffff:10.0.0.1]:3128",
            "127.0.0.1:40000",
        ] {
            assert_eq!(m.route(no.parse().unwrap()), None, "{no}");
        }
    }

    fn sockaddr_in(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[4..8].copy_from_slice(&ip);
        b
    }

    #[test]
    fn addresses_parse_as_the_kernel_reads_them() {
        let a = parse(&sockaddr_in([127, 0, 0, 1], 3128)).ok().unwrap();
        assert_eq!(a, Some("127.0.0.1:3128".parse().unwrap()));
        let mut v6 = vec![0u8; 28];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&3128u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(
            parse(&v6).ok().unwrap(),
            Some("[::1]:3128".parse().unwrap())
        );
        // Short inet addresses are the kernel's EINVAL; other families are the kernel's.
        assert!(matches!(
            parse(&sockaddr_in([127, 0, 0, 1], 1)[..8]),
            Err(Refusal::Errno(libc::EINVAL))
        ));
        let mut unix = vec![0u8; 12];
        unix[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        assert!(matches!(parse(&unix), Ok(None)));
    }

    /// The supervisor's own socket reaches the listener, and the proxy was told its
    /// source before the connection arrived.
    #[test]
    fn the_supervisor_connects_its_own_socket_and_announces_it_first() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let real = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        for dialled in ["127.0.0.1:3128", "[::1]:3128"] {
            let sock = connect_for(dialled.parse().unwrap(), real, seen.as_ref())
                .ok()
                .unwrap();
            let (_, peer) = l.accept().unwrap();
            assert!(seen.0.lock().unwrap().contains(&peer), "{peer} announced");
            drop(sock);
        }
        // Nothing listens: the connection is refused and its announcement withdrawn.
        drop(l);
        let before = seen.0.lock().unwrap().len();
        assert!(matches!(
            connect_for("127.0.0.1:3128".parse().unwrap(), real, seen.as_ref()),
            Err(Refusal::Errno(libc::ECONNREFUSED))
        ));
        assert_eq!(seen.0.lock().unwrap().len(), before);
    }
}
