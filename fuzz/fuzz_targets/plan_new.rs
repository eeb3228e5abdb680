//! `Plan::new` over arbitrary options and capabilities: it never panics, and an accepted
//! request is never wider than asked (the same property the proptests check, from the
//! shared `violations`). Paths are drawn from a fixture tree with the shapes that matter
//! (a symlink out of the workspace, one inside, a dangling one), or are raw bytes.

#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sandbox_core::{Capability, Enforcement, Lane, NetworkMode, Plan, ResourceLimits, SandboxOpts};

#[path = "../../sandbox-core/tests/common/mod.rs"]
mod common;

use common::{fixture, COMPONENTS};

#[derive(Arbitrary, Debug)]
enum FuzzPath {
    Fixture(Vec<u8>),
    Relative(Vec<u8>),
    Raw(Vec<u8>),
}

impl FuzzPath {
    fn path(&self) -> PathBuf {
        let parts = |idx: &[u8]| -> String {
            idx.iter()
                .take(5)
                .map(|i| COMPONENTS[*i as usize % COMPONENTS.len()])
                .collect::<Vec<_>>()
                .join("/")
        };
        match self {
            Self::Fixture(i) => fixture().join(parts(i)),
            Self::Relative(i) => PathBuf::from(parts(i)),
            Self::Raw(b) => PathBuf::from(OsString::from_vec(b.clone())),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    workspace: Option<FuzzPath>,
    argv: Vec<Vec<u8>>,
    cwd: Option<FuzzPath>,
    carveouts: Vec<FuzzPath>,
    read: Vec<FuzzPath>,
    write: Vec<FuzzPath>,
    capture: Vec<FuzzPath>,
    network: u8,
    lane: u8,
    timeout: Option<u8>,
    output_limit: u16,
    limits: [Option<u64>; 4],
    snapshot: bool,
    pass: Vec<String>,
    set: Vec<(String, Vec<u8>)>,
    claims: u32,
    network_claims: [u8; 3],
}

fn enforcement(b: u8) -> Enforcement {
    match b % 3 {
        0 => Enforcement::Exact,
        1 => Enforcement::Unsupported,
        _ => Enforcement::OverGrant("more"),
    }
}

fuzz_target!(|input: Input| {
    let ws = input
        .workspace
        .as_ref()
        .map_or_else(|| fixture().join("ws"), FuzzPath::path);
    let argv: Vec<OsString> = if input.argv.is_empty() {
        vec!["true".into()]
    } else {
        input
            .argv
            .iter()
            .map(|a| OsString::from_vec(a.clone()))
            .collect()
    };
    let mut o = SandboxOpts::new(ws, argv);
    o.cwd = input.cwd.as_ref().map(FuzzPath::path);
    o.readonly_carveouts = input.carveouts.iter().map(FuzzPath::path).collect();
    o.read_only_paths = input.read.iter().map(FuzzPath::path).collect();
    o.writable_paths = input.write.iter().map(FuzzPath::path).collect();
    o.capture_files = input.capture.iter().map(FuzzPath::path).collect();
    o.network =
        [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full][input.network as usize % 3];
    o.lane = Lane::ALL[input.lane as usize % Lane::ALL.len()];
    o.timeout = input.timeout.map(|t| Duration::from_secs(u64::from(t)));
    o.output_limit = usize::from(input.output_limit);
    let [mem, cpu, procs, files] = input.limits;
    o.limits = ResourceLimits {
        memory_bytes: mem,
        cpu_seconds: cpu,
        max_processes: procs,
        open_files: files,
    };
    o.snapshot = input.snapshot;
    o.env.pass = input.pass.clone();
    o.env.set = input
        .set
        .iter()
        .map(|(k, v)| (k.clone(), OsString::from_vec(v.clone())))
        .collect();
    let bit = |n: u32| input.claims & (1 << n) != 0;
    let cap = Capability {
        confine_writes: bit(0),
        confine_reads: bit(1),
        readonly_carveouts: bit(2),
        network_none: enforcement(input.network_claims[0]),
        network_loopback: enforcement(input.network_claims[1]),
        network_full: enforcement(input.network_claims[2]),
        full_network_is_host: bit(3),
        tree_kill: bit(4),
        process_isolation: bit(5),
        drops_host_root: bit(6),
        memory_limit: bit(7),
        cpu_limit: bit(8),
        process_limit: bit(9),
        open_files_limit: bit(10),
        signal_status: bit(11),
        oom_status: bit(12),
        snapshot: bit(13),
        host_programs: bit(14),
        ..Capability::default()
    };
    if let Ok(plan) = Plan::new(&o, "fuzz", &cap) {
        let v = common::violations(&o, &cap, &plan);
        assert!(v.is_empty(), "accepted, but wider than asked: {v:?}\n{o:?}");
    }
});
