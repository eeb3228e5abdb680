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

use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use std::collections::BTreeMap;

use crate::{Backend, Lane, SandboxError, SandboxOpts};

/// Settings only some backends use, given to every backend's constructor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendConfig {
    /// The container image, for a backend whose [`BackendInfo::image`] is set; an error
    /// with any other backend.
    pub image: Option<String>,
    /// Where the backend keeps what its host probes found, between processes (see
    /// the host crate's `facts`); `None`: only in this process's memory.
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
    pub fn with_facts(self, store: Arc<dyn FactStore>) -> Self {
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
///
/// The launcher is the host crate's `process::Launcher`, which this crate cannot name (the
/// contract does not depend on the machinery): it comes erased, and the bench, its one
/// reader, gets it back with `sandbox_host::pipeline::unerase`.
pub type LauncherFn = fn(&BackendConfig) -> Arc<dyn std::any::Any + Send + Sync>;

/// A boxed future, as the `fn` pointers in [`BackendInfo`] return it.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Builds the image `tag` holding host files at paths inside it (`(host, inside)`
/// pairs), without a registry. A host file is copied (read through links) with the shared
/// libraries it needs; a host directory is copied as the tree it is (directories, regular
/// files with their modes and times, links as links), with the libraries its ELF files
/// need: how an interpreter with its library tree (python) or a program with its helper
/// directory gets into an image built from the host.
pub type BuildImageFn =
    fn(tag: String, files: Vec<(PathBuf, PathBuf)>) -> BoxFuture<Result<(), SandboxError>>;

/// Builds the image `tag` from the host's system directories (see
/// [`ImageSupport::build_from_host`]).
pub type BuildFromHostFn = fn(tag: String) -> BoxFuture<Result<HostImage, SandboxError>>;

/// What an image built from the host holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostImage {
    /// The host paths it was made of, in the image at the same paths.
    pub roots: Vec<PathBuf>,
    /// Directories, files and links in it.
    pub entries: u64,
    /// File data, in bytes.
    pub bytes: u64,
    /// Files and directories left out because others may not read them (`/etc/shadow`,
    /// private keys).
    pub left_out: u64,
    /// An image with the same contents was already there under the tag, and was kept.
    pub unchanged: bool,
}

/// A tag for an image that a build tree makes for itself with a [`BuildImageFn`] (the
/// suite's, the bench's): `REPO:HASH`, the hash of `built_from` (a program of that tree, such
/// as the probe). Each tree (a worktree, a CI checkout) gets its own tag, so two trees on one
/// engine never replace each other's image in the middle of a run, while one tree's
/// unchanged image is kept from run to run.
pub fn local_image_tag(repo: &str, built_from: &std::path::Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    built_from.hash(&mut h);
    format!("{repo}:{:016x}", h.finish())
}

/// How a backend that runs every command in a container image gets one.
#[derive(Clone, Copy)]
pub struct ImageSupport {
    /// Builds an image from host files and trees: how the conformance suite puts its probe
    /// and tools (python with its library, git with its helpers), and the bench its
    /// programs, where such a backend runs them.
    pub build_from_binaries: BuildImageFn,
    /// Builds an image of the host's system directories, as the process backends show
    /// them, leaving out every file an unprivileged user could not read: what
    /// `sandbox image --from-host` makes, for a host with no registry.
    pub build_from_host: BuildFromHostFn,
    /// The backend's own tool run directly for the same request (the engine's command
    /// line starting the same container), which the bench measures start-up against; a
    /// process backend's is its [`BackendInfo::launcher`]'s launch instead. `None`: the
    /// bench compares it with a bare spawn only.
    pub direct: Option<DirectFn>,
}

/// Builds a [`DirectRun`] for the image `image`, with `scratch` for files the command line
/// needs (a seccomp profile); `Ok(None)` where the tool is not installed.
pub type DirectFn = fn(image: &str, scratch: &Path) -> Result<Option<DirectRun>, SandboxError>;

/// The arguments, after the program, that start what a run of the options would start.
pub type DirectArgsFn = dyn Fn(&SandboxOpts) -> Result<Vec<OsString>, SandboxError> + Send + Sync;

/// A backend's own tool, run directly: the bench spawns `program` with `args(opts)` as the
/// baseline of a run of `opts`.
#[derive(Clone)]
pub struct DirectRun {
    /// What the baseline is called in the bench's table.
    pub label: String,
    /// How it is made, for the table's notes: what makes it the same thing without us.
    pub note: &'static str,
    /// The tool.
    pub program: PathBuf,
    /// Its arguments for the given options.
    pub args: Arc<DirectArgsFn>,
}

