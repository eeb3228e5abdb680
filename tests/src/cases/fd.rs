//! Descriptors: nothing of the host's crosses but stdin, stdout and stderr.

use std::sync::Arc;

use serde_json::Value;

use super::CaseResult;
use crate::context::{token, Context, Failure};
use crate::host::LeakyFd;

/// A descriptor the host holds without close-on-exec (low and high numbered) does not
/// reach the command.
pub async fn host_fds_not_inherited(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("fds")?;
    let dir = ctx.dir("fd-canary", 0o755)?;
    let name = format!("leak-canary-{}", token());
    let canary = dir.join(&name);
    std::fs::write(&canary, "canary")?;
    let leaky = LeakyFd::open(&canary, 300)?;
    let p = ctx.probe_in(ws.path(), ["fds"]).await;
    // The descriptors stay open until the run is over, then close.
    let numbers = leaky.fds().to_vec();
    drop(leaky);
    let p = p?;
    ensure!(p.succeeded(), "fds failed: {}", p.describe());
    let fds: Vec<(i64, String)> = p
        .field("fds")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e.get("fd").and_then(Value::as_i64).unwrap_or(-1),
                        e.get("target")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    )
                })
                .collect()
        })
        .ok_or_else(|| Failure::Broken(format!("no fds in the report: {}", p.describe())))?;
    ensure!(
        [0, 1, 2].iter().all(|n| fds.iter().any(|(fd, _)| fd == n)),
        "the probe does not see its own stdin, stdout and stderr: {fds:?}"
    );
    let with_targets = p.field("proc").and_then(Value::as_bool) == Some(true);
    if with_targets {
        let leaked: Vec<_> = fds.iter().filter(|(_, t)| t.contains(&name)).collect();
        ensure!(
            leaked.is_empty(),
            "the host's descriptors reached the command: {leaked:?}"
        );
    } else {
        // Without /proc only numbers are known: the canaries' numbers must not be open.
        let leaked: Vec<_> = fds
            .iter()
            .filter(|(fd, _)| numbers.iter().any(|&n| i64::from(n) == *fd))
            .collect();
        ensure!(
            leaked.is_empty(),
            "descriptors with the host's canary numbers {numbers:?} are open in the command: \
             {leaked:?}"
        );
    }
    Ok(())
}
