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

use std::io::{BufRead, BufReader};
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
    for sub in ["run", "doctor", "completions"] {
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
            case!(allow_host_reaches_the_allowlist_and_prints_each_denied_attempt);
            case!(doctor_prove_proves_the_backend);
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
    for info in sandbox::registry::compiled_in().filter(|i| i.launcher.is_some()) {
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
