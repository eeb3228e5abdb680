//! A build with one backend feature pulls in only that backend's dependencies: checked
//! with `cargo tree` over the normal (non-dev, non-build) edges, as a user's build sees
//! them. Run with `--nocapture` to see the trees.

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// The crates in `cargo tree -p sandbox --no-default-features --features FEATURES -e normal`.
fn tree(features: &str) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "tree",
        "-p",
        "sandbox",
        "--no-default-features",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    if !features.is_empty() {
        cmd.args(["--features", features]);
    }
    let o = cmd.output().expect("cargo runs");
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let crates: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    eprintln!(
        "--features {features:?}: {}",
        crates.iter().cloned().collect::<Vec<_>>().join(" ")
    );
    crates
}

/// Every backend the registry knows, compiled into this test or not.
fn backends() -> Vec<&'static str> {
    sandbox::registry::names().collect()
}

/// Third-party crates that only one backend (or the command line) may bring in.
fn owned_by(krate: &str) -> Option<&'static str> {
    match krate {
        "bollard" | "hyper" | "tar" => Some("docker"),
        "landlock" => Some("landlock"),
        // The shared seccomp program is used by bwrap and landlock only.
        "seccompiler" => Some("bwrap|landlock"),
        "clap" | "clap_complete" | "toml" => Some("cli"),
        "rmcp" => Some("mcp"),
        // bollard speaks JSON to the engine; gvisor writes an OCI spec.
        "serde_json" => Some("cli|docker|gvisor"),
        _ => None,
    }
}

#[test]
fn each_backend_feature_pulls_in_only_its_own_dependencies() {
    let backends = backends();
    for &feature in &backends {
        let crates = tree(feature);
        assert!(
            crates.contains(&format!("sandbox-{feature}")),
            "{feature}: {crates:?}"
        );
        for other in backends.iter().filter(|b| **b != feature) {
            assert!(
                !crates.contains(&format!("sandbox-{other}")),
                "--features {feature} pulls in sandbox-{other}"
            );
        }
        for krate in &crates {
            if let Some(owner) = owned_by(krate) {
                assert!(
                    owner.split('|').any(|o| o == feature),
                    "--features {feature} pulls in {krate}, which belongs to {owner}"
                );
            }
        }
    }
}

#[test]
fn the_library_alone_has_no_backend_and_no_command_line() {
    let crates = tree("");
    for krate in &crates {
        assert!(
            !krate.starts_with("sandbox-") || krate == "sandbox-core",
            "{krate}"
        );
        assert!(owned_by(krate).is_none(), "{krate}");
    }
    let cli = tree("cli");
    assert!(cli.contains("clap") && cli.contains("toml"), "{cli:?}");
    assert!(
        !cli.contains("rmcp"),
        "the command without `mcp` has no MCP server"
    );
    let mcp = tree("mcp");
    assert!(mcp.contains("rmcp") && mcp.contains("clap"), "{mcp:?}");
}
