//! A run dropped mid-flight leaves nothing: no process (a `setsid` daemon included), no
//! zombie of ours, no descriptor. One test in its own binary, so that no other test's
//! children or descriptors are counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::path::Path;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandbox_core::{
    Capability, Enforcement, Lane, NetworkMode, Plan, Preflight, Sandbox, SandboxError, SandboxOpts,
};
use sandbox_host::pipeline::ProcessSandbox;
use sandbox_host::process::{DoorEnd, HostSupport, Launch, Launcher};

#[derive(Debug)]
struct Direct;

#[async_trait]
impl Launcher for Direct {
    fn name(&self) -> &'static str {
        "spawn-drop-test"
    }
    fn capability(&self) -> Capability {
        let host = HostSupport::detect(false);
        let mut cap = Capability {
            network_full: Enforcement::Exact,
            tree_kill: host.cgroup_kill.is_some(),
            host_programs: true,
            full_network_is_host: true,
            ..Capability::default()
        };
        host.apply(&mut cap);
        cap
    }
    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        Ok(Preflight::new("spawn-drop-test", None, Vec::new()))
    }
    fn prepare(&self, plan: &Plan, _door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        Ok(Launch::direct(plan))
    }
}

/// The command prints its own pid, then a `setsid` daemon's (double-forked: its parent
/// subshell exits, so it is nobody's child of ours), then sleeps.
const SCRIPT: &str = "echo $$; (setsid sleep 60 & echo $!); exec sleep 60";

fn opts(ws: &Path) -> SandboxOpts {
    let mut o = SandboxOpts::new(ws, ["/bin/sh", "-c", SCRIPT]);
    o.lane = Lane::Trusted;
    o.network = NetworkMode::Full;
    o
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// `(state, ppid)` of `pid`, or `None` once it is gone.
fn stat(pid: i32) -> Option<(char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Start the script and return the two pids it prints.
async fn start(sb: &ProcessSandbox<Direct>, ws: &Path) -> (i32, i32) {
    sb.run(opts(ws)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = sb.logs().await.unwrap().stdout.text();
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 2 {
            return (pids[0], pids[1]);
        }
        assert!(Instant::now() < deadline, "the script printed {text:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Within a few seconds: the command (our child) is gone, not even a zombie; the daemon
/// is dead (a zombie only if it is not ours, waiting for the host's init); and the
/// descriptor count is back to `fds`.
fn assert_nothing_left(what: &str, command: i32, daemon: i32, fds: usize) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = stat(command);
        let d = stat(daemon);
        let daemon_dead = match d {
            None => true,
            Some((state, ppid)) => state == 'Z' && ppid != me,
        };
        let now = fd_count();
        if c.is_none() && daemon_dead && now == fds {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: command {command}: {c:?}, daemon {daemon}: {d:?}, descriptors {now} (before: {fds})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_run_dropped_mid_flight_leaves_no_process_zombie_or_descriptor() {
    if !Direct.capability().tree_kill {
        eprintln!("skipped: this host gives a run no cgroup, so no run starts at all");
        return;
    }
    let ws = tempfile::tempdir().unwrap();

    // A runtime that already ran once holds every descriptor it ever will (tokio's signal
    // pipe is process-wide), so counts taken after that are comparable.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let sb = ProcessSandbox::new(Direct);
        let (c, d) = start(&sb, ws.path()).await;
        sb.kill().await.unwrap();
        assert!(stat(c).is_none(), "kill left the command: {:?}", stat(c));
        let _ = d;
    });

    // 1. The sandbox value dropped while its command runs (the runtime lives on).
    let fds = fd_count();
    let (c, d) = rt.block_on(async {
        let sb = ProcessSandbox::new(Direct);
        let pids = start(&sb, ws.path()).await;
        drop(sb);
        // Let the supervisor run its teardown.
        tokio::time::sleep(Duration::from_millis(50)).await;
        pids
    });
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(5);
        while (stat(c).is_some() || fd_count() != fds) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_nothing_left("sandbox dropped", c, d, fds);

    // 2. The runtime itself dropped mid-run: the supervisor never gets to stop the tree;
    // the child's and the cgroups' own drops must.
    let fds_before_runtime = {
        drop(rt);
        fd_count()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (c, d) = rt.block_on(async {
        let sb = ProcessSandbox::new(Direct);
        let pids = start(&sb, ws.path()).await;
        // Leak nothing but let the sandbox go with the runtime.
        std::mem::forget(sb);
        pids
    });
    drop(rt);
    assert_nothing_left("runtime dropped", c, d, fds_before_runtime);
}
