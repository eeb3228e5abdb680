//! The backend's own errors, each converted into the contract's [`SandboxError`] with its
//! cause and remedy.

use std::io;
use std::path::PathBuf;

use landlock::ABI;
use sandbox_core::SandboxError;

use crate::NAME;

/// Why this backend cannot run a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Landlock is compiled in but not in the kernel's list of active security modules.
    #[error("landlock is built into this kernel but not enabled")]
    NotEnabled,
    /// The kernel has no landlock at all.
    #[error("this kernel has no landlock (built without CONFIG_SECURITY_LANDLOCK)")]
    NotImplemented,
    /// The kernel's landlock ABI is older than the request needs.
    #[error("the kernel's landlock ABI is {kernel}, and {needed} is needed: {why}")]
    AbiTooOld {
        kernel: ABI,
        needed: ABI,
        why: &'static str,
    },
    /// No seccomp filters in this kernel.
    #[error("this kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)")]
    NoSeccomp,
    /// A writable path's rule would reach a carve-out.
    #[error(
        "the writable path {} contains the read-only carve-out {}; landlock rules only add \
         access down a tree, so the carve-out cannot stay read-only",
        writable.display(),
        carveout.display()
    )]
    CarveoutUnderWritable {
        writable: PathBuf,
        carveout: PathBuf,
    },
    /// A writable path inside a carve-out: contradictory.
    #[error(
        "the writable path {} is inside the read-only carve-out {}",
        writable.display(),
        carveout.display()
    )]
    WritableInCarveout {
        writable: PathBuf,
        carveout: PathBuf,
    },
    /// A file in a carve-out has another name that landlock would judge on its own.
    #[error(
        "{} in the read-only carve-out {} has {links} hard links; landlock judges the name \
         used, so another name in a writable place could change it",
        file.display(),
        carveout.display()
    )]
    HardLinked {
        carveout: PathBuf,
        file: PathBuf,
        links: u64,
    },
    /// A hidden credential path under a grant other than the toolchain grant split around
    /// it: rules only add access, so that grant would show it.
    #[error(
        "{} would show the credentials {}, which must stay unreadable; landlock rules only \
         add access down a tree",
        grant.display(),
        hidden.display()
    )]
    HiddenUnderGrant { grant: PathBuf, hidden: PathBuf },
    /// A path of the policy could not be examined.
    #[error("cannot examine {}: {source}", path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The kernel refused the ruleset.
    #[error("building the landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
}

fn remedy_kernel() -> &'static str {
    "run a kernel with landlock ABI 3 or newer (Linux 6.2+; 6.12+ when the host runs as \
     root), e.g. Debian's bookworm-backports kernel, or choose another backend (`sandbox \
     doctor` lists those this host can run)"
}

impl From<Error> for SandboxError {
    fn from(e: Error) -> Self {
        let reason = e.to_string();
        match e {
            Error::NotEnabled => SandboxError::unavailable(
                NAME,
                reason,
                "add `landlock` to the kernel's `lsm=` boot parameter (e.g. \
                 lsm=landlock,lockdown,yama,integrity,apparmor,bpf) and reboot, or choose \
                 another backend (`sandbox doctor` lists those this host can run)",
            ),
            Error::NotImplemented | Error::AbiTooOld { .. } => {
                SandboxError::unavailable(NAME, reason, remedy_kernel())
            }
            Error::NoSeccomp => SandboxError::unavailable(
                NAME,
                reason,
                "run a kernel built with CONFIG_SECCOMP_FILTER (every distribution kernel is)",
            ),
            Error::CarveoutUnderWritable { .. } | Error::HardLinked { .. } => {
                SandboxError::NotSupported {
                    backend: NAME,
                    feature: reason,
                    remedy: "drop the overlapping writable path or break the hard link \
                             (copy the file), or choose a backend that binds carve-outs \
                             read-only in a mount namespace of its own (`sandbox doctor` \
                             lists the backends this host can run)"
                        .into(),
                }
            }
            Error::WritableInCarveout { .. } => SandboxError::invalid("writable_paths", reason),
            Error::HiddenUnderGrant { .. } => SandboxError::NotSupported {
                backend: NAME,
                feature: reason,
                remedy: "grant a directory that does not hold the credentials (a narrower \
                         workspace or path), or choose a backend that hides them with a mount \
                         (`sandbox doctor` lists the backends this host can run)"
                    .into(),
            },
            Error::Stat { source, .. } => SandboxError::io(reason, source),
            Error::Ruleset(inner) => {
                SandboxError::io("building the landlock ruleset", io::Error::other(inner))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_or_missing_landlock_is_unavailable_with_the_abi_and_a_remedy() {
        let e: SandboxError = Error::AbiTooOld {
            kernel: ABI::V2,
            needed: ABI::V3,
            why: "truncate",
        }
        .into();
        let text = e.to_string();
        assert!(matches!(e, SandboxError::Unavailable { backend: NAME, .. }));
        assert!(
            text.contains("ABI is 2") && text.contains("3 is needed"),
            "{text}"
        );
        assert!(text.contains("6.2"), "{text}");
        let e: SandboxError = Error::NotEnabled.into();
        assert!(e.to_string().contains("lsm="), "{e}");
        let e: SandboxError = Error::NotImplemented.into();
        assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}");
        let e: SandboxError = Error::NoSeccomp.into();
        assert!(e.to_string().contains("CONFIG_SECCOMP_FILTER"), "{e}");
    }

    #[test]
    fn carveouts_that_cannot_hold_are_not_supported_or_invalid() {
        let e: SandboxError = Error::HardLinked {
            carveout: "/ws/.git".into(),
            file: "/ws/.git/hooks/x".into(),
            links: 2,
        }
        .into();
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
        assert!(e.to_string().contains("hard link"), "{e}");
        let e: SandboxError = Error::WritableInCarveout {
            writable: "/ws/.git/x".into(),
            carveout: "/ws/.git".into(),
        }
        .into();
        assert!(
            matches!(
                e,
                SandboxError::InvalidConfig {
                    field: "writable_paths",
                    ..
                }
            ),
            "{e}"
        );
    }
}
