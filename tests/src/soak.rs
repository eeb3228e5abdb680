//! The soak: many runs of one backend, with kills, timeouts, output floods and daemonizing
//! children mixed in, then proof from the host that nothing grew.
//!
//! A leak that one run leaves behind (a descriptor, a thread, a zombie, a cgroup, a mount,
//! a temp dir, a container) is invisible to a case that runs once; a thousand runs make it
//! a number. The counts are taken after a warm-up (so that pools, caches and the runtime's
//! threads have reached their steady size) and again after the soak, and every count but
//! the resident set must be equal or lower; the resident set may grow by less than
//! [`RSS_SLACK_PERCENT`], or [`RSS_FLOOR_KIB`] for a small process (the allocator keeps
//! fragments of periodic work).
//!
//! Run by `cargo xtask soak` through the suite's binary (`SANDBOX_SOAK=RUNS,CONCURRENT`), so
//! it uses the same backend constructor and probe as the conformance cases.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_core::registry::HostObjects;
use sandbox_core::{Lane, SandboxExt, Status};
use serde::Serialize;

use crate::context::{admits, Context};
use crate::host::processes_with_arg;

/// The name of the soak runtime's threads (at most 15 bytes: the kernel's `comm`).
pub const RUNTIME_THREAD: &str = "sandbox-soak-rt";

/// How much the resident set may grow over the soak, in percent of the size after warm-up.
pub const RSS_SLACK_PERCENT: u64 = 5;

/// The growth of the resident set always allowed, in KiB, whatever the percentage: the
/// noise floor of a small (~13 MiB) process whose allocator keeps fragments of periodic
/// work (landlock's root-host layer is rebuilt every 2 s). Measured: landlock as root grew
/// 1.9 MiB over 1,128 runs and 1.3 MiB over 2,628, so it is bounded, not per run. A leak of
/// 2 KiB a run still shows over the full soak's thousand runs.
pub const RSS_FLOOR_KIB: u64 = 2048;

/// How many runs, and how many of them at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoakConfig {
    /// Runs one after another.
    pub sequential: usize,
    /// Runs started together in one batch.
    pub concurrent: usize,
}

impl SoakConfig {
    /// Parse `RUNS,CONCURRENT` (the value of `SANDBOX_SOAK`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once(',')
            .ok_or_else(|| format!("SANDBOX_SOAK is `RUNS,CONCURRENT`, not `{s}`"))?;
        let num = |v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("SANDBOX_SOAK: `{v}` is not a count"))
        };
        Ok(Self {
            sequential: num(a)?,
            concurrent: num(b)?,
        })
    }
}

/// What the host holds on behalf of this process, counted from the host's side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Open descriptors of this process.
    pub fds: usize,
    /// Threads of this process other than the soak runtime's own ([`RUNTIME_THREAD`]),
    /// whose pool is bounded by construction: a thread a run leaves behind is counted.
    pub threads: usize,
    /// The soak runtime's threads (workers and the bounded blocking pool): shown, not
    /// judged, since the pool grows to its cap with demand.
    pub runtime_threads: usize,
    /// Live (non-zombie) processes whose parent is this process.
    pub children: usize,
    /// Zombie children of this process.
    pub zombies: usize,
    /// Cgroups this process made for runs (`sandbox-<pid>-<start>-<n>`, any hierarchy).
    pub cgroups: usize,
    /// Mounts in this process's mount namespace under its temp directory.
    pub mounts: usize,
    /// Entries in this process's temp directory.
    pub temp_entries: usize,
    /// What the backend's runs make on the host beyond what core makes (its registry
    /// entry's [`HostObjects`]: an engine's containers and volumes) that this process made;
    /// 0 for a backend that makes nothing of the kind.
    pub backend_objects: usize,
    /// What those are (`containers and volumes`), or `none`.
    pub backend_objects_are: &'static str,
    /// Resident set size, KiB.
    pub rss_kib: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fds {}, threads {} (+{} runtime), children {}, zombies {}, cgroups {}, mounts {}, temp entries {}, \
             {} {}, rss {} KiB",
            self.fds,
            self.threads,
            self.runtime_threads,
            self.children,
            self.zombies,
            self.cgroups,
            self.mounts,
            self.temp_entries,
            self.backend_objects_are,
            self.backend_objects,
            self.rss_kib
        )
    }
}

/// `(other threads, runtime threads)` of this process, told apart by name.
fn threads() -> (usize, usize) {
    let (mut other, mut runtime) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == RUNTIME_THREAD {
            runtime += 1;
        } else {
            other += 1;
        }
    }
    (other, runtime)
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

