//! The one list of backends: every backend this crate knows, each behind the cargo feature
//! of its name.
//!
//! Selection, `doctor`, the command line's `--backend` values, the conformance suite,
//! `cargo xtask conformance` (through the suite's `--list-backends`) and the bench read this
//! list; nothing else in the workspace names a backend. What a backend is and does comes
//! from its crate's [`BackendInfo`]; this list only adds whether this build has it.
//!
//! Adding a backend is one line here, in [`with_backend_list`] (and its feature in
//! `Cargo.toml`).

pub use sandbox_core::registry::{
    AutoRank, BackendConfig, BackendInfo, BoxFuture, BuildFromHostFn, BuildImageFn, CostTargets,
    DirectArgsFn, DirectFn, DirectRun, HostImage, HostKey, HostObjects, ImageSupport,
};
use sandbox_core::SandboxError;

/// A backend this crate knows, compiled in or not.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    /// Its name, which is also the cargo feature that brings it in.
    pub name: &'static str,
    /// What its crate says about it, when this build has it.
    pub info: Option<&'static BackendInfo>,
}

impl Known {
    /// The cargo feature of this crate that brings the backend in.
    pub fn feature(&self) -> &'static str {
        self.name
    }

    /// The backend, or the error that says which feature brings it in.
    pub fn compiled(&self) -> Result<&'static BackendInfo, SandboxError> {
        self.info.ok_or_else(|| {
            SandboxError::unavailable(
                self.name,
                "it is not compiled into this build of the sandbox crate",
                format!(
                    "rebuild with the cargo feature `{feature}` (for example \
                     `cargo install sandbox --features {feature}`), or choose another backend",
                    feature = self.feature()
                ),
            )
        })
    }
}

/// The list: for each backend, its name (the cargo feature that brings it in), the name
/// its crate is re-exported under, and the crate. A backend the build left out keeps its
/// name, so naming it gets "enable feature X" rather than "unknown backend".
macro_rules! backends {
    ($($feature:literal => $alias:ident: $krate:ident,)*) => {
        /// Every backend, in the order `doctor`, the matrix and the bench show them.
        pub static KNOWN: &[Known] = &[$(
            Known {
                name: $feature,
                info: {
                    #[cfg(feature = $feature)]
                    {
                        Some(&$krate::INFO)
                    }
                    #[cfg(not(feature = $feature))]
                    {
                        None
                    }
                },
            },
        )*];

        $(
            #[cfg(feature = $feature)]
            pub use $krate as $alias;
        )*
    };
}

/// Hands the list to the macro `$m`, as `"feature" => alias: crate,` lines: the one place
/// the list is written. This module expands it with `backends!`; the command's integration
/// tests expand it into one test module per backend, so that they list no backend either.
#[doc(hidden)]
#[macro_export]
macro_rules! with_backend_list {
    ($m:ident) => {
        $m! {
            "none" => none: sandbox_none,
            "bwrap" => bwrap: sandbox_bwrap,
            "landlock" => landlock: sandbox_landlock,
            "docker" => docker: sandbox_docker,
            "gvisor" => gvisor: sandbox_gvisor,
        }
    };
}

with_backend_list!(backends);

/// The known backend called `name`.
pub fn known(name: &str) -> Option<&'static Known> {
    KNOWN.iter().find(|k| k.name == name)
}

/// The backends compiled into this build, in [`KNOWN`] order.
pub fn compiled_in() -> impl Iterator<Item = &'static BackendInfo> {
    KNOWN.iter().filter_map(|k| k.info)
}

/// The names of every known backend, in [`KNOWN`] order.
pub fn names() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().map(|k| k.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_is_the_crate_of_its_name_and_names_are_unique() {
        for k in KNOWN {
            if let Some(info) = k.info {
                assert_eq!(info.name, k.name, "the feature and the crate disagree");
            }
            assert_eq!(names().filter(|n| *n == k.name).count(), 1, "{}", k.name);
            assert_ne!(k.name, crate::select::AUTO);
        }
    }

    #[test]
    fn a_backend_left_out_names_its_feature() {
        for k in KNOWN.iter().filter(|k| k.info.is_none()) {
            match k.compiled().unwrap_err() {
                SandboxError::Unavailable {
                    backend, remedy, ..
                } => {
                    assert_eq!(backend, k.name);
                    assert!(
                        remedy.contains(&format!("--features {}", k.name)),
                        "{remedy}"
                    );
                }
                other => panic!("{}: {other}", k.name),
            }
        }
    }

    #[test]
    fn ranks_on_a_lane_are_unique_so_the_order_is_not_an_accident() {
        for lane in sandbox_core::Lane::ALL {
            let mut ranks: Vec<u8> = compiled_in().filter_map(|i| i.auto_rank.on(lane)).collect();
            let n = ranks.len();
            ranks.sort_unstable();
            ranks.dedup();
            assert_eq!(ranks.len(), n, "two backends share a rank on {lane}");
        }
    }
}
