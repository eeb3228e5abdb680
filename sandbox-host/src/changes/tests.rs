//! The change set on a copy layer (the fallback where overlay cannot be mounted), edited
//! directly as a command would, and the escapes a confined command cannot make (device
//! nodes, set-id bits, hard links out), planted here by hand. The overlay layer is
//! exercised end to end by the conformance suite (`changes::*`).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path().canonicalize().unwrap();
    for (f, c) in [
        ("keep", "k"),
        ("mod", "old"),
        ("del", "d"),
        ("chm", "c"),
        ("gone/a", "a"),
        ("gone/sub/b", "b"),
        ("src/mv", "m"),
        ("dst/.k", ""),
    ] {
        let path = p.join(f);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, c).unwrap();
    }
    settle();
    (ws, p)
}

fn copy_set(ws: &Path, edit: impl FnOnce(&Path)) -> ChangeSet {
    let layer = Layer::prepare(
        ws,
        LayerMechanism::Copy,
        &crate::fs::tree::Budget::default(),
    )
    .unwrap();
    assert_eq!(layer.mechanism(), LayerMechanism::Copy);
    edit(layer.source());
    let changes = scan::scan(&layer).unwrap();
    ChangeSet::new(Box::new(Pending::new(layer)), changes, layer::read_under)
}

fn kinds(set: &ChangeSet) -> Vec<(String, ChangeKind)> {
    set.changes()
        .iter()
        .map(|c| (c.path.display().to_string(), c.kind.clone()))
        .collect()
}

/// A listing of a tree: path, kind, mode, contents or target.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(d: &Path, rel: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = fs::read_dir(d).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let r = rel.join(e.file_name());
            let m = fs::symlink_metadata(e.path()).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                out.push(format!("{} dir {mode:o}", r.display()));
                walk(&e.path(), &r, out);
            } else if m.file_type().is_symlink() {
                out.push(format!(
                    "{} -> {:?}",
                    r.display(),
                    fs::read_link(e.path()).unwrap()
                ));
            } else {
                let c = fs::read(e.path()).unwrap_or_default();
                out.push(format!("{} {mode:o} {:?}", r.display(), c));
            }
        }
    }
    walk(root, Path::new(""), &mut out);
    out
}

fn edits(c: &Path) {
    fs::write(c.join("mod"), "new!").unwrap();
    fs::write(c.join("add"), "added").unwrap();
    fs::remove_file(c.join("del")).unwrap();
    fs::set_permissions(c.join("chm"), fs::Permissions::from_mode(0o600)).unwrap();
    symlink("keep", c.join("link")).unwrap();
    fs::rename(c.join("src/mv"), c.join("dst/mv")).unwrap();
    fs::remove_dir_all(c.join("gone")).unwrap();
    fs::create_dir(c.join("nd")).unwrap();
    fs::write(c.join("nd/x"), "x").unwrap();
    fs::set_permissions(c.join("nd"), fs::Permissions::from_mode(0o750)).unwrap();
}

#[test]
fn a_copy_layer_lists_exactly_the_edits() {
    let (_t, ws) = workspace();
    let set = copy_set(&ws, edits);
    let got = kinds(&set);
    let want = vec![
        ("add".into(), ChangeKind::Added),
        ("chm".into(), ChangeKind::ModeChanged),
        ("del".into(), ChangeKind::Deleted { dir: false }),
        ("dst/mv".into(), ChangeKind::Added),
        ("gone".into(), ChangeKind::Deleted { dir: true }),
        ("gone/a".into(), ChangeKind::Deleted { dir: false }),
        ("gone/sub".into(), ChangeKind::Deleted { dir: true }),
        ("gone/sub/b".into(), ChangeKind::Deleted { dir: false }),
        (
            "link".into(),
            ChangeKind::Symlink {
                target: "keep".into(),
            },
        ),
        ("mod".into(), ChangeKind::Modified),
        ("nd".into(), ChangeKind::DirAdded),
        ("nd/x".into(), ChangeKind::Added),
        ("src/mv".into(), ChangeKind::Deleted { dir: false }),
    ];
    assert_eq!(got, want);
    let chm = &set.changes()[1];
    assert_eq!((chm.old_mode, chm.mode), (Some(0o644), Some(0o600)));
    // Serialises for `--json`, with no internal state.
    let json = serde_json::to_value(&set).unwrap();
    assert_eq!(json["mechanism"], "copy");
    assert_eq!(json["changes"][0]["kind"], "added");
    assert!(json["changes"][0].get("real").is_none());
}