/// `(live children, zombie children)` of `me`, from `/proc/*/stat`.
fn children_of(me: u32) -> (usize, usize) {
    let (mut live, mut zombies) = (0, 0);
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields start after the last `)`.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) {
            if state == Some("Z") {
                zombies += 1;
            } else {
                live += 1;
            }
        }
    }
    (live, zombies)
}

/// Cgroup directories named `sandbox-<me>-*` anywhere under `/sys/fs/cgroup` (v2 and every
/// v1 hierarchy), a few levels deep.
fn own_cgroups(me: u32) -> usize {
    fn walk(dir: &Path, prefix: &str, depth: usize, n: &mut usize) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(prefix) {
                *n += 1;
            }
            if depth > 0 {
                walk(&e.path(), prefix, depth - 1, n);
            }
        }
    }
    let mut n = 0;
    walk(
        Path::new("/sys/fs/cgroup"),
        &format!("sandbox-{me}-"),
        6,
        &mut n,
    );
    n
}

/// The resident set after handing freed heap back to the kernel: what the allocator keeps
/// cached for reuse is not a leak, and would otherwise swamp one.
/// Mounts in this process's mount namespace whose mount point is under `tmp` (where every
/// run keeps what it makes), so that mounts other work on the host makes do not count.
fn own_mounts(tmp: &Path) -> usize {
    let tmp = tmp.canonicalize().unwrap_or_else(|_| tmp.to_path_buf());
    let tmp = tmp.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| {
            m.lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|point| point.starts_with(tmp.as_ref()))
                .count()
        })
        .unwrap_or(0)
}

/// The resident set after handing freed heap back to the kernel, in KiB: what the
/// allocator keeps cached for reuse is not a leak, and would otherwise swamp one.
pub(crate) fn rss_kib() -> u64 {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe { libc::malloc_trim(0) };
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Count everything now, with what `leaves` says the backend's runs make besides (asked of
/// its engine: slow, so only for a backend that makes such things).
pub async fn counts(leaves: Option<&HostObjects>) -> Counts {
    let me = std::process::id();
    let (children, zombies) = children_of(me);
    let tmp = std::env::temp_dir();
    let (threads, runtime_threads) = threads();
    Counts {
        fds: count_dir("/proc/self/fd"),
        threads,
        runtime_threads,
        children,
        zombies,
        cgroups: own_cgroups(me),
        mounts: own_mounts(&tmp),
        // The temp dir's entries and the runs directory's, where each run's own
        // directories are made (`$TMPDIR/sandbox-runs-UID`).
        temp_entries: [tmp.clone(), sandbox_core::runs_dir()]
            .iter()
            .map(|d| d.read_dir().map(|d| d.count()).unwrap_or(0))
            .sum(),
        backend_objects: match leaves {
            // A count that cannot be taken is taken as large, so that a soak whose second
            // count fails does not pass.
            Some(l) => (l.made_by)(me).await.map_or(usize::MAX, |v| v.len()),
            None => 0,
        },
        backend_objects_are: leaves.map_or("none", |l| l.what),
        rss_kib: rss_kib(),
    }
}

/// What grew between `before` and `after`, one line each; empty when nothing did.
pub fn growth(before: &Counts, after: &Counts) -> Vec<String> {
    let mut grew = Vec::new();
    let mut check = |what: &str, b: usize, a: usize| {
        if a > b {
            grew.push(format!("{what}: {b} -> {a}"));
        }
    };
    check("open descriptors", before.fds, after.fds);
    check("threads", before.threads, after.threads);
    check("children", before.children, after.children);
    check("zombies", before.zombies, after.zombies);
    check("cgroups", before.cgroups, after.cgroups);
    check("mounts", before.mounts, after.mounts);
    check("temp entries", before.temp_entries, after.temp_entries);
    check(
        before.backend_objects_are,
        before.backend_objects,
        after.backend_objects,
    );
    let slack = (before.rss_kib * RSS_SLACK_PERCENT / 100).max(RSS_FLOOR_KIB);
    if after.rss_kib > before.rss_kib + slack {
        grew.push(format!(
            "resident set: {} KiB -> {} KiB (more than {RSS_SLACK_PERCENT}% or \
             {RSS_FLOOR_KIB} KiB)",
            before.rss_kib, after.rss_kib
        ));
    }
    grew
}

/// A count of the backend's objects that could not be taken is an error of the soak.
fn uncounted(c: &Counts, errors: &mut Vec<String>) {
    if c.backend_objects == usize::MAX {
        errors.push(format!(
            "the {} this process made could not be counted",
            c.backend_objects_are
        ));
    }
}

/// The kinds of run the soak mixes, in the order it cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Exits 0.
    Ok,
    /// Exits 3.
    Fails,
    /// Sleeps; killed from another task.
    Killed,
    /// Sleeps past a short timeout.
    TimesOut,
    /// Writes 4 MiB to a 64 KiB cap.
    Floods,
    /// Leaves a double-forked `setsid` child behind, which must not survive.
    Daemonizes,
}

