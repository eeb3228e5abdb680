//! What a run produced, and what was enforced while it ran.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::capability::Enforcement;
use crate::egress::Connections;
use crate::record::Record;
use crate::{Allowlist, Lane, NetworkMode};

/// How the command ended. Signals, timeouts, the caller's kill and the OOM killer are
/// distinct cases, never folded into an exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Status {
    /// The command exited with this code.
    Exited {
        /// The exit code (0..=255).
        code: i32,
    },
    /// The command was killed by this signal (not by us).
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The wall-clock timeout fired and the whole tree was killed.
    TimedOut,
    /// The caller called `kill`.
    Killed,
    /// The out-of-memory killer ended it (where the backend can tell).
    OutOfMemory,
}

impl Status {
    /// True for `Exited { code: 0 }`.
    pub fn success(self) -> bool {
        self == Self::Exited { code: 0 }
    }

    /// The conventional shell exit status: the code, 128+N for signal N, 124 for a timeout
    /// (as `timeout(1)`), 137 for a kill (SIGKILL).
    pub fn shell_code(self) -> i32 {
        match self {
            Self::Exited { code } => code,
            Self::Signaled { signal } => 128 + signal,
            Self::TimedOut => 124,
            Self::Killed | Self::OutOfMemory => 128 + 9, // SIGKILL on every Linux architecture
        }
    }

    /// Its name as the outcome's JSON spells it (`exited`, `signaled`, `timed_out`,
    /// `killed`, `out_of_memory`): what every door (the command's `--json`, `sandbox mcp`,
    /// the Python package) shows, so they cannot drift apart.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Exited { .. } => "exited",
            Self::Signaled { .. } => "signaled",
            Self::TimedOut => "timed_out",
            Self::Killed => "killed",
            Self::OutOfMemory => "out_of_memory",
        }
    }

    /// The exit code, when the command exited.
    pub fn code(self) -> Option<i32> {
        match self {
            Self::Exited { code } => Some(code),
            _ => None,
        }
    }

    /// The signal, when a signal (not the sandbox's kill) ended the command.
    pub fn signal(self) -> Option<i32> {
        match self {
            Self::Signaled { signal } => Some(signal),
            _ => None,
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::Status;

    #[test]
    fn kind_is_the_json_tag() {
        for s in [
            Status::Exited { code: 3 },
            Status::Signaled { signal: 9 },
            Status::TimedOut,
            Status::Killed,
            Status::OutOfMemory,
        ] {
            let json = serde_json::to_value(s).unwrap_or_default();
            assert_eq!(json["kind"], s.kind(), "{s:?}");
        }
        assert_eq!(Status::Exited { code: 3 }.code(), Some(3));
        assert_eq!(Status::Signaled { signal: 9 }.signal(), Some(9));
        assert_eq!(Status::TimedOut.code(), None);
    }
}

/// One captured stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Captured {
    /// The bytes kept: all of them, or the beginning and the end around a marker line when
    /// the stream was over its cap.
    #[serde(serialize_with = "lossy")]
    pub bytes: Vec<u8>,
    /// The stream was over its cap; `bytes` holds its head and tail.
    pub truncated: bool,
    /// How many bytes the command wrote in all.
    pub total_bytes: u64,
}

impl Captured {
    /// The kept bytes as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

fn lossy<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(bytes))
}

/// Standard output and standard error captured so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Logs {
    /// Standard output.
    pub stdout: Captured,
    /// Standard error.
    pub stderr: Captured,
}

/// One thing the lane granted, and how the backend enforces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// What was asked ("network mode `loopback`").
    pub what: String,
    /// How it is enforced.
    pub enforcement: Enforcement,
}

impl Grant {
    /// A grant.
    pub fn new(what: impl Into<String>, enforcement: Enforcement) -> Self {
        Self {
            what: what.into(),
            enforcement,
        }
    }
}

/// The mechanism that enforced a resource limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitMechanism {
    /// A cgroup v2 controller: binds the whole tree, and binds root.
    CgroupV2,
    /// A cgroup v1 controller: binds the whole tree, and binds root.
    CgroupV1,
    /// A per-process rlimit, inherited by children (`RLIMIT_AS` binds one process, not the
    /// tree; `RLIMIT_NPROC` counts the user's processes host-wide and does not bind root).
    Rlimit,
    /// The container engine's own limit.
    Container,
}

/// One resource limit as enforced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LimitRecord {
    /// `memory`, `cpu`, `processes` or `open_files`.
    pub limit: &'static str,
    /// The value (bytes, seconds or a count).
    pub value: u64,
    /// What enforced it.
    pub mechanism: LimitMechanism,
}

/// How the process tree is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeKill {
    /// `cgroup.kill` on a cgroup v2 of its own.
    CgroupV2Kill,
    /// Every pid listed in a cgroup v1 of its own, until none is left.
    CgroupV1Procs,
    /// The process group; complete only where descendants cannot leave it (no backend
    /// denies `setsid`/`setpgid` any more: a bare launch's measure, as the bench's).
    ProcessGroup,
    /// A pid namespace: its init's death ends everything in it.
    PidNamespace,
    /// The sandbox's waiter, a child subreaper (`PR_SET_CHILD_SUBREAPER`) that every
    /// orphan of the run is re-parented to, whatever its session or process group: it
    /// kills every descendant and reaps until it has no child left, then exits. Complete
    /// only where the command cannot signal the waiter (landlock's signal scope).
    Subreaper,
    /// The container engine kills the container.
    Container,
}

