//! The policy, knob by knob, without spawning anything. Plans are built by core's
//! `Plan::new` on real temporary directories (it canonicalises paths), then handed to
//! `build` with a host layout written out here.

use std::os::unix::fs::PermissionsExt;

use sandbox_core::{Capability, SandboxError, SandboxOpts};

use super::*;

fn cap() -> Capability {
    Capability {
        change_layer: None,
        ..Capability::everything()
    }
}

fn merged() -> Vec<(PathBuf, SystemEntry)> {
    vec![
        ("/usr".into(), SystemEntry::Dir),
        ("/etc".into(), SystemEntry::Dir),
        ("/opt".into(), SystemEntry::Absent),
        ("/nix/store".into(), SystemEntry::Absent),
        ("/bin".into(), SystemEntry::Symlink("usr/bin".into())),
        ("/sbin".into(), SystemEntry::Symlink("usr/sbin".into())),
        ("/lib".into(), SystemEntry::Symlink("usr/lib".into())),
        ("/lib64".into(), SystemEntry::Symlink("usr/lib64".into())),
        ("/lib32".into(), SystemEntry::Absent),
        ("/libx32".into(), SystemEntry::Absent),
    ]
}

fn unmerged() -> Vec<(PathBuf, SystemEntry)> {
    vec![
        ("/usr".into(), SystemEntry::Dir),
        ("/etc".into(), SystemEntry::Dir),
        ("/opt".into(), SystemEntry::Dir),
        ("/nix/store".into(), SystemEntry::Dir),
        ("/bin".into(), SystemEntry::Dir),
        ("/sbin".into(), SystemEntry::Dir),
        ("/lib".into(), SystemEntry::Dir),
        ("/lib64".into(), SystemEntry::Dir),
        ("/lib32".into(), SystemEntry::Absent),
        ("/libx32".into(), SystemEntry::Absent),
    ]
}

fn proc_entries() -> &'static [String] {
    static PROC: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PROC.get_or_init(|| {
        // The last: a root-only file no list names, as a module may add one (the host
        // walk finds such files; see `host::root_only_proc_files`).
        [
            "/proc/sys",
            "/proc/sysrq-trigger",
            "/proc/keys",
            "/proc/added_by_a_module",
        ]
        .map(String::from)
        .to_vec()
    })
}

fn layout(system: &[(PathBuf, SystemEntry)]) -> Layout<'_> {
    Layout {
        system,
        resolv_conf: None,
        proc_entries: proc_entries(),
        disable_userns: true,
        scope_abstract_unix: true,
    }
}

const FDS: Fds = Fds {
    seccomp: 10,
    waiter: 11,
    status: 12,
    ready: 14,
    proxy: None,
};

struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }
    fn sub(&self, name: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    fn opts(&self) -> SandboxOpts {
        SandboxOpts::new(self.path(), ["sh", "-c", "true"])
    }
}

fn plan(opts: &SandboxOpts) -> Plan {
    Plan::new(opts, "bwrap", &cap()).unwrap()
}

fn args_of(plan: &Plan, sys: &[(PathBuf, SystemEntry)]) -> BwrapArgs {
    build(plan, &layout(sys), &[], FDS).unwrap()
}

/// The options as (flag, its arguments), by bwrap's arity of each flag.
fn parse(args: &BwrapArgs) -> Vec<(String, Vec<String>)> {
    let arity = |f: &str| match f {
        "--setenv" | "--ro-bind" | "--bind" | "--ro-bind-try" | "--symlink" | "--ro-bind-data" => 2,
        "--size" | "--cap-drop" | "--seccomp" | "--tmpfs" | "--proc" | "--dev" | "--dir"
        | "--perms" | "--remount-ro" | "--chdir" => 1,
        f if f.starts_with("--unshare-")
            || matches!(
                f,
                "--disable-userns"
                    | "--die-with-parent"
                    | "--new-session"
                    | "--clearenv"
                    | "--as-pid-1"
            ) =>
        {
            0
        }
        other => panic!("unexpected bwrap option {other}"),
    };
    let s: Vec<String> = args
        .options
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let n = arity(&s[i]);
        out.push((s[i].clone(), s[i + 1..i + 1 + n].to_vec()));
        i += 1 + n;
    }
    out
}

