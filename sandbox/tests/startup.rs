//! `sandbox run`'s start-up: no preflight per invocation, `auto`'s choice kept on disk
//! under a host key, a launch that fails diagnosed by the preflight after the fact, and
//! nothing kept that decides what is readable.
//!
//! What start-up decided is read from its `SANDBOX_DEBUG_STARTUP=1` lines on stderr and
//! from the cache file itself; the effects (a file created or not, a read refused) from
//! here. No timing is asserted.

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use support::{available, report, text, workspace, BIN};

mod support;

/// The compiled-in backends that run a default request on `strict` here with host
/// programs (no image): what a named-backend case runs on, from the registry and doctor.
fn strict_host_backends() -> Vec<&'static str> {
    sandbox::registry::compiled_in()
        .filter(|i| !i.needs_image() && !i.unconfined)
        .map(|i| i.name)
        .filter(|b| {
            available(b)
                && report(b)["lanes"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| x == "strict"))
        })
        .collect()
}

/// One `sandbox run` in `dir` with its cache under `cache` and the decisions printed.
fn run(dir: &Path, cache: &Path, path_env: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .arg("run")
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("SANDBOX_DEBUG_STARTUP", "1")
        .stdin(Stdio::null());
    if let Some(p) = path_env {
        cmd.env("PATH", p);
    }
    cmd.output().expect("the sandbox binary runs")
}

fn cache_file(cache: &Path) -> PathBuf {
    cache.join("sandbox").join("auto-v1.json")
}

fn facts_file(cache: &Path) -> PathBuf {
    cache.join("sandbox").join("facts-v1.json")
}

fn read_facts(cache: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(facts_file(cache)).unwrap()).unwrap()
}

/// The recorded host facts of `backend` (its key and facts), if any.
fn fact_entry(cache: &Path, backend: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(&fs::read_to_string(facts_file(cache)).ok()?).ok()?;
    let e = v["backends"][backend].clone();
    (!e.is_null()).then_some(e)
}

fn read_cache(cache: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(cache_file(cache)).unwrap()).unwrap()
}

fn euid() -> u32 {
    fs::metadata("/proc/self").unwrap().uid()
}

/// The backend of the one entry for `lane`, if any.
fn entry_for(cache: &Value, lane: &str) -> Option<String> {
    cache["entries"].as_object().and_then(|m| {
        m.iter()
            .find(|(k, _)| k.starts_with(&format!("lane={lane} ")))
            .map(|(_, v)| v.as_str().unwrap().to_string())
    })
}

/// Run `auto` on `lane` once so the cache holds its choice; `None` (with the reason
/// printed) where `auto` finds nothing here.
fn prime(ws: &Path, cache: &Path, path_env: Option<&str>, lane: &str) -> Option<String> {
    let o = run(ws, cache, path_env, &["--lane", lane, "--", "true"]);
    let err = text(&o.stderr);
    if o.status.code() != Some(0) {
        eprintln!("skipped: auto finds no backend on {lane} here: {err}");
        return None;
    }
    assert!(err.contains("with preflights; cached"), "{err}");
    let picked = entry_for(&read_cache(cache), lane).expect("an entry for the lane");
    assert!(err.contains(&format!("selected `{picked}`")), "{err}");
    Some(picked)
}

#[test]
fn the_second_auto_run_takes_the_cache_and_runs_no_preflight() {
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    let Some(picked) = prime(ws.path(), cache.path(), None, "strict") else {
        return;
    };
    // The file is this user's alone.
    let meta = fs::symlink_metadata(cache_file(cache.path())).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.uid(), euid());
    assert_eq!(meta.mode() & 0o777, 0o600);
    let c = read_cache(cache.path());
    let host = c["host"].as_str().unwrap();
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        host.contains(&format!("kernel {}", kernel.trim())),
        "{host}"
    );
    assert!(host.contains(&format!("uid {}", euid())), "{host}");
    assert!(host.contains(BIN), "the binary's identity: {host}");

    let marker = ws.path().join("ran");
    let o = run(
        ws.path(),
        cache.path(),
        None,
        &["--", "touch", marker.to_str().unwrap()],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("auto: `{picked}` from the cache, no preflight")),
        "{err}"
    );
    assert!(!err.contains("with preflights"), "{err}");
    assert!(marker.exists(), "the command ran");
}

