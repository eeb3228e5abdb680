//! The conformance suite for the backend in `SANDBOX_BACKEND` (default `none`): one trial
//! per case, `conformance::<area>::<case>`, so `cargo test -p sandbox-conformance -- fs::`
//! runs the filesystem cases. See `sandbox_conformance::harness` for the environment.

use std::sync::Arc;

use sandbox_core::Backend;

/// The one place a backend name becomes a backend. A plain match on purpose: each backend
/// crate adds its arm here when it lands (bwrap, landlock, docker), and a name without an
/// arm is reported unavailable.
fn backend_by_name(name: &str) -> Option<Arc<dyn Backend>> {
    match name {
        sandbox_none::NAME => Some(Arc::new(sandbox_none::NoneBackend::new())),
        sandbox_bwrap::NAME => Some(Arc::new(sandbox_bwrap::BwrapBackend::new())),
        sandbox_landlock::NAME => Some(Arc::new(sandbox_landlock::LandlockBackend::new())),
        _ => None,
    }
}

fn main() -> std::process::ExitCode {
    sandbox_conformance::harness::main(
        backend_by_name,
        env!("CARGO_BIN_EXE_sandbox-probe").as_ref(),
    )
}
