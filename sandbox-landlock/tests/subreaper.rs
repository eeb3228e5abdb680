//! Core's waiter where it is no pid namespace's init (this backend's `fast` and `trusted`
//! lanes): a child subreaper that kills every descendant, a double-forked `setsid` daemon
//! that ignores SIGTERM and keeps forking included, when the command ends and when the
//! host sends it SIGTERM. The waiter is run here directly, with no cgroup and no sandbox
//! around it, so nothing but the waiter can be what kills the tree; the host checks its
//! process table for every process that carries the run's mark in its environment.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_host::process::waiter::{executable, WaiterArgs};

/// A daemon that escapes as daemons do: a double fork with `setsid` between, SIGTERM
/// ignored, and for a few seconds a fork of a new double-forked sleeper every few ms (each
/// an orphan the moment its subshell exits), then a sleep. Its pid goes to `daemon.pid`.
const DAEMON: &str = "(setsid sh -c 'trap \"\" TERM; echo $$ > daemon.pid; \
     end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do (sleep 300 &); done; \
     sleep 300' &)";

fn pipe() -> (OwnedFd, OwnedFd) {
    // Inherited by the waiter at these numbers: not close-on-exec.
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::empty()).unwrap()
}

/// Start the waiter on `sh -c script` in `dir`, every process of it marked with `mark`.
fn start(dir: &Path, script: &str, mark: &str) -> (Child, OwnedFd) {
    let exe = executable().unwrap();
    let (status_r, status_w) = pipe();
    let (ready_r, ready_w) = pipe();
    let args = WaiterArgs {
        status: status_w.as_raw_fd(),
        ready: ready_w.as_raw_fd(),
        flags: String::new(),
        nproc: None,
        proxy: None,
        program: "/bin/sh".into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
    };
    let child = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()))
        .args(args.to_args())
        .current_dir(dir)
        .env("SANDBOX_SUBREAPER_MARK", mark)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop((status_w, ready_w, ready_r));
    (child, status_r)
}

/// The pids of live (not zombie) processes whose environment holds `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("SANDBOX_SUBREAPER_MARK={mark}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            !zombie && env.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .collect()
}

fn wait_for(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the daemon never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait for the waiter's end, bounded; a waiter that hangs fails the test.
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the waiter did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Survivors are reported, then killed, so a failing test does not litter the host.
fn assert_none_left(mark: &str, daemon: i32) {
    let left = marked(mark);
    for pid in &left {
        // SAFETY: a signal to a process that carries this test's mark.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "processes of the run outlived the waiter (the daemon was {daemon}): {left:?}"
    );
    // SAFETY: signal 0 only asks whether the pid exists.
    let gone = unsafe { libc::kill(daemon, 0) } != 0;
    assert!(gone, "the daemon {daemon} is still there");
}

#[test]
fn the_command_ending_ends_every_descendant() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("exit-{}", std::process::id());
    // The command leaves the daemon behind and exits 3 once it has started forking.
    let script =
        format!("{DAEMON}; while [ ! -s daemon.pid ]; do sleep 0.01; done; sleep 1; exit 3");
    let (mut waiter, status) = start(dir.path(), &script, &mark);
    let s = wait_bounded(&mut waiter);
    let daemon = wait_for(&dir.path().join("daemon.pid"));
    assert_eq!(s.code(), Some(3), "{s:?}");
    assert_none_left(&mark, daemon);
    // The command's own status was reported, after the tree was gone.
    let mut raw = [0u8; 4];
    assert_eq!(rustix::io::read(&status, &mut raw).unwrap(), 4);
    assert_eq!(i32::from_ne_bytes(raw), 3 << 8);
}

#[test]
fn sigterm_from_the_host_ends_every_descendant() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("term-{}", std::process::id());
    let script = format!("{DAEMON}; exec sleep 300");
    let (mut waiter, _status) = start(dir.path(), &script, &mark);
    let daemon = wait_for(&dir.path().join("daemon.pid"));
    // While it is still forking.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !marked(&mark).is_empty(),
        "the host cannot see the run's processes"
    );
    // SAFETY: a signal to our own unreaped child.
    unsafe { libc::kill(waiter.id() as i32, libc::SIGTERM) };
    wait_bounded(&mut waiter);
    assert_none_left(&mark, daemon);
}
