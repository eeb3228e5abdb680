//! The `landlock` backend: built in its own issue.