#[test]
fn a_named_backend_runs_no_preflight() {
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    for backend in strict_host_backends() {
        let o = run(
            ws.path(),
            cache.path(),
            None,
            &["--backend", backend, "--", "true"],
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(
            err.contains(&format!(
                "backend `{backend}` named: launching without a preflight"
            )),
            "{err}"
        );
        assert!(!cache_file(cache.path()).exists(), "a name caches nothing");
    }
}

/// Overwrite the cache file with `content`, private as the command writes it.
fn write_cache(cache: &Path, content: &str) {
    let f = cache_file(cache);
    fs::write(&f, content).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn a_corrupt_stale_or_shared_cache_is_ignored_and_rewritten() {
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    let Some(picked) = prime(ws.path(), cache.path(), None, "strict") else {
        return;
    };
    let good = read_cache(cache.path());
    let host = good["host"].as_str().unwrap().to_string();

    // Each is ignored: the run selects again (with preflights) and writes a good file.
    let another_kernel = {
        let mut v = good.clone();
        v["host"] = Value::from(host.replacen("kernel ", "kernel 0.0.0-another-", 1));
        v.to_string()
    };
    let another_binary = {
        let mut v = good.clone();
        // The first backend's identity in brackets (`[...]`) is what its host_key said.
        v["host"] = Value::from(host.replacen("; sandbox ", "; sandbox /elsewhere/", 1));
        v.to_string()
    };
    let another_backend_host = {
        let mut v = good.clone();
        let first = host.find(" [").expect("a backend's key");
        let mut h = host.clone();
        h.insert_str(first + 2, "changed ");
        v["host"] = Value::from(h);
        v.to_string()
    };
    for (what, content, said) in [
        ("garbage", "{not json".to_string(), "does not parse"),
        ("another kernel", another_kernel, "another host key"),
        ("another sandbox binary", another_binary, "another host key"),
        (
            "another backend host",
            another_backend_host,
            "another host key",
        ),
    ] {
        write_cache(cache.path(), &content);
        let o = run(ws.path(), cache.path(), None, &["--", "true"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{what}: {err}");
        assert!(err.contains(said), "{what}: {err}");
        assert!(err.contains("with preflights; cached"), "{what}: {err}");
        assert!(!err.contains("from the cache"), "{what}: {err}");
        let now = read_cache(cache.path());
        assert_eq!(now["host"], Value::from(host.clone()), "{what}: rewritten");
        assert_eq!(entry_for(&now, "strict"), Some(picked.clone()), "{what}");
    }

    // A file others can read or write is not trusted either.
    fs::set_permissions(cache_file(cache.path()), fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(ws.path(), cache.path(), None, &["--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("not this user's own private file"), "{err}");
    assert!(!err.contains("from the cache"), "{err}");
    let meta = fs::metadata(cache_file(cache.path())).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "rewritten private");
}

/// A cache entry naming a backend `auto` would not try on the lane (here the unconfined
/// one, which it never picks) is not taken: what a stale or edited entry names is checked.
#[test]
fn an_entry_naming_a_backend_auto_would_not_pick_is_not_taken() {
    let Some(none) = sandbox::registry::compiled_in()
        .find(|i| i.unconfined)
        .map(|i| i.name)
    else {
        eprintln!("skipped: no unconfined backend compiled in");
        return;
    };
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    let Some(_) = prime(ws.path(), cache.path(), None, "strict") else {
        return;
    };
    let mut v = read_cache(cache.path());
    let key = v["entries"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    v["entries"][&key] = Value::from(none);
    write_cache(cache.path(), &v.to_string());
    let marker = ws.path().join("ran");
    let o = run(
        ws.path(),
        cache.path(),
        None,
        &["--", "sh", "-c", &format!("echo x > {}", marker.display())],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("the cached `{none}` does not fit")),
        "{err}"
    );
    assert!(err.contains("with preflights; cached"), "{err}");
    assert_ne!(
        entry_for(&read_cache(cache.path()), "strict").as_deref(),
        Some(none)
    );
}

/// The program called `name` on `PATH`, resolved.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A program in `dir`, named as the real one it runs, until it is broken: then it fails at
/// once with `status`, as a bwrap whose user namespaces the host has just refused would
/// (1), or a runsc that cannot create its sandbox (128). Its identity (path, size, times,
/// inode) never changes: the break is a flag file next to it, a change of the host that
/// no cache key can see.
struct FakeProgram {
    flag: PathBuf,
}

impl FakeProgram {
    fn working(dir: &Path, real: &Path) -> Self {
        Self::failing_with(dir, real, 1)
    }

    fn failing_with(dir: &Path, real: &Path, status: u8) -> Self {
        let flag = dir.join(format!(
            "{}.broken",
            real.file_name().unwrap().to_string_lossy()
        ));
        let script = format!(
            "#!/bin/sh\n[ -e {flag} ] && {{ echo 'fake: cannot set up' >&2; exit {status}; }}\n\
             exec {real} \"$@\"\n",
            flag = flag.display(),
            real = real.display()
        );
        let file = dir.join(real.file_name().unwrap());
        fs::write(&file, &script).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
        Self { flag }
    }

    fn break_it(&self) {
        fs::write(&self.flag, "").unwrap();
    }
}

/// `auto` on `trusted` picks a backend that runs a host program (its registry entry's
/// `host_key` is that program's identity); the program then breaks without its identity
/// changing.
#[test]
fn a_backend_that_cannot_launch_is_diagnosed_125_and_nothing_runs() {
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    // A working stand-in, first on PATH, for every backend's host program.
    let fakes: Vec<(&str, FakeProgram)> = sandbox::registry::compiled_in()
        .filter_map(|i| {
            let real = on_path(i.host_key.program()?)?;
            Some((i.name, FakeProgram::working(bin.path(), &real)))
        })
        .collect();
    let path_env = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let Some(picked) = prime(ws.path(), cache.path(), Some(&path_env), "trusted") else {
        return;
    };
    let Some((_, fake)) = fakes.iter().find(|(b, _)| *b == picked) else {
        eprintln!("skipped: auto picks {picked} on trusted here, which runs no host program");
        return;
    };
    let key_before = read_cache(cache.path())["host"].clone();
    // What the working program taught is recorded (bwrap: its options, a set-up that
    // worked) and still matches: the next runs start no probe that would catch the break.
    assert!(fact_entry(cache.path(), &picked).is_some());
    fake.break_it();

    let marker = ws.path().join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    // The cache entry still matches (the program's identity looks the same); the launch
    // fails, is diagnosed, and the entry is dropped.
    let mut args = vec!["--lane", "trusted"];
    args.extend_from_slice(&touch);
    let o = run(ws.path(), cache.path(), Some(&path_env), &args);
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("auto: `{picked}` from the cache")),
        "{err}"
    );
    assert!(
        err.contains(&format!("facts: `{picked}`: recorded facts taken")),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("running its preflight"), "{err}");
    let cannot = format!("backend `{picked}` cannot run here");
    assert!(
        err.contains(&format!("facts: `{picked}`: recorded facts dropped")),
        "{err}"
    );
    assert!(
        err.contains(&cannot) && err.contains("remedy:"),
        "the preflight's cause and remedy: {err}"
    );
    assert!(!marker.exists(), "nothing ran");
    let after = read_cache(cache.path());
    assert_eq!(after["host"], key_before);
    assert_eq!(entry_for(&after, "trusted"), None, "the entry is dropped");
    assert!(
        fact_entry(cache.path(), &picked).is_none_or(|e| !e["facts"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("setup probe"))),
        "no recorded set-up survives the failure"
    );

    // Named, the same: 125, the cause and remedy, nothing run.
    let mut args = vec!["--backend", picked.as_str()];
    args.extend_from_slice(&touch);
    let o = run(ws.path(), cache.path(), Some(&path_env), &args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains(&cannot) && err.contains("remedy:"), "{err}");
    assert!(!marker.exists(), "nothing ran");

    // With the entry gone, `auto` selects again and passes over the broken backend.
    let mut args = vec!["--lane", "trusted"];
    args.extend_from_slice(&touch);
    let o = run(ws.path(), cache.path(), Some(&path_env), &args);
    let err = text(&o.stderr);
    assert!(err.contains("with preflights; cached"), "{err}");
    assert!(!err.contains(&format!("selected `{picked}`")), "{err}");
    if o.status.code() == Some(0) {
        assert!(marker.exists());
    }
}

/// Every backend that runs a host program, named (no preflight before the launch), with
/// that program broken so that it fails at once with 128: the status a runsc that cannot
/// create its sandbox exits with, and one the command could have exited with too. The
/// run is 125 with the preflight's cause and remedy, never an outcome of 128, and
/// nothing ran.
#[test]
fn a_named_backend_whose_program_fails_before_the_command_is_diagnosed_125() {
    let ws = workspace();
    let cache = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let path_env = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let marker = ws.path().join("ran");
    let mut checked = 0;
    for backend in strict_host_backends() {
        let info = sandbox::registry::compiled_in()
            .find(|i| i.name == backend)
            .unwrap();
        let Some(real) = info.host_key.program().and_then(on_path) else {
            eprintln!("skipped {backend}: it runs no host program of its own");
            continue;
        };
        let fake = FakeProgram::failing_with(bin.path(), &real, 128);
        let args = [
            "--backend",
            backend,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ];
        // Working, through the stand-in: the command runs.
        let o = run(ws.path(), cache.path(), Some(&path_env), &args);
        assert_eq!(o.status.code(), Some(0), "{backend}: {}", text(&o.stderr));
        assert!(marker.exists(), "{backend}: the command ran");
        fs::remove_file(&marker).unwrap();

        fake.break_it();
        let o = run(ws.path(), cache.path(), Some(&path_env), &args);
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!(
                "backend `{backend}` named: launching without a preflight"
            )),
            "{err}"
        );
        assert_eq!(o.status.code(), Some(125), "{backend}: {err}");
        assert!(err.contains("running its preflight"), "{backend}: {err}");
        assert!(
            err.contains(&format!("backend `{backend}` cannot run here"))
                && err.contains("remedy:"),
            "{backend}: the preflight's cause and remedy: {err}"
        );
        assert!(!marker.exists(), "{backend}: nothing ran");
        checked += 1;
    }
    if checked == 0 {
        eprintln!("skipped: no backend runs a host program on strict here");
    }
}

/// As root: a file the sandbox could read on the first run, made root-only afterwards,
/// is unreadable on the next run, which took its backend from the cache.
#[test]
fn a_file_made_root_only_after_the_cache_was_written_stays_unreadable() {
    if euid() != 0 {
        eprintln!("skipped: hiding root-only files is what a root host does");
        return;
    }
    let named = strict_host_backends()
        .into_iter()
        .map(|b| ("strict", Some(b)));
    for (lane, backend) in [("strict", None), ("trusted", None)]
        .into_iter()
        .chain(named)
    {
        let ws = workspace();
        let cache = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        fs::set_permissions(data.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let secret = data.path().join("secret");
        fs::write(&secret, "s3cret\n").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
        let read = data.path().to_str().unwrap();
        let mut args = vec!["--lane", lane, "--read", read];
        if let Some(b) = backend {
            args.extend(["--backend", b]);
        }
        args.extend(["--", "cat", secret.to_str().unwrap()]);

        let first = run(ws.path(), cache.path(), None, &args);
        let first_err = text(&first.stderr);
        if first.status.code() != Some(0) {
            eprintln!("skipped {lane}/{backend:?}: {first_err}");
            continue;
        }
        assert_eq!(text(&first.stdout), "s3cret\n", "{lane}/{backend:?}");
        if backend.is_none() {
            assert!(cache_file(cache.path()).exists());
        }

        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        let second = run(ws.path(), cache.path(), None, &args);
        let err = text(&second.stderr);
        if backend.is_none() {
            assert!(err.contains("from the cache"), "{lane}: {err}");
        }
        // Everything start-up may keep was kept and taken (no probe ran): still refused.
        // (A backend that probes nothing at construction records nothing.)
        if first_err.contains("`: recorded (") {
            assert!(
                err.contains("recorded facts taken, no probe"),
                "{lane}/{backend:?}: {err}"
            );
        }
        assert!(!err.contains("probing"), "{lane}/{backend:?}: {err}");
        assert_ne!(second.status.code(), Some(0), "{lane}/{backend:?}: {err}");
        assert!(
            !text(&second.stdout).contains("s3cret"),
            "{lane}/{backend:?}: read a root-only file"
        );
    }
}

/// The host program a backend's registry entry keys it by (`HostKey::Program`), resolved
/// on `PATH`: where a test can stand in for it without the backend knowing.
fn program_of(backend: &str) -> Option<(&'static str, PathBuf)> {
    let program = sandbox::registry::known(backend)?
        .info?
        .host_key
        .program()?;
    Some((program, on_path(program)?))
}

/// `PATH` with `dir` first.
fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A program in `dir`, named as the real one at `real`, that logs each invocation (one
/// line to `log`) and runs the real one: how many of its processes a run started, seen
/// from the host.
fn counting_program(dir: &Path, real: &Path) -> PathBuf {
    let log = dir.join("log");
    fs::write(&log, "").unwrap();
    // Whatever uid the program runs as (a root host's runs use an id no account has) may log.
    fs::set_permissions(&log, fs::Permissions::from_mode(0o666)).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$1\" >> {}\nexec {} \"$@\"\n",
        log.display(),
        real.display()
    );
    let file = dir.join(real.file_name().unwrap());
    fs::write(&file, script).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
    log
}

fn invocations(log: &Path) -> usize {
    fs::read_to_string(log).unwrap().lines().count()
}

/// What the last `facts: `BACKEND`: recorded (LIST)` line of `err` lists: everything the
/// command recorded (each such line repeats the ones before it and adds to them).
fn recorded_list(err: &str, backend: &str) -> Option<String> {
    let line = format!("facts: `{backend}`: recorded (");
    err.lines().rev().find_map(|l| {
        let (_, list) = l.split_once(&line)?;
        Some(list.strip_suffix(')').unwrap_or(list).to_string())
    })
}

/// The number of facts recorded for `backend` in `cache`.
fn fact_count(cache: &Path, backend: &str) -> usize {
    fact_entry(cache, backend)
        .and_then(|e| e["facts"].as_object().map(serde_json::Map::len))
        .unwrap_or(0)
}

/// [`run`], which must succeed (`what` names it in the failure); its debug lines.
fn run_ok(dir: &Path, cache: &Path, path_env: Option<&str>, args: &[&str], what: &str) -> String {
    let o = run(dir, cache, path_env, args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{what}: {err}");
    err
}

/// The host backends (see [`strict_host_backends`]) that record what their probes found:
/// those whose first command in a fresh cache says `facts: `NAME`: recorded (`. Found
/// once per test process; a backend that records nothing is named on stderr.
fn recording_backends() -> &'static [&'static str] {
    static FOUND: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| {
        let ws = workspace();
        strict_host_backends()
            .into_iter()
            .filter(|b| {
                let cache = tempfile::tempdir().unwrap();
                let err = run_ok(
                    ws.path(),
                    cache.path(),
                    None,
                    &["--backend", b, "--", "true"],
                    b,
                );
                let records = recorded_list(&err, b).is_some();
                if !records {
                    eprintln!("{b} records no host facts: the record's cases do not cover it");
                }
                records
            })
            .collect()
    })
}

/// A named backend's host probes run in the first command only: their answers are
/// recorded (the user's own private file) and the next command takes them, starting no
/// probe. For a backend whose registry entry keys it by a host program, that is counted
/// from the host: each recorded fact is an answer of that program (bwrap: `--version`,
/// `--help`, a set-up probe), so the first command starts it at least once per fact and
/// once for itself, and the second exactly once, its own.
#[test]
fn host_facts_are_probed_once_and_then_taken() {
    let ws = workspace();
    for backend in strict_host_backends() {
        let cache = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let counted = program_of(backend)
            .map(|(program, real)| (program, counting_program(bin.path(), &real)));
        let path_env = path_with(bin.path());
        let args = ["--backend", backend, "--", "true"];
        let err = run_ok(ws.path(), cache.path(), Some(&path_env), &args, backend);
        let Some(recorded) = recorded_list(&err, backend) else {
            eprintln!("skipped {backend}: it records no host facts");
            continue;
        };
        assert!(
            err.contains(&format!("facts: `{backend}`: nothing recorded; probing")),
            "{err}"
        );
        let first_count = counted.as_ref().map(|(_, log)| invocations(log));
        let err = run_ok(ws.path(), cache.path(), Some(&path_env), &args, backend);
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded facts taken, no probe ({recorded})"
            )),
            "{err}"
        );
        assert!(
            !err.contains("probing") && !err.contains("recorded ("),
            "{err}"
        );
        let meta = fs::symlink_metadata(facts_file(cache.path())).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.uid(), euid());
        assert_eq!(meta.mode() & 0o777, 0o600);
        let dir = fs::metadata(cache.path().join("sandbox")).unwrap();
        assert_eq!(dir.mode() & 0o777, 0o700);

        let (Some((program, log)), Some(n)) = (counted, first_count) else {
            continue;
        };
        let facts = fact_count(cache.path(), backend);
        assert!(facts > 0, "{backend}: {err}");
        assert!(
            n > facts,
            "{n} {program} processes for {facts} facts and the command: {err}"
        );
        let entry = fact_entry(cache.path(), backend).unwrap();
        assert!(
            entry["key"]
                .as_str()
                .unwrap()
                .contains(&bin.path().join(program).display().to_string()),
            "keyed by the program: {entry}"
        );
        assert_eq!(
            invocations(&log) - n,
            1,
            "only the command's {program}: {err}"
        );
    }
}

