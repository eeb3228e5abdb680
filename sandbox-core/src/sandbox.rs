//! The contract every backend implements.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use crate::{Capability, Logs, SandboxError, SandboxOpts, SandboxOutcome};

/// What a backend's preflight found: it works here, with this version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Preflight {
    /// The backend.
    pub backend: &'static str,
    /// The version of what it relies on (the bwrap version, the kernel's landlock ABI, the
    /// engine's API version).
    pub version: Option<String>,
    /// Facts worth showing in `doctor`.
    pub details: Vec<String>,
}

impl Preflight {
    /// A report for `backend`.
    pub fn new(backend: &'static str, version: Option<String>, details: Vec<String>) -> Self {
        Self {
            backend,
            version,
            details,
        }
    }
}

/// One sandboxed command: start it, watch it, end it.
///
/// # Contract
///
/// A `Sandbox` value runs one command once. Everything [`SandboxOpts`] asks for is a hard
/// requirement: a backend that cannot enforce it on the chosen lane refuses in [`run`]
/// before anything starts, naming what is missing. The outcome carries the policy that was
/// actually enforced.
///
/// # Cancellation and ownership
///
/// Every method takes `&self`, so a sandbox shared in an `Arc` can be killed from one task
/// while another is in [`wait`]. Dropping a running sandbox kills its whole process tree (a
/// backstop; call [`kill`] or [`wait`] to know when it is gone). Dropping the future of
/// [`wait`] does not stop the command.
///
/// # Errors
///
/// Bad options: [`SandboxError::InvalidConfig`]; a host that cannot run the backend:
/// [`SandboxError::Unavailable`] with a remedy; a lane that refuses what the backend would
/// enforce: [`SandboxError::PolicyRefused`]; verbs out of order: [`SandboxError::State`].
///
/// [`run`]: Sandbox::run
/// [`wait`]: Sandbox::wait
/// [`kill`]: Sandbox::kill
#[async_trait]
pub trait Sandbox: Send + Sync + Debug + 'static {
    /// The backend's name (`none`, `bwrap`, `landlock`, `docker`).
    fn backend(&self) -> &'static str;

    /// What this backend can enforce on this host.
    fn capability(&self) -> Capability;

    /// Check that the backend works here, by doing the real thing on a trivial command.
    ///
    /// Behaviour:
    /// - Ok with the version of what the backend relies on, or
    /// - [`SandboxError::Unavailable`] with the cause and a remedy a person can act on.
    /// - Never runs anything unconfined.
    async fn preflight(&self) -> Result<Preflight, SandboxError>;

    /// Start the command; returns once it is running.
    ///
    /// Behaviour:
    /// - Options are checked first; a bad one is an error and nothing is started or left
    ///   behind (no process, container, temp dir).
    /// - A request the backend cannot enforce on the lane is refused before anything runs.
    /// - `argv` is passed as an argv, never through a shell.
    /// - A second call is a [`SandboxError::State`] error.
    async fn run(&self, opts: SandboxOpts) -> Result<(), SandboxError>;

    /// Drive the command to its end and return the outcome.
    ///
    /// Behaviour:
    /// - Before [`run`](Sandbox::run): a state error.
    /// - Returns once the command and every descendant are gone and everything the run made
    ///   (cgroups, containers, copies) is removed.
    /// - The timeout, when set, kills the whole tree and reports [`Status::TimedOut`].
    /// - May be called again: returns the same outcome.
    ///
    /// [`Status::TimedOut`]: crate::Status::TimedOut
    async fn wait(&self) -> Result<SandboxOutcome, SandboxError>;

    /// Kill the command and all its descendants; returns once they are gone.
    ///
    /// Behaviour:
    /// - Before [`run`](Sandbox::run): a state error.
    /// - While [`run`](Sandbox::run) is still starting the command (copying a large
    ///   workspace for its layer, say): the start gives up and removes what it made (a
    ///   starter that cannot stop half way starts and is killed at once); `run` returns
    ///   `Ok`, and the outcome's status is [`Status::Killed`]. Returns once that is so.
    /// - While running: the outcome's status becomes [`Status::Killed`].
    /// - After the end: does nothing.
    ///
    /// [`Status::Killed`]: crate::Status::Killed
    async fn kill(&self) -> Result<(), SandboxError>;

    /// Standard output and error captured so far, also while the command runs.
    ///
    /// Behaviour:
    /// - Before [`run`](Sandbox::run): a state error.
    async fn logs(&self) -> Result<Logs, SandboxError>;
}

/// A sandbox chosen at run time.
pub type DynSandbox = dyn Sandbox;

/// A configured backend: makes sandboxes, one per command.
///
/// Cheap to clone and share; what it knows about the host (its [`Capability`]) is found
/// once, when it is constructed. The conformance suite and the `sandbox` facade take
/// backends as `Arc<dyn Backend>`.
pub trait Backend: Send + Sync + Debug + 'static {
    /// The backend's name (`none`, `bwrap`, `landlock`, `docker`).
    fn name(&self) -> &'static str;
    /// What it can enforce on this host.
    fn capability(&self) -> Capability;
    /// A fresh sandbox for one command.
    fn sandbox(&self) -> Box<DynSandbox>;
}

macro_rules! forward {
    ($ty:ty) => {
        #[async_trait]
        impl<S: Sandbox + ?Sized> Sandbox for $ty {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
            fn capability(&self) -> Capability {
                (**self).capability()
            }
            async fn preflight(&self) -> Result<Preflight, SandboxError> {
                (**self).preflight().await
            }
            async fn run(&self, opts: SandboxOpts) -> Result<(), SandboxError> {
                (**self).run(opts).await
            }
            async fn wait(&self) -> Result<SandboxOutcome, SandboxError> {
                (**self).wait().await
            }
            async fn kill(&self) -> Result<(), SandboxError> {
                (**self).kill().await
            }
            async fn logs(&self) -> Result<Logs, SandboxError> {
                (**self).logs().await
            }
        }
    };
}
forward!(Box<S>);
forward!(Arc<S>);

/// Conveniences on top of the contract, for every sandbox.
#[async_trait]
pub trait SandboxExt: Sandbox {
    /// `run` then `wait`.
    async fn execute(&self, opts: SandboxOpts) -> Result<SandboxOutcome, SandboxError> {
        self.run(opts).await?;
        self.wait().await
    }
}

impl<S: Sandbox + ?Sized> SandboxExt for S {}
