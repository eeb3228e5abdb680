//! `sandbox-bench-launch`: the bare mechanism of a process backend as a process of its own,
//! the baseline of the bench's row for the `sandbox` command as a whole process (issue 12:
//! "a minimal native launcher that the bench builds and that applies the same ruleset and
//! filter, then execs").
//!
//! Usage: `sandbox-bench-launch BACKEND LANE WORKSPACE FACTS -- PROGRAM [ARGS...]`
//!
//! It builds the backend's launcher (with the host facts the bench's own backend value
//! recorded, read from the JSON file `FACTS`, so it forks no probe: as `sandbox run` takes
//! them from its cache), turns the request (the program in the workspace on the lane, the
//! library's defaults otherwise, as the bench's `sandbox run` row asks) into the backend's
//! `Launch`, and then, in this one single-threaded process, does what the launch says
//! and nothing else: the credentials, the working directory, the descriptors it hands
//! over, the backend's own steps between fork and exec (namespaces, landlock, seccomp,
//! capabilities), and `execve` of the launch's program with its argv and environment; a
//! launch born in namespaces (landlock's `strict`: the pid namespace, whose init execs
//! the sandbox's waiter) is run in the child an `unshare` makes next, as `unshare --fork`.
//! No async runtime, no cgroup, no supervisor, no output capture (the command writes to
//! this process's own standard output): what `sandbox run` adds on top of the mechanism
//! is what the bench's ratio shows.
//!
//! With `SANDBOX_BENCH_LAUNCH_HOLD` set it stops once the launch is built, says
//! `prepared` on standard error and goes on at a byte on standard input: the pod rows time
//! only applying the launch and the command.
//!
//! A launch that needs a host side alive while the command runs (a proxy, a temp dir) cannot
//! be applied by a process that becomes the command: refused, exit 2.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::Arc;

use sandbox_core::registry::BackendConfig;
use sandbox_core::{Lane, Plan, SandboxOpts};
use sandbox_host::facts::{FactStore, Facts};

/// The facts the bench recorded, by backend: its key and facts.
#[derive(Debug, Default)]
struct HandedFacts(BTreeMap<String, (String, Facts)>);

impl FactStore for HandedFacts {
    fn load(&self, backend: &str, key: &str) -> Option<Facts> {
        let (k, facts) = self.0.get(backend)?;
        if k != key {
            // Probing here would make the baseline slower than the mechanism is.
            fail(&format!(
                "the facts handed over for `{backend}` are for another host key\n  \
                 handed: {k}\n  here:   {key}"
            ));
        }
        Some(facts.clone())
    }
    fn save(&self, _: &str, _: &str, _: &Facts) {}
    fn forget(&self, _: &str) {}
}

/// Set: stop once the launch is prepared, print `prepared` on standard error and apply it
/// only after a byte on standard input (the environment the command gets is the launch's
/// own, without it).
const HOLD: &str = "SANDBOX_BENCH_LAUNCH_HOLD";

fn fail(what: &str) -> ! {
    eprintln!("sandbox-bench-launch: {what}");
    std::process::exit(2)
}

fn read_facts(path: &str) -> HandedFacts {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| fail(&format!("cannot read the facts file {path}: {e}")));
    let value: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| fail(&format!("the facts file {path} does not parse: {e}")));
    let mut out = HandedFacts::default();
    for (backend, entry) in value.as_object().into_iter().flatten() {
        let key = entry["key"].as_str().unwrap_or_default().to_string();
        let facts = entry["facts"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        out.0.insert(backend.clone(), (key, facts));
    }
    out
}

