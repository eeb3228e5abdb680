//! The one-run state machine every backend shares: idle, starting, running, done.
//!
//! A backend's supervisor task owns the running command; the sandbox value keeps a
//! [`RunHandle`] that any task may use to read logs, ask for a kill or wait for the
//! outcome. This is what lets `kill` be called from one task while another is in `wait`.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::outcome::Logs;
use crate::process::output::{snapshot, CaptureBuffer, SharedCapture};
use crate::{SandboxError, SandboxOutcome};

type Done = Option<Result<SandboxOutcome, Arc<SandboxError>>>;

/// The caller's side of a running command.
#[derive(Debug)]
pub struct RunHandle {
    stdout: SharedCapture,
    stderr: SharedCapture,
    kill_tx: watch::Sender<bool>,
    done_rx: watch::Receiver<Done>,
}

/// The supervisor's side: where it hears a kill request and reports the outcome.
#[derive(Debug)]
pub struct RunControl {
    /// Captured standard output (write into it).
    pub stdout: SharedCapture,
    /// Captured standard error (write into it).
    pub stderr: SharedCapture,
    /// Becomes `true` when the caller asks for a kill (or the sandbox is dropped).
    pub kill_rx: watch::Receiver<bool>,
    done_tx: watch::Sender<Done>,
}

impl RunControl {
    /// Report the end of the run. Call once, after everything is cleaned up.
    pub fn finish(self, result: Result<SandboxOutcome, SandboxError>) {
        let _ = self.done_tx.send(Some(result.map_err(Arc::new)));
    }

    /// True once a kill was asked for.
    pub fn kill_requested(&self) -> bool {
        *self.kill_rx.borrow()
    }
}

/// A handle and its control, for a run whose streams are capped at `output_limit`.
pub fn run_channel(output_limit: usize) -> (RunHandle, RunControl) {
    let stdout = Arc::new(Mutex::new(CaptureBuffer::new(output_limit)));
    let stderr = Arc::new(Mutex::new(CaptureBuffer::new(output_limit)));
    let (kill_tx, kill_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(None);
    (
        RunHandle {
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            kill_tx,
            done_rx,
        },
        RunControl {
            stdout,
            stderr,
            kill_rx,
            done_tx,
        },
    )
}

impl RunHandle {
    /// Output so far.
    pub fn logs(&self) -> Logs {
        Logs {
            stdout: snapshot(&self.stdout),
            stderr: snapshot(&self.stderr),
        }
    }

    /// Wait for the outcome.
    pub async fn wait(&self) -> Result<SandboxOutcome, SandboxError> {
        let mut rx = self.done_rx.clone();
        let done = rx
            .wait_for(|d| d.is_some())
            .await
            .map_err(|_| {
                SandboxError::io(
                    "waiting for the sandbox",
                    std::io::Error::other("the supervisor ended without an outcome"),
                )
            })?
            .clone();
        match done {
            Some(Ok(outcome)) => Ok(outcome),
            Some(Err(e)) => Err(SandboxError::io(
                "the sandboxed run failed",
                std::io::Error::other(e.to_string()),
            )),
            None => unreachable_none(),
        }
    }

    /// Ask for a kill and wait until the run is over.
    pub async fn kill(&self) -> Result<(), SandboxError> {
        self.request_kill();
        self.wait().await.map(|_| ())
    }

    /// Ask for a kill without waiting.
    pub fn request_kill(&self) {
        if self.done_rx.borrow().is_none() {
            let _ = self.kill_tx.send(true);
        }
    }

    /// True once the outcome is known.
    pub fn is_done(&self) -> bool {
        self.done_rx.borrow().is_some()
    }
}

fn unreachable_none() -> Result<SandboxOutcome, SandboxError> {
    Err(SandboxError::State {
        verb: "wait",
        state: "without an outcome",
    })
}

#[derive(Debug, Default)]
enum Slot {
    #[default]
    Idle,
    Starting,
    Running(Arc<RunHandle>),
}

/// The state of one sandbox value: guards against verbs out of order.
#[derive(Debug, Default)]
pub struct RunSlot {
    slot: Mutex<Slot>,
}

/// Held while `run` starts the command; if dropped without [`StartGuard::started`] (an
/// error before anything ran), the slot goes back to idle.
#[derive(Debug)]
pub struct StartGuard<'a> {
    slot: &'a RunSlot,
    armed: bool,
}

impl StartGuard<'_> {
    /// The command is running under `handle`.
    pub fn started(mut self, handle: RunHandle) {
        self.armed = false;
        if let Ok(mut s) = self.slot.slot.lock() {
            *s = Slot::Running(Arc::new(handle));
        }
    }
}

impl Drop for StartGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut s) = self.slot.slot.lock() {
                *s = Slot::Idle;
            }
        }
    }
}

impl RunSlot {
    /// Begin `run`: a state error unless idle.
    pub fn begin(&self) -> Result<StartGuard<'_>, SandboxError> {
        let mut s = self.slot.lock().map_err(|_| poisoned())?;
        match *s {
            Slot::Idle => {
                *s = Slot::Starting;
                Ok(StartGuard {
                    slot: self,
                    armed: true,
                })
            }
            Slot::Starting => Err(SandboxError::State {
                verb: "run",
                state: "starting",
            }),
            Slot::Running(_) => Err(SandboxError::State {
                verb: "run",
                state: "already running or finished (a sandbox runs one command)",
            }),
        }
    }

    /// The running command's handle, or a state error naming `verb`.
    pub fn handle(&self, verb: &'static str) -> Result<Arc<RunHandle>, SandboxError> {
        let s = self.slot.lock().map_err(|_| poisoned())?;
        match &*s {
            Slot::Running(h) => Ok(h.clone()),
            Slot::Idle => Err(SandboxError::State {
                verb,
                state: "not started (call run first)",
            }),
            Slot::Starting => Err(SandboxError::State {
                verb,
                state: "still starting",
            }),
        }
    }
}

impl Drop for RunSlot {
    /// The backstop: a sandbox dropped while its command runs kills the tree.
    fn drop(&mut self) {
        if let Ok(Slot::Running(h)) = self.slot.get_mut() {
            h.request_kill();
        }
    }
}

fn poisoned() -> SandboxError {
    SandboxError::State {
        verb: "use",
        state: "poisoned by a panic in another task",
    }
}
