//! What a backend crate tells the rest of the workspace about itself, as data.
//!
//! Each backend crate exports one [`BackendInfo`] (`pub const INFO`); the facade crate
//! (`sandbox`) collects them in one list behind its cargo features, and selection,
//! `doctor`, the command line, the conformance suite, xtask and the bench read that list.
//! Nothing else names a backend, and nothing branches on a name: where a backend differs
//! (it needs a container image, its `full` network is a bridge), that is a field here or
//! in its [`Capability`](crate::Capability).
//!
//! The entry is a plain `const` of `fn` pointers and strings so that a list of them is a
//! `static` built at compile time, with no registration at start-up.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::facts::SharedFactStore;
use crate::process::Launcher;
use crate::{Backend, Lane, SandboxError};

/// Settings only some backends use, given to every backend's constructor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendConfig {
    /// The container image, for a backend whose [`BackendInfo::image`] is set; an error
    /// with any other backend.
    pub image: Option<String>,
    /// Where the backend keeps what its host probes found, between processes (see
    /// [`crate::facts`]); `None`: only in this process's memory.
    pub facts: Option<SharedFactStore>,
}

impl BackendConfig {
    /// Settings with a container image.
    pub fn with_image(image: impl Into<String>) -> Self {
        Self {
            image: Some(image.into()),
            ..Self::default()
        }
    }

    /// These settings, with `store` keeping the backends' host facts.
    pub fn with_facts(self, store: Arc<dyn crate::facts::FactStore>) -> Self {
        Self {
            facts: Some(SharedFactStore(store)),
            ..self
        }
    }
}

/// Where `auto` puts a backend on each lane: lower ranks are tried first; `None` means
/// `auto` never tries it there (a caller can still name it).
///
/// Ranks of different crates are compared with each other, so they are spaced (10, 20,
/// 30) to leave room for a backend that belongs between two others. The order they give
/// is a policy written down in the facade's `select` docs, not derived from capabilities:
/// a capability says what a backend can enforce, not what it costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoRank {
    /// On the `strict` lane.
    pub strict: Option<u8>,
    /// On the `fast` lane.
    pub fast: Option<u8>,
    /// On the `trusted` lane.
    pub trusted: Option<u8>,
}

impl AutoRank {
    /// Never picked by `auto`.
    pub const NEVER: Self = Self {
        strict: None,
        fast: None,
        trusted: None,
    };

    /// The rank on `lane`.
    pub fn on(self, lane: Lane) -> Option<u8> {
        match lane {
            Lane::Strict => self.strict,
            Lane::Fast => self.fast,
            Lane::Trusted => self.trusted,
        }
    }
}

/// What start-up a backend promises, as ratios that `cargo xtask bench` measures in one
/// run and marks met or missed. `None`: no promise against that baseline.
///
/// Data of the backend rather than of the bench, because each is a statement about what
/// the backend is for: one meant to cost next to nothing promises to stay near a bare
/// spawn; one that wraps a tool, near that tool run directly; one with a warm pool, far
/// below its engine's own client.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CostTargets {
    /// Start-up (`run` + `wait` of `/bin/true`) at most this many times a bare
    /// `tokio::process` spawn of the same program.
    pub startup_vs_bare_spawn: Option<f64>,
    /// Repeated start-ups at most this many times the backend's own tool run directly
    /// with the same confinement (its own launch spawned without the library, or the
    /// engine's command line for the same container).
    pub startup_vs_direct: Option<f64>,
    /// The first command of a new backend value (nothing warm yet) at most this many
    /// times the same direct baseline.
    pub first_vs_direct: Option<f64>,
}

impl CostTargets {
    /// No promise.
    pub const NONE: Self = Self {
        startup_vs_bare_spawn: None,
        startup_vs_direct: None,
        first_vs_direct: None,
    };
}

/// Builds a backend's launcher with the given settings ([`BackendInfo::launcher`]).
pub type LauncherFn = fn(&BackendConfig) -> Arc<dyn Launcher>;

/// A boxed future, as the `fn` pointers in [`BackendInfo`] return it.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Builds the image `tag` holding host files at paths inside it (`(host, inside)`
/// pairs), with the shared libraries they need, without a registry.
pub type BuildImageFn =
    fn(tag: String, files: Vec<(PathBuf, PathBuf)>) -> BoxFuture<Result<(), SandboxError>>;

