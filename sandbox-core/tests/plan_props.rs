//! Property tests over `Plan::new`, the one place where options become a policy: whatever
//! the caller (or an agent writing the caller's options) puts in, it never panics, and an
//! accepted request yields a policy no wider than asked.
//!
//! Paths are drawn from a small fixture tree that has the shapes that matter: a symlink out
//! of the workspace, one inside it, a dangling one, `..` and `.` components, non-UTF-8
//! bytes, newlines, NUL bytes. Capabilities are random, so the lane table is exercised
//! with every combination of claims. `cargo xtask fuzz --seconds N` runs these with a case
//! count scaled to the time given (`PROPTEST_CASES`), then the `cargo fuzz` target.

// The fixture's set-up failing is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// `..Capability::default()` keeps a field added later unclaimed, as the type's docs ask.
#![allow(clippy::needless_update)]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::Duration;

use proptest::prelude::*;
use sandbox_core::{
    Capability, Enforcement, Lane, NetworkMode, Plan, ResourceLimits, SandboxError, SandboxOpts,
};

mod common;
use common::{fixture, COMPONENTS};

/// A path: absolute under the fixture, relative, or a raw byte string.
fn path() -> impl Strategy<Value = PathBuf> {
    let parts = prop::collection::vec(prop::sample::select(COMPONENTS), 0..5);
    prop_oneof![
        4 => parts.clone().prop_map(|p| fixture().join(p.join("/"))),
        2 => parts.prop_map(|p| PathBuf::from(p.join("/"))),
        1 => prop::collection::vec(any::<u8>(), 0..12)
            .prop_map(|b| PathBuf::from(OsString::from_vec(b))),
        1 => Just(PathBuf::from("/")),
        1 => Just(PathBuf::from("/proc")),
    ]
}

/// A path for a read or write grant: mostly a directory that exists, else anything.
fn grant_path() -> impl Strategy<Value = PathBuf> {
    prop_oneof![
        8 => prop::sample::select(&["ro", "rw", "outside", "ws/sub", "ws/link_out"][..])
            .prop_map(|p| fixture().join(p)),
        1 => path(),
    ]
}

/// A path inside the workspace, relative: mostly a good one, else anything.
fn inner_path() -> impl Strategy<Value = PathBuf> {
    prop_oneof![
        8 => prop::sample::select(&["sub", "sub/deep", "link_in", "."][..]).prop_map(PathBuf::from),
        1 => path(),
    ]
}

/// The workspace: mostly the fixture's, sometimes anything.
fn workspace() -> impl Strategy<Value = PathBuf> {
    prop_oneof![
        12 => Just(fixture().join("ws")),
        1 => Just(fixture().join("ws_link")),
        1 => Just(fixture().join("ws/sub")),
        1 => path(),
    ]
}

/// Any bytes, quotes, newlines, leading dashes; sometimes a NUL.
fn arg() -> impl Strategy<Value = OsString> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..16).prop_map(OsString::from_vec),
        2 => prop::sample::select(&["-", "--", "--help", "'", "\"", "$(id)", "a b", "\n", ""][..])
            .prop_map(OsString::from),
    ]
}

fn argv() -> impl Strategy<Value = Vec<OsString>> {
    let program = prop_oneof![
        12 => Just(OsString::from("true")),
        2 => Just(OsString::from("/bin/sh")),
        1 => Just(OsString::from("definitely-not-a-program")),
        1 => arg(),
    ];
    (program, prop::collection::vec(arg(), 0..6)).prop_map(|(p, mut rest)| {
        rest.insert(0, p);
        rest
    })
}

fn enforcement() -> impl Strategy<Value = Enforcement> {
    prop_oneof![
        Just(Enforcement::Exact),
        Just(Enforcement::Unsupported),
        Just(Enforcement::OverGrant("more")),
    ]
}

/// Half the time a backend that claims everything exactly (so that requests get through
/// and the accepted side is exercised), else random claims.
fn capability() -> impl Strategy<Value = Capability> {
    prop_oneof![
        1 => Just(Capability::everything()),
        1 => random_capability(),
    ]
}

fn random_capability() -> impl Strategy<Value = Capability> {
    (
        prop::collection::vec(any::<bool>(), 17),
        enforcement(),
        enforcement(),
        enforcement(),
    )
        .prop_map(|(b, none, lo, full)| Capability {
            confine_writes: b[0],
            confine_reads: b[1],
            readonly_carveouts: b[2],
            network_none: none,
            network_loopback: lo,
            network_full: full,
            full_network_is_host: b[3],
            tree_kill: b[4],
            process_isolation: b[5],
            drops_host_root: b[6],
            memory_limit: b[7],
            cpu_limit: b[8],
            process_limit: b[9],
            open_files_limit: b[10],
            signal_status: b[11],
            oom_status: b[12],
            snapshot: b[13],
            host_programs: b[14],
            ..Capability::default()
        })
}

fn limit() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![12 => Just(None), 1 => Just(Some(0)), 4 => (1u64..1 << 40).prop_map(Some)]
}

