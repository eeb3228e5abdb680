//! The "no wider than asked" property and the fixture tree its paths come from, shared by
//! the property tests and the `cargo fuzz` target (which includes this file by path), so both
//! draw the same shapes and judge an accepted plan the same way.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sandbox_core::{Capability, Lane, NetworkMode, Plan, SandboxOpts};

/// The fixture tree, made once per process and kept for its life: a workspace with a
/// symlink out of it, one inside it, a dangling one, and a link to the workspace itself.
pub fn fixture() -> &'static Path {
    static ROOT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, root) = ROOT.get_or_init(|| {
        let d = tempfile::tempdir().expect("tempdir");
        let r = d.path().canonicalize().expect("canonical");
        for dir in ["ws/sub/deep", "outside", "ro", "rw"] {
            std::fs::create_dir_all(r.join(dir)).expect("mkdir");
        }
        std::fs::write(r.join("ws/file.txt"), "x").expect("write");
        std::fs::write(r.join("outside/secret"), "s").expect("write");
        let link = |target: &str, at: &str| {
            std::os::unix::fs::symlink(target, r.join(at)).expect("symlink");
        };
        link("../outside", "ws/link_out");
        link("sub", "ws/link_in");
        link("/nonexistent-target", "ws/dangling");
        link("ws", "ws_link");
        (d, r)
    });
    root
}

/// Path components the generated paths are made of: the fixture's names, `..`, `.`, the
/// empty one, a missing name, non-ASCII, a newline and something that looks like a flag.
pub const COMPONENTS: &[&str] = &[
    "ws",
    "sub",
    "deep",
    "outside",
    "ro",
    "rw",
    "ws_link",
    "link_out",
    "link_in",
    "dangling",
    "file.txt",
    "..",
    ".",
    "",
    "missing",
    "é",
    "line\nbreak",
    "-rf",
];

fn canonical(p: &Path) -> Option<PathBuf> {
    p.canonicalize().ok()
}

/// How the accepted `plan` is wider than `opts` asked of a backend with `cap`; empty when
/// it is not.
pub fn violations(opts: &SandboxOpts, cap: &Capability, plan: &Plan) -> Vec<String> {
    let mut v = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            v.push(what);
        }
    };
    check(
        plan.argv == opts.argv,
        format!("argv changed: {:?}", plan.argv),
    );
    let ws = canonical(&opts.workspace);
    check(
        ws.as_ref() == Some(&plan.workspace) && plan.workspace.is_dir(),
        format!(
            "workspace {:?} is not the asked one resolved",
            plan.workspace
        ),
    );
    check(
        plan.cwd.starts_with(&plan.workspace),
        format!("cwd {:?} outside the workspace", plan.cwd),
    );
    for c in &plan.readonly_carveouts {
        check(
            c.starts_with(&plan.workspace),
            format!("carve-out {c:?} outside the workspace"),
        );
    }
    // Extra paths: exactly the ones named, each resolved, nothing added.
    check(
        plan.read_only_paths.len() == opts.read_only_paths.len()
            && plan
                .read_only_paths
                .iter()
                .zip(&opts.read_only_paths)
                .all(|(got, asked)| Some(got) == canonical(asked).as_ref()),
        format!(
            "read grants {:?} are not the asked ones",
            plan.read_only_paths
        ),
    );
    check(
        plan.writable_paths.len() == opts.writable_paths.len()
            && plan
                .writable_paths
                .iter()
                .zip(&opts.writable_paths)
                .all(|(got, asked)| Some(got) == canonical(asked).as_ref()),
        format!(
            "write grants {:?} are not the asked ones",
            plan.writable_paths
        ),
    );
    for f in &plan.capture_files {
        check(
            !f.is_absolute() && !f.components().any(|c| c.as_os_str() == ".."),
            format!("captured file {f:?} may leave the workspace"),
        );
    }
    check(plan.network == opts.network, "network mode changed".into());
    check(plan.lane == opts.lane, "lane changed".into());
    check(plan.limits == opts.limits, "limits changed".into());
    check(plan.snapshot == opts.snapshot, "snapshot changed".into());
    // The environment: the base three, the named pass-throughs and the named pairs only; a
    // pair's value exactly as given (the last one of a name wins).
    for (k, val) in &plan.env {
        let k = k.to_string_lossy();
        let named = ["PATH", "HOME", "LANG"].contains(&k.as_ref())
            || opts.env.pass.iter().any(|p| *p == k)
            || opts.env.set.iter().any(|(n, _)| *n == k);
        check(named, format!("variable {k} was not asked for"));
        if let Some((_, want)) = opts.env.set.iter().rev().find(|(n, _)| *n == k) {
            check(val == want, format!("variable {k} has another value"));
        }
    }
    // Only the trusted lane accepts an over-grant, but for one row of the lane table:
    // `fast` accepts (and records) the network state left readable where `none` or
    // `proxy` is exact without a network namespace of its own; `strict` never does.
    for g in &plan.grants {
        let disclosure = g.what == sandbox_core::admission::NETWORK_STATE_UNSEEN
            && matches!(opts.network, NetworkMode::None | NetworkMode::Proxy)
            && !cap.network_state_private;
        check(
            opts.lane == Lane::Trusted
                || g.enforcement.is_exact()
                || (opts.lane == Lane::Fast && disclosure),
            format!("{g:?} on the {} lane", opts.lane),
        );
    }
    let policy = plan.effective_policy("prop");
    if opts.lane != Lane::Trusted {
        check(
            opts.network == NetworkMode::Full || !policy.can_reach_network(),
            "network beyond the private loopback".into(),
        );
        check(
            !cap.confine_writes || !policy.can_write_beyond_workspace(),
            "writes beyond the workspace".into(),
        );
    }
    v
}
