//! Pure types and decisions at the bottom of the contract: network modes, lanes, the
//! egress allowlist and request rules. What a lane accepts from a backend is [`crate::admission`].
//!
//! Nothing here touches the host, and nothing here names a backend's capability.

mod allowlist;
mod lane;
mod network;
pub mod refused;
mod request;

pub use allowlist::{
    normalize_name, Allowlist, Decision, HostMatch, HostPattern, PatternError, Target,
    DEFAULT_PORTS, NOT_IN_ALLOWLIST,
};
pub use lane::Lane;
pub use network::NetworkMode;
pub use refused::{canonical, refused, Refused};
pub use request::{
    canonical_path, CanonicalPath, PathRefusal, RequestRule, RuleError, MAX_PATTERN_LEN, METHODS,
};