/// Each part of the key, changed, makes the command probe again: another binary of the
/// host program a recording backend is keyed by (here the same file rewritten in place,
/// same size and modification time), another build of `sandbox`; and a file that is not
/// the user's own private one is not read. The host's own part (kernel, ids, namespaces,
/// sysctls) is changed in [`a_changed_host_key_makes_the_next_command_probe_again`].
#[test]
fn a_changed_host_program_or_another_build_is_probed_again() {
    let keyed: Vec<_> = recording_backends()
        .iter()
        .filter_map(|b| Some((*b, program_of(b)?)))
        .collect();
    if keyed.is_empty() {
        eprintln!("skipped: no backend here records facts keyed by a host program");
        return;
    }
    for (backend, (program, real)) in keyed {
        let ws = workspace();
        let cache = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let log = counting_program(bin.path(), &real);
        let path_env = path_with(bin.path());
        let args = ["--backend", backend, "--", "true"];
        run_ok(ws.path(), cache.path(), Some(&path_env), &args, backend);
        let facts = fact_count(cache.path(), backend);
        assert!(facts > 0, "{backend} recorded nothing");
        // The other recording backends, whose facts do not depend on this program.
        let others: Vec<&str> = recording_backends()
            .iter()
            .copied()
            .filter(|b| *b != backend)
            .collect();
        let other_args = |other| ["--backend", other, "--", "true"];
        for other in &others {
            run_ok(ws.path(), cache.path(), None, &other_args(other), other);
        }

        // The same script, rewritten in place: same inode, size and modification time.
        let file = bin.path().join(program);
        let before = fs::metadata(&file).unwrap();
        let script = fs::read(&file).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&file, &script).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(before.modified().unwrap())
            .unwrap();
        let after = fs::metadata(&file).unwrap();
        assert_eq!(
            (after.ino(), after.len(), after.mtime(), after.mtime_nsec()),
            (
                before.ino(),
                before.len(),
                before.mtime(),
                before.mtime_nsec()
            )
        );
        let n = invocations(&log);
        let err = run_ok(ws.path(), cache.path(), Some(&path_env), &args, "");
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded under another host key; probing again"
            )),
            "{err}"
        );
        // Each fact is an answer of the program (see the test above).
        assert!(
            invocations(&log) - n >= facts,
            "{program} asked again, once per fact: {err}"
        );
        for other in &others {
            let err = run_ok(ws.path(), cache.path(), None, &other_args(other), other);
            assert!(
                err.contains(&format!("facts: `{other}`: recorded facts taken")),
                "{err}"
            );
        }

        // The file not taken (`said`): the next command probes afresh.
        let ignored = |said: &str| {
            let err = run_ok(ws.path(), cache.path(), Some(&path_env), &args, said);
            assert!(err.contains(said), "{err}");
            assert!(
                err.contains(&format!("facts: `{backend}`: nothing recorded; probing")),
                "{err}"
            );
        };

        // Another build of the command: nothing of the file is taken.
        let mut v = read_facts(cache.path());
        v["program"] = Value::from("/elsewhere/sandbox 1 2.3 4.5 6");
        fs::write(facts_file(cache.path()), v.to_string()).unwrap();
        ignored("written by another build of sandbox; ignored");

        // A file others may write is not read, and is replaced by a private one.
        fs::set_permissions(facts_file(cache.path()), fs::Permissions::from_mode(0o666)).unwrap();
        ignored("facts: the cache file is not this user's own private file; ignored");
        let meta = fs::metadata(facts_file(cache.path())).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600, "rewritten private");
    }
}

