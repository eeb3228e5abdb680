//! The connection to the engine.
//!
//! A backend value keeps one client for its runs ([`Connection`]), but the HTTP client's
//! pooled connections belong to the tokio runtime that opened them, and a backend is
//! routinely shared by tests that each run their own runtime: so the client is reused
//! only while [`RuntimeTag`] says its runtime can still drive it.

use bollard::Docker;

use crate::error::{DockerError, Reach};

/// The oldest engine API this backend speaks: `wait?condition=not-running` came in 1.30;
/// everything else we use (mounts, init, pids limit, NanoCPUs) is older.
pub(crate) const MIN_API: (usize, usize) = (1, 30);

/// Connect to the engine named by `DOCKER_HOST` (the local socket by default) and agree
/// on an API version: the client library defaults to a newer API than Debian's engine
/// speaks, and an engine refuses requests that name a version it does not know.
pub async fn connect() -> Result<DockerEngine, sandbox_core::SandboxError> {
    Ok(DockerEngine(connect_inner().await?))
}

/// A connection to the container engine, for the crate's free functions (leftovers,
/// images). Opaque: which client library speaks to the engine is this crate's own business,
/// so a new version of it is no breaking change for callers.
#[derive(Clone, Debug)]
pub struct DockerEngine(pub(crate) Docker);

pub(crate) async fn connect_inner() -> Result<Docker, DockerError> {
    let docker = Docker::connect_with_defaults().map_err(|e| match e {
        bollard::errors::Error::UnsupportedURISchemeError { uri } => DockerError::Unreachable {
            host: uri.clone(),
            cause: Reach::Scheme,
            detail: format!("unsupported DOCKER_HOST scheme in `{uri}`"),
        },
        other => DockerError::engine("connect", other),
    })?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| DockerError::engine("negotiate the API version", e))?;
    let v = docker.client_version();
    if (v.major_version, v.minor_version) < MIN_API {
        return Err(DockerError::ApiTooOld {
            found: format!("{}.{}", v.major_version, v.minor_version),
            needed: "1.30",
        });
    }
    Ok(docker)
}

/// The tokio runtime a connection (or an attached stream) was made on, as far as it can be
/// told without `tokio_unstable`: its I/O is driven by that runtime's reactor, so it may
/// be used from another task only while that runtime is alive, and, for a current-thread
/// runtime, only from the thread that drives it.
#[derive(Debug)]
pub(crate) struct RuntimeTag {
    alive: std::sync::Weak<()>,
    thread: Option<std::thread::ThreadId>,
    /// Ends the sentinel task when the tag goes.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl RuntimeTag {
    /// The runtime of the calling task. A sentinel task holds a token that dies with the
    /// runtime (a runtime drops its tasks when it shuts down).
    pub(crate) fn here() -> Self {
        let token = std::sync::Arc::new(());
        let alive = std::sync::Arc::downgrade(&token);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _token = token;
            let _ = stopped.await;
        });
        let current_thread = tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread;
        Self {
            alive,
            thread: current_thread.then(|| std::thread::current().id()),
            _stop: stop,
        }
    }

    /// Whether what was made under this tag may be used from the calling task.
    pub(crate) fn usable(&self) -> bool {
        self.alive.strong_count() > 0
            && self.thread.is_none_or(|t| t == std::thread::current().id())
    }
}

/// One engine connection per backend value, reused across its runs while the runtime it
/// was made on can drive it; otherwise a new one.
#[derive(Debug, Default)]
pub(crate) struct Connection {
    current: std::sync::Mutex<Option<(Docker, std::sync::Arc<RuntimeTag>)>>,
}

impl Connection {
    /// A client usable from the calling task.
    pub(crate) async fn get(&self) -> Result<Docker, DockerError> {
        if let Ok(c) = self.current.lock() {
            if let Some((docker, tag)) = c.as_ref() {
                if tag.usable() {
                    return Ok(docker.clone());
                }
            }
        }
        let docker = connect_inner().await?;
        if let Ok(mut c) = self.current.lock() {
            *c = Some((docker.clone(), std::sync::Arc::new(RuntimeTag::here())));
        }
        Ok(docker)
    }
}
