//! Cgroups for one run: what binds a whole process tree, and binds root.
//!
//! `RLIMIT_NPROC` does not bind root and `RLIMIT_AS` binds one process, not a tree; a
//! cgroup does both, and gives a kill that reaches descendants that left the process group.
//! Both layouts are supported: cgroup v2 (one hierarchy; `cgroup.kill` ends a tree in one
//! write, kernel 5.14+) and cgroup v1 (a hierarchy per controller), including the hybrid
//! layout where v1 holds the controllers and a v2 mount holds only `cgroup.kill`.
//!
//! A run's cgroups are created below the host process's own cgroup in each hierarchy, so
//! whatever limits the host is under still apply, and so a user whose session systemd
//! delegated a subtree to can use them without root. Where none can be created the caller
//! falls back to rlimits and the process group, and the outcome records which.
//!
//! Hand-written rather than a crate: joining happens at the fork (a cgroup v2 directory
//! descriptor for `clone3`) or between fork and exec, which needs paths prepared as C
//! strings before the fork and nothing but `open`/`write`/`close` after it; the cgroup
//! crates allocate on every call.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sandbox_core::outcome::{LimitMechanism, TreeKill};

/// Where this host process may create cgroups.
#[derive(Clone, Debug, Default)]
pub struct CgroupSupport {
    /// A writable cgroup v2 directory (ours) and whether `cgroup.kill` exists below it.
    pub(crate) v2: Option<PathBuf>,
    /// v2 controllers usable below `v2`.
    v2_memory: bool,
    v2_pids: bool,
    /// Writable cgroup v1 directories (ours) for these controllers.
    pub(crate) v1_pids: Option<PathBuf>,
    pub(crate) v1_memory: Option<PathBuf>,
}

impl CgroupSupport {
    /// What this host offers, found once per process.
    pub fn get() -> &'static CgroupSupport {
        static SUPPORT: OnceLock<CgroupSupport> = OnceLock::new();
        SUPPORT.get_or_init(detect)
    }

    /// How a whole tree is killed, if a cgroup can do it.
    pub fn tree_kill(&self) -> Option<TreeKill> {
        if self.v2.is_some() {
            Some(TreeKill::CgroupV2Kill)
        } else if self.v1_pids.is_some() {
            Some(TreeKill::CgroupV1Procs)
        } else {
            None
        }
    }

    /// How a memory limit for the whole tree is enforced, if a cgroup can.
    pub fn memory(&self) -> Option<LimitMechanism> {
        if self.v2_memory {
            Some(LimitMechanism::CgroupV2)
        } else if self.v1_memory.is_some() {
            Some(LimitMechanism::CgroupV1)
        } else {
            None
        }
    }

    /// How a process-count limit for the whole tree is enforced, if a cgroup can.
    pub fn pids(&self) -> Option<LimitMechanism> {
        if self.v2_pids {
            Some(LimitMechanism::CgroupV2)
        } else if self.v1_pids.is_some() {
            Some(LimitMechanism::CgroupV1)
        } else {
            None
        }
    }
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