fn has(ops: &[(String, Vec<String>)], flag: &str, args: &[&str]) -> bool {
    position(ops, flag, args).is_some()
}

fn position(ops: &[(String, Vec<String>)], flag: &str, args: &[&str]) -> Option<usize> {
    ops.iter().position(|(f, a)| f == flag && a == args)
}

fn dests(ops: &[(String, Vec<String>)], flag: &str) -> Vec<String> {
    ops.iter()
        .filter(|(f, _)| f == flag)
        .map(|(_, a)| a.last().cloned().unwrap_or_default())
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_namespace_is_unshared_and_net_only_without_full() {
    let ws = Ws::new();
    for (mode, net) in [
        (NetworkMode::None, true),
        (NetworkMode::Loopback, true),
        (NetworkMode::Full, false),
    ] {
        let mut o = ws.opts();
        o.network = mode;
        let ops = parse(&args_of(&plan(&o), &merged()));
        for f in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--as-pid-1",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--disable-userns",
        ] {
            assert!(has(&ops, f, &[]), "{f} missing for {mode}");
        }
        assert!(has(&ops, "--cap-drop", &["ALL"]));
        assert_eq!(has(&ops, "--unshare-net", &[]), net, "{mode}");
    }
}

#[test]
fn the_host_root_is_never_bound_wholesale() {
    let ws = Ws::new();
    let extra = Ws::new();
    let mut o = ws.opts();
    o.read_only_paths = vec![extra.path()];
    o.network = NetworkMode::Full;
    for sys in [merged(), unmerged()] {
        let ops = parse(&args_of(&plan(&o), &sys));
        for (f, a) in &ops {
            if matches!(f.as_str(), "--bind" | "--ro-bind" | "--ro-bind-try") {
                assert_ne!(a[0], "/", "{f} {a:?}");
                assert_ne!(a[1], "/", "{f} {a:?}");
            }
        }
    }
    // Nor when the caller names it.
    for field in ["read_only_paths", "writable_paths"] {
        // Core's plan refuses `/` already (it holds control mounts); the argv builder is
        // the second line, checked on a plan that carries it anyway.
        let mut pl = plan(&ws.opts());
        if field == "read_only_paths" {
            pl.read_only_paths = vec!["/".into()];
        } else {
            pl.writable_paths = vec!["/".into()];
        }
        let e = SandboxError::from(build(&pl, &layout(&merged()), &[], FDS).unwrap_err());
        assert!(
            matches!(e, SandboxError::InvalidConfig { field: f, .. } if f == field),
            "{e}"
        );
    }
}

#[test]
fn an_unnamed_environment_variable_never_appears() {
    std::env::set_var("SANDBOX_BWRAP_ARGV_SECRET", "hunter2");
    std::env::set_var("SANDBOX_BWRAP_ARGV_PASSED", "yes");
    let ws = Ws::new();
    let mut o = ws.opts();
    o.env.pass.push("SANDBOX_BWRAP_ARGV_PASSED".into());
    o.env.set.push(("FOO".into(), "bar baz".into()));
    let args = args_of(&plan(&o), &merged());
    let all: Vec<String> = args
        .options
        .iter()
        .chain(&args.command)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert!(!all.iter().any(|a| a.contains("SANDBOX_BWRAP_ARGV_SECRET")));
    assert!(!all.iter().any(|a| a.contains("hunter2")));
    let ops = parse(&args);
    let set: Vec<&str> = ops
        .iter()
        .filter(|(f, _)| f == "--setenv")
        .map(|(_, a)| a[0].as_str())
        .collect();
    assert_eq!(
        set,
        ["PATH", "HOME", "LANG", "SANDBOX_BWRAP_ARGV_PASSED", "FOO"]
    );
    assert!(has(&ops, "--setenv", &["FOO", "bar baz"]));
    let clear = position(&ops, "--clearenv", &[]).unwrap();
    let first_set = ops.iter().position(|(f, _)| f == "--setenv").unwrap();
    assert!(clear < first_set);
}

