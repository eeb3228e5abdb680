//! The program's output on the terminal as it is produced.
//!
//! Without `--max-output` every byte is passed on at once (a long build shows progress).
//! With it, each stream shows at most about that many bytes, as the captured copy keeps
//! them: the first half live, then, after the run, a marker saying how many bytes were
//! dropped and the last part, because the last lines of a failing build are the ones that
//! matter.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use sandbox::{OutputSink, StreamKind};

/// Where the bytes of one stream go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// Our standard output.
    Stdout,
    /// Our standard error.
    Stderr,
}

impl Dest {
    /// Write and flush (flushing per chunk is what makes progress visible).
    fn write(self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            Self::Stderr => std::io::stderr().lock().write_all(bytes),
        }
    }
}

/// One stream's budget: `head` bytes live, then a ring of the last `tail` bytes.
#[derive(Debug)]
pub struct Capped {
    head: u64,
    tail: usize,
    total: u64,
    ring: VecDeque<u8>,
}

impl Capped {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        let tail = limit / 2;
        Self {
            head: (limit - tail) as u64,
            tail,
            total: 0,
            ring: VecDeque::new(),
        }
    }

    /// Take `data`; return the part to show now.
    pub fn push<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let room = self.head.saturating_sub(self.total);
        self.total += data.len() as u64;
        let live = (room as usize).min(data.len());
        let rest = &data[live..];
        if self.tail > 0 && !rest.is_empty() {
            let keep = &rest[rest.len().saturating_sub(self.tail)..];
            let over = (self.ring.len() + keep.len()).saturating_sub(self.tail);
            self.ring.drain(..over);
            self.ring.extend(keep);
        }
        &data[..live]
    }

    /// What to show after the run: the marker and the tail, if anything went past the
    /// head.
    pub fn finish(&mut self) -> Vec<u8> {
        let past = self.total.saturating_sub(self.head);
        if past == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        let dropped = past - self.ring.len() as u64;
        if dropped > 0 {
            out.extend_from_slice(
                format!("\n[sandbox: {dropped} bytes of output dropped (--max-output)]\n")
                    .as_bytes(),
            );
        }
        out.extend(self.ring.drain(..));
        out
    }
}

fn index(kind: StreamKind) -> usize {
    match kind {
        StreamKind::Stdout => 0,
        StreamKind::Stderr => 1,
    }
}

/// The terminal side of a run's output.
#[derive(Debug)]
pub struct Terminal {
    stdout: Dest,
    caps: Option<Mutex<[Capped; 2]>>,
    /// Whoever reads our output went away (`sandbox run -- yes | head -1`).
    closed: AtomicBool,
    closed_notify: Notify,
}

impl Terminal {
    /// Program stdout to `stdout`, program stderr to our stderr; capped at `limit` per
    /// stream when given.
    pub fn new(stdout: Dest, limit: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            stdout,
            caps: limit.map(|l| Mutex::new([Capped::new(l), Capped::new(l)])),
            closed: AtomicBool::new(false),
            closed_notify: Notify::new(),
        })
    }

    fn dest(&self, kind: StreamKind) -> Dest {
        match kind {
            StreamKind::Stdout => self.stdout,
            StreamKind::Stderr => Dest::Stderr,
        }
    }

    fn take(&self, kind: StreamKind, data: &[u8]) {
        let shown = match &self.caps {
            None => data,
            Some(caps) => match caps.lock() {
                Ok(mut c) => c[index(kind)].push(data),
                Err(_) => return,
            },
        };
        if !shown.is_empty() {
            self.put(kind, shown);
        }
    }

    fn put(&self, kind: StreamKind, data: &[u8]) {
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        // A reader that went away ends the command, as SIGPIPE ends a writer in a shell
        // pipeline; anything else (a full disk) is not worth stopping the command for,
        // the bytes are still in the captured copy.
        if let Err(e) = self.dest(kind).write(data) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                self.closed.store(true, Ordering::Relaxed);
                self.closed_notify.notify_one();
            }
        }
    }

    /// Resolves once the reader of our output has gone away.
    pub async fn closed(&self) {
        if !self.closed.load(Ordering::Relaxed) {
            self.closed_notify.notified().await;
        }
    }

    /// The sink to put in the options.
    pub fn sink(self: &Arc<Self>) -> OutputSink {
        let me = Arc::clone(self);
        OutputSink(Arc::new(move |kind, data| me.take(kind, data)))
    }

    /// After the run: show what the caps held back for the end.
    pub fn finish(&self) {
        let Some(caps) = &self.caps else { return };
        let Ok(mut c) = caps.lock() else { return };
        for kind in [StreamKind::Stdout, StreamKind::Stderr] {
            let rest = c[index(kind)].finish();
            if !rest.is_empty() {
                self.put(kind, &rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_everything_is_live_and_nothing_is_left() {
        let mut c = Capped::new(100);
        assert_eq!(c.push(b"hello "), b"hello ");
        assert_eq!(c.push(b"world"), b"world");
        assert!(c.finish().is_empty());
    }

    #[test]
    fn over_the_cap_the_head_is_live_and_the_tail_comes_at_the_end() {
        let mut c = Capped::new(10);
        let mut live = Vec::new();
        live.extend_from_slice(c.push(b"BEGIN-"));
        for _ in 0..100 {
            live.extend_from_slice(c.push(b"middle"));
        }
        live.extend_from_slice(c.push(b"-END"));
        assert_eq!(live, b"BEGIN");
        let end = String::from_utf8(c.finish()).unwrap();
        assert!(
            end.ends_with("\n[sandbox: 600 bytes of output dropped (--max-output)]\ne-END"),
            "{end}"
        );
        // 6 + 600 + 4 bytes written, 5 shown live, 5 kept for the end.
    }

    #[test]
    fn just_over_the_head_nothing_is_dropped_and_no_marker_is_shown() {
        let mut c = Capped::new(10);
        assert_eq!(c.push(b"12345678"), b"12345");
        assert_eq!(c.finish(), b"678");
    }
}
