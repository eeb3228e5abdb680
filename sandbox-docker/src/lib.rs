//! The `docker` backend: built in its own issue.
