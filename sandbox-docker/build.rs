//! Builds the warm pool's waiter (`waiter/main.rs`) as a static executable for the target,
//! with the same `rustc` that builds this crate, and leaves it in `OUT_DIR` for
//! `include_bytes!`. A static executable runs in any image, `FROM scratch` included.
//!
//! Where it cannot be built (no static C library for the target), an empty file is left
//! instead: the backend then runs without a warm pool, as it says in its outcome notes,
//! and everything else works the same.

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=waiter/main.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?);
    let target = std::env::var("TARGET")?;
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let dest = out.join("sandbox-waiter");
    let mut cmd = Command::new(rustc);
    cmd.arg("waiter/main.rs")
        .args(["--edition", "2021", "--crate-type", "bin"])
        .args(["--crate-name", "sandbox_waiter", "--target", &target])
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "-C", "codegen-units=1"])
        .arg("-o")
        .arg(&dest);
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg({
            let mut a = std::ffi::OsString::from("linker=");
            a.push(linker);
            a
        });
    }
    let built = target.contains("linux") && cmd.status().is_ok_and(|s| s.success());
    if !built {
        println!("cargo:warning=the docker warm pool's static waiter could not be built for {target}; the pool is off");
        std::fs::write(&dest, b"")?;
    }
    Ok(())
}
