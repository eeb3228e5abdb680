//! Filesystem confinement, judged from the host: what the command wrote is looked for on
//! disk, what it read is looked for in its output.
//!
//! Writes outside the workspace and reads of planted secrets are the conformance suite's
//! cases (`fs::writes_outside_denied`, `fs::reads_outside_denied`); what is here is
//! landlock's own: listing, the system directories, its carve-out mechanisms, its records.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use sandbox_core::record::{Landlock, Namespaces, Seccomp};
use sandbox_core::{Backend, Enforced, SandboxError, SandboxExt, Status};

#[tokio::test(flavor = "multi_thread")]
async fn files_outside_the_grants_cannot_be_read_or_listed() {
    let ws = tempdir();
    let home = tempdir();
    let secret = home.path().join("id_ed25519");
    fs::write(&secret, "SECRET-KEY-MATERIAL").unwrap();
    fs::set_permissions(home.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
    let o = sh(
        ws.path(),
        &format!(
            "cat '{0}'; echo cat=$?; ls '{1}'; echo ls=$?",
            secret.display(),
            home.path().display()
        ),
    )
    .await;
    assert!(!out(&o).contains("SECRET"), "{}", out(&o));
    assert!(!out(&o).contains("id_ed25519"), "{}", out(&o));
    assert!(out(&o).contains("cat=1"), "{}", out(&o));
    assert!(out(&o).contains("ls=2"), "{}", out(&o));
    // The caller's real home is denied too (a file there is world-readable: only landlock
    // stands in the way).
    if let Some(h) = std::env::var_os("HOME") {
        let o = sh(
            ws.path(),
            &format!("ls '{}' ; echo ls=$?", h.to_string_lossy()),
        )
        .await;
        assert!(out(&o).contains("ls=2"), "{}", out(&o));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn system_directories_are_readable_but_not_writable() {
    let ws = tempdir();
    let o = sh(
        ws.path(),
        "head -c 4 /etc/passwd; echo; ls /usr/bin >/dev/null && echo listed; \
         touch /usr/lib/sandbox-probe-file; echo touch=$?; \
         echo x > /proc/self/comm; echo comm=$?; cat /proc/self/status | grep -c ^Pid",
    )
    .await;
    assert_ok(&o);
    let s = out(&o);
    assert!(s.starts_with("root"), "{s}");
    assert!(s.contains("listed"), "{s}");
    assert!(s.contains("touch=1"), "{s}");
    assert!(s.contains("comm=1") || s.contains("comm=2"), "{s}");
    assert!(!std::path::Path::new("/usr/lib/sandbox-probe-file").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn named_read_only_and_writable_paths_get_exactly_their_access() {
    let ws = tempdir();
    let ro = tempdir();
    let rw = tempdir();
    fs::write(ro.path().join("data"), "READABLE").unwrap();
    let mut o = opts(
        ws.path(),
        &[
            "sh",
            "-c",
            &format!(
                "cat '{r}/data'; echo no > '{r}/new'; echo rc=$?; echo yes > '{w}/new'",
                r = ro.path().display(),
                w = rw.path().display()
            ),
        ],
    );
    o.read_only_paths = vec![ro.path().into()];
    o.writable_paths = vec![rw.path().into()];
    let o = run(o).await;
    assert_ok(&o);
    assert!(out(&o).starts_with("READABLE"), "{}", out(&o));
    assert!(!ro.path().join("new").exists());
    assert_eq!(fs::read_to_string(rw.path().join("new")).unwrap(), "yes\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_outside_the_system_directories_runs_without_its_directory_opened() {
    let ws = tempdir();
    let tools = tempdir();
    let tool = tools.path().join("tool");
    fs::write(&tool, "#!/bin/sh\necho tool-ran\n").unwrap();
    fs::write(tools.path().join("neighbour"), "NEIGHBOUR").unwrap();
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();
    let o = run(opts(ws.path(), &[tool.as_os_str()])).await;
    assert_ok(&o);
    assert_eq!(out(&o), "tool-ran\n");
    let o = sh(
        ws.path(),
        &format!(
            "cat '{}'; echo rc=$?",
            tools.path().join("neighbour").display()
        ),
    )
    .await;
    assert!(!out(&o).contains("NEIGHBOUR") && out(&o).contains("rc=1"));
}

fn git_like(ws: &std::path::Path) {
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::create_dir_all(ws.join(".git/objects")).unwrap();
    fs::create_dir_all(ws.join("src")).unwrap();
    fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    fs::write(ws.join("README"), "readme\n").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn carveouts_stay_read_only_and_the_rest_stays_writable() {
    let ws = tempdir();
    git_like(ws.path());
    let mut o = opts(
        ws.path(),
        &[
            "sh",
            "-c",
            "echo evil > .git/hooks/pre-commit; echo hook=$?; \
             echo evil > .git/hooks/post-checkout; echo newhook=$?; \
             rm -f .git/hooks/pre-commit; echo rm=$?; \
             echo evil >> .git/config; echo config=$?; \
             mv .git .git-old; echo mv=$?; \
             echo ok > src/main.rs; echo src=$?; \
             mkdir -p src/new && echo ok > src/new/file; echo newsrc=$?; \
             echo ok > .git/objects/obj; echo obj=$?; \
             echo ok >> README; echo readme=$?; \
             echo ok > toplevel-new; echo top=$?; \
             cat .git/hooks/pre-commit >/dev/null; echo read=$?",
        ],
    );
    o.readonly_carveouts = vec![".git/hooks".into(), ".git/config".into()];
    let o = run(o).await;
    let s = out(&o);
    for denied in ["hook=", "newhook=", "rm=", "config=", "mv="] {
        assert!(
            !s.contains(&format!("{denied}0")),
            "{denied} succeeded: {s}"
        );
    }
    // On this host a mount namespace can be made, so the carve-outs are read-only
    // mounts and the rest of the workspace, its top level included, stays writable.
    for allowed in ["src=0", "newsrc=0", "obj=0", "readme=0", "read=0", "top=0"] {
        assert!(s.contains(allowed), "{allowed} missing: {s}\n{}", err(&o));
    }
    // From the host: the carve-outs are untouched, the rest changed.
    let ws = ws.path();
    assert_eq!(
        fs::read_to_string(ws.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!ws.join(".git/hooks/post-checkout").exists());
    assert_eq!(
        fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(ws.join(".git").is_dir() && !ws.join(".git-old").exists());
    assert_eq!(fs::read_to_string(ws.join("src/main.rs")).unwrap(), "ok\n");
    assert_eq!(fs::read_to_string(ws.join("src/new/file")).unwrap(), "ok\n");
    assert_eq!(
        fs::read_to_string(ws.join("README")).unwrap(),
        "readme\nok\n"
    );
    assert_eq!(fs::read_to_string(ws.join("toplevel-new")).unwrap(), "ok\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_carveout_inside_a_writable_path_stays_read_only_and_in_place() {
    let ws = tempdir();
    git_like(ws.path());
    let ws_path = ws.path().canonicalize().unwrap();
    let parent = ws_path.parent().unwrap().to_path_buf();
    let name = ws_path.file_name().unwrap().to_string_lossy().into_owned();
    let script = format!(
        "echo evil > .git/hooks/pre-commit; echo hook=$?; \
         mv .git .git-old; echo mvgit=$?; \
         mv '{ws}' '{ws}-moved'; echo mvws=$?; \
         cd .git/hooks && echo evil > post-merge; echo cwd=$?",
        ws = ws_path.display()
    );
    let mut o = opts(ws.path(), &["sh", "-c", &script]);
    o.readonly_carveouts = vec![".git/hooks".into()];
    o.writable_paths = vec![parent.clone()];
    let o = run(o).await;
    let s = out(&o);
    for denied in ["hook=0", "mvgit=0", "mvws=0", "cwd=0"] {
        assert!(!s.contains(denied), "{denied}: {s}");
    }
    assert_eq!(
        fs::read_to_string(ws_path.join(".git/hooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!ws_path.join(".git/hooks/post-merge").exists());
    assert!(!parent.join(format!("{name}-moved")).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn carveouts_are_named_in_the_effective_policy() {
    let ws = tempdir();
    git_like(ws.path());
    let mut o = opts(ws.path(), &["true"]);
    o.readonly_carveouts = vec![".git/hooks".into()];
    let o = run(o).await;
    assert_ok(&o);
    assert!(
        o.policy
            .grants
            .iter()
            .any(|g| g.what.contains("carve-outs") && g.enforcement.is_exact()),
        "{:?}",
        o.policy.grants
    );
    assert!(
        o.policy.enforced.iter().any(|e| match e {
            Enforced::Namespaces(Namespaces::CarveoutsBound { dirs })
            | Enforced::Landlock(Landlock::CarveoutsFixed { dirs }) => dirs
                .iter()
                .any(|d| d.starts_with(ws.path().canonicalize().unwrap())),
            _ => false,
        }),
        "{:?}",
        o.policy.enforced
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn carveouts_that_cannot_be_enforced_are_refused_before_anything_runs() {
    let ws = tempdir();
    git_like(ws.path());
    let marker = ws.path().join("ran");
    let argv = [
        "sh".to_string(),
        "-c".into(),
        format!("touch '{}'", marker.display()),
    ];

    // A hard-linked file inside the carve-out.
    fs::hard_link(
        ws.path().join(".git/hooks/pre-commit"),
        ws.path().join("src/innocent"),
    )
    .unwrap();
    let mut o = opts(ws.path(), &argv);
    o.readonly_carveouts = vec![".git/hooks".into()];
    let e = backend().sandbox().execute(o).await.unwrap_err();
    assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
    assert!(e.to_string().contains("hard link"), "{e}");

    // A writable path inside the carve-out.
    fs::remove_file(ws.path().join("src/innocent")).unwrap();
    let mut o = opts(ws.path(), &argv);
    o.readonly_carveouts = vec![".git".into()];
    o.writable_paths = vec![ws.path().join(".git/objects")];
    let e = backend().sandbox().execute(o).await.unwrap_err();
    assert!(matches!(e, SandboxError::InvalidConfig { .. }), "{e}");

    assert!(!marker.exists(), "a refused run ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn setuid_bits_cannot_be_set_and_none_is_left_behind() {
    let ws = tempdir();
    fs::write(ws.path().join("f"), "x").unwrap();
    let o = sh(
        ws.path(),
        "chmod u+s f; echo chmod=$?; chmod g+s f; echo chmodg=$?; chmod 755 f; echo plain=$?",
    )
    .await;
    let s = out(&o);
    assert!(s.contains("chmod=1") && s.contains("chmodg=1"), "{s}");
    assert!(s.contains("plain=0"), "{s}");
    let mode = fs::metadata(ws.path().join("f"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
}

/// A root host: the command runs without any capability, as an unprivileged id to which
/// the root-owned workspace is handed over (see `root.rs` for both of a root host's paths),
/// and root-only system files stay closed.
#[tokio::test(flavor = "multi_thread")]
async fn as_root_no_capability_survives_and_root_only_files_stay_closed() {
    let ws = tempdir();
    let o = sh(
        ws.path(),
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)|^NoNewPrivs|^Seccomp:' /proc/self/status; \
         id -u; cat /etc/shadow >/dev/null; echo shadow=$?",
    )
    .await;
    assert_ok(&o);
    let s = out(&o);
    assert!(s.contains("NoNewPrivs:\t1"), "{s}");
    assert!(s.contains("Seccomp:\t2"), "{s}");
    assert!(s.contains("shadow=1"), "{s}");
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert!(
            s.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {s}"
        );
    }
    if is_root() {
        assert!(s.contains("CapBnd:\t0000000000000000"), "{s}");
        let spare = sandbox_host::idmap::SPARE_COMMAND_ID.to_string();
        assert!(s.lines().any(|l| l == spare), "runs as {spare}: {s}");
        // A root-owned workspace stays writable, and what is made there is root's.
        let o = sh(ws.path(), "echo w > owned-by-root").await;
        assert_ok(&o);
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(ws.path().join("owned-by-root")).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_outcome_records_the_abi_and_the_layers() {
    let ws = tempdir();
    let o = run(opts(ws.path(), &["true"])).await;
    assert_eq!(o.status, Status::Exited { code: 0 });
    let e = &o.policy.enforced;
    assert!(
        e.iter()
            .any(|e| matches!(e, Enforced::Landlock(Landlock::Ruleset { abi, .. }) if *abi >= 3)),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| matches!(e, Enforced::Seccomp(Seccomp::SharedFilter { .. }))),
        "{e:?}"
    );
    assert_eq!(o.policy.tree_kill, Some(sandbox_core::TreeKill::Subreaper));
}

/// A root host: a root-only file inside a named read-only directory stays closed (the
/// command reads as an unprivileged user would), while the public file next to it is read.
#[tokio::test(flavor = "multi_thread")]
async fn root_only_files_in_read_only_paths_stay_closed() {
    let ws = tempdir();
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.path().join("public"), "PUBLIC").unwrap();
    fs::set_permissions(dir.path().join("public"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(dir.path().join("private"), "PRIVATE").unwrap();
    fs::set_permissions(
        dir.path().join("private"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut o = opts(
        ws.path(),
        &[
            "sh",
            "-c",
            &format!(
                "cat '{d}/public'; echo; cat '{d}/private'; echo private=$?",
                d = dir.path().display()
            ),
        ],
    );
    o.read_only_paths = vec![dir.path().into()];
    let o = run(o).await;
    let s = out(&o);
    assert!(s.starts_with("PUBLIC"), "{s} {}", err(&o));
    if is_root() {
        assert!(!s.contains("PRIVATE") && s.contains("private=1"), "{s}");
    } else {
        // The file is the user's own: readable, as without a sandbox.
        assert!(s.contains("PRIVATE"), "{s}");
    }
}

/// Landlock has no right for modes or timestamps; the read-only mount namespace keeps them
/// unchanged outside the writable places (also in a granted read-only directory).
#[tokio::test(flavor = "multi_thread")]
async fn modes_and_timestamps_outside_the_workspace_do_not_change() {
    let ws = tempdir();
    let outside = tempdir();
    let granted = tempdir();
    let mut files = Vec::new();
    for dir in [outside.path(), granted.path()] {
        let f = dir.canonicalize().unwrap().join("file");
        fs::write(&f, "x").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        files.push(f);
    }
    let before: Vec<_> = files
        .iter()
        .map(|f| fs::metadata(f).unwrap().modified().unwrap())
        .collect();
    let script: String = files
        .iter()
        .map(|f| {
            format!(
                "chmod 666 '{f}'; echo chmod=$?; touch -d 2001-01-01 '{f}'; echo touch=$?; ",
                f = f.display()
            )
        })
        .collect();
    let mut o = opts(ws.path(), &["sh", "-c", &script]);
    o.read_only_paths = vec![granted.path().into()];
    let o = run(o).await;
    let s = out(&o);
    assert!(!s.contains("chmod=0") && !s.contains("touch=0"), "{s}");
    for (f, t) in files.iter().zip(before) {
        let m = fs::metadata(f).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640, "{}", f.display());
        assert_eq!(m.modified().unwrap(), t, "{}", f.display());
    }
    assert!(
        o.policy
            .enforced
            .contains(&Namespaces::MountsReadOnly.into()),
        "{:?}",
        o.policy.enforced
    );
}
