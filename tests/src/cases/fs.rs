//! The filesystem: the workspace and its rules, capture, snapshots, and confinement.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::record::{Enforced, Landlock};
use sandbox_core::{SandboxError, SandboxOpts};
use serde_json::Value;

use super::CaseResult;
use crate::context::{describe, token, Context, Failure, Forbidden};

/// Write `content` to `path` on the host and set its mode.
fn plant(path: &Path, content: &str, mode: u32) -> std::io::Result<()> {
    std::fs::write(path, content)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn host_read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

/// The command starts in the workspace, or in the directory asked for inside it.
pub async fn cwd(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("cwd")?;
    let p = ctx.probe_in(ws.path(), ["pwd"]).await?;
    let got = p.field("cwd").and_then(Value::as_str).map(PathBuf::from);
    ensure!(
        got.as_deref() == Some(ws.path()),
        "the default cwd is {got:?}, not the workspace {}: {}",
        ws.path().display(),
        p.describe()
    );
    std::fs::create_dir_all(ws.join("sub/dir"))?;
    for asked in [PathBuf::from("sub/dir"), ws.join("sub/dir")] {
        let mut opts = ctx.opts(ws.path(), ["pwd"]);
        opts.cwd = Some(asked.clone());
        let p = ctx.probe_run(opts).await?;
        let got = p.field("cwd").and_then(Value::as_str).map(PathBuf::from);
        ensure!(
            got == Some(ws.join("sub/dir")),
            "asked for cwd {}, got {got:?}: {}",
            asked.display(),
            p.describe()
        );
    }
    Ok(())
}

/// A file written in the workspace is there afterwards, seen from the host.
pub async fn workspace_write_persists(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("persist")?;
    let t = token();
    let p = ctx
        .probe_in(ws.path(), ["write", "made-inside.txt", t.as_str()])
        .await?;
    ensure!(p.succeeded(), "the write failed: {}", p.describe());
    let on_host = host_read(&ws.join("made-inside.txt"));
    ensure!(
        on_host.as_deref() == Some(t.as_str()),
        "the host sees {on_host:?} in the file the command wrote"
    );
    Ok(())
}

/// Bad options are refused with an invalid-configuration error before anything runs.
pub async fn invalid_options(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("invalid")?;
    let marker = ws.join("ran");
    let a_file = ws.join("a-file");
    plant(&a_file, "x", 0o644)?;
    let good = || ctx.opts(ws.path(), [OsStr::new("write"), os(&marker)]);
    let mut variants: Vec<(&str, SandboxOpts)> = Vec::new();
    let mut add = |what, f: &dyn Fn(&mut SandboxOpts)| {
        let mut o = good();
        f(&mut o);
        variants.push((what, o));
    };
    add("an empty argv", &|o| o.argv.clear());
    add("an empty argv[0]", &|o| o.argv[0] = "".into());
    add("a NUL byte in an argument", &|o| o.argv.push("a\0b".into()));
    add("a missing workspace", &|o| o.workspace = ws.join("missing"));
    add("a relative workspace", &|o| {
        o.workspace = "relative/workspace".into()
    });
    add("a workspace that is a file", &|o| {
        o.workspace = a_file.clone()
    });
    add("a cwd outside the workspace through ..", &|o| {
        o.cwd = Some("..".into())
    });
    add("an absolute cwd outside the workspace", &|o| {
        o.cwd = Some("/".into())
    });
    add("a missing cwd", &|o| o.cwd = Some("no-such-dir".into()));
    add("a carve-out outside the workspace", &|o| {
        o.readonly_carveouts = vec!["/etc".into()]
    });
    add("a missing carve-out", &|o| {
        o.readonly_carveouts = vec!["missing".into()]
    });
    add("a capture path with ..", &|o| {
        o.capture_files = vec!["../escape".into()]
    });
    add("an absolute capture path", &|o| {
        o.capture_files = vec!["/etc/passwd".into()]
    });
    add("a zero timeout", &|o| o.timeout = Some(Duration::ZERO));
    add("a zero output limit", &|o| o.output_limit = 0);
    add("a zero process limit", &|o| {
        o.limits.max_processes = Some(0)
    });
    add("a zero memory limit", &|o| o.limits.memory_bytes = Some(0));
    add("a variable name with =", &|o| {
        o.env.set.push(("A=B".into(), "x".into()))
    });
    add("an empty pass-through name", &|o| {
        o.env.pass.push(String::new())
    });
    add("a missing read-only path", &|o| {
        o.read_only_paths = vec![ws.join("missing")]
    });
    add("a relative writable path", &|o| {
        o.writable_paths = vec!["relative".into()]
    });
    for (what, opts) in variants {
        let sb = ctx.sandbox();
        let r = sb.run(opts).await;
        ensure!(
            matches!(r, Err(SandboxError::InvalidConfig { .. })),
            "{what}: run gave {r:?}, not an invalid-configuration error"
        );
        let w = sb.wait().await;
        ensure!(
            matches!(w, Err(SandboxError::State { .. })),
            "{what}: after the refused run, wait gave {w:?}: something was started"
        );
    }
    ensure!(
        !marker.exists(),
        "a refused run ran its command anyway: {} exists",
        marker.display()
    );
    Ok(())
}

/// A program that does not exist, or is not executable, is refused before anything runs.
pub async fn unknown_program(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("noprog")?;
    let not_exec = ws.join("not-executable");
    plant(&not_exec, "#!/bin/sh\n", 0o644)?;
    let missing = format!("definitely-not-a-program-{}", token());
    for (argv0, not_found) in [
        (PathBuf::from(&missing), true),
        (ws.join(&missing), true),
        (not_exec.clone(), false),
    ] {
        let mut opts = ctx.opts(ws.path(), ["exit", "0"]);
        opts.argv[0] = argv0.clone().into_os_string();
        let sb = ctx.sandbox();
        match sb.run(opts).await {
            Err(e) if not_found && e.is_not_found() => {}
            Err(e) if !not_found && e.is_not_executable() => {}
            other => {
                return Err(Failure::Broken(format!(
                    "argv[0] {}: run gave {other:?}, not a {} error",
                    argv0.display(),
                    if not_found {
                        "not-found"
                    } else {
                        "not-executable"
                    }
                )))
            }
        }
        ensure!(
            matches!(sb.wait().await, Err(SandboxError::State { .. })),
            "argv[0] {}: something was started",
            argv0.display()
        );
    }
    Ok(())
}

/// Files named in `capture_files` come back in the outcome; missing ones, and links out
/// of the workspace, are absent.
pub async fn capture_files(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("capture")?;
    let t = token();
    // A link the command makes to a host file is never followed out of the workspace.
    let mut opts = ctx.opts(
        ws.path(),
        [
            "edit",
            "write",
            "out.txt",
            &t,
            ",",
            "symlink",
            "/etc/hostname",
            "leak",
        ],
    );
    opts.capture_files = vec!["out.txt".into(), "missing.txt".into(), "leak".into()];
    let out = ctx.run(opts).await?;
    ensure!(out.status.success(), "the write failed: {}", describe(&out));
    ensure!(
        !out.files.contains_key(Path::new("leak")),
        "a link out of the workspace was followed and captured"
    );
    let got = out.files.get(Path::new("out.txt"));
    ensure!(
        got.map(Vec::as_slice) == Some(t.as_bytes()),
        "captured out.txt is {:?}",
        got.map(|b| String::from_utf8_lossy(b).into_owned())
    );
    ensure!(
        !out.files.contains_key(Path::new("missing.txt")),
        "a file that was never written was captured"
    );
    Ok(())
}

/// Snapshot mode runs against a throwaway copy: the original workspace is untouched.
pub async fn snapshot(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("snapshot")?;
    plant(&ws.join("a.txt"), "original", 0o644)?;
    let mut opts = ctx.opts(ws.path(), ["write", "a.txt", "changed"]);
    opts.snapshot = true;
    opts.capture_files = vec!["a.txt".into()];
    let out = ctx.run(opts).await?;
    ensure!(
        out.status.success(),
        "the write in the copy failed: {}",
        describe(&out)
    );
    let captured = out.files.get(Path::new("a.txt"));
    ensure!(
        captured.map(Vec::as_slice) == Some(b"changed".as_slice()),
        "the copy did not hold the command's write (captured {:?})",
        captured.map(|b| String::from_utf8_lossy(b).into_owned())
    );
    ensure!(
        host_read(&ws.join("a.txt")).as_deref() == Some("original"),
        "the original a.txt was changed"
    );
    let mut opts = ctx.opts(ws.path(), ["write", "new.txt", "new"]);
    opts.snapshot = true;
    let out = ctx.run(opts).await?;
    ensure!(out.status.success(), "{}", describe(&out));
    ensure!(
        !ws.join("new.txt").exists(),
        "a file created in the copy appeared in the original"
    );
    Ok(())
}

/// A planted file outside the workspace cannot be read, directly or through a symlink.
pub async fn reads_outside_denied(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("reads")?;
    let outside = ctx.dir("planted-read", 0o755)?;
    let secret_token = format!("secret-{}", token());
    let secret = outside.join("secret.txt");
    // World-readable: only the sandbox can stop the read.
    plant(&secret, &secret_token, 0o644)?;
    plant(&ws.join("inside.txt"), "inside", 0o644)?;
    std::os::unix::fs::symlink(&secret, ws.join("link"))?;

    let p = ctx.probe_in(ws.path(), ["read", "inside.txt"]).await?;
    ensure!(
        p.succeeded() && p.stdout_contains("inside"),
        "the probe cannot read a file in its own workspace: {}",
        p.describe()
    );
    let mut checks = Forbidden::new(&ctx);
    for (what, path) in [
        ("read directly", secret.as_os_str()),
        (
            "read through a symlink in the workspace",
            OsStr::new("link"),
        ),
    ] {
        let p = ctx.probe_in(ws.path(), [OsStr::new("read"), path]).await?;
        p.report()?;
        checks.check(
            what,
            p.succeeded() || p.stdout_contains(&secret_token),
            || format!("the planted secret {} was read", secret.display()),
        );
    }
    checks.finish()
}

/// A planted file outside the workspace cannot be changed or removed, nor a file made
/// beside it, directly or through a symlink (checked from the host).
pub async fn writes_outside_denied(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("writes")?;
    // World-writable: only the sandbox can stop the writes.
    let outside = ctx.dir("planted-write", 0o777)?;
    let planted = outside.join("planted.txt");
    let fresh = outside.join("new.txt");
    std::os::unix::fs::symlink(&planted, ws.join("link"))?;

    let p = ctx
        .probe_in(ws.path(), ["write", "inside.txt", "inside"])
        .await?;
    ensure!(
        p.succeeded() && host_read(&ws.join("inside.txt")).as_deref() == Some("inside"),
        "the probe cannot write in its own workspace: {}",
        p.describe()
    );
    let attacks: [(&str, Vec<&OsStr>); 4] = [
        (
            "overwrite",
            vec![OsStr::new("write"), os(&planted), OsStr::new("tampered")],
        ),
        (
            "create beside",
            vec![OsStr::new("write"), os(&fresh), OsStr::new("new")],
        ),
        (
            "overwrite through a symlink",
            vec![
                OsStr::new("write"),
                OsStr::new("link"),
                OsStr::new("tampered"),
            ],
        ),
        ("remove", vec![OsStr::new("remove"), os(&planted)]),
    ];
    let mut checks = Forbidden::new(&ctx);
    for (what, args) in attacks {
        // Each attack starts from the same state, so each is judged on its own.
        plant(&planted, "original", 0o666)?;
        let _ = std::fs::remove_file(&fresh);
        let p = ctx.probe_in(ws.path(), args).await?;
        p.report()?;
        let now = host_read(&planted);
        let changed = now.as_deref() != Some("original");
        checks.check(what, changed || fresh.exists(), || {
            if changed {
                format!("the planted file outside the workspace is now {now:?}")
            } else {
                format!("{} was created outside the workspace", fresh.display())
            }
        });
    }
    checks.finish()
}

/// Read-only carve-outs hold: `.git/config` and `.git/hooks` cannot be changed, removed
/// or moved away, while the rest of the workspace stays writable (where the record says
/// the carve-out is held by split rules, the workspace root is fixed: its files stay
/// writable, nothing new is made in it).
pub async fn readonly_carveouts(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("carveout")?;
    let git = ws.join(".git");
    let hook = git.join("hooks/pre-commit");
    let reset = || -> std::io::Result<()> {
        for moved in ["moved-git", "moved-hooks"] {
            if ws.join(moved).exists() {
                std::fs::remove_dir_all(ws.join(moved))?;
            }
        }
        std::fs::create_dir_all(git.join("hooks"))?;
        plant(&git.join("config"), "original-config", 0o644)?;
        if hook.exists() {
            std::fs::remove_file(&hook)?;
        }
        Ok(())
    };
    reset()?;
    let with_carveout = |args: &[&str]| {
        let mut o = ctx.opts(ws.path(), args);
        o.readonly_carveouts = vec![".git".into()];
        o
    };

    let p = ctx
        .probe_run(with_carveout(&["write", "ok.txt", "fine"]))
        .await?;
    let fixed = fixed_dirs(&p.outcome);
    if fixed.iter().any(|d| same_dir(d, ws.path())) {
        // Split rules (landlock without a mount namespace, in a pod): the workspace root
        // is recorded as fixed, so a new entry there is refused, stricter than asked, and
        // the rest must be as the record says: its existing files and everything below a
        // child that is not on the way to the carve-out stay writable.
        ensure!(
            !p.succeeded() && p.field("errno").and_then(Value::as_i64) == Some(13),
            "the workspace root is recorded as fixed ({fixed:?}), yet a new entry in it was \
             not refused with EACCES: {}",
            p.describe()
        );
        plant(&ws.join("existing.txt"), "before", 0o644)?;
        std::fs::create_dir_all(ws.join("sub"))?;
        for (path, what) in [
            ("existing.txt", "an existing file in the fixed root"),
            ("sub/ok.txt", "a new file below a writable child"),
        ] {
            let p = ctx
                .probe_run(with_carveout(&["write", path, "fine"]))
                .await?;
            ensure!(
                p.succeeded() && host_read(&ws.join(path)).as_deref() == Some("fine"),
                "with a carve-out by split rules, {what} is not writable: {}",
                p.describe()
            );
        }
    } else {
        ensure!(
            p.succeeded() && host_read(&ws.join("ok.txt")).as_deref() == Some("fine"),
            "with a carve-out, the rest of the workspace is not writable: {}",
            p.describe()
        );
    }
    let p = ctx
        .probe_run(with_carveout(&["read", ".git/config"]))
        .await?;
    ensure!(
        p.succeeded() && p.stdout_contains("original-config"),
        "the carve-out is not readable: {}",
        p.describe()
    );
    let attacks: [(&str, &[&str]); 5] = [
        ("overwrite .git/config", &["write", ".git/config", "evil"]),
        (
            "plant .git/hooks/pre-commit",
            &["write", ".git/hooks/pre-commit", "evil"],
        ),
        ("remove .git/config", &["remove", ".git/config"]),
        ("move .git away", &["rename", ".git", "moved-git"]),
        (
            "move .git/hooks away",
            &["rename", ".git/hooks", "moved-hooks"],
        ),
    ];
    let mut checks = Forbidden::new(&ctx);
    for (what, args) in attacks {
        reset()?;
        let p = ctx.probe_run(with_carveout(args)).await?;
        p.report()?;
        let config = host_read(&git.join("config"));
        let config_changed = config.as_deref() != Some("original-config");
        let planted = hook.exists();
        let hooks_gone = !git.join("hooks").is_dir();
        checks.check(what, config_changed || planted || hooks_gone, || {
            if config_changed {
                format!(".git/config is now {config:?}")
            } else if planted {
                "a hook was planted in .git/hooks".into()
            } else {
                ".git/hooks is gone from its place".into()
            }
        });
    }
    checks.finish()
}

/// The directories a backend recorded as fixed by split rules (no entry created, removed
/// or renamed directly in them): the one way a carve-out may be held stricter than asked.
fn fixed_dirs(o: &sandbox_core::SandboxOutcome) -> Vec<PathBuf> {
    o.policy
        .enforced
        .iter()
        .filter_map(|e| match e {
            Enforced::Landlock(Landlock::CarveoutsFixed { dirs }) => Some(dirs.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// `a` and `b` name the same directory (the record may hold the resolved path).
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Grants that would undo the policy (cgroupfs, sysfs, procfs, devtmpfs, a container
/// engine's socket) are refused before anything runs, also when a symlink spells them.
pub async fn control_grants_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("control")?;
    std::os::unix::fs::symlink("/sys/fs/cgroup", ws.join("cg"))?;
    let mut cases: Vec<(&'static str, PathBuf)> = vec![
        ("writable_paths", PathBuf::from("/sys/fs/cgroup")),
        ("writable_paths", ws.join("cg")),
        ("writable_paths", PathBuf::from("/proc/sys")),
        ("read_only_paths", PathBuf::from("/sys")),
        ("writable_paths", PathBuf::from("/dev")),
    ];
    if Path::new("/run/docker.sock").exists() {
        cases.push(("read_only_paths", PathBuf::from("/run")));
        cases.push(("read_only_paths", PathBuf::from("/var/run")));
    }
    for (field, path) in cases {
        let mut opts = ctx.opts(ws.path(), ["exit", "0"]);
        if field == "writable_paths" {
            opts.writable_paths = vec![path.clone()];
        } else {
            opts.read_only_paths = vec![path.clone()];
        }
        let sb = ctx.sandbox();
        match sb.run(opts).await {
            Err(SandboxError::ControlGrant { field: f, .. }) if f == field => {}
            other => {
                return Err(Failure::Violation(format!(
                    "{field} {}: run gave {other:?}, not a control-grant refusal",
                    path.display()
                )))
            }
        }
        ensure!(
            matches!(sb.wait().await, Err(SandboxError::State { .. })),
            "{field} {}: something was started",
            path.display()
        );
    }
    Ok(())
}

/// A read grant of a tree with thousands of root-only entries runs, or is refused before
/// anything runs with a typed error; it never fails inside the launcher.
pub async fn large_read_grant_runs_or_is_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("large-grant")?;
    let _alone = ctx.temp_dir_exclusive().await;
    let big = ctx.dir("large-tree", 0o755)?;
    for i in 0..3500 {
        plant(&big.join(format!("secret-{i}")), "s", 0o600)?;
    }
    let mut opts = ctx.opts(ws.path(), ["exit", "0"]);
    opts.read_only_paths = vec![big.path().to_path_buf()];
    let sb = ctx.sandbox();
    match sb.run(opts).await {
        Ok(()) => {
            let out = sb.wait().await?;
            ensure!(
                out.status.success(),
                "the run started but failed: {}",
                describe(&out)
            );
        }
        Err(e @ (SandboxError::NotSupported { .. } | SandboxError::InvalidConfig { .. })) => {
            ensure!(
                matches!(sb.wait().await, Err(SandboxError::State { .. })),
                "refused ({e}), yet something was started"
            );
        }
        Err(e) => return Err(Failure::Broken(format!("neither ran nor refused: {e}"))),
    }
    // Removed while `_alone` still keeps out the cases that grant the whole temp dir.
    drop(big);
    Ok(())
}

/// A rename and a hard link across directories of the workspace work (as rustc moves its
/// `.rmeta` out of a temp directory), also with a read grant the command's user could not
/// otherwise reach (a directory under a `0700` one); judged from the host.
pub async fn cross_directory_rename_and_link(ctx: Arc<Context>) -> CaseResult {
    use std::os::unix::fs::MetadataExt;
    let ws = ctx.workspace("reparent")?;
    let private = ctx.dir("private-home", 0o700)?;
    let toolchain = private.join("toolchain");
    std::fs::create_dir(&toolchain)?;
    std::fs::set_permissions(&toolchain, std::fs::Permissions::from_mode(0o755))?;
    let t = token();
    plant(&toolchain.join("tool.txt"), &t, 0o644)?;
    for (label, read_only) in [
        ("no read grant", vec![]),
        ("a private read grant", vec![toolchain.clone()]),
    ] {
        for d in ["tmp-dir", "out"] {
            let _ = std::fs::remove_dir_all(ws.join(d));
            std::fs::create_dir(ws.join(d))?;
        }
        plant(&ws.join("tmp-dir/lib.rmeta"), "rmeta", 0o644)?;
        plant(&ws.join("tmp-dir/obj.o"), "obj", 0o644)?;
        if !read_only.is_empty() {
            let mut opts = ctx.opts(
                ws.path(),
                [OsStr::new("read"), os(&toolchain.join("tool.txt"))],
            );
            opts.read_only_paths = read_only.clone();
            let p = ctx.probe_run(opts).await?;
            ensure!(
                p.succeeded() && p.stdout_contains(&t),
                "with {label}: the granted file cannot be read: {}",
                p.describe()
            );
        }
        let mut opts = ctx.opts(ws.path(), ["rename", "tmp-dir/lib.rmeta", "out/lib.rmeta"]);
        opts.read_only_paths = read_only.clone();
        let p = ctx.probe_run(opts).await?;
        ensure!(
            p.succeeded()
                && host_read(&ws.join("out/lib.rmeta")).as_deref() == Some("rmeta")
                && !ws.join("tmp-dir/lib.rmeta").exists(),
            "with {label}: a rename from tmp-dir/ to out/ failed: {}",
            p.describe()
        );
        let mut opts = ctx.opts(ws.path(), ["link", "tmp-dir/obj.o", "out/obj.o"]);
        opts.read_only_paths = read_only.clone();
        let p = ctx.probe_run(opts).await?;
        let same = match (
            std::fs::metadata(ws.join("tmp-dir/obj.o")),
            std::fs::metadata(ws.join("out/obj.o")),
        ) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev() && a.nlink() == 2,
            _ => false,
        };
        ensure!(
            p.succeeded() && same,
            "with {label}: a hard link from tmp-dir/ to out/ failed (host sees the same \
             file under both names: {same}): {}",
            p.describe()
        );
        if !read_only.is_empty() && ctx.capability().confine_writes {
            // Reparenting is granted between writable places only: a link from the read
            // grant into the workspace stays refused (where the backend confines writes at
            // all; `none` grants everything, on the lane that accepts it).
            let stolen = ws.join("out/stolen.txt");
            let mut opts = ctx.opts(
                ws.path(),
                [
                    OsStr::new("link"),
                    os(&toolchain.join("tool.txt")),
                    os(&stolen),
                ],
            );
            opts.read_only_paths = read_only.clone();
            let p = ctx.probe_run(opts).await?;
            ensure!(
                !p.succeeded() && !stolen.exists(),
                "with {label}: a hard link from the read grant into the workspace was made: {}",
                p.describe()
            );
        }
    }
    Ok(())
}

/// A toolchain grant shows the toolchain, never the credentials in it: a world-readable
/// file planted at `.cargo/credentials.toml` of a granted home behind a `0700` directory
/// is unreadable inside and listed in the outcome; a backend that cannot hide it refuses
/// before anything runs.
pub async fn toolchain_credentials_hidden(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("toolchain")?;
    let home = ctx.dir("home", 0o700)?;
    let cargo = home.join(".cargo");
    std::fs::create_dir_all(cargo.join("bin"))?;
    for d in [&cargo, &cargo.join("bin")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
    }
    let t = token();
    plant(&cargo.join("config.toml"), &t, 0o644)?;
    let secret_token = format!("secret-{}", token());
    let secret = cargo.join("credentials.toml");
    // World-readable: only the sandbox can stop the read.
    plant(&secret, &secret_token, 0o644)?;
    let opts = |path: &Path| {
        let mut o = ctx.opts(ws.path(), [OsStr::new("read"), os(path)]);
        o.toolchains = vec![cargo.clone()];
        o
    };

    if !ctx.claimed().hide_paths {
        let sb = ctx.sandbox();
        return match sb.run(opts(&secret)).await {
            Err(SandboxError::NotSupported { .. }) => {
                ensure!(
                    matches!(sb.wait().await, Err(SandboxError::State { .. })),
                    "refused, yet something was started"
                );
                Ok(())
            }
            Ok(()) => {
                let out = sb.wait().await?;
                Err(Failure::Violation(format!(
                    "a backend that cannot hide credentials ran the toolchain grant: {}",
                    describe(&out)
                )))
            }
            Err(e) => Err(Failure::Broken(format!("neither ran nor refused: {e}"))),
        };
    }

    let p = ctx.probe_run(opts(&cargo.join("config.toml"))).await?;
    ensure!(
        p.succeeded() && p.stdout_contains(&t),
        "a file of the granted toolchain home cannot be read: {}",
        p.describe()
    );
    let p = ctx.probe_run(opts(&secret)).await?;
    p.report()?;
    let mut checks = Forbidden::new(&ctx);
    checks.check(
        "read the credentials of a granted toolchain home",
        p.succeeded() || p.stdout_contains(&secret_token),
        || format!("{} was read: {}", secret.display(), p.describe()),
    );
    checks.finish()?;
    ensure!(
        p.outcome.policy.hidden_paths == [secret.clone()],
        "the outcome lists {:?} as hidden, not {}",
        p.outcome.policy.hidden_paths,
        secret.display()
    );
    Ok(())
}
