//! A [`Spec`] made into a kernel ruleset, in the parent, before the fork.
//!
//! The `landlock` crate builds it in hard-requirement mode: a right, scope or rule the
//! kernel cannot take is an error, never a silent best effort. What is handed to the child
//! is only the ruleset's descriptor (`Option<OwnedFd>::from(RulesetCreated)`); the child
//! applies it with one `landlock_restrict_self` call (see [`crate::child`]).

use std::os::fd::OwnedFd;

use landlock::{
    CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
};

use crate::error::Error;
use crate::ruleset::Spec;

/// Create the kernel ruleset for `spec`; its descriptor is close-on-exec.
pub(crate) fn create(spec: &Spec) -> Result<OwnedFd, Error> {
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
        let fd = PathFd::new(&rule.path).map_err(|e| Error::Stat {
            path: rule.path.clone(),
            source: std::io::Error::other(e),
        })?;
        created = created.add_rule(PathBeneath::new(fd, rule.access))?;
    }
    // In hard-requirement mode a ruleset is only created on a kernel that enforces it, so
    // there is always a descriptor; without one, refuse rather than run unconfined.
    Option::<OwnedFd>::from(created).ok_or(Error::NotEnabled)
}
