//! `cargo xtask conformance`: build the suite once, run it per backend, print the matrix.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::{cargo, project_root, target_dir, Result};

/// `--require all`.
const ALL: &str = "all";

/// The uid the suite runs as in `--in-container` without `--as-user`: a non-root user, as
/// a pod's `runAsNonRoot` gives.
const DEFAULT_CONTAINER_UID: u32 = 1000;

/// The suite's exit code for "backend unavailable" (see `sandbox_conformance::harness`).
pub(crate) const UNAVAILABLE_EXIT: i32 = 3;

#[derive(Debug, Default)]
struct Options {
    /// No backend named: every backend the suite knows (asked after the build).
    every_backend: bool,
    /// `--require all`: every backend the suite knows is required.
    require_all: bool,
    backends: Vec<String>,
    require: Vec<String>,
    validate: bool,
    as_user: Option<u32>,
    /// `--in-container IMAGE`: run the suite inside a default container of the local
    /// engine (its default seccomp profile, masked /proc, no capabilities), as `as_user`
    /// (default 1000), the suite and the probe bound in read-only.
    in_container: Option<String>,
    /// `--container-arg ARG`: an argument for `docker run` before the image, for a container
    /// started with more allowed (what `doctor` names for `strict`).
    container_args: Vec<String>,
    test_args: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match a.as_str() {
            "--backend" => o.backends.push(value("--backend")?),
            "--require" => o.require.extend(
                value("--require")?
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
            "--validate" => o.validate = true,
            "--in-container" => o.in_container = Some(value("--in-container")?),
            "--container-arg" => o.container_args.push(value("--container-arg")?),
            "--as-user" => {
                let v = value("--as-user")?;
                o.as_user = Some(
                    v.parse()
                        .map_err(|_| format!("--as-user takes a numeric uid, not `{v}`"))?,
                );
            }
            "--" => {
                o.test_args = it.by_ref().cloned().collect();
            }
            other => {
                return Err(format!("unknown option `{other}` (see `cargo xtask help`)").into())
            }
        }
    }
    // `--require all`: every backend the suite knows, each required (resolved after the
    // build, from the suite's list).
    if let Some(i) = o.require.iter().position(|r| r == ALL) {
        o.require.remove(i);
        o.require_all = true;
    }
    // Defaults: every backend, unless only validation was asked for.
    o.every_backend =
        o.require_all || (o.backends.is_empty() && !(o.validate && o.require.is_empty()));
    for r in &o.require {
        if !o.backends.contains(r) {
            o.backends.push(r.clone());
        }
    }
    Ok(o)
}

/// The built test binary and probe.
pub(crate) struct Built {
    pub(crate) suite: PathBuf,
    pub(crate) probe: PathBuf,
}

/// `cargo test -p sandbox-conformance --no-run`, once; the paths come from cargo's JSON
/// messages, never guessed.
pub(crate) fn build() -> Result<Built> {
    eprintln!("xtask: building the conformance suite");
    let out = Command::new(cargo())
        .current_dir(project_root())
        .args([
            "test",
            "-p",
            "sandbox-conformance",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("building the conformance suite failed ({})", out.status).into());
    }
    let (mut suite, mut probe) = (None, None);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let kinds = &msg["target"]["kind"];
        let has = |k: &str| kinds.as_array().is_some_and(|a| a.iter().any(|v| v == k));
        match msg["target"]["name"].as_str() {
            Some("conformance") if has("test") => suite = Some(PathBuf::from(exe)),
            Some("sandbox-probe") if has("bin") => probe = Some(PathBuf::from(exe)),
            _ => {}
        }
    }
    Ok(Built {
        suite: suite.ok_or("cargo built no `conformance` test binary")?,
        probe: probe.ok_or("cargo built no `sandbox-probe` binary")?,
    })
}

/// The backends the suite knows, in matrix order: the facade's registry, as the built
/// suite prints it (xtask links no backend).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) every: Vec<String>,
    /// The one that confines nothing, which `--validate` runs the suite against.
    pub(crate) unconfined: Option<String>,
    /// The confining backends an ordinary user runs (no root-equivalent access): what a
    /// run `--as-user` covers.
    pub(crate) unprivileged: Vec<String>,
    /// The Debian packages each backend needs on the host, by backend.
    pub(crate) packages: Vec<(String, Vec<String>)>,
    /// The host programs the backends run.
    pub(crate) programs: Vec<String>,
}

