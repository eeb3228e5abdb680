//! The `bwrap` backend: built in its own issue.
