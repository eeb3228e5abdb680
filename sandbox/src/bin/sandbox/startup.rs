//! Start-up without a preflight per invocation.
//!
//! A preflight runs a sandboxed `true`: as much as the command itself costs, and on a root
//! host more. `sandbox run` is called once per command, so it does not pay that each time:
//!
//! - A named backend is constructed, its lane checked against the request ([`Plan::new`],
//!   as `run` does again), and the command launched.
//! - For `auto`, what `auto` picked for a lane and request shape is kept on disk
//!   ([`AutoCache`]), under a key of the host facts whether a backend works depends on
//!   (kernel release, uid, this program's identity, each compiled-in backend's
//!   [`host_key`](sandbox::registry::BackendInfo::host_key)). An entry only saves the
//!   preflights of the walk: the lane check still runs on every call, so a stale entry can
//!   at worst name a backend whose launch fails. Nothing that decides what is readable is
//!   kept.
//! - What each backend learned by probing the host (can namespaces be made, and how; which
//!   options the installed bwrap has; which bwrap set-ups worked) is kept on disk too
//!   ([`FactCache`], the store of `sandbox_host::facts`), so that the command starts no
//!   probe process of its own: only successes, each backend's under its own key (the
//!   kernel release, the ids, the user and mount namespace, the sysctls that govern
//!   namespaces, the landlock ABI, the bwrap binary's identity) and the file under this
//!   program's identity. A recorded answer chooses how the run makes its confinement,
//!   never whether: the run still makes the namespaces, and one whose namespaces cannot
//!   be made fails before its command starts.
//! - A launch that fails before the command runs is diagnosed after the fact
//!   ([`diagnose`]): the backend's preflight runs then (probing the host afresh, whatever
//!   was recorded), and its cause and remedy are the error; the `auto` entry and the
//!   backend's recorded facts that led there are dropped.
//!
//! `SANDBOX_DEBUG_STARTUP=1` prints each decision on stderr (how the tests see that the
//! cache was used, without timing).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use sandbox::select::{self, Choice, Config, AUTO};
use sandbox::{Backend, Capability, Plan, SandboxError, SandboxOpts};
use sandbox_core::registry::{FactStore, Facts, SharedFactStore};

/// The environment variable that prints the start-up decisions on stderr.
pub const DEBUG_VAR: &str = "SANDBOX_DEBUG_STARTUP";

/// The cache file's name in the cache directory; the version is the format's.
const FILE_NAME: &str = "auto-v1.json";

/// The file of the backends' recorded host facts, next to it.
const FACTS_FILE_NAME: &str = "facts-v1.json";

fn debug(msg: impl AsRef<str>) {
    if std::env::var_os(DEBUG_VAR).is_some_and(|v| v == "1") {
        eprintln!("sandbox: startup: {}", msg.as_ref());
    }
}

/// The backend to launch with, the cache entry that named it, if one did, and the store
/// its host facts came from.
#[derive(Clone, Debug)]
pub struct Chosen {
    pub backend: Arc<dyn Backend>,
    /// The lane check's plan for this backend, where start-up made one (what the run's
    /// warnings read, so the options are not resolved once more for them).
    pub plan: Option<Plan>,
    entry: Option<(AutoCache, String)>,
    facts: Option<SharedFactStore>,
}

/// `config` with this user's [`FactCache`] as its fact store: every backend the command
/// builds takes its probes' answers from there and keeps them there.
pub fn with_fact_cache(config: Config) -> Config {
    config.with_facts(Arc::new(FactCache::here()))
}

