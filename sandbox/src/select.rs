//! Picking a backend at run time: by name, or `auto`.
//!
//! # The `auto` order
//!
//! `auto` walks a fixed preference list ([`preference`]) and takes the first backend that
//! (1) is compiled in and can be constructed, (2) enforces everything the options ask on
//! their lane (the same [`Plan::new`] check `run` does, so nothing is weakened), and
//! (3) passes its preflight on this host, which does the real thing on a trivial command.
//!
//! - `strict` and `trusted`: `bwrap`, then `docker`, then `landlock`. Namespaces give the
//!   strongest confinement of a host program (own mount, pid, network and user world);
//!   a container is as strong but needs an image and an engine; landlock with seccomp
//!   cannot isolate processes, so the `strict` lane refuses it anyway.
//! - `fast`: `landlock`, then `bwrap`, then `docker`. On this lane every backend enforces
//!   everything asked exactly (that is what the lane means), so the cheapest start wins:
//!   landlock costs about what a bare spawn does.
//! - `none` comes last, and only with [`Choice::Auto`]`{ allow_none: true }`; even then the
//!   lane decides (it runs only on `trusted`).
//! - An image ([`Config::image`]) names a container, so with one `auto` considers
//!   `docker` alone.
//!
//! The order is a policy decision written down here, not derived from the capability
//! structs: a capability says what a backend can enforce, not what it costs.

use std::fmt;
use std::sync::Arc;

use sandbox_core::policy::{check_lane, LaneRequest};
use sandbox_core::{
    Backend, Capability, Lane, NetworkMode, Plan, Preflight, ResourceLimits, SandboxError,
    SandboxOpts,
};

/// The name that asks for automatic selection.
pub const AUTO: &str = "auto";

/// Every backend this crate knows, compiled in or not.
pub const KNOWN: [&str; 4] = ["none", "bwrap", "landlock", "docker"];

/// The backends compiled into this build, in [`KNOWN`] order.
pub fn compiled_in() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "none") {
        v.push("none");
    }
    if cfg!(feature = "bwrap") {
        v.push("bwrap");
    }
    if cfg!(feature = "landlock") {
        v.push("landlock");
    }
    if cfg!(feature = "docker") {
        v.push("docker");
    }
    v
}

/// Settings only some backends use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The container image, for `docker`; an error with any other backend.
    pub image: Option<String>,
}

impl Config {
    /// Settings with a container image.
    pub fn with_image(image: impl Into<String>) -> Self {
        Self {
            image: Some(image.into()),
        }
    }
}

/// Which backend to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The strongest backend that enforces the request here (see the module docs).
    Auto {
        /// Whether `none` (no confinement at all) may be picked as the last resort.
        allow_none: bool,
    },
    /// This backend, or an error: never another one in its place.
    Named(String),
}

impl Choice {
    /// `auto`, never picking `none`.
    pub fn auto() -> Self {
        Self::Auto { allow_none: false }
    }

    /// `auto` for the name [`AUTO`], else that backend.
    pub fn parse(name: &str) -> Self {
        if name == AUTO {
            Self::auto()
        } else {
            Self::Named(name.to_string())
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto { .. } => f.write_str(AUTO),
            Self::Named(n) => f.write_str(n),
        }
    }
}

/// A backend `auto` considered and did not take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassedOver {
    /// The backend.
    pub backend: &'static str,
    /// Why it was not taken.
    pub reason: String,
    /// It works here, but does not enforce this request on the lane asked.
    pub refused_by_lane: bool,
}

/// The outcome of a selection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Selected {
    /// The backend; make one sandbox per command with [`Backend::sandbox`].
    pub backend: Arc<dyn Backend>,
    /// What its preflight found.
    pub preflight: Preflight,
    /// The backends `auto` tried first, and why each was not taken (empty for a name).
    pub passed_over: Vec<PassedOver>,
}

/// The `auto` preference on `lane`, strongest or (on `fast`) cheapest first, including
/// backends that are not compiled in; `none` is not in it (see [`Choice::Auto`]).
pub fn preference(lane: Lane) -> [&'static str; 3] {
    match lane {
        Lane::Fast => ["landlock", "bwrap", "docker"],
        Lane::Strict | Lane::Trusted => ["bwrap", "docker", "landlock"],
    }
}

/// The known name equal to `name`, as a `'static` string for error values.
fn known(name: &str) -> Option<&'static str> {
    KNOWN.iter().copied().find(|k| *k == name)
}

