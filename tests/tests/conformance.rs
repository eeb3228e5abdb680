//! The conformance suite for the backend in `SANDBOX_BACKEND` (default: the registry's
//! unconfined backend): one trial
//! per case, `conformance::<area>::<case>`, so `cargo test -p sandbox-conformance -- fs::`
//! runs the filesystem cases. See `sandbox_conformance::harness` for the environment.
//!
//! `conformance --list-backends` prints the registry's backends, one per line: the name,
//! then `unconfined` for a backend that confines nothing, `unprivileged` for one an
//! ordinary user runs, `program=P` for the host program it runs, and `packages=A,B` for
//! the Debian packages it needs on the host.
//! That is how `cargo xtask` learns them (what to run, what to validate against, what
//! runs as an unprivileged uid, what CI installs) without linking any.

use std::path::PathBuf;
use std::sync::Arc;

use sandbox::registry::{self, BackendInfo};
use sandbox::select::Config;
use sandbox_core::Backend;

/// The image a backend that runs one gets: built around this build's probe first, with
/// every tool the cases run (python, git and the rest: `IMAGE_TOOLS`), from host files (no
/// registry); tagged for this build tree (`local_image_tag`), so a suite running from
/// another tree on the same engine cannot swap it mid-run.
fn image_tag() -> String {
    sandbox_core::registry::local_image_tag(
        "sandbox-conformance",
        env!("CARGO_BIN_EXE_sandbox-probe").as_ref(),
    )
}

/// The backend called `name`, from the facade's registry; `None` for a name it does not
/// know or a backend this build left out.
fn backend_by_name(name: &str) -> Option<Arc<dyn Backend>> {
    let info = registry::known(name)?.info?;
    let config = match &info.image {
        Some(image) => {
            build_probe_image(info, image.build_from_binaries);
            Config::with_image(image_tag())
        }
        None => Config::default(),
    };
    match info.build(&config) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("conformance: cannot construct {name}: {e}");
            None
        }
    }
}

/// Put the probe where a backend that runs an image runs it. A failed build is printed
/// and left for the preflight to report (engine down, no permission).
fn build_probe_image(info: &BackendInfo, build: registry::BuildImageFn) {
    let probe = PathBuf::from(env!("CARGO_BIN_EXE_sandbox-probe"));
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(sandbox_conformance::prove::build_probe_image(
                build,
                &image_tag(),
                probe,
                sandbox_conformance::IMAGE_TOOLS,
            ))
            .map_err(|e| e.to_string())
        });
    if let Err(e) = built {
        eprintln!(
            "conformance: could not build the {} image {}: {e}",
            info.name,
            image_tag()
        );
    }
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--list-backends") {
        for k in registry::KNOWN {
            let mut line = k.name.to_string();
            if let Some(info) = k.info {
                // The one that confines nothing is the one `--validate` runs the suite
                // against.
                if info.unconfined {
                    line.push_str(" unconfined");
                }
                if info.unprivileged {
                    line.push_str(" unprivileged");
                }
                if let Some(program) = info.host_key.program() {
                    line.push_str(&format!(" program={program}"));
                }
                let packages = sandbox::registry::tooling(info.name)
                    .map(|t| t.host_packages)
                    .unwrap_or_default();
                if !packages.is_empty() {
                    line.push_str(&format!(" packages={}", packages.join(",")));
                }
            }
            println!("{line}");
        }
        return std::process::ExitCode::SUCCESS;
    }
    // Unset, the backend is the one that confines nothing (as `cargo test --workspace`
    // runs it). Set before any thread exists.
    if std::env::var_os("SANDBOX_BACKEND").is_none() {
        if let Some(none) = registry::compiled_in().find(|i| i.unconfined) {
            std::env::set_var("SANDBOX_BACKEND", none.name);
        }
    }
    sandbox_conformance::harness::main_with(
        backend_by_name,
        |name| registry::known(name)?.info?.leaves,
        env!("CARGO_BIN_EXE_sandbox-probe").as_ref(),
    )
}
