//! Who made a host object (a cgroup, a temp directory, a container), and the removal of
//! what a dead maker left.
//!
//! A host process that is SIGKILLed mid-run (or whose machine loses power) cleans nothing
//! up. The kernel still ends the command's tree (`PR_SET_PDEATHSIG` on the launcher, a pid
//! namespace or a process group the command cannot leave), but the run's cgroups, its
//! layer or snapshot copy, a backend's bundle directory and the mounts in it stay. So each
//! of them names its maker, by pid and start time (a pid alone may have been reused):
//!
//! - temp directories: `sandbox-<kind>@<pid>-<start>-<random>` ([`temp_dir`]);
//! - cgroups: `sandbox-<pid>-<start>-<n>` (see [`crate::process::cgroup`]);
//! - engine objects: a label `<machine>/<pid>/<start>` ([`label`], [`label_state`]).
//!
//! [`remove_dead_leftovers`] removes the first two for every maker that is gone, and
//! nothing of a live one; every process backend calls it once per process, at its first
//! run ([`remove_dead_leftovers_once`]), so the next start after a crash cleans up.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A process's start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This machine: the systemd machine id, else the host name.
pub fn machine_id() -> String {
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

/// A process of this machine, as names and labels record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// Its start time ([`start_time`]).
    pub start: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        static ME: OnceLock<Owner> = OnceLock::new();
        *ME.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                pid,
                start: start_time(pid).unwrap_or_default(),
            }
        })
    }

    /// `<pid>-<start>`, as file and cgroup names carry it.
    pub fn tag(&self) -> String {
        format!("{}-{}", self.pid, self.start)
    }

    /// The owner at the start of `s` (`<pid>-<start>`, then `-` or the end), and the rest.
    pub fn parse_tag(s: &str) -> Option<(Owner, &str)> {
        let (pid, rest) = s.split_once('-')?;
        let end = rest.find('-').unwrap_or(rest.len());
        let start = &rest[..end];
        let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(pid) || !all_digits(start) {
            return None;
        }
        Some((
            Owner {
                pid: pid.parse().ok()?,
                start: start.parse().ok()?,
            },
            rest[end..].trim_start_matches('-'),
        ))
    }

    /// Whether the process still runs (same pid, same start time).
    pub fn is_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start)
    }
}

/// This process, as an engine label: `MACHINE/PID/STARTTIME`.
pub fn label() -> String {
    let me = Owner::current();
    format!("{}/{}/{}", machine_id(), me.pid, me.start)
}

/// Whether `label` (a [`label`]) names the process `pid` of this machine, whatever its
/// start time: how a test finds what a process it killed made.
pub fn label_names_pid(label: &str, pid: u32) -> bool {
    let mut parts = label.rsplitn(3, '/');
    let (Some(_start), Some(p), Some(machine)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    machine == machine_id() && p.parse() == Ok(pid)
}

/// What an owner label says about the object's maker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// The maker still runs on this machine: its object is in use.
    Alive,
    /// The maker ran on this machine and is gone: the object is a leftover.
    Gone,
    /// The maker is on another machine, or the label is unreadable: we cannot tell.
    Unknown,
}

/// Judge a [`label`] against this machine's processes.
pub fn label_state(label: Option<&str>) -> OwnerState {
    label_state_with(label, &machine_id(), start_time)
}

fn label_state_with(
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

/// A new private directory in the host's temp dir for this process's `kind` of object,
/// named after this process so that [`remove_dead_leftovers`] can tell whose it is; removed
/// when the value is dropped.
///
/// An error names the temp dir and says what to do: an unwritable or full `TMPDIR` is a
/// host problem the caller can fix.
pub fn temp_dir(kind: &str) -> Result<tempfile::TempDir, sandbox_core::SandboxError> {
    let base = runs_dir().map_err(|(reason, e)| sandbox_core::SandboxError::TempDir {
        dir: std::env::temp_dir(),
        what: kind.to_string(),
        reason,
        source: e,
    })?;
    tempfile::Builder::new()
        .prefix(&format!("sandbox-{kind}@{}-", Owner::current().tag()))
        .tempdir_in(&base)
        .map_err(|e| temp_dir_error(&base, kind, e))
}

/// A run-private directory for what the command must reach by its own path whatever uid
/// it runs as (the run's certificate bundle: public certificates only), in the temp dir
/// itself: [`runs_dir`] is open to nobody else, so a command running as another id (a
/// root host's spare id, a container's user) could not pass through it. Swept like the
/// others when its owner is gone.
pub fn public_temp_dir(kind: &str) -> Result<tempfile::TempDir, sandbox_core::SandboxError> {
    let base = std::env::temp_dir();
    tempfile::Builder::new()
        .prefix(&format!("sandbox-{kind}@{}-", Owner::current().tag()))
        .tempdir_in(&base)
        .map_err(|e| temp_dir_error(&base, kind, e))
}

/// The directory of this user's runs ([`sandbox_core::runs_dir`]), made `0700` if it is
/// not there. In a shared temp dir another user may have made it first: it must be a
/// directory (not a link), this user's, and open to nobody else, or nothing is put in it.
pub fn runs_dir() -> Result<std::path::PathBuf, (&'static str, io::Error)> {
    let dir = sandbox_core::runs_dir();
    private_dir(&dir)?;
    Ok(dir)
}

/// Make `dir` (`0700`) unless it is there, then check that it is a directory of this
/// user's that nobody else may enter.
fn private_dir(dir: &Path) -> Result<(), (&'static str, io::Error)> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err((temp_reason(&e), e)),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| (temp_reason(&e), e))?;
    let euid = rustix::process::geteuid().as_raw();
    if !m.file_type().is_dir() || m.uid() != euid || m.mode() & 0o077 != 0 {
        return Err((
            "its sandbox-runs directory is a link, another user's, or open to others",
            io::Error::from(io::ErrorKind::PermissionDenied),
        ));
    }
    Ok(())
}

fn temp_dir_error(base: &Path, kind: &str, e: io::Error) -> sandbox_core::SandboxError {
    sandbox_core::SandboxError::TempDir {
        dir: base.to_path_buf(),
        what: kind.to_string(),
        reason: temp_reason(&e),
        source: e,
    }
}

fn temp_reason(e: &io::Error) -> &'static str {
    use io::ErrorKind as K;
    match e.kind() {
        K::StorageFull => "its disk is full",
        K::PermissionDenied => "it is not writable",
        K::ReadOnlyFilesystem => "it is on a read-only filesystem",
        K::NotFound => "it does not exist",
        K::NotADirectory => "it is not a directory",
        _ => "it cannot be written",
    }
}