fn detect() -> CgroupSupport {
    let mut s = CgroupSupport::default();
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return s;
    };
    let Ok(own) = fs::read_to_string("/proc/self/cgroup") else {
        return s;
    };
    for line in mountinfo.lines() {
        // id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let rfields: Vec<&str> = right.split(' ').collect();
        let (Some(mnt), Some(fstype), Some(superopts)) =
            (fields.get(4), rfields.first(), rfields.get(2))
        else {
            continue;
        };
        let root = fields.get(3).copied().unwrap_or("/");
        let own_path = |key: &dyn Fn(&str) -> bool| -> Option<PathBuf> {
            own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                if !key(ctrls) {
                    return None;
                }
                // The mount may show a subtree (in a container): strip its root.
                let rel = path.strip_prefix(root).unwrap_or(path);
                Some(Path::new(mnt).join(rel.trim_start_matches('/')))
            })
        };
        if *fstype == "cgroup2" && s.v2.is_none() {
            if let Some(dir) = own_path(&|c: &str| c.is_empty()) {
                if dir.is_dir() && writable(&dir) {
                    let sub =
                        fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
                    s.v2_memory = sub.split_whitespace().any(|c| c == "memory");
                    s.v2_pids = sub.split_whitespace().any(|c| c == "pids");
                    s.v2 = Some(dir);
                }
            }
        } else if *fstype == "cgroup" {
            for (ctrl, slot) in [("pids", &mut s.v1_pids), ("memory", &mut s.v1_memory)] {
                if slot.is_none() && superopts.split(',').any(|o| o == ctrl) {
                    if let Some(dir) = own_path(&|c: &str| c.split(',').any(|x| x == ctrl)) {
                        if dir.is_dir() && writable(&dir) {
                            *slot = Some(dir);
                        }
                    }
                }
            }
        }
    }
    // The v2 kill needs `cgroup.kill` in the children we create; its presence in any
    // non-root cgroup shows the kernel has it. Without it, v2 gives no tree kill.
    if let Some(dir) = &s.v2 {
        if !kernel_has_cgroup_kill(dir) {
            s.v2 = None;
            s.v2_memory = false;
            s.v2_pids = false;
        }
    }
    s
}

fn kernel_has_cgroup_kill(dir: &Path) -> bool {
    if dir.join("cgroup.kill").exists() {
        return true;
    }
    // Every cgroup but the root has it from Linux 5.14 on, whatever the configuration:
    // no probe cgroup to make and remove (about 0.2 ms, on every process start). Each
    // run's cgroup is checked when it is made (`RunCgroups::create`).
    if crate::kernel::release_at_least(5, 14) {
        return true;
    }
    // The root cgroup has no cgroup.kill: make a probe child to see.
    let probe = dir.join(format!("sandbox-probe-{}", std::process::id()));
    if fs::create_dir(&probe).is_err() {
        return false;
    }
    let has = probe.join("cgroup.kill").exists();
    let _ = fs::remove_dir(&probe);
    has
}

/// The cgroups of one run, removed when dropped (after the tree is dead).
#[derive(Debug)]
pub struct RunCgroups {
    v2: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    v1_memory: Option<PathBuf>,
    v2_procs: Option<CString>,
    v1_joins: Vec<CString>,
    /// Seen empty after a kill: the tree is dead, and the drop need not kill again.
    emptied: std::sync::atomic::AtomicBool,
}

