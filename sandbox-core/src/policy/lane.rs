//! Lanes: the trust tiers a host picks for a command. What each accepts from a backend is
//! decided in [`crate::admission`], which holds the table.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A trust tier. See the module docs for the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// Exact enforcement of everything asked, plus process isolation and a network state
    /// of the command's own. The default.
    #[default]
    Strict,
    /// Exact enforcement of everything asked, without process isolation; where no network
    /// namespace can be made (a default container or pod), network `none` with the host's
    /// or pod's `/proc/net` readable, recorded in the outcome's policy.
    Fast,
    /// Accepts documented over-grants, up to no confinement at all.
    Trusted,
}

impl Lane {
    /// The name used on the command line and in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Fast => "fast",
            Self::Trusted => "trusted",
        }
    }

    /// All lanes, strictest first.
    pub const ALL: [Lane; 3] = [Lane::Strict, Lane::Fast, Lane::Trusted];

    pub(crate) fn accepts_over_grant(self) -> bool {
        matches!(self, Self::Trusted)
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Lane {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Self::Strict),
            "fast" => Ok(Self::Fast),
            "trusted" => Ok(Self::Trusted),
            other => Err(format!(
                "unknown lane `{other}` (expected strict, fast or trusted)"
            )),
        }
    }
}