impl Known {
    /// Every backend, or for a run as an unprivileged uid every confining one that runs
    /// unprivileged.
    pub(crate) fn for_user(&self, as_user: Option<u32>) -> Vec<String> {
        match as_user {
            Some(_) => self.unprivileged.clone(),
            None => self.every.clone(),
        }
    }
}

pub(crate) fn known_backends(built: &Built) -> Result<Known> {
    let out = Command::new(&built.suite)
        .arg("--list-backends")
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("the suite could not list its backends ({})", out.status).into());
    }
    Ok(parse_known(&String::from_utf8_lossy(&out.stdout)))
}

/// `NAME [unconfined] [unprivileged] [program=P] [packages=A,B]` a line.
fn parse_known(text: &str) -> Known {
    let mut known = Known::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let (mut unconfined, mut unprivileged) = (false, false);
        for word in words {
            match word {
                "unconfined" => unconfined = true,
                "unprivileged" => unprivileged = true,
                _ => {
                    if let Some(program) = word.strip_prefix("program=") {
                        known.programs.push(program.to_string());
                    }
                    if let Some(list) = word.strip_prefix("packages=") {
                        let list = list.split(',').filter(|p| !p.is_empty());
                        known
                            .packages
                            .push((name.to_string(), list.map(String::from).collect()));
                    }
                }
            }
        }
        if unconfined && known.unconfined.is_none() {
            known.unconfined = Some(name.to_string());
        }
        if unprivileged && !unconfined {
            known.unprivileged.push(name.to_string());
        }
        known.every.push(name.to_string());
    }
    known
}

/// One column of the matrix.
#[derive(Debug)]
struct Column {
    label: String,
    backend: String,
    validate: bool,
    /// Why the backend could not run, if it could not.
    unavailable: Option<String>,
    /// The suite did not finish with a report.
    crashed: Option<String>,
    /// Case (area::case) to (verdict, message), in the suite's order.
    results: Vec<(String, String, Option<String>)>,
}

impl Column {
    fn failed(&self) -> usize {
        self.results.iter().filter(|(_, v, _)| v == "fail").count()
    }
    fn count(&self, verdict: &str) -> usize {
        self.results.iter().filter(|(_, v, _)| v == verdict).count()
    }
}

/// Where a run as `uid` keeps its temp files, the binaries it runs and its report: a
/// directory it owns (created here), so nothing depends on the target dir being readable.
pub(crate) fn user_dir(uid: u32) -> Result<PathBuf> {
    let dir = user_dir_path(uid);
    std::fs::create_dir_all(&dir)?;
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).map_err(|e| {
        format!(
            "cannot hand {} to uid {uid} ({e}); --as-user needs root",
            dir.display()
        )
    })?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

fn user_dir_path(uid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("sandbox-conformance-uid-{uid}"))
}

pub(crate) fn copy_for(uid: u32, from: &Path, dir: &Path, name: &str) -> Result<PathBuf> {
    let to = dir.join(name);
    std::fs::copy(from, &to)?;
    std::os::unix::fs::chown(&to, Some(uid), Some(uid))?;
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
    Ok(to)
}