fn c_string(bytes: &[u8]) -> CString {
    CString::new(bytes).unwrap_or_else(|_| fail("an argument holds a NUL byte"))
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.len() < 7 || args[5] != "--" {
        fail("usage: sandbox-bench-launch BACKEND LANE WORKSPACE FACTS -- PROGRAM [ARGS...]");
    }
    let text = |i: usize| {
        args[i]
            .to_str()
            .unwrap_or_else(|| fail("BACKEND, LANE and FACTS are text"))
    };
    let info = sandbox::select::info(text(1)).unwrap_or_else(|e| fail(&e.to_string()));
    let Some(make) = sandbox::registry::tooling(info.name).and_then(|t| t.launcher) else {
        fail(&format!("`{}` does not launch a host process", info.name));
    };
    let lane: Lane = text(2).parse().unwrap_or_else(|e: String| fail(&e));
    let config = BackendConfig::default().with_facts(Arc::new(read_facts(text(4))));
    let Some(launcher) = sandbox_host::pipeline::unerase(&make(&config)) else {
        fail(&format!(
            "`{}`'s launcher is not a process launcher",
            info.name
        ));
    };

    let mut opts = SandboxOpts::new(PathBuf::from(&args[3]), args[6..].iter().cloned());
    opts.lane = lane;
    let plan = Plan::new(&opts, launcher.name(), &launcher.capability())
        .unwrap_or_else(|e| fail(&e.to_string()));
    let launch = launcher
        .prepare(&plan, None)
        .unwrap_or_else(|e| fail(&e.to_string()));
    if launch.needs_host_alive() {
        fail("the launch needs its host alive while the command runs (a proxy, a temp dir)");
    }

    let program = c_string(launch.program.as_os_str().as_bytes());
    let argv: Vec<CString> = std::iter::once(&launch.arg0)
        .chain(&launch.args)
        .map(|a| c_string(a.as_bytes()))
        .collect();
    let envp: Vec<CString> = launch
        .env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.clone().into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c_string(&kv)
        })
        .collect();
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let cwd = c_string(launch.cwd.as_os_str().as_bytes());

    // Held (the bench's pod rows): everything is built; say so and wait for the go, so the
    // span the bench times is applying the launch and the command, not building it.
    if std::env::var_os(HOLD).is_some() {
        eprintln!("prepared");
        let mut go = [0u8; 1];
        if !matches!(std::io::stdin().read(&mut go), Ok(1)) {
            fail("held, and no go came on standard input");
        }
    }
    // What the launch hands over crosses the exec; so do the read ends of the pipes its
    // helper reports on (a pipe without a reader would fail the helper's writes), which
    // nobody reads here: this process becomes the command.
    let mut crossing: Vec<i32> = launch.pass_fds.iter().map(|f| f.as_raw_fd()).collect();
    crossing.extend(launch.exit_status_pipe.iter().map(|f| f.as_raw_fd()));
    crossing.extend(launch.ready_pipe.iter().map(|f| f.as_raw_fd()));
    crossing.extend(launch.seccomp_listener.iter().map(|f| f.as_raw_fd()));
    for fd in crossing {
        // SAFETY: a plain system call on a descriptor this process owns.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            fail(&format!("fcntl: {}", std::io::Error::last_os_error()));
        }
    }
    if let Some((uid, gid)) = launch.credentials {
        // SAFETY: plain system calls; no groups, then the gid, then the uid.
        let ok = unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(gid, gid, gid) == 0
                && libc::setresuid(uid, uid, uid) == 0
        };
        if !ok {
            fail(&format!("credentials: {}", std::io::Error::last_os_error()));
        }
    }
    let born = launch.born_in;
    if born.any() {
        // Born in the namespaces as core's `clone3` makes the run's process: here by
        // `unshare` and the next child (`unshare --fork`), which goes on below; this
        // process ends with its exit code (the waiter's own is the command's, or 128+N).
        let maps = sandbox_host::process::BornIn::identity_maps();
        // SAFETY: this process is single-threaded and ends when the child does.
        if let Err(e) = unsafe { born.enter_by_fork(&maps) } {
            fail(&format!("the namespaces the launch is born in: {e}"));
        }
    }
    // SAFETY: a plain system call on a C string that lives across it.
    if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
        fail(&format!("chdir: {}", std::io::Error::last_os_error()));
    }
    for step in &launch.pre_exec {
        if let Err(e) = step.pre_exec() {
            fail(&format!("a step of the launch failed: {e}"));
        }
    }
    // SAFETY: NUL-terminated arrays of C strings that live across the call.
    unsafe { libc::execve(program.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    fail(&format!(
        "execve {}: {}",
        launch.program.display(),
        std::io::Error::last_os_error()
    ));
}