/// Set for the copy of a test that runs inside a user namespace of its own.
const INNER: &str = "SANDBOX_STARTUP_TEST_INNER";

/// The cache directory the outer part of such a test recorded facts in.
const CACHE: &str = "SANDBOX_STARTUP_TEST_CACHE";

/// The backends the outer part recorded facts of (comma-separated): the recording ones
/// that work outside the namespace.
const RECORDED: &str = "SANDBOX_STARTUP_TEST_RECORDED";

/// The ordinary ids a test uses: 65534 when run as root, else its own.
fn ordinary_ids() -> (u32, u32) {
    // SAFETY: plain queries.
    unsafe {
        if libc::geteuid() == 0 {
            (65534, 65534)
        } else {
            (libc::getuid(), libc::getgid())
        }
    }
}

/// Run the test `name` again in a user namespace of its own, as the ordinary ids there too
/// (no capability once it runs), with `sysctls` written there and a temp dir of its own.
fn rerun_in_user_namespace(
    name: &str,
    sysctls: &[(&'static std::ffi::CStr, &'static [u8])],
    env: &[(&str, &Path)],
) {
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let mut all: Vec<(&str, &std::ffi::OsStr)> = vec![("TMPDIR", tmp.path().as_os_str())];
    all.extend(env.iter().map(|(k, v)| (*k, v.as_os_str())));
    let ids = ordinary_ids();
    sandbox_conformance::host::rerun_in_user_namespace(name, INNER, ids, ids, sysctls, &all);
}

