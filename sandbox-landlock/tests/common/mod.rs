//! Shared helpers of the integration tests: one backend per test binary, options on the
//! `fast` lane (this backend's lane), and a python probe for raw system calls.
#![allow(dead_code)]

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use sandbox_core::{Backend, Lane, SandboxExt, SandboxOpts, SandboxOutcome, Status};
use sandbox_landlock::LandlockBackend;

pub fn backend() -> &'static LandlockBackend {
    static B: OnceLock<LandlockBackend> = OnceLock::new();
    B.get_or_init(LandlockBackend::new)
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// A directory in `$TMPDIR` (which the unprivileged run points at a place it may write).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temp dir in $TMPDIR")
}

pub fn opts<S: AsRef<std::ffi::OsStr>>(ws: &Path, argv: &[S]) -> SandboxOpts {
    let mut o = SandboxOpts::new(ws, argv.iter().map(|a| a.as_ref().to_os_string()));
    o.lane = Lane::Fast;
    o.timeout = Some(Duration::from_secs(120));
    o
}

pub async fn run(o: SandboxOpts) -> SandboxOutcome {
    backend()
        .sandbox()
        .execute(o)
        .await
        .expect("the run starts")
}

/// `sh -c SCRIPT` in `ws`.
pub async fn sh(ws: &Path, script: &str) -> SandboxOutcome {
    run(opts(ws, &["sh", "-c", script])).await
}

pub fn out(o: &SandboxOutcome) -> String {
    o.stdout.text()
}

pub fn err(o: &SandboxOutcome) -> String {
    o.stderr.text()
}

pub fn assert_ok(o: &SandboxOutcome) {
    assert_eq!(
        o.status,
        Status::Exited { code: 0 },
        "stdout: {}\nstderr: {}",
        out(o),
        err(o)
    );
}

/// Python that calls system calls through ctypes and prints `name errno` per line (0 for
/// success), so the host can judge each one.
pub const PY_PRELUDE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, 0 if r != -1 else ctypes.get_errno(), flush=True)
"#;

/// Run python `body` (after [`PY_PRELUDE`]) in `ws` with `o` adjusted by `f`.
pub async fn python(ws: &Path, body: &str, f: impl FnOnce(&mut SandboxOpts)) -> SandboxOutcome {
    let script = format!("{PY_PRELUDE}\n{body}");
    let mut o = opts(ws, &["python3", "-c", &script]);
    f(&mut o);
    run(o).await
}

/// The `name errno` lines of a probe.
pub fn results(o: &SandboxOutcome) -> Vec<(String, i32)> {
    out(o)
        .lines()
        .filter_map(|l| {
            let (n, e) = l.rsplit_once(' ')?;
            Some((n.to_string(), e.parse().ok()?))
        })
        .collect()
}