#[test]
fn merged_usr_is_recreated_as_the_hosts_symlinks() {
    let ws = Ws::new();
    let ops = parse(&args_of(&plan(&ws.opts()), &merged()));
    for (link, target) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        assert!(has(&ops, "--symlink", &[target, link]), "{link}");
        assert!(!has(&ops, "--ro-bind", &[link, link]), "{link}");
    }
    assert!(has(&ops, "--ro-bind", &["/usr", "/usr"]));
    assert!(has(&ops, "--ro-bind", &["/etc", "/etc"]));
    // Absent on this host: not bound.
    for absent in ["/opt", "/nix/store", "/lib32"] {
        assert!(!dests(&ops, "--ro-bind").contains(&absent.to_string()));
        assert!(!dests(&ops, "--symlink").contains(&absent.to_string()));
    }
}

#[test]
fn unmerged_system_directories_are_bound_read_only() {
    let ws = Ws::new();
    let ops = parse(&args_of(&plan(&ws.opts()), &unmerged()));
    for d in [
        "/usr",
        "/etc",
        "/opt",
        "/nix/store",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
    ] {
        assert!(has(&ops, "--ro-bind", &[d, d]), "{d}");
    }
    assert!(dests(&ops, "--symlink").is_empty());
}

#[test]
fn fresh_proc_dev_and_private_tmpfs() {
    let ws = Ws::new();
    let ops = parse(&args_of(&plan(&ws.opts()), &merged()));
    assert!(has(&ops, "--proc", &["/proc"]));
    assert!(has(&ops, "--dev", &["/dev"]));
    for d in ["/tmp", "/home", "/root", "/run"] {
        assert!(has(&ops, "--tmpfs", &[d]), "{d}");
    }
    // /proc/sys read-only over the fresh /proc; host-wide entries hidden.
    let proc = position(&ops, "--proc", &["/proc"]).unwrap();
    let sys = position(&ops, "--ro-bind-try", &["/proc/sys", "/proc/sys"]).unwrap();
    assert!(proc < sys);
    assert!(has(
        &ops,
        "--ro-bind-try",
        &["/proc/sysrq-trigger", "/proc/sysrq-trigger"]
    ));
    assert!(has(&ops, "--ro-bind", &["/dev/null", "/proc/keys"]));
    assert!(has(
        &ops,
        "--ro-bind",
        &["/dev/null", "/proc/added_by_a_module"]
    ));
}

#[test]
fn the_workspace_is_the_only_writable_bind_unless_more_are_named() {
    let ws = Ws::new();
    let ops1 = parse(&args_of(&plan(&ws.opts()), &merged()));
    assert_eq!(dests(&ops1, "--bind"), [s(&ws.path())]);

    let extra = Ws::new();
    let ro = Ws::new();
    let mut o = ws.opts();
    o.writable_paths = vec![extra.path()];
    o.read_only_paths = vec![ro.path()];
    let ops2 = parse(&args_of(&plan(&o), &merged()));
    let mut binds = dests(&ops2, "--bind");
    binds.sort();
    let mut want = vec![
        ws.path().display().to_string(),
        extra.path().display().to_string(),
    ];
    want.sort();
    assert_eq!(binds, want);
    assert!(has(&ops2, "--ro-bind", &[s(&ro.path()), s(&ro.path())]));
}

#[test]
fn carveouts_are_read_only_on_top_of_the_workspace() {
    let ws = Ws::new();
    let git = ws.sub(".git/hooks");
    let mut o = ws.opts();
    o.readonly_carveouts = vec![".git/hooks".into()];
    let ops = parse(&args_of(&plan(&o), &merged()));
    let w = position(&ops, "--bind", &[s(&ws.path()), s(&ws.path())]).unwrap();
    let c = position(&ops, "--ro-bind", &[s(&git), s(&git)]).unwrap();
    assert!(w < c, "the carve-out must be mounted after the workspace");
    assert!(!dests(&ops, "--bind").contains(&git.display().to_string()));
}

