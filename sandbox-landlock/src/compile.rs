//! A [`Spec`] made into a kernel ruleset, in the parent, before the fork; and the cached
//! first layer of a root host.
//!
//! The `landlock` crate builds each ruleset in hard-requirement mode: a right, scope or
//! rule the kernel cannot take is an error, never a silent best effort. What is handed to
//! the child is only the ruleset's descriptor (`Option<OwnedFd>::from(RulesetCreated)`);
//! the child applies it with one `landlock_restrict_self` call (see [`crate::child`]).
//!
//! # The two layers of a root host
//!
//! A root host's command that keeps uid 0 (where its workspace cannot be handed to an
//! unprivileged id, see `sandbox_host::handover`) may read every root-owned file by its
//! mode (see [`crate::system`]). It therefore gets two landlock layers, which the kernel
//! intersects:
//!
//! 1. [`RootLayer`]: read rights only, granted as an unprivileged user sees the system
//!    (everything whole, but `/usr`, `/etc`, the other system directories and the named
//!    read-only paths only in their world-readable parts). Some 200 rules, since `/etc`
//!    is split around `shadow` and the like. The walk behind them is made once per set of
//!    read-only paths and reused by every run for [`ETC_REFRESH`]; each run's layer is
//!    built from it with the run's own rules added (below), so a run pays the rules, not
//!    the walk.
//! 2. The run's own layer, the same as for an unprivileged host: a dozen rules.
//!
//! Layer 1 also grants `REFER` (renames and links across directories) on the run's
//! writable grants, and only there ([`ruleset::refer_rules`]): landlock refuses any
//! reparenting a layer does not grant on both sides, so without it every cross-directory
//! rename in the workspace fails with `EXDEV`. So every run's layer 1 is the cached walk's
//! rules plus the run's own (its `REFER` rules, and its grants beyond the walk: a workspace
//! in a top-level directory made after the layer was built, a named path inside `/etc`),
//! built for that run alone: a rule holds its path by descriptor, and a workspace made
//! again at the same path is another directory.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use landlock::{
    CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};

use crate::error::Error;
use crate::fsview::{FsView, HostFs};
use crate::ruleset::{self, Spec};
use crate::system::{self, ETC_REFRESH};

/// Create the kernel ruleset for `spec`; its descriptor is close-on-exec. Every rule is
/// required: a path that cannot be opened is an error.
pub(crate) fn create(spec: &Spec) -> Result<OwnedFd, Error> {
    build(spec, false)
}

/// `spec` as a ruleset, where `lenient` (a root host's read layer, made from a directory
/// listing) skips a path that vanished since it was listed and lets a rule's directory-only
/// rights go if the path became a file: both only ever grant less.
fn build(spec: &Spec, lenient: bool) -> Result<OwnedFd, Error> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(spec.handled_fs)?;
    if !spec.handled_net.is_empty() {
        ruleset = ruleset.handle_access(spec.handled_net)?;
    }
    if !spec.scopes.is_empty() {
        ruleset = ruleset.scope(spec.scopes)?;
    }
    let mut created = ruleset.create()?;
    for rule in &spec.rules {
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            Err(_) if lenient && !rule.path.exists() => continue,
            Err(e) => {
                return Err(Error::Stat {
                    path: rule.path.clone(),
                    source: std::io::Error::other(e),
                })
            }
        };
        let mut beneath = PathBeneath::new(fd, rule.access);
        if lenient {
            beneath = beneath.set_compatibility(CompatLevel::BestEffort);
        }
        created = created.add_rule(beneath)?;
    }
    // In hard-requirement mode a ruleset is only created on a kernel that enforces it, so
    // there is always a descriptor; without one, refuse rather than run unconfined.
    Option::<OwnedFd>::from(created).ok_or(Error::NotEnabled)
}

/// The first layer of a root host (see the module docs).
#[derive(Debug)]
pub(crate) struct RootLayer {
    pub spec: Spec,
    /// The named read-only paths walked into it.
    read_only: Vec<PathBuf>,
    built: Instant,
}

/// How many layers (one per set of named read-only paths) are kept.
const CACHED_LAYERS: usize = 8;

impl RootLayer {
    fn build(fs: &dyn FsView, abi: ABI, read_only: &[PathBuf]) -> Result<Self, Error> {
        let (roots, walked) = system::host_walked(fs, read_only);
        let view = system::unprivileged_view(fs, &roots, &walked);
        let spec = ruleset::read_layer(&view, abi);
        Ok(Self {
            spec,
            read_only: read_only.to_vec(),
            built: Instant::now(),
        })
    }

    /// The layer for a run with `run`'s grants and `read_only` paths: the walk's rules (cached
    /// per set of read-only paths, for [`ETC_REFRESH`]) and the run's own, built for it.
    pub fn for_run(
        abi: ABI,
        run: &Spec,
        read_only: &[PathBuf],
    ) -> Result<(Arc<OwnedFd>, usize), Error> {
        static CACHE: Mutex<Vec<Arc<RootLayer>>> = Mutex::new(Vec::new());
        let layer = {
            let mut cache = CACHE
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            cache.retain(|l| l.spec.abi == abi && l.built.elapsed() < ETC_REFRESH);
            match cache.iter().find(|l| l.read_only == read_only) {
                Some(l) => l.clone(),
                None => {
                    let l = Arc::new(Self::build(&HostFs, abi, read_only)?);
                    if cache.len() >= CACHED_LAYERS {
                        cache.remove(0);
                    }
                    cache.push(l.clone());
                    l
                }
            }
        };
        let mut spec = layer.spec.clone();
        spec.rules.extend(ruleset::refer_rules(run));
        spec.rules.extend(ruleset::uncovered(&layer.spec, run));
        Ok((Arc::new(build(&spec, true)?), spec.rules.len()))
    }
}