const KINDS: [Kind; 6] = [
    Kind::Ok,
    Kind::Fails,
    Kind::Killed,
    Kind::TimesOut,
    Kind::Floods,
    Kind::Daemonizes,
];

/// One run of `kind`, judged: the status it must end with, and no survivor.
async fn one(ctx: &Context, kind: Kind, n: usize) -> Result<(), String> {
    let ws = ctx
        .workspace(&format!("soak-{n}"))
        .map_err(|e| format!("workspace: {e}"))?;
    let pidfile = ws.join("daemon.pid");
    let pidfile_arg = pidfile.to_string_lossy().into_owned();
    let args: Vec<String> = match kind {
        Kind::Ok => vec!["exit".into(), "0".into()],
        Kind::Fails => vec!["exit".into(), "3".into()],
        Kind::Killed | Kind::TimesOut => vec!["sleep".into(), "30".into()],
        Kind::Floods => vec!["flood".into(), (4u64 << 20).to_string()],
        Kind::Daemonizes => vec!["daemonize".into(), pidfile_arg.clone()],
    };
    let mut opts = ctx.opts(ws.path(), &args);
    // Every other round of kinds on `fast`, where the backend runs there: it may hold the
    // tree another way (landlock's `fast` has no pid namespace; its waiter is a subreaper).
    if (n / KINDS.len()) % 2 == 1 && admits(ctx.backend_name(), ctx.capability(), Lane::Fast) {
        opts.lane = Lane::Fast;
    }
    match kind {
        Kind::TimesOut => opts.timeout = Some(Duration::from_millis(300)),
        Kind::Floods => opts.output_limit = 64 << 10,
        _ => {}
    }
    let status = if kind == Kind::Killed {
        let sb = ctx.sandbox();
        sb.run(opts).await.map_err(|e| format!("run: {e}"))?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        sb.kill().await.map_err(|e| format!("kill: {e}"))?;
        sb.wait().await.map_err(|e| format!("wait: {e}"))?.status
    } else {
        let sb = ctx.sandbox();
        let limit = Duration::from_secs(60);
        match tokio::time::timeout(limit, sb.execute(opts)).await {
            Ok(r) => r.map_err(|e| format!("{e}"))?.status,
            Err(_) => {
                let _ = sb.kill().await;
                return Err(format!("{kind:?} did not end within {limit:?}"));
            }
        }
    };
    let expected = match kind {
        Kind::Ok | Kind::Floods | Kind::Daemonizes => Status::Exited { code: 0 },
        Kind::Fails => Status::Exited { code: 3 },
        Kind::Killed => Status::Killed,
        Kind::TimesOut => Status::TimedOut,
    };
    if status != expected {
        return Err(format!("{kind:?}: ended {status:?}, expected {expected:?}"));
    }
    if kind == Kind::Daemonizes {
        // The daemon's command line names the pid file, unique to this run.
        let left = processes_with_arg(&pidfile_arg);
        if !left.is_empty() {
            return Err(format!("a daemonized child survived the run: {left:?}"));
        }
    }
    Ok(())
}

/// `count` runs, `at_once` at a time, cycling through the kinds from `offset`.
async fn batch(ctx: &Arc<Context>, offset: usize, count: usize, at_once: usize) -> Vec<String> {
    let mut errors = Vec::new();
    let mut next = 0;
    while next < count {
        let group: Vec<usize> = (next..count.min(next + at_once.max(1))).collect();
        next += group.len();
        let handles: Vec<_> = group
            .into_iter()
            .map(|i| {
                let ctx = ctx.clone();
                let n = offset + i;
                tokio::spawn(async move { one(&ctx, KINDS[n % KINDS.len()], n).await })
            })
            .collect();
        for h in handles {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("a run's task panicked: {e}")),
            }
        }
    }
    errors
}