/// Construct the backend for `opts`: by name, or `auto` through the cache. No preflight
/// runs unless `auto` has no usable entry (then [`select::select`] runs them, and the
/// choice is kept).
///
/// Errors: bad options first ([`SandboxError::InvalidConfig`]), then what selection
/// reports: a named backend that does not enforce the request on its lane, `auto` with
/// nothing that qualifies.
pub async fn choose(
    choice: &Choice,
    opts: &SandboxOpts,
    config: &Config,
) -> Result<Chosen, SandboxError> {
    // The options before any backend, as `select` does: a capability that claims nothing
    // checks every field.
    if let Err(e @ SandboxError::InvalidConfig { .. }) =
        Plan::new(opts, AUTO, &Capability::default())
    {
        return Err(e);
    }
    match choice {
        Choice::Named(name) => {
            let backend = select::backend(name, config)?;
            let plan = match Plan::new(opts, backend.name(), &backend.capability()) {
                Ok(plan) => plan,
                Err(e) => {
                    // As in `select`: a requirement no lane waives is more often than not
                    // missing because of the host, which the preflight names.
                    if matches!(e, SandboxError::NotSupported { .. }) {
                        backend.sandbox().preflight().await?;
                    }
                    return Err(e);
                }
            };
            debug(format!(
                "backend `{name}` named: launching without a preflight"
            ));
            Ok(Chosen {
                backend,
                plan: Some(plan),
                entry: None,
                facts: config.facts.clone(),
            })
        }
        Choice::Auto { allow_none } => {
            let cache = AutoCache::here();
            let shape = shape(opts, config, *allow_none);
            if let Some(name) = cache.get(&shape) {
                match from_entry(&name, opts, config, *allow_none) {
                    Ok((backend, plan)) => {
                        debug(format!("auto: `{name}` from the cache, no preflight"));
                        return Ok(Chosen {
                            backend,
                            plan: Some(plan),
                            entry: Some((cache, shape)),
                            facts: config.facts.clone(),
                        });
                    }
                    Err(e @ SandboxError::InvalidConfig { .. }) => return Err(e),
                    Err(e) => debug(format!(
                        "auto: the cached `{name}` does not fit ({e}); selecting again"
                    )),
                }
            }
            let selected = select::select(choice, opts, config).await?;
            let name = selected.backend.name();
            cache.put(&shape, name);
            debug(format!("auto: selected `{name}` with preflights; cached"));
            Ok(Chosen {
                backend: selected.backend,
                plan: None,
                entry: Some((cache, shape)),
                facts: config.facts.clone(),
            })
        }
    }
}

/// The backend a cache entry names, if `auto` could pick it for this request: one of the
/// candidates on this lane, constructed, and enforcing the request on its lane (the plan
/// that says so).
fn from_entry(
    name: &str,
    opts: &SandboxOpts,
    config: &Config,
    allow_none: bool,
) -> Result<(Arc<dyn Backend>, Plan), SandboxError> {
    let info = select::candidates(opts.lane, config, allow_none)
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| SandboxError::invalid_entry(name))?;
    let backend = info.build(config)?;
    let plan = Plan::new(opts, backend.name(), &backend.capability())?;
    Ok((backend, plan))
}

/// An error of a launch, after the fact: a failure that is the request's (bad options, a
/// refusal) as it is; any other is the backend's preflight's cause and remedy when the
/// preflight fails too. The cache entry that chose the backend and the backend's recorded
/// host facts are dropped either way.
pub async fn diagnose(chosen: &Chosen, e: SandboxError) -> SandboxError {
    // The host's temp dir says what is wrong itself; a preflight would only fail on it
    // too, naming its own directory instead of the run's.
    if matches!(
        e,
        SandboxError::InvalidConfig { .. }
            | SandboxError::PolicyRefused { .. }
            | SandboxError::TempDir { .. }
    ) {
        return e;
    }
    if let Some((cache, shape)) = &chosen.entry {
        cache.forget(shape);
    }
    if let Some(store) = &chosen.facts {
        store.0.forget(chosen.backend.name());
    }
    debug(format!(
        "the launch with `{}` failed ({e}); running its preflight",
        chosen.backend.name()
    ));
    match chosen.backend.sandbox().preflight().await {
        Err(p) => p,
        Ok(_) => e,
    }
}

/// What decides `auto`'s choice besides the host: the lane and everything the lane check
/// reads from the options. The named paths are in it whole: a backend may refuse a grant
/// by the filesystem it is on, and then `auto` takes another for those paths only.
fn shape(opts: &SandboxOpts, config: &Config, allow_none: bool) -> String {
    format!(
        "lane={} network={:?} read={:?} write={:?} snapshot={} changes={:?} limits={:?} \
         image={} none={}",
        opts.lane,
        opts.network,
        opts.read_only_paths,
        opts.writable_paths,
        opts.snapshot,
        opts.changes,
        opts.limits,
        config.image.is_some(),
        allow_none,
    )
}

/// What `auto` picked, on disk, for one user. The file is the user's own and readable by
/// no one else; one that is not (or does not parse, or was written for another host key)
/// is ignored and replaced.
#[derive(Clone, Debug)]
pub struct AutoCache {
    /// The file, or `None` where there is no cache directory.
    path: Option<PathBuf>,
    /// The host key the entries are valid for.
    host: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    host: String,
    /// Request shape to backend name.
    entries: BTreeMap<String, String>,
}