#[test]
fn the_directories_on_the_way_to_a_carveout_are_pinned_by_a_bind_onto_themselves() {
    let ws = Ws::new();
    let hooks = ws.sub("vendor/lib/.git/hooks");
    let mut o = ws.opts();
    o.readonly_carveouts = vec!["vendor/lib/.git/hooks".into()];
    let ops = parse(&args_of(&plan(&o), &merged()));
    let w = position(&ops, "--bind", &[s(&ws.path()), s(&ws.path())]).unwrap();
    let mut last = w;
    for d in ["vendor", "vendor/lib", "vendor/lib/.git"] {
        let d = ws.path().join(d);
        let at = position(&ops, "--bind", &[s(&d), s(&d)])
            .unwrap_or_else(|| panic!("{} is not pinned", d.display()));
        assert!(last < at, "{} before its parent", d.display());
        last = at;
    }
    let c = position(&ops, "--ro-bind", &[s(&hooks), s(&hooks)]).unwrap();
    assert!(
        last < c,
        "the carve-out goes on top of the pinned directories"
    );
}

#[test]
fn nested_paths_land_on_top_of_their_parent_whichever_list_they_came_from() {
    // A workspace inside a read-only path, a read-only path inside the workspace, a
    // writable path inside a read-only one.
    let outer = Ws::new();
    let ws_path = outer.sub("proj");
    let vendor = outer.sub("proj/vendor");
    let cache = outer.sub("cache");
    let mut o = SandboxOpts::new(&ws_path, ["true"]);
    o.read_only_paths = vec![outer.path(), vendor.clone()];
    o.writable_paths = vec![cache.clone()];
    let ops = parse(&args_of(&plan(&o), &merged()));
    let p_outer = position(&ops, "--ro-bind", &[s(&outer.path()), s(&outer.path())]).unwrap();
    let p_ws = position(&ops, "--bind", &[s(&ws_path), s(&ws_path)]).unwrap();
    let p_vendor = position(&ops, "--ro-bind", &[s(&vendor), s(&vendor)]).unwrap();
    let p_cache = position(&ops, "--bind", &[s(&cache), s(&cache)]).unwrap();
    assert!(p_outer < p_ws && p_ws < p_vendor && p_outer < p_cache);
    // And the private /tmp is mounted before anything under it.
    let tmp = position(&ops, "--tmpfs", &["/tmp"]).unwrap();
    if outer.path().starts_with("/tmp") {
        assert!(tmp < p_outer);
    }
}

#[test]
fn a_path_named_twice_gets_the_one_mount_that_was_meant() {
    let ws = Ws::new();
    let both = Ws::new();
    let sub = ws.sub("gen");
    let mut o = ws.opts();
    // Twice read-only: one mount. Read-only and writable: writable (a grant of writing
    // includes reading). The workspace named read-only too: still writable. A carve-out
    // also named writable: the restriction wins.
    o.read_only_paths = vec![both.path(), both.path(), ws.path()];
    o.writable_paths = vec![both.path(), sub.clone()];
    o.readonly_carveouts = vec!["gen".into()];
    let ops = parse(&args_of(&plan(&o), &merged()));
    let count = |p: &Path| {
        ops.iter()
            .filter(|(f, a)| f.contains("bind") && a.last().map(String::as_str) == Some(s(p)))
            .count()
    };
    for p in [both.path(), ws.path(), sub.clone()] {
        assert_eq!(count(&p), 1, "{}", p.display());
    }
    assert!(has(&ops, "--bind", &[s(&both.path()), s(&both.path())]));
    assert!(has(&ops, "--bind", &[s(&ws.path()), s(&ws.path())]));
    assert!(has(&ops, "--ro-bind", &[s(&sub), s(&sub)]));
}

#[test]
fn a_named_path_replaces_the_system_mount_at_the_same_place() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.writable_paths = vec!["/tmp".into()];
    let tmp = std::fs::canonicalize("/tmp").unwrap();
    let ops = parse(&args_of(&plan(&o), &merged()));
    assert!(has(&ops, "--bind", &[s(&tmp), s(&tmp)]));
    assert!(!has(&ops, "--tmpfs", &[s(&tmp)]));
}

