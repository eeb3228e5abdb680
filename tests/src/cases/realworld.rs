//! Real work, offline: the builds, installs and commits an agent runs, each judged from the
//! host (the built binary runs there, the package imports there, the commit is in the
//! host's `git log`). Nothing comes from the internet: the dependencies are made by the
//! case (a path crate, a wheel in a directory, a tarball).
//!
//! The tools are the host's, found on core's `PATH` (a backend that runs an image needs
//! them in it, else the case is skipped with the reason); the Rust toolchain is the
//! caller's rustup, granted with `toolchains` as `--toolchain` does.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::SandboxOpts;

use super::CaseResult;
use crate::context::{describe, token, Context, Failure};

/// Builds and installs take longer than a probe; still generous, never asserted on.
const WORK_TIMEOUT: Duration = Duration::from_secs(300);

/// `sh -c script` in `ws`, `HOME` the workspace (as the command-line tool sets it).
fn sh(ctx: &Context, ws: &Path, script: &str) -> SandboxOpts {
    let mut o = ctx.opts(ws, [""]);
    o.argv = ["sh", "-c", script].iter().map(OsString::from).collect();
    o.env.set.push(("HOME".into(), ws.into()));
    o.timeout = Some(WORK_TIMEOUT);
    o
}

/// `argv` run on the host (unconfined) in `dir`, with core's `PATH`; its stdout.
fn on_host(dir: &Path, argv: &[&OsStr]) -> Result<String, Failure> {
    let o = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .env_clear()
        .env("PATH", sandbox_core::DEFAULT_PATH)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()?;
    ensure!(
        o.status.success(),
        "`{}` on the host failed: {}",
        argv.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, text)
}

/// The caller's rustup toolchain: `(RUSTUP_HOME, the directory holding cargo's proxy)`,
/// from `RUSTUP_HOME`/`CARGO_HOME` or their defaults under `HOME`, where both exist and
/// this user can read them.
pub fn rust_toolchain() -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |v: &str, default: &str| {
        std::env::var_os(v)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    let rustup = var("RUSTUP_HOME", ".rustup")?.canonicalize().ok()?;
    let bin = var("CARGO_HOME", ".cargo")?.join("bin");
    let cargo = bin.join("cargo");
    // Readable here (uid 65534 cannot see into root's home).
    std::fs::read_dir(rustup.join("toolchains")).ok()?;
    std::fs::metadata(&cargo).ok()?;
    Some((rustup, bin.canonicalize().ok()?))
}

