//! `cargo xtask bench [--backend NAME]... [--quick]`: build `sandbox-bench` (and the
//! `sandbox` command it measures) in release once, run it, print its markdown table and
//! keep it: `bench/RESULTS.md` for a full run, `<target>/bench-quick.md` for `--quick`
//! (a smoke run must never replace the published figures).
//!
//! Boring on purpose: all measuring lives in the `sandbox-bench` crate; this only builds,
//! runs and files the result.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{cargo, project_root, target_dir, Result};

/// The help text for the task.
pub const HELP: &str = "\
cargo xtask bench [--backend NAME]... [--quick]

Measure each sandbox backend (start-up of /bin/true, 1 GiB of stdout, 64 sandboxes at
once, the `sandbox` command as a whole process) as ratios against baselines taken in the
same run, and print a markdown table.

  --backend NAME   measure only this backend (repeatable: none, bwrap, landlock, docker);
                   a named backend that cannot be measured fails the task
  --quick          a handful of iterations, only to prove the bench runs (judges nothing)

A full run writes bench/RESULTS.md; --quick writes <target>/bench-quick.md.";

/// What the command line asked for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Opts {
    backends: Vec<String>,
    quick: bool,
    help: bool,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut opts = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => opts.quick = true,
            "-h" | "--help" => opts.help = true,
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

    let mut cmd = Command::new(&bench);
    for b in &opts.backends {
        cmd.args(["--backend", b]);
    }
    if opts.quick {
        cmd.arg("--quick");
    }
    // Without the command (a facade built without its binary) the bench says so in a row.
    if let Some(sandbox) = find(&exes, "sandbox") {
        cmd.arg("--sandbox-bin").arg(sandbox);
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bench.display()))?;
    let table = String::from_utf8_lossy(&out.stdout);
    print!("{table}");

    let file = if opts.quick {
        target_dir().join("bench-quick.md")
    } else {
        root.join("bench").join("RESULTS.md")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn backends_and_quick_are_parsed_and_anything_else_refused() {
        let o = parse(&s(&["--backend", "bwrap", "--backend=none", "--quick"])).ok();
        assert_eq!(
            o,
            Some(Opts {
                backends: s(&["bwrap", "none"]),
                quick: true,
                help: false
            })
        );
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
