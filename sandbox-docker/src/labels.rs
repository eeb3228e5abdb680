//! The labels that mark containers and volumes as ours, and who made them.
//!
//! A host that crashes mid-run leaves its container behind; [`cleanup_leftovers`] finds
//! them by [`LABEL`]. Removing every labelled container would also kill the live runs of
//! other processes sharing the engine, so each object also names its owner: the machine,
//! and the process by pid and start time (a pid alone may have been reused).
//!
//! [`cleanup_leftovers`]: crate::cleanup_leftovers

use std::collections::HashMap;

/// The label on every container and volume this backend makes.
pub const LABEL: &str = "sandbox.managed-by";
/// The value of [`LABEL`].
pub const LABEL_VALUE: &str = "sandbox-docker";
/// Who made it: `MACHINE/PID/STARTTIME`.
pub const LABEL_OWNER: &str = "sandbox.owner";
/// What it is for: `run` (the command's container), `loader` (uploads the copies),
/// `preflight`, or `volume`.
pub const LABEL_ROLE: &str = "sandbox.role";

/// This process, as written in [`LABEL_OWNER`] on everything it makes: filter on
/// `LABEL_OWNER=<this>` to find this process's containers.
pub fn owner() -> String {
    sandbox_host::owner::label()
}

/// The labels for an object with `role`.
pub(crate) fn labels(role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL.to_string(), LABEL_VALUE.to_string()),
        (LABEL_OWNER.to_string(), owner()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

pub(crate) use sandbox_host::owner::{label_state as owner_state, OwnerState};

/// A fresh name for one run's objects: random, so that concurrent runs never collide.
pub(crate) fn run_id() -> String {
    let mut buf = [0u8; 8];
    let n = rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty());
    if !matches!(n, Ok(k) if k == buf.len()) {
        // Not expected on Linux >= 3.17; fall back to something unique to this process.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mix = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
        buf = mix.to_le_bytes();
    }
    let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    format!("sandbox-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_differ() {
        assert_ne!(run_id(), run_id());
        assert!(run_id().starts_with("sandbox-"));
    }
}
