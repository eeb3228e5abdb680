//! A root host's two paths (see `sandbox_host::handover`): bwrap run as an unprivileged id
//! in a mount namespace holding the idmapped workspace, and, where that cannot be had,
//! bwrap as root with the root-only entries hidden. Both keep root-only files closed;
//! each test checks the effect from the host and says which path ran. As another uid
//! there is no root to drop, and these tests have nothing to check.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox_bwrap::{BwrapBackend, BwrapSandbox};
use sandbox_core::record::{Dropper, Identity};
use sandbox_core::{Enforced, SandboxExt, SandboxOutcome, Status};
use sandbox_host::idmap::SPARE_COMMAND_ID;

fn is_root() -> bool {
    // SAFETY: a plain system call without arguments.
    unsafe { libc::geteuid() == 0 }
}

/// A directory (mode 0755) with a world-readable file and one of `mode`.
fn data_dir(mode: u32) -> (tempfile::TempDir, PathBuf, PathBuf) {
    sandbox_conformance::host::public_and_private(mode).unwrap()
}

const PROBE: &str = "id -u; id -g; cat /etc/shadow >/dev/null 2>&1; echo shadow=$?; \
                     cat \"$1\"; echo public=$?; cat \"$2\" 2>/dev/null; echo private=$?; \
                     echo made > made; echo write=$?";

async fn probe(ws: &Path, data: &Path, public: &Path, private: &Path) -> SandboxOutcome {
    let mut o = sandbox_conformance::host::read_both(ws, PROBE, data, public, private);
    o.timeout = Some(Duration::from_secs(120));
    let out = BwrapSandbox::new(BwrapBackend::new())
        .execute(o)
        .await
        .unwrap();
    assert_eq!(
        out.status,
        Status::Exited { code: 0 },
        "{} {}",
        out.stdout.text(),
        out.stderr.text()
    );
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn as_root_bwrap_runs_as_the_spare_id_and_root_only_files_are_refused_at_once() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let spare = SPARE_COMMAND_ID.to_string();
    let ws = tempfile::tempdir().unwrap();
    // Readable on the first run; root-only before the second, which refuses it.
    let (data, public, private) = data_dir(0o644);
    let o = probe(ws.path(), data.path(), &public, &private).await;
    let s = o.stdout.text();
    assert!(s.contains("PRIVATE"), "{s}");
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).unwrap();
    let o = probe(ws.path(), data.path(), &public, &private).await;
    let s = o.stdout.text();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(&lines[..2], [&spare, &spare], "{s}");
    for want in ["shadow=1", "PUBLIC", "public=0", "private=1", "write=0"] {
        assert!(lines.contains(&want), "{want}: {s}");
    }
    assert!(!s.contains("PRIVATE"), "{s}");
    assert!(
        o.policy.enforced.contains(
            &Identity::HandedOver {
                id: SPARE_COMMAND_ID,
                by: Dropper::Bwrap
            }
            .into()
        ),
        "{:?}",
        o.policy.enforced
    );
    let m = fs::metadata(ws.path().join("made")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "what it made is root's on disk");
}

/// The fallback, on a filesystem without idmapped mounts: bwrap as root, the root-only
/// entries hidden, the same files closed.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_workspace_that_cannot_be_idmapped_keeps_bwrap_root_and_hides_root_only_files() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let holder = tempfile::tempdir().unwrap();
    let at = holder.path().join("ramfs");
    fs::create_dir(&at).unwrap();
    let _m = sandbox_conformance::host::Ramfs::mount(&at).unwrap();
    let (data, public, private) = data_dir(0o600);
    let o = probe(&at, data.path(), &public, &private).await;
    let s = o.stdout.text();
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], "0", "{s}");
    for want in ["shadow=1", "PUBLIC", "private=1", "write=0"] {
        assert!(lines.contains(&want), "{want}: {s}");
    }
    assert!(!s.contains("PRIVATE"), "{s}");
    let e = &o.policy.enforced;
    assert!(
        e.iter().any(|e| matches!(
            e,
            Enforced::Identity(Identity::KeepsRoot { why, by: Dropper::Bwrap })
                if why.contains("cannot be idmapped")
        )),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| matches!(
            e,
            Enforced::Identity(Identity::RootOnlyHidden { count }) if *count > 0
        )),
        "{e:?}"
    );
    assert!(at.join("made").exists());
}

/// A run with a layer hands over too (nothing hidden, no survey): the overlay is on
/// idmapped layers, so bwrap as the spare id writes root's files in the layer, the real
/// workspace is untouched until the host applies, and what it applied is root's on disk.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_layered_bwrap_run_hands_over_and_its_changes_are_roots_once_applied() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let spare = SPARE_COMMAND_ID.to_string();
    let ws = tempfile::tempdir().unwrap();
    let f = ws.path().join("f");
    fs::write(&f, "orig\n").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (data, public, private) = data_dir(0o600);
    let script = format!("{PROBE}; echo edited > f; echo edit=$?");
    let mut o =
        sandbox_conformance::host::read_both(ws.path(), &script, data.path(), &public, &private);
    o.timeout = Some(Duration::from_secs(120));
    o.changes = sandbox_core::Changes::Review;
    let out = BwrapSandbox::new(BwrapBackend::new())
        .execute(o)
        .await
        .unwrap();
    let s = out.stdout.text();
    assert_eq!(
        out.status,
        Status::Exited { code: 0 },
        "{s} {}",
        out.stderr.text()
    );
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(&lines[..2], [&spare, &spare], "{s}");
    for want in ["shadow=1", "public=0", "private=1", "write=0", "edit=0"] {
        assert!(lines.contains(&want), "{want}: {s}");
    }
    let e = &out.policy.enforced;
    assert!(
        e.contains(
            &Identity::HandedOver {
                id: SPARE_COMMAND_ID,
                by: Dropper::Bwrap
            }
            .into()
        ),
        "{e:?}"
    );
    assert!(
        !e.iter()
            .any(|e| matches!(e, Enforced::Identity(Identity::RootOnlyHidden { .. }))),
        "{e:?}"
    );
    assert!(!ws.path().join("made").exists());
    assert_eq!(fs::read_to_string(&f).unwrap(), "orig\n");
    out.changes
        .clone()
        .expect("a change set")
        .apply(false)
        .unwrap();
    assert_eq!(fs::read_to_string(&f).unwrap(), "edited\n");
    for name in ["made", "f"] {
        let m = fs::metadata(ws.path().join(name)).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0), "{name}");
    }
}
