//! Many sandboxes at once.

use std::ffi::OsStr;
use std::sync::Arc;

use tokio::runtime::RuntimeFlavor;

use super::CaseResult;
use crate::context::{Context, Failure};

/// 32 sandboxes run at the same time under a multi-threaded runtime, and all finish well.
pub async fn concurrent_32(ctx: Arc<Context>) -> CaseResult {
    const N: usize = 32;
    ensure!(
        tokio::runtime::Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread,
        "this case must run on a multi-threaded runtime"
    );
    let ws = Arc::new(ctx.workspace("concurrent")?);
    let mut tasks = Vec::new();
    for i in 0..N {
        let (ctx, ws) = (ctx.clone(), ws.clone());
        tasks.push(tokio::spawn(async move {
            // Each waits until all N have marked themselves present: they must overlap.
            let id = i.to_string();
            let n = N.to_string();
            let args = [
                OsStr::new("barrier"),
                ws.path().as_os_str(),
                OsStr::new(&n),
                OsStr::new(&id),
            ];
            ctx.probe_in(ws.path(), args).await
        }));
    }
    let mut failures = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await {
            Ok(Ok(p)) if p.succeeded() => {}
            Ok(Ok(p)) => failures.push(format!("#{i}: {}", p.describe())),
            Ok(Err(e)) => failures.push(format!("#{i}: {e}")),
            Err(e) => failures.push(format!("#{i}: task failed: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(Failure::Broken(format!(
            "{} of {N} concurrent sandboxes failed: {}",
            failures.len(),
            failures.join("; ")
        )));
    }
    Ok(())
}
