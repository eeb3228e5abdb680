//! Resource limits: each stops what it limits, and the outcome says how.

use std::sync::Arc;
use std::time::Duration;

use sandbox_core::{LimitMechanism, Status};

use super::CaseResult;
use crate::context::{describe, Context};

/// A fork bomb stops at the process cap.
pub async fn process_cap(ctx: Arc<Context>) -> CaseResult {
    const CAP: u64 = 32;
    const WANTED: u64 = 400;
    let ws = ctx.workspace("nproc")?;
    let mut opts = ctx.opts(ws.path(), ["fork", &WANTED.to_string()]);
    opts.limits.max_processes = Some(CAP);
    let p = ctx.probe_run(opts).await?;
    let got = p.int("got")?;
    ensure!(
        (0..=CAP as i64).contains(&got),
        "with a cap of {CAP} processes the probe held {got} children at once: {}",
        p.describe()
    );
    ensure!(
        p.outcome
            .policy
            .limits
            .iter()
            .any(|l| l.limit == "processes" && l.value == CAP),
        "the process cap is not in the effective policy: {:?}",
        p.outcome.policy.limits
    );
    Ok(())
}

/// A memory limit stops a command that allocates past it (reported as out-of-memory
/// where the backend can tell); under the limit, allocation works.
pub async fn memory(ctx: Arc<Context>) -> CaseResult {
    const LIMIT: u64 = 256 << 20;
    let ws = ctx.workspace("memory")?;
    let with_limit = |mb: &str| {
        let mut o = ctx.opts(ws.path(), ["alloc", mb]);
        o.limits.memory_bytes = Some(LIMIT);
        o
    };
    let p = ctx.probe_run(with_limit("16")).await?;
    ensure!(
        p.succeeded(),
        "16 MiB under a 256 MiB limit failed: {}",
        p.describe()
    );
    let p = ctx.probe_run(with_limit("2048")).await?;
    ensure!(
        !p.succeeded() && !p.stdout_contains("\"ok\":true"),
        "2 GiB was allocated and touched under a 256 MiB limit: {}",
        p.describe()
    );
    let mechanism = p
        .outcome
        .policy
        .limits
        .iter()
        .find(|l| l.limit == "memory")
        .map(|l| l.mechanism);
    ensure!(
        mechanism.is_some(),
        "the memory limit is not in the effective policy"
    );
    if ctx.capability().oom_status && mechanism != Some(LimitMechanism::Rlimit) {
        ensure!(
            p.outcome.status == Status::OutOfMemory,
            "the backend claims to report OOM kills, but said {}",
            describe(&p.outcome)
        );
    }
    Ok(())
}

/// An open-files limit caps the descriptors a command can hold.
pub async fn open_files(ctx: Arc<Context>) -> CaseResult {
    const LIMIT: u64 = 64;
    let ws = ctx.workspace("nofile")?;
    let mut opts = ctx.opts(ws.path(), ["open-files", "1000"]);
    opts.limits.open_files = Some(LIMIT);
    let p = ctx.probe_run(opts).await?;
    let got = p.int("got")?;
    let errno = p.int("errno")?;
    // stdin, stdout and stderr take three of the limit.
    ensure!(
        (got as u64) + 3 <= LIMIT,
        "with a limit of {LIMIT} open files the probe opened {got} more: {}",
        p.describe()
    );
    ensure!(
        errno == i64::from(libc::EMFILE),
        "opening stopped with errno {errno}, not EMFILE: {}",
        p.describe()
    );
    Ok(())
}

/// A CPU-time limit ends a command that spins, long before its wall-clock timeout.
pub async fn cpu_time(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cpu")?;
    let mut opts = ctx.opts(ws.path(), ["spin"]);
    opts.limits.cpu_seconds = Some(1);
    opts.timeout = Some(Duration::from_secs(300));
    let out = ctx.run(opts).await?;
    ensure!(
        !matches!(out.status, Status::TimedOut | Status::Exited { code: 0 }),
        "a spinning command with 1 s of CPU ended with {}",
        describe(&out)
    );
    if ctx.capability().signal_status {
        ensure!(
            matches!(
                out.status,
                Status::Signaled {
                    signal: libc::SIGXCPU | libc::SIGKILL
                }
            ),
            "expected death by SIGXCPU or SIGKILL: {}",
            describe(&out)
        );
    }
    Ok(())
}

/// A run that names no memory limit gets the documented default, recorded in its policy;
/// and no writable tmpfs it sees (`/tmp`, `/dev/shm`) is larger than its limit.
pub async fn default_memory_bounds_the_host(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("default-memory")?;
    let out = ctx.run(ctx.opts(ws.path(), ["exit", "0"])).await?;
    let recorded = out
        .policy
        .limits
        .iter()
        .find(|l| l.limit == "memory")
        .map(|l| l.value);
    forbid!(
        recorded != Some(sandbox_core::DEFAULT_MEMORY_BYTES),
        "a run without a memory limit has {recorded:?} recorded, not the default {}",
        sandbox_core::DEFAULT_MEMORY_BYTES
    );
    const LIMIT: u64 = 64 << 20;
    for dir in ["/tmp", "/dev/shm"] {
        let mut o = ctx.opts(ws.path(), ["tmpfs", dir]);
        o.limits.memory_bytes = Some(LIMIT);
        let p = ctx.probe_run(o).await?;
        if !p.succeeded() {
            // Not there at all inside: nothing to fill.
            continue;
        }
        let tmpfs = p.field("tmpfs").and_then(|v| v.as_bool()) == Some(true);
        let writable = p.field("writable").and_then(|v| v.as_bool()) == Some(true);
        let size = p.int("size")?;
        forbid!(
            tmpfs && writable && size > LIMIT as i64,
            "{dir} is a writable tmpfs of {} MiB under a {} MiB memory limit",
            size >> 20,
            LIMIT >> 20
        );
    }
    Ok(())
}
