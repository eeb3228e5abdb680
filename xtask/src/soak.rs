//! `cargo xtask soak`: per backend, many runs with kills, timeouts, floods and daemons mixed
//! in, then the host's counts before and after (descriptors, threads, children, zombies,
//! cgroups, mounts, temp entries, containers, resident set). Fails on growth.
//!
//! The soak itself lives in the suite (`sandbox_conformance::soak`) and runs through the
//! suite's binary (`SANDBOX_SOAK=RUNS,CONCURRENT`), so it uses the same backend constructor
//! and probe as the conformance cases; this task builds it once and runs it per backend.

use std::process::Command;

use serde_json::Value;

use crate::conformance::{build, copy_for, known_backends, user_dir, UNAVAILABLE_EXIT};
use crate::{project_root, target_dir, Result};

#[derive(Debug, PartialEq, Eq)]
struct Options {
    backends: Vec<String>,
    runs: usize,
    concurrent: usize,
    as_user: Option<u32>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        backends: Vec::new(),
        runs: 1000,
        concurrent: 64,
        as_user: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let mut count = |flag: &str| -> Result<usize> {
            let v = value(flag)?;
            v.parse()
                .map_err(|_| format!("{flag} takes a count, not `{v}`").into())
        };
        match a.as_str() {
            "--backend" => o.backends.push(value("--backend")?),
            "--runs" => o.runs = count("--runs")?,
            "--concurrent" => o.concurrent = count("--concurrent")?,
            "--as-user" => {
                let v = value("--as-user")?;
                o.as_user = Some(
                    v.parse()
                        .map_err(|_| format!("--as-user takes a numeric uid, not `{v}`"))?,
                );
            }
            other => {
                return Err(format!("unknown option `{other}` (see `cargo xtask help`)").into())
            }
        }
    }
    Ok(o)
}

/// `cargo xtask soak [--backend NAME]... [--runs N] [--concurrent N] [--as-user UID]`.
pub fn run(args: &[String]) -> Result<()> {
    let mut opts = parse(args)?;
    let built = build()?;
    if opts.backends.is_empty() {
        // Every backend the suite knows (the facade's registry, as the suite lists it); as
        // an unprivileged uid, every confining one an ordinary user runs.
        opts.backends = known_backends(&built)?.for_user(opts.as_user);
    }
    let mut failed = Vec::new();
    for backend in &opts.backends {
        eprintln!("\nxtask: soaking {backend}");
        let spec = format!("{},{}", opts.runs, opts.concurrent);
        let (mut cmd, report) = match opts.as_user {
            Some(uid) => {
                let dir = user_dir(uid)?;
                let suite = copy_for(uid, &built.suite, &dir, "conformance")?;
                let probe = copy_for(uid, &built.probe, &dir, "sandbox-probe")?;
                let tmp = dir.join(format!("soak-tmp-{backend}"));
                std::fs::create_dir_all(&tmp)?;
                std::os::unix::fs::chown(&tmp, Some(uid), Some(uid))?;
                let mut cmd = Command::new("setpriv");
                cmd.args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
                    .args(["--clear-groups", "--"])
                    .arg(&suite)
                    .current_dir(&dir)
                    .env("TMPDIR", &tmp)
                    .env("HOME", &dir)
                    .env("SANDBOX_PROBE", &probe);
                (cmd, dir.join(format!("soak-{backend}.json")))
            }
            None => {
                let dir = target_dir().join("soak");
                // A temp dir of its own, so that the temp-entry count sees only the soak.
                let tmp = dir.join(format!("tmp-{backend}"));
                std::fs::create_dir_all(&tmp)?;
                let mut cmd = Command::new(&built.suite);
                cmd.current_dir(project_root()).env("TMPDIR", &tmp);
                (cmd, dir.join(format!("soak-{backend}.json")))
            }
        };
        let _ = std::fs::remove_file(&report);
        let status = cmd
            .env("SANDBOX_BACKEND", backend)
            .env("SANDBOX_SOAK", &spec)
            .env("SANDBOX_CONFORMANCE_REPORT", &report)
            .env_remove("SANDBOX_VALIDATE")
            .status()?;
        if status.code() == Some(UNAVAILABLE_EXIT) {
            failed.push(format!("{backend}: unavailable here"));
            continue;
        }
        let parsed: Option<Value> = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        match parsed {
            Some(r) if status.success() => eprintln!(
                "xtask: {backend}: {} runs, nothing grew",
                r["runs"].as_u64().unwrap_or(0)
            ),
            Some(r) => failed.push(format!(
                "{backend}: grew {:?}, {} runs failed",
                r["growth"],
                r["errors"].as_array().map_or(0, Vec::len)
            )),
            None => failed.push(format!("{backend}: the soak wrote no report ({status})")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("soak failed: {}", failed.join("; ")).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_the_issue_s_numbers() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.runs, o.concurrent), (1000, 64));
        assert!(
            o.backends.is_empty(),
            "every backend, asked of the suite after the build"
        );
    }

    #[test]
    fn options_are_read() {
        let o = parse(&args(&[
            "--backend",
            "b",
            "--runs",
            "10",
            "--concurrent",
            "4",
            "--as-user",
            "65534",
        ]))
        .unwrap();
        assert_eq!(o.backends, ["b"]);
        assert_eq!((o.runs, o.concurrent, o.as_user), (10, 4, Some(65534)));
        assert!(parse(&args(&["--runs", "many"])).is_err());
        assert!(parse(&args(&["--bogus"])).is_err());
    }
}
