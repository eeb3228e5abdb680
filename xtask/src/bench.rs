//! `cargo xtask bench [--backend NAME]... [--quick] [--as-user UID]`: build
//! `sandbox-bench` (and the `sandbox` command it measures) in release once, run it, print
//! its markdown table and keep it: `bench/RESULTS.md` for a full run, `<target>/bench-quick.md`
//! for `--quick` (a smoke run must never replace the published figures); with `--as-user`
//! the file names carry the uid, since root and an ordinary user take different code paths
//! (cgroups, root-only files to hide) and cost differently.
//!
//! Boring on purpose: all measuring lives in the `sandbox-bench` crate; this only builds,
//! runs and files the result.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{cargo, project_root, target_dir, Result};

/// The help text for the task.
pub const HELP: &str = "\
cargo xtask bench [--backend NAME]... [--quick] [--as-user UID]

Measure each sandbox backend (start-up of /bin/true, 1 GiB of stdout, 64 sandboxes at
once, the `sandbox` command as a whole process, a run where no namespace can be made as in
a default pod) as ratios against baselines taken in the same run, and print a markdown
table.

  --backend NAME   measure only this backend (repeatable; default: every backend in the
                   registry, `sandbox/src/registry.rs`);
                   a named backend that cannot be measured fails the task
  --quick          a handful of iterations, only to prove the bench runs (judges nothing)
  --as-user UID    run the bench as UID (setpriv, no groups, a TMPDIR it owns; needs root)

A full run writes bench/RESULTS.md (bench/RESULTS.uid-UID.md with --as-user); --quick
writes <target>/bench-quick.md (<target>/bench-quick.uid-UID.md).";

/// What the command line asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Opts {
    backends: Vec<String>,
    quick: bool,
    as_user: Option<u32>,
    help: bool,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut opts = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => opts.quick = true,
            "-h" | "--help" => opts.help = true,
            "--as-user" => match it.next().map(|u| u.parse::<u32>()) {
                Some(Ok(uid)) => opts.as_user = Some(uid),
                _ => return Err("--as-user needs a numeric UID".into()),
            },
            "--backend" => match it.next() {
                Some(name) => opts.backends.push(name.clone()),
                None => return Err("--backend needs a NAME".into()),
            },
            other => match other.strip_prefix("--backend=") {
                Some(name) => opts.backends.push(name.to_string()),
                None => return Err(format!("unknown argument `{other}`\n\n{HELP}").into()),
            },
        }
    }
    Ok(opts)
}

/// The binaries cargo built, by target name, from its JSON messages.
fn executables(json: &str) -> Vec<(String, PathBuf)> {
    json.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact")
        .filter_map(|msg| {
            let exe = msg["executable"].as_str()?;
            let name = msg["target"]["name"].as_str()?;
            Some((name.to_string(), PathBuf::from(exe)))
        })
        .collect()
}

fn find<'a>(exes: &'a [(String, PathBuf)], name: &str) -> Option<&'a PathBuf> {
    exes.iter().find(|(n, _)| n == name).map(|(_, p)| p)
}