impl RunCgroups {
    /// Create this run's cgroups and set the limits that a cgroup enforces. Returns `None`
    /// when the host offers none.
    pub fn create(
        support: &CgroupSupport,
        memory_bytes: Option<u64>,
        max_processes: Option<u64>,
    ) -> io::Result<Option<Self>> {
        if support.v2.is_none() && support.v1_pids.is_none() && support.v1_memory.is_none() {
            return Ok(None);
        }
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // Named after this process (pid and start time), so that the next start after a
        // crash can tell a dead host's cgroups from a live one's (`remove_dead`).
        let name = format!(
            "sandbox-{}-{}",
            crate::owner::Owner::current().tag(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut run = RunCgroups {
            v2: None,
            v1_pids: None,
            v1_memory: None,
            v2_procs: None,
            v1_joins: Vec::new(),
            emptied: false.into(),
        };
        // On error, `run` is dropped and removes what was made so far.
        if let Some(base) = &support.v2 {
            let dir = base.join(&name);
            fs::create_dir(&dir)?;
            run.v2 = Some(dir.clone());
            // The tree kill this host was taken to have (`kernel_has_cgroup_kill`): a run
            // without it does not start.
            if !dir.join("cgroup.kill").exists() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "{} has no cgroup.kill: this kernel cannot kill a cgroup's tree",
                        dir.display()
                    ),
                ));
            }
            if support.v2_pids {
                if let Some(n) = max_processes {
                    fs::write(dir.join("pids.max"), n.to_string())?;
                }
            }
            if support.v2_memory {
                if let Some(b) = memory_bytes {
                    fs::write(dir.join("memory.max"), b.to_string())?;
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                }
            }
        }
        if let Some(base) = &support.v1_pids {
            let dir = base.join(&name);
            fs::create_dir(&dir)?;
            run.v1_pids = Some(dir.clone());
            if !support.v2_pids {
                if let Some(n) = max_processes {
                    fs::write(dir.join("pids.max"), n.to_string())?;
                }
            }
        }
        if let Some(base) = &support.v1_memory {
            let dir = base.join(&name);
            fs::create_dir(&dir)?;
            run.v1_memory = Some(dir.clone());
            if !support.v2_memory {
                if let Some(b) = memory_bytes {
                    fs::write(dir.join("memory.limit_in_bytes"), b.to_string())?;
                    // Without this, a limited tree swaps instead of being killed.
                    let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), b.to_string());
                    let _ = fs::write(dir.join("memory.swappiness"), "0");
                }
            }
        }
        let c_path = |p: PathBuf| {
            CString::new(p.into_os_string().into_vec())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        if let Some(dir) = &run.v2 {
            run.v2_procs = Some(c_path(dir.join("cgroup.procs"))?);
        }
        for dir in [&run.v1_pids, &run.v1_memory].into_iter().flatten() {
            let tasks = dir.join("tasks");
            let file = if tasks.exists() {
                tasks
            } else {
                dir.join("cgroup.procs")
            };
            run.v1_joins.push(c_path(file)?);
        }
        Ok(Some(run))
    }

    /// The run's cgroup v2 directory, which the child is born into where `clone3` allows.
    pub fn v2_dir(&self) -> Option<&Path> {
        self.v2.as_deref()
    }

    /// The run's cgroup v2 `cgroup.procs`, which a child not born in the cgroup writes `0`
    /// to between fork and exec. cgroup v2 has no cheaper way in: `cgroup.threads` of a
    /// domain cgroup refuses (`EOPNOTSUPP`), so such a move pays the grace period below.
    pub fn v2_procs(&self) -> Option<&CString> {
        self.v2_procs.as_ref()
    }

    /// The files of the run's cgroup v1 hierarchies the child writes `0` to between fork
    /// and exec: each one's `tasks` (`cgroup.procs` where a hierarchy has no `tasks`).
    ///
    /// `tasks` moves one thread, `cgroup.procs` a whole thread group. The kernel skips the
    /// global `cgroup_threadgroup_rwsem` for exactly one case, a single thread moving
    /// itself (`cgroup_procs_write_start`, kernel/cgroup/cgroup.c: "If we migrate a single
    /// thread, we don't care about threadgroup stability. If the thread is `current`, it
    /// won't exit(2) under our hands or change PID through exec(2) [...] Therefore, we can
    /// skip the global lock"). Taking that lock for writing waits for an RCU grace period
    /// after a quiet spell: 10-22 ms here through `cgroup.procs`, 30 us through `tasks`.
    /// The child between fork and exec has exactly one thread, so moving that thread
    /// moves the whole process.
    pub fn v1_joins(&self) -> &[CString] {
        &self.v1_joins
    }

    fn pids_dir(&self) -> Option<&Path> {
        self.v2.as_deref().or(self.v1_pids.as_deref())
    }

    fn members(&self) -> Vec<i32> {
        self.pids_dir()
            .and_then(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kill every process in the run's cgroup, once, without waiting; whether none is
    /// left already (the usual case once the command's own process has been reaped: then
    /// nothing needs a blocking wait).
    pub fn kill(&self) -> bool {
        if let Some(v2) = &self.v2 {
            let _ = fs::write(v2.join("cgroup.kill"), "1");
        } else {
            // v1 has no cgroup.kill: kill what is listed.
            for pid in self.members() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let empty = self.members().is_empty();
        self.emptied.store(empty, Ordering::Relaxed);
        empty
    }

    /// Kill every process in the run's cgroup and wait (up to `limit`) until none is left.
    pub fn kill_all(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        if self.kill() {
            return;
        }
        // cgroup v2 says when its last task has exited: wait for that event rather than
        // sleeping in steps (a killed tree can take from microseconds to milliseconds to
        // exit: a big address space, a pid namespace's init being reaped).
        if let Some(v2) = &self.v2 {
            if wait_unpopulated(v2, deadline).is_ok() {
                self.emptied
                    .store(self.members().is_empty(), Ordering::Relaxed);
                return;
            }
        }
        // v1 (or no `cgroup.events`): kill what is listed, again until the list is empty
        // (the pids limit bounds how many a fork loop can add meanwhile). Poll fast first.
        let mut pause = Duration::from_micros(50);
        loop {
            let members = self.members();
            if members.is_empty() {
                self.emptied.store(true, Ordering::Relaxed);
                return;
            }
            if Instant::now() > deadline {
                return;
            }
            for pid in members {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Whether the kernel's OOM killer killed something in this run's memory cgroup.
    pub fn oom_killed(&self) -> bool {
        let count = |path: PathBuf, key: &str| -> u64 {
            fs::read_to_string(path)
                .ok()
                .and_then(|s| {
                    s.lines().find_map(|l| {
                        let (k, v) = l.split_once(' ')?;
                        (k == key).then(|| v.trim().parse().ok()).flatten()
                    })
                })
                .unwrap_or(0)
        };
        let v2 = self
            .v2
            .as_ref()
            .map(|d| count(d.join("memory.events"), "oom_kill"))
            .unwrap_or(0);
        let v1 = self
            .v1_memory
            .as_ref()
            .map(|d| count(d.join("memory.oom_control"), "oom_kill"))
            .unwrap_or(0);
        v2 + v1 > 0
    }
}

/// Wait until the cgroup v2 `dir` has no live task (`populated 0` in `cgroup.events`), or
/// `deadline`; `Err` when the file cannot be read or polled (the caller then polls the
/// member list). The kernel marks the open file changed at every change of the file
/// (a poll then returns `POLLPRI`); a read clears that, so a change between our read and
/// our poll is not lost.
fn wait_unpopulated(dir: &Path, deadline: Instant) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let events = fs::File::open(dir.join("cgroup.events"))?;
    loop {
        let mut buf = [0u8; 256];
        let n = rustix::io::pread(&events, &mut buf, 0)?;
        let populated = buf[..n]
            .split(|&b| b == b'\n')
            .any(|line| line == b"populated 1");
        if !populated {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let timeout = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&events, PollFlags::PRI)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Kill what is left in, and remove, the run cgroups (below the bases `support` found) of
/// every maker that is gone (see [`crate::owner`]); the removed directories.
pub fn remove_dead(support: &CgroupSupport) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for (base, v2) in [
        (&support.v2, true),
        (&support.v1_pids, false),
        (&support.v1_memory, false),
    ] {
        let Some(base) = base else { continue };
        let Ok(entries) = fs::read_dir(base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(owner) = name
                .to_str()
                .and_then(|n| n.strip_prefix("sandbox-"))
                .and_then(crate::owner::Owner::parse_tag)
                .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .map(|(o, _)| o)
            else {
                continue;
            };
            if owner.is_alive() {
                continue;
            }
            let dir = e.path();
            let run = RunCgroups {
                v2: v2.then(|| dir.clone()),
                v1_pids: (!v2).then(|| dir.clone()),
                v1_memory: None,
                v2_procs: None,
                v1_joins: Vec::new(),
                emptied: false.into(),
            };
            run.kill_all(Duration::from_secs(2));
            drop(run);
            if !dir.exists() {
                removed.push(dir);
            }
        }
    }
    removed
}

impl Drop for RunCgroups {
    /// Normally the tree is dead by now ([`RunCgroups::kill_all`] ran). When the run was
    /// dropped before it could stop (its runtime shut down mid-run), this kill is the
    /// backstop that still ends the descendants that left the process group (skipped when
    /// a kill already saw the cgroup empty).
    fn drop(&mut self) {
        if !self.emptied.load(Ordering::Relaxed) {
            self.kill();
        }
        for dir in [&self.v2, &self.v1_pids, &self.v1_memory]
            .into_iter()
            .flatten()
        {
            // A cgroup is removable once its last process is reaped; give that a moment
            // (about a second at most), polling fast first.
            let mut pause = Duration::from_micros(50);
            for _ in 0..250 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(5));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kill_all` returns only once nothing of the tree is left: processes that joined the
    /// run's cgroups and forked children of their own, all gone from every member list,
    /// and cgroup v2 reports the cgroup unpopulated.
    #[test]
    fn kill_all_returns_once_the_cgroup_is_empty() {
        let Some(cg) = RunCgroups::create(CgroupSupport::get(), None, None).unwrap() else {
            eprintln!("skipped: this host gives a run no cgroup");
            return;
        };
        let joins: Vec<CString> = cg
            .v2_procs()
            .into_iter()
            .chain(cg.v1_joins())
            .cloned()
            .collect();
        let mut kids = Vec::new();
        for _ in 0..4 {
            let joins = joins.clone();
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", "sleep 30 & sleep 30 & wait"]);
            // SAFETY: only `raw_write_file` (open, write, close) on C strings made above.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    for j in &joins {
                        crate::sys::raw_write_file(j, b"0")?;
                    }
                    Ok(())
                });
            }
            kids.push(cmd.spawn().unwrap());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while cg.members().len() < 12 {
            assert!(Instant::now() < deadline, "members: {:?}", cg.members());
            std::thread::sleep(Duration::from_millis(5));
        }
        cg.kill_all(Duration::from_secs(5));
        assert!(cg.members().is_empty(), "left: {:?}", cg.members());
        for dir in [&cg.v1_pids, &cg.v1_memory].into_iter().flatten() {
            let tasks = fs::read_to_string(dir.join("tasks")).unwrap();
            assert!(tasks.trim().is_empty(), "{}: {tasks}", dir.display());
        }
        if let Some(v2) = &cg.v2 {
            let events = fs::read_to_string(v2.join("cgroup.events")).unwrap();
            assert!(events.contains("populated 0"), "{events}");
        }
        for mut k in kids {
            let status = k.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGKILL)
            );
        }
    }

    /// Waiting for an unpopulated cgroup v2 honours its deadline while a member lives.
    #[test]
    fn waiting_for_an_empty_cgroup_stops_at_the_deadline() {
        let Some(cg) = RunCgroups::create(CgroupSupport::get(), None, None).unwrap() else {
            eprintln!("skipped: this host gives a run no cgroup");
            return;
        };
        let Some(v2) = cg.v2.clone() else {
            eprintln!("skipped: no cgroup v2 here");
            return;
        };
        let procs = cg.v2_procs().unwrap().clone();
        let mut cmd = std::process::Command::new("/bin/sleep");
        cmd.arg("30");
        // SAFETY: only `raw_write_file` on a C string made above.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                crate::sys::raw_write_file(&procs, b"0")
            });
        }
        let mut kid = cmd.spawn().unwrap();
        let t = Instant::now();
        wait_unpopulated(&v2, t + Duration::from_millis(100)).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
        assert!(fs::read_to_string(v2.join("cgroup.events"))
            .unwrap()
            .contains("populated 1"));
        cg.kill_all(Duration::from_secs(5));
        kid.wait().unwrap();
    }
}
