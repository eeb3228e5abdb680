//! `doctor`: what each compiled-in backend can do on this host, and what to do where it
//! cannot.
//!
//! Every backend is constructed and preflighted (which runs a trivial command the real
//! way); its capability is shown as data, field by field, together with the lanes a
//! default request passes on. Nothing here decides by a backend's name: the report reads
//! the same [`Capability`] the lane policy reads, so what `doctor` says a backend enforces
//! is what `run` will accept from it.

use std::fmt;

use serde::Serialize;

use sandbox_core::registry::BackendInfo;
use sandbox_core::{Capability, Enforcement, Lane, SandboxError};

use crate::registry;
use crate::select::{self, Config};

/// The whole report.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct DoctorReport {
    /// Facts about this host that decide what backends can do.
    pub host: HostFacts,
    /// One entry per compiled-in backend, in [`registry::KNOWN`] order.
    pub backends: Vec<BackendReport>,
    /// What `auto` picks on each lane for a default request (no network, no extra paths)
    /// when no image is named.
    pub auto: Vec<AutoPick>,
}

/// Facts about this host.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct HostFacts {
    /// The kernel release (`uname -r`), if readable.
    pub kernel: Option<String>,
    /// Whether this process runs as root; a lane then needs a backend that drops root.
    pub root: bool,
    /// The backends compiled into this build.
    pub compiled_in: Vec<&'static str>,
    /// An overlay can be mounted here as this user (tried on a scratch directory): a
    /// process backend's copy-on-write layer (`change_layer: overlay`) is then an overlay
    /// on a workspace whose filesystem allows it, and a copy otherwise.
    pub overlay: bool,
    /// Inside a container that withholds namespaces or masks `/proc`: what it withholds
    /// and what it must allow for `strict` (`None` elsewhere).
    pub container: Option<String>,
}

/// One backend on this host.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct BackendReport {
    /// The backend.
    pub name: &'static str,
    /// Its preflight passed here.
    pub works: bool,
    /// It could be checked at all: false when it lacks configuration only the caller can
    /// give (a container backend without an image).
    pub checked: bool,
    /// The version of what it relies on (bwrap's version, the landlock ABI, the engine).
    pub version: Option<String>,
    /// Facts its preflight found.
    pub details: Vec<String>,
    /// Why it does not work here.
    pub problem: Option<String>,
    /// What to do about it.
    pub remedy: Option<String>,
    /// What it can enforce here; absent when it could not even be constructed.
    pub capability: Option<Capability>,
    /// The lanes on which it runs a default request (network `none`, no extra paths, the
    /// default process cap).
    pub lanes: Vec<Lane>,
    /// It runs every command in a container image the caller names (`--image`).
    pub needs_image: bool,
    /// It confines nothing (the registry's `unconfined`).
    pub unconfined: bool,
    /// An ordinary user runs it without root-equivalent access (the registry's
    /// `unprivileged`): `SANDBOX_TEST_REQUIRE=unprivileged` requires it where it confines.
    pub unprivileged: bool,
    /// The container image it was checked with (a backend that runs one only).
    pub image: Option<String>,
}

/// What `auto` picks on one lane.
#[derive(Clone, Debug, Serialize)]
pub struct AutoPick {
    /// The lane.
    pub lane: Lane,
    /// The backend, or none when no working backend runs a default request on it.
    pub backend: Option<&'static str>,
    /// Why: the lane's `auto` order, and for each backend before the pick why it was
    /// passed over.
    pub why: String,
}

