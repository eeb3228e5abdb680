//! The backends under measurement: how each is built, which lane it runs on, what its
//! programs are called where it runs, and the baseline that is "the same thing without
//! us" for it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sandbox::registry::{BackendInfo, DirectRun, ImageSupport};
use sandbox::select::Config;
use sandbox_core::{Backend, Lane, Plan, SandboxOpts};
use sandbox_host::facts::{FactStore, Facts};
use sandbox_host::process::Launcher;
use tempfile::TempDir;

use crate::runs::PrepareFn;

/// The backends measured when none is named, in table order: every backend in the
/// facade's registry.
pub fn all() -> Vec<&'static str> {
    sandbox::registry::compiled_in().map(|i| i.name).collect()
}

/// The image a backend that runs one is measured with, built locally from `/bin/true`,
/// this binary and curl (no registry is needed); tagged for this build tree
/// (`local_image_tag`), so a bench of another tree on the same engine cannot swap it
/// mid-run.
pub fn image_tag() -> String {
    sandbox_core::registry::local_image_tag(
        "sandbox-bench",
        &std::env::current_exe().unwrap_or_default(),
    )
}

/// A first preflight at least this long marks a subject whose runs cost hundreds of
/// milliseconds.
const SLOW_START: std::time::Duration = std::time::Duration::from_millis(100);

/// Where the flood program sits in that image.
const FLOOD_IN_IMAGE: &str = "/usr/local/bin/sandbox-bench-flood";

/// Where the host's curl sits in that image (the egress download row).
const CURL_IN_IMAGE: &str = "/usr/bin/curl";

/// The uid that owns the image backends' workspace when the bench runs as root (see
/// [`Host`]).
const NOBODY: u32 = 65534;

/// What the host side of the bench sets up once: a workspace every process backend may
/// use, with a copy of this binary in it (the flood program: the workspace is the one
/// place every backend lets a command read and run); a workspace for the backends that
/// run an image; scratch space for the files their own tools' command lines need.
///
/// A backend that runs an image gets its own workspace, owned by an ordinary uid when the
/// bench runs as root: the backend then bind-mounts it as it is and runs the command as
/// its owner, exactly what its engine's command line with the same flags does. A
/// root-owned workspace would instead go through the backend's idmapped staging, which
/// that command line has no equivalent of.
#[derive(Debug)]
pub struct Host {
    workspace: TempDir,
    image_workspace: TempDir,
    scratch: TempDir,
    flood: PathBuf,
    /// `/bin/true`, resolved once.
    pub true_program: PathBuf,
    /// What the backends' host probes found (the bench builds its process backends with
    /// it): handed to the launcher baseline, which then probes nothing, as `sandbox run`
    /// probes nothing with its cache.
    facts: Arc<BenchFacts>,
}

/// The bench's [`FactStore`]: what the backends recorded, in memory, written out for the
/// launcher baseline.
#[derive(Debug, Default)]
pub struct BenchFacts(Mutex<BTreeMap<String, (String, Facts)>>);

impl FactStore for BenchFacts {
    fn load(&self, backend: &str, key: &str) -> Option<Facts> {
        let m = self.0.lock().ok()?;
        m.get(backend)
            .filter(|(k, _)| k == key)
            .map(|(_, f)| f.clone())
    }
    fn save(&self, backend: &str, key: &str, facts: &Facts) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(backend.to_string(), (key.to_string(), facts.clone()));
        }
    }
    fn forget(&self, backend: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(backend);
        }
    }
}

impl Host {
    /// Make the workspaces (under `TMPDIR`) and copy this binary into the first.
    pub fn new() -> std::io::Result<Self> {
        let dir = |prefix: &str| {
            let d = tempfile::Builder::new().prefix(prefix).tempdir()?;
            // Readable by whatever uid a backend runs the command as.
            fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755))?;
            Ok::<_, std::io::Error>(d)
        };
        let workspace = dir("sandbox-bench-")?;
        let image_workspace = dir("sandbox-bench-image-")?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(image_workspace.path(), Some(NOBODY), Some(NOBODY))?;
        }
        let flood = workspace.path().join("sandbox-bench-flood");
        fs::copy(std::env::current_exe()?, &flood)?;
        fs::set_permissions(&flood, fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            workspace,
            image_workspace,
            scratch: dir("sandbox-bench-scratch-")?,
            flood,
            true_program: Path::new("/bin/true").canonicalize()?,
            facts: Arc::default(),
        })
    }

    /// The configuration the process backends are built with: the bench's fact store.
    pub fn config(&self) -> Config {
        Config::default().with_facts(self.facts.clone())
    }

    /// Write what the backends recorded to a file for the launcher baseline; its path.
    pub fn write_facts(&self) -> std::io::Result<PathBuf> {
        let m = self
            .facts
            .0
            .lock()
            .map_err(|_| std::io::Error::other("the fact store's lock is poisoned"))?;
        let json: serde_json::Map<String, serde_json::Value> = m
            .iter()
            .map(|(b, (key, facts))| (b.clone(), serde_json::json!({"key": key, "facts": facts})))
            .collect();
        let path = self.scratch.path().join("facts.json");
        fs::write(&path, serde_json::Value::Object(json).to_string())?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        Ok(path)
    }

    /// The workspace of the process backends.
    pub fn workspace(&self) -> &Path {
        self.workspace.path()
    }

    /// The flood program on the host.
    pub fn flood(&self) -> &Path {
        &self.flood
    }
}

