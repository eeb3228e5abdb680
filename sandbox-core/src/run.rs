//! The one-run state machine every backend shares: idle, starting, running, done.
//!
//! A backend's supervisor task owns the running command; the sandbox value keeps a
//! [`RunHandle`] that any task may use to read logs, ask for a kill or wait for the
//! outcome. This is what lets `kill` be called from one task while another is in `wait`.
//!
//! # One supervisor for every kind of run
//!
//! What happens between the start and the outcome is the same whether the command is a
//! host process ([`ProcessSandbox`](the host crate's `process::ProcessSandbox`)) or something an
//! engine runs for us (a container): race the command's end against the timeout and a
//! kill request, make sure nothing of the tree survives, let the output drain to its end
//! (bounded), then build the outcome and release everything before `wait` returns. That
//! sequence is [`supervise`]; a backend supplies only the verbs of its [`Job`]: how to
//! wait for the end, how to stop the tree, how to turn the end into an outcome. The
//! input and the output go through [`feed_stdin`] and [`OutputTap`], so the caps and the
//! sink behave the same for every backend.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::outcome::{Captured, Logs};
pub use crate::output::OutputTap;
use crate::output::{snapshot, CaptureBuffer, SharedCapture};
use crate::{
    Capability, OutputSink, Plan, Preflight, Sandbox, SandboxError, SandboxOpts, SandboxOutcome,
};

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

    /// Where a reader of the command's output puts what it reads: the captures, after
    /// `sink`.
    pub fn tap(&self, sink: Option<OutputSink>) -> OutputTap {
        OutputTap::new(self.stdout.clone(), self.stderr.clone(), sink)
    }
}

/// Write `bytes` to the command's input, then close it, in a task of its own (a command
/// that reads nothing must not block the run). A command that closes its input early is
/// not an error.
pub fn feed_stdin<W: AsyncWrite + Unpin + Send + 'static>(mut input: W, bytes: Vec<u8>) {
    tokio::spawn(async move {
        let _ = input.write_all(&bytes).await;
        let _ = input.shutdown().await;
    });
}

/// How a supervised run ended.
#[derive(Debug)]
pub enum End<E> {
    /// The command ended on its own, with what [`Job::exited`] returned.
    Exited(E),
    /// The timeout struck first.
    TimedOut,
    /// A kill was asked for first (or the sandbox was dropped).
    Killed,
}

/// What the supervisor hands [`Job::finish`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Finished {
    /// From the start given to [`supervise`] until the tree was stopped.
    pub wall_time: Duration,
    /// Everything captured of standard output.
    pub stdout: Captured,
    /// Everything captured of standard error.
    pub stderr: Captured,
}

/// A started command, as its backend drives it: the verbs [`supervise`] calls, in this
/// order: [`exited`](Job::exited) (raced against the timeout and kill requests),
/// [`stop`](Job::stop) once, then [`finish`](Job::finish) once.
///
/// For backends whose command is not (only) a host process: a container, a microVM, a
/// remote runner. Nothing here assumes a pid, a pipe or an engine.
#[async_trait]
pub trait Job: Send + 'static {
    /// What the command's own end reports (an exit status, or nothing when the status is
    /// read later).
    type Exit: Send + 'static;

    /// Resolve when the command has ended on its own. Dropped unfinished when the timeout
    /// or a kill wins the race, so it must be cancel-safe.
    async fn exited(&mut self) -> Self::Exit;

    /// Make sure nothing of the command's tree is alive, whatever ended it (descendants
    /// of a command that exited included); return once that is so, or once the backend's
    /// own bound on trying has passed. After this the output streams reach their end.
    async fn stop(&mut self, end: &End<Self::Exit>);

    /// The outcome, with everything the run made released (temp dirs, cgroups,
    /// containers) before it returns: `wait` returning means nothing is left behind.
    async fn finish(
        self,
        end: End<Self::Exit>,
        finished: Finished,
    ) -> Result<SandboxOutcome, SandboxError>;
}

