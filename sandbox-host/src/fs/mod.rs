//! The host's files, walked without following a link the command could have planted: the
//! race-free tree walk ([`tree`]), the bounded copy made with it ([`files`]), and the
//! descriptor-relative calls both and the change layer use ([`fsx`]).

pub mod files;
pub(crate) mod fsx;
pub mod tree;