/// Builds a new value of a backend.
pub type FreshFn = dyn Fn() -> Result<Arc<dyn Backend>, String> + Send + Sync;

/// A constructor of new backend values.
#[derive(Clone)]
pub struct Fresh(pub Arc<FreshFn>);

impl std::fmt::Debug for Fresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fresh")
    }
}

/// The "same thing without us" for a backend's start-up.
pub enum Direct {
    /// The launch the backend prepares, spawned as is (a wrapped tool with the identical
    /// argv).
    Launch {
        /// What the baseline is called in the table.
        label: String,
        /// Builds the launch.
        prepare: Arc<PrepareFn>,
    },
    /// The backend's own tool starting the same thing (its registry entry's
    /// [`ImageSupport::direct`]).
    Command(DirectRun),
}

impl Direct {
    /// What the baseline is called in the table.
    pub fn label(&self) -> &str {
        match self {
            Self::Launch { label, .. } | Self::Command(DirectRun { label, .. }) => label,
        }
    }
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("label", &self.label())
            .finish()
    }
}

/// The launch `launcher` prepares, spawned without the library: for a backend that wraps
/// a tool (bwrap) that is the tool run directly with the identical argv; for the others
/// it splits the library's own cost (plan, cgroup, supervisor) from the backend's.
fn own_launch(launcher: Arc<dyn Launcher>) -> Direct {
    let prepare = move |opts: &SandboxOpts| {
        let plan = Plan::new(opts, launcher.name(), &launcher.capability())?;
        launcher.prepare(&plan, None)
    };
    Direct::Launch {
        label: "its own launch (program, argv, environment, descriptors, steps between fork \
                and exec) spawned without the library"
            .into(),
        prepare: Arc::new(prepare),
    }
}

/// What differs per backend before the common checks.
struct Parts {
    name: &'static str,
    backend: Arc<dyn Backend>,
    direct: Option<Direct>,
    true_program: OsString,
    flood_program: OsString,
    curl_program: Option<OsString>,
    workspace: PathBuf,
    cli_args: Vec<OsString>,
    fresh: Option<Fresh>,
}

impl Parts {
    /// A process backend: host programs, the shared workspace, its own launch as a
    /// baseline.
    fn process(
        host: &Host,
        info: &BackendInfo,
        launcher: sandbox::registry::LauncherFn,
    ) -> Result<Self, String> {
        // The backend first: the probes it makes are what the bench's store records.
        let backend = info.build(&host.config()).map_err(|e| e.to_string())?;
        let launcher = sandbox_host::pipeline::unerase(&launcher(&host.config()))
            .ok_or_else(|| format!("`{}`'s launcher is not a process launcher", info.name))?;
        Ok(Self {
            name: info.name,
            direct: Some(own_launch(launcher)),
            backend,
            true_program: host.true_program.clone().into_os_string(),
            flood_program: host.flood().as_os_str().to_owned(),
            curl_program: which::which("curl").ok().map(PathBuf::into_os_string),
            workspace: host.workspace().to_path_buf(),
            cli_args: Vec::new(),
            fresh: None,
        })
    }

    /// A backend that runs an image, on [`image_tag`] built here from `/bin/true`, this
    /// binary and the host's curl (when it has one); the baseline of its own tool where
    /// its registry entry has one.
    async fn image(
        host: &Host,
        info: &'static BackendInfo,
        image: &ImageSupport,
        tooling: &sandbox::registry::Tooling,
    ) -> Result<Self, String> {
        let mut files = vec![
            (host.true_program.clone(), PathBuf::from("/bin/true")),
            (host.flood().to_path_buf(), PathBuf::from(FLOOD_IN_IMAGE)),
        ];
        let curl = which::which("curl").ok();
        files.extend(curl.clone().map(|c| (c, PathBuf::from(CURL_IN_IMAGE))));
        let tag = image_tag();
        (image.build_from_binaries)(tag.clone(), files)
            .await
            .map_err(|e| format!("building the image {tag}: {e}"))?;
        let backend = info
            .build(&Config::with_image(&tag))
            .map_err(|e| e.to_string())?;
        let direct = match tooling.direct {
            Some(make) => make(&tag, host.scratch.path())
                .map_err(|e| e.to_string())?
                .map(Direct::Command),
            None => None,
        };
        Ok(Self {
            name: info.name,
            backend,
            direct,
            true_program: "/bin/true".into(),
            flood_program: FLOOD_IN_IMAGE.into(),
            curl_program: curl.map(|_| CURL_IN_IMAGE.into()),
            workspace: host.image_workspace.path().to_path_buf(),
            cli_args: vec!["--image".into(), tag.clone().into()],
            fresh: Some(Fresh(Arc::new(move || {
                info.build(&Config::with_image(&tag))
                    .map_err(|e| e.to_string())
            }))),
        })
    }
}