/// How long the output readers may take to reach their end once the tree is dead: the
/// pipes close when their last writer dies; something outside our reach that holds one
/// must not hold `wait` forever.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Supervise `job` to its end in a task of its own and report the outcome to `control`'s
/// handle. `readers` are the tasks copying the output into [`RunControl::tap`]; `started`
/// is when the run began, for the wall time; `timeout` is the plan's.
pub fn supervise<J: Job>(
    job: J,
    control: RunControl,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
    timeout: Option<Duration>,
) {
    tokio::spawn(drive(job, control, readers, started, timeout));
}

async fn drive<J: Job>(
    mut job: J,
    mut control: RunControl,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
    timeout: Option<Duration>,
) {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let timer = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        exit = job.exited() => End::Exited(exit),
        _ = timer => End::TimedOut,
        _ = control.kill_rx.wait_for(|k| *k) => End::Killed,
    };
    // Whatever ended it, nothing of the tree may outlive the run.
    job.stop(&end).await;
    let wall_time = started.elapsed();
    for r in readers {
        let abort = r.abort_handle();
        if tokio::time::timeout(DRAIN_LIMIT, r).await.is_err() {
            abort.abort();
        }
    }
    let finished = Finished {
        wall_time,
        stdout: snapshot(&control.stdout),
        stderr: snapshot(&control.stderr),
    };
    let result = job.finish(end, finished).await;
    control.finish(result);
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
    /// `run` is starting the command; the sender asks it to give up.
    Starting(watch::Sender<bool>),
    Running(Arc<RunHandle>),
}

/// The state of one sandbox value: guards against verbs out of order.
#[derive(Debug)]
pub struct RunSlot {
    slot: Mutex<Slot>,
    /// Bumped on every change of `slot`, so that `kill` during the start can wait for its
    /// end.
    changed: watch::Sender<u64>,
}

impl Default for RunSlot {
    fn default() -> Self {
        Self {
            slot: Mutex::new(Slot::Idle),
            changed: watch::Sender::new(0),
        }
    }
}

tokio::task_local! {
    /// Set while a [`RunSandbox`] starts a command: becomes `true` when `kill` is called
    /// meanwhile. A starter's long steps (the copy of a large workspace) watch it with
    /// [`start_cancelled`] and give up, removing what they made.
    pub(crate) static START_CANCEL: watch::Receiver<bool>;
}

/// Runs `start` as [`RunSandbox`] runs a start: [`start_cancelled`] inside it resolves once
/// `cancel` turns `true`. For a starter's own tests, which drive a start without a sandbox.
pub async fn within_start<F: std::future::Future>(
    cancel: watch::Receiver<bool>,
    start: F,
) -> F::Output {
    START_CANCEL.scope(cancel, start).await
}

/// Resolves once `kill` was called on the sandbox whose start the current task runs;
/// never, outside a start.
pub async fn start_cancelled() {
    match START_CANCEL.try_with(Clone::clone) {
        Ok(mut rx) => {
            if rx.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        Err(_) => std::future::pending().await,
    }
}

/// A handle whose run ended before its command started: `status`, nothing captured.
pub fn ended_before_start(
    backend: &'static str,
    plan: &Plan,
    status: crate::Status,
    wall_time: Duration,
) -> RunHandle {
    let (handle, control) = run_channel(plan.output_limit);
    let outcome = SandboxOutcome {
        status,
        stdout: snapshot(&control.stdout),
        stderr: snapshot(&control.stderr),
        wall_time,
        backend,
        files: Default::default(),
        policy: plan.effective_policy(backend),
        changes: None,
        connections: crate::Connections::default(),
        denials: Default::default(),
    };
    control.finish(Ok(outcome));
    handle
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
        self.slot.changed.send_modify(|n| *n += 1);
    }
}

impl Drop for StartGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut s) = self.slot.slot.lock() {
                *s = Slot::Idle;
            }
            self.slot.changed.send_modify(|n| *n += 1);
        }
    }
}

