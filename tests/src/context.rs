//! What every case gets: the backend, the probe, scratch directories, the lane, and the
//! helpers that run the probe and read its report.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::admission::{check_lane, LaneRequest};
use sandbox_core::{
    Backend, Capability, DynSandbox, Lane, SandboxError, SandboxExt, SandboxOpts, SandboxOutcome,
};
use serde_json::Value;

/// Where the probe is inside a container image (a backend whose capability has
/// `host_programs: false`).
pub const IN_IMAGE_PROBE: &str = "/usr/local/bin/sandbox-probe";

/// The programs the suite puts into the image of a backend that runs one, besides the
/// probe, taken from the host (no registry): `sh` (busybox, which runs as `sh` by its
/// name), `curl`, `python3` with its standard library and `pip`, and `git` with the helper
/// an http clone runs. Each is the program the backends that run host programs would run
/// (found on core's `DEFAULT_PATH`, the command's `PATH`), at the same path in the image,
/// with the trees it needs; see [`image_tool_sources`].
pub const IMAGE_TOOLS: &[&str] = &["sh", "curl", "python3", "git"];

/// What of python's standard library the image leaves out: nothing a command runs (the
/// test suite, the IDE and Tk, the demos, the build configuration with its static
/// library, the bundled wheels, 2to3, the docs' topics), and Debian's `sitecustomize`, a
/// link into `/etc` for a crash reporter. Together over half the tree.
const PYTHON_LEFT_OUT: &[&str] = &[
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
    "sitecustomize.py",
];

/// The host files and trees for each of `tools` (names from [`IMAGE_TOOLS`]; others are
/// ignored), `(host path, path in the image)`; a directory stands for its whole tree (see
/// [`BuildImageFn`](sandbox_core::registry::BuildImageFn)). A tool the host lacks is left
/// out: the cases that need it then fail, as they would on a backend that runs the host's
/// programs.
pub fn image_tool_sources(tools: &[&str]) -> Vec<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::split_paths(sandbox_core::DEFAULT_PATH)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    };
    let same = |p: PathBuf| (p.clone(), p);
    let mut files = Vec::new();
    for &tool in tools {
        match tool {
            "sh" => files.extend(find("busybox").map(|b| (b, PathBuf::from("/bin/sh")))),
            "python3" => {
                if let Some(python) = find(tool) {
                    files.extend(python_trees(&python).into_iter().map(same));
                    files.push(same(python));
                }
            }
            "git" => {
                if let Some(git) = find(tool) {
                    files.extend(git_helpers(&git).into_iter().map(same));
                    files.push(same(git));
                }
            }
            _ if IMAGE_TOOLS.contains(&tool) => files.extend(find(tool).map(same)),
            _ => {}
        }
    }
    files
}

/// What `program` prints with `args`, run with only core's `PATH`; `None` when it fails.
fn ask(program: &Path, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", sandbox_core::DEFAULT_PATH)
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The host python's standard library (each entry but [`PYTHON_LEFT_OUT`] and the build
/// configuration), and pip's package with its metadata, as that python names them.
fn python_trees(python: &Path) -> Vec<PathBuf> {
    let script = "import sysconfig, pip, importlib.metadata as m, os\n\
                  print(sysconfig.get_path('stdlib'))\n\
                  print(os.path.dirname(pip.__file__))\n\
                  print(m.distribution('pip')._path)";
    let Some(out) = ask(python, &["-I", "-c", script]) else {
        return Vec::new();
    };
    let mut lines = out.lines().map(PathBuf::from);
    let (Some(stdlib), Some(pip), Some(meta)) = (lines.next(), lines.next(), lines.next()) else {
        return Vec::new();
    };
    let mut trees: Vec<PathBuf> = std::fs::read_dir(&stdlib)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !PYTHON_LEFT_OUT.contains(&name.as_ref()) && !name.starts_with("config-")
        })
        .map(|e| e.path())
        .collect();
    trees.sort();
    trees.extend([pip, meta]);
    trees
}

