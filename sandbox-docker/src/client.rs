//! The connection to the engine.
//!
//! A client is made per sandbox (and per preflight) rather than once per backend: the
//! HTTP client's pooled connections belong to the tokio runtime that opened them, and a
//! backend is routinely shared by tests that each run their own runtime.

use bollard::Docker;

use crate::error::{DockerError, Reach};

/// The oldest engine API this backend speaks: `wait?condition=not-running` came in 1.30;
/// everything else we use (mounts, init, pids limit, NanoCPUs) is older.
pub(crate) const MIN_API: (usize, usize) = (1, 30);

/// Connect to the engine named by `DOCKER_HOST` (the local socket by default) and agree
/// on an API version: the client library defaults to a newer API than Debian's engine
/// speaks, and an engine refuses requests that name a version it does not know.
pub async fn connect() -> Result<Docker, sandbox_core::SandboxError> {
    Ok(connect_inner().await?)
}

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