impl RunSlot {
    /// Begin `run`: a state error unless idle. The receiver becomes `true` when `kill` is
    /// called before the start is over.
    pub fn begin(&self) -> Result<(StartGuard<'_>, watch::Receiver<bool>), SandboxError> {
        let mut s = self.slot.lock().map_err(|_| poisoned())?;
        match *s {
            Slot::Idle => {
                let (tx, rx) = watch::channel(false);
                *s = Slot::Starting(tx);
                Ok((
                    StartGuard {
                        slot: self,
                        armed: true,
                    },
                    rx,
                ))
            }
            Slot::Starting(_) => Err(SandboxError::State {
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
            Slot::Starting(_) => Err(SandboxError::State {
                verb,
                state: "still starting",
            }),
        }
    }

    /// `kill`: during the start, ask it to give up and wait for its end; then kill the
    /// command (if one started) and wait for the outcome. A start that failed meanwhile
    /// leaves nothing to kill.
    pub async fn kill(&self) -> Result<(), SandboxError> {
        let mut changed = self.changed.subscribe();
        let mut was_starting = false;
        loop {
            let running = {
                let s = self.slot.lock().map_err(|_| poisoned())?;
                match &*s {
                    Slot::Running(h) => Some(h.clone()),
                    // A start that failed went back to idle: nothing runs, nothing to kill.
                    Slot::Idle if was_starting => return Ok(()),
                    Slot::Idle => {
                        return Err(SandboxError::State {
                            verb: "kill",
                            state: "not started (call run first)",
                        })
                    }
                    Slot::Starting(cancel) => {
                        was_starting = true;
                        let _ = cancel.send(true);
                        changed.mark_unchanged();
                        None
                    }
                }
            };
            if let Some(h) = running {
                return h.kill().await;
            }
            if changed.changed().await.is_err() {
                return Err(poisoned());
            }
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

/// What a backend implements to get the whole [`Sandbox`] contract from [`RunSandbox`]:
/// its name, what it can enforce, how to check the host, and how to start a checked plan.
/// Process backends get it from their launcher (the host crate's `process::Launcher`); others
/// (a container engine) implement it directly, usually around [`supervise`].
#[async_trait]
pub trait Starter: Send + Sync + std::fmt::Debug + 'static {
    /// The backend's name.
    fn name(&self) -> &'static str;
    /// What it can enforce here.
    fn capability(&self) -> Capability;
    /// See [`Sandbox::preflight`].
    async fn preflight(&self) -> Result<Preflight, SandboxError>;
    /// Start `plan` (already checked against [`Starter::capability`]); return once the
    /// command runs. An error means nothing runs and nothing is left behind.
    async fn start(&self, plan: Plan) -> Result<RunHandle, SandboxError>;
}

/// A [`Sandbox`] for any [`Starter`]: the verbs, their order and the plan check, once for
/// every backend.
#[derive(Debug)]
pub struct RunSandbox<S: Starter> {
    starter: S,
    slot: RunSlot,
}

impl<S: Starter> RunSandbox<S> {
    /// A sandbox for one command, started by `starter` (or what converts into one: a
    /// process backend's launcher).
    pub fn new(starter: impl Into<S>) -> Self {
        Self {
            starter: starter.into(),
            slot: RunSlot::default(),
        }
    }
}

#[async_trait]
impl<S: Starter> Sandbox for RunSandbox<S> {
    fn backend(&self) -> &'static str {
        self.starter.name()
    }

    fn capability(&self) -> Capability {
        self.starter.capability()
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        self.starter.preflight().await
    }

    async fn run(&self, opts: SandboxOpts) -> Result<(), SandboxError> {
        let (guard, cancel) = self.slot.begin()?;
        let plan = Plan::new(&opts, self.starter.name(), &self.starter.capability())?;
        let began = Instant::now();
        let result = START_CANCEL
            .scope(cancel.clone(), self.starter.start(plan.clone()))
            .await;
        // A kill during the start: the starter gave up (and removed what it made), or
        // started anyway (a starter that cannot stop half way): the run is killed.
        let killed = *cancel.borrow();
        match result {
            Ok(handle) => {
                if killed {
                    handle.request_kill();
                }
                guard.started(handle);
            }
            Err(_) if killed => guard.started(ended_before_start(
                self.starter.name(),
                &plan,
                crate::Status::Killed,
                began.elapsed(),
            )),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    async fn wait(&self) -> Result<SandboxOutcome, SandboxError> {
        self.slot.handle("wait")?.wait().await
    }

    async fn kill(&self) -> Result<(), SandboxError> {
        self.slot.kill().await
    }

    async fn logs(&self) -> Result<Logs, SandboxError> {
        Ok(self.slot.handle("logs")?.logs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lane, ResourceLimits, Status};

    /// A command that never ends by itself.
    struct Forever {
        plan: Plan,
    }

    #[async_trait]
    impl Job for Forever {
        type Exit = ();
        async fn exited(&mut self) {
            std::future::pending::<()>().await
        }
        async fn stop(&mut self, _: &End<()>) {}
        async fn finish(self, end: End<()>, f: Finished) -> Result<SandboxOutcome, SandboxError> {
            Ok(SandboxOutcome {
                status: match end {
                    End::Killed => Status::Killed,
                    End::TimedOut => Status::TimedOut,
                    End::Exited(()) => Status::Exited { code: 0 },
                },
                stdout: f.stdout,
                stderr: f.stderr,
                wall_time: f.wall_time,
                backend: "test",
                files: Default::default(),
                policy: self.plan.effective_policy("test"),
                changes: None,
                connections: crate::Connections::default(),
                denials: Default::default(),
            })
        }
    }

    /// A start that holds `dir` while it works: `cooperative` gives up (removing it) when
    /// killed; otherwise it finishes its work first and starts [`Forever`].
    #[derive(Debug)]
    struct SlowStart {
        dir: std::path::PathBuf,
        cooperative: bool,
    }

    #[async_trait]
    impl Starter for SlowStart {
        fn name(&self) -> &'static str {
            "test"
        }
        fn capability(&self) -> Capability {
            Capability {
                tree_kill: true,
                ..Capability::default()
            }
        }
        async fn preflight(&self) -> Result<Preflight, SandboxError> {
            Ok(Preflight::new("test", None, Vec::new()))
        }
        async fn start(&self, plan: Plan) -> Result<RunHandle, SandboxError> {
            std::fs::create_dir(&self.dir).map_err(|e| SandboxError::io("test", e))?;
            if self.cooperative {
                start_cancelled().await;
                std::fs::remove_dir(&self.dir).map_err(|e| SandboxError::io("test", e))?;
                return Err(SandboxError::io(
                    "the test's copy",
                    std::io::Error::other("cancelled"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::fs::remove_dir(&self.dir).map_err(|e| SandboxError::io("test", e))?;
            let (handle, control) = run_channel(plan.output_limit);
            let timeout = plan.timeout;
            supervise(
                Forever { plan },
                control,
                Vec::new(),
                Instant::now(),
                timeout,
            );
            Ok(handle)
        }
    }

    fn opts(ws: &std::path::Path) -> SandboxOpts {
        let mut o = SandboxOpts::new(ws, ["true"]);
        o.lane = Lane::Trusted;
        o.limits = ResourceLimits::none();
        o
    }

    async fn kill_during_start(cooperative: bool) {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path().join("held");
        let sb = Arc::new(RunSandbox::<SlowStart>::new(SlowStart {
            dir: dir.clone(),
            cooperative,
        }));
        let runner = tokio::spawn({
            let sb = sb.clone();
            let o = opts(ws.path());
            async move { sb.run(o).await }
        });
        // Until the start holds its resource.
        while !dir.exists() {
            assert!(!runner.is_finished(), "{:?}", runner.await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let killed = tokio::time::timeout(Duration::from_secs(30), sb.kill()).await;
        assert!(matches!(killed, Ok(Ok(()))), "{killed:?}");
        // `kill` returned: the start's resource is released, and the run is over.
        assert!(!dir.exists(), "the start's resource outlived kill");
        assert!(runner.await.unwrap().is_ok());
        assert_eq!(sb.wait().await.unwrap().status, Status::Killed);
        // A second kill does nothing.
        assert!(sb.kill().await.is_ok());
    }

    #[tokio::test]
    async fn kill_during_start_cancels_it_and_reports_killed() {
        kill_during_start(true).await;
    }

    #[tokio::test]
    async fn kill_during_a_start_that_cannot_stop_kills_what_it_started() {
        kill_during_start(false).await;
    }

    #[tokio::test]
    async fn kill_before_run_is_a_state_error() {
        let ws = tempfile::tempdir().unwrap();
        let sb = RunSandbox::<SlowStart>::new(SlowStart {
            dir: ws.path().join("held"),
            cooperative: true,
        });
        assert!(matches!(
            sb.kill().await,
            Err(SandboxError::State { verb: "kill", .. })
        ));
    }
}
