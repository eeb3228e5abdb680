//! The cases, one module per area. Each is a plain async function with a one-line doc;
//! the host side judges the effect wherever it can.

pub mod api;
pub mod changes;
pub mod denials;
pub mod egress;
pub mod env;
pub mod fd;
pub mod fs;
pub mod hostwalk;
pub mod kernel;
pub mod limits;
pub mod net;
pub mod proc;
pub mod realworld;
pub mod root;
pub mod scale;
pub mod secrets;

/// The result of a case.
pub type CaseResult = Result<(), crate::Failure>;