/// Run the task.
pub fn run(args: &[String]) -> Result<()> {
    let opts = parse(args)?;
    if opts.help {
        println!("{HELP}");
        return Ok(());
    }
    let root = project_root();

    // One release build of everything measured; diagnostics go to the terminal.
    eprintln!("xtask: building sandbox-bench and the `sandbox` command in release");
    let build = Command::new(cargo())
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
            "-p",
            "sandbox-bench",
            "-p",
            "sandbox",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    if !build.status.success() {
        return Err(format!(
            "building sandbox-bench in release failed ({})",
            build.status
        )
        .into());
    }
    let exes = executables(&String::from_utf8_lossy(&build.stdout));
    let bench = find(&exes, "sandbox-bench")
        .ok_or("cargo built no `sandbox-bench` executable")?
        .clone();

    let sandbox = find(&exes, "sandbox").cloned();
    let launcher = find(&exes, "sandbox-bench-launch").cloned();
    // As another uid: copies of the binaries in a directory that uid owns (ours may sit
    // where it cannot read), its own TMPDIR for the bench's workspace.
    let user_dir = match opts.as_user {
        Some(uid) => Some(UserDir::new(uid)?),
        None => None,
    };
    let (bench, sandbox, launcher) = match &user_dir {
        Some(d) => (
            d.copy(&bench, "sandbox-bench")?,
            sandbox.map(|s| d.copy(&s, "sandbox")).transpose()?,
            launcher
                .map(|l| d.copy(&l, "sandbox-bench-launch"))
                .transpose()?,
        ),
        None => (bench, sandbox, launcher),
    };
    let mut cmd = match &user_dir {
        Some(d) => {
            let uid = d.uid.to_string();
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--"])
                .arg(&bench)
                .current_dir(&d.dir)
                .env("TMPDIR", d.tmp())
                .env("HOME", &d.dir);
            c
        }
        None => Command::new(&bench),
    };
    for b in &opts.backends {
        cmd.args(["--backend", b]);
    }
    if opts.quick {
        cmd.arg("--quick");
    }
    // Without the command (a facade built without its binary) the bench says so in a row.
    if let Some(sandbox) = &sandbox {
        cmd.arg("--sandbox-bin").arg(sandbox);
    }
    // The bare mechanism of that row, as a process of its own.
    if let Some(launcher) = &launcher {
        cmd.arg("--launcher-bin").arg(launcher);
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bench.display()))?;
    drop(user_dir);
    let table = String::from_utf8_lossy(&out.stdout);
    print!("{table}");

    let suffix = opts
        .as_user
        .map_or(String::new(), |uid| format!(".uid-{uid}"));
    let file = if opts.quick {
        target_dir().join(format!("bench-quick{suffix}.md"))
    } else {
        root.join("bench").join(format!("RESULTS{suffix}.md"))
    };
    if !table.trim().is_empty() {
        std::fs::write(&file, table.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        eprintln!("xtask bench: table written to {}", file.display());
    }
    if !out.status.success() {
        return Err(format!(
            "the bench reported a failure or an unmeasurable named backend ({})",
            out.status
        )
        .into());
    }
    Ok(())
}

/// A directory owned by `uid` for one bench run as that uid, removed afterwards.
struct UserDir {
    uid: u32,
    dir: PathBuf,
}

impl UserDir {
    fn new(uid: u32) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("sandbox-bench-uid-{uid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp"))?;
        let made = Self { uid, dir };
        for d in [made.dir.as_path(), &made.tmp()] {
            std::os::unix::fs::chown(d, Some(uid), Some(uid)).map_err(|e| {
                format!(
                    "cannot hand {} to uid {uid} ({e}); --as-user needs root",
                    d.display()
                )
            })?;
        }
        std::fs::set_permissions(&made.dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(made)
    }

    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn copy(&self, from: &Path, name: &str) -> Result<PathBuf> {
        let to = self.dir.join(name);
        std::fs::copy(from, &to)?;
        std::os::unix::fs::chown(&to, Some(self.uid), Some(self.uid))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
        Ok(to)
    }
}

impl Drop for UserDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn backends_and_quick_are_parsed_and_anything_else_refused() {
        let o = parse(&s(&["--backend", "b", "--backend=a", "--quick"])).ok();
        assert_eq!(
            o,
            Some(Opts {
                backends: s(&["b", "a"]),
                quick: true,
                as_user: None,
                help: false
            })
        );
        let o = parse(&s(&["--as-user", "65534"])).ok();
        assert_eq!(o.and_then(|o| o.as_user), Some(65534));
        assert!(parse(&s(&["--as-user", "nobody"])).is_err());
        assert!(parse(&s(&["--backend"])).is_err());
        assert!(parse(&s(&["--fast"]))
            .err()
            .is_some_and(|e| e.to_string().contains("--fast")));
    }

    #[test]
    fn executables_are_found_by_target_name_in_cargo_json() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","target":{"name":"sandbox_core","kind":["lib"]},"executable":null}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"name":"sandbox-bench","kind":["bin"]},"executable":"/t/release/sandbox-bench"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"name":"sandbox","kind":["bin"]},"executable":"/t/we\"ird/sandbox"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        let exes = executables(json);
        assert_eq!(exes.len(), 2, "{exes:?}");
        assert_eq!(
            find(&exes, "sandbox-bench"),
            Some(&PathBuf::from("/t/release/sandbox-bench"))
        );
        assert_eq!(
            find(&exes, "sandbox"),
            Some(&PathBuf::from("/t/we\"ird/sandbox"))
        );
        assert_eq!(find(&exes, "sandbox-probe"), None);
    }
}
