//! A root host's two paths (see `sandbox_host::handover`): the command as an unprivileged id with
//! its trees handed over by idmapped mounts, and, where that cannot be had, uid 0 without
//! capabilities under the surveyed read layer. Both keep root-only files closed; each test
//! checks the effect from the host and says which path ran. As another uid these tests
//! have nothing to check: a host that is not root has no root to drop.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::*;
use sandbox_core::record::{Dropper, Identity, Landlock};
use sandbox_core::{Enforced, Lane, SandboxOutcome};
use sandbox_host::idmap::SPARE_COMMAND_ID;

/// Why the command kept uid 0, where the record says it did.
fn kept_root(o: &SandboxOutcome) -> Option<&str> {
    o.policy.enforced.iter().find_map(|e| match e {
        Enforced::Identity(Identity::KeepsRoot {
            why,
            by: Dropper::Command,
        }) => Some(why.as_str()),
        _ => None,
    })
}

/// A directory (mode 0755) with a world-readable and a root-only file.
fn data_dir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    sandbox_conformance::host::public_and_private(0o600).unwrap()
}

const PROBE: &str = "id -u; id -g; id -G; cat /etc/shadow >/dev/null 2>&1; echo shadow=$?; \
                     cat /proc/keys >/dev/null 2>&1; echo keys=$?; \
                     cat \"$1\" 2>/dev/null; echo public=$?; cat \"$2\" 2>/dev/null; \
                     echo private=$?; echo made > made; echo write=$?";

async fn probe(
    ws: &Path,
    data: &Path,
    public: &Path,
    private: &Path,
    lane: Lane,
) -> SandboxOutcome {
    let mut o = sandbox_conformance::host::read_both(ws, PROBE, data, public, private);
    o.lane = lane;
    o.timeout = Some(std::time::Duration::from_secs(120));
    run(o).await
}

#[tokio::test(flavor = "multi_thread")]
async fn as_root_the_command_runs_as_the_spare_id_and_the_kernel_refuses_root_only_files() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let spare = SPARE_COMMAND_ID.to_string();
    for lane in [Lane::Fast, Lane::Strict] {
        let ws = tempdir();
        let (data, public, private) = data_dir();
        let o = probe(ws.path(), data.path(), &public, &private, lane).await;
        assert_ok(&o);
        let s = out(&o);
        let lines: Vec<&str> = s.lines().collect();
        // uid, gid, and no supplementary group but its own gid.
        assert_eq!(&lines[..3], [&spare, &spare, &spare], "{lane:?}: {s}");
        for want in [
            "shadow=1",
            "keys=1",
            "PUBLIC",
            "public=0",
            "private=1",
            "write=0",
        ] {
            assert!(lines.contains(&want), "{lane:?} {want}: {s}");
        }
        assert!(!s.contains("PRIVATE"), "{lane:?}: {s}");
        assert!(
            o.policy.enforced.contains(
                &Identity::HandedOver {
                    id: SPARE_COMMAND_ID,
                    by: Dropper::Command
                }
                .into()
            ),
            "{:?}",
            o.policy.enforced
        );
        // What it made is root's on disk, as before.
        let m = fs::metadata(ws.path().join("made")).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0));
    }
}

/// No cache stands between a `chmod` and the next run: the kernel checks the mode at open.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_file_made_root_only_between_two_runs_is_refused_at_once() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let ws = tempdir();
    let (data, public, private) = data_dir();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o644)).unwrap();
    let o = probe(ws.path(), data.path(), &public, &private, Lane::Fast).await;
    assert!(out(&o).contains("PRIVATE"), "{}", out(&o));
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).unwrap();
    let o = probe(ws.path(), data.path(), &public, &private, Lane::Fast).await;
    assert_ok(&o);
    assert!(!out(&o).contains("PRIVATE"), "{}", out(&o));
    assert!(out(&o).contains("private=1"), "{}", out(&o));
}

/// The fallback, on a filesystem without idmapped mounts: uid 0 without capabilities and
/// the surveyed read layer, which keeps the same files closed.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_workspace_that_cannot_be_idmapped_keeps_uid_0_and_the_survey() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let holder = tempdir();
    let at = holder.path().join("ramfs");
    fs::create_dir(&at).unwrap();
    let _m = sandbox_conformance::host::Ramfs::mount(&at).unwrap();
    // The premise, checked: this filesystem refuses an idmapped mount.
    let ns = sandbox_host::idmap::shared_user_namespace(&[(
        (0, 0),
        (SPARE_COMMAND_ID, SPARE_COMMAND_ID),
    )])
    .unwrap();
    let e = sandbox_host::idmap::idmapped_tree(&at, std::os::fd::AsFd::as_fd(&*ns), 0, true)
        .expect_err("ramfs has no idmapped mounts");
    eprintln!("ramfs: {e}");
    let (data, public, private) = data_dir();
    for lane in [Lane::Fast, Lane::Strict] {
        let o = probe(&at, data.path(), &public, &private, lane).await;
        assert_ok(&o);
        let s = out(&o);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "0", "{lane:?}: {s}");
        for want in ["shadow=1", "keys=1", "PUBLIC", "private=1", "write=0"] {
            assert!(lines.contains(&want), "{lane:?} {want}: {s}");
        }
        assert!(!s.contains("PRIVATE"), "{lane:?}: {s}");
        let e = &o.policy.enforced;
        assert!(
            kept_root(&o).is_some_and(|why| why.contains("cannot be idmapped")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| matches!(e, Enforced::Landlock(Landlock::RootReadLayer { .. }))),
            "{e:?}"
        );
        assert!(at.join("made").exists());
    }
}