#[test]
fn proc_and_dev_cannot_be_granted() {
    let ws = Ws::new();
    for p in ["/proc/self", "/dev", "/proc"] {
        // Core's plan refuses these already (control filesystems); the argv builder is
        // the second line, checked on a plan that carries them anyway.
        let mut pl = plan(&ws.opts());
        pl.read_only_paths = vec![p.into()];
        let e = build(&pl, &layout(&merged()), &[], FDS).unwrap_err();
        assert!(matches!(e, BwrapError::Path { .. }), "{p}: {e}");
    }
    // A path under /dev is a plain grant, mounted over the fresh /dev.
    let mut o = ws.opts();
    o.writable_paths = vec!["/dev/shm".into()];
    let ops = parse(&args_of(&plan(&o), &merged()));
    let dev = position(&ops, "--dev", &["/dev"]).unwrap();
    let shm = position(&ops, "--bind", &["/dev/shm", "/dev/shm"]).unwrap();
    assert!(dev < shm);
}

#[test]
fn a_program_outside_the_grants_is_bound_alone_read_only() {
    let ws = Ws::new();
    let elsewhere = Ws::new();
    let prog = elsewhere.path().join("tool");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = SandboxOpts::new(ws.path(), [prog.as_os_str()]);
    let ops = parse(&args_of(&plan(&o), &merged()));
    assert!(has(&ops, "--ro-bind", &[s(&prog), s(&prog)]));
    assert!(!dests(&ops, "--ro-bind").contains(&elsewhere.path().display().to_string()));
    assert!(!dests(&ops, "--bind").contains(&prog.display().to_string()));
    // After the private /tmp it lives in.
    if prog.starts_with("/tmp") {
        assert!(
            position(&ops, "--tmpfs", &["/tmp"]).unwrap()
                < position(&ops, "--ro-bind", &[s(&prog), s(&prog)]).unwrap()
        );
    }
    // Shown by a grant already: no extra mount.
    let inside = ws.path().join("tool");
    std::fs::copy(&prog, &inside).unwrap();
    let o = SandboxOpts::new(ws.path(), [inside.as_os_str()]);
    let ops = parse(&args_of(&plan(&o), &merged()));
    assert!(!dests(&ops, "--ro-bind").contains(&inside.display().to_string()));
    let ops = parse(&args_of(&plan(&ws.opts()), &merged()));
    assert!(!ops
        .iter()
        .any(|(_, a)| a.iter().any(|x| x.ends_with("/dash") || x.ends_with("/sh"))));
}

#[test]
fn home_inside_a_private_tmpfs_is_created_there() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.env.set.push(("HOME".into(), "/home/agent".into()));
    let ops = parse(&args_of(&plan(&o), &merged()));
    let tmpfs = position(&ops, "--tmpfs", &["/home"]).unwrap();
    let dir = position(&ops, "--dir", &["/home/agent"]).unwrap();
    assert!(tmpfs < dir);
    // The default HOME is the workspace: writable already, nothing to create.
    let default = parse(&args_of(&plan(&ws.opts()), &merged()));
    assert!(dests(&default, "--dir").is_empty());
}

