//! One check per denied call class of issue 4: the call fails with `EPERM` inside (`ENOSYS`
//! for `clone3`), and where the call would leave a trace on the host, the host shows none.
//!
//! The calls are made through python's ctypes with numbers from the `libc` crate, so each
//! is the raw system call, not a library's emulation of it. Arguments are chosen so that
//! nothing would happen even if a call got through (a wrong `reboot` magic, a module of
//! length zero), apart from the calls the host then checks.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;

/// `name nr args` lines: the python expression for each call.
fn calls(host_pid: u32, ws: &str) -> Vec<(&'static str, String)> {
    let c = |s: &str| format!("ctypes.c_char_p({s:?}.encode())");
    let ws_arg = c(ws);
    vec![
        (
            "ptrace_traceme",
            format!("{}, 0, 0, 0, 0", libc::SYS_ptrace),
        ),
        (
            "ptrace_attach",
            format!("{}, 16, {host_pid}, 0, 0", libc::SYS_ptrace),
        ),
        (
            "process_vm_readv",
            format!("{}, {host_pid}, 0, 0, 0, 0, 0", libc::SYS_process_vm_readv),
        ),
        (
            "process_vm_writev",
            format!("{}, {host_pid}, 0, 0, 0, 0, 0", libc::SYS_process_vm_writev),
        ),
        (
            "mount",
            format!(
                "{}, {}, {ws_arg}, {}, 0, 0",
                libc::SYS_mount,
                c("none"),
                c("tmpfs")
            ),
        ),
        ("umount2", format!("{}, {ws_arg}, 0", libc::SYS_umount2)),
        (
            "pivot_root",
            format!("{}, {ws_arg}, {ws_arg}", libc::SYS_pivot_root),
        ),
        ("chroot", format!("{}, {ws_arg}", libc::SYS_chroot)),
        (
            "unshare_user",
            format!("{}, {}", libc::SYS_unshare, libc::CLONE_NEWUSER),
        ),
        (
            "unshare_mount",
            format!("{}, {}", libc::SYS_unshare, libc::CLONE_NEWNS),
        ),
        ("setns", format!("{}, 0, 0", libc::SYS_setns)),
        (
            "clone_newuser",
            format!(
                "{}, {}, 0, 0, 0, 0",
                libc::SYS_clone,
                libc::CLONE_NEWUSER | libc::SIGCHLD
            ),
        ),
        (
            "clone_newnet",
            format!(
                "{}, {}, 0, 0, 0, 0",
                libc::SYS_clone,
                libc::CLONE_NEWNET | libc::SIGCHLD
            ),
        ),
        ("clone3", format!("{}, 0, 0", 435)),
        ("keyctl", format!("{}, 0, -3, 0", libc::SYS_keyctl)),
        (
            "add_key",
            format!(
                "{}, {}, {}, {}, 1, -3",
                libc::SYS_add_key,
                c("user"),
                c("sandbox-test"),
                c("x")
            ),
        ),
        (
            "request_key",
            format!(
                "{}, {}, {}, 0, 0",
                libc::SYS_request_key,
                c("user"),
                c("sandbox-test")
            ),
        ),
        ("bpf", format!("{}, 5, 0, 0", libc::SYS_bpf)),
        (
            "perf_event_open",
            format!("{}, 0, 0, -1, -1, 0", libc::SYS_perf_event_open),
        ),
        ("userfaultfd", format!("{}, 0", libc::SYS_userfaultfd)),
        (
            "io_uring_setup",
            format!("{}, 1, 0", libc::SYS_io_uring_setup),
        ),
        (
            "kexec_load",
            format!("{}, 0, 0, 0, 0", libc::SYS_kexec_load),
        ),
        (
            "kexec_file_load",
            format!("{}, -1, -1, 0, 0, 0", libc::SYS_kexec_file_load),
        ),
        (
            "init_module",
            format!("{}, 0, 0, {}", libc::SYS_init_module, c("")),
        ),
        (
            "finit_module",
            format!("{}, -1, {}, 0", libc::SYS_finit_module, c("")),
        ),
        (
            "delete_module",
            format!("{}, {}, 0", libc::SYS_delete_module, c("sandbox_no_such")),
        ),
        ("reboot", format!("{}, 0, 0, 0, 0", libc::SYS_reboot)),
        (
            "swapon",
            format!("{}, {}, 0", libc::SYS_swapon, c(&format!("{ws}/swapfile"))),
        ),
        (
            "swapoff",
            format!("{}, {}", libc::SYS_swapoff, c(&format!("{ws}/swapfile"))),
        ),
        (
            "ioctl_tiocsti",
            format!(
                "{}, 0, {}, ctypes.byref(ctypes.c_char(b'x'))",
                libc::SYS_ioctl,
                0x5412
            ),
        ),
        (
            "ioctl_tiocsti_high_bits",
            format!(
                "{}, 0, {}, ctypes.byref(ctypes.c_char(b'x'))",
                libc::SYS_ioctl,
                0xFFFF_FFFF_0000_5412u64 as i64
            ),
        ),
        (
            "ioctl_tioclinux",
            format!(
                "{}, 0, {}, ctypes.byref(ctypes.c_char(b'x'))",
                libc::SYS_ioctl,
                0x541C
            ),
        ),
        (
            "socket_inet",
            format!("{}, {}, 1, 0", libc::SYS_socket, libc::AF_INET),
        ),
        (
            "socket_packet",
            format!("{}, {}, 3, 0", libc::SYS_socket, libc::AF_PACKET),
        ),
        (
            "socket_netlink",
            format!("{}, {}, 3, 0", libc::SYS_socket, libc::AF_NETLINK),
        ),
        (
            "chmod_setuid",
            format!(
                "{}, -100, {}, 0o4755, 0",
                libc::SYS_fchmodat,
                c(&format!("{ws}/victim"))
            ),
        ),
        (
            "chmod_setgid",
            format!(
                "{}, -100, {}, 0o2755, 0",
                libc::SYS_fchmodat,
                c(&format!("{ws}/victim"))
            ),
        ),
        (
            "create_setuid",
            format!(
                "{}, -100, {}, {}, 0o4755",
                libc::SYS_openat,
                c(&format!("{ws}/created-setuid")),
                libc::O_CREAT | libc::O_WRONLY
            ),
        ),
        (
            "tmpfile_setuid",
            format!(
                "{}, -100, {ws_arg}, {}, 0o4755",
                libc::SYS_openat,
                libc::O_TMPFILE | libc::O_RDWR
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_denied_call_class_fails_with_eperm_inside_and_leaves_the_host_alone() {
    let ws = tempdir();
    let ws_path = ws.path().canonicalize().unwrap();
    fs::write(ws_path.join("victim"), "x").unwrap();
    fs::set_permissions(ws_path.join("victim"), fs::Permissions::from_mode(0o755)).unwrap();
    // The mounts of the workspace: the mount calls below target it. (Not the whole table:
    // other work on a shared host, a container engine above all, mounts and unmounts
    // elsewhere meanwhile.)
    let ws_mounts = || -> Vec<String> {
        let ws = ws_path.display().to_string();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&ws))
            .map(String::from)
            .collect()
    };
    let mountinfo_before = ws_mounts();
    let swaps_before = fs::read_to_string("/proc/swaps").unwrap();
    // The target of ptrace and process_vm_*: a host process of the same user (not the test
    // process itself, which a successful attach would stop instead of failing the test).
    let mut victim = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let host_pid = victim.id();

    let list = calls(host_pid, &ws_path.display().to_string());
    let mut body = String::from(
        "print('seccomp', 0 if 'Seccomp:\\t2' in open('/proc/self/status').read() else 99)\n",
    );
    for (name, args) in &list {
        body.push_str(&format!("sc({name:?}, {args})\n"));
    }
    let o = python(&ws_path, &body, |_| {}).await;
    assert_ok(&o);
    let got = results(&o);
    assert_eq!(
        got.first(),
        Some(&("seccomp".to_string(), 0)),
        "{}",
        out(&o)
    );
    for (name, _) in &list {
        let errno = got
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not reported: {}\n{}", out(&o), err(&o)))
            .1;
        let want = if *name == "clone3" {
            libc::ENOSYS
        } else {
            libc::EPERM
        };
        assert_eq!(errno, want, "{name}");
    }

    // The host side.
    let status = fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(
        status.contains("TracerPid:\t0"),
        "the host process got traced"
    );
    assert!(
        !status.contains("State:\tT"),
        "the host process got stopped"
    );
    assert_eq!(
        ws_mounts(),
        mountinfo_before,
        "the workspace's mounts changed"
    );
    assert_eq!(fs::read_to_string("/proc/swaps").unwrap(), swaps_before);
    let mode = fs::metadata(ws_path.join("victim"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "a set-id bit was set");
    assert!(!ws_path.join("created-setuid").exists());
    for e in fs::read_dir(&ws_path).unwrap() {
        let m = e.unwrap().metadata().unwrap().permissions().mode();
        assert_eq!(m & 0o6000, 0, "a set-id file is left in the workspace");
    }
}

/// Signals stay inside the sandbox (landlock's signal scope, ABI 6): a host process is
/// not killed.
#[tokio::test(flavor = "multi_thread")]
async fn host_processes_cannot_be_signalled() {
    let ws = tempdir();
    let mut victim = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let o = sh(
        ws.path(),
        &format!("kill -TERM {}; echo kill=$?", victim.id()),
    )
    .await;
    std::thread::sleep(std::time::Duration::from_millis(200));
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(out(&o).contains("kill=1"), "{} {}", out(&o), err(&o));
    assert!(alive, "the host's process was killed from the sandbox");
}

/// A set-id file made through `O_TMPFILE` and linked into place (the mode is given when
/// the unnamed file is created, without `O_CREAT`) is refused too.
#[tokio::test(flavor = "multi_thread")]
async fn no_setuid_file_through_o_tmpfile_and_link() {
    let ws = tempdir();
    let body = r#"
import os
try:
    fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o4755)
    os.link("/proc/self/fd/%d" % fd, "planted", follow_symlinks=True)
    print("tmpfile", 0)
except OSError as e:
    print("tmpfile", e.errno)
"#;
    let o = python(ws.path(), body, |_| {}).await;
    assert_ok(&o);
    assert_eq!(
        results(&o),
        [("tmpfile".to_string(), libc::EPERM)],
        "{}",
        err(&o)
    );
    if let Ok(m) = fs::metadata(ws.path().join("planted")) {
        assert_eq!(m.permissions().mode() & 0o6000, 0, "set-id file planted");
    }
}
