//! Picking a backend at run time: by name, or `auto`.
//!
//! # The `auto` order
//!
//! `auto` walks the compiled-in backends in the order of their rank on the lane
//! ([`preference`]; each backend crate states its ranks in its
//! [`BackendInfo::auto_rank`]) and takes the first backend that (1) can be constructed,
//! (2) enforces everything the options ask on their lane (the same [`Plan::new`] check
//! `run` does, so nothing is weakened), and (3) passes its preflight on this host, which
//! does the real thing on a trivial command.
//!
//! - `strict`: `landlock`, then `bwrap`, then `gvisor`, then `docker`. Each enforces
//!   everything the lane asks, process isolation included (landlock with a pid namespace
//!   of its own, where the host lets it make one: root, or unprivileged user namespaces),
//!   so the faster start wins, as `cargo xtask bench` measures it: landlock (a fork and a
//!   few system calls) well ahead of bwrap (a helper program), itself ahead of gVisor (a
//!   runtime with a kernel of its own per command) and a container. Where landlock cannot
//!   make the namespace the lane refuses it, and `auto` goes on to bwrap.
//! - `trusted`: `bwrap`, then `gvisor`, then `docker`, then `landlock`. Namespaces give the
//!   strongest confinement of a host program (own mount, pid, network and user world);
//!   gVisor adds a kernel of its own between the command and the host's, at the cost of a
//!   runtime per command; a container is as strong as namespaces but needs an image and an
//!   engine.
//! - `fast`: `landlock`, then `bwrap`, then `docker`, then `gvisor`. On this lane every
//!   backend enforces everything asked exactly (that is what the lane means), so the
//!   cheapest start wins: landlock costs about what a bare spawn does.
//! - A backend that confines nothing ([`BackendInfo::unconfined`]: `none`) comes last, and
//!   only with [`Choice::Auto`]`{ allow_none: true }`; even then the lane decides (it runs
//!   only on `trusted`).
//! - An image ([`Config::image`]) names a container, so with one `auto` considers only
//!   the backends that run an image ([`BackendInfo::needs_image`]: `docker`).
//!
//! The order is a policy decision written down here and in each backend's ranks, not
//! derived from the capability structs: a capability says what a backend can enforce, not
//! what it costs. A test below holds the ranks to this list.

use std::fmt;
use std::sync::Arc;

use sandbox_core::admission::{check_lane, LaneRequest};
use sandbox_core::registry::BackendInfo;
use sandbox_core::{
    Backend, Capability, Lane, NetworkMode, Plan, Preflight, ResourceLimits, SandboxError,
    SandboxOpts,
};

use crate::registry;

/// The name that asks for automatic selection.
pub const AUTO: &str = "auto";

/// Settings only some backends use (the container image).
pub type Config = sandbox_core::registry::BackendConfig;

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

/// The `auto` preference on `lane` among the compiled-in backends, strongest or (on
/// `fast`) cheapest first; an unconfined backend is not in it (see [`Choice::Auto`]).
pub fn preference(lane: Lane) -> Vec<&'static BackendInfo> {
    let mut ranked: Vec<(u8, &'static BackendInfo)> = registry::compiled_in()
        .filter(|i| !i.unconfined)
        .filter_map(|i| i.auto_rank.on(lane).map(|r| (r, i)))
        .collect();
    // Stable: equal ranks keep the registry's order.
    ranked.sort_by_key(|(r, _)| *r);
    ranked.into_iter().map(|(_, i)| i).collect()
}

