//! Pure types and decisions: network modes, lanes, and what a lane accepts from a backend.
//!
//! Nothing here touches the host; every decision is a function of the request and a
//! [`Capability`](crate::Capability), so it is unit-tested exhaustively.

mod allowlist;
mod lane;
mod network;

pub use allowlist::{
    host_local, normalize_name, Allowlist, Decision, HostMatch, HostPattern, PatternError, Target,
    DEFAULT_PORTS, NOT_IN_ALLOWLIST,
};
pub use lane::{check_lane, Lane, LaneRequest};
pub use network::NetworkMode;
