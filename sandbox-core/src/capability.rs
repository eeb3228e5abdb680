//! What a backend can enforce, as data.
//!
//! The lane policy, the conformance suite and `doctor` all read a [`Capability`]; nothing
//! branches on a backend's name. `Default` claims nothing, so a backend that forgets a field
//! under-claims and gets refused, never the other way round.

use serde::Serialize;

/// How precisely a backend enforces one grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum Enforcement {
    /// The backend cannot provide this at all.
    #[default]
    Unsupported,
    /// Enforced exactly as asked.
    Exact,
    /// The backend can only give more than was asked; the text says what the command gets
    /// instead (for example "the host's whole network"). Only a lane that accepts
    /// over-grants runs such a request.
    OverGrant(&'static str),
}

impl Enforcement {
    /// True when the grant is enforced exactly.
    pub fn is_exact(self) -> bool {
        matches!(self, Self::Exact)
    }
}

/// What a backend can enforce on this host.
///
/// Computed once when the backend is constructed (some answers depend on the host: whether
/// cgroups can be created, whether user namespaces work), cheap to copy.
/// Not `#[non_exhaustive]`: backends outside this workspace build one with
/// `..Capability::default()`, which keeps a new field unclaimed for them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Capability {
    /// Writes outside the workspace and the named writable paths are refused.
    pub confine_writes: bool,
    /// Reads outside the system directories, the workspace and the named paths are refused
    /// (the caller's home, SSH keys and cloud credentials stay unreadable).
    pub confine_reads: bool,
    /// Paths inside the workspace can be kept read-only (`.git/hooks`, `.git/config`).
    pub readonly_carveouts: bool,
    /// Paths inside a read grant can be made unreadable (the credentials of a toolchain
    /// home, [`crate::credentials`]); without it such a grant is refused.
    pub hide_paths: bool,
    /// Network mode `none`.
    pub network_none: Enforcement,
    /// With network `none` or `proxy` the command is in a network namespace of its own, so
    /// the network state of the host (or of the pod it runs in) is out of sight:
    /// `/proc/net` (unix socket paths, listeners, connections, routes) and the interfaces.
    /// Without it, `none` and `proxy` can still be exact (no socket reaches anything but
    /// the run's proxy) while that state is readable: a disclosure the `fast` lane accepts
    /// and records and `strict` refuses.
    pub network_state_private: bool,
    /// Network mode `loopback`: a private loopback, nothing of the host's.
    pub network_loopback: Enforcement,
    /// Network mode `full`.
    pub network_full: Enforcement,
    /// Network mode `proxy`: a private loopback whose one way out is the allowlist proxy,
    /// exposed inside on `127.0.0.1:PROXY_PORT`; no resolver, no other address.
    pub network_proxy: Enforcement,
    /// `host_ports` (with `loopback` or `proxy`): the command's `127.0.0.1:PORT` reaches the
    /// host's, through a listener made in the command's namespace; nothing else of the
    /// host's. A hard requirement when asked, on every lane.
    pub host_ports: bool,
    /// `publish` (with `loopback` or `proxy`): the host reaches a port the command serves
    /// on its own `127.0.0.1`, through connections the host makes with sockets created in
    /// the command's namespace; the command gains no way out. A hard requirement when
    /// asked, on every lane.
    pub publish: bool,
    /// With `full`, the command is in the host's own network namespace, so it also reaches
    /// services listening on the host's loopback (databases, an agent's local API). False
    /// for a container on the engine's bridge, which reaches the host only through the
    /// bridge's address.
    pub full_network_is_host: bool,
    /// Every descendant dies with the command, including ones that double-fork and call
    /// `setsid`.
    pub tree_kill: bool,
    /// The command cannot see or signal the host's other processes.
    pub process_isolation: bool,
    /// When the host runs as root, the command does not hold root's power over host files
    /// (no reading root-only files it was not granted, no setuid-root files left behind).
    pub drops_host_root: bool,
    /// A memory limit can be enforced. With a writable cgroup (v2, or v1's `memory`) it
    /// binds the whole tree; without one it is `RLIMIT_AS` on each process (the outcome's
    /// limit record says which), so a tree of processes may use the limit several times.
    pub memory_limit: bool,
    /// A CPU-time limit can be enforced.
    pub cpu_limit: bool,
    /// A cap on the number of processes can be enforced. With a writable cgroup it is the
    /// `pids` controller; without one it is `RLIMIT_NPROC` (counted in the sandbox's own
    /// user namespace where there is one, else over every process of the command's uid),
    /// and a command that would run as root without a cgroup cannot be capped, so the cap
    /// is refused there, never run without.
    pub process_limit: bool,
    /// A cap on open files per process can be enforced.
    pub open_files_limit: bool,
    /// "Killed by signal N" is reported apart from "exited with 128+N".
    pub signal_status: bool,
    /// A kill by the out-of-memory killer is reported as such.
    pub oom_status: bool,
    /// A descendant orphaned while the command runs is reaped then by an init of the
    /// sandbox's own (a pid namespace's init that waits for orphans), so zombies do not
    /// pile up for the run's lifetime. False where the command itself is the sandbox's
    /// first process and nothing else waits for orphans (gVisor's `runsc run`).
    pub reaps_orphans: bool,
    /// The command's whole tree dies with the host process, even when that is SIGKILLed
    /// and cleans nothing up: the kernel ends it (a pid namespace whose init dies with its
    /// parent). False where the tree runs elsewhere (a container engine keeps a container
    /// until the next start's sweep removes it) or could outlive it (no pid namespace).
    pub dies_with_host: bool,
    /// The command can run against a throwaway copy of the workspace.
    pub snapshot: bool,
    /// The snapshot copy keeps a sparse file's holes. False where the copy is unpacked by
    /// something that fills them (docker's engine); there a file is charged at its whole
    /// length against the copy's cap instead.
    pub sparse_snapshot: bool,
    /// The best copy-on-write layer this backend tries to put over the workspace for
    /// [`Changes::Review`](crate::Changes::Review) (and `Discard`); `None` refuses a
    /// review. A run falls back from overlay to a reflink copy, then to a copy, where the
    /// workspace's filesystem or the host needs it (asked when a layer is first made over
    /// that filesystem, not before); the outcome says which was used, and `sandbox doctor`
    /// whether an overlay can be mounted here at all
    /// ([`overlay_supported`](crate::changes::overlay_supported)).
    pub change_layer: Option<crate::LayerMechanism>,
    /// The command sees the host's programs at their host paths, so `argv[0]` is resolved
    /// on the host's `PATH` before anything runs. False for a container with its own root
    /// filesystem, where `argv[0]` is resolved inside.
    pub host_programs: bool,
    /// The kinds of refused operation this backend sees and lists in the outcome's
    /// [`crate::Denials`]. A kind not claimed may still be refused, unreported.
    pub reports_denials: crate::DenialKinds,
    /// Secrets (`SandboxOpts::secrets`, with network mode `proxy`): the command holds only a
    /// placeholder, and the proxy puts the value into the allowed place of requests to the
    /// secret's hosts over TLS it terminates, refusing the placeholder anywhere else. A
    /// hard requirement when asked, on every lane: a backend that does not claim it refuses
    /// a run with secrets rather than handing the value to the command. Request rules
    /// (`SandboxOpts::allow_requests`) are judged on the same terminated TLS and need the
    /// same claim.
    pub secrets: bool,
    /// Where the door of network mode `proxy` (and host ports, published ports) meets the
    /// command: what the pipeline's door stage makes for this backend. Not a claim (the
    /// claims are `network_proxy`, `host_ports`, `publish`), but where they are kept.
    pub door: DoorPlace,
}