impl fmt::Debug for DirectRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectRun")
            .field("label", &self.label)
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

/// What runs of a backend make on the host beyond what core makes and removes for every
/// backend (processes, cgroups, entries in the temp directory, mounts under it): engine
/// objects, which a crashed run leaves behind. Counted by the soak (nothing may grow) and
/// by the fault tests (a SIGKILLed host's are gone after the next start).
#[derive(Clone, Copy)]
pub struct HostObjects {
    /// What they are, as a report names them (`containers and volumes`).
    pub what: &'static str,
    /// Those made by the process `pid` of this machine (by the owner each carries, see
    /// [`crate::owner`]), one line each.
    pub made_by: fn(pid: u32) -> BoxFuture<Result<Vec<String>, SandboxError>>,
}

impl fmt::Debug for HostObjects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostObjects")
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

/// The host facts whether a backend works here depends on (see [`BackendInfo::host_key`]).
#[derive(Clone, Copy)]
pub enum HostKey {
    /// Nothing beyond what every backend depends on.
    Nothing,
    /// The host program it runs, found on `PATH`: its identity
    /// ([`program_identity`]).
    Program(&'static str),
    /// Another fact, read cheaply (a kernel ABI).
    Fact(fn() -> String),
}

impl HostKey {
    /// The facts, as one line.
    pub fn read(&self) -> String {
        match self {
            Self::Nothing => String::new(),
            Self::Program(name) => program_identity(name),
            Self::Fact(f) => f(),
        }
    }

    /// The host program, where the key is one.
    pub fn program(&self) -> Option<&'static str> {
        match self {
            Self::Program(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Nothing => f.write_str("Nothing"),
            Self::Program(p) => f.debug_tuple("Program").field(p).finish(),
            Self::Fact(_) => f.write_str("Fact(..)"),
        }
    }
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
    /// An ordinary user runs it without access that is root on the host by another name
    /// (an engine's socket is): so the test runs as an unprivileged uid
    /// (`cargo xtask conformance --as-user`, `SANDBOX_TEST_REQUIRE=unprivileged`) cover
    /// it, and a backend that says `false` is expected to be unavailable there.
    pub unprivileged: bool,
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
    /// The host facts whether this backend works here depends on (the identity of the
    /// host program it runs, a kernel ABI), cheap to read: no process is started. The
    /// command line keys its on-disk record of what `auto` picked on it, so that a changed
    /// host (a new bwrap, another landlock ABI) makes `auto` try again. It decides nothing
    /// that is enforced: what a run may do is still checked on every run.
    pub host_key: HostKey,
    /// What its runs can leave on the host beyond what core cleans up for every backend;
    /// `None`: nothing.
    pub leaves: Option<HostObjects>,
    /// The Debian packages that provide what it needs on the host (`apt-get install`):
    /// what `scripts/test-all` and CI install before requiring it.
    pub host_packages: &'static [&'static str],
    /// What start-up it promises, for the bench.
    pub cost: CostTargets,
}

/// The first file called `name` in a directory of `PATH`.
pub fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// The identity of the program `name` as found on `PATH` (see [`file_identity`]), or
/// `missing` (for [`HostKey::Program`]). Only metadata is read.
pub fn program_identity(name: &str) -> String {
    let Some(path) = find_program(name) else {
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
            .field("unprivileged", &self.unprivileged)
            .field("image", &self.image)
            .field("launcher", &self.launcher.is_some())
            .field("host_key", &self.host_key)
            .field("leaves", &self.leaves)
            .field("host_packages", &self.host_packages)
            .finish_non_exhaustive()
    }
}

/// One backend's facts: a name (`namespaces`, `features`) to a value the backend parses.
pub type Facts = BTreeMap<String, String>;

/// Where a caller keeps the backends' facts between processes (see the module docs). An
/// implementation need not be durable: a lost write costs the next process its probes.
pub trait FactStore: Send + Sync + fmt::Debug {
    /// The facts `backend` recorded under exactly `key`, if any.
    fn load(&self, backend: &str, key: &str) -> Option<Facts>;
    /// Keep `facts` as all of `backend`'s facts, under `key` (replacing what it had).
    fn save(&self, backend: &str, key: &str, facts: &Facts);
    /// Drop what `backend` recorded (a launch that used it failed).
    fn forget(&self, backend: &str);
}

/// A [`FactStore`] shared by every backend a caller builds; equal when it is the same
/// store (so [`BackendConfig`] stays comparable).
#[derive(Clone)]
pub struct SharedFactStore(pub Arc<dyn FactStore>);

impl fmt::Debug for SharedFactStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for SharedFactStore {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedFactStore {}