/// What an http clone needs of the host git besides the program: the remote helpers
/// (`git-remote-http`, `-https`) in its exec path, and its templates when it has them
/// (`PREFIX/share/git-core/templates` beside `PREFIX/libexec/git-core`).
fn git_helpers(git: &Path) -> Vec<PathBuf> {
    let Some(exec) = ask(git, &["--exec-path"]).map(|s| PathBuf::from(s.trim())) else {
        return Vec::new();
    };
    let mut helpers: Vec<PathBuf> = ["git-remote-http", "git-remote-https"]
        .iter()
        .map(|h| exec.join(h))
        .filter(|p| p.is_file())
        .collect();
    if let Some(prefix) = exec.parent().and_then(Path::parent) {
        let templates = prefix.join("share/git-core/templates");
        if templates.is_dir() {
            helpers.push(templates);
        }
    }
    helpers
}

/// A variable set on the host that must never reach a sandboxed command.
pub const SECRET_VAR: &str = "SANDBOX_CONFORMANCE_SECRET";

/// A variable set on the host that a case names to pass through.
pub const PASSED_VAR: &str = "SANDBOX_CONFORMANCE_PASSED";

/// The wall-clock timeout every run gets unless a case sets its own: a hung probe fails
/// its case instead of hanging the suite. Generous; nothing asserts on it.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the host waits for a run's outcome beyond its own timeout before it gives up
/// on the backend, kills and fails the case.
const WAIT_GRACE: Duration = Duration::from_secs(60);

/// Set [`SECRET_VAR`] and [`PASSED_VAR`] in this process's environment, for the
/// environment cases. Call once, before the runtime's threads start (changing the
/// environment races with threads that read it).
pub fn prepare_host_env() {
    for name in [SECRET_VAR, PASSED_VAR] {
        if std::env::var_os(name).is_none() {
            std::env::set_var(name, format!("{}-{}", name.to_lowercase(), token()));
        }
    }
}

/// A value unique to this process and call, for names and planted contents.
pub fn token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:x}{:x}{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff,
        n
    )
}

/// Why a case failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The case could not do its job: a sandbox error, a broken positive control, a
    /// missing report. Never counts as "validated".
    Broken(String),
    /// The confinement check saw the forbidden effect (a secret read, a file changed, a
    /// host listener reached). The only failure that validates a confinement case.
    Violation(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Broken(m) => f.write_str(m),
            Self::Violation(m) => write!(f, "confinement violated: {m}"),
        }
    }
}

impl From<SandboxError> for Failure {
    fn from(e: SandboxError) -> Self {
        Self::Broken(format!("sandbox error: {e}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::Broken(format!("host I/O error: {e}"))
    }
}

/// The confinement checks of a case with several: each is run and recorded, so that a
/// failing backend shows every hole at once, and so that validation can demand that
/// *every* check fails against `none` (a check that cannot fail proves nothing).
#[derive(Debug)]
pub struct Forbidden {
    mode: Mode,
    results: Vec<(String, Option<String>)>,
}

impl Forbidden {
    /// Checks for a case running in `ctx`.
    pub fn new(ctx: &Context) -> Self {
        Self::with_mode(ctx.mode())
    }

    /// Checks judged for `mode`.
    pub fn with_mode(mode: Mode) -> Self {
        Self {
            mode,
            results: Vec::new(),
        }
    }

    /// Record check `what`: `violated` when the forbidden effect was seen, described by
    /// `detail`.
    pub fn check(&mut self, what: &str, violated: bool, detail: impl FnOnce() -> String) {
        let v = violated.then(|| format!("{what}: {}", detail()));
        self.results.push((what.to_owned(), v));
    }

    /// The case's result: a violation listing every check that saw its forbidden effect.
    /// When validating, every check must have seen it, or the case is broken.
    pub fn finish(self) -> Result<(), Failure> {
        if self.results.is_empty() {
            return Err(Failure::Broken("no confinement check ran".into()));
        }
        let seen: Vec<&str> = self
            .results
            .iter()
            .filter_map(|(_, v)| v.as_deref())
            .collect();
        let missed: Vec<&str> = self
            .results
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(w, _)| w.as_str())
            .collect();
        match self.mode {
            Mode::Conform if seen.is_empty() => Ok(()),
            Mode::Conform => Err(Failure::Violation(seen.join("; "))),
            Mode::Validate if missed.is_empty() => Err(Failure::Violation(seen.join("; "))),
            Mode::Validate => Err(Failure::Broken(format!(
                "these checks saw nothing forbidden even without confinement, so they cannot \
                 fail: {}",
                missed.join(", ")
            ))),
        }
    }
}

/// How the suite is being run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Checking a backend.
    Conform,
    /// Checking the suite: confinement cases against `none`, expected to fail.
    Validate,
}