/// The outer part of a test that reruns in a user namespace: what every recording backend
/// records on `strict` as the ordinary ids, then the rerun with `sysctls`. `false` (the
/// reason printed) where no backend records facts here.
fn record_and_rerun(name: &str, sysctls: &[(&'static std::ffi::CStr, &'static [u8])]) -> bool {
    let backends = recording_backends();
    if backends.is_empty() {
        eprintln!("skipped: no backend here records host facts");
        return false;
    }
    let cache = record_as_ordinary_ids(backends);
    let recorded = backends.join(",");
    rerun_in_user_namespace(
        name,
        sysctls,
        &[(CACHE, cache.path()), (RECORDED, Path::new(&recorded))],
    );
    true
}

/// In the inner part: the cache the outer part recorded in, and the backends it recorded.
fn recorded_outside() -> (PathBuf, Vec<String>) {
    let cache = PathBuf::from(std::env::var_os(CACHE).unwrap());
    let backends = std::env::var(RECORDED)
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    (cache, backends)
}

/// The host's part of the key changed between two commands (here the command runs in a
/// user namespace of the test's own, whose `user.max_mnt_namespaces` is lowered: another
/// namespace and another sysctl than where the facts were recorded): the next command of
/// each recording backend probes again, and the one after takes what that one recorded.
/// (That a sysctl alone changes the key is `sandbox_host::facts`' own test.)
#[test]
fn a_changed_host_key_makes_the_next_command_probe_again() {
    const NAME: &str = "a_changed_host_key_makes_the_next_command_probe_again";
    if std::env::var_os(INNER).is_none() {
        record_and_rerun(NAME, &[(c"/proc/sys/user/max_mnt_namespaces", b"1000")]);
        return;
    }
    let (cache, backends) = recorded_outside();
    let ws = workspace();
    for backend in &backends {
        let args = ["--backend", backend, "--lane", "strict", "--", "true"];
        let err = run_ok(ws.path(), &cache, None, &args, "");
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded under another host key; probing again"
            )),
            "{err}"
        );
        assert!(err.contains("user.max_mnt_namespaces=1000;"), "{err}");
        let recorded = recorded_list(&err, backend)
            .unwrap_or_else(|| panic!("{backend} recorded nothing: {err}"));
        let err = run_ok(ws.path(), &cache, None, &args, "");
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded facts taken, no probe ({recorded})"
            )),
            "{err}"
        );
    }
    println!("inner checks passed for: {}", backends.join(", "));
}

