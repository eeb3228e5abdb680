//! Real commands through `BwrapSandbox`, each effect checked from the host.
//!
//! Runs as whoever runs it: CI runs it as root and again, the same binary, as uid 65534:
//!
//! ```sh
//! mkdir -p /tmp/u65534 && chown 65534:65534 /tmp/u65534
//! setpriv --reuid=65534 --regid=65534 --clear-groups \
//!     env TMPDIR=/tmp/u65534 HOME=/tmp/u65534 $(ls target/debug/deps/bwrap-* | grep -v '\.d$')
//! ```
//!
//! Assertions that differ between the two say so; none is skipped.
//!
//! Only what is bwrap's own is tested here (its layout of the host's tree, its private
//! `/tmp` and `/home`, its pid namespace as the tree kill, the nesting of granted paths).
//! What every backend must do (argv, statuses, the environment, descriptors, tree kill,
//! the network modes and the host's abstract sockets, bad input, snapshots, carve-outs) is
//! the conformance suite's: `cargo xtask conformance --backend bwrap`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandbox_bwrap::{BwrapBackend, BwrapSandbox};
use sandbox_core::{Sandbox, SandboxExt, SandboxOpts, SandboxOutcome, Status, TreeKill};

const PERL: &str = "/usr/bin/perl";

fn sandbox() -> BwrapSandbox {
    BwrapSandbox::new(BwrapBackend::new())
}

fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bwrap-test-ws-")
        .tempdir()
        .unwrap()
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().unwrap()
}

async fn run(opts: SandboxOpts) -> SandboxOutcome {
    sandbox().execute(opts).await.unwrap()
}

async fn sh(ws: &Path, script: &str) -> SandboxOutcome {
    run(SandboxOpts::new(ws, ["sh", "-c", script])).await
}

fn is_root() -> bool {
    // SAFETY: a plain system call without arguments.
    unsafe { libc::geteuid() == 0 }
}

/// A number no other process on the host has in its argv: `sleep MARKER` is then findable
/// from the host by its command line.
fn marker() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("7{}{:06}", std::process::id() % 1000, nanos % 1_000_000)
}

#[tokio::test]
async fn preflight_runs_a_real_command_and_reports_the_version() {
    let p = sandbox().preflight().await.unwrap();
    assert_eq!(p.backend, "bwrap");
    let v = p.version.unwrap();
    assert!(v.starts_with(|c: char| c.is_ascii_digit()), "{v}");
}

#[tokio::test]
async fn the_capability_claims_what_the_tests_below_prove() {
    let c = BwrapBackend::new();
    let c = sandbox_core::Backend::capability(&c);
    assert!(c.confine_reads && c.confine_writes && c.readonly_carveouts);
    assert!(c.tree_kill && c.process_isolation && c.signal_status && c.drops_host_root);
    assert!(c.network_none.is_exact() && c.network_loopback.is_exact());
}

#[tokio::test]
async fn files_the_command_makes_belong_to_the_caller() {
    let ws = workspace();
    let out = sh(ws.path(), "echo data > created").await;
    assert!(out.status.success(), "{}", out.stderr.text());
    let meta = std::fs::metadata(ws.path().join("created")).unwrap();
    // SAFETY: plain system calls without arguments.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
}

#[tokio::test]
async fn a_command_that_signals_its_own_group_gets_its_status_and_the_pid_namespace_kills_the_tree()
{
    // bwrap's init and our waiter share the command's process group: the signal must
    // still be reported as the command's own.
    let ws = workspace();
    let out = sh(ws.path(), "kill -TERM 0").await;
    assert_eq!(out.status, Status::Signaled { signal: 15 });
    assert_eq!(out.policy.tree_kill, Some(TreeKill::PidNamespace));
}

#[tokio::test]
async fn tmp_and_home_are_private_and_home_is_writable() {
    let ws = workspace();
    let name = format!("sandbox-bwrap-private-{}", marker());
    let out = sh(
        ws.path(),
        &format!("echo x > /tmp/{name} && echo y > \"$HOME/home-file\" && ls -A /root /home"),
    )
    .await;
    assert!(out.status.success(), "{}", out.stderr.text());
    assert!(!Path::new("/tmp").join(&name).exists());
    assert!(
        ws.path().join("home-file").exists(),
        "HOME is the workspace by default"
    );
    // Both private tmpfs are empty: `ls -A` lists nothing under either heading.
    assert_eq!(
        out.stdout.text(),
        "/home:\n\n/root:\n",
        "{}",
        out.stdout.text()
    );

    // A HOME of the caller's choosing inside the private /home exists and is writable.
    let mut o = SandboxOpts::new(
        ws.path(),
        ["sh", "-c", "echo z > \"$HOME/f\" && cat \"$HOME/f\""],
    );
    o.env.set.push(("HOME".into(), "/home/agent".into()));
    let out = run(o).await;
    assert_eq!(out.stdout.text(), "z\n", "{}", out.stderr.text());
}

#[tokio::test]
async fn host_files_outside_the_grants_are_absent_and_named_ones_read_only() {
    let ws = workspace();
    let secret_dir = workspace();
    let secret = canon(secret_dir.path()).join("id_ed25519");
    std::fs::write(&secret, "PRIVATE KEY").unwrap();

    let out = sh(ws.path(), &format!("cat '{}'", secret.display())).await;
    assert!(!out.status.success());
    assert!(!out.stdout.text().contains("PRIVATE KEY"));

    // Named read-only: readable, not writable, unchanged on the host.
    let mut o = SandboxOpts::new(
        ws.path(),
        [
            "sh",
            "-c",
            &format!("cat '{0}'; echo changed > '{0}'", secret.display()),
        ],
    );
    o.read_only_paths = vec![secret_dir.path().to_path_buf()];
    let out = run(o).await;
    assert!(out.stdout.text().contains("PRIVATE KEY"));
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "PRIVATE KEY");

    // Named writable: the write reaches the host.
    let mut o = SandboxOpts::new(
        ws.path(),
        [
            "sh",
            "-c",
            &format!("echo changed > '{}'", secret.display()),
        ],
    );
    o.writable_paths = vec![secret_dir.path().to_path_buf()];
    assert!(run(o).await.status.success());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "changed\n");
}

