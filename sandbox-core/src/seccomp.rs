//! The system-call filter shared by the bwrap and landlock backends, so that the kernel
//! surface denied is the same on both.
//!
//! (Filled in by the seccomp work: see `docs/`.)