/// The host program `name` on core's `PATH`.
pub fn host_tool(name: &str) -> Option<PathBuf> {
    std::env::split_paths(sandbox_core::DEFAULT_PATH)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `cargo build --offline` of a crate with a path dependency, the toolchain granted as
/// `toolchains` (read-only) with the caller's `PATH`; the binary runs on the host and
/// prints what the dependency holds.
pub async fn cargo_build_offline(ctx: Arc<Context>) -> CaseResult {
    let Some((rustup, bin)) = rust_toolchain() else {
        return Err(Failure::Broken(
            "no rustup toolchain readable here (the requirement should have skipped)".into(),
        ));
    };
    let ws = ctx.workspace("realworld-cargo")?;
    let value = format!("built-{}", token());
    write(
        &ws.join("app/Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ndep = { path = \"../dep\" }\n",
    )?;
    write(
        &ws.join("app/src/main.rs"),
        "fn main() {\n    println!(\"{}\", dep::VALUE);\n}\n",
    )?;
    write(
        &ws.join("dep/Cargo.toml"),
        "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )?;
    write(
        &ws.join("dep/src/lib.rs"),
        &format!("pub const VALUE: &str = {value:?};\n"),
    )?;
    let mut o = sh(&ctx, ws.path(), "cd app && cargo build --offline");
    o.toolchains = vec![rustup.clone(), bin.clone()];
    // What `--toolchain` passes: the caller's PATH (cargo's proxy first) and rustup's home;
    // cargo's own home is the workspace's, so nothing is written to the caller's.
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(sandbox_core::DEFAULT_PATH)),
    )
    .map_err(|e| Failure::Broken(format!("a PATH with {}: {e}", bin.display())))?;
    o.env.set.push(("PATH".into(), path));
    o.env.set.push(("RUSTUP_HOME".into(), rustup.into()));
    o.env
        .set
        .push(("CARGO_HOME".into(), ws.join(".cargo").into()));
    let out = ctx.run(o).await?;
    ensure!(
        out.status.success(),
        "cargo build failed in the sandbox: {}",
        describe(&out)
    );
    let built = ws.join("app/target/debug/app");
    let printed = on_host(ws.path(), &[built.as_os_str()])?;
    ensure!(
        printed.trim() == value,
        "the binary built in the sandbox printed {printed:?} on the host, not {value:?}"
    );
    Ok(())
}

/// A one-module wheel of `name` holding `VALUE = value`, written into `dir`.
fn make_wheel(dir: &Path, name: &str, value: &str) -> Result<(), Failure> {
    let script = format!(
        r#"
import os, zipfile
name, value, dir = {name:?}, {value:?}, {dir:?}
files = {{
    f"{{name}}/__init__.py": f"VALUE = {{value!r}}\n",
    f"{{name}}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {{name}}\nVersion: 1.0\n",
    f"{{name}}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: conformance\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}}
record = "".join(f"{{n}},,\n" for n in files) + f"{{name}}-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(os.path.join(dir, f"{{name}}-1.0-py3-none-any.whl"), "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
    z.writestr(f"{{name}}-1.0.dist-info/RECORD", record)
"#,
        dir = dir.to_string_lossy()
    );
    let python = host_tool("python3")
        .ok_or_else(|| Failure::Broken("no python3 on the host to make a wheel".into()))?;
    on_host(
        dir,
        &[python.as_os_str(), OsStr::new("-c"), OsStr::new(&script)],
    )?;
    Ok(())
}

/// `python3 -m venv`, then `pip install --no-index --find-links` of a wheel from a local
/// directory the case made; the venv's python imports the package on the host.
pub async fn python_venv_pip_install(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("realworld-venv")?;
    let wheels = ws.join("wheels");
    std::fs::create_dir(&wheels)?;
    let value = format!("wheel-{}", token());
    make_wheel(&wheels, "rwprobe", &value)?;
    // A python without ensurepip (the suite's image leaves it out) makes the venv without
    // pip and installs into it with the system's pip, which sees the venv's python.
    let script = "set -e\n\
         if python3 -c 'import ensurepip' 2>/dev/null; then\n\
           python3 -m venv venv\n\
           venv/bin/python -m pip install -q --disable-pip-version-check --no-index \
             --find-links wheels rwprobe\n\
         else\n\
           python3 -m venv --without-pip --system-site-packages venv\n\
           venv/bin/python -m pip install -q --disable-pip-version-check --no-index \
             --find-links wheels rwprobe\n\
         fi\n\
         venv/bin/python -c 'import rwprobe, sys; print(rwprobe.VALUE, sys.prefix != sys.base_prefix)'";
    let out = ctx.run(sh(&ctx, ws.path(), script)).await?;
    ensure!(
        out.status.success() && out.stdout.text().contains(&format!("{value} True")),
        "venv and pip install failed in the sandbox: {}",
        describe(&out)
    );
    let venv_python = ws.join("venv/bin/python");
    let printed = on_host(
        ws.path(),
        &[
            venv_python.as_os_str(),
            OsStr::new("-c"),
            OsStr::new("import rwprobe; print(rwprobe.VALUE)"),
        ],
    )?;
    ensure!(
        printed.trim() == value,
        "the venv's package imports on the host as {printed:?}, not {value:?}"
    );
    Ok(())
}

/// `git init`, `add` and two `commit`s (automatic maintenance on, which detaches) in a
/// repository the run creates; the host's `git log` lists both, with the files as made.
pub async fn git_init_add_commit(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("realworld-git")?;
    let value = format!("file-{}", token());
    let script = format!(
        "set -e\nexport GIT_CONFIG_NOSYSTEM=1\n\
         git init -q repo && cd repo\n\
         g() {{ git -c user.name=t -c user.email=t@example.invalid -c maintenance.auto=true \
           -c gc.auto=1 \"$@\"; }}\n\
         echo {value} > a.txt && git add a.txt && g commit -q -m one\n\
         mkdir -p sub && echo two > sub/b.txt && git add -A && g commit -q -m two\n\
         git log --format=%s"
    );
    let out = ctx.run(sh(&ctx, ws.path(), &script)).await?;
    ensure!(
        out.status.success() && out.stdout.text().lines().collect::<Vec<_>>() == ["two", "one"],
        "git init/add/commit failed in the sandbox: {}",
        describe(&out)
    );
    ensure!(
        !out.stderr.text().contains("setsid failed"),
        "git could not detach its maintenance: {}",
        describe(&out)
    );
    let git = |args: &[&str]| {
        let mut argv = vec![
            OsStr::new("git"),
            OsStr::new("-c"),
            OsStr::new("safe.directory=*"),
        ];
        argv.extend(args.iter().map(OsStr::new));
        on_host(&ws.join("repo"), &argv)
    };
    let log = git(&["log", "--format=%s"])?;
    ensure!(
        log.lines().collect::<Vec<_>>() == ["two", "one"],
        "the host's git log of the run's repository: {log:?}"
    );
    let a = git(&["show", "HEAD:a.txt"])?;
    ensure!(
        a.trim() == value,
        "a.txt at HEAD holds {a:?} on the host, not {value:?}"
    );
    git(&["fsck", "--no-progress"])?;
    Ok(())
}

/// `npm install --offline` of a package tarball the case made; node on the host requires
/// it from the run's `node_modules`.
pub async fn npm_install_local_tarball(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("realworld-npm")?;
    let value = format!("npm-{}", token());
    let src = ws.join("src/rwdep");
    write(
        &src.join("package.json"),
        r#"{"name":"rwdep","version":"1.0.0","main":"index.js"}"#,
    )?;
    write(
        &src.join("index.js"),
        &format!("module.exports = {{ VALUE: {value:?} }};\n"),
    )?;
    // npm's tarball layout: everything under `package/`.
    on_host(
        &ws.join("src"),
        &[
            OsStr::new("tar"),
            OsStr::new("czf"),
            ws.join("rwdep-1.0.0.tgz").as_os_str(),
            OsStr::new("--transform"),
            OsStr::new("s,^rwdep,package,"),
            OsStr::new("rwdep"),
        ],
    )?;
    write(
        &ws.join("proj/package.json"),
        r#"{"name":"proj","version":"1.0.0","private":true}"#,
    )?;
    let script = "cd proj && npm install --offline --no-audit --no-fund --loglevel=error \
                  ../rwdep-1.0.0.tgz && node -e 'console.log(require(\"rwdep\").VALUE)'";
    let out = ctx.run(sh(&ctx, ws.path(), script)).await?;
    ensure!(
        out.status.success() && out.stdout.text().contains(&value),
        "npm install of a local tarball failed in the sandbox: {}",
        describe(&out)
    );
    let node = host_tool("node").ok_or_else(|| Failure::Broken("no node on the host".into()))?;
    let printed = on_host(
        &ws.join("proj"),
        &[
            node.as_os_str(),
            OsStr::new("-e"),
            OsStr::new("console.log(require('rwdep').VALUE)"),
        ],
    )?;
    ensure!(
        printed.trim() == value,
        "node on the host requires rwdep as {printed:?}, not {value:?}"
    );
    Ok(())
}