/// Why `auto` takes `pick` on `lane`: the order, and what each earlier backend lacked.
fn why(
    lane: Lane,
    order: &[&'static str],
    backends: &[BackendReport],
    pick: Option<&str>,
) -> String {
    let mut passed = Vec::new();
    for name in order {
        if Some(*name) == pick {
            break;
        }
        let reason = match backends.iter().find(|b| b.name == *name) {
            None => "not compiled in".to_string(),
            Some(b) if !b.checked => b.problem.clone().unwrap_or_else(|| "not checked".into()),
            Some(b) if !b.works => format!(
                "does not work here: {}",
                b.problem.as_deref().unwrap_or("its preflight failed")
            ),
            Some(b) if b.image.is_some() => "works only with the image named to doctor".into(),
            Some(_) => format!("refuses a default request on `{lane}`"),
        };
        passed.push(format!("{name}: {reason}"));
    }
    let head = match pick {
        Some(p) => format!(
            "first of the `{lane}` order ({}) that works here and runs a default request \
             (network none, the default limits) on `{lane}`: {p}",
            order.join(", ")
        ),
        None => format!(
            "nothing of the `{lane}` order ({}) works here and runs a default request on \
             `{lane}`",
            order.join(", ")
        ),
    };
    if passed.is_empty() {
        head
    } else {
        format!("{head}; passed over: {}", passed.join("; "))
    }
}

/// Examine every compiled-in backend on this host.
pub async fn doctor(config: &Config) -> DoctorReport {
    let is_root = sandbox_core::host_is_root();
    let mut backends = Vec::new();
    for info in registry::compiled_in() {
        backends.push(examine(info, config, is_root).await);
    }
    let auto = Lane::ALL
        .iter()
        .map(|&lane| {
            // As `sandbox run` without an image: a backend that works only with the
            // image named here is not what it would pick.
            let order: Vec<&'static str> = select::candidates(lane, &Config::default(), false)
                .into_iter()
                .map(|c| c.name)
                .collect();
            let backend = order.iter().copied().find(|c| {
                backends.iter().any(|b| {
                    b.name == *c && b.works && b.image.is_none() && b.lanes.contains(&lane)
                })
            });
            AutoPick {
                lane,
                backend,
                why: why(lane, &order, &backends, backend),
            }
        })
        .collect();
    // The real trial, as for the backends (a forked child mounts one, about a
    // millisecond): no run asks this before it needs a layer.
    let overlay = overlay_supported();
    DoctorReport {
        host: HostFacts {
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            root: is_root,
            compiled_in: registry::compiled_in().map(|i| i.name).collect(),
            overlay,
            container: crate::select::container_strict_remedy(),
        },
        backends,
        auto,
    }
}

async fn examine(info: &'static BackendInfo, config: &Config, is_root: bool) -> BackendReport {
    let name = info.name;
    let mut report = BackendReport {
        name,
        works: false,
        checked: true,
        version: None,
        details: Vec::new(),
        problem: None,
        remedy: None,
        capability: None,
        lanes: Vec::new(),
        needs_image: info.needs_image(),
        unconfined: info.unconfined,
        unprivileged: info.unprivileged,
        image: None,
    };
    // An image is for a backend that runs one; the others are examined without it (they
    // would refuse it).
    let own = if info.needs_image() {
        config.clone()
    } else {
        Config::default()
    };
    report.image = own.image.clone();
    let backend = match info.build(&own) {
        Ok(b) => b,
        Err(e) => {
            if let Some(first) = engine_problem(info, &e).await {
                report.set_problem(&first);
                return report;
            }
            report.set_problem(&e);
            return report;
        }
    };
    let cap = backend.capability();
    report.lanes = default_lanes(name, &cap, is_root);
    report.capability = Some(cap);
    match backend.sandbox().preflight().await {
        Ok(p) => {
            report.works = true;
            report.version = p.version;
            report.details = p.details;
        }
        Err(e) => report.set_problem(&e),
    }
    report
}

/// An image name no engine has: a backend that runs images is built with it when none was
/// named, so that its preflight still says whether its engine can be reached at all.
const NO_IMAGE: &str = "sandbox-doctor-no-image-named:absent";

/// For a backend that runs images and was given none (`e` says so): what stops it before
/// any image matters (an engine this user may not reach, one that cannot enforce the
/// limits), which a person must hear first: "name an image" would send them after the
/// wrong thing. `None` when only the image is missing.
async fn engine_problem(info: &'static BackendInfo, e: &SandboxError) -> Option<SandboxError> {
    if !info.needs_image() || !matches!(e, SandboxError::InvalidConfig { field: "image", .. }) {
        return None;
    }
    let backend = info.build(&Config::with_image(NO_IMAGE)).ok()?;
    match backend.sandbox().preflight().await {
        Err(p) if !p.to_string().contains(NO_IMAGE) => Some(p),
        _ => None,
    }
}

/// The lanes that accept a default request from a backend with `cap`.
fn default_lanes(name: &'static str, cap: &Capability, is_root: bool) -> Vec<Lane> {
    Lane::ALL
        .into_iter()
        .filter(|&lane| select::default_request_fits(lane, name, cap, is_root).is_ok())
        .collect()
}

impl BackendReport {
    fn set_problem(&mut self, e: &SandboxError) {
        let (problem, remedy) = match e {
            SandboxError::InvalidConfig { field: "image", .. } => {
                self.checked = false;
                (
                    "no container image named, and it runs every command in one".to_string(),
                    "name an image the engine has: `sandbox doctor --image IMAGE` (`sandbox \
                     image --from-host` builds one of this host's system directories)"
                        .to_string(),
                )
            }
            SandboxError::Unavailable { reason, remedy, .. } => (reason.clone(), remedy.clone()),
            SandboxError::NotSupported {
                feature, remedy, ..
            } => (format!("cannot enforce {feature}"), remedy.clone()),
            other => (
                other.to_string(),
                "see the error; `sandbox doctor --json` has the details".to_string(),
            ),
        };
        self.problem = Some(problem);
        self.remedy = Some(remedy);
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn enforcement(e: Enforcement) -> String {
    match e {
        Enforcement::Exact => "exact".into(),
        Enforcement::OverGrant(gives) => format!("over-grant ({gives})"),
        Enforcement::Unsupported => "no".into(),
    }
}

fn write_capability(f: &mut fmt::Formatter<'_>, c: &Capability) -> fmt::Result {
    writeln!(
        f,
        "    filesystem  writes confined: {}, reads confined: {}, read-only carve-outs: {}, snapshot: {}, change layer: {}",
        yes_no(c.confine_writes),
        yes_no(c.confine_reads),
        yes_no(c.readonly_carveouts),
        yes_no(c.snapshot),
        c.change_layer.map_or("no", |m| m.as_str()),
    )?;
    writeln!(
        f,
        "    network     none: {}{}, loopback: {}, proxy: {}, full: {}{}",
        enforcement(c.network_none),
        if c.network_state_private || !c.network_none.is_exact() {
            ""
        } else {
            " (the host's or pod's /proc/net readable)"
        },
        enforcement(c.network_loopback),
        enforcement(c.network_proxy),
        enforcement(c.network_full),
        match (c.network_full, c.full_network_is_host) {
            (Enforcement::Unsupported, _) => "",
            (_, true) => " (the host's own network, its loopback services included)",
            (_, false) => " (not the host's loopback services)",
        },
    )?;
    writeln!(
        f,
        "    ports       host ports: {}, publish: {}, secrets: {}",
        yes_no(c.host_ports),
        yes_no(c.publish),
        yes_no(c.secrets),
    )?;
    writeln!(
        f,
        "    processes   tree kill: {}, isolated from the host's: {}, host root dropped: {}",
        yes_no(c.tree_kill),
        yes_no(c.process_isolation),
        yes_no(c.drops_host_root),
    )?;
    writeln!(
        f,
        "    limits      memory: {}, cpu time: {}, processes: {}, open files: {}",
        yes_no(c.memory_limit),
        yes_no(c.cpu_limit),
        yes_no(c.process_limit),
        yes_no(c.open_files_limit),
    )?;
    writeln!(
        f,
        "    status      signals told apart from exit codes: {}, out-of-memory reported: {}",
        yes_no(c.signal_status),
        yes_no(c.oom_status),
    )?;
    let kinds = c.reports_denials.names();
    writeln!(
        f,
        "    denials     reported: {}",
        if kinds.is_empty() {
            "none (refused operations are not listed in the outcome)".to_string()
        } else {
            kinds.join(", ")
        },
    )
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.host;
        writeln!(
            f,
            "host: kernel {}, running as {}, backends compiled in: {}; an overlay can{} be \
             mounted here (a change layer `overlay` is {})",
            h.kernel.as_deref().unwrap_or("unknown"),
            if h.root { "root" } else { "an ordinary user" },
            h.compiled_in.join(", "),
            if h.overlay { "" } else { "not" },
            if h.overlay {
                "an overlay where the workspace's filesystem allows one, else a copy"
            } else {
                "a copy"
            },
        )?;
        if let Some(c) = &h.container {
            writeln!(
                f,
                "container: no namespace can be made here, so `fast` runs without them (the \
                 pod's /proc/net readable, recorded) and `strict` is refused; for `strict`: {c}"
            )?;
        }
        for b in &self.backends {
            writeln!(f)?;
            if b.works {
                write!(f, "{}: works", b.name)?;
                if let Some(v) = &b.version {
                    write!(f, " ({v})")?;
                }
                writeln!(f)?;
            } else {
                if b.checked {
                    writeln!(f, "{}: does not work here", b.name)?;
                } else {
                    writeln!(f, "{}: not checked", b.name)?;
                }
                if let Some(p) = &b.problem {
                    writeln!(f, "    problem     {p}")?;
                }
                if let Some(r) = &b.remedy {
                    writeln!(f, "    remedy      {r}")?;
                }
            }
            if let Some(image) = &b.image {
                writeln!(f, "    image       {image}")?;
            }
            for d in &b.details {
                writeln!(f, "    note        {d}")?;
            }
            if let Some(c) = &b.capability {
                write_capability(f, c)?;
                let lanes: Vec<&str> = b.lanes.iter().map(|l| l.as_str()).collect();
                writeln!(
                    f,
                    "    lanes       {}",
                    if lanes.is_empty() {
                        "none (a default request is refused on every lane)".to_string()
                    } else {
                        lanes.join(", ")
                    }
                )?;
            }
        }
        writeln!(f)?;
        let picks: Vec<String> = self
            .auto
            .iter()
            .map(|p| format!("{} -> {}", p.lane, p.backend.unwrap_or("nothing")))
            .collect();
        writeln!(f, "auto picks: {}", picks.join(", "))?;
        for p in &self.auto {
            writeln!(f, "    {:<11} {}", p.lane.as_str(), p.why)?;
        }
        Ok(())
    }
}

impl DoctorReport {
    /// True when some backend other than `none` works here: `sandbox run` can confine.
    pub fn can_confine(&self) -> bool {
        self.auto.iter().any(|p| p.backend.is_some())
    }
}

/// Whether an overlay can be mounted here (the host crate's trial). A build with no backend
/// has no host crate and makes no layer, so it says no.
fn overlay_supported() -> bool {
    #[cfg(feature = "host")]
    {
        sandbox_host::overlay_supported()
    }
    #[cfg(not(feature = "host"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_compiled_in_backend_is_reported_with_a_verdict() {
        let r = doctor(&Config::default()).await;
        let names: Vec<_> = r.backends.iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            registry::compiled_in().map(|i| i.name).collect::<Vec<_>>()
        );
        for b in &r.backends {
            // A backend either works or says why not and what to do.
            assert!(
                b.works || (b.problem.is_some() && b.remedy.is_some()),
                "{b:?}"
            );
        }
        assert_eq!(r.auto.len(), 3);
        let text = r.to_string();
        for p in &r.auto {
            // Each pick says why, naming the lane's order.
            assert!(p.why.contains(&format!("`{}` order", p.lane)), "{}", p.why);
            assert!(text.contains(&p.why), "{text}");
        }
        for b in &r.backends {
            assert!(text.contains(&format!("{}: ", b.name)), "{text}");
        }
    }

    #[tokio::test]
    async fn the_unconfined_backend_runs_a_default_request_only_on_trusted_and_auto_never_picks_it()
    {
        let Some(info) = registry::compiled_in().find(|i| i.unconfined) else {
            return;
        };
        let r = doctor(&Config::default()).await;
        let none = r.backends.iter().find(|b| b.name == info.name).unwrap();
        assert_eq!(none.lanes, [Lane::Trusted]);
        let cap = none.capability.as_ref().unwrap();
        assert!(!cap.confine_writes && !cap.confine_reads);
        assert!(r.auto.iter().all(|p| p.backend != Some(info.name)));
        let text = r.to_string();
        assert!(
            text.contains(&format!(
                "{}: over-grant (the host's whole network)",
                info.name
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_backend_that_runs_an_image_is_not_checked_without_one_and_says_how() {
        let r = doctor(&Config::default()).await;
        for info in registry::compiled_in().filter(|i| i.needs_image()) {
            let b = r.backends.iter().find(|b| b.name == info.name).unwrap();
            assert!(!b.works && !b.checked, "{b:?}");
            assert!(b.remedy.as_deref().unwrap().contains("--image"));
            assert!(r
                .to_string()
                .contains(&format!("{}: not checked", info.name)));
        }
    }
}
