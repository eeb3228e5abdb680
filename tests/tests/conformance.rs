//! The conformance suite for the backend in `SANDBOX_BACKEND` (default `none`): one trial
//! per case, `conformance::<area>::<case>`, so `cargo test -p sandbox-conformance -- fs::`
//! runs the filesystem cases. See `sandbox_conformance::harness` for the environment.

use std::path::PathBuf;
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
        sandbox_docker::NAME => Some(docker_backend()?),
        _ => None,
    }
}

/// The docker backend runs the probe from an image, so the image is built around this
/// build's probe first (FROM scratch through the engine's API: no registry). A failed
/// build is printed and left for the preflight to report (engine down, no permission).
fn docker_backend() -> Option<Arc<dyn Backend>> {
    const IMAGE: &str = "sandbox-conformance:latest";
    let probe = PathBuf::from(env!("CARGO_BIN_EXE_sandbox-probe"));
    let files = [(probe, PathBuf::from(sandbox_conformance::IN_IMAGE_PROBE))];
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let docker = sandbox_docker::connect().await?;
                sandbox_docker::build_image_from_binaries(&docker, IMAGE, &files).await
            })
            .map_err(|e| e.to_string())
        });
    if let Err(e) = built {
        eprintln!("conformance: could not build the docker image {IMAGE}: {e}");
    }
    let config = sandbox_docker::DockerConfig::new(IMAGE);
    let backend = sandbox_docker::DockerBackend::new(config).ok()?;
    Some(Arc::new(backend))
}

fn main() -> std::process::ExitCode {
    sandbox_conformance::harness::main(
        backend_by_name,
        env!("CARGO_BIN_EXE_sandbox-probe").as_ref(),
    )
}
