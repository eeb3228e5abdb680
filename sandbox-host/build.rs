//! Compiles the waiter (`waiter/main.rs`) for the target, with the same `rustc` that builds
//! this crate, into `OUT_DIR`; the library embeds it with `include_bytes!`
//! (`process::waiter`). Only with the `waiter` feature (the bwrap and landlock backends');
//! without it an empty file stands in and nothing is compiled.
//!
//! A separate program rather than a binary target: a library's dependents never get its
//! binaries built, and the waiter must exist wherever the library is used. It depends on
//! nothing but `std`, so no cargo invocation is needed. Static where the target's C library
//! allows (no loader to map at each start, and nothing of the sandbox's file view needed to
//! start it); else dynamic, which every view these backends build can still load.

use std::env;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=waiter/main.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("waiter");
    if env::var_os("CARGO_FEATURE_WAITER").is_none() {
        if let Err(e) = std::fs::write(&out, b"") {
            panic!("cannot write {}: {e}", out.display());
        }
        return;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").unwrap_or_default();
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let build = |statically: bool| {
        let mut cmd = Command::new(&rustc);
        cmd.arg("--edition=2021")
            .arg("--crate-type=bin")
            .arg("--crate-name=sandbox_waiter")
            .args(["-C", "opt-level=s"])
            .args(["-C", "panic=abort"])
            .args(["-C", "debuginfo=0"])
            .args(["-C", "strip=symbols"])
            .args(["-C", "codegen-units=1"])
            .arg("--target")
            .arg(&target)
            .arg("-o")
            .arg(&out)
            .arg(manifest.join("waiter/main.rs"));
        if statically {
            cmd.args(["-C", "target-feature=+crt-static"]);
        }
        // The linker cargo resolved for the target, when one is configured (cross builds).
        if let Some(linker) = env::var_os("RUSTC_LINKER") {
            let mut a = OsString::from("linker=");
            a.push(linker);
            cmd.arg("-C").arg(a);
        }
        cmd.status()
    };
    if build(true).is_ok_and(|s| s.success()) {
        return;
    }
    println!(
        "cargo:warning=no static C library for {target}: the sandbox waiter is linked dynamically"
    );
    match build(false) {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("compiling the sandbox waiter failed ({s}); see the rustc output above"),
        Err(e) => panic!("could not run rustc to compile the sandbox waiter: {e}"),
    }
}
