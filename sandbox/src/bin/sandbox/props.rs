//! Property tests over what a person (or an agent writing a command line) hands the
//! command: the policy file and the flags. Nothing panics; an accepted command line asks
//! the library for exactly the paths and network it named, no more; the program's argv
//! arrives unchanged, whatever bytes it holds. `cargo xtask fuzz` runs these with more
//! cases (`PROPTEST_CASES`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use clap::Parser;
use proptest::prelude::*;

use crate::args::{Cli, Command};
use crate::config::{resolve, PolicyFile};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

/// A TOML value of any of the shapes the file's keys take, right or wrong.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z./_-]{0,8}".prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::collection::vec("[a-z/._=]{0,6}", 0..3).prop_map(|v| format!("{v:?}")),
    ]
}

const KEYS: &[&str] = &[
    "backend",
    "workspace",
    "read",
    "write",
    "network",
    "env",
    "timeout",
    "max-output",
    "memory",
    "lane",
    "image",
    "snapshot",
    "netwrok",
    "",
];

/// A policy file: lines of known (and unknown) keys with values of any shape, or noise.
fn toml_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec((prop::sample::select(KEYS), toml_value()), 0..6).prop_map(
            |lines| lines
                .into_iter()
                .map(|(k, v)| format!("{k} = {v}\n"))
                .collect::<String>()
        ),
        1 => ".{0,64}",
    ]
}

/// A program argument of any bytes but NUL (which no argv can hold), leading dashes and
/// `--` included.
fn program_arg() -> impl Strategy<Value = OsString> {
    prop_oneof![
        3 => prop::collection::vec(1u8..=255, 0..12).prop_map(OsString::from_vec),
        1 => prop::sample::select(&["--", "-", "--read", "--network=full", "'", "\n"][..])
            .prop_map(OsString::from),
    ]
}

/// Flags before `--`, as a person would type them (some of them wrong).
fn flags() -> impl Strategy<Value = Vec<String>> {
    let flag = prop_oneof![
        ("[a-z]{1,4}").prop_map(|p| vec!["--read".to_string(), p]),
        ("/?[a-z]{1,4}").prop_map(|p| vec!["--write".to_string(), p]),
        prop::sample::select(&["none", "loopback", "full", "bogus"][..])
            .prop_map(|n| vec!["--network".to_string(), n.to_string()]),
        prop::sample::select(&["strict", "fast", "trusted"][..])
            .prop_map(|l| vec!["--lane".to_string(), l.to_string()]),
        prop::sample::select(&["1", "0", "-1", "0.5", "x"][..])
            .prop_map(|t| vec!["--timeout".to_string(), t.to_string()]),
        prop::sample::select(&["1", "0", "99999999999999999"][..])
            .prop_map(|m| vec!["--memory".to_string(), m.to_string()]),
        Just(vec!["--snapshot".to_string()]),
    ];
    prop::collection::vec(flag, 0..5).prop_map(|v| v.into_iter().flatten().collect())
}

fn parse_run(
    flags: &[String],
    config: Option<&Path>,
    argv: &[OsString],
) -> Option<crate::args::RunArgs> {
    let mut full: Vec<OsString> = vec!["sandbox".into(), "run".into()];
    if let Some(c) = config {
        full.push("--config".into());
        full.push(c.as_os_str().to_owned());
    }
    full.extend(flags.iter().map(OsString::from));
    full.push("--".into());
    full.extend(argv.iter().cloned());
    match Cli::try_parse_from(full).ok()?.command {
        Command::Run(r) => Some(*r),
        _ => None,
    }
}

fn absolute(base: &Path, p: &str) -> PathBuf {
    base.join(p)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_policy_file_parses_or_is_refused_without_panic(text in toml_text()) {
        let _ = PolicyFile::parse(&text);
    }

    #[test]
    fn an_accepted_command_line_asks_for_exactly_what_it_named(
        text in toml_text(),
        use_file in any::<bool>(),
        flags in flags(),
        argv in prop::collection::vec(program_arg(), 1..5),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let cwd = dir.path().join("cwd");
        std::fs::create_dir(&cwd).expect("mkdir");
        let cfg = dir.path().join("policy.toml");
        std::fs::write(&cfg, &text).expect("write");
        let config = use_file.then_some(cfg.as_path());
        // The program's argv is never mistaken for flags, whatever it holds.
        let Some(args) = parse_run(&flags, config, &argv) else {
            // Only a wrong flag value may make clap refuse; the argv never does.
            prop_assert!(parse_run(&[], None, &argv).is_some(), "argv {argv:?} refused");
            return Ok(());
        };
        prop_assert_eq!(&args.command, &argv);
        let flag_reads: Vec<PathBuf> = args.policy.read.clone();
        let flag_writes: Vec<PathBuf> = args.policy.write.clone();
        let flag_network = args.policy.network;
        let file = if use_file { PolicyFile::parse(&text).ok() } else { None };
        let Ok(spec) = resolve(args.policy, &cwd) else { return Ok(()) };
        // Paths: the file's (against its directory), then the flags' (against cwd); no other.
        let base = dir.path();
        let mut want_read: Vec<PathBuf> = Vec::new();
        let mut want_write: Vec<PathBuf> = Vec::new();
        if let Some(f) = &file {
            want_read.extend(f.read_paths().iter().map(|p| base.join(p)));
            want_write.extend(f.write_paths().iter().map(|p| base.join(p)));
        }
        want_read.extend(flag_reads.iter().map(|p| absolute(&cwd, &p.to_string_lossy())));
        want_write.extend(flag_writes.iter().map(|p| absolute(&cwd, &p.to_string_lossy())));
        prop_assert_eq!(&spec.read, &want_read);
        prop_assert_eq!(&spec.write, &want_write);
        // The network is the flag's, else the file's, else none: never wider.
        let want_net = flag_network
            .map(sandbox::NetworkMode::from)
            .or(file.as_ref().and_then(PolicyFile::network))
            .unwrap_or_default();
        prop_assert_eq!(spec.network, want_net);
    }
}