/// The soak's result.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    /// After the warm-up.
    pub before: Counts,
    /// After the soak.
    pub after: Counts,
    /// What grew (empty: nothing).
    pub growth: Vec<String>,
    /// Runs that ended otherwise than expected.
    pub errors: Vec<String>,
    /// Runs made after the warm-up.
    pub runs: usize,
    /// Wall time of the soak, seconds.
    pub seconds: f64,
}

impl SoakReport {
    /// Whether the soak proved no growth and every run ended as expected.
    pub fn passed(&self) -> bool {
        self.growth.is_empty() && self.errors.is_empty()
    }
}

/// Warm up, count, soak (`config.sequential` runs one by one, then `config.concurrent`
/// at once, twice), count again. The caller's runtime names its threads [`RUNTIME_THREAD`],
/// bounds its blocking pool and keeps idle threads alive for the whole soak (a pool that
/// shrinks and regrows is not a leak).
pub async fn soak(
    ctx: Arc<Context>,
    config: SoakConfig,
    leaves: Option<HostObjects>,
) -> SoakReport {
    let mut errors = Vec::new();
    // Warm-up: a fifth of the sequential runs (every kind at least twice), and two batches
    // at the soak's concurrency, so that the allocator's arenas and the runtime's pools
    // have reached the size the soak needs.
    let warm = (config.sequential / 5).max(KINDS.len() * 2);
    errors.extend(batch(&ctx, 0, warm, 1).await);
    for _ in 0..2 {
        errors.extend(batch(&ctx, 0, config.concurrent, config.concurrent).await);
    }
    settle().await;
    let before = counts(leaves.as_ref()).await;
    uncounted(&before, &mut errors);
    let started = Instant::now();
    let mut runs = 0;
    errors.extend(batch(&ctx, runs, config.sequential, 1).await);
    runs += config.sequential;
    for _ in 0..2 {
        errors.extend(batch(&ctx, runs, config.concurrent, config.concurrent).await);
        runs += config.concurrent;
    }
    settle().await;
    let after = counts(leaves.as_ref()).await;
    uncounted(&after, &mut errors);
    SoakReport {
        growth: growth(&before, &after),
        before,
        after,
        errors,
        runs,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Lets work that the runs hand to the runtime after `wait` (a container's removal that
/// was already awaited, a dropped task) finish before counting. Nothing the contract
/// promises is left to this: `wait` returned only after the tree, cgroups and temp dirs
/// were gone.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn the_config_is_runs_then_concurrency() {
        assert_eq!(
            SoakConfig::parse("1000,64"),
            Ok(SoakConfig {
                sequential: 1000,
                concurrent: 64
            })
        );
        assert!(SoakConfig::parse("1000").is_err());
        assert!(SoakConfig::parse("x,1").is_err());
    }

    #[test]
    fn growth_names_what_grew_and_allows_rss_slack() {
        let before = Counts {
            fds: 10,
            rss_kib: 100_000,
            ..Counts::default()
        };
        let mut after = before.clone();
        after.rss_kib = 104_999;
        assert!(growth(&before, &after).is_empty());
        after.rss_kib = 105_001;
        after.fds = 11;
        let g = growth(&before, &after);
        assert_eq!(g.len(), 2, "{g:?}");
        assert!(g[0].contains("open descriptors: 10 -> 11"));
        assert!(g[1].contains("resident set"));
    }

    #[test]
    fn a_child_of_ours_is_counted_and_a_reaped_one_is_not() {
        let me = std::process::id();
        let (live0, _) = children_of(me);
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let (live1, _) = children_of(me);
        assert_eq!(live1, live0 + 1);
        child.kill().unwrap();
        // Dead but not waited for: a zombie.
        std::thread::sleep(Duration::from_millis(200));
        let (live2, zombies) = children_of(me);
        assert_eq!(live2, live0);
        assert!(zombies >= 1);
        child.wait().unwrap();
        assert_eq!(children_of(me).1, zombies - 1);
    }
}

#[cfg(test)]
mod floor {
    use super::*;

    #[test]
    fn a_small_process_gets_the_floor() {
        let before = Counts {
            rss_kib: 13_000,
            ..Counts::default()
        };
        let mut after = before.clone();
        after.rss_kib = 13_000 + RSS_FLOOR_KIB;
        assert!(growth(&before, &after).is_empty());
        after.rss_kib += 1;
        assert_eq!(growth(&before, &after).len(), 1);
    }
}
