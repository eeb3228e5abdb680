//! The `sandbox` command, run as a person or a script runs it: the built binary, its exit
//! status, its stdout and stderr, and the effects on the filesystem, checked from here.
//!
//! The backend-independent cases (option errors, the policy file, doctor, completions)
//! run once; the cases that run a program run once per compiled-in backend. A backend
//! whose preflight fails here is skipped with its reason printed, unless it is named in
//! `SANDBOX_TEST_REQUIRE` (a comma-separated list, or `all`), as CI does: then
//! "unavailable" is a failure.

// Helpers of a test target panic on failure like the tests that call them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use support::{available, backend_flags, confines, doctor, test_image, text, workspace, BIN};

#[macro_use]
mod support;

fn sandbox() -> Command {
    Command::new(BIN)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    sandbox()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the sandbox binary runs")
}

fn code(o: &Output) -> i32 {
    o.status
        .code()
        .unwrap_or_else(|| panic!("sandbox itself died by a signal: {o:?}"))
}

/// What `backend` enforces here, from doctor.
fn capability(backend: &str) -> &'static Value {
    &support::report(backend)["capability"]
}

fn json_of(o: &Output) -> Value {
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "--json prints exactly one line: {out:?}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

// ---------------------------------------------------------------------------------------
// Option errors: 125, a clear message, and nothing run.

/// Each of these must exit 125 and leave the marker file uncreated.
fn assert_refused_before_running(extra: &[&str], expect_in_stderr: &str) {
    let ws = workspace();
    let marker = ws.path().join("marker");
    let marker_s = marker.to_str().unwrap().to_string();
    let mut args = vec!["run"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "touch", &marker_s]);
    let o = run_in(ws.path(), &args);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 125, "{args:?}: stderr: {err}");
    assert!(
        err.to_lowercase()
            .contains(&expect_in_stderr.to_lowercase()),
        "{args:?}: stderr should mention {expect_in_stderr:?}: {err}"
    );
    assert!(!marker.exists(), "{args:?}: the program ran");
}

#[test]
fn contradictory_changes_flags_are_125_before_anything_runs() {
    assert_refused_before_running(&["--snapshot", "--changes", "apply"], "--snapshot");
    assert_refused_before_running(&["--changes-diff"], "--changes");
    assert_refused_before_running(&["--changes", "sometimes"], "sometimes");
}

#[test]
fn unknown_flag_is_125_before_anything_runs() {
    assert_refused_before_running(&["--netwrok", "none"], "--netwrok");
}

#[test]
fn bad_allowlists_are_125_before_anything_runs() {
    assert_refused_before_running(&["--allow-host", "crates.io:0"], "1 to 65535");
    assert_refused_before_running(&["--allow-host", "*.com"], "top-level");
    assert_refused_before_running(&["--allow-host", "https://crates.io"], "URL");
    assert_refused_before_running(&["--network", "proxy"], "at least one allowed host");
    assert_refused_before_running(&["--host-port", "0"], "0");
    assert_refused_before_running(&["--host-port", "65536"], "65536");
    assert_refused_before_running(&["--network", "full", "--host-port", "5432"], "loopback");
    assert_refused_before_running(&["--network", "none", "--host-port", "5432"], "loopback");
    assert_refused_before_running(
        &["--network", "full", "--allow-host", "crates.io"],
        "only to network mode `proxy`",
    );
}

