//! The crate downstream users depend on: the core types, and each backend behind a cargo
//! feature of its name.

pub use sandbox_core::*;
#[cfg(feature = "none")]
pub use sandbox_none as none;