/// A cache directory others may enter, holding what one command on `strict` of each of
/// `backends` recorded, run as the ordinary ids (namespaces work there).
fn record_as_ordinary_ids(backends: &[&str]) -> tempfile::TempDir {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = ordinary_ids();
    let cache = tempfile::tempdir().unwrap();
    fs::set_permissions(cache.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let ws = workspace();
    fs::set_permissions(ws.path(), fs::Permissions::from_mode(0o777)).unwrap();
    for backend in backends {
        let o = Command::new(BIN)
            .current_dir(ws.path())
            .args([
                "run",
                "--backend",
                backend,
                "--lane",
                "strict",
                "--",
                "true",
            ])
            .env("XDG_CACHE_HOME", cache.path())
            .env("SANDBOX_DEBUG_STARTUP", "1")
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(
            err.contains(&format!("facts: `{backend}`: recorded (")),
            "{err}"
        );
    }
    cache
}

/// The record in this test's cache, with `facts` set for `backend` under `key`.
fn plant(cache: &Path, backend: &str, key: &str, facts: &Value) {
    let mut v = read_facts(cache);
    v["backends"][backend] = serde_json::json!({"key": key, "facts": facts});
    fs::write(facts_file(cache), v.to_string()).unwrap();
}

/// The key a command looked its facts up under, from its debug lines.
fn looked_up_key(err: &str, backend: &str) -> String {
    err.lines()
        .find(|l| l.contains(&format!("facts: `{backend}`: ")) && l.contains("(key: "))
        .and_then(|l| l.split("(key: ").nth(1))
        .and_then(|k| k.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no key looked up for {backend}: {err}"))
        .to_string()
}

/// Where namespaces cannot be made (an ordinary uid in a user namespace whose
/// `user.max_user_namespaces` is 0), for each recording backend: facts recorded where they
/// could are not taken (the host key differs: the command probes and is refused, as
/// `doctor` says of the backend here: by `strict` where it still runs elsewhere, else as
/// unable to run); and the same record under this very key (planted: no run records a
/// failed probe) fails closed: the launch fails before the command starts, the preflight
/// probes afresh and names the sysctl, the exit status is 125, nothing ran, and the
/// record is dropped.
#[test]
fn a_record_that_claims_namespaces_where_they_fail_fails_closed() {
    const NAME: &str = "a_record_that_claims_namespaces_where_they_fail_fails_closed";
    if std::env::var_os(INNER).is_none() {
        record_and_rerun(NAME, &[(c"/proc/sys/user/max_user_namespaces", b"0")]);
        return;
    }
    let (cache, backends) = recorded_outside();
    let ws = workspace();
    let marker = ws.path().join("ran");
    let touch = marker.to_str().unwrap();
    let mut checked = Vec::new();
    for backend in &backends {
        let args = [
            "--backend",
            backend,
            "--lane",
            "strict",
            "--",
            "touch",
            touch,
        ];
        // What worked outside, the claim planted below.
        let outside = fact_entry(&cache, backend)
            .unwrap_or_else(|| panic!("{backend}: nothing recorded outside"))["facts"]
            .clone();
        let here = report(backend);
        let refusal = if here["works"] != true {
            format!("backend `{backend}` cannot run here")
        } else if here["lanes"]
            .as_array()
            .is_some_and(|l| !l.iter().any(|x| x == "strict"))
        {
            format!("lane `strict` refuses backend `{backend}`")
        } else {
            eprintln!("skipped {backend}: it runs strict without namespaces here (doctor)");
            continue;
        };

        // Recorded elsewhere: not taken here; probed, and refused.
        let o = run(ws.path(), &cache, None, &args);
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded under another host key; probing again"
            )),
            "{err}"
        );
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert!(
            err.contains(&refusal) && err.contains("remedy:"),
            "{refusal}: {err}"
        );
        assert!(!marker.exists(), "nothing ran");
        let key = looked_up_key(&err, backend);

        // Planted under this host's key: what worked outside, said to work here.
        plant(&cache, backend, &key, &outside);
        let o = run(ws.path(), &cache, None, &args);
        let err = text(&o.stderr);
        eprintln!("the planted {backend} record's run said:\n{err}");
        assert!(
            err.contains(&format!(
                "facts: `{backend}`: recorded facts taken, no probe"
            )),
            "{err}"
        );
        assert!(err.contains("running its preflight"), "{err}");
        assert_eq!(o.status.code(), Some(125), "{err}");
        let diagnosis = err
            .split_once("running its preflight")
            .map_or("", |(_, after)| after);
        assert!(
            diagnosis.contains(&format!("backend `{backend}` cannot run here"))
                && diagnosis.contains("max_user_namespaces")
                && diagnosis.contains("remedy:"),
            "the preflight's cause and remedy: {err}"
        );
        assert!(!marker.exists(), "nothing ran");
        assert!(
            fact_entry(&cache, backend).is_none(),
            "the record is dropped"
        );
        checked.push(backend.as_str());
    }
    println!("inner checks passed for: {}", checked.join(", "));
}

