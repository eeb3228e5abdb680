//! The backend's own errors, each turned into the contract's error with a remedy.

use std::path::PathBuf;

use sandbox_core::SandboxError;

use crate::NAME;

/// Why the engine could not be reached: each cause has its own remedy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// No socket at the address.
    SocketMissing,
    /// The socket exists but this user may not open it.
    PermissionDenied,
    /// Nothing listens (the daemon is down).
    Refused,
    /// The engine did not answer in time.
    Timeout,
    /// `DOCKER_HOST` names a scheme this build cannot speak.
    Scheme,
    /// Anything else.
    Other,
}

impl Reach {
    fn remedy(self, host: &str) -> String {
        match self {
            Self::SocketMissing | Self::Refused => format!(
                "start the docker daemon (`systemctl start docker`), or point DOCKER_HOST at a \
                 running engine (now: {host})"
            ),
            Self::PermissionDenied => format!(
                "let this user open {host}: add it to the `docker` group (`usermod -aG docker \
                 USER`, then log in again) or run as a user that can; membership of that group \
                 is root on the engine's host, so grant it deliberately"
            ),
            Self::Timeout => format!("check that the engine at {host} answers `docker version`"),
            Self::Scheme => {
                "set DOCKER_HOST to a unix:// socket or a tcp:// / http:// address".to_string()
            }
            Self::Other => format!("check DOCKER_HOST (now: {host}) and `docker version`"),
        }
    }
}

/// Everything that can go wrong in this backend.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DockerError {
    /// The engine cannot be reached.
    #[error("cannot reach the docker engine at {host}: {detail}")]
    Unreachable {
        /// `DOCKER_HOST` or the default socket.
        host: String,
        /// The classified cause.
        cause: Reach,
        /// The client's own words.
        detail: String,
    },
    /// The image is not on the engine and pulling is off.
    #[error("image `{image}` is not present on the docker engine and pulling is off")]
    ImageMissing {
        /// The configured image.
        image: String,
    },
    /// A request the engine speaks too old an API for.
    #[error("the docker engine speaks API {found}; this backend needs at least {needed}")]
    ApiTooOld {
        /// The engine's API version.
        found: String,
        /// The oldest we support.
        needed: &'static str,
    },
    /// Bad input, found while turning the plan into a container.
    #[error("{field}: {reason}")]
    Invalid {
        /// The option at fault.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The engine accepted the container but said it would not enforce part of it.
    #[error("the docker engine would not enforce {what}: {warning}")]
    NotEnforced {
        /// The limit or option concerned.
        what: String,
        /// The engine's warning.
        warning: String,
    },
    /// `argv[0]` is not in the image.
    #[error("program `{program}` not found in image `{image}` ({searched})")]
    ProgramNotFound {
        /// `argv[0]`.
        program: String,
        /// The image.
        image: String,
        /// Where we looked.
        searched: String,
    },
    /// `argv[0]` is in the image but the command's uid cannot execute it.
    #[error("program `{program}` in image `{image}` is not executable by uid {uid}: {why}")]
    NotExecutable {
        /// `argv[0]` as resolved.
        program: String,
        /// The image.
        image: String,
        /// The command's uid.
        uid: u32,
        /// What is wrong with it.
        why: String,
    },
    /// A bind-mount source the engine does not see (a remote engine in bind mode).
    #[error("the docker engine cannot see {path} on its own disk: {message}")]
    BindSourceMissing {
        /// The host path.
        path: String,
        /// The engine's words.
        message: String,
    },
    /// The runtime found no engine init at `/sbin/docker-init`, where the engine binds it:
    /// the image's `/sbin` is a symlink into a directory the image lacks, or into one a
    /// path handed to the command covers (`--read /usr` over an image whose `/sbin` is
    /// `usr/sbin`).
    #[error(
        "the container engine could not place its init at /sbin/docker-init: in image \
         `{image}`, /sbin is not a directory of its own but leads into one the image lacks{}",
        if covering.is_empty() { String::new() } else {
            format!(" or one a path handed to the command covers ({})", covering.join(", "))
        }
    )]
    InitHidden {
        /// The image.
        image: String,
        /// Top-level directories handed to the command.
        covering: Vec<String>,
    },
    /// A change set to review in copy mode: the tree would come back through an archive
    /// that drops FIFOs and hard links, so the change set would not be what the command did.
    #[error("a change set to review needs the workspace bound (WorkspaceMode::Bind), not copied")]
    LayerNeedsBind,
    /// A change set to review on a root host that cannot make idmapped mounts: the layer
    /// could reach the command's uid only by a copy, with the same loss.
    #[error(
        "a change set to review on a root host needs an idmapped mount of the layer, which \
         could not be made here: {cause}"
    )]
    LayerNeedsIdmap {
        /// Why not.
        cause: String,
    },
    /// An engine request failed.
    #[error("docker engine: {action}: {source}")]
    Engine {
        /// What we asked for.
        action: String,
        /// The client's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// A local file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

impl DockerError {
    /// An engine error for `action`, with the connection failures classified so they carry
    /// the right remedy.
    pub(crate) fn engine(action: impl Into<String>, source: bollard::errors::Error) -> Self {
        if let Some(cause) = classify_connection(&source) {
            return Self::Unreachable {
                host: docker_host(),
                cause,
                detail: error_chain(&source),
            };
        }
        Self::Engine {
            action: action.into(),
            source,
        }
    }

    /// A local I/O error.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// True when the engine answered "no such object" (HTTP 404).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::Engine {
                source: bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    ..
                },
                ..
            }
        )
    }
}