/// The compiled-in backend called `name`.
///
/// Errors: an unknown name is [`SandboxError::InvalidConfig`]; a known backend this build
/// left out is [`SandboxError::Unavailable`] naming the cargo feature that brings it in.
pub fn info(name: &str) -> Result<&'static BackendInfo, SandboxError> {
    match registry::known(name) {
        Some(k) => k.compiled(),
        None => Err(SandboxError::invalid(
            "backend",
            format!(
                "unknown backend `{name}` (expected {AUTO}, {})",
                registry::names().collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Construct the backend called `name` with `config`.
///
/// Errors: an unknown name, or an image with a backend that does not run one, is
/// [`SandboxError::InvalidConfig`]; a known backend this build left out is
/// [`SandboxError::Unavailable`] naming the cargo feature that brings it in.
pub fn backend(name: &str, config: &Config) -> Result<Arc<dyn Backend>, SandboxError> {
    info(name)?.build(config)
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
                let is_root = sandbox_core::host_is_root();
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

/// The candidates `auto` tries, in order, for `lane` and `config`.
pub fn candidates(lane: Lane, config: &Config, allow_none: bool) -> Vec<&'static BackendInfo> {
    if config.image.is_some() {
        // An image names a container: only a backend that runs one, on any lane.
        let mut order: Vec<_> = registry::compiled_in()
            .filter(|i| i.needs_image())
            .collect();
        order.sort_by_key(|i| i.auto_rank.on(lane).unwrap_or(u8::MAX));
        return order;
    }
    let mut order = preference(lane);
    if allow_none {
        order.extend(registry::compiled_in().filter(|i| i.unconfined));
    }
    order
}

async fn auto(
    request: Request<'_>,
    config: &Config,
    allow_none: bool,
) -> Result<Selected, SandboxError> {
    let mut passed_over = Vec::new();
    let candidates = candidates(request.lane(), config, allow_none);
    for info in &candidates {
        let name = info.name;
        let backend = match info.build(config) {
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
            // The options themselves are wrong, or a grant is refused whatever runs it
            // (the path is a control file): no backend will take them, and the caller
            // needs this one error, not the same refusal once per backend.
            Err(e @ (SandboxError::InvalidConfig { .. } | SandboxError::ControlGrant { .. })) => {
                return Err(e)
            }
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

/// The known backends this build left out, as "`name` (cargo feature `f`)".
fn left_out() -> Vec<String> {
    registry::KNOWN
        .iter()
        .filter(|k| k.info.is_none())
        .map(|k| format!("`{}` (cargo feature `{}`)", k.name, k.feature()))
        .collect()
}

/// What a container this process runs in must allow for `strict`, where one withholds
/// namespaces or its own `/proc` (see `sandbox_host::container`).
pub fn container_strict_remedy() -> Option<String> {
    #[cfg(feature = "host")]
    {
        sandbox_host::container::Confinement::detect().strict_remedy()
    }
    #[cfg(not(feature = "host"))]
    {
        None
    }
}

/// What a container this process runs in must allow for namespaces, where one withholds
/// them.
pub fn container_namespaces_remedy() -> Option<String> {
    #[cfg(feature = "host")]
    {
        sandbox_host::container::Confinement::detect().namespaces_remedy()
    }
    #[cfg(not(feature = "host"))]
    {
        None
    }
}

fn nothing_qualified(lane: Lane, passed_over: &[PassedOver]) -> SandboxError {
    let left_out = left_out();
    let also = if left_out.is_empty() {
        String::new()
    } else {
        format!("; not compiled in: {}", left_out.join(", "))
    };
    if passed_over.is_empty() {
        return SandboxError::unavailable(
            AUTO,
            format!(
                "no backend `auto` may pick on the `{lane}` lane is compiled into this build{also}"
            ),
            "rebuild with a confining backend's cargo feature, or choose an unconfined \
             backend by name on the `trusted` lane",
        );
    }
    // Backends passed over for the same reason are named together, the reason once.
    let mut grouped: Vec<(Vec<&str>, &str)> = Vec::new();
    for p in passed_over {
        match grouped.iter_mut().find(|(_, r)| *r == p.reason) {
            Some((names, _)) => names.push(p.backend),
            None => grouped.push((vec![p.backend], &p.reason)),
        }
    }
    let reasons = grouped
        .iter()
        .map(|(names, reason)| format!("{}: {reason}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let refused_by_lane = passed_over.iter().any(|p| p.refused_by_lane);
    let remedy = match (lane, container_strict_remedy()) {
        // Inside a container that withholds namespaces, no host setting is the cause: what
        // the container must allow is named.
        (Lane::Strict, Some(container)) => {
            format!("{container}; or accept the `fast` lane, which runs here without namespaces")
        }
        (Lane::Strict, None) if refused_by_lane => "fix one of the backends above (`sandbox \
             doctor` shows each), or accept the `fast` lane, which does not require process \
             isolation"
            .into(),
        // `fast` in such a container: what needs a network namespace (`loopback`, `proxy`,
        // host ports) is refused for the container's reason.
        (_, _) => match container_namespaces_remedy() {
            Some(container) => format!(
                "fix one of the backends above (`sandbox doctor` shows each); what needs a \
                 namespace is refused here because {container}"
            ),
            None => "fix one of the backends above (`sandbox doctor` shows each)".into(),
        },
    };
    SandboxError::unavailable(
        AUTO,
        format!("no backend can run this request on the `{lane}` lane here ({reasons}{also})"),
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
        for name in registry::compiled_in()
            .filter(|i| !i.needs_image())
            .map(|i| i.name)
        {
            let e = backend(name, &Config::with_image("debian")).unwrap_err();
            assert!(
                matches!(e, SandboxError::InvalidConfig { field: "image", .. }),
                "{name}: {e}"
            );
        }
    }

    #[test]
    fn a_known_backend_left_out_names_its_feature() {
        for name in registry::KNOWN
            .iter()
            .filter(|k| k.info.is_none())
            .map(|k| k.name)
        {
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

    fn names(infos: Vec<&'static BackendInfo>) -> Vec<&'static str> {
        infos.into_iter().map(|i| i.name).collect()
    }

    /// The documented order (the module docs), restricted to what this build has.
    fn documented(order: &[&'static str]) -> Vec<&'static str> {
        let built: Vec<_> = registry::compiled_in().map(|i| i.name).collect();
        order
            .iter()
            .copied()
            .filter(|n| built.contains(n))
            .collect()
    }

    #[test]
    fn the_ranks_give_the_documented_order() {
        assert_eq!(
            names(preference(Lane::Fast)),
            documented(&["landlock", "bwrap", "docker", "gvisor"])
        );
        assert_eq!(
            names(preference(Lane::Strict)),
            documented(&["landlock", "bwrap", "gvisor", "docker"])
        );
        assert_eq!(
            names(preference(Lane::Trusted)),
            documented(&["bwrap", "gvisor", "docker", "landlock"])
        );
    }

    #[test]
    fn auto_never_lists_an_unconfined_backend_unless_allowed_and_an_image_means_a_container() {
        let unconfined: Vec<_> = registry::compiled_in()
            .filter(|i| i.unconfined)
            .map(|i| i.name)
            .collect();
        let containers: Vec<_> = registry::compiled_in()
            .filter(|i| i.needs_image())
            .map(|i| i.name)
            .collect();
        for lane in Lane::ALL {
            let without = names(candidates(lane, &Config::default(), false));
            assert!(
                without.iter().all(|n| !unconfined.contains(n)),
                "{without:?}"
            );
            let with = names(candidates(lane, &Config::default(), true));
            assert!(with.ends_with(&unconfined), "{with:?}");
            assert_eq!(
                names(candidates(lane, &Config::with_image("x"), true)),
                containers
            );
        }
        assert_eq!(documented(&["none"]), unconfined);
        assert_eq!(documented(&["docker"]), containers);
    }

    #[test]
    fn choice_parses_auto_and_names() {
        assert_eq!(Choice::parse("auto"), Choice::auto());
        assert_eq!(Choice::parse("x"), Choice::Named("x".into()));
        assert_eq!(Choice::auto().to_string(), "auto");
    }

    #[test]
    fn backends_passed_over_for_one_reason_are_named_together() {
        let p = |backend, reason: &str| PassedOver {
            backend,
            reason: reason.to_string(),
            refused_by_lane: false,
        };
        let e = nothing_qualified(
            Lane::Strict,
            &[
                p("a", "no tool; remedy: install it"),
                p("b", "other"),
                p("c", "no tool; remedy: install it"),
            ],
        );
        let text = e.to_string();
        assert_eq!(text.matches("install it").count(), 1, "{text}");
        assert!(
            text.contains("a, c: no tool; remedy: install it; b: other"),
            "{text}"
        );
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
        if registry::compiled_in().any(|i| !i.needs_image()) {
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

    /// The compiled-in backend that confines nothing, if any.
    fn unconfined() -> Option<&'static str> {
        registry::compiled_in()
            .find(|i| i.unconfined)
            .map(|i| i.name)
    }

    #[tokio::test]
    async fn auto_does_not_pick_the_unconfined_backend_unless_allowed() {
        let Some(none) = unconfined() else { return };
        let dir = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(dir.path(), ["true"]);
        opts.lane = Lane::Trusted;
        match select(&Choice::auto(), &opts, &Config::default()).await {
            Ok(s) => assert_ne!(s.backend.name(), none),
            Err(e) => assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}"),
        }
        let only_none = registry::compiled_in().all(|i| i.unconfined);
        let r = select(
            &Choice::Auto { allow_none: true },
            &opts,
            &Config::default(),
        )
        .await;
        if only_none {
            match r {
                Ok(s) => {
                    assert_eq!(s.backend.name(), none);
                    assert!(s.passed_over.is_empty(), "{:?}", s.passed_over);
                }
                // A host where it cannot kill a tree (no cgroup): its preflight is the
                // reason given.
                Err(e) => assert!(e.to_string().contains(&format!("{none}: ")), "{e}"),
            }
        }
    }

    #[tokio::test]
    async fn a_named_backend_is_refused_on_a_lane_it_cannot_satisfy() {
        let Some(none) = unconfined() else { return };
        let dir = tempfile::tempdir().unwrap();
        let opts = SandboxOpts::new(dir.path(), ["true"]);
        let e = select(&Choice::Named(none.into()), &opts, &Config::default())
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::PolicyRefused { .. }), "{e}");
    }

    #[tokio::test]
    async fn for_a_lane_the_unconfined_backend_is_refused_off_trusted_and_never_picked_by_auto() {
        let Some(none) = unconfined() else { return };
        let e = crate::select(none, &Config::default(), Lane::Strict)
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::PolicyRefused { .. }), "{e}");
        match crate::select(none, &Config::default(), Lane::Trusted).await {
            Ok(b) => assert_eq!(b.name(), none),
            // No cgroup here: the preflight's reason, not a silent substitute.
            Err(e) => assert!(
                matches!(e, SandboxError::Unavailable { backend, .. } if backend == none),
                "{e}"
            ),
        }
        for lane in Lane::ALL {
            if let Ok(b) = crate::select("auto", &Config::default(), lane).await {
                assert_ne!(b.name(), none);
            }
        }
    }
}
