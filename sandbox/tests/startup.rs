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

/// A program in `dir`, named as the real one it runs; then, same size, same inode and same
/// modification time (so its identity in the cache key does not change), one that fails.
struct FakeProgram {
    file: PathBuf,
    len: usize,
}

impl FakeProgram {
    fn working(dir: &Path, real: &Path) -> Self {
        let script = format!("#!/bin/sh\nexec {} \"$@\"\n", real.display());
        let file = dir.join(real.file_name().unwrap());
        fs::write(&file, &script).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
        Self::set_time(&file);
        Self {
            file,
            len: script.len(),
        }
    }

    fn set_time(file: &Path) {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        fs::OpenOptions::new()
            .write(true)
            .open(file)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    fn break_it(&self) {
        let mut script = "#!/bin/sh\nexit 1\n".to_string();
        assert!(script.len() <= self.len);
        while script.len() < self.len - 1 {
            script.push('#');
        }
        script.push('\n');
        let ino = fs::metadata(&self.file).unwrap().ino();
        fs::write(&self.file, script).unwrap(); // truncates in place: same inode
        Self::set_time(&self.file);
        let m = fs::metadata(&self.file).unwrap();
        assert_eq!(m.ino(), ino);
        assert_eq!(m.len() as usize, self.len);
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
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("running its preflight"), "{err}");
    let cannot = format!("backend `{picked}` cannot run here");
    assert!(
        err.contains(&cannot) && err.contains("remedy:"),
        "the preflight's cause and remedy: {err}"
    );
    assert!(!marker.exists(), "nothing ran");
    let after = read_cache(cache.path());
    assert_eq!(after["host"], key_before);
    assert_eq!(entry_for(&after, "trusted"), None, "the entry is dropped");

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
        let err = text(&first.stderr);
        if first.status.code() != Some(0) {
            eprintln!("skipped {lane}/{backend:?}: {err}");
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
        assert_ne!(second.status.code(), Some(0), "{lane}/{backend:?}: {err}");
        assert!(
            !text(&second.stdout).contains("s3cret"),
            "{lane}/{backend:?}: read a root-only file"
        );
    }
}