fn env_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[A-Z_][A-Z0-9_]{0,5}",
        2 => prop::sample::select(&["PATH", "HOME", "AWS_SECRET", "A=B", "", "1X", "X Y", "OK_1"][..])
            .prop_map(String::from),
        1 => "[A-Za-z_=\\- ]{0,6}",
    ]
}

fn opts() -> impl Strategy<Value = SandboxOpts> {
    (
        (
            workspace(),
            argv(),
            prop::option::weighted(0.3, inner_path()),
        ),
        (
            prop::collection::vec(inner_path(), 0..3),
            prop::collection::vec(grant_path(), 0..3),
            prop::collection::vec(grant_path(), 0..3),
            prop::collection::vec(
                prop_oneof![6 => Just(PathBuf::from("out.txt")), 1 => path()],
                0..2,
            ),
        ),
        (
            prop::sample::select(
                &[NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full][..],
            ),
            prop::sample::select(&Lane::ALL[..]),
            prop::option::of(0u64..5),
            prop_oneof![1 => Just(0usize), 19 => 1usize..4],
            (limit(), limit(), limit(), limit()),
            any::<bool>(),
        ),
        (
            prop::collection::vec(env_name(), 0..3),
            prop::collection::vec((env_name(), prop::collection::vec(any::<u8>(), 0..6)), 0..3),
        ),
    )
        .prop_map(
            |(
                (ws, argv, cwd),
                (carveouts, read, write, capture),
                (network, lane, timeout, output_limit, (mem, cpu, procs, files), snapshot),
                (pass, set),
            )| {
                let mut o = SandboxOpts::new(ws, argv);
                o.cwd = cwd;
                o.readonly_carveouts = carveouts;
                o.read_only_paths = read;
                o.writable_paths = write;
                o.capture_files = capture;
                o.network = network;
                o.lane = lane;
                o.timeout = timeout.map(Duration::from_secs);
                o.output_limit = output_limit * 1000;
                o.limits = ResourceLimits {
                    memory_bytes: mem,
                    cpu_seconds: cpu,
                    max_processes: procs,
                    open_files: files,
                };
                o.snapshot = snapshot;
                o.env.pass = pass;
                o.env.set = set
                    .into_iter()
                    .map(|(k, v)| (k, OsString::from_vec(v)))
                    .collect();
                o
            },
        )
}

use common::violations;

/// The property, as proptest wants it.
fn no_wider(opts: &SandboxOpts, cap: &Capability, plan: &Plan) -> Result<(), TestCaseError> {
    let v = violations(opts, cap, plan);
    prop_assert!(v.is_empty(), "accepted, but wider than asked: {v:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        // `PROPTEST_CASES` overrides (the fuzz task scales it to its time budget).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn plan_new_never_panics_and_never_widens(o in opts(), cap in capability()) {
        match Plan::new(&o, "prop", &cap) {
            Ok(plan) => no_wider(&o, &cap, &plan)?,
            // Every refusal is one of the typed, remedied kinds.
            Err(SandboxError::InvalidConfig { .. }
                | SandboxError::PolicyRefused { .. }
                | SandboxError::ControlGrant { .. }
                | SandboxError::NotSupported { .. }
                | SandboxError::Spawn { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error kind: {other:?}"),
        }
    }

    #[test]
    fn a_workspace_reached_through_a_symlink_is_its_target(cap in capability()) {
        let o = SandboxOpts::new(fixture().join("ws_link"), ["true"]);
        if let Ok(plan) = Plan::new(&o, "prop", &cap) {
            prop_assert_eq!(plan.workspace, fixture().join("ws"));
        }
    }
}

#[test]
fn a_symlinked_cwd_out_of_the_workspace_is_refused() {
    let mut o = SandboxOpts::new(fixture().join("ws"), ["true"]);
    o.cwd = Some("link_out".into());
    o.lane = Lane::Trusted;
    let cap = Capability {
        tree_kill: true,
        host_programs: true,
        network_none: Enforcement::Exact,
        ..Capability::default()
    };
    match Plan::new(&o, "prop", &cap) {
        Err(SandboxError::InvalidConfig { field, .. }) => assert_eq!(field, "cwd"),
        other => panic!("expected the cwd to be refused, got {other:?}"),
    }
}

#[test]
fn the_generator_reaches_accepted_plans() {
    // A generator that drifted into refusing everything would make the "no wider"
    // property vacuous: run it on its own and check that a fair share got through.
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let accepted = std::cell::Cell::new(0);
    runner
        .run(&(opts(), capability()), |(o, cap)| {
            if let Ok(plan) = Plan::new(&o, "prop", &cap) {
                accepted.set(accepted.get() + 1);
                no_wider(&o, &cap, &plan)?;
            }
            Ok(())
        })
        .expect("property");
    let accepted = accepted.get();
    assert!(
        accepted >= 10,
        "only {accepted} of 200 requests were accepted"
    );
}
