//! `sandbox doctor --prove`: runs the conformance suite's confinement cases on this host,
//! against each available backend or the one named, with the command itself as the probe
//! (`sandbox __probe ...`), so no source tree or cargo is needed. A backend that runs every
//! command in an image gets one built on its engine from this program (no registry).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use sandbox::select::Config;
use sandbox::{Backend, Lane};
use sandbox_conformance::prove::{Proved, PROBE_IMAGE};
use sandbox_conformance::IN_IMAGE_PROBE;

use crate::args::DoctorArgs;
use crate::error::SANDBOX_FAILED;

/// The hidden subcommand that runs the probe.
pub const PROBE_SUBCOMMAND: &str = "__probe";

/// One backend's proof.
#[derive(Debug, Serialize)]
struct BackendProof {
    backend: &'static str,
    /// `proved`, `failed`, `unavailable` or `not_proved`.
    result: &'static str,
    /// Why it is unavailable or not proved here.
    reason: Option<String>,
    version: Option<String>,
    /// The image the cases ran in, for a backend that runs one (built from this program).
    image: Option<&'static str>,
    cases: Vec<Proved>,
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

async fn prove_one(name: &'static str, lane: Option<Lane>, exe: &Path) -> BackendProof {
    let mut proof = BackendProof {
        backend: name,
        result: "unavailable",
        reason: None,
        version: None,
        image: None,
        cases: Vec::new(),
    };
    let info = match sandbox::select::info(name) {
        Ok(i) => i,
        Err(e) => {
            proof.reason = Some(e.to_string());
            return proof;
        }
    };
    if info.unconfined {
        proof.result = "not_proved";
        proof.reason =
            Some("it confines nothing, by design, so there is no confinement to prove".into());
        return proof;
    }
    // A backend that runs every command in an image proves in one built here around this
    // program (the suite does the same with its probe), with no registry: the command's
    // confinement is the engine's and the backend's, not the image's.
    let (config, probe) = match &info.image {
        Some(image) => {
            eprintln!(
                "sandbox: {name}: building the probe image {PROBE_IMAGE} from this program on \
                 its engine (no registry; a first build takes a while)"
            );
            let built = sandbox_conformance::prove::build_probe_image(
                image.build_from_binaries,
                PROBE_IMAGE,
                exe.to_path_buf(),
                sandbox_conformance::prove::PROVE_TOOLS,
            )
            .await;
            if let Err(e) = built {
                proof.reason = Some(format!(
                    "cannot build the probe image {PROBE_IMAGE} from this program: {e}"
                ));
                return proof;
            }
            proof.image = Some(PROBE_IMAGE);
            (
                Config::with_image(PROBE_IMAGE),
                PathBuf::from(IN_IMAGE_PROBE),
            )
        }
        None => (Config::default(), exe.to_path_buf()),
    };
    let backend: Arc<dyn Backend> = match info.build(&config) {
        Ok(b) => b,
        Err(e) => {
            proof.reason = Some(e.to_string());
            return proof;
        }
    };
    if !backend.capability().host_programs && info.image.is_none() {
        // Neither the host's programs nor an image of ours: nowhere to put the probe.
        proof.result = "not_proved";
        proof.reason = Some(
            "it runs neither the host's programs nor an image this command can build, so \
             there is nowhere to put the probe"
                .into(),
        );
        return proof;
    }
    match backend.sandbox().preflight().await {
        Ok(p) => proof.version = p.version,
        Err(e) => {
            proof.reason = Some(e.to_string());
            return proof;
        }
    }
    match sandbox_conformance::prove::prove(
        backend,
        probe,
        vec![OsString::from(PROBE_SUBCOMMAND)],
        lane,
    )
    .await
    {
        Ok(cases) => {
            proof.result = if cases.iter().any(|c| c.verdict == "fail") {
                "failed"
            } else {
                "proved"
            };
            proof.cases = cases;
        }
        Err(e) => {
            proof.result = "failed";
            proof.reason = Some(format!("cannot make a scratch directory: {e}"));
        }
    }
    proof
}

fn print_text(p: &BackendProof, kernel: &str) {
    let version = p
        .version
        .as_deref()
        .map_or(String::new(), |v| format!(", {v}"));
    let version = match p.image {
        Some(image) => format!("{version}, probe image {image} built from this program"),
        None => version,
    };
    match p.result {
        "proved" | "failed" => {
            let passed = p.cases.iter().filter(|c| c.verdict == "pass").count();
            let skipped: Vec<&str> = p
                .cases
                .iter()
                .filter(|c| c.verdict == "skip")
                .map(|c| c.case.as_str())
                .collect();
            let failed: Vec<&Proved> = p.cases.iter().filter(|c| c.verdict == "fail").collect();
            if failed.is_empty() {
                println!(
                    "{}: {passed} confinement cases enforced on this host (kernel {kernel}{version}){}",
                    p.backend,
                    if skipped.is_empty() {
                        String::new()
                    } else {
                        format!("; skipped (`--json` says why): {}", skipped.join(", "))
                    }
                );
            } else {
                println!(
                    "{}: NOT ENFORCED on this host (kernel {kernel}{version}): {} of {} cases failed",
                    p.backend,
                    failed.len(),
                    failed.len() + passed
                );
                for c in failed {
                    println!("  {}: {}", c.case, c.message.as_deref().unwrap_or("failed"));
                }
                println!(
                    "  remedy: do not rely on `{}` here; run `sandbox doctor` and report its \
                     output with these lines",
                    p.backend
                );
            }
        }
        _ => println!(
            "{}: {}: {}",
            p.backend,
            if p.result == "unavailable" {
                "not available here"
            } else {
                "not proved"
            },
            p.reason.as_deref().unwrap_or("")
        ),
    }
}

/// Run `doctor --prove`; the exit status.
pub async fn prove(args: DoctorArgs) -> i32 {
    let lane = match args.lane.as_deref().map(str::parse::<Lane>).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sandbox: --lane: {e}");
            return SANDBOX_FAILED;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "sandbox: cannot find this program to use as the probe: {e}; remedy: run it \
                 by its path"
            );
            return SANDBOX_FAILED;
        }
    };
    let names: Vec<&'static str> = match &args.backend {
        Some(n) => match sandbox::select::info(n) {
            Ok(i) => vec![i.name],
            Err(e) => {
                eprintln!("sandbox: {e}");
                return SANDBOX_FAILED;
            }
        },
        // The unconfined backend has nothing to prove.
        None => sandbox::registry::compiled_in()
            .filter(|i| !i.unconfined)
            .map(|i| i.name)
            .collect(),
    };
    let kernel = kernel();
    let mut proofs = Vec::new();
    for name in names {
        // Progress on stderr (stdout is the report, JSON with --json): a backend's cases
        // take seconds, an image build longer, and silence reads as a hang.
        eprintln!("sandbox: {name}: proving the confinement cases on this host...");
        let p = prove_one(name, lane, &exe).await;
        if !args.json {
            print_text(&p, &kernel);
        }
        proofs.push(p);
    }
    if args.json {
        match serde_json::to_string_pretty(&proofs) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("sandbox: could not write the report as JSON: {e}");
                return SANDBOX_FAILED;
            }
        }
    }
    // A named backend must be proved; otherwise every backend that ran must hold, and at
    // least one must have run.
    let failed = proofs.iter().any(|p| p.result == "failed");
    let named_unproved = args.backend.is_some() && proofs.iter().any(|p| p.result != "proved");
    let none_proved = !proofs.iter().any(|p| p.result == "proved");
    if failed || named_unproved || none_proved {
        1
    } else {
        0
    }
}