/// Construct the backend called `name` with `config`.
///
/// Errors: an unknown name, or an image with a backend other than docker, is
/// [`SandboxError::InvalidConfig`]; a known backend this build left out is
/// [`SandboxError::Unavailable`] naming the cargo feature that brings it in.
pub fn backend(name: &str, config: &Config) -> Result<Arc<dyn Backend>, SandboxError> {
    if known(name).is_none() {
        return Err(SandboxError::invalid(
            "backend",
            format!(
                "unknown backend `{name}` (expected {AUTO}, {})",
                KNOWN.join(", ")
            ),
        ));
    }
    if config.image.is_some() && name != "docker" {
        return Err(SandboxError::invalid(
            "image",
            format!(
                "names a container image, which only the docker backend runs, but the \
                 backend is `{name}`; drop the image or choose the docker backend"
            ),
        ));
    }
    make(name, config)
}

/// One arm per backend feature; the last arm names the feature to enable.
fn make(name: &str, config: &Config) -> Result<Arc<dyn Backend>, SandboxError> {
    let _ = config;
    match name {
        #[cfg(feature = "none")]
        sandbox_none::NAME => Ok(Arc::new(sandbox_none::NoneBackend::new())),
        #[cfg(feature = "bwrap")]
        sandbox_bwrap::NAME => Ok(Arc::new(sandbox_bwrap::BwrapBackend::new())),
        #[cfg(feature = "landlock")]
        sandbox_landlock::NAME => Ok(Arc::new(sandbox_landlock::LandlockBackend::new())),
        #[cfg(feature = "docker")]
        sandbox_docker::NAME => {
            let image = config.image.clone().ok_or_else(|| {
                SandboxError::invalid(
                    "image",
                    "the docker backend needs a container image to run the command in; \
                     name one (`--image IMAGE`, or `image` in the policy file)",
                )
            })?;
            let backend =
                sandbox_docker::DockerBackend::new(sandbox_docker::DockerConfig::new(image))?;
            Ok(Arc::new(backend))
        }
        other => Err(not_enabled(other)),
    }
}

fn not_enabled(name: &str) -> SandboxError {
    match known(name) {
        Some(backend) => SandboxError::unavailable(
            backend,
            "it is not compiled into this build of the sandbox crate",
            format!(
                "rebuild with the cargo feature `{backend}` (for example \
                 `cargo install sandbox --features {backend}`), or choose another backend"
            ),
        ),
        None => SandboxError::invalid("backend", format!("unknown backend `{name}`")),
    }
}

/// Pick a backend for `opts`: `choice` by name, or by the `auto` order.
///
/// Bad options are reported first, before any preflight runs anything. A named backend
/// that refuses the request on its lane, or fails its preflight, is an error; it is never
/// replaced by another.
pub async fn select(
    choice: &Choice,
    opts: &SandboxOpts,
    config: &Config,
) -> Result<Selected, SandboxError> {
    // The options are checked before any backend is tried: a missing workspace is the
    // caller's error whatever the backend. A capability that claims nothing checks every
    // field (and does not resolve `argv[0]`, which a container resolves inside).
    if let Err(e @ SandboxError::InvalidConfig { .. }) =
        Plan::new(opts, AUTO, &Capability::default())
    {
        return Err(e);
    }
    pick(choice, Request::Opts(opts), config).await
}

/// Pick a backend for the commands a host will run on `lane`, before it knows them: the
/// check is a default request there (network `none`, no extra paths, the default limits).
/// A command that asks for more is still checked, and refused if need be, by `run`.
pub async fn for_lane(
    choice: &Choice,
    lane: Lane,
    config: &Config,
) -> Result<Selected, SandboxError> {
    pick(choice, Request::Default(lane), config).await
}

/// What a backend must accept to be picked.
#[derive(Clone, Copy, Debug)]
enum Request<'a> {
    /// These options, exactly as `run` will check them.
    Opts(&'a SandboxOpts),
    /// A default request on this lane.
    Default(Lane),
}

impl Request<'_> {
    fn lane(self) -> Lane {
        match self {
            Self::Opts(o) => o.lane,
            Self::Default(lane) => lane,
        }
    }

    fn check(self, backend: &dyn Backend) -> Result<(), SandboxError> {
        match self {
            Self::Opts(opts) => Plan::new(opts, backend.name(), &backend.capability()).map(drop),
            Self::Default(lane) => {
                let is_root = sandbox_core::process::HostSupport::detect(false).is_root;
                default_request_fits(lane, backend.name(), &backend.capability(), is_root)
            }
        }
    }
}