/// Where a run's door meets the command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DoorPlace {
    /// In a network namespace of the command's own: listeners made there (by the
    /// sandbox's child and handed to the host, or by the host entering it), the proxy the
    /// only way out of it.
    #[default]
    Namespace,
    /// No namespace: every `connect` of the command is mediated by the host's supervisor
    /// (seccomp user notification), which makes the connection to the run's proxy itself
    /// and puts it in the command's place; the command opens no other way out.
    Mediated,
}

impl Capability {
    /// Every claim, each exact, with an overlay layer and no denial reporting.
    ///
    /// For tests of code that reads a capability (the lane table, a plan, an argv builder)
    /// where what a backend claims is not the point: one literal here instead of one per
    /// test module, so that a new field is claimed in all of them at once. A backend states
    /// its own claims field by field, never from this.
    pub fn everything() -> Self {
        Self {
            confine_writes: true,
            confine_reads: true,
            readonly_carveouts: true,
            hide_paths: true,
            network_none: Enforcement::Exact,
            network_state_private: true,
            network_loopback: Enforcement::Exact,
            network_full: Enforcement::Exact,
            network_proxy: Enforcement::Exact,
            host_ports: true,
            publish: true,
            full_network_is_host: true,
            tree_kill: true,
            process_isolation: true,
            drops_host_root: true,
            memory_limit: true,
            cpu_limit: true,
            process_limit: true,
            open_files_limit: true,
            signal_status: true,
            oom_status: true,
            reaps_orphans: true,
            dies_with_host: true,
            snapshot: true,
            sparse_snapshot: true,
            change_layer: Some(crate::LayerMechanism::Overlay),
            host_programs: true,
            reports_denials: crate::DenialKinds::default(),
            secrets: true,
            door: DoorPlace::Namespace,
        }
    }

    /// How this backend enforces `mode`.
    pub fn network(&self, mode: crate::NetworkMode) -> Enforcement {
        match mode {
            crate::NetworkMode::None => self.network_none,
            crate::NetworkMode::Loopback => self.network_loopback,
            crate::NetworkMode::Full => self.network_full,
            crate::NetworkMode::Proxy => self.network_proxy,
        }
    }
}