/// The strictest lane on which `backend` with `cap` runs a plain command (network `none`,
/// the default limits, no carve-outs, no snapshot): decided by the lane policy from
/// capability data, never from the backend's name. `None` when no lane accepts it.
pub fn strictest_lane(backend: &'static str, cap: &Capability) -> Option<Lane> {
    let limits = sandbox_core::ResourceLimits::default();
    let request = LaneRequest {
        network: sandbox_core::NetworkMode::None,
        carveouts: false,
        limits: &limits,
        changes: sandbox_core::Changes::Direct,
        host_is_root: is_root(),
    };
    Lane::ALL
        .into_iter()
        .find(|&lane| check_lane(lane, backend, cap, &request).is_ok())
}

/// Whether `backend` is admitted on `lane` for a plain run (network `none`, no limits, no
/// carve-outs), as [`strictest_lane`] asks.
pub fn admits(backend: &'static str, cap: &Capability, lane: Lane) -> bool {
    let limits = sandbox_core::ResourceLimits::default();
    let request = LaneRequest {
        network: sandbox_core::NetworkMode::None,
        carveouts: false,
        limits: &limits,
        changes: sandbox_core::Changes::Direct,
        host_is_root: is_root(),
    };
    check_lane(lane, backend, cap, &request).is_ok()
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A directory for one case, removed when dropped. `path` is canonical.
#[derive(Debug)]
pub struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    /// The canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside it.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

/// Everything a case needs. Shared by all cases of one run of the suite.
#[derive(Debug)]
pub struct Context {
    backend: Arc<dyn Backend>,
    probe: PathBuf,
    /// Arguments between the probe and its subcommand (`__probe` when the probe is the
    /// `sandbox` command itself).
    probe_prefix: Vec<OsString>,
    /// The probe on the host, for cases that inspect a tree from the host side with it:
    /// `probe` itself unless the probe inside the sandbox is another path (a container
    /// image's copy).
    host_probe: Option<PathBuf>,
    scratch: tempfile::TempDir,
    cap: Capability,
    lane: Lane,
    mode: Mode,
    /// Held shared by the cases that grant the whole temp dir, exclusively by a case that
    /// plants thousands of root-only entries in the scratch directory under it: on a root
    /// host a backend hides each root-only entry it can see (bwrap with a mount each, up to
    /// the options bwrap reads), so those entries must not exist while the temp dir is
    /// granted, nor vanish while a launcher binds over them.
    temp_dir: tokio::sync::RwLock<()>,
}

impl Context {
    /// A context for `backend`, running `probe` (as argv\[0\] inside the sandbox), with a
    /// new scratch directory under `TMPDIR`.
    pub fn new(backend: Arc<dyn Backend>, probe: PathBuf, mode: Mode) -> std::io::Result<Self> {
        let cap = backend.capability();
        let lane = match mode {
            Mode::Validate => Lane::Trusted,
            Mode::Conform => strictest_lane(backend.name(), &cap).unwrap_or(Lane::Strict),
        };
        let scratch = tempfile::Builder::new()
            .prefix("sandbox-conformance-")
            .tempdir()?;
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            backend,
            probe,
            probe_prefix: Vec::new(),
            host_probe: None,
            scratch,
            cap,
            lane,
            mode,
            temp_dir: tokio::sync::RwLock::new(()),
        })
    }

    /// For a case that grants the whole temp dir: no case's crowd of root-only entries
    /// exists under it while the guard lives.
    pub async fn temp_dir_shared(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.temp_dir.read().await
    }

    /// For a case that plants a crowd of root-only entries under the temp dir: no case
    /// grants the whole temp dir while the guard lives.
    pub async fn temp_dir_exclusive(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.temp_dir.write().await
    }

    /// The same context with `prefix` between the probe and each subcommand: for a probe
    /// that is a subcommand of a larger program (`sandbox __probe`).
    pub fn with_probe_prefix(mut self, prefix: Vec<OsString>) -> Self {
        self.probe_prefix = prefix;
        self
    }

    /// The same context with the probe at `path` on the host, where the sandbox's own is
    /// elsewhere (inside a container image).
    pub fn with_host_probe(mut self, path: PathBuf) -> Self {
        self.host_probe = Some(path);
        self
    }

    /// The probe as a host command (unconfined), ready for its subcommand's arguments.
    pub fn host_probe_command(&self) -> std::process::Command {
        match &self.host_probe {
            Some(p) => std::process::Command::new(p),
            None => {
                let mut c = std::process::Command::new(&self.probe);
                c.args(&self.probe_prefix);
                c
            }
        }
    }

    /// The same context on `lane` instead of the strictest the capability allows.
    pub fn with_lane(mut self, lane: Lane) -> Self {
        self.lane = lane;
        self
    }

    /// The backend under test.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Its name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Its capability on this host.
    pub fn capability(&self) -> &Capability {
        &self.cap
    }

    /// The lane every run uses.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// Conform or validate.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The probe as argv\[0\] names it.
    pub fn probe(&self) -> &Path {
        &self.probe
    }

    /// The capability the case requirements are judged against: the backend's own, or,
    /// when validating, `none`'s with every confinement claimed, so that the confinement
    /// cases run (and must fail).
    pub fn claimed(&self) -> Capability {
        match self.mode {
            Mode::Conform => self.cap.clone(),
            Mode::Validate => {
                use sandbox_core::Enforcement::Exact;
                Capability {
                    confine_writes: true,
                    confine_reads: true,
                    readonly_carveouts: true,
                    network_none: Exact,
                    network_state_private: true,
                    network_loopback: Exact,
                    network_proxy: Exact,
                    process_isolation: true,
                    drops_host_root: true,
                    ..self.cap.clone()
                }
            }
        }
    }

    /// A fresh sandbox.
    pub fn sandbox(&self) -> Box<DynSandbox> {
        self.backend.sandbox()
    }

    /// A new directory under the scratch directory with `mode`.
    pub fn dir(&self, label: &str, mode: u32) -> std::io::Result<Dir> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{label}-"))
            .tempdir_in(self.scratch.path())?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))?;
        let path = tmp.path().canonicalize()?;
        Ok(Dir { _tmp: tmp, path })
    }

    /// A new workspace (mode 0755, like a checked-out project).
    pub fn workspace(&self, label: &str) -> std::io::Result<Dir> {
        self.dir(label, 0o755)
    }

    /// The probe's argv: the probe, then `args`.
    pub fn probe_argv<I, S>(&self, args: I) -> Vec<OsString>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        std::iter::once(self.probe.clone().into_os_string())
            .chain(self.probe_prefix.iter().cloned())
            .chain(args.into_iter().map(|a| a.as_ref().to_owned()))
            .collect()
    }

    /// Options for running the probe with `args` in `workspace` on the context's lane, with
    /// the suite's generous safety timeout.
    pub fn opts<I, S>(&self, workspace: &Path, args: I) -> SandboxOpts
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut opts = SandboxOpts::new(workspace, self.probe_argv(args));
        opts.lane = self.lane;
        opts.timeout = Some(RUN_TIMEOUT);
        opts
    }

    /// Run `opts` in a fresh sandbox to its end. Gives up (kills, fails) if the backend
    /// has not reported well after the run's own timeout.
    pub async fn run(&self, opts: SandboxOpts) -> Result<SandboxOutcome, Failure> {
        let limit = opts.timeout.unwrap_or(RUN_TIMEOUT) + WAIT_GRACE;
        let sb = self.sandbox();
        match tokio::time::timeout(limit, sb.execute(opts)).await {
            Ok(r) => Ok(r?),
            Err(_) => {
                let _ = tokio::time::timeout(WAIT_GRACE, sb.kill()).await;
                Err(Failure::Broken(format!(
                    "the run did not end within {limit:?} (its timeout plus a grace period)"
                )))
            }
        }
    }

    /// Run the probe and parse its report.
    pub async fn probe_run(&self, opts: SandboxOpts) -> Result<Probed, Failure> {
        let outcome = self.run(opts).await?;
        let report = parse_report(&outcome.stdout.bytes);
        Ok(Probed { outcome, report })
    }

    /// Run the probe with `args` in `workspace` with default options.
    pub async fn probe_in<I, S>(&self, workspace: &Path, args: I) -> Result<Probed, Failure>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.probe_run(self.opts(workspace, args)).await
    }
}

