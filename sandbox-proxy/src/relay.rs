//! The byte relay of an allowed connection, counting each way into the record as it goes
//! (so the record is right even when the run ends mid-transfer): bytes taken from one side
//! for the other.
//!
//! Bytes move by `splice(2)` through a pipe of each direction's own: from one socket into
//! the pipe, from the pipe into the other socket, without being copied through this
//! process. A relay that copies costs two more copies per byte than the direct connection
//! it stands in for: on two cores shared with the client and the server, the bench's 1 GiB
//! download through the proxy went from 0.24× to 0.37× of the direct speed with `splice`
//! (`bench/PROFILE.md` §9). Where a pipe or `splice` is refused before the first byte (an
//! old kernel, a seccomp policy on the host), the relay copies instead.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::Tally;

/// Large enough that a bulk download costs few system calls and wake-ups per megabyte:
/// each direction's pipe is grown to hold it (`/proc/sys/fs/pipe-max-size` is 1 MiB by
/// default, for any user); where growing fails, a step moves what the pipe holds.
const CHUNK: usize = 1 << 20;

#[derive(Clone, Copy)]
enum Way {
    Out,
    In,
}

impl Way {
    fn count(self, tally: &Tally<'_>, n: usize) {
        // Counted before it is passed on: once the far side has the bytes, the record has
        // them too (a run that ends right after cannot lose them from the record).
        match self {
            Way::Out => tally.add(n as u64, 0),
            Way::In => tally.add(0, n as u64),
        }
    }
}

/// What the splice pump ended with.
enum Spliced {
    /// The direction is done (an end of file, or an error on either side).
    Done,
    /// `splice` was refused before any byte moved: copy instead.
    Unsupported,
}

/// One step of `splice` on a tokio socket: waits until `on` is ready for `interest`, then
/// moves what it can without blocking (a would-block clears `on`'s readiness and waits again).
async fn splice_ready(
    on: &TcpStream,
    interest: Interest,
    from: impl AsFd,
    to: impl AsFd,
    len: usize,
) -> io::Result<usize> {
    ready_io(on, interest, || {
        on.try_io(interest, || {
            splice(
                &from,
                None,
                &to,
                None,
                len,
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            )
            .map_err(io::Error::from)
        })
    })
    .await
}

async fn pump_splice(tally: &Tally<'_>, way: Way, from: &TcpStream, to: &TcpStream) -> Spliced {
    let Ok((pipe_out, pipe_in)): io::Result<(OwnedFd, OwnedFd)> =
        pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).map_err(io::Error::from)
    else {
        return Spliced::Unsupported;
    };
    let _ = rustix::pipe::fcntl_setpipe_size(&pipe_in, CHUNK);
    let mut moved_any = false;
    loop {
        let n = match splice_ready(from, Interest::READABLE, from, &pipe_in, CHUNK).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if !moved_any && is_unsupported(&e) => return Spliced::Unsupported,
            Err(_) => break,
        };
        moved_any = true;
        way.count(tally, n);
        let mut left = n;
        while left > 0 {
            match splice_ready(to, Interest::WRITABLE, &pipe_out, to, left).await {
                Ok(0) | Err(_) => return half_close(to),
                Ok(m) => left -= m,
            }
        }
    }
    half_close(to)
}

/// Half-close, so the far side sees the end of this direction.
fn half_close(to: &TcpStream) -> Spliced {
    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
    Spliced::Done
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP)
    )
}

/// The copying pump, where `splice` is refused.
async fn pump_copy(tally: &Tally<'_>, way: Way, from: &TcpStream, to: &TcpStream) {
    let mut buf = vec![0u8; CHUNK];
    'relay: loop {
        let n = match ready_io(from, Interest::READABLE, || from.try_read(&mut buf)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        way.count(tally, n);
        let mut sent = 0;
        while sent < n {
            match ready_io(to, Interest::WRITABLE, || to.try_write(&buf[sent..n])).await {
                Ok(0) | Err(_) => break 'relay,
                Ok(m) => sent += m,
            }
        }
    }
    half_close(to);
}

/// `op` once `on` is ready for `interest`, again while it would block.
async fn ready_io(
    on: &TcpStream,
    interest: Interest,
    mut op: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    loop {
        on.ready(interest).await?;
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

async fn pump(tally: &Tally<'_>, way: Way, from: &TcpStream, to: &TcpStream) {
    if let Spliced::Unsupported = pump_splice(tally, way, from, to).await {
        pump_copy(tally, way, from, to).await;
    }
}

/// Relay until both directions are done.
pub(crate) async fn run(tally: &Tally<'_>, client: TcpStream, upstream: TcpStream) {
    tokio::join!(
        pump(tally, Way::Out, &client, &upstream),
        pump(tally, Way::In, &upstream, &client)
    );
}