fn run_one(built: &Built, backend: &str, validate: bool, opts: &Options) -> Result<Column> {
    let label = if validate {
        format!("{backend} (validate)")
    } else {
        backend.to_string()
    };
    eprintln!("\nxtask: running the suite: {label}");
    let mut cmd;
    let report;
    match (opts.as_user, &opts.in_container) {
        (uid, Some(image)) => {
            let uid = uid.unwrap_or(DEFAULT_CONTAINER_UID);
            let dir = user_dir(uid)?;
            let suite = copy_for(uid, &built.suite, &dir, "conformance")?;
            let probe = copy_for(uid, &built.probe, &dir, "sandbox-probe")?;
            report = dir.join(format!("report-{backend}-{validate}.json"));
            let inside =
                |p: &Path| Path::new("/opt/conformance").join(p.file_name().unwrap_or_default());
            cmd = Command::new("docker");
            // What a default pod gives: the engine's default seccomp profile and masked
            // /proc (nothing said of either), no capabilities for a non-root user. Only a
            // tmpfs for /tmp (executable: the suite runs programs it writes there) and the
            // suite's directory are added.
            cmd.args(["run", "--rm", "--network", "none"])
                .args(["--user", &format!("{uid}:{uid}")])
                .args(["--tmpfs", "/tmp:rw,exec,mode=1777,size=2g"])
                .args(["-v", &format!("{}:/opt/conformance", dir.display())])
                // The suite runs the probe on its own side too, from the path it was built
                // at (`CARGO_BIN_EXE_sandbox-probe`): the same file, there.
                .args([
                    "-v",
                    &format!("{}:{}:ro", built.probe.display(), built.probe.display()),
                ])
                .args(["-w", "/tmp", "-e", "HOME=/tmp", "-e", "TMPDIR=/tmp"])
                .args(["-e", &format!("SANDBOX_PROBE={}", inside(&probe).display())])
                .args(["-e", &format!("SANDBOX_BACKEND={backend}")])
                .args([
                    "-e",
                    &format!("SANDBOX_CONFORMANCE_REPORT={}", inside(&report).display()),
                ]);
            if validate {
                cmd.args(["-e", "SANDBOX_VALIDATE=1"]);
            }
            cmd.args(&opts.container_args)
                .arg(image)
                .arg(inside(&suite));
        }
        (Some(uid), None) => {
            let dir = user_dir(uid)?;
            let suite = copy_for(uid, &built.suite, &dir, "conformance")?;
            let probe = copy_for(uid, &built.probe, &dir, "sandbox-probe")?;
            let tmp = dir.join("tmp");
            std::fs::create_dir_all(&tmp)?;
            std::os::unix::fs::chown(&tmp, Some(uid), Some(uid))?;
            report = dir.join(format!("report-{backend}-{validate}.json"));
            cmd = Command::new("setpriv");
            cmd.args(["--reuid", &uid.to_string(), "--regid", &uid.to_string()])
                .args(["--clear-groups", "--"])
                .arg(&suite)
                .current_dir(&dir)
                .env("TMPDIR", &tmp)
                .env("HOME", &dir)
                .env("SANDBOX_PROBE", &probe);
        }
        (None, None) => {
            let dir = target_dir().join("conformance");
            std::fs::create_dir_all(&dir)?;
            report = dir.join(format!("report-{backend}-{validate}.json"));
            cmd = Command::new(&built.suite);
            cmd.current_dir(project_root());
        }
    }
    let _ = std::fs::remove_file(&report);
    cmd.args(&opts.test_args)
        .env("SANDBOX_BACKEND", backend)
        .env("SANDBOX_CONFORMANCE_REPORT", &report)
        .env_remove("SANDBOX_VALIDATE");
    if validate {
        cmd.env("SANDBOX_VALIDATE", "1");
    }
    let status = cmd.status()?;
    let parsed: Option<Value> = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let _ = std::fs::remove_file(&report);
    let mut col = Column {
        label,
        backend: backend.to_string(),
        validate,
        unavailable: None,
        crashed: None,
        results: Vec::new(),
    };
    let Some(parsed) = parsed else {
        col.crashed = Some(format!("the suite wrote no report ({status})"));
        if status.code() == Some(UNAVAILABLE_EXIT) {
            col.unavailable = Some("unavailable (no reason recorded)".into());
            col.crashed = None;
        }
        return Ok(col);
    };
    if let Some(reason) = parsed["unavailable"].as_str() {
        col.unavailable = Some(reason.to_string());
        return Ok(col);
    }
    for r in parsed["results"].as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap_or("?");
        let short = name.strip_prefix("conformance::").unwrap_or(name);
        col.results.push((
            short.to_string(),
            r["verdict"].as_str().unwrap_or("?").to_string(),
            r["message"].as_str().map(String::from),
        ));
    }
    // A non-zero exit with no failing case recorded (a crash mid-way) is still a failure.
    if !status.success() && col.failed() == 0 {
        col.crashed = Some(format!("the suite exited with {status}"));
    }
    Ok(col)
}