/// A finished probe run: the outcome and the probe's JSON report, if it printed one.
#[derive(Debug)]
pub struct Probed {
    /// The outcome.
    pub outcome: SandboxOutcome,
    /// The last line of stdout, parsed as JSON.
    pub report: Option<Value>,
}

impl Probed {
    /// The probe exited 0 (its action succeeded).
    pub fn succeeded(&self) -> bool {
        self.outcome.status.success()
    }

    /// The report, or a failure saying the probe did not report (it did not run, or died).
    pub fn report(&self) -> Result<&Value, Failure> {
        self.report.as_ref().ok_or_else(|| {
            Failure::Broken(format!(
                "the probe printed no report: {}",
                describe(&self.outcome)
            ))
        })
    }

    /// A field of the report.
    pub fn field(&self, key: &str) -> Option<&Value> {
        self.report.as_ref().and_then(|r| r.get(key))
    }

    /// A numeric field of the report, or a failure naming it.
    pub fn int(&self, key: &str) -> Result<i64, Failure> {
        self.field(key).and_then(Value::as_i64).ok_or_else(|| {
            Failure::Broken(format!(
                "the probe's report has no number `{key}`: {}",
                describe(&self.outcome)
            ))
        })
    }

    /// Whether stdout anywhere contains `needle`.
    pub fn stdout_contains(&self, needle: &str) -> bool {
        self.outcome.stdout.text().contains(needle)
    }

