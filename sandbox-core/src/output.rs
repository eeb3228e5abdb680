//! Output capture with a cap that keeps a stream's beginning and its end.
//!
//! The reader never stops reading (a child blocked on a full pipe would hang its tree and
//! our `wait`), and never buffers past the cap: bytes between the head and the tail are
//! counted and dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::options::{OutputSink, StreamKind};
use crate::outcome::Captured;

/// Room kept for the line that marks where bytes were dropped.
const MARKER_RESERVE: usize = 64;

/// A capped capture of one stream.
#[derive(Debug)]
pub struct CaptureBuffer {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    cap: usize,
    total: u64,
}

impl CaptureBuffer {
    /// A buffer keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        let (head_cap, tail_cap) = if cap > 4 * MARKER_RESERVE {
            let head = (cap - MARKER_RESERVE) / 2;
            (head, cap - MARKER_RESERVE - head)
        } else {
            (cap, 0)
        };
        Self {
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            cap,
            total: 0,
        }
    }

    /// Add bytes.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if self.tail_cap == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let over = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..over);
            self.tail.extend(data);
        }
    }

    /// What was kept, never more than the cap.
    pub fn snapshot(&self) -> Captured {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let truncated = self.total > kept;
        let mut bytes = self.head.clone();
        if truncated && self.tail_cap > 0 {
            let marker = format!("\n[... {} bytes elided ...]\n", self.total - kept);
            bytes.extend_from_slice(&marker.as_bytes()[..marker.len().min(MARKER_RESERVE)]);
        }
        bytes.extend(self.tail.iter());
        bytes.truncate(self.cap);
        Captured {
            bytes,
            truncated,
            total_bytes: self.total,
        }
    }
}

/// A capture shared between the reading task and `logs()`.
pub type SharedCapture = Arc<Mutex<CaptureBuffer>>;

/// Read `reader` to its end into `tap` as stream `kind`.
pub async fn drain<R: AsyncRead + Unpin>(mut reader: R, tap: OutputTap, kind: StreamKind) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tap.push(kind, &buf[..n]),
        }
    }
}

/// The current contents of a shared capture.
pub fn snapshot(capture: &SharedCapture) -> Captured {
    capture.lock().map(|c| c.snapshot()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_everything_is_kept() {
        let mut c = CaptureBuffer::new(1000);
        c.push(b"hello ");
        c.push(b"world");
        let s = c.snapshot();
        assert_eq!(s.bytes, b"hello world");
        assert!(!s.truncated);
        assert_eq!(s.total_bytes, 11);
    }

    #[test]
    fn over_the_cap_head_and_tail_are_kept_within_the_cap() {
        let mut c = CaptureBuffer::new(1000);
        c.push(b"BEGIN");
        for _ in 0..10_000 {
            c.push(b"middle middle middle\n");
        }
        c.push(b"THE END");
        let s = c.snapshot();
        assert!(s.truncated);
        assert!(s.bytes.len() <= 1000, "{}", s.bytes.len());
        assert!(s.bytes.starts_with(b"BEGIN"));
        assert!(s.bytes.ends_with(b"THE END"));
        assert!(s.text().contains("bytes elided"));
        assert_eq!(s.total_bytes, 5 + 10_000 * 21 + 7);
    }

    #[test]
    fn one_huge_chunk_keeps_its_own_tail() {
        let mut c = CaptureBuffer::new(512);
        let mut data = vec![b'a'; 100_000];
        data.extend_from_slice(b"tail!");
        c.push(&data);
        let s = c.snapshot();
        assert!(s.bytes.ends_with(b"tail!"));
        assert!(s.bytes.len() <= 512);
    }

    #[test]
    fn tiny_caps_keep_only_the_head() {
        let mut c = CaptureBuffer::new(4);
        c.push(b"abcdefgh");
        let s = c.snapshot();
        assert_eq!(s.bytes, b"abcd");
        assert!(s.truncated);
    }
}

/// The command's output on its way into the capped captures (and the caller's sink
/// first, which sees every byte, including those the cap drops).
#[derive(Clone)]
pub struct OutputTap {
    stdout: SharedCapture,
    stderr: SharedCapture,
    sink: Option<OutputSink>,
}

impl std::fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputTap")
            .field("sink", &self.sink.is_some())
            .finish_non_exhaustive()
    }
}

impl OutputTap {
    /// A tap into two captures, the caller's sink first.
    pub(crate) fn new(
        stdout: SharedCapture,
        stderr: SharedCapture,
        sink: Option<OutputSink>,
    ) -> Self {
        Self {
            stdout,
            stderr,
            sink,
        }
    }

    /// Bytes of one stream, as they arrive.
    pub fn push(&self, kind: StreamKind, bytes: &[u8]) {
        if let Some(s) = &self.sink {
            (s.0)(kind, bytes);
        }
        let capture = match kind {
            StreamKind::Stdout => &self.stdout,
            StreamKind::Stderr => &self.stderr,
        };
        if let Ok(mut c) = capture.lock() {
            c.push(bytes);
        }
    }
}
