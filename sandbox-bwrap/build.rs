//! Compiles the waiter (`waiter/main.rs`) for the target, with the same `rustc` that builds
//! this crate, into `OUT_DIR`; the library embeds it with `include_bytes!`.
//!
//! A separate program rather than a binary target of this crate: a library's dependents
//! never get its binaries built, and the waiter must exist wherever the library is used.
//! It depends on nothing but `std`, so no cargo invocation is needed.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=waiter/main.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").unwrap_or_default();
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("waiter");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());

    let mut cmd = Command::new(rustc);
    cmd.arg("--edition=2021")
        .arg("--crate-type=bin")
        .arg("--crate-name=sandbox_bwrap_waiter")
        .args(["-C", "opt-level=s"])
        .args(["-C", "panic=abort"])
        .args(["-C", "debuginfo=0"])
        .args(["-C", "strip=symbols"])
        .arg("--target")
        .arg(&target)
        .arg("-o")
        .arg(&out)
        .arg(manifest.join("waiter/main.rs"));
    // The linker cargo resolved for the target, when one is configured (cross builds).
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg({
            let mut a = std::ffi::OsString::from("linker=");
            a.push(linker);
            a
        });
    }
    let status = cmd.status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("compiling the bwrap waiter failed ({s}); see the rustc output above"),
        Err(e) => panic!("could not run rustc to compile the bwrap waiter: {e}"),
    }
}