impl AutoCache {
    /// The cache of this user on this host.
    pub fn here() -> Self {
        Self {
            path: cache_dir().map(|d| d.join(FILE_NAME)),
            host: host_key(),
        }
    }

    fn get(&self, shape: &str) -> Option<String> {
        let file = self.load()?;
        let found = file.entries.get(shape).cloned();
        if found.is_none() {
            debug("auto: no cache entry for this request");
        }
        found
    }

    fn put(&self, shape: &str, backend: &str) {
        let mut file = self.load().unwrap_or_else(|| CacheFile {
            host: self.host.clone(),
            entries: BTreeMap::new(),
        });
        file.entries.insert(shape.to_string(), backend.to_string());
        self.store(&file);
    }

    fn forget(&self, shape: &str) {
        if let Some(mut file) = self.load() {
            if file.entries.remove(shape).is_some() {
                self.store(&file);
                debug("auto: cache entry dropped");
            }
        }
    }

    /// The file's entries, if it is ours, private, and for this host.
    fn load(&self) -> Option<CacheFile> {
        let file: CacheFile = load_private(self.path.as_deref()?, "auto")?;
        if file.host != self.host {
            debug("auto: the cache file is for another host key; ignored");
            return None;
        }
        Some(file)
    }

    /// Write `file` whole, by rename, so a reader never sees half of it. Failing to write
    /// only costs the next run its preflights.
    fn store(&self, file: &CacheFile) {
        let Some(path) = self.path.as_deref() else {
            return;
        };
        if let Err(e) = write_private(path, file) {
            debug(format!("auto: could not write {}: {e}", path.display()));
        }
    }
}

/// The JSON file at `path` if it is this user's own private regular file, reached without
/// a symbolic link, and parses; else `None`, said on the debug lines under `what`.
fn load_private<T: DeserializeOwned>(path: &Path, what: &str) -> Option<T> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(_) => {
            debug(format!("{what}: no cache file"));
            return None;
        }
    };
    // Never through a symbolic link: the name must be the very file opened.
    let meta = f.metadata().ok()?;
    let named = fs::symlink_metadata(path).ok()?;
    let same =
        named.file_type().is_file() && (named.dev(), named.ino()) == (meta.dev(), meta.ino());
    if !same || meta.uid() != euid()? || meta.mode() & 0o077 != 0 {
        debug(format!(
            "{what}: the cache file is not this user's own private file; ignored"
        ));
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    match serde_json::from_str::<T>(&text) {
        Ok(v) => Some(v),
        Err(_) => {
            debug(format!("{what}: the cache file does not parse; ignored"));
            None
        }
    }
}