#[test]
fn a_bad_upstream_proxy_is_125_before_anything_runs() {
    let allow = ["--allow-host", "crates.io", "--upstream-proxy"];
    let with = |url: &'static str| [&allow[..], &[url]].concat();
    assert_refused_before_running(&with("https://proxy.test:1"), "scheme `https`");
    assert_refused_before_running(&with("socks5://proxy.test:1080"), "scheme `socks5`");
    assert_refused_before_running(&with("http://proxy.test"), "names no port");
    assert_refused_before_running(&with("http://proxy.test:3128/x"), "path");
    assert_refused_before_running(&with("http://u:p@proxy.test:1"), "credentials");
    // Without the proxy it would mean nothing: refused, naming the flag that gives one.
    assert_refused_before_running(&["--upstream-proxy", "http://proxy.test:1"], "--allow-host");
    // The refusal of credentials never repeats them.
    let ws = workspace();
    let mut args = vec!["run"];
    args.extend(with("http://alice:hunter2@proxy.test:1"));
    args.extend(["--", "true"]);
    let o = run_in(ws.path(), &args);
    assert_eq!(code(&o), 125);
    let err = text(&o.stderr);
    assert!(
        err.contains("--upstream-proxy") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn bad_values_are_125_before_anything_runs() {
    for (args, named) in [
        (&["--network", "everything"][..], "everything"),
        (&["--timeout", "soon"], "soon"),
        (&["--timeout", "0"], "--timeout"),
        (&["--timeout", "-3"], "--timeout"),
        (&["--memory", "0"], "--memory"),
        (&["--memory", "lots"], "--memory"),
        (&["--memory", "-1"], "--memory"),
        (&["--max-output", "0"], "--max-output"),
        (&["--lane", "lax"], "lax"),
        (&["--backend", "chroot"], "chroot"),
        (&["--env", "=value"], "--env"),
    ] {
        assert_refused_before_running(args, named);
    }
}

#[test]
fn a_missing_workspace_is_125_before_anything_runs() {
    assert_refused_before_running(
        &["--workspace", "/nonexistent/sandbox-test-ws"],
        "/nonexistent/sandbox-test-ws",
    );
    // Relative, from the current directory, as a person types it.
    assert_refused_before_running(&["--workspace", "no-such-dir"], "no-such-dir");
}

#[test]
fn image_with_a_backend_that_runs_no_image_is_125_before_anything_runs() {
    let host_program_backends = sandbox::registry::compiled_in()
        .filter(|i| !i.needs_image())
        .map(|i| i.name);
    for backend in host_program_backends {
        assert_refused_before_running(
            &[
                "--backend",
                backend,
                "--lane",
                "trusted",
                "--image",
                "debian",
            ],
            "image",
        );
    }
}

/// The compiled-in backend that confines nothing (the registry's `unconfined`), if any.
fn unconfined() -> Option<&'static str> {
    sandbox::registry::compiled_in()
        .find(|i| i.unconfined)
        .map(|i| i.name)
}

#[test]
fn missing_program_is_a_usage_error() {
    let name = sandbox::registry::names().next().unwrap();
    let o = run_in(Path::new("/"), &["run", "--backend", name]);
    assert_eq!(code(&o), 125, "{}", text(&o.stderr));
}

#[test]
fn no_subcommand_is_125_and_help_is_0() {
    assert_eq!(code(&sandbox().output().unwrap()), 125);
    for sub in [&["--help"][..], &["run", "--help"], &["doctor", "--help"]] {
        let o = sandbox().args(sub).output().unwrap();
        assert_eq!(code(&o), 0, "{sub:?}");
    }
}

#[test]
fn every_subcommand_help_explains_the_exit_statuses() {
    for sub in ["run", "doctor", "image", "container-profile", "completions"] {
        let o = sandbox().args([sub, "--help"]).output().unwrap();
        let help = text(&o.stdout);
        assert!(help.contains("Exit status"), "{sub}: {help}");
    }
    let run_help = text(&sandbox().args(["run", "--help"]).output().unwrap().stdout);
    for status in ["124", "125", "126", "127", "128+N"] {
        assert!(run_help.contains(status), "{status}: {run_help}");
    }
}

#[test]
fn the_unconfined_backend_off_the_trusted_lane_says_to_use_the_trusted_lane() {
    let Some(none) = unconfined() else {
        return;
    };
    let ws = workspace();
    let o = run_in(ws.path(), &["run", "--backend", none, "--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 125, "{err}");
    assert!(err.contains("--lane trusted"), "{err}");
    if available(none) {
        // What the trusted lane would not enforce, named.
        assert!(err.contains("network mode `none`"), "{err}");
    }
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn a_backend_left_out_of_the_build_names_its_feature() {
    for name in sandbox::registry::names() {
        let compiled = doctor()["host"]["compiled_in"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b == name);
        if compiled {
            continue;
        }
        let ws = workspace();
        let o = run_in(
            ws.path(),
            &["run", "--backend", name, "--lane", "trusted", "--", "true"],
        );
        let err = text(&o.stderr);
        assert_eq!(code(&o), 125, "{err}");
        assert!(err.contains(&format!("--features {name}")), "{err}");
    }
}

/// A reader that went away before the outcome was written (`sandbox run --json … | head
/// -c0`) makes no panic: the run's own exit code is still the command's.
#[test]
fn json_to_a_closed_pipe_is_no_panic() {
    let ws = workspace();
    let mut child = sandbox()
        .current_dir(ws.path())
        .args([
            "run", "--lane", "trusted", "--json", "--", "sh", "-c", "exit 3",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sandbox binary runs");
    // Close the read end before anything is written.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code(&o), 3, "{err}");
}

#[test]
fn auto_runs_what_doctor_says_it_picks_and_never_none() {
    for pick in doctor()["auto"].as_array().unwrap() {
        let lane = pick["lane"].as_str().unwrap();
        let ws = workspace();
        let o = run_in(ws.path(), &["run", "--lane", lane, "--json", "--", "true"]);
        match pick["backend"].as_str() {
            Some(expected) => {
                assert_eq!(code(&o), 0, "{lane}: {}", text(&o.stderr));
                let j = json_of(&o);
                assert_eq!(j["backend"], expected, "{lane}: {j}");
                assert_ne!(j["backend"].as_str(), unconfined());
            }
            None => {
                assert_eq!(code(&o), 125, "{lane}: {}", text(&o.stderr));
                assert_eq!(json_of(&o)["error"]["kind"], "unavailable");
            }
        }
    }
}

#[test]
fn an_image_without_a_backend_means_the_first_backend_that_runs_images() {
    // `auto`'s order on the default lane, among the backends that run an image.
    let Some(expected) = sandbox::select::candidates(
        sandbox_core::Lane::Strict,
        &sandbox::select::Config::with_image("x"),
        false,
    )
    .into_iter()
    .map(|i| i.name)
    .next() else {
        eprintln!("skipped: no compiled-in backend runs an image");
        return;
    };
    if !available(expected) {
        return;
    }
    let ws = workspace();
    let image = test_image();
    let o = run_in(
        ws.path(),
        &["run", "--image", &image, "--json", "--", "true"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(json_of(&o)["backend"], expected);
}

// ---------------------------------------------------------------------------------------
// The policy file.

#[test]
fn policy_file_with_an_unknown_key_is_125_naming_it() {
    let ws = workspace();
    let cfg = ws.path().join("policy.toml");
    std::fs::write(&cfg, "lane = \"trusted\"\nnetwrok = \"full\"\n").unwrap();
    assert_refused_before_running(&["--config", cfg.to_str().unwrap()], "netwrok");
    std::fs::write(&cfg, "timeout = \"soon\"\n").unwrap();
    assert_refused_before_running(&["--config", cfg.to_str().unwrap()], "timeout");
    assert_refused_before_running(&["--config", "/nonexistent/policy.toml"], "policy");
}

#[test]
fn policy_file_values_apply_and_flags_override_them() {
    let Some(none) = unconfined().filter(|n| available(n)) else {
        return;
    };
    let dir = workspace();
    std::fs::create_dir(dir.path().join("proj")).unwrap();
    let cfg = dir.path().join("policy.toml");
    std::fs::write(
        &cfg,
        format!(
            "backend = \"{none}\"\nlane = \"trusted\"\nworkspace = \"proj\"\n\
             network = \"loopback\"\nenv = [\"FROM_FILE=file\", \"OVERRIDDEN=file\"]\n"
        ),
    )
    .unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let elsewhere = workspace();
    // The file alone: its workspace (relative to the file), lane, network and env apply.
    let o = run_in(
        elsewhere.path(),
        &[
            "run",
            "--config",
            cfg_s,
            "--json",
            "--",
            "sh",
            "-c",
            "echo \"$FROM_FILE $OVERRIDDEN\"; pwd",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let j = json_of(&o);
    let proj = dir.path().join("proj").canonicalize().unwrap();
    assert_eq!(j["policy"]["workspace"], proj.to_str().unwrap());
    assert_eq!(j["policy"]["network"], "loopback");
    assert_eq!(j["policy"]["lane"], "trusted");
    let err = text(&o.stderr);
    assert!(err.contains("file file"), "{err}");
    assert!(err.contains(proj.to_str().unwrap()), "{err}");
    // Flags override single values and add to lists (a later --env wins).
    let o = run_in(
        elsewhere.path(),
        &[
            "run",
            "--config",
            cfg_s,
            "--network",
            "full",
            "--workspace",
            ".",
            "--env",
            "OVERRIDDEN=flag",
            "--json",
            "--",
            "sh",
            "-c",
            "echo \"$FROM_FILE $OVERRIDDEN\"",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let j = json_of(&o);
    assert_eq!(j["policy"]["network"], "full");
    let here = elsewhere.path().canonicalize().unwrap();
    assert_eq!(j["policy"]["workspace"], here.to_str().unwrap());
    assert!(text(&o.stderr).contains("file flag"), "{}", text(&o.stderr));
}

// ---------------------------------------------------------------------------------------
// doctor and completions.

#[test]
fn doctor_reports_every_compiled_in_backend_in_json_and_text() {
    let j = doctor();
    let compiled: Vec<&str> = j["host"]["compiled_in"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!compiled.is_empty());
    let backends = j["backends"].as_array().unwrap();
    assert_eq!(backends.len(), compiled.len());
    for b in backends {
        let name = b["name"].as_str().unwrap();
        if b["works"] == true {
            let cap = &b["capability"];
            for field in [
                "confine_writes",
                "confine_reads",
                "tree_kill",
                "memory_limit",
                "process_limit",
            ] {
                assert!(cap[field].is_boolean(), "{name}.{field}: {cap}");
            }
            for mode in ["network_none", "network_loopback", "network_full"] {
                assert!(cap[mode]["kind"].is_string(), "{name}.{mode}: {cap}");
            }
        } else {
            assert!(b["problem"].is_string() && b["remedy"].is_string(), "{b}");
        }
    }
    let o = sandbox().arg("doctor").output().unwrap();
    let human = text(&o.stdout);
    for name in &compiled {
        assert!(human.contains(&format!("{name}: ")), "{human}");
    }
    assert!(human.contains("auto picks"), "{human}");
    // The exit status says whether anything confines here.
    let confines = j["auto"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| !p["backend"].is_null());
    assert_eq!(code(&o), if confines { 0 } else { 1 }, "{human}");
}

/// A user who may not open the engine's socket hears that first, with its remedy, and not
/// "no image named" (an image would not help them). Run as root, as uid 65534 without
/// groups, where the engine's default socket is closed to others.
#[test]
fn doctor_names_an_engine_this_user_may_not_reach_before_a_missing_image() {
    use std::os::unix::fs::MetadataExt;
    let socket = Path::new("/var/run/docker.sock");
    let closed = std::fs::metadata(socket).is_ok_and(|m| m.mode() & 0o006 == 0);
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root || !closed || std::env::var_os("DOCKER_HOST").is_some() {
        eprintln!("skipped: needs root and a default engine socket closed to others");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(["doctor", "--json"])
        .current_dir("/")
        .output()
        .unwrap();
    let j: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stderr)));
    let image_backends: Vec<&Value> = j["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["needs_image"] == true)
        .collect();
    for b in image_backends {
        let problem = b["problem"].as_str().unwrap_or_default();
        let remedy = b["remedy"].as_str().unwrap_or_default();
        assert!(b["works"] == false && b["checked"] == true, "{b}");
        assert!(
            !problem.contains("no container image") && problem.contains("ermission denied"),
            "{b}"
        );
        assert!(remedy.contains("group"), "{b}");
    }
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let o = sandbox().args(["completions", shell]).output().unwrap();
        assert_eq!(code(&o), 0);
        let script = text(&o.stdout);
        assert!(script.contains("sandbox"), "{shell}");
        assert!(script.contains("workspace"), "{shell}: {script}");
    }
    assert_eq!(
        code(&sandbox().args(["completions", "cmd"]).output().unwrap()),
        125
    );
}

/// `container-profile` prints, for both engines, the same JSON document: moby's default
/// profile as kept in the tree, every rule unchanged, after one added rule that allows the
/// namespace and mount calls whatever the capabilities. An unknown engine is an option
/// error naming the engines, and prints nothing.
#[test]
fn the_container_profile_is_moby_default_plus_the_sandbox_calls() {
    let moby: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/sandbox/profile/moby-default.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let printed = |engine: &str| {
        let o = sandbox()
            .args(["container-profile", "--engine", engine])
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let docker = printed("docker");
    assert_eq!(printed("kubernetes"), docker);
    let default = sandbox().arg("container-profile").output().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&default.stdout).unwrap(),
        docker
    );
    let (m, p) = (
        moby["syscalls"].as_array().unwrap(),
        docker["syscalls"].as_array().unwrap(),
    );
    assert_eq!(p.len(), m.len() + 1);
    assert_eq!(&p[1..], &m[..]);
    assert_eq!(docker["defaultAction"], moby["defaultAction"]);
    assert_eq!(docker["archMap"], moby["archMap"]);
    let added = &p[0];
    assert_eq!(added["action"], "SCMP_ACT_ALLOW");
    assert!(added.get("includes").is_none() && added.get("args").is_none());
    let names: Vec<&str> = added["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for call in ["unshare", "clone3", "mount", "mount_setattr"] {
        assert!(names.contains(&call), "{call}: {names:?}");
    }
    let o = sandbox()
        .args(["container-profile", "--engine", "podman"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(code(&o), 125, "{err}");
    assert!(
        err.contains("docker") && err.contains("kubernetes"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// A grant no backend takes (`--write /`, which holds /proc) is one short line with one
/// remedy, not the same refusal once per backend tried.
#[test]
fn a_refused_grant_is_one_short_line() {
    let ws = workspace();
    let o = run_in(ws.path(), &["run", "--write", "/", "--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 125, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("sandbox: --write / is refused"), "{err}");
    assert_eq!(err.matches("remedy").count(), 1, "{err}");
    assert!(err.len() < 400, "{} characters: {err}", err.len());
    assert!(
        !err.contains("image"),
        "nothing about another backend's needs: {err}"
    );
}

// ---------------------------------------------------------------------------------------
// Per backend: statuses, streaming, --json.

fn run_with(backend: &str, ws: &Path, extra: &[&str], argv: &[&str]) -> Output {
    run_with_flags(&backend_flags(backend), ws, extra, argv)
}

/// `sandbox run FLAGS EXTRA -- ARGV` in `ws`.
fn run_with_flags(flags: &[String], ws: &Path, extra: &[&str], argv: &[&str]) -> Output {
    let mut args: Vec<&str> = vec!["run"];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    run_in(ws, &args)
}

/// `--toolchain` runs the caller's rustup toolchain with two flags: `cargo --version`
/// runs, with `RUSTUP_HOME` at the real home (behind root's `0700` home on a root host).
fn the_callers_toolchain_runs_with_one_flag_each(backend: &str) {
    let cap = capability(backend);
    if cap["host_programs"] != true || cap["hide_paths"] != true {
        eprintln!("{backend}: skipped: runs no host program, or cannot hide credentials");
        return;
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".rustup")))
        .expect("rustup's home");
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".cargo")))
        .expect("cargo's home")
        .join("bin");
    assert!(
        rustup.is_dir() && cargo_bin.is_dir(),
        "this test runs the rustup toolchain that built it: {} and {}",
        rustup.display(),
        cargo_bin.display()
    );
    let (r, c) = (rustup.to_str().unwrap(), cargo_bin.to_str().unwrap());
    let flags = ["--toolchain", r, "--toolchain", c];
    let ws = workspace();
    let o = run_with(backend, ws.path(), &flags, &["cargo", "--version"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("cargo "), "{}", text(&o.stdout));
    let o = run_with(backend, ws.path(), &flags, &["env"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let want = format!("RUSTUP_HOME={}", rustup.canonicalize().unwrap().display());
    assert!(
        text(&o.stdout).lines().any(|l| l == want),
        "no {want} in {}",
        text(&o.stdout)
    );
}

fn exit_code_is_the_programs(backend: &str) {
    let ws = workspace();
    for n in ["0", "3", "42"] {
        let o = run_with(backend, ws.path(), &[], &["sh", "-c", &format!("exit {n}")]);
        assert_eq!(code(&o).to_string(), n, "{}", text(&o.stderr));
    }
}

fn a_signal_is_128_plus_n(backend: &str) {
    let ws = workspace();
    let o = run_with(
        backend,
        ws.path(),
        &[],
        &["sh", "-c", "kill -TERM $$; sleep 5"],
    );
    assert_eq!(code(&o), 128 + 15, "{}", text(&o.stderr));
    let o = run_with(
        backend,
        ws.path(),
        &["--json"],
        &["sh", "-c", "kill -TERM $$; sleep 5"],
    );
    let j = json_of(&o);
    assert_eq!(j["exit_status"], 143, "{j}");
    if capability(backend)["signal_status"] == true {
        assert_eq!(j["status"], "signaled", "{j}");
        assert_eq!(j["signal"], 15, "{j}");
    } else {
        // The backend cannot tell a signal from an exit with 128+N, and says so.
        assert_eq!(j["status"], "exited", "{j}");
        assert_eq!(j["exit_code"], 143, "{j}");
    }
}

fn the_timeout_is_124_and_kills_the_tree(backend: &str) {
    let ws = workspace();
    let marker = ws.path().join("survivor");
    let script = format!(
        "(setsid sh -c 'sleep 3; touch {}' &) ; sleep 60",
        marker.display()
    );
    let started = std::time::Instant::now();
    let o = run_with(
        backend,
        ws.path(),
        &["--timeout", "1", "--json"],
        &["sh", "-c", &script],
    );
    assert_eq!(code(&o), 124, "{}", text(&o.stderr));
    assert!(started.elapsed().as_secs() < 50, "the timeout did not fire");
    let j = json_of(&o);
    assert_eq!(j["status"], "timed_out", "{j}");
    assert_eq!(j["timed_out"], true, "{j}");
    assert_eq!(j["exit_status"], 124, "{j}");
    // One line says why, with the option that decided it.
    let err = text(&o.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("timed out")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].starts_with("sandbox: ") && said[0].contains("--timeout"),
        "{err}"
    );
    // The double-forked, setsid descendant died with the tree: its marker never appears.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(!marker.exists(), "a descendant outlived the timeout");
}

/// A command that outgrows `--memory` is killed, and where the backend reports it
/// (`oom_status`, a limit that is not an rlimit), one stderr line says so.
fn an_oom_kill_is_137_and_says_so(backend: &str) {
    let ws = workspace();
    // `tail` keeps the last line, and /dev/zero has no line break: it holds all it reads,
    // until the limit stops it. It is the command itself, so its death is the outcome.
    let o = run_with(
        backend,
        ws.path(),
        &["--memory", "32", "--json"],
        &["tail", "-n", "1", "/dev/zero"],
    );
    let err = text(&o.stderr);
    let j = json_of(&o);
    let mechanism = j["policy"]["limits"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["limit"] == "memory"))
        .map(|l| l["mechanism"].clone());
    let reports =
        capability(backend)["oom_status"] == true && mechanism != Some(Value::from("rlimit"));
    let said = err.lines().filter(|l| l.contains("out of memory")).count();
    if j["status"] == "out_of_memory" {
        assert_eq!(code(&o), 137, "{err}");
        assert_eq!(said, 1, "{err}");
        assert!(err.contains("--memory") && err.contains("32 MiB"), "{err}");
    } else {
        assert!(!reports, "{backend} claims to report OOM kills: {j}");
        eprintln!(
            "SKIPPED (oom line): {backend} does not report the OOM kill ({})",
            j["status"]
        );
        assert_eq!(said, 0, "{err}");
    }
}

fn not_found_is_127(backend: &str) {
    let ws = workspace();
    let o = run_with(backend, ws.path(), &[], &["definitely-not-a-program-xyz"]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 127, "{err}");
    assert!(err.contains("definitely-not-a-program-xyz"), "{err}");
    // In an image, the backend works and the image lacks the program: the remedy is an
    // image that has it, never doctor (which says the backend works).
    if capability(backend)["host_programs"] == false {
        assert!(
            err.contains("sandbox image --from-host") && !err.contains("sandbox doctor"),
            "{err}"
        );
    }
}

fn not_executable_is_126(backend: &str) {
    let ws = workspace();
    let script = ws.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run_with(backend, ws.path(), &[], &["./script.sh"]);
    assert_eq!(code(&o), 126, "{}", text(&o.stderr));
}

fn json_has_the_outcome_and_output_goes_to_stderr(backend: &str) {
    let ws = workspace();
    let o = run_with(
        backend,
        ws.path(),
        &["--json"],
        &["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 5"],
    );
    assert_eq!(code(&o), 5, "{}", text(&o.stderr));
    let j = json_of(&o);
    assert_eq!(j["status"], "exited");
    assert_eq!(j["exit_code"], 5);
    assert_eq!(j["exit_status"], 5);
    assert!(j["signal"].is_null());
    assert_eq!(j["timed_out"], false);
    assert!(j["wall_time_secs"].as_f64().unwrap() >= 0.0);
    assert_eq!(j["stdout_truncated"], false);
    assert_eq!(j["stderr_truncated"], false);
    assert_eq!(j["backend"], backend);
    assert_eq!(j["policy"]["backend"], backend);
    assert_eq!(j["policy"]["network"], "none");
    assert!(j["policy"]["grants"].is_array(), "{j}");
    // What was enforced: `notes` as rendered lines, `enforced` the same record as data.
    let notes = j["policy"]["notes"].as_array().unwrap();
    let enforced = j["policy"]["enforced"].as_array().unwrap();
    assert_eq!(notes.len(), enforced.len(), "{j}");
    for (n, e) in notes.iter().zip(enforced) {
        assert!(n.as_str().is_some_and(|n| !n.is_empty()), "{j}");
        assert!(e["mechanism"].is_string() && e["fact"].is_string(), "{e}");
    }
    assert!(!text(&o.stdout).contains("to-stdout"));
    let err = text(&o.stderr);
    assert!(
        err.contains("to-stdout") && err.contains("to-stderr"),
        "{err}"
    );
    // Without --json the streams stay apart.
    let o = run_with(
        backend,
        ws.path(),
        &[],
        &["sh", "-c", "echo to-stdout; echo to-stderr >&2"],
    );
    assert_eq!(text(&o.stdout), "to-stdout\n");
    assert!(text(&o.stderr).contains("to-stderr"));
}

fn max_output_truncates_and_says_so(backend: &str) {
    let ws = workspace();
    let o = run_with(
        backend,
        ws.path(),
        &["--max-output", "1000", "--json"],
        &[
            "sh",
            "-c",
            "echo BEGIN; i=0; while [ $i -lt 2000 ]; do echo middle-line; i=$((i+1)); done; echo THE-END",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let j = json_of(&o);
    assert_eq!(j["stdout_truncated"], true, "{j}");
    assert_eq!(j["stdout_bytes"], 6 + 2000 * 12 + 8, "{j}");
    let shown = text(&o.stderr);
    assert!(shown.starts_with("BEGIN\n"), "{shown}");
    assert!(shown.trim_end().ends_with("THE-END"), "{shown}");
    assert!(shown.contains("bytes of output dropped"), "{shown}");
    assert!(shown.len() < 1200, "shown {} bytes", shown.len());
}

fn output_streams_while_the_program_runs(backend: &str) {
    let ws = workspace();
    // The first line can only reach us while the program still runs if output is
    // streamed: otherwise it would come at the end, a minute later. (A file handshake
    // would not do: the docker backend may copy the workspace in and out.)
    let flags = backend_flags(backend);
    let mut child = sandbox()
        .current_dir(ws.path())
        .arg("run")
        .args(&flags)
        .args(["--", "sh", "-c", "echo first; sleep 60; echo second"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first line came only when the program ended"
    );
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(child.wait().unwrap().code(), Some(128 + 15));
    assert!(
        lines.next().is_none(),
        "a line came after the interrupt: the program was not killed"
    );
}

fn interrupting_sandbox_kills_the_tree_and_exits_128_plus_n(backend: &str) {
    let ws = workspace();
    let marker = ws.path().join("survivor");
    let script = format!(
        "(setsid sh -c 'sleep 3; touch {}' &); echo started; sleep 60",
        marker.display()
    );
    let flags = backend_flags(backend);
    let mut child = sandbox()
        .current_dir(ws.path())
        .arg("run")
        .args(&flags)
        .args(["--timeout", "120", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "started");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 2), "{status:?}");
    // The double-forked, setsid descendant died with the tree.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert!(!marker.exists(), "a descendant outlived sandbox's exit");
}

fn a_reader_that_goes_away_ends_the_program_as_sigpipe_would(backend: &str) {
    let ws = workspace();
    let flags = backend_flags(backend);
    // `sandbox run -- yes | head -1`: without this the program would print forever into
    // our drained pipe.
    let mut child = sandbox()
        .current_dir(ws.path())
        .arg("run")
        .args(&flags)
        .args(["--", "sh", "-c", "while :; do echo y; done"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "y");
    drop(lines);
    assert_eq!(child.wait().unwrap().code(), Some(128 + 13));
}

fn relative_paths_are_taken_against_the_current_directory(backend: &str) {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let o = run_with(
        backend,
        ws.path(),
        &["--workspace", "sub", "--json"],
        &["pwd"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let sub = ws.path().join("sub").canonicalize().unwrap();
    assert_eq!(json_of(&o)["policy"]["workspace"], sub.to_str().unwrap());
    // Run from a subdirectory of the workspace, the command starts there.
    let o = run_in(
        &ws.path().join("sub"),
        &[
            &["run"][..],
            &backend_flags(backend)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &["--workspace", "..", "--", "pwd"],
        ]
        .concat(),
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), sub.to_str().unwrap());
}

/// `--changes ask` without a terminal applies nothing and says so; `--changes apply`
/// writes the change set, which `--json` lists; a backend without a change layer refuses
/// with 125 before running anything.
fn changes_are_asked_applied_or_refused(backend: &str) {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let edit = ["sh", "-c", "echo two >> a.txt; echo new > b.txt"];
    if capability(backend)["change_layer"].is_null() {
        let o = run_with(backend, ws.path(), &["--changes", "apply"], &edit);
        assert_eq!(code(&o), 125, "{}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("copy-on-write"),
            "{}",
            text(&o.stderr)
        );
        assert!(!ws.path().join("b.txt").exists(), "the program ran");
        return;
    }
    let o = run_with(
        backend,
        ws.path(),
        &["--changes", "ask", "--changes-diff"],
        &edit,
    );
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    assert!(
        err.contains("no terminal") && err.contains("nothing was applied"),
        "{err}"
    );
    assert!(err.contains(" b.txt | +4 B (added)"), "{err}");
    assert!(err.contains("+two"), "the diff is missing: {err}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!ws.path().join("b.txt").exists());

    let o = run_with(backend, ws.path(), &["--changes", "apply", "--json"], &edit);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let j = json_of(&o);
    let paths: Vec<&str> = j["changes"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a.txt", "b.txt"], "{j}");
    assert_eq!(j["changes_settled"]["applied"], true, "{j}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
        "new\n"
    );
}

/// `backend`'s flags, with `sh` and `curl` where the command runs: the host's, or, for a
/// backend that runs an image, one built here from the host's busybox and curl with the
/// registry's builder (the command's busybox image has no curl; nothing can be pulled),
/// tagged for this build tree.
fn flags_with_curl(backend: &str) -> Vec<String> {
    let tag = sandbox_core::registry::local_image_tag("sandbox-cli-test-curl", BIN.as_ref());
    let mut flags = backend_flags(backend);
    let Some(image) = sandbox::select::info(backend).ok().and_then(|i| i.image) else {
        return flags;
    };
    let files = sandbox_conformance::image_tool_sources(&["sh", "curl"]);
    assert_eq!(files.len(), 2, "the host lacks busybox or curl: {files:?}");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on((image.build_from_binaries)(tag.clone(), files))
        .unwrap_or_else(|e| panic!("building {tag}: {e}"));
    let at = flags.iter().position(|f| f == "--image").unwrap() + 1;
    flags[at] = tag;
    flags
}

/// `--allow-host` with a loopback CIDR (the command line has no test resolver, by design):
/// the allowed server is reached through the proxy, a denied attempt gets one stderr line
/// after the run, and `--json` carries both records. A backend that cannot run the proxy
/// refuses before anything runs; `none` runs it only as a recorded over-grant.
fn allow_host_reaches_the_allowlist_and_prints_each_denied_attempt(backend: &str) {
    let flags = flags_with_curl(backend);
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = std::io::Write::write_all(
                &mut s,
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhello-cli\n",
            );
        }
    });
    let ws = workspace();
    let allow = format!("127.0.0.0/8:{port}");
    // `--noproxy ''`: the sandbox's NO_PROXY keeps 127.0.0.1 (the command's own loopback)
    // direct; here the loopback address stands in for a remote host.
    // And one system call the shared table denies, so that a backend that reports those
    // prints a summary beside the proxy's line.
    let script = format!(
        "curl -sS --noproxy '' http://127.0.0.1:{port}/ >&2; \
         curl -sS --noproxy '' http://127.0.0.1:1/ >/dev/null 2>&1; \
         unshare -U true 2>/dev/null; exit 0"
    );
    let o = run_with_flags(
        &flags,
        ws.path(),
        &["--json", "--allow-host", &allow],
        &["sh", "-c", &script],
    );
    let err = text(&o.stderr);
    match capability(backend)["network_proxy"]["kind"].as_str() {
        Some("exact") => {
            assert_eq!(code(&o), 0, "{err}");
            assert!(err.contains("hello-cli"), "{err}");
            assert!(
                err.contains("sandbox: denied connect to 127.0.0.1:1 (not in the allowlist)"),
                "{err}"
            );
            let j = json_of(&o);
            let c = j["connections"]["entries"].as_array().unwrap();
            assert_eq!(c.len(), 2, "{c:?}");
            assert_eq!(j["connections"]["more"]["attempts"], 0);
            assert_eq!(
                (c[0]["count"].as_u64(), c[1]["count"].as_u64()),
                (Some(1), Some(1))
            );
            assert_eq!(c[0]["decision"], "allowed");
            assert_eq!(c[0]["rule"], allow.as_str());
            assert!(c[0]["bytes_in"].as_u64().unwrap() > 10, "{c:?}");
            assert_eq!(c[1]["decision"], "denied");
            assert_eq!(c[1]["port"], 1);
            // The refused connect is a denial too, said once on stderr: its line (with the
            // reason), and a summary that counts it without naming it again.
            assert_eq!(err.matches("127.0.0.1:1 (").count(), 1, "{err}");
            let cap = capability(backend);
            let d = j["denials"]["entries"].as_array().unwrap();
            let proxy: Vec<&Value> = d.iter().filter(|e| e["mechanism"] == "proxy").collect();
            if cap["reports_denials"]["network_connect"] == true {
                assert_eq!(proxy.len(), 1, "{d:?}");
                assert_eq!(proxy[0]["kind"], "network_connect");
                assert_eq!(proxy[0]["target"], "127.0.0.1:1");
                assert_eq!(proxy[0]["count"], 1);
            } else {
                assert!(proxy.is_empty(), "{d:?}");
            }
            if cap["reports_denials"]["syscall"] == true {
                assert!(
                    err.contains(
                        "sandbox: denied 2 operations: unshare (seccomp), 1 connect (proxy, \
                         listed above)"
                    ),
                    "{err}"
                );
            } else {
                assert!(!err.contains("sandbox: denied 1 operation"), "{err}");
                assert!(!err.contains("sandbox: denied 2 operations"), "{err}");
            }
        }
        Some("over_grant") => {
            assert_eq!(code(&o), 0, "{err}");
            let grants = json_of(&o)["policy"]["grants"].to_string();
            assert!(grants.contains("no allowlist"), "{grants}");
        }
        other => {
            assert_eq!(code(&o), 125, "{other:?}: {err}");
            assert!(err.contains("proxy"), "{err}");
        }
    }
}

/// An allowed connection the proxy could not make (here the destination refuses: a
/// loopback port with nothing listening) is one line on stderr after the run, with the
/// cause, not only in `--json`: the command sees only a failed connect.
fn an_allowed_connection_that_fails_is_one_line_on_stderr(backend: &str) {
    if capability(backend)["network_proxy"]["kind"] != "exact" {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: backend {backend} enforces no proxy exactly (its capability), so no \
             connection is the proxy's to make"
        );
        return;
    }
    let flags = flags_with_curl(backend);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ws = workspace();
    let allow = format!("127.0.0.0/8:{port}");
    let script = format!("curl -sS --noproxy '' http://127.0.0.1:{port}/ >/dev/null 2>&1; exit 0");
    let o = run_with_flags(
        &flags,
        ws.path(),
        &["--json", "--allow-host", &allow],
        &["sh", "-c", &script],
    );
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    let want = format!("sandbox: could not connect to 127.0.0.1:{port} (");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&want)).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].to_lowercase().contains("refused"), "{err}");
    assert!(!err.contains("denied connect"), "{err}");
    let j = json_of(&o);
    let c = j["connections"]["entries"].as_array().unwrap();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["decision"], "allowed");
    assert!(c[0]["error"].as_str().is_some(), "{c:?}");
}

/// `doctor --prove --backend NAME --json` proves the backend on this host, case by case,
/// with the command itself as the probe (in an image built from it, for a backend that runs
/// one): exit 0, `proved`, no case failed, every skip with its reason, and the read
/// confinement and denial checks among the passes where claimed. The unconfined backend has
/// nothing to prove: exit 1, `not_proved`, saying so.
fn doctor_prove_proves_the_backend(backend: &str) {
    let ws = workspace();
    let o = run_in(
        ws.path(),
        &["doctor", "--prove", "--backend", backend, "--json"],
    );
    let out = text(&o.stdout);
    let j: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {}", text(&o.stderr)));
    assert_eq!(j[0]["backend"], backend, "{j}");
    let info = sandbox::select::info(backend).unwrap();
    // What it is doing, as it goes, on stderr: the backend it starts on, an image build.
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("sandbox: {backend}: proving")),
        "{err}"
    );
    assert_eq!(
        err.contains("building the probe image"),
        info.image.is_some() && !info.unconfined,
        "{err}"
    );
    if info.unconfined {
        assert_eq!(code(&o), 1, "{j}");
        assert_eq!(j[0]["result"], "not_proved", "{j}");
        assert!(
            j[0]["reason"]
                .as_str()
                .unwrap()
                .contains("confines nothing"),
            "{j}"
        );
        return;
    }
    assert_eq!(code(&o), 0, "{j}");
    assert_eq!(j[0]["result"], "proved", "{j}");
    assert_eq!(
        j[0]["image"].as_str().is_some(),
        info.needs_image(),
        "a backend that runs an image proves in one built here: {j}"
    );
    let cases = j[0]["cases"].as_array().unwrap();
    let verdict = |name: &str| {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .map(|c| c["verdict"].as_str().unwrap().to_string())
    };
    assert!(cases.iter().all(|c| c["verdict"] != "fail"), "{j}");
    assert!(
        cases
            .iter()
            .filter(|c| c["verdict"] == "skip")
            .all(|c| c["message"].as_str().is_some_and(|m| !m.is_empty())),
        "a skip without its reason: {j}"
    );
    let cap = capability(backend);
    if cap["confine_reads"] == true {
        assert_eq!(verdict("fs::reads_outside_denied").as_deref(), Some("pass"));
    }
    if cap["confine_writes"] == true {
        assert_eq!(
            verdict("fs::writes_outside_denied").as_deref(),
            Some("pass")
        );
    }
    assert_eq!(
        verdict("denials::allowed_not_reported").as_deref(),
        Some("pass")
    );
    if cap["reports_denials"]["syscall"] == true {
        assert_eq!(
            verdict("denials::syscalls_reported").as_deref(),
            Some("pass")
        );
    }
}

/// Host files and directories under `/etc` an unprivileged user may not read (by mode).
fn unreadable_by_others(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        let others = m.mode() & 0o7;
        if m.is_dir() && others & 0o5 == 0o5 {
            unreadable_by_others(&e.path(), out);
        } else if (m.is_dir() && others & 0o5 != 0o5) || (m.is_file() && others & 0o4 == 0) {
            out.push(e.path());
        }
    }
}

/// `sandbox image --from-host` builds an image of the host's system directories on the
/// engine of a backend that runs images: the engine's export of it (read from here) holds
/// the host's `/etc` and `/usr`, `/bin` and `/sbin` as the host has them (links kept), no
/// home, and no file or directory others may not read (each one the host has under `/etc`
/// checked absent by name); a command runs in it through the backend, as the host's own
/// programs. A second build of the same host keeps the image.
fn an_image_from_the_host_holds_no_file_others_cannot_read(backend: &str) {
    if sandbox::select::info(backend).unwrap().image.is_none() {
        eprintln!("skipped: {backend} runs no image");
        return;
    }
    let tag = "sandbox-host:latest";
    let ws = workspace();
    let o = run_in(ws.path(), &["image", "--from-host", "--tag", tag]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    assert!(err.contains(&format!("--image {tag}")), "{err}");
    let mut hidden = Vec::new();
    unreadable_by_others(Path::new("/etc"), &mut hidden);
    assert!(
        hidden.iter().any(|p| p == Path::new("/etc/shadow")),
        "the host has no /etc/shadow others cannot read: {hidden:?}"
    );

    // The image's filesystem, as the engine exports a container of it.
    let created = Command::new("docker")
        .args(["create", tag, "/bin/true"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", text(&created.stderr));
    let id = text(&created.stdout).trim().to_string();
    let mut export = Command::new("docker")
        .args(["export", &id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut entries = std::collections::BTreeMap::new();
    for e in tar::Archive::new(export.stdout.take().unwrap())
        .entries()
        .unwrap()
    {
        let e = e.unwrap();
        let path = e.path().unwrap().display().to_string();
        let link = e.link_name().unwrap().map(|l| l.display().to_string());
        let h = e.header();
        entries.insert(
            path.trim_end_matches('/').to_string(),
            (h.entry_type(), h.mode().unwrap(), link),
        );
    }
    assert!(export.wait().unwrap().success());
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();

    for p in &hidden {
        let rel = p.strip_prefix("/").unwrap().display().to_string();
        assert!(!entries.contains_key(&rel), "{rel} is in the image");
    }
    for (path, (ty, mode, _)) in &entries {
        if ty.is_file() {
            assert!(
                mode & 0o004 != 0,
                "{path} ({mode:o}) is not readable by others"
            );
            assert!(mode & 0o6000 == 0, "{path} ({mode:o}) keeps a set-id bit");
        }
        if ty.is_dir() {
            assert!(
                mode & 0o005 == 0o005,
                "{path} ({mode:o}) is closed to others"
            );
        }
        assert!(
            !path.starts_with("home/") && !path.starts_with("root/"),
            "{path}: a home in the image"
        );
    }
    for top in ["bin", "sbin", "lib"] {
        let host = std::fs::read_link(Path::new("/").join(top)).ok();
        let image = entries.get(top).and_then(|e| e.2.clone());
        assert_eq!(
            image.map(std::path::PathBuf::from),
            host,
            "/{top} is not as the host has it"
        );
    }
    assert!(entries.contains_key("etc/passwd") && entries.contains_key("usr/bin/env"));

    // A command runs in it through the backend: the host's own shell and files.
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(backend_flags(backend));
    let at = args.iter().position(|f| f == "--image").unwrap() + 1;
    args[at] = tag.into();
    args.extend(
        [
            "--",
            "sh",
            "-c",
            "test ! -e /etc/shadow && cat /etc/os-release",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run_in(ws.path(), &args);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        std::fs::read_to_string("/etc/os-release").unwrap()
    );

    let o = run_in(ws.path(), &["image", "--from-host", "--tag", tag]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("up to date"),
        "{}",
        text(&o.stderr)
    );
    // The image holds the host's whole /usr (gigabytes): the test made it, the test removes
    // it.
    let removed = Command::new("docker")
        .args(["image", "rm", tag])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{}", text(&removed.stderr));
}

// ---------------------------------------------------------------------------------------
// The change set's review: what a person reads before applying it.

/// Whether `backend` makes a change layer here; a printed reason when not.
fn reviews_changes(backend: &str) -> bool {
    if !capability(backend)["change_layer"].is_null() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: backend {backend} has no change layer (its capability), and this case \
         reviews a change set"
    );
    false
}

/// `sandbox ARGS` in `dir` with its stdout and stderr on a terminal of its own (a pty) and
/// stdin /dev/null: what a person sees. Its exit status and every byte the terminal got.
fn run_on_terminal(dir: &Path, args: &[&str]) -> (i32, Vec<u8>) {
    use std::ffi::CStr;
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt;

    // SAFETY: posix_openpt takes no pointers; the descriptor it returns is owned below.
    let raw = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(
        raw >= 0,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `raw` is a new descriptor nothing else owns.
    let master = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: calls on our own descriptor; `name` is a buffer of the length given, which
    // ptsname_r terminates with a NUL.
    let peer = unsafe {
        assert_eq!(libc::grantpt(master.as_raw_fd()), 0);
        assert_eq!(libc::unlockpt(master.as_raw_fd()), 0);
        assert_eq!(
            libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()),
            0
        );
        CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_string()
    };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&peer)
        .unwrap();
    let mut child = sandbox()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .unwrap();
    // The command (dropped above) held our copies of the terminal's peer: once `sandbox`
    // exits, a read gets EIO.
    let mut reader = std::fs::File::from(master);
    let collect = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break all,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    });
    let status = child.wait().unwrap();
    (status.code().unwrap(), collect.join().unwrap())
}

/// A file name and a line the command chose, each holding escape sequences that would
/// erase the line above and move the cursor up.
const FORGED_NAME: &str = "n\x1b[2K\x1b[1A.txt";
const FORGED_LINE: &str = "x\x1b[2K\x1b[1Ay";
/// A name with a line break, spelling a summary entry of its own.
const FORGED_ENTRY: &str = "m\n fake.txt | +1 B (added)";

/// The review printed on a terminal shows a name and a diff line the command filled with
/// escape sequences escaped (no ESC byte reaches the terminal); output that is not a
/// terminal keeps them raw.
fn the_review_on_a_terminal_escapes_what_the_command_wrote(backend: &str) {
    if !reviews_changes(backend) {
        return;
    }
    let ws = workspace();
    let flags = backend_flags(backend);
    let mut args: Vec<&str> = vec!["run"];
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--changes",
        "ask",
        "--changes-diff",
        "--",
        "sh",
        "-c",
        "printf '%s\\n' \"$2\" > \"$1\"; : > \"$3\"",
        "sh",
        FORGED_NAME,
        FORGED_LINE,
        FORGED_ENTRY,
    ]);
    let (status, seen) = run_on_terminal(ws.path(), &args);
    let shown = text(&seen);
    assert_eq!(status, 0, "{shown}");
    assert!(
        shown.contains("no terminal to ask on"),
        "the review did not run: {shown}"
    );
    assert!(
        !seen.contains(&0x1b),
        "an ESC byte reached the terminal: {shown:?}"
    );
    assert!(shown.contains("n\\x1b[2K\\x1b[1A.txt"), "{shown:?}");
    assert!(shown.contains("+x\\x1b[2K\\x1b[1Ay"), "{shown:?}");
    assert!(
        !shown.lines().any(|l| l.starts_with(" fake.txt")),
        "a name started a line of its own: {shown:?}"
    );
    assert!(shown.contains("m\\n fake.txt"), "{shown:?}");

    // Not a terminal: the bytes as the command wrote them.
    let o = run_in(ws.path(), &args);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    assert!(err.contains(&format!("+{FORGED_LINE}")), "{err:?}");
    assert!(!ws.path().join(FORGED_NAME).exists(), "nothing was applied");
}

/// Makes `dir` a git repository, as a person's checkout is before the run.
fn git_init(dir: &Path) {
    let o = Command::new("git")
        .args(["init", "-q"])
        .arg(dir)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git init: {}", text(&o.stderr));
}

/// A hooks directory and a program a repository's config names inside the work tree
/// (`core.hooksPath = .husky`, `core.fsmonitor = ./tools/fsmon.sh`) are read-only, and
/// one that does not exist yet cannot be created: its nearest directory is read-only,
/// said on stderr (checked from the host, directly and through a change layer).
fn a_config_named_hooks_path_is_read_only(backend: &str) {
    if !confines(backend) {
        return;
    }
    let ws = workspace();
    let w = ws.path();
    git_init(w);
    std::fs::create_dir_all(w.join(".husky")).unwrap();
    std::fs::create_dir_all(w.join("tools")).unwrap();
    std::fs::write(w.join("tools/fsmon.sh"), "#!/bin/sh\n").unwrap();
    let mut config = std::fs::read_to_string(w.join(".git/config")).unwrap();
    config.push_str("[core]\n\thooksPath = .husky\n\tfsmonitor = ./tools/fsmon.sh\n");
    std::fs::write(w.join(".git/config"), &config).unwrap();
    let script = "echo 'echo pwned' > .husky/pre-commit 2>/dev/null && echo wrote hook; \
                  echo 'echo pwned' >> tools/fsmon.sh 2>/dev/null && echo wrote fsmonitor; \
                  echo ok > file.txt";
    let mut args: Vec<&str> = vec![];
    if !capability(backend)["change_layer"].is_null() {
        args = vec!["--changes", "apply"];
    }
    for a in [vec![], args] {
        let o = run_with(backend, w, &a, &["sh", "-c", script]);
        let out = text(&o.stdout);
        assert_eq!(code(&o), 0, "{a:?} {out}{}", text(&o.stderr));
        assert!(!w.join(".husky/pre-commit").exists(), "{a:?} {out}");
        assert_eq!(
            std::fs::read_to_string(w.join("tools/fsmon.sh")).unwrap(),
            "#!/bin/sh\n",
            "{a:?} {out}"
        );
        assert_eq!(std::fs::read_to_string(w.join("file.txt")).unwrap(), "ok\n");
    }
    // Not there yet: the command cannot make it (its directory is read-only).
    config.push_str("[core]\n\thooksPath = tools/hooks\n");
    std::fs::write(w.join(".git/config"), &config).unwrap();
    let o = run_with(
        backend,
        w,
        &[],
        &[
            "sh",
            "-c",
            "mkdir -p tools/hooks && echo x > tools/hooks/pre-commit; true",
        ],
    );
    assert!(!w.join("tools/hooks").exists(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("does not exist yet"),
        "{}",
        text(&o.stderr)
    );
}

/// In a repository that existed before the run, the command cannot write the hooks or the
/// config of the repository, of a submodule's repository under `.git/modules` or of a
/// nested repository (checked from the host), while the rest of the workspace (and of
/// `.git`) stays writable; `--writable-git` lets it.
fn a_repository_s_hooks_and_config_are_read_only(backend: &str) {
    if !confines(backend) {
        return;
    }
    let ws = workspace();
    let w = ws.path();
    git_init(w);
    git_init(&w.join("nested"));
    std::fs::create_dir_all(w.join(".git/modules/sub/hooks")).unwrap();
    std::fs::write(w.join(".git/modules/sub/config"), "[core]\n").unwrap();
    std::fs::write(w.join(".git/modules/sub/HEAD"), "ref: refs/heads/main\n").unwrap();
    let config = std::fs::read(w.join(".git/config")).unwrap();
    let script = "for f in .git/hooks/pre-commit .git/modules/sub/hooks/pre-commit \
                  nested/.git/hooks/pre-commit; do \
                    echo 'echo pwned' > $f 2>/dev/null && echo wrote $f; done; \
                  echo '[core] fsmonitor = evil' >> .git/config 2>/dev/null && echo wrote config; \
                  echo '[core] fsmonitor = evil' >> .git/info/attributes 2>/dev/null && echo wrote info; \
                  echo ok > .git/FETCH_HEAD && echo ok > file.txt";
    let o = run_with(backend, w, &[], &["sh", "-c", script]);
    let out = text(&o.stdout);
    assert_eq!(code(&o), 0, "{out}{}", text(&o.stderr));
    for hook in [
        ".git/hooks/pre-commit",
        ".git/modules/sub/hooks/pre-commit",
        "nested/.git/hooks/pre-commit",
    ] {
        assert!(!w.join(hook).exists(), "the command planted {hook}: {out}");
    }
    assert_eq!(
        std::fs::read(w.join(".git/config")).unwrap(),
        config,
        "{out}"
    );
    assert!(!w.join(".git/info/attributes").exists(), "{out}");
    assert_eq!(std::fs::read_to_string(w.join("file.txt")).unwrap(), "ok\n");
    assert_eq!(
        std::fs::read_to_string(w.join(".git/FETCH_HEAD")).unwrap(),
        "ok\n",
        "the rest of .git stays writable (git commit works)"
    );

    // The same through a change layer: nothing under the carve-outs reaches the change set.
    if !capability(backend)["change_layer"].is_null() {
        let o = run_with(backend, w, &["--changes", "apply"], &["sh", "-c", script]);
        assert_eq!(code(&o), 0, "{}", text(&o.stderr));
        assert!(
            !w.join(".git/hooks/pre-commit").exists(),
            "{}",
            text(&o.stdout)
        );
        assert_eq!(std::fs::read(w.join(".git/config")).unwrap(), config);
    }

    // Nor by moving the repository's directory away (the carve-outs with it) and making a
    // new one in its place.
    let o = run_with(
        backend,
        w,
        &[],
        &[
            "sh",
            "-c",
            "mv .git moved; mkdir -p .git/hooks; echo 'echo pwned' > .git/hooks/pre-commit; \
             mv nested/.git nested/moved; mkdir -p nested/.git/hooks; \
             echo 'echo pwned' > nested/.git/hooks/pre-commit; \
             mv .git/modules/sub .git/modules/moved; mkdir -p .git/modules/sub/hooks; \
             echo 'echo pwned' > .git/modules/sub/hooks/pre-commit; true",
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    for hook in [
        ".git/hooks/pre-commit",
        "nested/.git/hooks/pre-commit",
        ".git/modules/sub/hooks/pre-commit",
    ] {
        assert!(
            !w.join(hook).exists(),
            "the command moved the repository away and planted {hook}"
        );
    }
    assert!(
        !w.join("moved").exists()
            && !w.join("nested/moved").exists()
            && !w.join(".git/modules/moved").exists()
    );
    // What keeps them in place keeps `.git` writable: what `git commit` writes (an object,
    // the index and a ref, each through a lock file renamed into place) lands.
    let commit = "mkdir -p .git/objects/ab && echo blob > .git/objects/ab/cdef && \
                  echo index > .git/index.lock && mv .git/index.lock .git/index && \
                  mkdir -p .git/refs/heads && echo ref > .git/refs/heads/main.lock && \
                  mv .git/refs/heads/main.lock .git/refs/heads/main && \
                  echo index > nested/.git/index.lock && mv nested/.git/index.lock nested/.git/index";
    let o = run_with(backend, w, &[], &["sh", "-c", commit]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    for (f, want) in [
        (".git/objects/ab/cdef", "blob\n"),
        (".git/index", "index\n"),
        (".git/refs/heads/main", "ref\n"),
        ("nested/.git/index", "index\n"),
    ] {
        assert_eq!(std::fs::read_to_string(w.join(f)).unwrap(), want, "{f}");
    }

    // Without a hooks directory, creating one would plant a hook: the whole `.git` is
    // read-only, and stderr says so with the remedy.
    let bare = workspace();
    git_init(bare.path());
    std::fs::remove_dir_all(bare.path().join(".git/hooks")).unwrap();
    let o = run_with(
        backend,
        bare.path(),
        &[],
        &[
            "sh",
            "-c",
            "mkdir .git/hooks && echo 'echo pwned' > .git/hooks/pre-commit",
        ],
    );
    assert_ne!(code(&o), 0, "{}", text(&o.stderr));
    assert!(!bare.path().join(".git/hooks").exists());
    assert!(
        text(&o.stderr).contains("read-only as a whole"),
        "{}",
        text(&o.stderr)
    );

    let o = run_with(
        backend,
        w,
        &["--writable-git"],
        &["sh", "-c", "echo 'echo hi' > .git/hooks/pre-commit"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(w.join(".git/hooks/pre-commit").exists());
}

/// The whole review as text that is not a terminal (stderr piped), the summary and the
/// diff, from `sandbox run --changes discard --changes-diff --json` in `ws`; and the JSON.
fn reviewed(backend: &str, ws: &Path, argv: &[&str]) -> (String, Value) {
    let o = run_with(
        backend,
        ws,
        &["--changes", "discard", "--changes-diff", "--json"],
        argv,
    );
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    (err, json_of(&o))
}

/// The diff between the first `diff --git` and the next line of `sandbox`'s own.
fn patch_of(review: &str) -> String {
    let start = review
        .find("diff --git ")
        .unwrap_or_else(|| panic!("no diff: {review}"));
    review[start..]
        .lines()
        .take_while(|l| !l.starts_with("sandbox: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn git_apply(ws: &Path, patch: &Path, check: bool) -> Output {
    let mut cmd = Command::new("git");
    cmd.current_dir(ws).arg("apply");
    if check {
        cmd.arg("--check");
    }
    cmd.arg(patch).output().expect("git runs")
}

/// `--changes discard --changes-diff` prints the summary and a diff `git apply` takes
/// (added and deleted files against /dev/null, mode changes, a symlink, names git quotes),
/// and `--json` carries the change set; the patch applied by hand makes what the command
/// made.
fn the_diff_is_a_patch_git_applies(backend: &str) {
    if !reviews_changes(backend) {
        return;
    }
    let ws = workspace();
    let w = ws.path();
    std::fs::write(w.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(w.join("old.txt"), "going\n").unwrap();
    std::fs::write(w.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(w.join("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let script = "printf 'one\\n2\\nthree\\n' > a.txt; rm old.txt; chmod 755 run.sh; \
                  echo new > new.txt; printf 'no newline' > 'q\"uo te.txt'; \
                  printf 'tab\\n' > \"$(printf 't\\tab.txt')\"; : > empty.txt; \
                  ln -s a.txt link; mkdir d; echo in > d/f.txt";
    let (review, j) = reviewed(backend, w, &["sh", "-c", script]);
    assert!(
        review.contains("changes discarded"),
        "a summary line on discard: {review}"
    );
    assert!(review.contains(" new.txt "), "{review}");
    let paths: Vec<&str> = j["changes"]["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("--json has the change set on discard: {j}"))
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"new.txt") && paths.contains(&"old.txt"),
        "{j}"
    );
    assert_eq!(j["changes_settled"]["applied"], false, "{j}");

    let patch = patch_of(&review);
    assert!(patch.contains("--- /dev/null\n+++ b/new.txt"), "{patch}");
    assert!(patch.contains("--- a/old.txt\n+++ /dev/null"), "{patch}");
    assert!(
        patch.contains("old mode 100644\nnew mode 100755"),
        "{patch}"
    );
    assert!(
        patch.contains("\"b/t\\tab.txt\""),
        "git quotes a tab: {patch}"
    );
    let file = w.join("../review.patch");
    std::fs::write(&file, &patch).unwrap();
    let check = git_apply(w, &file, true);
    assert!(
        check.status.success(),
        "git apply --check: {}\n{patch}",
        text(&check.stderr)
    );
    let applied = git_apply(w, &file, false);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let read = |p: &str| std::fs::read_to_string(w.join(p)).unwrap();
    assert_eq!(read("a.txt"), "one\n2\nthree\n");
    assert!(!w.join("old.txt").exists());
    assert_eq!(
        std::fs::metadata(w.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0o111
    );
    assert_eq!(read("new.txt"), "new\n");
    assert_eq!(read("q\"uo te.txt"), "no newline");
    assert_eq!(read("t\tab.txt"), "tab\n");
    assert_eq!(read("empty.txt"), "");
    assert_eq!(read("d/f.txt"), "in\n");
    assert_eq!(
        std::fs::read_link(w.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let _ = std::fs::remove_file(file);
}

/// On a terminal the diff is streamed file by file up to a cap: past it, how many files
/// were left out and the path of the complete patch, which `git apply` takes. Not on a
/// terminal, the whole diff.
fn a_long_diff_on_a_terminal_is_capped_and_kept_whole_in_a_patch(backend: &str) {
    if !reviews_changes(backend) {
        return;
    }
    let ws = workspace();
    let w = ws.path();
    // 64 files of 16 KiB each: 1 MiB of diff.
    let script = "i=0; while [ $i -lt 64 ]; do \
                    awk -v n=$i 'BEGIN { for (l = 0; l < 1024; l++) printf \"file %d line %08d\\n\", n, l }' > f$i.txt; \
                    i=$((i+1)); done";
    let flags = backend_flags(backend);
    let mut args: Vec<&str> = vec!["run"];
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--changes",
        "ask",
        "--changes-diff",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let (status, seen) = run_on_terminal(w, &args);
    let shown = text(&seen);
    assert_eq!(status, 0, "{}", &shown[shown.len().saturating_sub(2000)..]);
    assert!(
        seen.len() < 512 * 1024,
        "the terminal got {} bytes",
        seen.len()
    );
    let line = shown
        .lines()
        .find(|l| l.contains("left out of the diff"))
        .unwrap_or_else(|| {
            panic!(
                "no line saying what was left out: {}",
                &shown[shown.len().saturating_sub(2000)..]
            )
        });
    let patch = line
        .split_whitespace()
        .find(|w| w.ends_with(".patch"))
        .unwrap_or_else(|| panic!("no patch path: {line}"));
    let patch = Path::new(patch.trim_end_matches([',', ';', ')']));
    let whole = std::fs::read_to_string(patch).unwrap();
    assert_eq!(whole.matches("diff --git ").count(), 64, "{line}");
    let check = git_apply(w, patch, true);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let _ = std::fs::remove_file(patch);

    let o = run_in(w, &args);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 0, "{err}");
    assert_eq!(err.matches("diff --git ").count(), 64);
    assert!(!err.contains("left out"));
}

/// A change set that conflicts with the user's edit (made while the command ran) is kept
/// as a patch whose path is printed; the conflict names only the file the user changed;
/// `--changes-force` writes it over the edit.
fn a_conflict_keeps_a_patch_and_force_applies(backend: &str) {
    if !reviews_changes(backend) {
        return;
    }
    for force in [false, true] {
        let ws = workspace();
        let w = ws.path();
        std::fs::write(w.join("a.txt"), "one\n").unwrap();
        std::fs::write(w.join("b.txt"), "bee\n").unwrap();
        let go = tempfile::tempdir().unwrap();
        std::fs::set_permissions(go.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let go_s = go.path().to_str().unwrap().to_string();
        let script = format!(
            "echo cmd >> a.txt; echo new > c.txt; echo ready; \
             while [ ! -e {go_s}/go ]; do sleep 0.05; done"
        );
        let flags = backend_flags(backend);
        let mut args: Vec<&str> = vec!["run"];
        args.extend(flags.iter().map(String::as_str));
        args.extend(["--read", &go_s, "--changes", "apply"]);
        if force {
            args.push("--changes-force");
        }
        args.extend(["--", "sh", "-c", &script]);
        let mut child = sandbox()
            .current_dir(w)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        // The user's edit, while the command runs.
        std::fs::write(w.join("a.txt"), "user\n").unwrap();
        std::fs::write(go.path().join("go"), "").unwrap();
        let o = child.wait_with_output().unwrap();
        let err = text(&o.stderr);
        if force {
            assert_eq!(code(&o), 0, "{err}");
            assert_eq!(
                std::fs::read_to_string(w.join("a.txt")).unwrap(),
                "one\ncmd\n"
            );
            assert_eq!(std::fs::read_to_string(w.join("c.txt")).unwrap(), "new\n");
            continue;
        }
        assert_eq!(code(&o), 125, "{err}");
        let conflict = err
            .lines()
            .find(|l| l.contains("conflict"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(conflict.contains("a.txt"), "{conflict}");
        assert!(
            !conflict.contains("b.txt") && !conflict.contains("c.txt"),
            "names a file the user did not change: {conflict}"
        );
        assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "user\n");
        assert!(!w.join("c.txt").exists());
        let kept = err
            .split_whitespace()
            .find(|w| w.ends_with(".patch"))
            .unwrap_or_else(|| panic!("no patch path printed: {err}"));
        let patch = std::fs::read_to_string(kept).unwrap();
        assert!(
            patch.contains("+++ b/c.txt") && patch.contains("+cmd"),
            "{patch}"
        );
        let _ = std::fs::remove_file(kept);
    }
}

/// A host name the command asked the proxy for (SOCKS5 takes any bytes), holding escape
/// sequences, is escaped in the line that says it was denied, on a terminal.
fn a_denied_host_name_is_escaped_on_a_terminal(backend: &str) {
    let cap = capability(backend);
    if cap["host_programs"] != true || cap["network_proxy"]["kind"] != "exact" {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: backend {backend} runs no host python3 or enforces no proxy exactly (its \
             capability), and this case asks the proxy from python3"
        );
        return;
    }
    let ws = workspace();
    let script = "import socket\n\
                  host = b'x\\x1b[2K\\x1b[1Ay.example'\n\
                  s = socket.create_connection(('127.0.0.1', 3128))\n\
                  s.sendall(b'\\x05\\x01\\x00'); s.recv(2)\n\
                  s.sendall(b'\\x05\\x01\\x00\\x03' + bytes([len(host)]) + host + b'\\x01\\xbb')\n\
                  s.recv(10)\n";
    let flags = backend_flags(backend);
    let mut args: Vec<&str> = vec!["run"];
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--allow-host", "example.com", "--", "python3", "-c", script]);
    let (status, seen) = run_on_terminal(ws.path(), &args);
    let shown = text(&seen);
    assert_eq!(status, 0, "{shown}");
    assert!(
        shown.contains("denied connect to x\\x1b[2K\\x1b[1Ay.example"),
        "{shown:?}"
    );
    assert!(
        !seen.contains(&0x1b),
        "an ESC byte reached the terminal: {shown:?}"
    );
}

/// A file name that is not UTF-8 (the command's choice) cannot make `--json` unwritable:
/// the change set is there, the name written lossily with its exact bytes beside it.
fn a_name_that_is_not_utf8_is_in_the_json_outcome(backend: &str) {
    if !reviews_changes(backend) {
        return;
    }
    let ws = workspace();
    let o = run_with(
        backend,
        ws.path(),
        &["--changes", "discard", "--json"],
        &["sh", "-c", "touch \"$(printf 'bad\\377name')\""],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let j = json_of(&o);
    let c = &j["changes"]["changes"][0];
    assert_eq!(c["path"], "bad\u{fffd}name", "{j}");
    let bytes: Vec<u64> = c["path_bytes"]
        .as_array()
        .unwrap_or_else(|| panic!("{j}"))
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(bytes, b"bad\xffname".map(u64::from), "{j}");
}

macro_rules! backend_cases {
    ($module:ident, $feature:literal) => {
        #[cfg(feature = $feature)]
        mod $module {
            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        if super::available($feature) {
                            super::$name($feature);
                        }
                    }
                };
            }
            case!(exit_code_is_the_programs);
            case!(the_callers_toolchain_runs_with_one_flag_each);
            case!(a_signal_is_128_plus_n);
            case!(the_timeout_is_124_and_kills_the_tree);
            case!(not_found_is_127);
            case!(an_oom_kill_is_137_and_says_so);
            case!(not_executable_is_126);
            case!(json_has_the_outcome_and_output_goes_to_stderr);
            case!(max_output_truncates_and_says_so);
            case!(output_streams_while_the_program_runs);
            case!(relative_paths_are_taken_against_the_current_directory);
            case!(interrupting_sandbox_kills_the_tree_and_exits_128_plus_n);
            case!(a_reader_that_goes_away_ends_the_program_as_sigpipe_would);
            case!(changes_are_asked_applied_or_refused);
            case!(the_review_on_a_terminal_escapes_what_the_command_wrote);
            case!(a_repository_s_hooks_and_config_are_read_only);
            case!(a_config_named_hooks_path_is_read_only);
            case!(the_diff_is_a_patch_git_applies);
            case!(a_long_diff_on_a_terminal_is_capped_and_kept_whole_in_a_patch);
            case!(a_conflict_keeps_a_patch_and_force_applies);
            case!(a_denied_host_name_is_escaped_on_a_terminal);
            case!(a_name_that_is_not_utf8_is_in_the_json_outcome);
            case!(allow_host_reaches_the_allowlist_and_prints_each_denied_attempt);
            case!(an_allowed_connection_that_fails_is_one_line_on_stderr);
            case!(doctor_prove_proves_the_backend);
            case!(an_image_from_the_host_holds_no_file_others_cannot_read);
        }
    };
}

sandbox::with_backend_list!(every_backend);

// ---------------------------------------------------------------------------------------
// Denials: the summary after a run (`doctor --prove` is a backend case above).

/// Every available backend that claims to report denied calls prints the one-line summary
/// on stderr after a run that makes one (`unshare -U`: denied by the shared table), lists
/// it in `--json`, and prints nothing with `--quiet`. A backend that does not claim it
/// prints no summary (it never invents one).
#[test]
fn a_denied_call_is_summarised_on_stderr_and_quiet_silences_it() {
    // The backends that run host processes (an image's have no host programs to unshare).
    for info in sandbox::registry::compiled_in().filter(|i| !i.needs_image()) {
        let backend = info.name;
        if !available(backend) || !confines(backend) {
            continue;
        }
        let claims = capability(backend)["reports_denials"]["syscall"] == true;
        let ws = workspace();
        let script = ["sh", "-c", "unshare -U true; echo rc=$?"];
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(backend_flags(backend));
        args.push("--".into());
        args.extend(script.iter().map(|s| s.to_string()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_in(ws.path(), &a);
        assert_eq!(code(&o), 0, "{backend}: {}", text(&o.stderr));
        // A backend with a kernel of its own (gVisor) may let `unshare` make a namespace
        // inside it: then there is nothing to report, and nothing must be.
        let refused = text(&o.stdout) == "rc=1\n";
        assert!(!claims || refused, "{backend}: unshare was not refused");
        let stderr = text(&o.stderr);
        if claims {
            assert!(
                stderr.contains("sandbox: denied 1 operation: unshare (seccomp)"),
                "{backend}: {stderr}"
            );
        } else {
            assert!(!stderr.contains("sandbox: denied"), "{backend}: {stderr}");
        }
        // --quiet: no summary, the same refusal.
        let mut quiet = a.clone();
        quiet.insert(1, "--quiet");
        let o = run_in(ws.path(), &quiet);
        assert_eq!(text(&o.stdout) == "rc=1\n", refused, "{backend}");
        assert!(!text(&o.stderr).contains("sandbox: denied"), "{backend}");
        // --json: the whole list.
        let mut json = a.clone();
        json.insert(1, "--json");
        let o = run_in(ws.path(), &json);
        let j = json_of(&o);
        let entries = j["denials"]["entries"].as_array().unwrap();
        if claims {
            assert_eq!(entries.len(), 1, "{backend}: {j}");
            assert_eq!(entries[0]["target"], "unshare");
            assert_eq!(entries[0]["kind"], "syscall");
            assert_eq!(entries[0]["mechanism"], "seccomp");
            assert_eq!(entries[0]["count"], 1);
        } else {
            assert!(entries.is_empty(), "{backend}: {j}");
        }
    }
}

/// `doctor --prove` with a backend this build does not know is an option error.
#[test]
fn doctor_prove_with_an_unknown_backend_is_125() {
    let ws = workspace();
    let o = run_in(ws.path(), &["doctor", "--prove", "--backend", "nosuch"]);
    assert_eq!(code(&o), 125, "{}", text(&o.stderr));
}