/// A backend ready to measure.
#[derive(Debug)]
pub struct Subject {
    /// Its name.
    pub name: &'static str,
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// The strictest lane that runs the bench's requests on it.
    pub lane: Lane,
    /// `true` as the command sees it.
    pub true_program: OsString,
    /// The flood program as the command sees it.
    pub flood_program: OsString,
    /// curl as the command sees it, where it has one (the egress download row).
    pub curl_program: Option<OsString>,
    /// The workspace.
    pub workspace: PathBuf,
    /// Its start-up baseline beyond a bare spawn, if it has one.
    pub direct: Option<Direct>,
    /// Extra flags for `sandbox run` (`--image` for a backend that runs one).
    pub cli_args: Vec<OsString>,
    /// One run costs hundreds of milliseconds (a container): fewer runs.
    pub slow: bool,
    /// For a backend that runs an image (and may keep state across the runs of one value:
    /// an engine connection, a warm pool): a new value, to measure a first command.
    pub fresh: Option<Fresh>,
    /// How long its first preflight took (one-time host surveys included).
    pub preflight_time: std::time::Duration,
    /// What start-up its crate promises (its registry entry).
    pub cost: sandbox::registry::CostTargets,
}

impl Subject {
    /// Open backend `name`: build it, run its preflight and pick its lane. `Err` is the
    /// reason it cannot be measured here.
    pub async fn open(name: &str, host: &Host) -> Result<Self, String> {
        let info = sandbox::select::info(name).map_err(|e| e.to_string())?;
        let tooling = sandbox::registry::tooling(name)
            .ok_or_else(|| format!("`{name}` has no tooling entry in this build"))?;
        let parts = match (&info.image, tooling.launcher) {
            (Some(image), _) => Parts::image(host, info, image, tooling).await?,
            (None, Some(launcher)) => Parts::process(host, info, launcher)?,
            (None, None) => {
                return Err(format!(
                    "`{name}` neither runs a host process nor an image: the bench cannot \
                     measure it"
                ))
            }
        };
        let mut subject = Self {
            name: parts.name,
            backend: parts.backend,
            lane: Lane::Strict,
            true_program: parts.true_program,
            flood_program: parts.flood_program,
            curl_program: parts.curl_program,
            workspace: parts.workspace,
            direct: parts.direct,
            cli_args: parts.cli_args,
            slow: false,
            fresh: parts.fresh,
            preflight_time: std::time::Duration::ZERO,
            cost: tooling.cost,
        };
        let started = std::time::Instant::now();
        subject
            .backend
            .sandbox()
            .preflight()
            .await
            .map_err(|e| e.to_string())?;
        subject.preflight_time = started.elapsed();
        // A preflight runs a trivial command the real way: one that costs this much means
        // every run does (a container), and the subject gets fewer rounds.
        subject.slow = subject.preflight_time >= SLOW_START;
        subject.lane = subject.pick_lane()?;
        Ok(subject)
    }

    /// Whether `lane` accepts the bench's requests on this backend.
    pub fn accepts(&self, lane: Lane) -> bool {
        let mut opts = self.opts(vec![self.true_program.clone()]);
        opts.lane = lane;
        Plan::new(&opts, self.name, &self.backend.capability()).is_ok()
    }

    /// The strictest lane whose checks pass for the bench's requests, decided by the
    /// library's own validation (never by the backend's name).
    fn pick_lane(&self) -> Result<Lane, String> {
        let mut last = String::new();
        for lane in Lane::ALL {
            let mut opts = self.opts(vec![self.true_program.clone()]);
            opts.lane = lane;
            match Plan::new(&opts, self.name, &self.backend.capability()) {
                Ok(_) => return Ok(lane),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!("no lane accepts it here: {last}"))
    }

    /// Options for `argv` in the workspace on the subject's lane; everything else the
    /// library's defaults (network none, default output cap and process cap).
    pub fn opts(&self, argv: Vec<OsString>) -> SandboxOpts {
        let mut opts = SandboxOpts::new(&self.workspace, argv);
        opts.lane = self.lane;
        opts
    }
}