/// A workspace an unprivileged id could not reach (below a root-only directory that is
/// not handed over) keeps uid 0, which reached it as that directory's owner.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_workspace_below_a_root_only_directory_keeps_uid_0() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let holder = tempdir();
    fs::set_permissions(holder.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let ws = holder.path().join("ws");
    fs::create_dir(&ws).unwrap();
    let (data, public, private) = data_dir();
    let o = probe(&ws, data.path(), &public, &private, Lane::Fast).await;
    assert_ok(&o);
    let s = out(&o);
    assert_eq!(s.lines().next(), Some("0"), "{s}");
    assert!(s.contains("private=1") && s.contains("write=0"), "{s}");
    assert!(
        kept_root(&o).is_some_and(|why| why.contains("out of an unprivileged user's reach")),
        "{:?}",
        o.policy.enforced
    );
}

/// A run with a layer hands over too (no survey): the overlay is mounted on idmapped
/// layers, so the command as the spare id writes root's files in the layer, root-only
/// files stay closed, the real workspace is untouched until the host applies, and what
/// it applied is root's on disk.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_layered_run_hands_over_and_its_changes_are_roots_once_applied() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let spare = SPARE_COMMAND_ID.to_string();
    for lane in [Lane::Fast, Lane::Strict] {
        let ws = tempdir();
        let f = ws.path().join("f");
        fs::write(&f, "orig\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (data, public, private) = data_dir();
        let script = format!("{PROBE}; echo edited > f; echo edit=$?");
        let mut o = sandbox_conformance::host::read_both(
            ws.path(),
            &script,
            data.path(),
            &public,
            &private,
        );
        o.lane = lane;
        o.changes = sandbox_core::Changes::Review;
        o.timeout = Some(std::time::Duration::from_secs(120));
        let o = run(o).await;
        assert_ok(&o);
        let s = out(&o);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(&lines[..3], [&spare, &spare, &spare], "{lane:?}: {s}");
        for want in [
            "shadow=1",
            "keys=1",
            "public=0",
            "private=1",
            "write=0",
            "edit=0",
        ] {
            assert!(lines.contains(&want), "{lane:?} {want}: {s}");
        }
        assert!(!s.contains("PRIVATE"), "{lane:?}: {s}");
        assert!(kept_root(&o).is_none(), "{:?}", o.policy.enforced);
        assert!(
            !o.policy
                .enforced
                .iter()
                .any(|e| matches!(e, Enforced::Landlock(Landlock::RootReadLayer { .. }))),
            "no survey: {:?}",
            o.policy.enforced
        );
        // The real workspace, untouched until the host applies.
        assert!(!ws.path().join("made").exists(), "{lane:?}");
        assert_eq!(fs::read_to_string(&f).unwrap(), "orig\n");
        let set = o.changes.clone().expect("a change set");
        set.apply(false).unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "edited\n");
        for name in ["made", "f"] {
            let m = fs::metadata(ws.path().join(name)).unwrap();
            assert_eq!((m.uid(), m.gid()), (0, 0), "{lane:?} {name}");
        }
    }
}

/// A writable path holding the workspace would be attached from the host's mounts over
/// the layer: such a run keeps uid 0 (and the survey), and the layer holds.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_a_writable_path_holding_a_layered_workspace_keeps_uid_0() {
    if !is_root() {
        eprintln!("skipped: a host that is not root has no root to drop");
        return;
    }
    let holder = tempdir();
    let ws = holder.path().join("ws");
    fs::create_dir(&ws).unwrap();
    let mut o = opts(&ws, &["sh", "-c", "id -u; echo x > made"]);
    o.writable_paths = vec![holder.path().to_path_buf()];
    o.changes = sandbox_core::Changes::Discard;
    let o = run(o).await;
    assert_ok(&o);
    assert_eq!(out(&o).lines().next(), Some("0"), "{}", out(&o));
    assert!(
        kept_root(&o).is_some_and(|why| why.contains("holds the workspace")),
        "{:?}",
        o.policy.enforced
    );
    assert!(!ws.join("made").exists(), "the layer held");
}