#[test]
fn root_only_entries_are_hidden_in_system_and_named_paths_but_not_the_workspace() {
    let ws = Ws::new();
    let data = Ws::new();
    let named_file = Ws::new();
    let mut o = ws.opts();
    o.read_only_paths = vec![data.path(), named_file.path().join("key")];
    std::fs::write(named_file.path().join("key"), "k").unwrap();
    let p = plan(&o);
    let hidden = [
        Hidden {
            path: "/etc/shadow".into(),
            dir: false,
        },
        Hidden {
            path: "/etc/ssl/private".into(),
            dir: true,
        },
        Hidden {
            path: data.path().join("private.txt"),
            dir: false,
        },
        Hidden {
            path: ws.path().join("own"),
            dir: false,
        },
        // Named itself: granted as named.
        Hidden {
            path: named_file.path().join("key"),
            dir: false,
        },
    ];
    let ops = parse(&build(&p, &layout(&merged()), &hidden, FDS).unwrap());
    let etc = position(&ops, "--ro-bind", &["/etc", "/etc"]).unwrap();
    let shadow = position(&ops, "--ro-bind", &["/dev/null", "/etc/shadow"]).unwrap();
    let private = position(&ops, "--tmpfs", &["/etc/ssl/private"]).unwrap();
    assert!(etc < shadow && etc < private);
    let d = data.path();
    let in_data = d.join("private.txt");
    let data_pos = position(&ops, "--ro-bind", &[s(&d), s(&d)]).unwrap();
    let hide_pos = position(&ops, "--ro-bind", &["/dev/null", s(&in_data)]).unwrap();
    assert!(data_pos < hide_pos);
    let ro = position(&ops, "--remount-ro", &["/etc/ssl/private"]).unwrap();
    let last_mount = ops
        .iter()
        .rposition(|(f, _)| f.contains("bind") || f == "--tmpfs" || f == "--symlink")
        .unwrap();
    assert!(
        ro > last_mount,
        "hidden directories are made read-only at the end"
    );
    // The workspace is the command's own; a path named itself is granted as named.
    let own = ws.path().join("own");
    let key = named_file.path().join("key");
    assert!(!has(&ops, "--ro-bind", &["/dev/null", s(&own)]));
    assert!(!has(&ops, "--ro-bind", &["/dev/null", s(&key)]));
    assert!(has(&ops, "--ro-bind", &[s(&key), s(&key)]));
}

#[test]
fn the_root_is_read_only_and_the_cwd_is_set_last() {
    let ws = Ws::new();
    let sub = ws.sub("src");
    let mut o = ws.opts();
    o.cwd = Some("src".into());
    let ops = parse(&args_of(&plan(&o), &merged()));
    let n = ops.len();
    assert_eq!(ops[n - 1], ("--chdir".into(), vec![s(&sub).to_string()]));
    assert_eq!(ops[n - 2], ("--remount-ro".into(), vec!["/".to_string()]));
}

#[test]
fn the_waiter_runs_the_canonical_program_with_the_argv_as_given() {
    let ws = Ws::new();
    let o = SandboxOpts::new(ws.path(), ["sh", "-c", "echo \"$0\""]);
    let p = plan(&o);
    let args = args_of(&p, &merged());
    let cmd: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        cmd,
        [
            "--",
            WAITER_PATH,
            "12",
            "14",
            "p",
            "512",
            "-",
            s(&p.program),
            "sh",
            "-c",
            "echo \"$0\""
        ]
    );
    assert!(p.program.is_absolute());
    let ops = parse(&args);
    assert!(has(&ops, "--seccomp", &["10"]));
    let perms = position(&ops, "--perms", &["0555"]).unwrap();
    assert_eq!(
        ops[perms + 1],
        (
            "--ro-bind-data".into(),
            vec!["11".into(), WAITER_PATH.into()]
        )
    );
}

#[test]
fn proxy_mode_unshares_the_network_and_names_the_handover_socket_to_the_waiter() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.network = NetworkMode::Proxy;
    o.allow_hosts = vec!["crates.io".into()];
    let p = plan(&o);
    let fds = Fds {
        proxy: Some((13, vec![sandbox_core::PROXY_PORT])),
        ..FDS
    };
    let args = build(&p, &layout(&merged()), &[], fds).unwrap();
    assert_eq!(args.command[6], "13:3128");
    assert!(has(&parse(&args), "--unshare-net", &[]));
    assert_eq!(args_of(&plan(&ws.opts()), &merged()).command[6], "-");
}

#[test]
fn the_process_cap_goes_to_the_waiter() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.limits.max_processes = Some(32);
    assert_eq!(args_of(&plan(&o), &merged()).command[5], "32");
    o.limits.max_processes = None;
    assert_eq!(args_of(&plan(&o), &merged()).command[5], "-");
}

#[test]
fn pwd_is_kept_only_when_named() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.env.set.push(("PWD".into(), "/somewhere".into()));
    let args = args_of(&plan(&o), &merged());
    assert_eq!(args.command[4], "-");
}