/// The sandbox's own state (`~/.cache/sandbox`: the start-up cache and the host facts the
/// next run starts from) stays read-only to the command inside a grant that holds it, the
/// workspace being `$HOME` or `--write ~/.cache`; the rest of the grant stays writable.
#[test]
fn the_sandboxs_own_state_stays_read_only_inside_a_grant_that_holds_it() {
    for b in strict_host_backends() {
        if !support::confines(b) {
            continue;
        }
        let home = workspace();
        let h = home.path().canonicalize().unwrap();
        let state = h.join(".cache").join("sandbox");
        let elsewhere = workspace();
        let cache_grant = h.join(".cache").display().to_string();
        let cases: [(&str, &Path, Vec<&str>); 2] = [
            ("a workspace of $HOME", &h, vec![]),
            (
                "--write ~/.cache",
                elsewhere.path(),
                vec!["--write", &cache_grant],
            ),
        ];
        for (what, ws, extra) in cases {
            let mut cmd = Command::new(BIN);
            cmd.current_dir(ws)
                .env("HOME", &h)
                .env_remove("XDG_CACHE_HOME")
                .stdin(Stdio::null())
                .arg("run")
                .args(support::backend_flags(b))
                .args(["--workspace", ws.to_str().unwrap()])
                .args(&extra)
                .args([
                    "--",
                    "sh",
                    "-c",
                    "echo forged > \"$1/facts-v1.json\"; echo planted > \"$1/new\"; \
                     echo ok > \"$2/other.txt\"; exit 0",
                    "sh",
                ])
                .arg(&state)
                .arg(state.parent().unwrap());
            let o = cmd.output().unwrap();
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{b}, {what}: {err}");
            assert!(
                state.is_dir(),
                "{b}, {what}: the command-line tool did not make its state directory"
            );
            let facts = fs::read_to_string(state.join("facts-v1.json")).unwrap_or_default();
            assert!(
                !facts.contains("forged"),
                "{b}, {what}: the command wrote the host facts"
            );
            assert!(
                !state.join("new").exists(),
                "{b}, {what}: the command planted a file in the sandbox's state"
            );
            assert_eq!(
                fs::read_to_string(state.parent().unwrap().join("other.txt")).ok(),
                Some("ok\n".into()),
                "{b}, {what}: the rest of the grant was not writable: {err}"
            );
            let _ = fs::remove_file(state.parent().unwrap().join("other.txt"));
        }
    }
}
