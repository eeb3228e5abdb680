//! The backends under measurement: how each is built, which lane it runs on, what its
//! programs are called where it runs, and the baseline that is "the same thing without
//! us" for it.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_core::process::Launcher;
use sandbox_core::{Backend, Lane, Plan, SandboxOpts};
use tempfile::TempDir;

use crate::runs::PrepareFn;

/// The backends measured when none is named, in table order.
pub const ALL: [&str; 4] = ["none", "bwrap", "landlock", "docker"];

/// What the host side of the bench sets up once: a workspace every sandbox may use, and a
/// copy of this binary in it (the flood program: the workspace is the one place every
/// backend lets a command read and run).
#[derive(Debug)]
pub struct Host {
    workspace: TempDir,
    flood: PathBuf,
    /// `/bin/true`, resolved once.
    pub true_program: PathBuf,
}

impl Host {
    /// Make the workspace (under `TMPDIR`) and copy this binary into it.
    pub fn new() -> std::io::Result<Self> {
        let workspace = tempfile::Builder::new()
            .prefix("sandbox-bench-")
            .tempdir()?;
        // Readable by whatever uid a backend runs the command as.
        fs::set_permissions(workspace.path(), fs::Permissions::from_mode(0o755))?;
        let flood = workspace.path().join("sandbox-bench-flood");
        fs::copy(std::env::current_exe()?, &flood)?;
        fs::set_permissions(&flood, fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            workspace,
            flood,
            true_program: Path::new("/bin/true").canonicalize()?,
        })
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        self.workspace.path()
    }

    /// The flood program on the host.
    pub fn flood(&self) -> &Path {
        &self.flood
    }
}

/// The "same thing without us" for a backend's start-up.
pub enum Direct {
    /// The launch the backend prepares, spawned as is (bwrap with the identical argv).
    Launch {
        /// What the baseline is called in the table.
        label: String,
        /// Builds the launch.
        prepare: Arc<PrepareFn>,
    },
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Launch { label, .. } => f.debug_struct("Launch").field("label", label).finish(),
        }
    }
}

/// The launch `launcher` prepares, spawned without the library: for bwrap that is bwrap
/// run directly with the identical argv; for the others it splits the library's own cost
/// (plan, cgroup, supervisor) from the backend's.
fn own_launch<L: Launcher + Clone>(launcher: &L, label: &str) -> Direct {
    let l = launcher.clone();
    let prepare = move |opts: &SandboxOpts| {
        let plan = Plan::new(opts, l.name(), &Launcher::capability(&l))?;
        l.prepare(&plan)
    };
    Direct::Launch {
        label: label.to_string(),
        prepare: Arc::new(prepare),
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
    /// The workspace.
    pub workspace: PathBuf,
    /// Its start-up baseline beyond a bare spawn, if it has one.
    pub direct: Option<Direct>,
    /// Extra flags for `sandbox run` (`--image` for docker).
    pub cli_args: Vec<OsString>,
    /// One run costs hundreds of milliseconds (a container): fewer start-up runs.
    pub slow: bool,
}

impl Subject {
    /// Open backend `name`: build it, run its preflight and pick its lane. `Err` is the
    /// reason it cannot be measured here.
    pub async fn open(name: &str, host: &Host) -> Result<Self, String> {
        let (name, backend, direct): (&'static str, Arc<dyn Backend>, Option<Direct>) = match name {
            "none" => {
                let b = sandbox_none::NoneBackend::new();
                let direct = own_launch(&b, "its own launch spawned without the library");
                (sandbox_none::NAME, Arc::new(b), Some(direct))
            }
            "bwrap" => {
                let b = sandbox_bwrap::BwrapBackend::new();
                let direct = own_launch(
                    &b,
                    "bwrap run directly with the identical argv, environment and descriptors",
                );
                (sandbox_bwrap::NAME, Arc::new(b), Some(direct))
            }
            "landlock" => {
                let b = sandbox_landlock::LandlockBackend::new();
                let direct = own_launch(
                    &b,
                    "its own launch (rules applied between fork and exec) without the library",
                );
                (sandbox_landlock::NAME, Arc::new(b), Some(direct))
            }
            "docker" => {
                return Err(format!(
                    "the `{name}` backend is not wired into the bench yet"
                ))
            }
            other => {
                return Err(format!(
                    "unknown backend `{other}` (known: {})",
                    ALL.join(", ")
                ))
            }
        };
        let mut subject = Self {
            name,
            backend,
            lane: Lane::Strict,
            true_program: host.true_program.clone().into_os_string(),
            flood_program: host.flood().as_os_str().to_owned(),
            workspace: host.workspace().to_path_buf(),
            direct,
            cli_args: Vec::new(),
            slow: false,
        };
        subject
            .backend
            .sandbox()
            .preflight()
            .await
            .map_err(|e| e.to_string())?;
        subject.lane = subject.pick_lane()?;
        Ok(subject)
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
