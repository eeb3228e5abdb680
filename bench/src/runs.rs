//! One timed run of each kind: a bare spawn, a run through the library, the backend's own
//! launch spawned without the library around it, and a whole `sandbox` process.
//!
//! Every function checks that the run did what is measured (exit 0, every byte arrived)
//! before its time is returned: a fast failure must never pass for a fast start.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::{Backend, SandboxError, SandboxExt, SandboxOpts, SandboxOutcome};
use sandbox_host::process::Launch;
use tokio::io::AsyncReadExt;

use crate::error::BenchError;

/// Turns options into the launch a process backend would spawn (its pure policy plus the
/// descriptors it hands over), without running it.
pub type PrepareFn = dyn Fn(&SandboxOpts) -> Result<Launch, SandboxError> + Send + Sync;

/// The read size of the bare pipe: the same as core's capture reader, so the baseline
/// differs from the sandbox only in what the sandbox adds.
const READ_CHUNK: usize = 64 * 1024;

fn show(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Spawn `argv` from this process with tokio, outputs piped and read (what a host program
/// does without a sandbox), and wait for it.
pub async fn bare_spawn(argv: &[OsString]) -> Result<Duration, BenchError> {
    let what = format!("bare spawn of `{}`", show(argv));
    let start = Instant::now();
    let out = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| BenchError::io(&what, e))?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(BenchError::wrong(what, format!("{}", out.status)));
    }
    Ok(took)
}

/// A fresh sandbox from `backend`, `run` + `wait`; the outcome must be exit 0.
pub async fn library_run(
    backend: &Arc<dyn Backend>,
    opts: SandboxOpts,
) -> Result<(Duration, SandboxOutcome), BenchError> {
    let what = format!("`{}` through {}", show(&opts.argv), backend.name());
    let start = Instant::now();
    let sandbox = backend.sandbox();
    let outcome = sandbox
        .execute(opts)
        .await
        .map_err(|e| BenchError::sandbox(&what, e))?;
    let took = start.elapsed();
    drop(sandbox);
    if !outcome.status.success() {
        return Err(BenchError::wrong(
            what,
            format!(
                "status {:?}, stderr: {}",
                outcome.status,
                outcome.stderr.text().trim()
            ),
        ));
    }
    Ok((took, outcome))
}

/// Spawn the launch `prepare` builds for `opts` exactly as given (program, argv,
/// environment, working directory, the descriptors it hands over at their numbers, its
/// credentials and its own pre-exec steps), with nothing of the library around it: no
/// plan, no cgroup, no supervisor. Preparing is not timed; spawn to exit is.
pub async fn direct_launch(
    prepare: &PrepareFn,
    opts: &SandboxOpts,
) -> Result<Duration, BenchError> {
    let mut launch = prepare(opts).map_err(|e| BenchError::sandbox("preparing the launch", e))?;
    let what = format!("{} spawned directly", launch.program.display());
    if launch.born_in.any() {
        // Only core's `clone3` makes it without copying this process (callers leave such
        // a launch out, with the reason).
        return Err(BenchError::wrong(
            what,
            "a launch born in namespaces is not spawned by the bench",
        ));
    }
    let mut cmd = std::process::Command::new(&launch.program);
    cmd.arg0(&launch.arg0)
        .args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .process_group(0);
    if let Some((uid, gid)) = launch.credentials {
        // std drops supplementary groups too when it changes the uid as root.
        cmd.uid(uid).gid(gid);
    }
    let fds: Vec<RawFd> = launch.pass_fds.iter().map(|f| f.as_raw_fd()).collect();
    let steps = std::mem::take(&mut launch.pre_exec);
    if steps.is_empty() && launch.credentials.is_none() {
        // Nothing to do between fork and exec but hand the descriptors over: they are this
        // launch's own (made for it, dropped after), so they cross the exec by losing
        // close-on-exec here, and std spawns without a closure, by `posix_spawn` (vfork-like,
        // as core spawns). A fork would charge the baseline for the bench's size.
        for &fd in &fds {
            // SAFETY: a plain system call on a descriptor the launch owns, open until the
            // launch is dropped after the run.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
                let e = std::io::Error::last_os_error();
                return Err(BenchError::io("handing a descriptor over", e));
            }
        }
        return finish(cmd, launch, what).await;
    }
    // SAFETY: between fork and exec this makes only `fcntl` calls on descriptor numbers
    // collected before the fork, then the backend's own steps, which its `PreExec`
    // contract requires to be async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for step in &steps {
                step.pre_exec()?;
            }
            Ok(())
        });
    }
    finish(cmd, launch, what).await
}

/// Spawn `cmd` (the launch's, set up), wait for it to exit, then drop `launch` (what it
/// handed over); the time from spawn to exit.
async fn finish(
    cmd: std::process::Command,
    launch: Launch,
    what: String,
) -> Result<Duration, BenchError> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let start = Instant::now();
    let out = cmd.output().await.map_err(|e| BenchError::io(&what, e))?;
    let took = start.elapsed();
    drop(launch);
    if !out.status.success() {
        return Err(BenchError::wrong(
            what,
            format!(
                "{}, stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(took)
}

/// A whole process (the `sandbox` command, or the `docker` client), outputs piped and
/// read; it must exit 0.
pub async fn whole_process(program: &Path, args: &[OsString]) -> Result<Duration, BenchError> {
    let what = format!("`{} {}`", program.display(), show(args));
    let start = Instant::now();
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| BenchError::io(&what, e))?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(BenchError::wrong(
            what,
            format!(
                "{}, stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(took)
}

/// Spawn `argv` (which writes `bytes` to standard output) with its output on a bare pipe,
/// read it to the end and count it; every byte must arrive.
pub async fn bare_pipe(argv: &[OsString], bytes: u64) -> Result<Duration, BenchError> {
    let what = format!("bare pipe from `{}`", show(argv));
    let start = Instant::now();
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| BenchError::io(&what, e))?;
    // Read on a task of its own, as the library's capture does, so the two differ only in
    // what the sandbox adds, not in which thread reads.
    let reader = child.stdout.take().map(|mut out| {
        tokio::spawn(async move {
            let mut buf = vec![0u8; READ_CHUNK];
            let mut total = 0u64;
            loop {
                match out.read(&mut buf).await {
                    Ok(0) => return Ok(total),
                    Ok(n) => total += n as u64,
                    Err(e) => return Err(e),
                }
            }
        })
    });
    let total = match reader {
        Some(task) => task
            .await
            .map_err(|e| BenchError::io(&what, std::io::Error::other(e)))?
            .map_err(|e| BenchError::io(&what, e))?,
        None => 0,
    };
    let status = child.wait().await.map_err(|e| BenchError::io(&what, e))?;
    let took = start.elapsed();
    if !status.success() || total != bytes {
        return Err(BenchError::wrong(
            what,
            format!("{status}, {total} of {bytes} bytes arrived"),
        ));
    }
    Ok(took)
}

/// Check that a flood through a sandbox delivered every byte to the capture.
pub fn check_flood(outcome: &SandboxOutcome, bytes: u64) -> Result<(), BenchError> {
    if outcome.stdout.total_bytes != bytes {
        return Err(BenchError::wrong(
            format!("the flood through {}", outcome.backend),
            format!("{} of {bytes} bytes arrived", outcome.stdout.total_bytes),
        ));
    }
    Ok(())
}

/// `program` followed by `args`, as an argv.
pub fn argv<I, S>(program: &OsStr, args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    std::iter::once(program.to_owned())
        .chain(args.into_iter().map(Into::into))
        .collect()
}