/// The engine address in use, for messages.
pub(crate) fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

/// The error and its sources, joined, so that "permission denied" deep in the chain shows.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Tell a connection failure from an engine answer.
fn classify_connection(e: &bollard::errors::Error) -> Option<Reach> {
    use bollard::errors::Error as E;
    match e {
        E::SocketNotFoundError(_) => return Some(Reach::SocketMissing),
        E::UnsupportedURISchemeError { .. } => return Some(Reach::Scheme),
        E::RequestTimeoutError => return Some(Reach::Timeout),
        E::DockerResponseServerError { .. } => return None,
        _ => {}
    }
    let of_io = |io: &std::io::Error| match io.kind() {
        std::io::ErrorKind::PermissionDenied => Reach::PermissionDenied,
        std::io::ErrorKind::ConnectionRefused => Reach::Refused,
        std::io::ErrorKind::NotFound => Reach::SocketMissing,
        std::io::ErrorKind::TimedOut => Reach::Timeout,
        _ => Reach::Other,
    };
    // `IOError` is a transparent wrapper: its `source()` skips the io::Error itself.
    if let E::IOError { err } = e {
        // Only the kinds that mean "could not connect"; a broken pipe mid-transfer is an
        // engine error, not an unreachable engine.
        return Some(of_io(err)).filter(|r| *r != Reach::Other);
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(of_io(io));
        }
        cur = c.source();
    }
    match e {
        E::HyperLegacyError { .. } => Some(Reach::Other),
        _ => None,
    }
}

