//! What landlock's preflight and capability say about this host.
//!
//! Process lifetime (a `setsid` double-fork dies with `wait`, `kill` and the timeout),
//! many runs at once, the scrubbed environment and argv are every backend's duty and the
//! conformance suite's cases: `cargo xtask conformance --backend landlock`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use sandbox_core::{Backend, Preflight, Sandbox};

#[tokio::test(flavor = "multi_thread")]
async fn preflight_runs_a_real_command_and_reports_the_abi() {
    let p: Preflight = backend().sandbox().preflight().await.unwrap();
    assert_eq!(p.backend, "landlock");
    let v = p.version.unwrap();
    assert!(v.starts_with("landlock ABI "), "{v}");
    assert!(
        p.details.iter().any(|d| d.contains("loopback")),
        "{:?}",
        p.details
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_capability_states_what_landlock_enforces_here() {
    let c = backend().capability();
    assert!(c.confine_writes && c.confine_reads && c.readonly_carveouts);
    assert!(c.tree_kill && c.drops_host_root && c.host_programs);
    assert!(c.network_full.is_exact());
    // This host allows the namespaces (root, or unprivileged user namespaces): a pid
    // namespace for process isolation, a network namespace for `none` and `loopback`.
    assert!(c.process_isolation, "a pid namespace can be made here");
    assert!(c.network_none.is_exact() && c.network_loopback.is_exact());
}