/// Whether a backend with `cap` runs a default request (network `none`, no extra paths,
/// the default limits) on `lane`.
pub(crate) fn default_request_fits(
    lane: Lane,
    name: &'static str,
    cap: &Capability,
    host_is_root: bool,
) -> Result<(), SandboxError> {
    let limits = ResourceLimits::default();
    let request = LaneRequest {
        network: NetworkMode::None,
        carveouts: false,
        limits: &limits,
        changes: sandbox_core::Changes::Direct,
        host_is_root,
    };
    check_lane(lane, name, cap, &request).map(drop)
}

async fn pick(
    choice: &Choice,
    request: Request<'_>,
    config: &Config,
) -> Result<Selected, SandboxError> {
    match choice {
        Choice::Named(name) => {
            let backend = backend(name, config)?;
            if let Err(e) = request.check(backend.as_ref()) {
                // A requirement no lane waives (tree kill, a limit) is missing because of
                // the host, more often than not; the preflight names the cause and the
                // remedy, which beats "cannot enforce".
                if matches!(e, SandboxError::NotSupported { .. }) {
                    backend.sandbox().preflight().await?;
                }
                return Err(e);
            }
            let preflight = backend.sandbox().preflight().await?;
            Ok(Selected {
                backend,
                preflight,
                passed_over: Vec::new(),
            })
        }
        Choice::Auto { allow_none } => auto(request, config, *allow_none).await,
    }
}

/// The candidates `auto` tries, in order, for `opts` and `config`.
pub fn candidates(lane: Lane, config: &Config, allow_none: bool) -> Vec<&'static str> {
    if config.image.is_some() {
        return vec!["docker"];
    }
    let mut order: Vec<&'static str> = preference(lane).to_vec();
    if allow_none {
        order.push("none");
    }
    order
}

async fn auto(
    request: Request<'_>,
    config: &Config,
    allow_none: bool,
) -> Result<Selected, SandboxError> {
    let built = compiled_in();
    let mut passed_over = Vec::new();
    for name in candidates(request.lane(), config, allow_none) {
        if !built.contains(&name) {
            passed_over.push(PassedOver {
                backend: name,
                reason: format!("not compiled in (cargo feature `{name}`)"),
                refused_by_lane: false,
            });
            continue;
        }
        let backend = match backend(name, config) {
            Ok(b) => b,
            Err(e) => {
                passed_over.push(PassedOver {
                    backend: name,
                    reason: e.to_string(),
                    refused_by_lane: false,
                });
                continue;
            }
        };
        match request.check(backend.as_ref()) {
            Ok(()) => {}
            // The options themselves are wrong: no backend will take them, and the
            // caller needs this error, not "nothing qualified".
            Err(e @ SandboxError::InvalidConfig { .. }) => return Err(e),
            Err(e) => {
                passed_over.push(PassedOver {
                    backend: name,
                    reason: e.to_string(),
                    refused_by_lane: matches!(e, SandboxError::PolicyRefused { .. }),
                });
                continue;
            }
        }
        match backend.sandbox().preflight().await {
            Ok(preflight) => {
                return Ok(Selected {
                    backend,
                    preflight,
                    passed_over,
                })
            }
            Err(e) => passed_over.push(PassedOver {
                backend: name,
                reason: e.to_string(),
                refused_by_lane: false,
            }),
        }
    }
    Err(nothing_qualified(request.lane(), &passed_over))
}