impl From<DockerError> for SandboxError {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::Unreachable {
                ref host, cause, ..
            } => SandboxError::unavailable(NAME, e.to_string(), cause.remedy(host)),
            DockerError::ImageMissing { ref image } => SandboxError::unavailable(
                NAME,
                e.to_string(),
                format!(
                    "put the image on the engine (`docker load -i FILE`, `docker build -t \
                     {image} DIR`, or `docker pull {image}` where a registry is reachable)"
                ),
            ),
            DockerError::ApiTooOld { .. } => SandboxError::unavailable(
                NAME,
                e.to_string(),
                "upgrade the docker engine (Debian 11 or later ships a new enough one)",
            ),
            DockerError::Invalid { field, reason } => SandboxError::InvalidConfig { field, reason },
            DockerError::NotEnforced { ref what, .. } => SandboxError::NotSupported {
                backend: NAME,
                feature: format!("{what} ({e})"),
                remedy: "enable the cgroup controller on the engine's host (or drop the limit)"
                    .into(),
            },
            DockerError::ProgramNotFound { ref program, .. } => SandboxError::Spawn {
                program: PathBuf::from(program),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()),
            },
            DockerError::NotExecutable { ref program, .. } => SandboxError::Spawn {
                program: PathBuf::from(program),
                source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()),
            },
            DockerError::BindSourceMissing { .. } => SandboxError::unavailable(
                NAME,
                e.to_string(),
                "the engine runs on another machine: use `WorkspaceMode::Copy`, which uploads \
                 the paths instead of binding them",
            ),
            DockerError::InitHidden { ref covering, .. } => SandboxError::Unavailable {
                backend: NAME,
                reason: e.to_string(),
                remedy: match covering.first() {
                    Some(dir) => format!(
                        "do not hand {dir} over (`--read {dir}`): an image made by `sandbox \
                         image --from-host` already holds the host's system directories"
                    ),
                    None => "use an image whose /sbin is a directory or leads into one it \
                             holds (`sandbox image --from-host` makes one)"
                        .into(),
                },
            },
            DockerError::LayerNeedsBind => SandboxError::NotSupported {
                backend: NAME,
                feature: e.to_string(),
                remedy: "use a local engine in bind mode, or discard the changes (`snapshot`)"
                    .into(),
            },
            DockerError::LayerNeedsIdmap { .. } => SandboxError::NotSupported {
                backend: NAME,
                feature: e.to_string(),
                remedy: "run on Linux 5.12 or later with a filesystem that supports idmapped \
                         mounts, run as the workspace's owner instead of root, or use another \
                         backend"
                    .into(),
            },
            DockerError::Engine { ref action, .. } => SandboxError::io(
                format!("docker engine: {action}"),
                std::io::Error::other(match &e {
                    DockerError::Engine { source, .. } => error_chain(source),
                    _ => e.to_string(),
                }),
            ),
            DockerError::Io { context, source } => SandboxError::Io { context, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_carry_their_remedy() {
        let e = DockerError::engine(
            "ping",
            bollard::errors::Error::SocketNotFoundError("/nope.sock".into()),
        );
        let s = SandboxError::from(e);
        let text = s.to_string();
        assert!(matches!(s, SandboxError::Unavailable { .. }), "{text}");
        assert!(text.contains("systemctl start docker"), "{text}");
    }

    #[test]
    fn a_socket_we_may_not_open_says_how_to_get_access() {
        let e = DockerError::engine(
            "ping",
            bollard::errors::Error::IOError {
                err: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            },
        );
        assert!(
            matches!(
                e,
                DockerError::Unreachable {
                    cause: Reach::PermissionDenied,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = SandboxError::from(e).to_string();
        assert!(text.contains("docker` group"), "{text}");
        let e = DockerError::engine(
            "ping",
            bollard::errors::Error::IOError {
                err: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            },
        );
        assert!(SandboxError::from(e)
            .to_string()
            .contains("systemctl start docker"),);
    }

    #[test]
    fn server_answers_are_not_connection_failures() {
        let e = DockerError::engine(
            "inspect",
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                message: "No such image".into(),
            },
        );
        assert!(e.is_not_found());
        assert!(matches!(e, DockerError::Engine { .. }));
    }

    #[test]
    fn a_missing_program_is_a_not_found_spawn_error() {
        let e: SandboxError = DockerError::ProgramNotFound {
            program: "nope".into(),
            image: "img".into(),
            searched: "PATH".into(),
        }
        .into();
        assert!(e.is_not_found(), "{e}");
        let e: SandboxError = DockerError::NotExecutable {
            program: "/x".into(),
            image: "img".into(),
            uid: 1,
            why: "no x bit".into(),
        }
        .into();
        assert!(e.is_not_executable(), "{e}");
    }

    #[test]
    fn a_missing_image_names_it_and_how_to_get_it() {
        let e: SandboxError = DockerError::ImageMissing {
            image: "foo:1".into(),
        }
        .into();
        let text = e.to_string();
        assert!(
            text.contains("foo:1") && text.contains("docker load"),
            "{text}"
        );
        // The command, whose users read this, has no option to pull: one remedy that
        // works there.
        assert!(!text.contains("allow_pull"), "{text}");
    }
}