#[test]
fn apply_makes_the_workspace_the_layer_and_drops_it() {
    let (_t, ws) = workspace();
    let set = copy_set(&ws, edits);
    let want = tree(&set.layer_dir().unwrap().join("copy"));
    let dir = set.layer_dir().unwrap();
    let report = set.apply(false).unwrap();
    assert_eq!(tree(&ws), want);
    assert_eq!((report.deleted, report.forced.len()), (6, 0));
    assert!(!dir.exists(), "the layer is still on disk");
    assert!(matches!(set.apply(false), Err(ApplyError::Gone)));
}

#[test]
fn dropping_or_discarding_removes_the_layer_and_writes_nothing() {
    let (_t, ws) = workspace();
    let before = tree(&ws);
    let set = copy_set(&ws, |c| {
        fs::write(c.join("mod"), "x").unwrap();
        // A directory the command made unwritable must still be removed.
        fs::create_dir(c.join("ro")).unwrap();
        fs::write(c.join("ro/f"), "f").unwrap();
        fs::set_permissions(c.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
    });
    let dir = set.layer_dir().unwrap();
    let clone = set.clone();
    drop(set);
    assert!(dir.exists(), "a clone still holds it");
    drop(clone);
    assert!(
        !dir.exists(),
        "dropping the last clone left {}",
        dir.display()
    );
    assert_eq!(tree(&ws), before);
    let set = copy_set(&ws, |c| fs::write(c.join("mod"), "x").unwrap());
    let dir = set.layer_dir().unwrap();
    set.discard();
    assert!(!dir.exists());
    assert_eq!(tree(&ws), before);
}

fn refused(set: &ChangeSet) -> Vec<Escape> {
    match set.apply(true) {
        Err(ApplyError::Refused { refusals }) => refusals.into_iter().map(|r| r.escape).collect(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn escapes_are_refused_before_anything_is_written() {
    let (_t, ws) = workspace();
    let before = tree(&ws);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    fs::write(&secret, "s").unwrap();
    let set = copy_set(&ws, |c| {
        fs::write(c.join("mod"), "would be written").unwrap();
        symlink("/etc/shadow", c.join("abs")).unwrap();
        symlink("../../etc", c.join("gone/up")).unwrap();
        fs::write(c.join("suid"), "x").unwrap();
        fs::set_permissions(c.join("suid"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(c.join("sgid"), "x").unwrap();
        fs::set_permissions(c.join("sgid"), fs::Permissions::from_mode(0o2755)).unwrap();
        // A hard link to a file outside the layer (same filesystem: the temp dir).
        if fs::hard_link(&secret, c.join("hard")).is_err() {
            eprintln!("hard link across filesystems not possible here");
        }
        let fifo =
            std::ffi::CString::new(c.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a C string we own.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        if nix::unistd::geteuid().is_root() {
            let dev = std::ffi::CString::new(c.join("null").into_os_string().into_encoded_bytes())
                .unwrap();
            // SAFETY: a C string we own; a character device 1:3 (/dev/null's numbers).
            let r =
                unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
            assert_eq!(r, 0);
        }
    });
    let got = refused(&set);
    let has = |f: &dyn Fn(&Escape) -> bool| got.iter().any(f);
    assert!(
        has(
            &|e| matches!(e, Escape::SymlinkOutside { target, .. } if target == Path::new("/etc/shadow"))
        ),
        "{got:?}"
    );
    assert!(
        has(
            &|e| matches!(e, Escape::SymlinkOutside { target, .. } if target == Path::new("../../etc"))
        ),
        "{got:?}"
    );
    assert!(has(&|e| *e == Escape::SetId { mode: 0o4755 }), "{got:?}");
    assert!(has(&|e| *e == Escape::SetId { mode: 0o2755 }), "{got:?}");
    assert!(has(&|e| *e == Escape::Fifo), "{got:?}");
    if set.changes().iter().any(|c| c.path == Path::new("hard")) {
        assert!(has(&|e| *e == Escape::HardLinkOutside), "{got:?}");
    }
    if nix::unistd::geteuid().is_root() {
        assert!(has(&|e| *e == Escape::Device), "{got:?}");
    }
    assert_eq!(tree(&ws), before, "a refused apply wrote something");
    assert_eq!(fs::read_to_string(&secret).unwrap(), "s");
    assert!(set.is_pending(), "a refused set must stay for a discard");
}

#[test]
fn a_path_through_a_symlink_in_the_real_workspace_is_refused() {
    let (_t, ws) = workspace();
    let outside = tempfile::tempdir().unwrap();
    let set = copy_set(&ws, |c| fs::write(c.join("dst/new"), "x").unwrap());
    fs::remove_dir_all(ws.join("dst")).unwrap();
    symlink(outside.path(), ws.join("dst")).unwrap();
    let got = refused(&set);
    assert_eq!(
        got,
        vec![Escape::ThroughSymlink { at: "dst".into() }],
        "{got:?}"
    );
    assert!(!outside.path().join("new").exists());
}

#[test]
fn a_file_changed_after_the_start_is_a_conflict_unless_forced() {
    let (_t, ws) = workspace();
    let set = copy_set(&ws, |c| {
        fs::write(c.join("mod"), "cmd").unwrap();
        fs::write(c.join("keep"), "cmd").unwrap();
    });
    fs::write(ws.join("mod"), "host").unwrap();
    match set.apply(false) {
        Err(ApplyError::Conflict { paths }) => assert_eq!(paths, vec![PathBuf::from("mod")]),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read_to_string(ws.join("mod")).unwrap(), "host");
    assert_eq!(fs::read_to_string(ws.join("keep")).unwrap(), "k");
    let r = set.apply(true).unwrap();
    assert_eq!(r.forced, vec![PathBuf::from("mod")]);
    assert_eq!(fs::read_to_string(ws.join("mod")).unwrap(), "cmd");
    assert_eq!(fs::read_to_string(ws.join("keep")).unwrap(), "cmd");
}

/// `n` steps of `step` joined by `/`.
fn steps(step: &str, n: usize) -> String {
    vec![step; n].join("/")
}

/// The paths refused, and for each where it leads.
fn refused_links(set: &ChangeSet) -> Vec<(String, Option<PathBuf>)> {
    match set.apply(true) {
        Err(ApplyError::Refused { refusals }) => refusals
            .into_iter()
            .map(|r| match r.escape {
                Escape::SymlinkOutside { resolved, .. } => (r.path.display().to_string(), resolved),
                other => panic!("{}: refused for {other}", r.path.display()),
            })
            .collect(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn links_are_resolved_as_the_kernel_will_after_the_apply() {
    let (_t, ws) = workspace();
    // Enough `..` to reach `/` from the workspace (more stay at `/`).
    let n = ws.components().count() + 1;
    let outside = ws.parent().unwrap().to_path_buf();
    // The real workspace's own links count as well.
    symlink(".", ws.join("rup")).unwrap();
    settle();
    let before = tree(&ws);
    let set = copy_set(&ws, |c| {
        // A chain: `up` is the workspace, so `up/up/...` never goes deeper.
        symlink(".", c.join("up")).unwrap();
        let esc = format!("{}/{}/etc", steps("up", n), steps("..", n));
        symlink(&esc, c.join("chain")).unwrap();
        // Through a link the real workspace already has.
        let esc = format!("{}/{}/root", steps("rup", n), steps("..", n));
        symlink(&esc, c.join("real-chain")).unwrap();
        // `..` after a link: `a/self` is the workspace, its `..` the workspace's parent.
        fs::create_dir(c.join("a")).unwrap();
        symlink("..", c.join("a/self")).unwrap();
        symlink("a/self/../x", c.join("dotdot")).unwrap();
        // A chain of links that are each inside, used by one that is not.
        fs::create_dir_all(c.join("b/c")).unwrap();
        symlink("c2", c.join("b/c/c1")).unwrap();
        symlink("l", c.join("b/c/c2")).unwrap();
        symlink("../..", c.join("b/c/l")).unwrap();
        symlink("b/c/c1/../../../y", c.join("long-chain")).unwrap();
        // A directory replaced by a link: `gone` is the workspace after the apply.
        fs::remove_dir_all(c.join("gone")).unwrap();
        symlink(".", c.join("gone")).unwrap();
        symlink("gone/../z", c.join("replaced")).unwrap();
        // Links that never end.
        symlink("loop2", c.join("loop1")).unwrap();
        symlink("loop1", c.join("loop2")).unwrap();
    });
    let mut got = refused_links(&set);
    got.sort();
    let want = vec![
        ("chain".to_string(), Some(PathBuf::from("/etc"))),
        ("dotdot".into(), Some(outside.join("x"))),
        (
            "long-chain".into(),
            Some(outside.parent().unwrap().join("y")),
        ),
        ("loop1".into(), None),
        ("loop2".into(), None),
        ("real-chain".into(), Some(PathBuf::from("/root"))),
        ("replaced".into(), Some(outside.join("z"))),
    ];
    assert_eq!(got, want);
    assert_eq!(tree(&ws), before, "a refused apply wrote something");
}

#[test]
fn links_inside_or_into_the_system_are_applied() {
    let (_t, ws) = workspace();
    let elsewhere = tempfile::tempdir().unwrap();
    // The host's own link out, which the command replaces by a directory.
    symlink(elsewhere.path(), ws.join("l")).unwrap();
    settle();
    let set = copy_set(&ws, |c| {
        // A virtual environment: links to the host's interpreter and within itself.
        fs::create_dir_all(c.join(".venv/bin")).unwrap();
        fs::create_dir_all(c.join(".venv/lib")).unwrap();
        symlink("/usr/bin/python3", c.join(".venv/bin/python")).unwrap();
        symlink("python", c.join(".venv/bin/python3")).unwrap();
        symlink("lib", c.join(".venv/lib64")).unwrap();
        // `/bin` is `/usr/bin` on a merged-`/usr` host, a directory of its own on others.
        symlink("/bin/sh", c.join(".venv/bin/sh")).unwrap();
        // A link replaced by a directory: `..` in it is the workspace, not `elsewhere`.
        fs::remove_file(c.join("l")).unwrap();
        fs::create_dir_all(c.join("l/x")).unwrap();
        symlink("../../keep", c.join("l/x/e")).unwrap();
        // Links through links that stay inside.
        symlink(".", c.join("up")).unwrap();
        symlink("up/up/keep", c.join("via")).unwrap();
    });
    let want = tree(&set.layer_dir().unwrap().join("copy"));
    set.apply(false).unwrap();
    assert_eq!(tree(&ws), want);
    assert!(
        fs::read_dir(elsewhere.path()).unwrap().next().is_none(),
        "the apply wrote through the host's old link"
    );
}

#[test]
fn a_whiteout_in_a_copy_layer_is_refused() {
    let (_t, ws) = workspace();
    let before = tree(&ws);
    let set = copy_set(&ws, |c| {
        let w =
            std::ffi::CString::new(c.join("keep").into_os_string().into_encoded_bytes()).unwrap();
        fs::remove_file(c.join("keep")).unwrap();
        // SAFETY: a C string we own; a character device 0:0 (an overlay whiteout), which
        // Linux lets anyone make.
        let r = unsafe { libc::mknod(w.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(0, 0)) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    });
    assert_eq!(refused(&set), vec![Escape::Device]);
    assert_eq!(tree(&ws), before, "a refused apply wrote something");
}

#[test]
fn a_link_the_workspace_has_is_judged_as_the_changes_leave_it() {
    let (_t, ws) = workspace();
    let outside = ws.parent().unwrap().to_path_buf();
    // Inside while `src` is a directory; out once `src` is the workspace itself.
    symlink("src/../keep", ws.join("e")).unwrap();
    // Out already before the run: the host's own, not the command's doing.
    symlink("/etc/hostname", ws.join("own")).unwrap();
    settle();
    let before = tree(&ws);
    let set = copy_set(&ws, |c| {
        fs::remove_dir_all(c.join("src")).unwrap();
        symlink(".", c.join("src")).unwrap();
    });
    let got = match set.apply(true) {
        Err(ApplyError::Refused { refusals }) => refusals,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        got,
        vec![Refusal {
            path: "e".into(),
            escape: Escape::Redirected {
                target: "src/../keep".into(),
                resolved: Some(outside.join("keep")),
            },
        }]
    );
    assert_eq!(tree(&ws), before, "a refused apply wrote something");
}

/// Makes `dir` (a directory of the real workspace) refuse what an apply puts in it:
/// immutable (`chattr +i`, which stops root too) as root, mode 0555 otherwise. Undone on
/// drop.
struct Obstacle(PathBuf);

/// `FS_IMMUTABLE_FL` of `linux/fs.h` (the libc crate does not name it).
const FS_IMMUTABLE_FL: libc::c_int = 0x10;

fn immutable(dir: &Path, on: bool) {
    use std::os::fd::AsRawFd;
    let d = fs::File::open(dir).unwrap();
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS/SETFLAGS on a live descriptor, with an int as the kernel reads.
    unsafe {
        assert_eq!(
            libc::ioctl(d.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags),
            0
        );
        if on {
            flags |= FS_IMMUTABLE_FL;
        } else {
            flags &= !FS_IMMUTABLE_FL;
        }
        let r = libc::ioctl(d.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags);
        assert_eq!(r, 0, "chattr +i: {}", std::io::Error::last_os_error());
    }
}

impl Obstacle {
    fn new(dir: &Path) -> Self {
        if nix::unistd::geteuid().is_root() {
            immutable(dir, true);
        } else {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
        }
        Self(dir.to_path_buf())
    }
}

impl Drop for Obstacle {
    fn drop(&mut self) {
        if nix::unistd::geteuid().is_root() {
            immutable(&self.0, false);
        } else {
            let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o755));
        }
    }
}

/// Every kind of step, the last (`zz/new`, in path order) one the obstacle refuses.
fn all_kinds(c: &Path) {
    edits(c);
    // A new file nobody may read, which the host must still stage.
    fs::write(c.join("nd/locked"), "secret").unwrap();
    fs::set_permissions(c.join("nd/locked"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::write(c.join("zz/new"), "z").unwrap();
}

fn with_zz() -> (tempfile::TempDir, PathBuf) {
    let (t, ws) = workspace();
    fs::create_dir(ws.join("zz")).unwrap();
    settle();
    (t, ws)
}

#[test]
fn a_write_that_fails_half_way_is_undone() {
    let (_t, ws) = with_zz();
    let set = copy_set(&ws, all_kinds);
    let want = tree(&set.layer_dir().unwrap().join("copy"));
    let obstacle = Obstacle::new(&ws.join("zz"));
    let before = tree(&ws);
    match set.apply(false) {
        Err(ApplyError::Io { path, .. }) => assert_eq!(path, Path::new("zz/new")),
        other => panic!("the obstacle did not stop the apply: {other:?}"),
    }
    assert_eq!(tree(&ws), before, "a failed apply left part of itself");
    assert!(set.is_pending(), "a failed apply dropped the change set");
    drop(obstacle);
    set.apply(false).unwrap();
    assert_eq!(tree(&ws), want);
    let locked = fs::symlink_metadata(ws.join("nd/locked")).unwrap();
    assert_eq!(locked.permissions().mode() & 0o7777, 0);
}

#[test]
fn an_apply_killed_half_way_is_undone_by_the_next_start() {
    let (_t, ws) = with_zz();
    let set = copy_set(&ws, all_kinds);
    let obstacle = Obstacle::new(&ws.join("zz"));
    let before = tree(&ws);
    kill_half_way(&set, &ws);
    drop(obstacle);
    assert_ne!(tree(&ws), before, "nothing was half done");
    // The next start over this workspace (a layer for a run) undoes it first.
    let next = Layer::prepare(
        &ws,
        LayerMechanism::Copy,
        &crate::process::tree::Budget::default(),
    )
    .unwrap();
    assert_eq!(
        tree(&ws),
        before,
        "the next start did not undo the killed apply"
    );
    assert_eq!(
        tree(next.source()),
        before,
        "the next run saw the killed apply"
    );
}

#[test]
fn a_journal_planted_by_the_command_is_refused() {
    let (_t, ws) = workspace();
    let before = tree(&ws);
    let set = copy_set(&ws, |c| {
        let j = c.join(".sandbox-apply-1-1-1");
        fs::create_dir(&j).unwrap();
        fs::set_permissions(&j, fs::Permissions::from_mode(0o700)).unwrap();
        // Would set a set-id bit on `keep` at the next start.
        fs::write(j.join("journal"), "mode 6b656570 2541\n").unwrap();
        fs::set_permissions(j.join("journal"), fs::Permissions::from_mode(0o600)).unwrap();
    });
    let got = refused(&set);
    assert_eq!(got, vec![Escape::Reserved, Escape::Reserved], "{got:?}");
    assert_eq!(tree(&ws), before, "a refused apply wrote something");
}

/// Mounts a tmpfs on `dir` for the life of the value (root only).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: &Path) -> Self {
        nix::mount::mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("mode=0755"),
        )
        .unwrap();
        Self(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_filesystem_mounted_in_the_workspace_is_written_and_undone_with_the_rest() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting a filesystem in the workspace needs root");
        return;
    }
    let (_t, ws) = with_zz();
    fs::create_dir(ws.join("mnt")).unwrap();
    let _mnt = Tmpfs::new(&ws.join("mnt"));
    for (f, c) in [("mnt/m", "old"), ("mnt/d", "gone"), ("mnt/sub/s", "s")] {
        let p = ws.join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, c).unwrap();
    }
    settle();
    let edit = |c: &Path| {
        all_kinds(c);
        fs::write(c.join("mnt/m"), "new").unwrap();
        fs::remove_file(c.join("mnt/d")).unwrap();
        fs::create_dir(c.join("mnt/sub/n")).unwrap();
        fs::write(c.join("mnt/sub/n/f"), "f").unwrap();
        symlink("../m", c.join("mnt/sub/l")).unwrap();
    };
    // Stopped at its last path, everything is undone, on both filesystems.
    let set = copy_set(&ws, edit);
    let want = tree(&set.layer_dir().unwrap().join("copy"));
    let obstacle = Obstacle::new(&ws.join("zz"));
    let before = tree(&ws);
    assert!(matches!(set.apply(false), Err(ApplyError::Io { .. })));
    assert_eq!(tree(&ws), before, "a failed apply left part of itself");
    // Killed half way, it is undone by the next start, on both filesystems.
    let mnt = tree(&ws.join("mnt"));
    kill_half_way(&set, &ws);
    assert_ne!(tree(&ws.join("mnt")), mnt, "nothing was half done in mnt");
    drop(obstacle);
    journal::recover(&ws).unwrap();
    assert_eq!(
        tree(&ws),
        before,
        "the next start did not undo the killed apply"
    );
    // Then it goes through, and no staging directory stays on either. (What the recovery
    // put back moved, by file times: a conflict for a set that outlived its process, which
    // a killed host's never does; forced here.)
    set.apply(true).unwrap();
    assert_eq!(tree(&ws), want);
}

/// The apply's own steps on `set`, stopped where an obstacle stops them and then left as a
/// killed host leaves them: no undo, the journal on disk, its lock released.
fn kill_half_way(set: &ChangeSet, ws: &Path) {
    // A copy layer's source is its `copy` directory (`Layer::source`).
    let source = set.layer_dir().unwrap().join("copy");
    let real = crate::fs::fsx::open_root(ws).unwrap();
    let src = crate::fs::fsx::open_root(&source).unwrap();
    let real = std::os::fd::AsFd::as_fd(&real);
    let mut j = journal::Journal::begin(real).unwrap();
    let staged = apply::stage(real, &src, &mut j, set.changes()).unwrap();
    let mut report = ApplyReport::default();
    let r = apply::write(real, &mut j, set.changes(), &staged, &mut report);
    assert!(r.is_err(), "the obstacle did not stop the steps");
    assert!(report.deleted > 0 && report.written > 0, "{report:?}");
}

#[test]
fn a_mode_change_to_one_name_of_a_hard_linked_file_leaves_the_others() {
    // Found by `props`: in the layer (a copy, or overlay's copy-up) `a` and `b` are two
    // files, so `chmod a` leaves `b` as it was; the apply must too.
    let (_t, ws) = workspace();
    fs::hard_link(ws.join("keep"), ws.join("twin")).unwrap();
    fs::set_permissions(ws.join("keep"), fs::Permissions::from_mode(0o600)).unwrap();
    settle();
    let set = copy_set(&ws, |c| {
        fs::set_permissions(c.join("keep"), fs::Permissions::from_mode(0o755)).unwrap();
    });
    assert_eq!(
        kinds(&set),
        vec![("keep".to_string(), ChangeKind::ModeChanged)]
    );
    let want = tree(&set.layer_dir().unwrap().join("copy"));
    let report = set.apply(false).unwrap();
    assert_eq!(report.modes, 1);
    assert_eq!(tree(&ws), want);
    let mode = |p: &str| {
        fs::symlink_metadata(ws.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!((mode("keep"), mode("twin")), (0o755, 0o600));
}