    /// The outcome, for messages.
    pub fn describe(&self) -> String {
        describe(&self.outcome)
    }
}

/// The last non-empty line of `stdout` that is a JSON object.
pub fn parse_report(stdout: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
        })
}

/// An outcome in one line, for failure messages: status, then the start of each stream.
pub fn describe(o: &SandboxOutcome) -> String {
    let clip = |s: String| {
        let s = s.trim().replace('\n', "⏎");
        if s.chars().count() > 300 {
            format!("{}…", s.chars().take(300).collect::<String>())
        } else {
            s
        }
    };
    format!(
        "status {:?}, stdout `{}`, stderr `{}`",
        o.status,
        clip(o.stdout.text()),
        clip(o.stderr.text())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::Enforcement;

    #[test]
    fn the_report_is_the_last_json_object_line() {
        let out = b"noise\n{\"ok\":false}\nmore noise\n{\"ok\":true,\"n\":3}\n\n";
        let r = parse_report(out).unwrap();
        assert_eq!(r["n"], 3);
        assert!(parse_report(b"no json here\n[1,2]\n").is_none());
    }

    #[test]
    fn forbidden_fails_on_any_violation_when_conforming() {
        let mut f = Forbidden::with_mode(Mode::Conform);
        f.check("a", false, || "unused".into());
        assert_eq!(f.finish(), Ok(()));
        let mut f = Forbidden::with_mode(Mode::Conform);
        f.check("a", false, || "unused".into());
        f.check("b", true, || "leaked".into());
        assert_eq!(f.finish(), Err(Failure::Violation("b: leaked".into())));
    }

    #[test]
    fn forbidden_validates_only_when_every_check_fails() {
        let mut f = Forbidden::with_mode(Mode::Validate);
        f.check("a", true, || "x".into());
        f.check("b", true, || "y".into());
        assert!(matches!(f.finish(), Err(Failure::Violation(_))));
        let mut f = Forbidden::with_mode(Mode::Validate);
        f.check("a", true, || "x".into());
        f.check("b", false, || "y".into());
        match f.finish() {
            Err(Failure::Broken(m)) => assert!(m.contains('b'), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Forbidden::with_mode(Mode::Validate).finish(),
            Err(Failure::Broken(_))
        ));
    }

    fn everything() -> Capability {
        Capability::everything()
    }

    #[test]
    fn the_lane_is_the_strictest_the_capability_allows() {
        assert_eq!(strictest_lane("x", &everything()), Some(Lane::Strict));
        let fast = Capability {
            process_isolation: false,
            ..everything()
        };
        assert_eq!(strictest_lane("x", &fast), Some(Lane::Fast));
        // The default request has a memory limit (`DEFAULT_MEMORY_BYTES`).
        let unconfined = Capability {
            tree_kill: true,
            process_limit: true,
            memory_limit: true,
            network_full: Enforcement::Exact,
            ..Capability::default()
        };
        assert_eq!(strictest_lane("x", &unconfined), Some(Lane::Trusted));
        assert_eq!(strictest_lane("x", &Capability::default()), None);
    }
}
