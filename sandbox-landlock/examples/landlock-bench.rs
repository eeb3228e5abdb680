//! Time `true` run N times (default 200), interleaved: a bare tokio spawn, core's process
//! machinery with no confinement, and the landlock backend on the `fast` lane and on
//! `strict` (a pid namespace and a private `/proc` on top):
//! `cargo run --release -p sandbox-landlock --example landlock-bench -- [N]`.
//! Prints the median of each; asserts nothing (timing is the host's).

use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandbox_core::{
    Capability, Lane, Plan, Preflight, SandboxError, SandboxExt, SandboxOpts, TreeKill,
};
use sandbox_host::process::{DoorEnd, Launch, Launcher};

/// Core's machinery with nothing of landlock's: what every process backend pays.
#[derive(Clone, Debug)]
struct CoreOnly(Capability);

#[async_trait]
impl Launcher for CoreOnly {
    fn name(&self) -> &'static str {
        "core-only"
    }
    fn capability(&self) -> Capability {
        self.0.clone()
    }
    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        Ok(Preflight::new("core-only", None, vec![]))
    }
    fn prepare(&self, plan: &Plan, _door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        let mut l = Launch::direct(plan);
        l.tree_kill = Some(TreeKill::ProcessGroup);
        Ok(l)
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u32 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200);
    let ws = tempfile::tempdir()?;
    let backend = sandbox_landlock::LandlockBackend::new();

    let core_only = CoreOnly(sandbox_core::Backend::capability(&backend));
    let mut bare = Vec::new();
    let mut forked = Vec::new();
    let mut core = Vec::new();
    let mut landlock = Vec::new();
    let mut strict = Vec::new();
    // Warm both paths (the root host's system walk, the filter cache).
    for _ in 0..3 {
        let mut o = SandboxOpts::new(ws.path(), ["true"]);
        o.lane = Lane::Fast;
        sandbox_host::ProcessSandbox::new(backend.clone())
            .execute(o)
            .await?;
    }
    for _ in 0..n {
        let t = Instant::now();
        let s = tokio::process::Command::new("/usr/bin/true")
            .current_dir(ws.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .await?;
        assert!(s.status.success());
        bare.push(t.elapsed());

        // The same with an empty step between fork and exec: std then forks instead of
        // using posix_spawn (vfork), as every backend with steps must.
        let t = Instant::now();
        let mut c = std::process::Command::new("/usr/bin/true");
        // SAFETY: the step does nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut c, || Ok(()));
        }
        let s = tokio::process::Command::from(c)
            .current_dir(ws.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .await?;
        assert!(s.status.success());
        forked.push(t.elapsed());

        let t = Instant::now();
        let mut o = SandboxOpts::new(ws.path(), ["true"]);
        o.lane = Lane::Fast;
        let out = sandbox_host::ProcessSandbox::new(core_only.clone())
            .execute(o)
            .await?;
        assert!(out.status.success());
        core.push(t.elapsed());

        let t = Instant::now();
        let mut o = SandboxOpts::new(ws.path(), ["true"]);
        o.lane = Lane::Fast;
        let out = sandbox_host::ProcessSandbox::new(backend.clone())
            .execute(o)
            .await?;
        assert!(out.status.success(), "{:?}", out.stderr.text());
        landlock.push(t.elapsed());

        if sandbox_core::Backend::capability(&backend).process_isolation {
            let t = Instant::now();
            let mut o = SandboxOpts::new(ws.path(), ["true"]);
            o.lane = Lane::Strict;
            let out = sandbox_host::ProcessSandbox::new(backend.clone())
                .execute(o)
                .await?;
            assert!(out.status.success(), "{:?}", out.stderr.text());
            strict.push(t.elapsed());
        }
    }
    // The landlock share of the parent's work: the ruleset and filters, per run.
    let mut o = SandboxOpts::new(ws.path(), ["true"]);
    o.lane = Lane::Fast;
    let plan = Plan::new(&o, "landlock", &sandbox_core::Backend::capability(&backend))?;
    let t = Instant::now();
    for _ in 0..n {
        drop(backend.prepare(&plan, None)?);
    }
    let prepare = t.elapsed();

    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (bare, forked, core, landlock) = (
        median(&mut bare),
        median(&mut forked),
        median(&mut core),
        median(&mut landlock),
    );
    let mean = |d: Duration| d;
    println!("landlock prepare:   {:?} (mean)", prepare / n);
    println!("bare spawn of true: {:?}", mean(bare));
    println!("fork+exec (a step): {:?}", mean(forked));
    println!("core only:          {:?}", mean(core));
    println!("landlock sandbox:   {:?}", mean(landlock));
    if !strict.is_empty() {
        let strict = median(&mut strict);
        println!("landlock strict:    {:?}", strict);
        println!(
            "strict / fast:      {:.2}",
            strict.as_secs_f64() / landlock.as_secs_f64()
        );
    }
    println!(
        "landlock / bare:    {:.2}",
        landlock.as_secs_f64() / bare.as_secs_f64()
    );
    println!(
        "landlock / fork:    {:.2}",
        landlock.as_secs_f64() / forked.as_secs_f64()
    );
    println!(
        "landlock / core:    {:.2}",
        landlock.as_secs_f64() / core.as_secs_f64()
    );
    Ok(())
}
