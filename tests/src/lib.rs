//! The conformance suite: the same cases for every sandbox backend.
//!
//! A backend is correct when it passes these cases on the host it claims to support. The
//! suite is a public library so that a backend outside this workspace runs it exactly as
//! the workspace's own backends do (see [`harness`]).
//!
//! # Shape
//!
//! - [`Case`]: one plain async function with a one-line doc, registered with an area and a
//!   name (`conformance::<area>::<case>`), a [`Requirement`] over the backend's
//!   [`Capability`](sandbox_core::Capability), and a `confinement` flag. A case that does
//!   not apply is *skipped with its reason*, never passed. Cases select themselves by what
//!   a backend claims, never by its name. The list is [`cases()`]; the functions are in
//!   [`cases`](mod@cases), callable one by one from a backend's own tests.
//! - [`Context`]: the backend under test, the probe's path as argv\[0\] sees it, a scratch
//!   directory, the capability, and the lane to use (the strictest the capability
//!   allows, decided from capability data by [`strictest_lane`]).
//! - [`host`]: what the host side uses to judge effects independently of the probe: a
//!   loopback listener that counts connections, a scan of `/proc` for survivors, a
//!   descriptor opened without close-on-exec.
//! - [`harness`]: the libtest-mimic main: `SANDBOX_BACKEND`, preflight (`UNAVAILABLE:`
//!   and exit code 3), `SANDBOX_VALIDATE`, `SANDBOX_PROBE`, `SANDBOX_CONFORMANCE_REPORT`.
//!
//! # Check inside with the probe, judge from outside
//!
//! The in-sandbox side of every case is `sandbox-probe` (this crate's binary): one action
//! per run (`read PATH`, `connect ADDR`, `fork N`, `daemonize PIDFILE`, ...), reported by
//! its exit code and one JSON line. The host then checks the effect itself wherever it
//! can: the planted file's content, the listener's connection count, `/proc` for a daemon
//! that should be dead, mode bits and owners of files left in the workspace.
//!
//! # Validating the suite
//!
//! A case that cannot fail proves nothing. With `SANDBOX_VALIDATE=1` the harness runs only
//! the confinement cases, against the unconfined `none` backend on the `trusted` lane, and
//! counts each as passing only if it failed *at its confinement check* (a
//! [`Failure::Violation`]); failing anywhere else (a setup error, a broken positive
//! control) does not count. `cargo xtask conformance --validate` shows the result.
//!
//! # Workspaces
//!
//! Each case makes its own directories under one scratch directory (under `TMPDIR`),
//! mode 0755 like a checked-out project: owned by the uid running the suite, not writable
//! by others. A backend that runs the command as another uid must make that work itself.
//! For a backend without host programs (a container), the probe is
//! `/usr/local/bin/sandbox-probe` in the image and the workspace is expected at the same
//! path inside, so host-side checks still apply.
//!
//! # Dependencies
//!
//! `sandbox-core` (the contract), `tokio` (cases are async; a multi-threaded runtime),
//! `libtest-mimic` (one trial per case, filterable by name, skips with reasons),
//! `serde_json` (the probe's report and the machine-readable result file), `tempfile`
//! (scratch directories removed when the suite ends), `libc` (descriptors without
//! close-on-exec, ownership and mode checks).

/// Fail the case (not a confinement violation) unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::Failure::Broken(format!($($fmt)+)));
        }
    };
}

/// Fail the case with a confinement violation when the forbidden effect `cond` was seen.
macro_rules! forbid {
    ($cond:expr, $($fmt:tt)+) => {
        if $cond {
            return Err($crate::Failure::Violation(format!($($fmt)+)));
        }
    };
}

pub mod cases;
mod context;
pub mod harness;
pub mod host;
pub mod probe;
pub mod prove;
mod registry;
pub mod soak;

pub use context::{
    describe, image_tool_sources, parse_report, prepare_host_env, strictest_lane, token, Context,
    Dir, Failure, Forbidden, Mode, Probed, IMAGE_TOOLS, IN_IMAGE_PROBE, PASSED_VAR, SECRET_VAR,
};
pub use registry::{cases, require, run_case, Case, CaseFn, CaseFuture, Requirement, Verdict};