#[tokio::test]
async fn the_command_holds_no_root_power_over_the_host() {
    let ws = workspace();
    // No capability at all, whoever the host is.
    let out = sh(
        ws.path(),
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
    )
    .await;
    let caps = out.stdout.text();
    assert_eq!(caps.lines().count(), 5, "{caps}");
    for l in caps.lines() {
        assert!(l.ends_with("0000000000000000"), "{l}");
    }

    // Root-only files of the host are not readable (the host has them root-only).
    for f in ["/etc/shadow", "/etc/gshadow"] {
        let Ok(meta) = std::fs::metadata(f) else {
            continue;
        };
        assert_eq!(meta.mode() & 0o004, 0, "{f} is world-readable on this host");
        let out = sh(ws.path(), &format!("cat {f}")).await;
        assert!(
            !out.status.success(),
            "{f} was readable: is_root={}",
            is_root()
        );
        assert!(out.stdout.bytes.is_empty());
    }

    // Global sysctls are read-only (`: >>` opens for writing and writes nothing).
    let out = sh(ws.path(), ": >> /proc/sys/kernel/core_pattern").await;
    assert!(!out.status.success(), "core_pattern opened for writing");

    // No setuid or setgid file can be made in the workspace, by chmod or by creation.
    std::fs::write(ws.path().join("tool"), "#!/bin/sh\n").unwrap();
    let out = sh(ws.path(), "chmod 4755 tool; chmod 2755 tool").await;
    assert!(!out.status.success());
    let mode = std::fs::metadata(ws.path().join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0, "setuid/setgid bit set: {mode:o}");
    let out = run(SandboxOpts::new(
        ws.path(),
        [
            PERL,
            "-e",
            "use Fcntl; sysopen(my $f, 'made', O_CREAT|O_WRONLY, 04755) or exit 1; exit 0",
        ],
    ))
    .await;
    assert_eq!(out.status, Status::Exited { code: 1 });
    if let Ok(m) = std::fs::metadata(ws.path().join("made")) {
        assert_eq!(m.permissions().mode() & 0o6000, 0);
    }
}

#[tokio::test]
async fn a_program_outside_the_grants_runs_but_its_directory_stays_hidden() {
    let ws = workspace();
    let elsewhere = workspace();
    let dir = canon(elsewhere.path());
    std::fs::write(dir.join("secret"), "sibling secret").unwrap();
    let prog = dir.join("tool");
    std::fs::write(
        &prog,
        format!(
            "#!/bin/sh\necho ran\ncat '{}'\n",
            dir.join("secret").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(SandboxOpts::new(ws.path(), [prog.as_os_str()])).await;
    assert_eq!(out.stdout.text(), "ran\n", "{}", out.stderr.text());
    assert!(!out.status.success());
}

#[tokio::test]
async fn the_process_cap_counts_this_sandbox_alone() {
    // Threads of this test process count towards the caller's own processes on the host;
    // inside the sandbox's user namespace only the sandbox's processes count, so the cap
    // is reached by the command's forks, not before the first one.
    let ws = workspace();
    let script = r#"my $n = 0; my @kids;
for (1..40) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 30; exit 0 } push @kids, $p; $n++ }
kill 'KILL', @kids; waitpid($_, 0) for @kids; print "$n\n"; exit 0;"#;
    let mut o = SandboxOpts::new(ws.path(), [PERL, "-e", script]);
    o.limits.max_processes = Some(12);
    let out = run(o).await;
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        out.stderr.text()
    );
    let n: u32 = out.stdout.text().trim().parse().unwrap();
    // The cap counts bwrap's init, the waiter and perl itself.
    assert!(
        (5..12).contains(&n),
        "forked {n} children under a cap of 12"
    );
}

#[tokio::test]
async fn nested_and_repeated_paths_do_what_was_meant() {
    // A project directory granted read-only, the workspace inside it, a vendored tree
    // inside the workspace granted read-only, and a cache named both read-only and
    // writable.
    let outer = workspace();
    let root = canon(outer.path());
    let ws = root.join("proj");
    let vendor = ws.join("vendor");
    let cache = root.join("cache");
    for d in [&vendor, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    let script = "echo a > ../outside; echo b > inside; echo c > vendor/planted; \
                  echo d > ../cache/entry; cat ../cache/entry";
    let mut o = SandboxOpts::new(&ws, ["sh", "-c", script]);
    o.read_only_paths = vec![root.clone(), vendor.clone(), cache.clone()];
    o.writable_paths = vec![cache.clone()];
    let out = run(o).await;
    assert_eq!(out.stdout.text(), "d\n", "{}", out.stderr.text());
    assert!(
        !root.join("outside").exists(),
        "the read-only parent was written"
    );
    assert!(
        ws.join("inside").exists(),
        "the workspace inside it is not writable"
    );
    assert!(
        !vendor.join("planted").exists(),
        "the read-only tree inside was written"
    );
    assert_eq!(std::fs::read_to_string(cache.join("entry")).unwrap(), "d\n");
}