/// Write `value` to `path` whole, as a file of mode 0600 in a directory of mode 0700, by
/// rename, so a reader never sees half of it.
fn write_private<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent"))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    let name = path
        .file_name()
        .map_or_else(|| "cache".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let result = (|| {
        let mut f: File = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// [`sandbox::state_dir`] (`$XDG_CACHE_HOME/sandbox`, else `~/.cache/sandbox`), made now
/// (mode 0700) if it is not there: a plan carves it out read-only from a grant that holds
/// it only if it exists, and a command granted `~/.cache` must not be the one to make it.
fn cache_dir() -> Option<PathBuf> {
    let dir = sandbox::state_dir()?;
    let _ = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    Some(dir)
}

/// The effective uid, from `/proc/self/status`.
fn euid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// This program's identity (path, size, modification and change times, inode).
fn this_program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| {
            let m = fs::metadata(&p).ok()?;
            Some(format!(
                "{} {} {}.{:09} {}.{:09} {}",
                p.display(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
                m.ino()
            ))
        })
        .unwrap_or_default()
}

/// The host facts an entry is valid for: the kernel release, the uid, this program, and
/// each compiled-in backend's own key.
fn host_key() -> String {
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mut key = format!(
        "kernel {kernel}; uid {}; sandbox {}",
        euid().map_or_else(|| "?".to_string(), |u| u.to_string()),
        this_program()
    );
    for info in sandbox::registry::compiled_in() {
        key.push_str(&format!("; {} [{}]", info.name, info.host_key.read()));
    }
    key
}

/// The backends' recorded host facts, on disk, for one user (the store of
/// `sandbox_host::facts`): read once, on the first backend's question; written whole by
/// rename on every change. The file discipline is the `auto` cache's: the user's own
/// private file, anything else ignored and replaced. Facts written by another build of
/// this program are not taken (it may read them differently).
#[derive(Debug)]
pub struct FactCache {
    /// The file, or `None` where there is no cache directory.
    path: Option<PathBuf>,
    /// This program's identity, which the file must name.
    program: String,
    /// The file as read (once) and changed since.
    file: Mutex<Option<FactFile>>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct FactFile {
    program: String,
    /// Backend name to its key and facts.
    backends: BTreeMap<String, KeyedFacts>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct KeyedFacts {
    key: String,
    facts: Facts,
}

impl FactCache {
    /// The record of this user on this host.
    pub fn here() -> Self {
        Self {
            path: cache_dir().map(|d| d.join(FACTS_FILE_NAME)),
            program: this_program(),
            file: Mutex::new(None),
        }
    }

    /// Run `f` on the file's contents, read first if this is the first use.
    fn with_file<R>(&self, f: impl FnOnce(&mut FactFile) -> R) -> Option<R> {
        let mut guard = self.file.lock().ok()?;
        let file = guard.get_or_insert_with(|| {
            let read = self
                .path
                .as_deref()
                .and_then(|p| load_private::<FactFile>(p, "facts"));
            match read {
                Some(file) if file.program == self.program => file,
                Some(_) => {
                    debug("facts: the file was written by another build of sandbox; ignored");
                    FactFile::default()
                }
                None => FactFile::default(),
            }
        });
        file.program.clone_from(&self.program);
        Some(f(file))
    }

    /// Write the file; failing to only costs the next run its probes.
    fn write(&self, file: &FactFile) {
        let Some(path) = self.path.as_deref() else {
            return;
        };
        if let Err(e) = write_private(path, file) {
            debug(format!("facts: could not write {}: {e}", path.display()));
        }
    }
}

impl FactStore for FactCache {
    fn load(&self, backend: &str, key: &str) -> Option<Facts> {
        let found = self
            .with_file(|file| file.backends.get(backend).cloned())
            .flatten();
        match found {
            Some(k) if k.key == key => {
                debug(format!(
                    "facts: `{backend}`: recorded facts taken, no probe ({})",
                    k.facts.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                Some(k.facts)
            }
            Some(_) => {
                debug(format!(
                    "facts: `{backend}`: recorded under another host key; probing again \
                     (key: {key})"
                ));
                None
            }
            None => {
                debug(format!(
                    "facts: `{backend}`: nothing recorded; probing (key: {key})"
                ));
                None
            }
        }
    }

    fn save(&self, backend: &str, key: &str, facts: &Facts) {
        let file = self.with_file(|file| {
            file.backends.insert(
                backend.to_string(),
                KeyedFacts {
                    key: key.to_string(),
                    facts: facts.clone(),
                },
            );
            file.clone()
        });
        if let Some(file) = file {
            self.write(&file);
            debug(format!(
                "facts: `{backend}`: recorded ({})",
                facts.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }

    fn forget(&self, backend: &str) {
        let file = self
            .with_file(|file| file.backends.remove(backend).map(|_| file.clone()))
            .flatten();
        if let Some(file) = file {
            self.write(&file);
            debug(format!("facts: `{backend}`: recorded facts dropped"));
        }
    }
}

trait InvalidEntry {
    fn invalid_entry(name: &str) -> Self;
}

impl InvalidEntry for SandboxError {
    /// A cache entry naming a backend `auto` would not try here: not an error of the
    /// request (selection runs again).
    fn invalid_entry(name: &str) -> Self {
        SandboxError::unavailable(
            "auto",
            format!("`{name}` is not a candidate for this request"),
            "none needed: auto selects again",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_tells_lanes_and_networks_apart() {
        let mut a = SandboxOpts::new("/tmp", ["true"]);
        let c = Config::default();
        let s1 = shape(&a, &c, false);
        a.network = sandbox::NetworkMode::Full;
        assert_ne!(s1, shape(&a, &c, false));
        let s2 = shape(&a, &c, false);
        a.read_only_paths.push("/srv/data".into());
        assert_ne!(s2, shape(&a, &c, false));
        assert_ne!(shape(&a, &c, false), shape(&a, &c, true));
    }

    #[test]
    fn the_host_key_names_the_kernel_the_uid_and_every_backend() {
        let k = host_key();
        assert!(k.contains(&format!("uid {}", euid().unwrap())), "{k}");
        for info in sandbox::registry::compiled_in() {
            assert!(k.contains(&format!("; {} [", info.name)), "{k}");
        }
    }
}
