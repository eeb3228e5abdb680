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
    let pid = std::process::id();
    format!(
        "{}/{}/{}",
        machine_id(),
        pid,
        start_time(pid).unwrap_or_default()
    )
}

/// The labels for an object with `role`.
pub(crate) fn labels(role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL.to_string(), LABEL_VALUE.to_string()),
        (LABEL_OWNER.to_string(), owner()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

/// This machine: the systemd machine id, else the host name.
pub(crate) fn machine_id() -> String {
    for f in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(s) = std::fs::read_to_string(f) {
            let s = s.trim();
            if !s.is_empty() {
                return s.to_string();
            }
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What an owner label says about the object's maker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnerState {
    /// The maker still runs on this machine: its object is in use.
    Alive,
    /// The maker ran on this machine and is gone: the object is a leftover.
    Gone,
    /// The maker is on another machine, or the label is unreadable: we cannot tell.
    Unknown,
}

/// Judge an owner label against this machine's processes.
pub(crate) fn owner_state(label: Option<&str>) -> OwnerState {
    owner_state_with(label, &machine_id(), start_time)
}

fn owner_state_with(
    label: Option<&str>,
    here: &str,
    start_of: impl Fn(u32) -> Option<u64>,
) -> OwnerState {
    let Some(label) = label else {
        return OwnerState::Unknown;
    };
    let mut parts = label.rsplitn(3, '/');
    let (Some(start), Some(pid), Some(machine)) = (parts.next(), parts.next(), parts.next()) else {
        return OwnerState::Unknown;
    };
    if machine != here {
        return OwnerState::Unknown;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return OwnerState::Unknown;
    };
    match start_of(pid) {
        Some(s) if s == start => OwnerState::Alive,
        _ => OwnerState::Gone,
    }
}

/// A fresh name for one run's objects: random, so that concurrent runs never collide.
pub(crate) fn run_id() -> String {
    let mut buf = [0u8; 8];
    // SAFETY: getrandom writes at most `buf.len()` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
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
    fn our_own_label_says_alive() {
        assert_eq!(owner_state(Some(&owner())), OwnerState::Alive);
    }

    #[test]
    fn owners_are_judged_by_machine_pid_and_start_time() {
        let start = |pid: u32| (pid == 10).then_some(500);
        assert_eq!(
            owner_state_with(Some("m/10/500"), "m", start),
            OwnerState::Alive
        );
        // Same pid, another start time: the pid was reused, the maker is gone.
        assert_eq!(
            owner_state_with(Some("m/10/499"), "m", start),
            OwnerState::Gone
        );
        assert_eq!(
            owner_state_with(Some("m/11/500"), "m", start),
            OwnerState::Gone
        );
        assert_eq!(
            owner_state_with(Some("other/10/500"), "m", start),
            OwnerState::Unknown
        );
        assert_eq!(
            owner_state_with(Some("garbage"), "m", start),
            OwnerState::Unknown
        );
        assert_eq!(owner_state_with(None, "m", start), OwnerState::Unknown);
    }

    #[test]
    fn run_ids_differ() {
        assert_ne!(run_id(), run_id());
        assert!(run_id().starts_with("sandbox-"));
    }
}