/// How a backend that runs every command in a container image gets one.
#[derive(Clone, Copy)]
pub struct ImageSupport {
    /// Builds an image from host binaries: how the conformance suite puts its probe, and
    /// the bench its programs, where such a backend runs them.
    pub build_from_binaries: BuildImageFn,
}

impl fmt::Debug for ImageSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageSupport").finish_non_exhaustive()
    }
}

/// What a backend crate says about itself (its `pub const INFO`).
#[derive(Clone, Copy)]
pub struct BackendInfo {
    /// The name a caller selects it by (`--backend NAME`); equal to the cargo feature of
    /// the facade crate that brings it in.
    pub name: &'static str,
    /// One line for `--help` and completions: what confines the command.
    pub summary: &'static str,
    /// Where `auto` tries it on each lane.
    pub auto_rank: AutoRank,
    /// It confines nothing: `auto` takes it only as the last resort, and only when the
    /// caller allowed that (`Choice::Auto { allow_none: true }` in the facade).
    pub unconfined: bool,
    /// `Some` when every command runs in a container image the caller names
    /// ([`BackendConfig::image`]): the constructor refuses to build it without one, and
    /// an image named with `auto` selects only such backends.
    pub image: Option<ImageSupport>,
    /// Builds the backend. Errors: configuration it cannot use (a missing image) is
    /// [`SandboxError::InvalidConfig`]; a host problem found while constructing is
    /// [`SandboxError::Unavailable`]. The host is checked by the backend's preflight, not
    /// here.
    pub make: fn(&BackendConfig) -> Result<Arc<dyn Backend>, SandboxError>,
    /// For a backend that runs a host process: its launcher, built with the same settings
    /// as [`make`](Self::make) builds the backend, whose launch the bench spawns without
    /// the library (and applies in a process of its own) as a baseline.
    pub launcher: Option<LauncherFn>,
    /// The host facts whether this backend works here depends on, as one line (the
    /// identity of the host program it runs, a kernel ABI), cheap to read: no process is
    /// started. The command line keys its on-disk record of what `auto` picked on it, so
    /// that a changed host (a new bwrap, another landlock ABI) makes `auto` try again. It
    /// decides nothing that is enforced: what a run may do is still checked on every run.
    pub host_key: fn() -> String,
    /// What start-up it promises, for the bench.
    pub cost: CostTargets,
}

/// A [`BackendInfo::host_key`] for a backend that depends on no host program or kernel
/// feature beyond what every backend does.
pub fn no_host_key() -> String {
    String::new()
}

/// The identity of the program `name` as found on `PATH` (see [`file_identity`]), or
/// `missing` (for [`BackendInfo::host_key`]). Only metadata is read.
pub fn program_identity(name: &str) -> String {
    let Some(path) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    }) else {
        return format!("{name}: missing");
    };
    file_identity(&path)
}

/// The identity of the file at `path` (followed if a link): its path, size, modification
/// and change times, device and inode. The change time is the kernel's own (no call sets
/// it), so a file rewritten in place and given back its old modification time still
/// changes identity.
pub fn file_identity(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => format!(
            "{}: {} bytes, mtime {}.{:09}, ctime {}.{:09}, dev {} ino {}",
            path.display(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            m.dev(),
            m.ino()
        ),
        Err(e) => format!("{}: {e}", path.display()),
    }
}

impl BackendInfo {
    /// Whether it runs every command in a container image the caller names.
    pub fn needs_image(&self) -> bool {
        self.image.is_some()
    }

    /// Build it with `config`, refusing an image it would not use.
    pub fn build(&self, config: &BackendConfig) -> Result<Arc<dyn Backend>, SandboxError> {
        if config.image.is_some() && !self.needs_image() {
            return Err(SandboxError::invalid(
                "image",
                format!(
                    "names a container image, but the backend `{}` runs host programs, not \
                     an image; drop the image or choose a backend that runs one",
                    self.name
                ),
            ));
        }
        (self.make)(config)
    }
}

impl fmt::Debug for BackendInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendInfo")
            .field("name", &self.name)
            .field("summary", &self.summary)
            .field("auto_rank", &self.auto_rank)
            .field("unconfined", &self.unconfined)
            .field("image", &self.image)
            .field("launcher", &self.launcher.is_some())
            .finish_non_exhaustive()
    }
}
