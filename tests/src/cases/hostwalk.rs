//! The host's own walks over trees the command can write to: the snapshot copy, captured
//! files, and (docker) the upload and write-back. They run as the host user, so a race
//! there is an escape that no confinement inside the sandbox can stop.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::{SandboxExt, SandboxOpts, Status};

use super::CaseResult;
use crate::context::{describe, token, Context, Failure, Forbidden};

/// How long each raced run may take: generous, since the swapper takes a core.
const RACED_TIMEOUT: Duration = Duration::from_secs(30);

/// Beyond its timeout, how long a run may take to be torn down before it counts as hung.
const TEARDOWN_GRACE: Duration = Duration::from_secs(20);

/// How many runs race the swapper.
const ROUNDS: usize = 12;

fn plant(path: &Path, content: &str, mode: u32) -> std::io::Result<()> {
    std::fs::write(path, content)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// Exchange `a` and `b` atomically, as a command in the workspace would to race a walk.
fn exchange(a: &CString, b: &CString) {
    // SAFETY: plain system call on two NUL-terminated paths that outlive it; the result is
    // ignored (a failed swap only makes the race weaker, never the check wrong).
    unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        );
    }
}

/// A thread that swaps each pair of paths in a loop until dropped.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(pairs: Vec<(PathBuf, PathBuf)>) -> std::io::Result<Self> {
        let pairs = pairs
            .iter()
            .map(|(a, b)| Ok((cpath(a)?, cpath(b)?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !flag.load(Ordering::Relaxed) {
                for (a, b) in &pairs {
                    exchange(a, b);
                    swaps += 1;
                }
            }
            // An even number of swaps per pair puts everything back.
            if swaps / pairs.len().max(1) as u64 % 2 == 1 {
                for (a, b) in &pairs {
                    exchange(a, b);
                }
            }
            swaps
        });
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Run `opts` to its end, bounded from the host: `Err` names a run that outlived its
/// timeout plus the teardown grace (it is killed).
async fn bounded(
    ctx: &Context,
    opts: SandboxOpts,
) -> Result<Result<sandbox_core::SandboxOutcome, sandbox_core::SandboxError>, Duration> {
    let limit = opts.timeout.unwrap_or(RACED_TIMEOUT) + TEARDOWN_GRACE;
    let sb = ctx.sandbox();
    let t0 = Instant::now();
    match tokio::time::timeout(limit, sb.execute(opts)).await {
        Ok(r) => Ok(r),
        Err(_) => {
            let _ = tokio::time::timeout(TEARDOWN_GRACE, sb.kill()).await;
            Err(t0.elapsed())
        }
    }
}

/// A command swapping workspace entries for links to a host secret (and a file for a
/// fifo) with `RENAME_EXCHANGE`, while the host copies, captures and writes back the
/// tree: no secret crosses, nothing is written outside, and every run ends in its timeout.
pub async fn swapper_race(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("race")?;
    let outside = ctx.dir("race-secret", 0o700)?;
    let secret = format!("host-secret-{}", token());
    plant(&outside.join("secret.txt"), &secret, 0o600)?;
    plant(&ws.join("victim"), "public-file", 0o644)?;
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("evil"))?;
    std::fs::create_dir(ws.join("vdir"))?;
    plant(&ws.join("vdir/secret.txt"), "public-dir", 0o644)?;
    std::os::unix::fs::symlink(outside.path(), ws.join("evildir"))?;
    plant(&ws.join("vpipe"), "public-pipe", 0o644)?;
    nix_mkfifo(&ws.join("fifo"))?;
    let names: Vec<PathBuf> = [
        "victim",
        "evil",
        "vdir/secret.txt",
        "evildir/secret.txt",
        "vpipe",
        "fifo",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();

    let swapper = Swapper::start(vec![
        (ws.join("victim"), ws.join("evil")),
        (ws.join("vdir"), ws.join("evildir")),
        (ws.join("vpipe"), ws.join("fifo")),
    ])?;
    let snapshot = ctx.capability().snapshot;
    let mut leaks = Vec::new();
    let mut hung = Vec::new();
    let mut ended = 0;
    for round in 0..ROUNDS {
        // Snapshot rounds let the probe list the copy; plain rounds exercise capture and,
        // on a copying backend, the upload and write-back.
        let snap = snapshot && round % 2 == 0;
        let mut opts = if snap {
            ctx.opts(ws.path(), ["tree", "."])
        } else {
            ctx.opts(ws.path(), ["exit", "0"])
        };
        opts.snapshot = snap;
        opts.capture_files = names.clone();
        opts.timeout = Some(RACED_TIMEOUT);
        match bounded(&ctx, opts).await {
            Err(took) => hung.push(format!("round {round} still running after {took:?}")),
            Ok(Err(e)) => {
                // A walk may refuse a tree that changes under it; that is no leak.
                leaks.extend(
                    e.to_string()
                        .contains(&secret)
                        .then(|| format!("round {round}: the error holds the secret: {e}")),
                );
                ended += 1;
            }
            Ok(Ok(out)) => {
                ended += 1;
                if String::from_utf8_lossy(&out.stdout.bytes).contains(&secret) {
                    leaks.push(format!(
                        "round {round}: the copy held it: {}",
                        describe(&out)
                    ));
                }
                for (name, data) in &out.files {
                    if String::from_utf8_lossy(data).contains(&secret) {
                        leaks.push(format!("round {round}: captured as {}", name.display()));
                    }
                }
            }
        }
    }
    let swaps = swapper.stop();
    if swaps == 0 || ended == 0 {
        return Err(Failure::Broken(format!(
            "the race did not happen: {swaps} swaps, {ended} runs ended"
        )));
    }
    let outside_now = listing(outside.path());
    let secret_now = std::fs::read_to_string(outside.join("secret.txt")).unwrap_or_default();
    let mut f = Forbidden::new(&ctx);
    f.check(
        "a host secret crossed into the sandbox",
        !leaks.is_empty(),
        || leaks.join("; "),
    );
    f.check("a run outlived its timeout", !hung.is_empty(), || {
        hung.join("; ")
    });
    f.check(
        "the host wrote outside the workspace",
        outside_now != ["secret.txt"] || secret_now != secret,
        || format!("the secret's directory now holds {outside_now:?}"),
    );
    f.finish()
}

fn nix_mkfifo(p: &Path) -> std::io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: mkfifo on a NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A fifo in the workspace blocks neither the snapshot copy nor capturing it: the run
/// ends in time, and the fifo is neither copied nor captured.
pub async fn fifo_does_not_block(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("fifo")?;
    nix_mkfifo(&ws.join("pipe"))?;
    plant(&ws.join("plain"), "plain", 0o644)?;
    let mut opts = ctx.opts(ws.path(), ["tree", "."]);
    opts.snapshot = ctx.capability().snapshot;
    opts.capture_files = vec!["pipe".into(), "plain".into()];
    opts.timeout = Some(Duration::from_secs(20));
    let out = match bounded(&ctx, opts).await {
        Err(took) => {
            return Err(Failure::Broken(format!(
                "a fifo in the workspace held the run for {took:?}"
            )))
        }
        Ok(r) => r?,
    };
    ensure!(out.status.success(), "{}", describe(&out));
    ensure!(
        out.files.get(Path::new("plain")).map(Vec::as_slice) == Some(b"plain".as_slice()),
        "the plain file was not captured: {:?}",
        out.files.keys().collect::<Vec<_>>()
    );
    ensure!(
        !out.files.contains_key(Path::new("pipe")),
        "the fifo was captured"
    );
    Ok(())
}

/// A 300 MiB file with nothing allocated stays sparse in the snapshot copy.
pub async fn sparse_stays_sparse(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("sparse")?;
    let f = std::fs::File::create(ws.join("hole"))?;
    f.set_len(300 << 20)?;
    drop(f);
    let mut opts = ctx.opts(ws.path(), ["blocks", "hole"]);
    opts.snapshot = true;
    let p = ctx.probe_run(opts).await?;
    ensure!(p.succeeded(), "{}", p.describe());
    let (size, allocated) = (p.int("size")?, p.int("allocated")?);
    ensure!(size == 300 << 20, "the copy is {size} bytes long");
    // The kernel's own count for the copy's inode: a dense copy allocates 300 MiB.
    ensure!(
        allocated < 16 << 20,
        "the copy of a sparse file allocated {} MiB",
        allocated >> 20
    );
    Ok(())
}

/// A relative symlink that climbs out of the workspace is copied as a link, unchanged.
pub async fn climbing_link_copied_as_link(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("climb")?;
    let target = "../../../../../etc/hostname";
    std::os::unix::fs::symlink(target, ws.join("up"))?;
    std::fs::create_dir(ws.join("d"))?;
    std::os::unix::fs::symlink("../../outside", ws.join("d/up2"))?;
    let mut opts = ctx.opts(ws.path(), ["tree", "."]);
    opts.snapshot = true;
    let p = ctx.probe_run(opts).await?;
    ensure!(
        p.succeeded(),
        "a workspace with a link that climbs out did not run: {}",
        p.describe()
    );
    let links = p
        .field("links")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned();
    ensure!(
        links.contains(&format!("up->{target};")) && links.contains("up2->../../outside;"),
        "the links did not arrive as links: {links:?}"
    );
    ensure!(
        matches!(p.outcome.status, Status::Exited { code: 0 }),
        "{}",
        p.describe()
    );
    Ok(())
}
