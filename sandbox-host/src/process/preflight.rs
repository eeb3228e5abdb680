//! The real command a process backend's preflight runs: `true`, through the whole backend.

use std::time::Duration;

use crate::process::{Launcher, ProcessSandbox};
use sandbox_core::{
    Lane, NetworkMode, ResourceLimits, SandboxError, SandboxExt, SandboxOpts, Status,
};

/// Run `true` through the whole of `launcher` (its launch, its steps between fork and exec,
/// core's supervision) in a fresh temp workspace tagged `kind`, on the `trusted` lane with
/// network `network`, no limits and a minute's timeout: what a preflight runs to prove the
/// backend works here, not only that its program exists. `Ok(Err(how))` when it ran and
/// did not exit 0 (`how` says how it ended, with its stderr), for the backend to turn into
/// its own error with the remedy; `Err` when it could not be run at all.
pub async fn run_true<L: Launcher + Clone>(
    launcher: &L,
    kind: &str,
    network: NetworkMode,
) -> Result<Result<(), String>, SandboxError> {
    let dir = crate::owner::temp_dir(kind)?;
    let mut opts = SandboxOpts::new(dir.path(), ["true"]);
    opts.network = network;
    opts.lane = Lane::Trusted;
    opts.limits = ResourceLimits::none();
    opts.timeout = Some(Duration::from_secs(60));
    let outcome = ProcessSandbox::new(launcher.clone()).execute(opts).await?;
    if outcome.status == (Status::Exited { code: 0 }) {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "ended with {:?}: {}",
        outcome.status,
        outcome.stderr.text().trim()
    )))
}