fn nothing_qualified(lane: Lane, passed_over: &[PassedOver]) -> SandboxError {
    let built = compiled_in();
    if passed_over.iter().all(|p| !built.contains(&p.backend)) {
        return SandboxError::unavailable(
            AUTO,
            "no confining backend is compiled into this build",
            "rebuild with a confining backend's cargo feature (`bwrap`, `landlock`, \
             `docker`), or choose the `none` backend on the `trusted` lane explicitly",
        );
    }
    let reasons = passed_over
        .iter()
        .map(|p| format!("{}: {}", p.backend, p.reason))
        .collect::<Vec<_>>()
        .join("; ");
    let refused_by_lane = passed_over.iter().any(|p| p.refused_by_lane);
    let remedy = if lane == Lane::Strict && refused_by_lane {
        "fix one of the backends above (`sandbox doctor` shows each), or accept the `fast` \
         lane, which does not require process isolation"
    } else {
        "fix one of the backends above (`sandbox doctor` shows each)"
    };
    SandboxError::unavailable(
        AUTO,
        format!("no backend can run this request on the `{lane}` lane here ({reasons})"),
        remedy,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_invalid_options() {
        let e = backend("chroot", &Config::default()).unwrap_err();
        assert!(
            matches!(
                e,
                SandboxError::InvalidConfig {
                    field: "backend",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("chroot"), "{e}");
    }

    #[test]
    fn an_image_with_a_non_container_backend_is_invalid() {
        for name in ["none", "bwrap", "landlock"] {
            let e = backend(name, &Config::with_image("debian")).unwrap_err();
            assert!(
                matches!(e, SandboxError::InvalidConfig { field: "image", .. }),
                "{name}: {e}"
            );
        }
    }

    #[test]
    fn a_known_backend_left_out_names_its_feature() {
        for name in KNOWN {
            if compiled_in().contains(&name) {
                continue;
            }
            let e = backend(name, &Config::default()).unwrap_err();
            match &e {
                SandboxError::Unavailable {
                    backend, remedy, ..
                } => {
                    assert_eq!(*backend, name);
                    assert!(remedy.contains(&format!("--features {name}")), "{e}");
                }
                other => panic!("{name}: {other}"),
            }
        }
    }

    #[test]
    fn auto_never_lists_none_unless_allowed_and_an_image_means_docker() {
        for lane in Lane::ALL {
            assert!(!candidates(lane, &Config::default(), false).contains(&"none"));
            assert_eq!(
                candidates(lane, &Config::default(), true).last(),
                Some(&"none")
            );
            assert_eq!(candidates(lane, &Config::with_image("x"), true), ["docker"]);
        }
        assert_eq!(preference(Lane::Fast)[0], "landlock");
        assert_eq!(preference(Lane::Strict)[0], "bwrap");
    }

    #[test]
    fn choice_parses_auto_and_names() {
        assert_eq!(Choice::parse("auto"), Choice::auto());
        assert_eq!(Choice::parse("bwrap"), Choice::Named("bwrap".into()));
        assert_eq!(Choice::auto().to_string(), "auto");
    }

    #[tokio::test]
    async fn bad_options_are_reported_before_any_backend_is_tried() {
        let opts = SandboxOpts::new("/nonexistent/workspace/x", ["true"]);
        let e = select(
            &Choice::Auto { allow_none: true },
            &opts,
            &Config::default(),
        )
        .await
        .unwrap_err();
        // With at least one backend compiled in and constructible, the workspace error
        // surfaces as itself.
        if compiled_in().iter().any(|b| *b != "docker") {
            assert!(
                matches!(
                    e,
                    SandboxError::InvalidConfig {
                        field: "workspace",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    #[cfg(feature = "none")]
    #[tokio::test]
    async fn auto_does_not_pick_none_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(dir.path(), ["true"]);
        opts.lane = Lane::Trusted;
        match select(&Choice::auto(), &opts, &Config::default()).await {
            Ok(s) => assert_ne!(s.backend.name(), "none"),
            Err(e) => assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}"),
        }
        let only_none = compiled_in() == ["none"];
        let r = select(
            &Choice::Auto { allow_none: true },
            &opts,
            &Config::default(),
        )
        .await;
        if only_none {
            match r {
                Ok(s) => {
                    assert_eq!(s.backend.name(), "none");
                    assert_eq!(s.passed_over.len(), 3, "{:?}", s.passed_over);
                }
                // A host where `none` cannot kill a tree (no cgroup): its preflight is
                // the reason given.
                Err(e) => assert!(e.to_string().contains("none: "), "{e}"),
            }
        }
    }

    #[cfg(feature = "none")]
    #[tokio::test]
    async fn a_named_backend_is_refused_on_a_lane_it_cannot_satisfy() {
        let dir = tempfile::tempdir().unwrap();
        let opts = SandboxOpts::new(dir.path(), ["true"]);
        let e = select(&Choice::Named("none".into()), &opts, &Config::default())
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::PolicyRefused { .. }), "{e}");
    }

    #[cfg(feature = "none")]
    #[tokio::test]
    async fn for_a_lane_none_is_refused_off_trusted_and_never_picked_by_auto() {
        let e = crate::select("none", &Config::default(), Lane::Strict)
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::PolicyRefused { .. }), "{e}");
        match crate::select("none", &Config::default(), Lane::Trusted).await {
            Ok(b) => assert_eq!(b.name(), "none"),
            // No cgroup here: the preflight's reason, not a silent substitute.
            Err(e) => assert!(
                matches!(
                    e,
                    SandboxError::Unavailable {
                        backend: "none",
                        ..
                    }
                ),
                "{e}"
            ),
        }
        for lane in Lane::ALL {
            if let Ok(b) = crate::select("auto", &Config::default(), lane).await {
                assert_ne!(b.name(), "none");
            }
        }
    }
}
