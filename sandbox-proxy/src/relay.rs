//! The byte relay of an allowed connection, counting each way into the record as it goes
//! (so the record is right even when the run ends mid-transfer): bytes taken from one side
//! for the other.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Tally;

/// Large enough that a bulk download costs few system calls per megabyte.
const CHUNK: usize = 64 << 10;

#[derive(Clone, Copy)]
enum Way {
    Out,
    In,
}

async fn pump(
    tally: &Tally<'_>,
    way: Way,
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Counted before it is passed on: once the far side has the bytes, the record has
        // them too (a run that ends right after cannot lose them from the record).
        match way {
            Way::Out => tally.add(n as u64, 0),
            Way::In => tally.add(0, n as u64),
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // Half-close, so the far side sees the end of this direction.
    let _ = to.shutdown().await;
}

/// Relay until both directions are done.
pub(crate) async fn run(tally: &Tally<'_>, client: TcpStream, upstream: TcpStream) {
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::join!(pump(tally, Way::Out, cr, uw), pump(tally, Way::In, ur, cw));
}