#[test]
fn full_network_as_root_needs_abstract_socket_scoping_or_the_trusted_lane() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.network = NetworkMode::Full;
    let mut p = plan(&o);
    p.host_is_root = true;
    let sys = merged();
    let mut l = layout(&sys);
    // Scoped: runs, and the waiter is told to scope.
    let args = build(&p, &l, &[], FDS).unwrap();
    assert_eq!(args.command[4], "ap");
    // Not scopable: refused on strict, run on trusted.
    l.scope_abstract_unix = false;
    let e = SandboxError::from(build(&p, &l, &[], FDS).unwrap_err());
    assert!(matches!(e, SandboxError::PolicyRefused { .. }), "{e}");
    p.lane = Lane::Trusted;
    let args = build(&p, &l, &[], FDS).unwrap();
    assert_eq!(args.command[4], "p");
    // Not root: the full network as asked.
    p.lane = Lane::Strict;
    p.host_is_root = false;
    assert!(build(&p, &l, &[], FDS).is_ok());
}

#[test]
fn resolv_conf_in_run_is_bound_with_the_full_network_only() {
    let ws = Ws::new();
    let sys = merged();
    let target = PathBuf::from("/run/systemd/resolve/stub-resolv.conf");
    let mut l = layout(&sys);
    l.resolv_conf = Some(&target);
    for (mode, want) in [(NetworkMode::Full, true), (NetworkMode::Loopback, false)] {
        let mut o = ws.opts();
        o.network = mode;
        let ops = parse(&build(&plan(&o), &l, &[], FDS).unwrap());
        assert_eq!(
            has(&ops, "--ro-bind", &[s(&target), s(&target)]),
            want,
            "{mode}"
        );
    }
}

#[test]
fn a_program_hidden_as_root_only_is_bound_when_named_to_run() {
    // The caller (root) names a root-only program: running it grants that file.
    let ws = Ws::new();
    let dir = Ws::new();
    let prog = dir.path().join("tool");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut o = SandboxOpts::new(ws.path(), [prog.as_os_str()]);
    o.read_only_paths = vec![dir.path()];
    let hidden = [Hidden {
        path: prog.clone(),
        dir: false,
    }];
    let ops = parse(&build(&plan(&o), &layout(&merged()), &hidden, FDS).unwrap());
    assert!(has(&ops, "--ro-bind", &[s(&prog), s(&prog)]));
    assert!(!has(&ops, "--ro-bind", &["/dev/null", s(&prog)]));
}

#[test]
fn more_mounts_than_bwrap_reads_are_refused_with_the_reason() {
    let ws = Ws::new();
    let hidden: Vec<Hidden> = (0..MAX_OPTIONS / 2)
        .map(|i| Hidden {
            path: PathBuf::from(format!("/etc/many/f{i}")),
            dir: false,
        })
        .collect();
    let e = build(&plan(&ws.opts()), &layout(&merged()), &hidden, FDS).unwrap_err();
    assert!(
        matches!(e, BwrapError::TooManyMounts { hidden: n, .. } if n == MAX_OPTIONS / 2),
        "{e}"
    );
    assert!(e.to_string().contains("grant a smaller directory"), "{e}");
}

#[test]
fn every_writable_tmpfs_is_sized_inside_the_memory_limit() {
    let ws = Ws::new();
    let mut o = ws.opts();
    o.limits.memory_bytes = Some(256 << 20);
    let ops = parse(&args_of(&plan(&o), &merged()));
    for dir in ["/tmp", "/home", "/root", "/run", "/dev/shm"] {
        let at = position(&ops, "--tmpfs", &[dir]).unwrap_or_else(|| panic!("no tmpfs at {dir}"));
        assert_eq!(
            ops[at - 1],
            ("--size".to_string(), vec![(256u64 << 20).to_string()])
        );
    }
    let dev = position(&ops, "--dev", &["/dev"]).unwrap();
    let shm = position(&ops, "--tmpfs", &["/dev/shm"]).unwrap();
    assert!(dev < shm, "/dev/shm is mounted over bwrap's /dev");
    // Unlimited, said explicitly: the kernel's default size.
    o.limits.memory_bytes = None;
    let ops = parse(&args_of(&plan(&o), &merged()));
    assert!(!ops.iter().any(|(f, _)| f == "--size"));
}