/// What was enforced for one run: the answer to "what could this command do?".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EffectivePolicy {
    /// The backend.
    pub backend: &'static str,
    /// The lane.
    pub lane: Lane,
    /// Each grant and how it was enforced.
    pub grants: Vec<Grant>,
    /// The network mode asked.
    pub network: NetworkMode,
    /// The workspace the command ran in (the throwaway copy in snapshot mode).
    pub workspace: PathBuf,
    /// Read-only carve-outs inside the workspace.
    pub readonly_carveouts: Vec<PathBuf>,
    /// Extra readable paths.
    pub read_only_paths: Vec<PathBuf>,
    /// Credential paths inside a toolchain grant that were made unreadable.
    pub hidden_paths: Vec<PathBuf>,
    /// Extra writable paths.
    pub writable_paths: Vec<PathBuf>,
    /// Names of the environment variables the command got.
    pub env_names: Vec<String>,
    /// Each resource limit and its mechanism.
    pub limits: Vec<LimitRecord>,
    /// How the tree is killed.
    pub tree_kill: Option<TreeKill>,
    /// What each mechanism enforced (the landlock ABI, the seccomp filter, the image, ...):
    /// in JSON, `notes` (the rendered lines) and `enforced` (the typed list).
    #[serde(flatten)]
    pub enforced: Record,
    /// With network mode `proxy`: the allowlist the proxy applied.
    pub allow_hosts: Allowlist,
    /// The host's `127.0.0.1` ports the command could reach by number.
    pub host_ports: Vec<u16>,
    /// The command's ports published on the host, and where (filled in by the backend
    /// once bound).
    pub published: Vec<crate::Published>,
}

impl EffectivePolicy {
    fn over_granted(&self, prefix: &str) -> Option<bool> {
        self.grants
            .iter()
            .find(|g| g.what.starts_with(prefix))
            .map(|g| !g.enforcement.is_exact())
    }

    /// Could the command reach any network beyond its own private loopback?
    pub fn can_reach_network(&self) -> bool {
        matches!(self.network, NetworkMode::Full | NetworkMode::Proxy)
            || !self.host_ports.is_empty()
            || self.over_granted("network mode").unwrap_or(true)
    }

    /// Could the command read files beyond the workspace, the system directories and the
    /// named read-only paths (the caller's home, keys, credentials)?
    pub fn can_read_beyond_workspace(&self) -> bool {
        self.over_granted("filesystem read confinement")
            .unwrap_or(true)
    }

    /// Could the command write outside the workspace and the named writable paths?
    pub fn can_write_beyond_workspace(&self) -> bool {
        self.over_granted("filesystem write confinement")
            .unwrap_or(true)
    }
}

/// The result of one run.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct SandboxOutcome {
    /// How it ended.
    pub status: Status,
    /// Standard output.
    pub stdout: Captured,
    /// Standard error.
    pub stderr: Captured,
    /// Wall time from start to the last process's end.
    #[serde(serialize_with = "secs")]
    pub wall_time: Duration,
    /// The backend.
    pub backend: &'static str,
    /// The files asked for in `capture_files`, by their path relative to the workspace;
    /// a file that did not exist is absent.
    #[serde(serialize_with = "files")]
    pub files: BTreeMap<PathBuf, Vec<u8>>,
    /// What was enforced.
    pub policy: EffectivePolicy,
    /// With [`Changes::Review`](crate::Changes::Review): what the command changed in its
    /// layer over the workspace, to apply or discard (dropping it discards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::ChangeSet>,
    /// With network mode `proxy` or host ports: every connection attempt through the
    /// proxy, alike ones folded into one entry with a count, bounded
    /// ([`MAX_CONNECTIONS`](crate::MAX_CONNECTIONS) distinct entries, the rest counted).
    pub connections: Connections,
    /// What was refused while it ran, as far as the backend can see
    /// ([`crate::Capability::reports_denials`]).
    pub denials: crate::Denials,
}

impl SandboxOutcome {
    /// An outcome, for backends outside core (the type is `#[non_exhaustive]`, so a struct
    /// literal only works inside this crate).
    pub fn new(
        status: Status,
        stdout: Captured,
        stderr: Captured,
        wall_time: Duration,
        backend: &'static str,
        files: BTreeMap<PathBuf, Vec<u8>>,
        policy: EffectivePolicy,
    ) -> Self {
        Self {
            status,
            stdout,
            stderr,
            wall_time,
            backend,
            files,
            policy,
            changes: None,
            connections: Connections::default(),
            denials: crate::Denials::default(),
        }
    }

    /// The outcome with the change set the run left for review.
    pub fn with_changes(mut self, changes: Option<crate::ChangeSet>) -> Self {
        self.changes = changes;
        self
    }

    /// The outcome with the record of the connections the run's proxy saw.
    pub fn with_connections(mut self, connections: Connections) -> Self {
        self.connections = connections;
        self
    }

    /// The outcome with `denials` (a backend outside core that saw some).
    pub fn with_denials(mut self, denials: crate::Denials) -> Self {
        self.denials = denials;
        self
    }

    /// The attempts the proxy denied, one line per entry (`sandbox: denied connect to
    /// pastebin.com:443 (not in the allowlist)`, ` x3` for three alike), and one counting
    /// those the bounded record did not keep.
    pub fn denied_lines(&self) -> Vec<String> {
        self.connections.denied_lines()
    }

    /// What the command-line tool prints about the proxy after a run: each refused
    /// connect and each allowed one that could not be made, a line each
    /// ([`Connections::lines`](crate::Connections::lines)).
    pub fn connection_lines(&self) -> Vec<String> {
        self.connections.lines()
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn files<S: serde::Serializer>(f: &BTreeMap<PathBuf, Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(f.len()))?;
    for (k, v) in f {
        m.serialize_entry(&k.display().to_string(), &String::from_utf8_lossy(v))?;
    }
    m.end()
}