fn cell_text(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn render(columns: &[Column], opts: &Options) -> String {
    let mut rows: Vec<String> = Vec::new();
    for c in columns {
        for (name, _, _) in &c.results {
            if !rows.contains(name) {
                rows.push(name.clone());
            }
        }
    }
    let mut md = String::new();
    let _ = writeln!(md, "# Conformance matrix\n");
    match (&opts.in_container, opts.as_user) {
        (Some(image), uid) => {
            let uid = uid.unwrap_or(DEFAULT_CONTAINER_UID);
            let with = if opts.container_args.is_empty() {
                "a default container".to_string()
            } else {
                format!(
                    "a container started with `{}`",
                    opts.container_args.join(" ")
                )
            };
            let _ = writeln!(md, "Run inside {with} of image `{image}` as uid {uid}.\n");
        }
        (None, Some(uid)) => {
            let _ = writeln!(md, "Run as uid {uid}.\n");
        }
        (None, None) => {}
    }
    let _ = write!(md, "| case |");
    for c in columns {
        let _ = write!(md, " {} |", c.label);
    }
    let _ = write!(md, "\n|---|");
    for _ in columns {
        let _ = write!(md, "---|");
    }
    md.push('\n');
    for row in &rows {
        let _ = write!(md, "| {row} |");
        for c in columns {
            let cell = if c.unavailable.is_some() {
                "unavailable".to_string()
            } else {
                match c.results.iter().find(|(n, _, _)| n == row) {
                    Some((_, v, _)) if v == "pass" && c.validate => "validated".into(),
                    Some((_, v, _)) if v == "pass" => "pass".into(),
                    Some((_, v, _)) if v == "fail" => "**FAIL**".into(),
                    Some((_, v, m)) if v == "skip" => {
                        format!("skip ({})", cell_text(m.as_deref().unwrap_or("no reason")))
                    }
                    Some((_, v, _)) => v.clone(),
                    None => "—".into(),
                }
            };
            let _ = write!(md, " {cell} |");
        }
        md.push('\n');
    }
    let _ = writeln!(md, "\n## Summary\n");
    let required = |b: &str| opts.require.iter().any(|r| r == b);
    for c in columns {
        let req = if required(&c.backend) && !c.validate {
            " (required)"
        } else {
            ""
        };
        let line = if let Some(u) = &c.unavailable {
            format!("UNAVAILABLE: {}", cell_text(u))
        } else if let Some(e) = &c.crashed {
            format!("CRASHED: {e}")
        } else {
            format!(
                "{} passed, {} failed, {} skipped",
                c.count("pass"),
                c.count("fail"),
                c.count("skip")
            )
        };
        let _ = writeln!(md, "- **{}**{req}: {line}", c.label);
    }
    let failures: Vec<_> = columns
        .iter()
        .flat_map(|c| {
            c.results
                .iter()
                .filter(|(_, v, _)| v == "fail")
                .map(move |(n, _, m)| (c, n, m))
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(md, "\n## Failures\n");
        for (c, n, m) in failures {
            let _ = writeln!(
                md,
                "- **{}** `{n}`: {}",
                c.label,
                cell_text(m.as_deref().unwrap_or(""))
            );
        }
    }
    md
}

/// The task.
pub fn run(args: &[String]) -> Result<()> {
    let mut opts = parse(args)?;
    let built = build()?;
    let known = known_backends(&built)?;
    // As an unprivileged uid, "every backend" is every confining one the registry says an
    // ordinary user runs.
    let every = known.for_user(opts.as_user);
    if opts.every_backend {
        let mut all = every.clone();
        all.retain(|b| !opts.backends.contains(b));
        opts.backends.splice(0..0, all);
    }
    if opts.require_all {
        opts.require = every;
    }
    let mut columns = Vec::new();
    for b in &opts.backends {
        columns.push(run_one(&built, b, false, &opts)?);
    }
    if opts.validate {
        let against = known
            .unconfined
            .ok_or("the registry has no unconfined backend to validate the suite against")?;
        columns.push(run_one(&built, &against, true, &opts)?);
    }
    let user = opts
        .as_user
        .or(opts.in_container.as_ref().map(|_| DEFAULT_CONTAINER_UID));
    if let Some(uid) = user {
        // The copies of the binaries and the temp dirs of the unprivileged runs.
        let _ = std::fs::remove_dir_all(user_dir_path(uid));
    }
    let md = render(&columns, &opts);
    println!("\n{md}");
    let out = target_dir().join("conformance.md");
    std::fs::create_dir_all(target_dir())?;
    std::fs::write(&out, &md)?;
    eprintln!("xtask: matrix written to {}", out.display());

    let mut problems: BTreeMap<String, String> = BTreeMap::new();
    for c in &columns {
        if c.failed() > 0 {
            problems.insert(c.label.clone(), format!("{} case(s) failed", c.failed()));
        }
        if let Some(e) = &c.crashed {
            problems.insert(c.label.clone(), e.clone());
        }
        if c.unavailable.is_some() && (c.validate || opts.require.contains(&c.backend)) {
            problems.insert(c.label.clone(), "required but unavailable".into());
        }
        if c.validate && c.unavailable.is_none() && c.results.is_empty() {
            problems.insert(c.label.clone(), "no confinement case ran".into());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let list: Vec<String> = problems.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        Err(format!("conformance failed: {}", list.join("; ")).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_to_every_backend() {
        let o = parse(&[]).unwrap();
        assert!(o.every_backend && o.backends.is_empty());
        assert!(!o.validate && o.require.is_empty());
    }

    #[test]
    fn the_suites_list_names_the_unconfined_backend() {
        let k = parse_known("a\nb unconfined\n\nc\n");
        assert_eq!(k.every, ["a", "b", "c"]);
        assert_eq!(k.unconfined.as_deref(), Some("b"));
        assert_eq!(parse_known("a\n").unconfined, None);
    }

    #[test]
    fn as_a_user_every_backend_is_every_confining_one_that_runs_unprivileged() {
        let k = parse_known(
            "free unconfined unprivileged\nns unprivileged program=nsrun packages=ns-tool\n\
             engine\nkernel unprivileged packages=k1,k2\n",
        );
        assert_eq!(k.for_user(None), ["free", "ns", "engine", "kernel"]);
        assert_eq!(k.for_user(Some(65534)), ["ns", "kernel"]);
        assert_eq!(k.programs, ["nsrun"]);
        assert_eq!(
            k.packages,
            [
                ("ns".to_string(), vec!["ns-tool".to_string()]),
                (
                    "kernel".to_string(),
                    vec!["k1".to_string(), "k2".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn require_all_runs_and_requires_every_backend() {
        let o = parse(&args(&["--require", "all", "--validate"])).unwrap();
        assert!(o.require_all && o.every_backend && o.validate);
        assert!(
            o.require.is_empty(),
            "resolved after the build: {:?}",
            o.require
        );
    }

    #[test]
    fn validate_alone_runs_only_the_validation() {
        let o = parse(&args(&["--validate"])).unwrap();
        assert!(o.validate && o.backends.is_empty() && !o.every_backend);
    }

    #[test]
    fn a_required_backend_is_run_and_harness_args_pass_through() {
        let o = parse(&args(&[
            "--backend",
            "a",
            "--require",
            "b,c",
            "--as-user",
            "65534",
            "--",
            "fs::",
            "--exact",
        ]))
        .unwrap();
        assert_eq!(o.backends, ["a", "b", "c"]);
        assert_eq!(o.as_user, Some(65534));
        assert_eq!(o.test_args, ["fs::", "--exact"]);
        assert!(parse(&args(&["--as-user", "nobody"])).is_err());
        assert!(parse(&args(&["--frobnicate"])).is_err());
    }

    #[test]
    fn the_matrix_shows_fail_skip_reasons_and_unavailable() {
        let ran = Column {
            label: "a".into(),
            backend: "a".into(),
            validate: false,
            unavailable: None,
            crashed: None,
            results: vec![
                ("a::one".into(), "pass".into(), None),
                ("a::two".into(), "fail".into(), Some("broke | badly".into())),
                ("a::three".into(), "skip".into(), Some("not claimed".into())),
            ],
        };
        let gone = Column {
            label: "b".into(),
            backend: "b".into(),
            validate: false,
            unavailable: Some("b missing".into()),
            crashed: None,
            results: Vec::new(),
        };
        let o = Options {
            require: vec!["b".into()],
            ..Options::default()
        };
        let md = render(&[ran, gone], &o);
        assert!(md.contains("| a::one | pass | unavailable |"), "{md}");
        assert!(md.contains("| a::two | **FAIL** | unavailable |"), "{md}");
        assert!(md.contains("skip (not claimed)"), "{md}");
        assert!(md.contains("broke \\| badly"), "{md}");
        assert!(
            md.contains("**b** (required): UNAVAILABLE: b missing"),
            "{md}"
        );
    }
}
