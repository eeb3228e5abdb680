//! Root on the host is not root in the sandbox (checked only when the host is root).

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use super::CaseResult;
use crate::context::{token, Context, Failure, Forbidden};
use crate::host::owner_and_mode;

/// A root-only (0600) file in a directory the command may read stays unreadable.
pub async fn root_only_file_unreadable(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("rootfile")?;
    let dir = ctx.dir("root-only", 0o755)?;
    let public = dir.join("public.txt");
    let private = dir.join("private.txt");
    let secret = format!("root-secret-{}", token());
    std::fs::write(&public, "public")?;
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644))?;
    std::fs::write(&private, &secret)?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600))?;
    // The directory is granted, so only root's power could open the private file.
    let with_dir = |path: &std::path::Path| {
        let mut o = ctx.opts(ws.path(), [OsStr::new("read"), path.as_os_str()]);
        o.read_only_paths = vec![dir.path().to_path_buf()];
        o
    };
    let p = ctx.probe_run(with_dir(&public)).await?;
    ensure!(
        p.succeeded() && p.stdout_contains("public"),
        "a world-readable file in a granted directory cannot be read: {}",
        p.describe()
    );
    let p = ctx.probe_run(with_dir(&private)).await?;
    p.report()?;
    forbid!(
        p.succeeded() || p.stdout_contains(&secret),
        "the command read a root-only 0600 file with the host root's power"
    );
    Ok(())
}

/// The command cannot leave a setuid-root or setgid-root file in the workspace.
pub async fn no_setuid_root_left(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("setuid")?;
    let target = ws.join("suid-file");
    let p = ctx
        .probe_in(ws.path(), [OsStr::new("chmod-setuid"), target.as_os_str()])
        .await?;
    p.report()?;
    let Some((mode, uid, gid)) = owner_and_mode(&target) else {
        return Err(crate::Failure::Broken(format!(
            "the probe could not create a file in its workspace: {}",
            p.describe()
        )));
    };
    let mut checks = Forbidden::new(&ctx);
    checks.check("setuid root", mode & 0o4000 != 0 && uid == 0, || {
        format!("a setuid-root file was left in the workspace (mode {mode:o}, owner {uid})")
    });
    checks.check("setgid root", mode & 0o2000 != 0 && gid == 0, || {
        format!("a setgid-root file was left in the workspace (mode {mode:o}, group {gid})")
    });
    checks.finish()
}

/// On a root host, the command opens nothing in `/proc` (top level) or `/sys` that the
/// host's mode bits keep from an unprivileged user (`slabinfo`, `kpageflags`, ...): the
/// probe lists what it opened, and the host checks each path's mode itself.
pub async fn kernel_files_no_more_than_nobody(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("kernel-files")?;
    let mut f = Forbidden::new(&ctx);
    for (dir, depth) in [("/proc", "1"), ("/sys", "64")] {
        let p = ctx.probe_in(ws.path(), ["readable", dir, depth]).await?;
        if !p.succeeded() {
            return Err(Failure::Broken(format!("{dir}: {}", p.describe())));
        }
        let listed = p
            .field("readable")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        // Judged on the host: a file others cannot read here, opened in there.
        let over: Vec<&str> = listed
            .lines()
            .filter(|l| !l.is_empty())
            .filter(|l| {
                std::fs::symlink_metadata(l)
                    .map(|m| {
                        use std::os::unix::fs::MetadataExt;
                        m.mode() & 0o004 == 0
                    })
                    .unwrap_or(false)
            })
            .collect();
        f.check(
            &format!("root-only files in {dir} opened"),
            !over.is_empty(),
            || over.iter().take(12).copied().collect::<Vec<_>>().join(", "),
        );
    }
    f.finish()
}