/// Where the workspace or a writable path holds this user's runs directory
/// ([`sandbox_core::runs_dir`]: every run's layer, copy and bundle, this run's included),
/// the carve-outs that keep it read-only to the command, as `Plan::new` keeps the state
/// directory: a command must not plant files in what another run (or its own host) will
/// apply, nor change the stamps its conflicts are judged by. One carve-out covers what
/// runs started later make there. A workspace that is itself a copy in there stays
/// writable: then what is beside the path down to it in this run's own directory is
/// carved out instead (its conflict stamp); the other runs' directories are left as open
/// as their modes make them (carved out one by one, one that goes away first would fail
/// this run's mounts).
///
/// `tree` is what the command sees at `workspace` (a copy in there, for a layer bound at
/// the workspace's path); `writable` the plan's writable paths, canonical.
pub fn runs_dir_carveouts(tree: &Path, workspace: &Path, writable: &[PathBuf]) -> Vec<PathBuf> {
    // Made now where no run made it yet, so that one started during this run puts its
    // directory under the carve-out (where it cannot be made, no run can put one there).
    let _ = runs_dir();
    let Ok(runs) = sandbox_core::runs_dir().canonicalize() else {
        return Vec::new();
    };
    let held = runs.starts_with(workspace) || writable.iter().any(|w| runs.starts_with(w));
    if !held {
        return Vec::new();
    }
    let Ok(inner) = tree.strip_prefix(&runs) else {
        return vec![runs];
    };
    let mut out = Vec::new();
    let mut dir = runs;
    for (depth, step) in inner.components().enumerate() {
        // Not the other runs' directories, one by one: each may go away before the
        // command's mounts are made, which would fail this run (a copy layer with a
        // writable temp dir leaves them as open as their modes make them).
        let entries = match std::fs::read_dir(&dir) {
            Ok(_) if depth == 0 => {
                dir.push(step);
                continue;
            }
            Ok(entries) => entries,
            Err(_) => break,
        };
        out.extend(
            entries
                .flatten()
                .filter(|e| e.file_name() != step.as_os_str())
                .map(|e| e.path()),
        );
        dir.push(step);
    }
    out
}

/// The owner of a temp dir named by [`temp_dir`].
pub(crate) fn temp_owner(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix("sandbox-")?;
    let (_, tagged) = rest.split_once('@')?;
    Owner::parse_tag(tagged).map(|(o, _)| o)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_directory_must_be_a_private_directory_of_ours() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let made = t.path().join("made");
        private_dir(&made).unwrap();
        let m = std::fs::metadata(&made).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700);
        // Open to others (made so by someone first): refused, not used.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_dir(&open).is_err());
        // A link to a directory of ours: refused (it could be swapped).
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&made, &link).unwrap();
        assert!(private_dir(&link).is_err());
    }

    #[test]
    fn our_own_label_says_alive() {
        assert_eq!(label_state(Some(&label())), OwnerState::Alive);
        assert!(Owner::current().is_alive());
    }

    #[test]
    fn a_label_names_its_pid_on_this_machine_only() {
        let me = std::process::id();
        assert!(label_names_pid(&label(), me));
        assert!(!label_names_pid(&label(), me + 1));
        assert!(!label_names_pid(&format!("elsewhere/{me}/1"), me));
        assert!(!label_names_pid("garbage", me));
    }

    #[test]
    fn owners_are_judged_by_machine_pid_and_start_time() {
        let start = |pid: u32| (pid == 10).then_some(500);
        assert_eq!(
            label_state_with(Some("m/10/500"), "m", start),
            OwnerState::Alive
        );
        // Same pid, another start time: the pid was reused, the maker is gone.
        assert_eq!(
            label_state_with(Some("m/10/499"), "m", start),
            OwnerState::Gone
        );
        assert_eq!(
            label_state_with(Some("m/11/500"), "m", start),
            OwnerState::Gone
        );
        assert_eq!(
            label_state_with(Some("other/10/500"), "m", start),
            OwnerState::Unknown
        );
        assert_eq!(
            label_state_with(Some("garbage"), "m", start),
            OwnerState::Unknown
        );
        assert_eq!(label_state_with(None, "m", start), OwnerState::Unknown);
    }

    #[test]
    fn names_carry_their_owner() {
        let me = Owner::current();
        let d = temp_dir("test").unwrap();
        let name = d.path().file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(temp_owner(&name), Some(me));
        assert_eq!(temp_owner("sandbox-layer-abc"), None);
        assert_eq!(
            temp_owner("sandbox-x@12-34-rnd"),
            Some(Owner { pid: 12, start: 34 })
        );
        assert_eq!(
            Owner::parse_tag("12-34-5"),
            Some((Owner { pid: 12, start: 34 }, "5"))
        );
        assert_eq!(Owner::parse_tag("12-x-5"), None);
    }
}
