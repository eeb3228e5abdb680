//! A build with one backend feature pulls in only that backend's dependencies: checked
//! with `cargo tree` over the normal (non-dev, non-build) edges, as a user's build sees
//! them. Run with `--nocapture` to see the trees.

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// The crates in `cargo tree -p PACKAGE -e normal` with `args`.
fn tree_of(package: &str, args: &[&str]) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(args);
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
        "{package} {args:?}: {}",
        crates.iter().cloned().collect::<Vec<_>>().join(" ")
    );
    crates
}

/// The crates in `cargo tree -p sandbox --no-default-features --features FEATURES -e normal`.
fn tree(features: &str) -> BTreeSet<String> {
    let mut args = vec!["--no-default-features"];
    if !features.is_empty() {
        args.extend(["--features", features]);
    }
    tree_of("sandbox", &args)
}

/// Every backend the registry knows, compiled into this test or not.
fn backends() -> Vec<&'static str> {
    sandbox::registry::names().collect()
}

/// Third-party crates that only the command line may bring in.
fn owned_by_the_command(krate: &str) -> Option<&'static str> {
    match krate {
        "clap" | "clap_complete" | "toml" => Some("cli"),
        "rmcp" => Some("mcp"),
        _ => None,
    }
}

/// Each backend feature pulls in the library and that backend's own crate with its own
/// dependencies (`cargo tree -p sandbox-NAME`), and nothing else: no other backend, and
/// nothing another backend needs that this one does not.
#[test]
fn each_backend_feature_pulls_in_only_its_own_dependencies() {
    let backends = backends();
    let library = tree("");
    for &feature in &backends {
        let crates = tree(feature);
        let own = tree_of(&format!("sandbox-{feature}"), &[]);
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
        let extra: Vec<&String> = crates
            .iter()
            .filter(|k| !library.contains(*k) && !own.contains(*k))
            .collect();
        assert!(
            extra.is_empty(),
            "--features {feature} pulls in {extra:?}, which neither the library nor \
             sandbox-{feature} needs"
        );
    }
}

/// The library alone is the contract (`sandbox-core` and what it needs): no backend, and
/// nothing a backend or the command line needs.
#[test]
fn the_library_alone_has_no_backend_and_no_command_line() {
    let crates = tree("");
    let core = tree_of("sandbox-core", &[]);
    for krate in &crates {
        assert!(
            krate == "sandbox" || core.contains(krate),
            "the library alone pulls in {krate}, which sandbox-core does not need"
        );
        assert!(owned_by_the_command(krate).is_none(), "{krate}");
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
