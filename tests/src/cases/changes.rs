//! The copy-on-write layer and its change set: the real workspace untouched until the host
//! applies, the change set exact, apply faithful, escapes refused, conflicts caught.
//!
//! A conflict is judged by file times against a stamp taken when the layer is made, so
//! each case lets a clock tick pass between planting its workspace and running
//! ([`settle`]): otherwise a planted file could count as changed after the start.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::changes::{ApplyError, ChangeKind, Escape};
use sandbox_core::{ChangeSet, Changes, SandboxOutcome};

use super::CaseResult;
use crate::context::{describe, Context, Failure};

/// Let file times move past everything planted so far.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn plant(ws: &Path, rel: &str, content: &str) -> std::io::Result<()> {
    let p = ws.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(p, content)
}

/// The workspace as the probe's `tree` lists it, run on the host (unconfined).
fn host_tree(ctx: &Context, ws: &Path) -> Result<Vec<String>, Failure> {
    let out = ctx
        .host_probe_command()
        .arg("tree")
        .current_dir(ws)
        .output()?;
    if !out.status.success() {
        return Err(Failure::Broken(format!(
            "the probe's tree failed on the host: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Run the probe's `edit` with `ops` on a layer held for review; the outcome must succeed
/// and carry a change set.
async fn review(
    ctx: &Context,
    ws: &Path,
    ops: &[&str],
) -> Result<(SandboxOutcome, ChangeSet), Failure> {
    let mut args = vec!["edit"];
    args.extend_from_slice(ops);
    let mut opts = ctx.opts(ws, args);
    opts.changes = Changes::Review;
    let out = ctx.run(opts).await?;
    ensure!(
        out.status.success(),
        "the command's edits failed in the layer: {}",
        describe(&out)
    );
    let set = out.changes.clone().ok_or_else(|| {
        Failure::Broken(format!(
            "a review run's outcome has no change set: {}",
            describe(&out)
        ))
    })?;
    Ok((out, set))
}

fn listed(set: &ChangeSet) -> BTreeSet<(PathBuf, String)> {
    set.changes()
        .iter()
        .map(|c| {
            let kind = match &c.kind {
                ChangeKind::Added => "added".to_string(),
                ChangeKind::Modified => "modified".into(),
                ChangeKind::Deleted { dir } => format!("deleted dir={dir}"),
                ChangeKind::ModeChanged => format!(
                    "mode {:o}->{:o}",
                    c.old_mode.unwrap_or(0),
                    c.mode.unwrap_or(0)
                ),
                ChangeKind::Symlink { target } => format!("symlink {}", target.display()),
                ChangeKind::DirAdded => "dir added".into(),
                ChangeKind::Special => "special".into(),
            };
            (c.path.clone(), kind)
        })
        .collect()
}

/// The real workspace is untouched while the command writes its layer, after the run, and
/// after a discard, which leaves nothing on disk; `Discard` (snapshot) likewise.
pub async fn untouched_until_applied(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cow-untouched")?;
    plant(ws.path(), "a.txt", "original")?;
    plant(ws.path(), "d/f", "inner")?;
    let before = host_tree(&ctx, ws.path())?;
    settle().await;
    let mut opts = ctx.opts(
        ws.path(),
        [
            "edit", "write", "a.txt", "changed", ",", "write", "new.txt", "n", ",", "remove", "d",
            ",", "say", "edited", ",", "sleep", "30",
        ],
    );
    opts.changes = Changes::Review;
    let sb = ctx.sandbox();
    sb.run(opts).await?;
    // While it runs, after its edits: nothing of them is in the real workspace.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let logs = sb.logs().await?;
        if logs.stdout.text().contains("edited") {
            break;
        }
        if logs.stdout.text().contains("\"ok\":false") || tokio::time::Instant::now() > deadline {
            let _ = sb.kill().await;
            return Err(Failure::Broken(format!(
                "the command did not report its edits: {}",
                logs.stdout.text()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let during = host_tree(&ctx, ws.path())?;
    sb.kill().await?;
    let out = sb.wait().await?;
    ensure!(
        during == before,
        "the real workspace changed while the command ran: {during:?} (was {before:?})"
    );
    let set = out.changes.clone().ok_or_else(|| {
        Failure::Broken(format!("no change set in the outcome: {}", describe(&out)))
    })?;
    ensure!(
        set.changes().len() >= 3,
        "the change set misses the command's edits: {:?}",
        listed(&set)
    );
    ensure!(
        host_tree(&ctx, ws.path())? == before,
        "the real workspace changed after the run, before any apply"
    );
    let layer = set
        .layer_dir()
        .ok_or_else(|| Failure::Broken("no layer".into()))?;
    ensure!(
        layer.exists(),
        "the layer {} is not on disk",
        layer.display()
    );
    drop(out);
    set.discard();
    ensure!(
        !layer.exists(),
        "the layer {} is still on disk after a discard",
        layer.display()
    );
    ensure!(
        host_tree(&ctx, ws.path())? == before,
        "the real workspace changed after a discard"
    );
    ensure!(
        matches!(set.apply(false), Err(ApplyError::Gone)),
        "a discarded change set could still be applied"
    );

    // Discard (what `snapshot` means): no change set, nothing written.
    let mut opts = ctx.opts(ws.path(), ["edit", "write", "a.txt", "changed"]);
    opts.changes = Changes::Discard;
    opts.capture_files = vec!["a.txt".into()];
    let out = ctx.run(opts).await?;
    ensure!(out.status.success(), "{}", describe(&out));
    ensure!(
        out.files.get(Path::new("a.txt")).map(Vec::as_slice) == Some(b"changed".as_slice()),
        "the command's write was not in its layer (captured {:?})",
        out.files.get(Path::new("a.txt"))
    );
    ensure!(out.changes.is_none(), "a discard run carries a change set");
    ensure!(
        host_tree(&ctx, ws.path())? == before,
        "a discard run changed the real workspace"
    );
    Ok(())
}

/// The workspace the listing and apply cases start from.
fn plant_tree(ws: &Path) -> std::io::Result<()> {
    for (p, c) in [
        ("keep.txt", "keep"),
        ("mod.txt", "old"),
        ("del.txt", "bye"),
        ("chm.txt", "mode"),
        ("src/moved.txt", "m"),
        ("gone/a", "a"),
        ("gone/sub/b", "b"),
        ("dst/.keep", ""),
    ] {
        plant(ws, p, c)?;
    }
    Ok(())
}

/// What the command does to [`plant_tree`]: modify, add, delete, chmod, symlink, rename
/// across directories, delete a directory with its contents.
#[rustfmt::skip]
const EDITS: &[&str] = &[
    "write", "mod.txt", "new!", ",", "write", "add.txt", "added", ",", "remove", "del.txt", ",",
    "chmod", "chm.txt", "600", ",", "symlink", "keep.txt", "link", ",", "rename",
    "src/moved.txt", "dst/moved.txt", ",", "remove", "gone",
];

/// More for the apply case: a deleted directory made again, a new directory with a mode,
/// a file replaced by a directory; then the command lists what it sees.
#[rustfmt::skip]
const MORE_EDITS: &[&str] = &[
    ",", "mkdir", "gone", ",", "write", "gone/again", "g", ",", "mkdir", "newdir", ",",
    "write", "newdir/x", "x", ",", "chmod", "newdir", "750", ",", "remove", "was-file", ",",
    "mkdir", "was-file", ",", "tree",
];

/// The change set lists exactly what the command did: add, modify, delete, chmod, symlink,
/// a rename across directories, a deleted directory with its contents.
pub async fn lists_exactly_what_changed(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cow-list")?;
    plant_tree(ws.path())?;
    settle().await;
    let (_out, set) = review(&ctx, ws.path(), EDITS).await?;
    let want: BTreeSet<(PathBuf, String)> = [
        ("add.txt", "added"),
        ("chm.txt", "mode 644->600"),
        ("del.txt", "deleted dir=false"),
        ("dst/moved.txt", "added"),
        ("gone", "deleted dir=true"),
        ("gone/a", "deleted dir=false"),
        ("gone/sub", "deleted dir=true"),
        ("gone/sub/b", "deleted dir=false"),
        ("link", "symlink keep.txt"),
        ("mod.txt", "modified"),
        ("src/moved.txt", "deleted dir=false"),
    ]
    .into_iter()
    .map(|(p, k)| (PathBuf::from(p), k.to_string()))
    .collect();
    let got = listed(&set);
    ensure!(
        got == want,
        "the change set ({:?} layer) is not what the command did:\n  extra: {:?}\n  missing: {:?}",
        set.mechanism(),
        got.difference(&want).collect::<Vec<_>>(),
        want.difference(&got).collect::<Vec<_>>()
    );
    let size = |p: &str| {
        set.changes()
            .iter()
            .find(|c| c.path == Path::new(p))
            .map(|c| c.size)
    };
    ensure!(
        size("mod.txt") == Some(4) && size("add.txt") == Some(5) && size("link") == Some(8),
        "sizes: mod.txt {:?} (want 4), add.txt {:?} (want 5), link {:?} (want 8)",
        size("mod.txt"),
        size("add.txt"),
        size("link")
    );
    Ok(())
}

/// After apply the real workspace is exactly what the command saw at its end.
pub async fn apply_matches_the_command_view(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cow-apply")?;
    plant_tree(ws.path())?;
    plant(ws.path(), "was-file", "f")?;
    settle().await;
    let mut ops = EDITS.to_vec();
    ops.extend_from_slice(MORE_EDITS);
    let (out, set) = review(&ctx, ws.path(), &ops).await?;
    let text = out.stdout.text();
    let seen: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('{'))
        .map(str::to_owned)
        .collect();
    ensure!(
        !seen.is_empty(),
        "the command listed nothing: {}",
        describe(&out)
    );
    let report = set
        .apply(false)
        .map_err(|e| Failure::Broken(format!("apply failed: {e} (changes: {:?})", listed(&set))))?;
    let real = host_tree(&ctx, ws.path())?;
    ensure!(
        real == seen,
        "after apply the workspace differs from the command's view:\n  real: {real:?}\n  seen: {seen:?}"
    );
    ensure!(
        report.written > 0 && report.deleted > 0 && report.forced.is_empty(),
        "apply reported {report:?}"
    );
    ensure!(
        !set.is_pending() && set.layer_dir().is_none(),
        "the layer is still held after apply"
    );
    ensure!(
        matches!(set.apply(false), Err(ApplyError::Gone)),
        "a change set applied twice"
    );
    Ok(())
}

/// Apply refuses a symlink out of the workspace (absolute or by `..`), a FIFO, and a path
/// through a symlink in the real workspace, and writes nothing when it refuses.
pub async fn apply_refuses_escapes(ctx: Arc<Context>) -> CaseResult {
    let outside = ctx.dir("cow-outside", 0o755)?;
    plant(outside.path(), "secret", "host")?;
    type Expect = fn(&Escape) -> bool;
    let cases: Vec<(&str, Vec<&str>, Expect)> = vec![
        (
            "absolute symlink out",
            vec!["symlink", "/etc/passwd", "leak"],
            |e| matches!(e, Escape::SymlinkOutside { target, .. } if target == Path::new("/etc/passwd")),
        ),
        (
            "relative symlink out",
            vec!["mkdir", "d", ",", "symlink", "../../x", "d/up"],
            |e| matches!(e, Escape::SymlinkOutside { .. }),
        ),
        ("fifo", vec!["mkfifo", "pipe"], |e| {
            matches!(e, Escape::Fifo)
        }),
        (
            "path through a symlink",
            vec!["write", "sub/f", "through"],
            |e| matches!(e, Escape::ThroughSymlink { at } if at == Path::new("sub")),
        ),
    ];
    for (what, ops, expect) in cases {
        let ws = ctx.workspace("cow-escape")?;
        plant(ws.path(), "sub/.keep", "")?;
        plant(ws.path(), "a.txt", "original")?;
        settle().await;
        let mut all = vec![
            "write", "a.txt", "changed", ",", "write", "b.txt", "new", ",",
        ];
        all.extend(ops);
        let (_out, set) = review(&ctx, ws.path(), &all).await?;
        if what == "path through a symlink" {
            // The host's own tree changes after the run: `sub` becomes a symlink out.
            std::fs::remove_dir_all(ws.join("sub"))?;
            std::os::unix::fs::symlink(outside.path(), ws.join("sub"))?;
        }
        if what == "fifo" && !listed(&set).iter().any(|(p, _)| p == "pipe") {
            // The fifo never reached the host's layer (a sandbox with a kernel of its own,
            // gVisor's, keeps it there): nothing to refuse, and applying must not make one.
            let applied = set.apply(true);
            ensure!(applied.is_ok(), "{what}: apply failed: {applied:?}");
            ensure!(
                std::fs::symlink_metadata(ws.join("pipe")).is_err(),
                "{what}: a fifo the change set did not list appeared on the host"
            );
            continue;
        }
        let before = host_tree(&ctx, ws.path())?;
        let secret_before = host_tree(&ctx, outside.path())?;
        match set.apply(true) {
            Err(ApplyError::Refused { refusals }) => ensure!(
                refusals.iter().any(|r| expect(&r.escape)),
                "{what}: refused for other reasons: {refusals:?}"
            ),
            other => {
                return Err(Failure::Broken(format!(
                    "{what}: apply (forced) was not refused: {other:?}; changes {:?}",
                    listed(&set)
                )))
            }
        }
        ensure!(
            host_tree(&ctx, ws.path())? == before,
            "{what}: a refused apply changed the workspace"
        );
        ensure!(
            host_tree(&ctx, outside.path())? == secret_before,
            "{what}: a refused apply changed a directory outside the workspace"
        );
        ensure!(
            set.is_pending(),
            "{what}: a refused change set was dropped instead of left for a discard"
        );
    }
    Ok(())
}

/// Apply resolves every new link as the kernel will once it is applied (links followed,
/// the change set's own included, `..` from where a link led): a chain through `up -> .`,
/// a `..` after a link, a directory replaced by a link are refused, each named, though
/// their text stays inside; links within the workspace, a virtual environment's links to
/// the host's interpreter, and links in a directory that replaced the host's link out are
/// applied, and nothing is written through that old link.
pub async fn apply_resolves_links_physically(ctx: Arc<Context>) -> CaseResult {
    let outside = ctx.dir("cow-links-outside", 0o755)?;
    plant(outside.path(), "secret", "host")?;
    let ws = ctx.workspace("cow-links")?;
    plant(ws.path(), "a.txt", "original")?;
    plant(ws.path(), "gone/inner", "i")?;
    settle().await;
    // Enough `..` to reach `/` from the workspace.
    let n = ws.path().components().count() + 1;
    let chain = format!(
        "{}/{}/etc",
        vec!["up"; n].join("/"),
        vec![".."; n].join("/")
    );
    #[rustfmt::skip]
    let ops = [
        "symlink", ".", "up", ",", "symlink", &chain, "chain", ",",
        "mkdir", "a", ",", "symlink", "..", "a/self", ",", "symlink", "a/self/../x", "dotdot", ",",
        "remove", "gone", ",", "symlink", ".", "gone", ",", "symlink", "gone/../z", "replaced",
    ];
    let (_out, set) = review(&ctx, ws.path(), &ops).await?;
    let before = host_tree(&ctx, ws.path())?;
    let parent = ws
        .path()
        .parent()
        .ok_or_else(|| Failure::Broken("the workspace has no parent".into()))?;
    let want: BTreeSet<(PathBuf, Option<PathBuf>)> = [
        ("chain", PathBuf::from("/etc")),
        ("dotdot", parent.join("x")),
        ("replaced", parent.join("z")),
    ]
    .into_iter()
    .map(|(p, r)| (PathBuf::from(p), Some(r)))
    .collect();
    match set.apply(true) {
        Err(ApplyError::Refused { refusals }) => {
            let got: BTreeSet<(PathBuf, Option<PathBuf>)> = refusals
                .iter()
                .map(|r| match &r.escape {
                    Escape::SymlinkOutside { resolved, .. } => (r.path.clone(), resolved.clone()),
                    other => (r.path.clone(), Some(PathBuf::from(other.to_string()))),
                })
                .collect();
            ensure!(
                got == want,
                "refused {got:?}, want {want:?} (changes {:?})",
                listed(&set)
            );
        }
        other => {
            return Err(Failure::Broken(format!(
                "links out by way of other links were applied: {other:?}; changes {:?}",
                listed(&set)
            )))
        }
    }
    ensure!(
        host_tree(&ctx, ws.path())? == before,
        "a refused apply changed the workspace"
    );
    set.discard();

    // What is kept.
    let ws = ctx.workspace("cow-links-kept")?;
    plant(ws.path(), "a.txt", "original")?;
    std::os::unix::fs::symlink(outside.path(), ws.join("l"))?;
    settle().await;
    let outside_before = host_tree(&ctx, outside.path())?;
    #[rustfmt::skip]
    let ops = [
        "mkdir", ".venv", ",", "mkdir", ".venv/bin", ",", "mkdir", ".venv/lib", ",",
        "symlink", "/usr/bin/python3", ".venv/bin/python", ",",
        "symlink", "python", ".venv/bin/python3", ",", "symlink", "lib", ".venv/lib64", ",",
        "remove", "l", ",", "mkdir", "l", ",", "mkdir", "l/x", ",",
        "symlink", "../../a.txt", "l/x/e", ",", "write", "l/x/f", "new", ",",
        "symlink", ".", "up", ",", "symlink", "up/up/a.txt", "via", ",", "tree",
    ];
    let (out, set) = review(&ctx, ws.path(), &ops).await?;
    let seen: Vec<String> = out
        .stdout
        .text()
        .lines()
        .filter(|l| !l.starts_with('{'))
        .map(str::to_owned)
        .collect();
    set.apply(false).map_err(|e| {
        Failure::Broken(format!(
            "links that stay inside or reach the host's programs were refused: {e}"
        ))
    })?;
    let real = host_tree(&ctx, ws.path())?;
    ensure!(
        real == seen,
        "after apply the workspace differs from the command's view:\n  real: {real:?}\n  seen: {seen:?}"
    );
    ensure!(
        host_tree(&ctx, outside.path())? == outside_before,
        "the apply wrote through the host's old link out"
    );
    Ok(())
}

/// Makes a directory of the real workspace refuse what an apply puts in it: immutable
/// (`chattr +i`, which stops root too) when the host is root, mode 0555 otherwise. Undone
/// on drop.
struct Obstacle {
    dir: PathBuf,
    immutable: bool,
}

/// `FS_IMMUTABLE_FL` of `linux/fs.h` (the libc crate does not name it).
const FS_IMMUTABLE_FL: libc::c_int = 0x10;

/// Set or clear the immutable flag of the directory `dir`.
fn immutable(dir: &Path, on: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir)?;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS/SETFLAGS on a live descriptor, with an int as the kernel reads.
    unsafe {
        if libc::ioctl(d.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if on {
            flags |= FS_IMMUTABLE_FL;
        } else {
            flags &= !FS_IMMUTABLE_FL;
        }
        if libc::ioctl(d.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Obstacle {
    fn new(dir: &Path) -> Result<Self, Failure> {
        let root = crate::context::is_root();
        if root {
            immutable(dir, true).map_err(|e| {
                Failure::Broken(format!(
                    "making {} immutable (the workspace's filesystem must take chattr +i): {e}",
                    dir.display()
                ))
            })?;
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555))?;
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            immutable: root,
        })
    }
}

impl Drop for Obstacle {
    fn drop(&mut self) {
        if self.immutable {
            let _ = immutable(&self.dir, false);
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o755));
        }
    }
}

/// An apply that fails half way (at its last path, into a directory that refuses it) leaves
/// the workspace as before, names, contents and modes, and keeps the change set; applied
/// again once the obstacle is gone, it goes through, a new file of mode 000 included.
pub async fn apply_is_all_or_nothing(ctx: Arc<Context>) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    let ws = ctx.workspace("cow-atomic")?;
    plant_tree(ws.path())?;
    plant(ws.path(), "zz/.keep", "")?;
    // An empty directory nobody may write: its deletion must not need that.
    std::fs::create_dir(ws.join("ro"))?;
    std::fs::set_permissions(ws.join("ro"), std::fs::Permissions::from_mode(0o555))?;
    settle().await;
    let mut ops = EDITS.to_vec();
    #[rustfmt::skip]
    ops.extend_from_slice(&[
        ",", "mkdir", "nd", ",", "write", "nd/locked", "secret", ",", "chmod", "nd/locked", "000",
        ",", "remove", "ro", ",", "write", "zz/new", "z",
    ]);
    let (_out, set) = review(&ctx, ws.path(), &ops).await?;
    let obstacle = Obstacle::new(&ws.join("zz"))?;
    let before = host_tree(&ctx, ws.path())?;
    match set.apply(false) {
        Err(ApplyError::Io { path, .. }) if path == Path::new("zz/new") => {}
        other => {
            return Err(Failure::Broken(format!(
                "the apply was not stopped at zz/new: {other:?}"
            )))
        }
    }
    let after = host_tree(&ctx, ws.path())?;
    ensure!(
        after == before,
        "a failed apply left part of itself:\n  after: {after:?}\n  before: {before:?}"
    );
    ensure!(set.is_pending(), "a failed apply dropped the change set");
    drop(obstacle);
    set.apply(false)
        .map_err(|e| Failure::Broken(format!("applied again, it failed: {e}")))?;
    let read = |p: &str| std::fs::read_to_string(ws.join(p)).ok();
    let locked = std::fs::symlink_metadata(ws.join("nd/locked"))?;
    ensure!(
        locked.permissions().mode() & 0o7777 == 0 && locked.len() == 6,
        "nd/locked is mode {:o}, {} bytes (want 0, 6)",
        locked.permissions().mode() & 0o7777,
        locked.len()
    );
    ensure!(
        read("mod.txt").as_deref() == Some("new!")
            && read("zz/new").as_deref() == Some("z")
            && read("del.txt").is_none()
            && !ws.join("gone").exists()
            && !ws.join("ro").exists(),
        "applied again, the workspace lacks the changes: {:?}",
        host_tree(&ctx, ws.path())
    );
    let left: Vec<_> = std::fs::read_dir(ws.path())?
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with(".sandbox"))
        .collect();
    ensure!(left.is_empty(), "the apply left {left:?} in the workspace");
    Ok(())
}

/// A file changed in the real workspace after the run started is a conflict: nothing is
/// applied unless forced, and forcing overwrites it.
pub async fn conflict_detected(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cow-conflict")?;
    plant(ws.path(), "a.txt", "v1")?;
    plant(ws.path(), "b.txt", "v1")?;
    settle().await;
    let (_out, set) = review(
        &ctx,
        ws.path(),
        &["write", "a.txt", "cmd", ",", "write", "b.txt", "cmd"],
    )
    .await?;
    std::fs::write(ws.join("a.txt"), "host")?;
    match set.apply(false) {
        Err(ApplyError::Conflict { paths }) => ensure!(
            paths == vec![PathBuf::from("a.txt")],
            "the conflict names {paths:?}, not a.txt"
        ),
        other => {
            return Err(Failure::Broken(format!(
                "a changed a.txt was not a conflict: {other:?}"
            )))
        }
    }
    let read = |p: &str| std::fs::read_to_string(ws.join(p)).unwrap_or_default();
    ensure!(
        read("a.txt") == "host" && read("b.txt") == "v1",
        "a conflicting apply wrote something: a.txt {:?}, b.txt {:?}",
        read("a.txt"),
        read("b.txt")
    );
    let report = set
        .apply(true)
        .map_err(|e| Failure::Broken(format!("a forced apply failed: {e}")))?;
    ensure!(
        report.forced == vec![PathBuf::from("a.txt")],
        "the forced apply reported {report:?}"
    );
    ensure!(
        read("a.txt") == "cmd" && read("b.txt") == "cmd",
        "a forced apply did not write: a.txt {:?}, b.txt {:?}",
        read("a.txt"),
        read("b.txt")
    );
    Ok(())
}

/// `sh -c script` with `args` in `ws`, on the context's lane, `$TMPDIR` (the host's temp
/// dir, holding every run's directory) writable.
/// A writable grant holding the runs directory refused before anything ran, by a backend
/// that cannot keep the carve-out read-only inside it (landlock without a mount namespace,
/// in a container): the fail-closed answer, which these cases accept.
fn refused_for_the_carveout(e: &Failure) -> bool {
    matches!(e, Failure::Broken(m)
        if m.starts_with("sandbox error:") && m.contains("cannot enforce")
            && m.contains("read-only carve-out"))
}

fn with_tmp_writable(
    ctx: &Context,
    ws: &Path,
    script: &str,
    args: &[&Path],
) -> Result<sandbox_core::SandboxOpts, Failure> {
    let mut o = ctx.opts(ws, [""]);
    o.argv = ["sh", "-c", script, "sh"]
        .iter()
        .map(std::ffi::OsString::from)
        .chain(args.iter().map(|a| a.as_os_str().to_owned()))
        .collect();
    o.writable_paths = vec![std::env::temp_dir().canonicalize()?];
    Ok(o)
}

/// The layer directory (in this user's runs directory) whose tree holds `mark` at its top:
/// `upper/mark` (an overlay) or `copy/mark` (a copy).
fn layer_holding(mark: &str) -> Option<PathBuf> {
    std::fs::read_dir(sandbox_core::runs_dir())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|d| {
            ["upper", "copy"]
                .iter()
                .any(|t| d.join(t).join(mark).exists())
        })
}

/// With the temp dir writable, another run's layer (its upper directory or copy, and the
/// directory around it) cannot be written: nothing is planted in what its host applies.
pub async fn another_runs_layer_stays_read_only(ctx: Arc<Context>) -> CaseResult {
    let mark = format!("mark-{}", crate::context::token());
    let ws_a = ctx.workspace("layer-a")?;
    let mut a = ctx.opts(ws_a.path(), [""]);
    a.argv = ["sh", "-c", &format!("echo a > {mark}; sleep 60")]
        .iter()
        .map(std::ffi::OsString::from)
        .collect();
    a.changes = Changes::Review;
    let sb_a = ctx.sandbox();
    sb_a.run(a).await?;
    let mut dir = None;
    for _ in 0..200 {
        dir = layer_holding(&mark);
        if dir.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = async {
        let dir = dir.ok_or_else(|| {
            Failure::Broken(format!(
                "the other run's layer is not in {}",
                sandbox_core::runs_dir().display()
            ))
        })?;
        let ws_b = ctx.workspace("layer-b")?;
        let _shared = ctx.temp_dir_shared().await;
        let tmp = std::env::temp_dir().canonicalize()?;
        let reach = tmp.join(format!("reach-{mark}"));
        let script = "echo ok > \"$2\" && echo reached; \
             for f in \"$1/planted\" \"$1/upper/planted\" \"$1/copy/planted\" \"$1/start\"; do \
               echo evil > \"$f\" 2>/dev/null && echo \"wrote $f\"; done; true";
        let o = match ctx
            .run(with_tmp_writable(
                &ctx,
                ws_b.path(),
                script,
                &[&dir, &reach],
            )?)
            .await
        {
            Ok(o) => o,
            // Refused before anything ran: nothing could be planted.
            Err(e) if refused_for_the_carveout(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _ = std::fs::remove_file(&reach);
        ensure!(
            o.status.success() && o.stdout.text().contains("reached"),
            "the command could not write the temp dir it was granted: {}",
            describe(&o)
        );
        let mut checks = crate::context::Forbidden::new(&ctx);
        let planted: Vec<PathBuf> = ["planted", "upper/planted", "copy/planted"]
            .iter()
            .map(|f| dir.join(f))
            .filter(|p| p.exists())
            .collect();
        checks.check(
            "plant a file in another run's layer",
            !planted.is_empty(),
            || format!("{planted:?} written: {}", describe(&o)),
        );
        let start = std::fs::read(dir.join("start")).unwrap_or_default();
        checks.check(
            "rewrite another run's conflict stamp",
            start.starts_with(b"evil"),
            || describe(&o),
        );
        checks.finish()
    }
    .await;
    let _ = sb_a.kill().await;
    let _ = sb_a.wait().await;
    result
}

/// With the temp dir writable, the run's own layer (its upper directory and its conflict
/// stamp) cannot be written around the overlay: the change set is what the command did
/// through the workspace.
pub async fn own_layer_stays_read_only(ctx: Arc<Context>) -> CaseResult {
    let mark = format!("mark-{}", crate::context::token());
    let ws = ctx.workspace("layer-own")?;
    let script = format!(
        "echo x > {mark}; ls \"$1\" >/dev/null 2>&1 && echo listed; \
         for d in \"$1\"/sandbox-layer@*; do \
           if [ -e \"$d/upper/{mark}\" ] || [ -e \"$d/copy/{mark}\" ]; then echo \"own $d\"; \
             for f in \"$d/upper/planted\" \"$d/start\"; do \
               echo evil > \"$f\" 2>/dev/null && echo \"wrote $f\"; done; fi; done; true"
    );
    let runs = sandbox_core::runs_dir();
    let _shared = ctx.temp_dir_shared().await;
    let mut o = with_tmp_writable(&ctx, ws.path(), &script, &[&runs])?;
    o.changes = Changes::Review;
    let out = match ctx.run(o).await {
        Ok(out) => out,
        // Refused before anything ran: nothing could be written.
        Err(e) if refused_for_the_carveout(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    let set = out.changes.clone();
    let result = (|| {
        let own = out
            .stdout
            .text()
            .lines()
            .find_map(|l| l.strip_prefix("own ").map(PathBuf::from));
        let Some(own) = own else {
            if !out.stdout.text().contains("listed") && out.status.success() {
                // The runs directory is out of the command's reach altogether (the
                // temp dir's bind shows it, but its mode keeps the command's id out).
                return Ok(());
            }
            return Err(Failure::Broken(format!(
                "the command did not find its own layer in {}: {}",
                runs.display(),
                describe(&out)
            )));
        };
        let mut checks = crate::context::Forbidden::new(&ctx);
        let planted = own.join("upper/planted");
        checks.check(
            "write its own upper directory around the overlay",
            planted.exists(),
            || format!("{} was written: {}", planted.display(), describe(&out)),
        );
        let start = std::fs::read(own.join("start")).unwrap_or_default();
        checks.check(
            "rewrite its own conflict stamp",
            start.starts_with(b"evil"),
            || describe(&out),
        );
        let listed = set
            .as_ref()
            .is_some_and(|s| s.changes().iter().any(|c| c.path == Path::new("planted")));
        checks.check("add to its change set around the overlay", listed, || {
            describe(&out)
        });
        checks.finish()
    })();
    if let Some(s) = set {
        s.discard();
    }
    result
}
