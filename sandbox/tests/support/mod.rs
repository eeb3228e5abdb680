//! What the tests of the `sandbox` command share: the built binary, which backends work
//! here (from `sandbox doctor --json`), `SANDBOX_TEST_REQUIRE`, the test image for a
//! backend that runs one, and the flags that select a backend on a lane it runs on.
//!
//! `tests/cli.rs` and `tests/mcp.rs` use it.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The built `sandbox` program.
pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox");

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `sandbox doctor --json`, once; with the test image when a compiled-in backend runs one.
pub fn doctor() -> &'static Value {
    static REPORT: OnceLock<Value> = OnceLock::new();
    REPORT.get_or_init(|| {
        let mut cmd = Command::new(BIN);
        cmd.args(["doctor", "--json"]);
        if sandbox::registry::compiled_in().any(|i| i.needs_image()) {
            cmd.args(["--image", &test_image()]);
        }
        let o = cmd.output().unwrap();
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {}", text(&o.stdout)))
    })
}

/// The image the cases of a backend that runs one use: `SANDBOX_TEST_IMAGE`, else
/// one imported here from the host's static busybox by `tests/busybox-image.sh` (nothing
/// can be pulled on the test machines).
pub fn test_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if let Ok(image) = std::env::var("SANDBOX_TEST_IMAGE") {
                return image;
            }
            let tag = "sandbox-cli-test:busybox";
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/busybox-image.sh");
            match Command::new("sh").args([script, tag]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("could not build {tag}: {}", text(&o.stderr)),
                Err(e) => eprintln!("could not build {tag}: {e}"),
            }
            tag.to_string()
        })
        .clone()
}

/// `SANDBOX_TEST_REQUIRE` names `backend`, or `all`, or `unprivileged` for a confining
/// backend that an ordinary user runs (its registry entry): unavailable is then a failure.
pub fn required(backend: &str) -> bool {
    let unprivileged = sandbox::registry::known(backend)
        .and_then(|k| k.info)
        .is_some_and(|i| i.unprivileged && !i.unconfined);
    std::env::var("SANDBOX_TEST_REQUIRE").is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .any(|b| b == backend || b == "all" || (b == "unprivileged" && unprivileged))
    })
}

/// Whether `backend` works here; a printed reason when not, a failure when required.
pub fn available(backend: &str) -> bool {
    let entry = doctor()["backends"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == backend))
        .unwrap_or_else(|| panic!("doctor does not list compiled-in backend {backend}"));
    if entry["works"] == true {
        return true;
    }
    let why = format!(
        "{}; remedy: {}",
        entry["problem"].as_str().unwrap_or("?"),
        entry["remedy"].as_str().unwrap_or("?")
    );
    assert!(
        !required(backend),
        "backend {backend} is required (SANDBOX_TEST_REQUIRE) but unavailable: {why}"
    );
    // Straight to the descriptor: libtest captures `eprintln!`, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: backend {backend} does not work here: {why}"
    );
    false
}

/// A directory an unprivileged uid running these tests can use too.
pub fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Doctor's entry for `backend`.
pub fn report(backend: &str) -> &'static Value {
    doctor()["backends"]
        .as_array()
        .and_then(|bs| bs.iter().find(|b| b["name"] == backend))
        .unwrap_or_else(|| panic!("doctor does not list {backend}"))
}

/// Whether `backend` confines writes here; a printed reason when not (`none`: the cases
/// that use this are about confinement, which it does not claim).
pub fn confines(backend: &str) -> bool {
    if report(backend)["capability"]["confine_writes"] == true {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: backend {backend} does not confine writes (its capability), and these \
         cases are about confinement"
    );
    false
}

/// The flags that select `backend` on a lane it runs on with default options: the
/// strictest lane doctor says it runs a default request on.
pub fn backend_flags(backend: &str) -> Vec<String> {
    let report = report(backend);
    let lane = report["lanes"]
        .as_array()
        .and_then(|l| l.first())
        .and_then(Value::as_str)
        .unwrap_or("strict");
    let mut v = vec![
        "--backend".to_string(),
        backend.to_string(),
        "--lane".to_string(),
        lane.to_string(),
    ];
    if report["needs_image"] == true {
        v.push("--image".into());
        v.push(test_image());
    }
    v
}

/// One test module per backend the facade knows (its list, `sandbox::with_backend_list!`),
/// each made by the test file's own `backend_cases!(module, "feature")`.
#[allow(unused_macros)] // a test file without per-backend cases (startup.rs) leaves it unused
macro_rules! every_backend {
    ($($feature:literal => $alias:ident: $krate:ident,)*) => {
        $(backend_cases!($alias, $feature);)*
    };
}
