//! The record of what was enforced for one run: a typed list, one enum per mechanism, so
//! that a test or a JSON consumer matches a fact rather than a sentence.
//!
//! This module is the only place the record's sentences live ([`fmt::Display`] for
//! [`Enforced`]): the command's text, the `notes` of `--json`, MCP and Python are these
//! renderings, and the `enforced` list beside them is the same record as data, tagged by
//! `mechanism` and then by `fact`.

use std::fmt;
use std::path::PathBuf;

use serde::ser::SerializeMap;
use serde::Serialize;

use crate::changes::{Changes, LayerMechanism};
use crate::egress::Published;

/// One fact of what was enforced, by the mechanism that enforced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "mechanism", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Enforced {
    /// Linux namespaces (network, mount, pid).
    Namespaces(Namespaces),
    /// Landlock.
    Landlock(Landlock),
    /// A seccomp filter.
    Seccomp(Seccomp),
    /// Who the command runs as, its capabilities, and how trees are handed over to it.
    Identity(Identity),
    /// The program that sets the confinement up around the command (bwrap, gVisor).
    Runtime(Runtime),
    /// The layer over the workspace.
    Layer(Layer),
    /// The door: the egress proxy, host ports, published ports.
    Door(Door),
    /// Resource limits and the cgroups that hold them.
    Limits(Limits),
    /// The container, its image and how trees reach it.
    Container(Container),
}

/// Namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Namespaces {
    /// A private network namespace: loopback up (`loopback`), or no interface up.
    Network {
        /// The namespace was made inside a user namespace.
        in_user_namespace: bool,
        /// Its loopback is up.
        loopback: bool,
    },
    /// No network namespace: `loopback` is the host's network (a lane that accepts the
    /// over-grant ran it).
    LoopbackOverGranted,
    /// No network namespace: `none` has no sockets (the filter allows only `AF_UNIX`,
    /// landlock denies TCP), but the host's (or pod's) `/proc/net` is readable.
    NoneWithoutNamespace,
    /// A pid namespace of the command's own, with the waiter as its init.
    Pid,
    /// No pid namespace: the waiter, a child subreaper the command cannot signal, kills
    /// every descendant.
    SubreaperWithoutPid,
    /// Every mount read-only in the command's own mount namespace, the writable places
    /// bound back read-write.
    MountsReadOnly,
    /// No mount namespace could be made: the modes and timestamps of the user's own files
    /// outside the workspace are not confined.
    NoMountNamespace,
    /// Carve-outs bound read-only in the command's own mount namespace.
    CarveoutsBound {
        /// The carved-out directories.
        dirs: Vec<PathBuf>,
    },
}

/// Landlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Landlock {
    /// The ruleset: the ABI used, the kernel's, the one the run needed, and its size.
    Ruleset {
        /// The ABI the ruleset was written for.
        abi: u32,
        /// The kernel's ABI.
        kernel_abi: u32,
        /// The least ABI this run needed.
        needed_abi: u32,
        /// How many filesystem rights the ruleset handles.
        fs_rights: usize,
        /// How many path rules it has.
        rules: usize,
    },
    /// TCP bind and connect denied.
    TcpDenied,
    /// Scopes: signals and abstract unix sockets stay inside the sandbox.
    Scopes,
    /// Abstract unix sockets confined (bwrap's network mode `full`).
    AbstractUnixScoped,
    /// Carve-outs by split rules: no entry can be created, removed or renamed directly in
    /// these directories.
    CarveoutsFixed {
        /// The directories on the way to the carve-outs.
        dirs: Vec<PathBuf>,
    },
    /// A root host: a first layer grants reads only as an unprivileged user sees them.
    RootReadLayer {
        /// How many rules that layer has.
        rules: usize,
    },
}

/// Seccomp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Seccomp {
    /// The shared filter (the one syscall table).
    SharedFilter {
        /// Denied calls are reported (user notification, answered `EPERM`).
        notifies: bool,
    },
    /// `socket(AF_UNIX)` denied, because this landlock ABI cannot confine connecting to a
    /// unix socket by path.
    UnixSocketsDenied {
        /// The landlock ABI in use.
        landlock_abi: u32,
    },
    /// The syscall table as an OCI profile applied by gVisor's Sentry, which cannot
    /// notify.
    SentryProfile,
}

/// Which program drops from root on a root host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dropper {
    /// The command itself.
    Command,
    /// bwrap, which runs the command.
    Bwrap,
}

/// Why a container's command runs as its uid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChosenUid {
    /// The caller is not root: its own uid.
    Caller,
    /// The caller is root: the workspace owner's uid.
    WorkspaceOwner,
    /// The caller is root and owns the workspace: `nobody`.
    Nobody,
}

/// Identity: uid, capabilities, hand-over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Identity {
    /// A root host: the command (or bwrap) runs as an id no account has, the writable
    /// trees idmapped to it.
    HandedOver {
        /// The uid and gid.
        id: u32,
        /// Who runs as it.
        by: Dropper,
    },
    /// A root host: the command keeps uid 0 without capabilities.
    KeepsRoot {
        /// Why it could not be handed over.
        why: String,
        /// Who keeps uid 0.
        by: Dropper,
    },
    /// A root host: root-only entries of the system and named paths hidden.
    RootOnlyHidden {
        /// How many.
        count: usize,
    },
    /// Every capability set emptied, `SECBIT_NOROOT` locked.
    CapabilitiesDropped,
    /// The uid and gid inside gVisor's Sentry, no capabilities.
    InSentry {
        /// The uid.
        uid: u32,
        /// The gid.
        gid: u32,
    },
    /// The uid and gid inside a container, no capabilities.
    InContainer {
        /// The uid.
        uid: u32,
        /// The gid.
        gid: u32,
        /// Why this uid.
        chosen: ChosenUid,
    },
    /// A tree handed to the command's uid by an idmapped mount.
    IdmappedTree {
        /// The tree.
        path: PathBuf,
        /// The uid it is handed to.
        uid: u32,
    },
}

/// The program that sets the confinement up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Runtime {
    /// bubblewrap.
    Bwrap {
        /// Its version, where it said.
        version: Option<String>,
    },
    /// gVisor (`runsc`), platform ptrace.
    Gvisor {
        /// Its version, where it said.
        version: Option<String>,
        /// Run rootless (else `runsc` as root).
        rootless: bool,
    },
}

/// The layer over the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Layer {
    /// The command wrote a layer, not the workspace.
    Workspace {
        /// How the layer is made.
        made_by: LayerMechanism,
        /// What becomes of the changes (held for review, or discarded).
        changes: Changes,
    },
}

/// The egress proxy of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Proxy {
    /// Its port on the command's `127.0.0.1`.
    pub port: u16,
    /// The allowlist's patterns.
    pub allow: Vec<String>,
    /// The caller's HTTP proxy every allowed connection goes through (`host:port`), when
    /// the run chains to one (`--upstream-proxy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// The door.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Door {
    /// A private network namespace whose only ways out are these.
    WaysOut {
        /// The egress proxy (network mode `proxy`).
        proxy: Option<Proxy>,
        /// The host's `127.0.0.1` ports reachable by number.
        host_ports: Vec<u16>,
        /// The command's ports published on the host's loopback.
        published: Vec<u16>,
    },
    /// Where each published port ended up on the host (a container's namespace).
    Published {
        /// The ports and their host addresses.
        ports: Vec<Published>,
    },
    /// No network namespace (a default container or pod): every `connect` of the command is
    /// mediated by the host's supervisor, which connects to the run's proxy itself and puts
    /// that connection in the command's place; any other address is refused, and so are
    /// `listen`, sockets other than `AF_UNIX` and TCP, and sends that name an address.
    Mediated {
        /// The egress proxy, at the address the command dials.
        proxy: Proxy,
        /// The host's `127.0.0.1` ports reachable by number, through the proxy.
        host_ports: Vec<u16>,
    },
    /// Secrets the command holds only placeholders for: the proxy terminates TLS for their
    /// hosts under an authority made for the run and puts each value into requests there.
    Secrets {
        /// The secrets' names (never their values).
        names: Vec<String>,
        /// The hosts whose TLS the proxy terminates.
        hosts: Vec<String>,
        /// The run's certificate bundle as the command sees it (the host's roots, the
        /// caller's upstream authorities, the run's authority; no key), which the bundle
        /// variables name.
        bundle: PathBuf,
    },
}

/// Limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Limits {
    /// The clone3 spawn was not available: spawned by fork, joining the run's cgroups by
    /// `cgroup.procs`.
    ForkJoinedCgroups {
        /// Why.
        why: String,
    },
    /// A CPU quota (the container engine's).
    CpuQuota {
        /// In billionths of a CPU.
        nano_cpus: u64,
    },
    /// The out-of-memory killer ran.
    OutOfMemoryKilled,
}

/// How a tree reaches a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum TreeVia {
    /// Bind-mounted as it is.
    Bind,
    /// Bind-mounted through an idmapped mount from this owner.
    IdmappedBind {
        /// The owner's uid.
        uid: u32,
        /// The owner's gid.
        gid: u32,
    },
    /// Copied into a volume, changes discarded (snapshot).
    VolumeDiscarded,
    /// Copied into a volume, changes copied back after the end.
    VolumeWrittenBack,
    /// Copied into a read-only volume.
    VolumeReadOnly,
    /// Copied with the workspace, root-owned and read-only.
    InsideCopy,
}

/// The container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Container {
    /// The image, by name and id.
    Image {
        /// The name asked.
        name: String,
        /// The engine's id, where it said.
        id: Option<String>,
    },
    /// The container's network: the engine's default bridge, or none.
    Network {
        /// The engine's default bridge (network mode `full`).
        bridge: bool,
    },
    /// How a tree reaches the container.
    Tree {
        /// The path, on the host and in the container.
        path: PathBuf,
        /// How.
        via: TreeVia,
        /// Where `path` is a symlink on the host (a read-only path named through it): its
        /// target, bound at both paths.
        link_to: Option<PathBuf>,
    },
    /// Idmapped mounts are unavailable: trees the command's uid does not own travel by copy.
    CopiedWithoutIdmap {
        /// Why they are unavailable.
        why: String,
    },
    /// A warning of the engine's that is no refusal.
    EngineWarning {
        /// The engine's words.
        warning: String,
        /// It says swap use is not limited (the memory limit still holds in RAM).
        swap_unlimited: bool,
    },
    /// Started ahead of time with this policy (the warm pool).
    WarmPool,
}

impl fmt::Display for Enforced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespaces(n) => n.fmt(f),
            Self::Landlock(l) => l.fmt(f),
            Self::Seccomp(s) => s.fmt(f),
            Self::Identity(i) => i.fmt(f),
            Self::Runtime(r) => r.fmt(f),
            Self::Layer(l) => l.fmt(f),
            Self::Door(d) => d.fmt(f),
            Self::Limits(l) => l.fmt(f),
            Self::Container(c) => c.fmt(f),
        }
    }
}

/// `a, b, c`.
fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn paths(dirs: &[PathBuf]) -> String {
    list(dirs.iter().map(|d| d.display()))
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Network {
                in_user_namespace,
                loopback,
            } => {
                let inside = if *in_user_namespace {
                    " (in a user namespace)"
                } else {
                    ""
                };
                if *loopback {
                    write!(f, "network: a private namespace{inside}, loopback up")
                } else {
                    write!(
                        f,
                        "network: a private namespace{inside} with no interface up; the \
                         host's /proc/net out of sight"
                    )
                }
            }
            Self::LoopbackOverGranted => f.write_str("loopback over-granted as the host's network"),
            Self::NoneWithoutNamespace => f.write_str(
                "network none: no sockets, by the filter and landlock (no namespace can be \
                 made here); the host's (in a container, the pod's) /proc/net readable",
            ),
            Self::Pid => f.write_str(
                "processes: a pid namespace of its own, with a private /proc; the sandbox's \
                 waiter (pid 1, confined as the command) reaps orphans and hands out the \
                 command's exact status",
            ),
            Self::SubreaperWithoutPid => f.write_str(
                "processes: no pid namespace; the sandbox's waiter, a child subreaper the \
                 command cannot signal, reaps orphans, hands out the command's exact status \
                 and kills every descendant, sessions and process groups notwithstanding",
            ),
            Self::MountsReadOnly => f.write_str(
                "mounts: every mount read-only in the command's own mount namespace (modes \
                 and timestamps outside the writable places cannot change), the workspace \
                 and the writable paths bound back read-write",
            ),
            Self::NoMountNamespace => f.write_str(
                "no mount namespace can be made here: the modes and timestamps of the user's \
                 own files outside the workspace are not confined",
            ),
            Self::CarveoutsBound { dirs } => write!(
                f,
                "carve-outs: bind-mounted read-only in a mount namespace of the command's \
                 own: {}",
                paths(dirs)
            ),
        }
    }
}

impl fmt::Display for Landlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ruleset {
                abi,
                kernel_abi,
                needed_abi,
                fs_rights,
                rules,
            } => write!(
                f,
                "landlock ABI {abi} (kernel ABI {kernel_abi}, needed {needed_abi}): \
                 {fs_rights} filesystem rights handled, {rules} rules"
            ),
            Self::TcpDenied => f.write_str("landlock: TCP bind and connect denied"),
            Self::Scopes => f.write_str(
                "landlock scopes: signals and abstract unix sockets stay inside the sandbox",
            ),
            Self::AbstractUnixScoped => f.write_str("abstract unix sockets confined (landlock)"),
            Self::CarveoutsFixed { dirs } => write!(
                f,
                "carve-outs: no entry can be created, removed or renamed directly in {}",
                paths(dirs)
            ),
            Self::RootReadLayer { rules } => write!(
                f,
                "root host: a first landlock layer grants reads only as an unprivileged user \
                 sees the system and the read-only paths ({rules} rules); root-only files \
                 there stay closed"
            ),
        }
    }
}

impl fmt::Display for Seccomp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SharedFilter { notifies: true } => f.write_str(
                "seccomp: the shared filter; denied calls reported (user notification, \
                 answered EPERM)",
            ),
            Self::SharedFilter { notifies: false } => f.write_str("seccomp: the shared filter"),
            Self::UnixSocketsDenied { landlock_abi } => write!(
                f,
                "socket(AF_UNIX) denied by seccomp: landlock ABI {landlock_abi} cannot confine \
                 connecting to a unix socket by path (ABI 9 can); socketpair(2) is allowed"
            ),
            Self::SentryProfile => f.write_str(
                "seccomp: core's syscall table as an OCI profile applied by the Sentry, setsid \
                 and setpgid allowed; it does not notify (gVisor has no seccomp user \
                 notification), so denied calls are refused, not reported",
            ),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HandedOver {
                id,
                by: Dropper::Command,
            } => write!(
                f,
                "root host: the command runs as uid and gid {id} (no account has it, no \
                 supplementary groups); the workspace and the writable paths are idmapped to \
                 it (on-disk root shown as {id}), so root-only files elsewhere are refused by \
                 the kernel's own permission checks"
            ),
            Self::HandedOver {
                id,
                by: Dropper::Bwrap,
            } => write!(
                f,
                "host is root: bwrap runs as uid and gid {id} (no account has it, no \
                 supplementary groups) in a mount namespace where the workspace and the \
                 writable paths are idmapped to it (on-disk root shown as {id}), so root-only \
                 files elsewhere are refused by the kernel's own permission checks"
            ),
            Self::KeepsRoot {
                why,
                by: Dropper::Command,
            } => write!(
                f,
                "root host: the command keeps uid 0 (without capabilities): {why}"
            ),
            Self::KeepsRoot {
                why,
                by: Dropper::Bwrap,
            } => write!(
                f,
                "host is root: bwrap runs as root (the command as uid 0 without \
                 capabilities): {why}"
            ),
            Self::RootOnlyHidden { count } => write!(
                f,
                "host is root: {count} root-only entries of the system and named paths hidden"
            ),
            Self::CapabilitiesDropped => f.write_str(
                "capabilities: all dropped (bounding, ambient, effective, permitted, \
                 inheritable); SECBIT_NOROOT locked",
            ),
            Self::InSentry { uid, gid } => write!(
                f,
                "runs as uid {uid} gid {gid} inside the Sentry, no capabilities"
            ),
            Self::InContainer { uid, gid, chosen } => {
                let why = match chosen {
                    ChosenUid::Caller => "the caller's own uid",
                    ChosenUid::WorkspaceOwner => "the host runs as root: the workspace owner's uid",
                    ChosenUid::Nobody => {
                        "the host runs as root and owns the workspace: the unprivileged \
                         `nobody`"
                    }
                };
                write!(f, "runs as uid {uid} gid {gid} ({why}), no capabilities")
            }
            Self::IdmappedTree { path, uid } => write!(
                f,
                "{} handed to uid {uid} by an idmapped mount",
                path.display()
            ),
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let version = |v: &Option<String>| v.clone().unwrap_or("(unknown version)".into());
        match self {
            Self::Bwrap { version: v } => write!(f, "bwrap {}", version(v)),
            Self::Gvisor {
                version: v,
                rootless,
            } => write!(
                f,
                "gVisor {} ({}), platform ptrace",
                version(v),
                if *rootless {
                    "rootless"
                } else {
                    "runsc as root"
                }
            ),
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Workspace { made_by, changes } => write!(
                f,
                "workspace layer: {} ({})",
                made_by.as_str(),
                if *changes == Changes::Review {
                    "changes held for review"
                } else {
                    "changes discarded"
                }
            ),
        }
    }
}

impl fmt::Display for Door {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WaysOut {
                proxy,
                host_ports,
                published,
            } => {
                let mut parts = Vec::new();
                if let Some(p) = proxy {
                    parts.push(format!(
                        "the egress proxy on 127.0.0.1:{} (HTTP CONNECT, HTTP, SOCKS5), \
                         allowing {}{}",
                        p.port,
                        list(&p.allow),
                        chained(p)
                    ));
                }
                if !host_ports.is_empty() {
                    parts.push(format!(
                        "the host's 127.0.0.1 ports {} (and no other)",
                        list(host_ports)
                    ));
                }
                if parts.is_empty() {
                    f.write_str("network: a private namespace with only its loopback")?;
                } else {
                    write!(
                        f,
                        "network: a private namespace whose ways out are {}",
                        parts.join("; ")
                    )?;
                }
                if !published.is_empty() {
                    write!(
                        f,
                        "; its 127.0.0.1 ports {} published on the host's loopback \
                         (connections made by the host with sockets created in the namespace)",
                        list(published)
                    )?;
                }
                Ok(())
            }
            Self::Published { ports } => write!(
                f,
                "published: the command's 127.0.0.1 ports {} on the host (connections made \
                 by the host inside the sandbox's namespace)",
                list(ports.iter().map(|p| format!("{} at {}", p.port, p.host)))
            ),
            Self::Mediated { proxy, host_ports } => write!(
                f,
                "network: no namespace of its own; every connect mediated by the sandbox's \
                 supervisor, which reaches only the egress proxy on 127.0.0.1:{} (HTTP \
                 CONNECT, HTTP, SOCKS5), allowing {}{}{}; listen, UDP and raw sockets refused",
                proxy.port,
                list(&proxy.allow),
                chained(proxy),
                if host_ports.is_empty() {
                    String::new()
                } else {
                    format!(", and the host's 127.0.0.1 ports {}", list(host_ports))
                }
            ),
            Self::Secrets {
                names,
                hosts,
                bundle,
            } => write!(
                f,
                "secrets: {} held as placeholders; the proxy terminates TLS for {} under the \
                 run's own authority and puts the values in there alone; the command trusts \
                 it through {} (read-only, no key)",
                list(names),
                list(hosts),
                bundle.display()
            ),
        }
    }
}

/// What the record says of a proxy's upstream proxy, if it chains to one.
fn chained(p: &Proxy) -> String {
    match &p.upstream {
        Some(up) => format!(
            ", each connection through the upstream proxy {up} (CONNECT; it resolves the \
             names)"
        ),
        None => String::new(),
    }
}

impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ForkJoinedCgroups { why } => write!(
                f,
                "spawned by fork, joining the run's cgroups by cgroup.procs ({why})"
            ),
            // Billionths as a decimal: 1500000000 is `1.5`, as the option was written.
            Self::CpuQuota { nano_cpus } => {
                write!(f, "CPU quota: {} CPUs", *nano_cpus as f64 / 1e9)
            }
            Self::OutOfMemoryKilled => f.write_str("the out-of-memory killer ran in the container"),
        }
    }
}

impl fmt::Display for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Image { name, id } => write!(
                f,
                "image {name} ({})",
                id.as_deref().unwrap_or("unknown id")
            ),
            Self::Network { bridge: true } => f.write_str("network: the engine's default bridge"),
            Self::Network { bridge: false } => {
                f.write_str("network: none (a loopback private to the container)")
            }
            Self::Tree { path, via, link_to } => {
                let how = match via {
                    TreeVia::Bind => "bind-mounted".to_string(),
                    TreeVia::IdmappedBind { uid, gid } => format!(
                        "bind-mounted through an idmapped mount: uid {uid} gid {gid}'s files \
                         appear as the command's, and what it writes is theirs on disk"
                    ),
                    TreeVia::VolumeDiscarded => {
                        "copied into a volume; changes discarded (snapshot)".to_string()
                    }
                    TreeVia::VolumeWrittenBack => {
                        "copied into a volume; changes copied back after the end".to_string()
                    }
                    TreeVia::VolumeReadOnly => "copied into a read-only volume".to_string(),
                    TreeVia::InsideCopy => {
                        "copied with the workspace, root-owned and read-only".to_string()
                    }
                };
                match link_to {
                    Some(target) => write!(
                        f,
                        "{}: a symlink on the host to {}, which is {how} at both paths",
                        path.display(),
                        target.display()
                    ),
                    None => write!(f, "{}: {how}", path.display()),
                }
            }
            Self::CopiedWithoutIdmap { why } => write!(
                f,
                "idmapped mounts are unavailable here ({why}); trees the command's uid does \
                 not own travel by copy"
            ),
            Self::EngineWarning {
                warning,
                swap_unlimited: true,
            } => write!(f, "engine: {warning} (swap use is not limited)"),
            Self::EngineWarning {
                warning,
                swap_unlimited: false,
            } => write!(f, "engine: {warning}"),
            Self::WarmPool => {
                f.write_str("container: started ahead of time with this policy (warm pool)")
            }
        }
    }
}

macro_rules! into_enforced {
    ($($t:ident),*) => {
        $(impl From<$t> for Enforced {
            fn from(v: $t) -> Self {
                Self::$t(v)
            }
        })*
    };
}
into_enforced!(Namespaces, Landlock, Seccomp, Identity, Runtime, Layer, Door, Limits, Container);

/// What was enforced for one run, in the order the stages recorded it. In JSON it is two
/// keys side by side: `notes`, the rendered lines (what consumers read before the record
/// was typed), and `enforced`, the typed list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record(Vec<Enforced>);

impl Record {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record one fact.
    pub fn push(&mut self, fact: impl Into<Enforced>) {
        self.0.push(fact.into());
    }

    /// Move every fact of `other` to the end of this record.
    pub fn append(&mut self, other: &mut Record) {
        self.0.append(&mut other.0);
    }

    /// Every fact, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Enforced> {
        self.0.iter()
    }

    /// Whether `fact` was recorded.
    pub fn contains(&self, fact: &Enforced) -> bool {
        self.0.contains(fact)
    }

    /// The rendered lines, one per fact.
    pub fn notes(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

impl std::ops::Deref for Record {
    type Target = [Enforced];
    fn deref(&self) -> &[Enforced] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Record {
    type Item = &'a Enforced;
    type IntoIter = std::slice::Iter<'a, Enforced>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<E: Into<Enforced>> Extend<E> for Record {
    fn extend<I: IntoIterator<Item = E>>(&mut self, iter: I) {
        self.0.extend(iter.into_iter().map(Into::into));
    }
}

impl<E: Into<Enforced>> FromIterator<E> for Record {
    fn from_iter<I: IntoIterator<Item = E>>(iter: I) -> Self {
        Self(iter.into_iter().map(Into::into).collect())
    }
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("notes", &self.notes())?;
        m.serialize_entry("enforced", &self.0)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One fact of every variant (each rendering's branches), for the checks over them all.
    fn every_fact() -> Vec<Enforced> {
        let p = PathBuf::from;
        let mut all = Record::new();
        all.extend([
            Namespaces::Network {
                in_user_namespace: true,
                loopback: true,
            },
            Namespaces::Network {
                in_user_namespace: false,
                loopback: false,
            },
            Namespaces::LoopbackOverGranted,
            Namespaces::NoneWithoutNamespace,
            Namespaces::Pid,
            Namespaces::SubreaperWithoutPid,
            Namespaces::MountsReadOnly,
            Namespaces::NoMountNamespace,
            Namespaces::CarveoutsBound {
                dirs: vec![p("/w/.git"), p("/w/.env")],
            },
        ]);
        all.extend([
            Landlock::Ruleset {
                abi: 6,
                kernel_abi: 7,
                needed_abi: 3,
                fs_rights: 16,
                rules: 12,
            },
            Landlock::TcpDenied,
            Landlock::Scopes,
            Landlock::AbstractUnixScoped,
            Landlock::CarveoutsFixed {
                dirs: vec![p("/w")],
            },
            Landlock::RootReadLayer { rules: 40 },
        ]);
        all.extend([
            Seccomp::SharedFilter { notifies: true },
            Seccomp::SharedFilter { notifies: false },
            Seccomp::UnixSocketsDenied { landlock_abi: 6 },
            Seccomp::SentryProfile,
        ]);
        for by in [Dropper::Command, Dropper::Bwrap] {
            all.push(Identity::HandedOver { id: 100000, by });
            all.push(Identity::KeepsRoot {
                why: "no mount namespace".into(),
                by,
            });
        }
        all.extend([
            Identity::RootOnlyHidden { count: 3 },
            Identity::CapabilitiesDropped,
            Identity::InSentry {
                uid: 1000,
                gid: 1000,
            },
            Identity::IdmappedTree {
                path: p("/w"),
                uid: 1000,
            },
        ]);
        for chosen in [
            ChosenUid::Caller,
            ChosenUid::WorkspaceOwner,
            ChosenUid::Nobody,
        ] {
            all.push(Identity::InContainer {
                uid: 65534,
                gid: 65534,
                chosen,
            });
        }
        all.extend([
            Runtime::Bwrap {
                version: Some("0.8.0".into()),
            },
            Runtime::Gvisor {
                version: None,
                rootless: true,
            },
            Runtime::Gvisor {
                version: Some("release-20250101.0".into()),
                rootless: false,
            },
        ]);
        for changes in [Changes::Review, Changes::Discard] {
            all.push(Layer::Workspace {
                made_by: LayerMechanism::Overlay,
                changes,
            });
        }
        all.extend([
            Door::WaysOut {
                proxy: Some(Proxy {
                    port: 3128,
                    allow: vec!["example.com".into(), "*.example.org".into()],
                    upstream: None,
                }),
                host_ports: vec![5432],
                published: vec![8080],
            },
            Door::WaysOut {
                proxy: Some(Proxy {
                    port: 3128,
                    allow: vec!["example.com".into()],
                    upstream: Some("proxy.corp.example:3128".into()),
                }),
                host_ports: vec![5432],
                published: vec![8080],
            },
            Door::WaysOut {
                proxy: None,
                host_ports: Vec::new(),
                published: Vec::new(),
            },
            Door::Mediated {
                proxy: Proxy {
                    port: 3128,
                    allow: vec!["example.com".into()],
                    upstream: None,
                },
                host_ports: vec![5432],
            },
            Door::Published {
                ports: vec![Published {
                    port: 8080,
                    host: "127.0.0.1:40000".parse().unwrap(),
                }],
            },
            Door::Secrets {
                names: vec!["GH_TOKEN".into()],
                hosts: vec!["github.com".into()],
                bundle: p("/tmp/sandbox-bundle@1-1-x/ca-bundle.pem"),
            },
        ]);
        all.extend([
            Limits::ForkJoinedCgroups {
                why: "clone3 refused".into(),
            },
            Limits::CpuQuota {
                nano_cpus: 1_500_000_000,
            },
            Limits::OutOfMemoryKilled,
        ]);
        let trees = [
            TreeVia::Bind,
            TreeVia::IdmappedBind {
                uid: 1000,
                gid: 1000,
            },
            TreeVia::VolumeDiscarded,
            TreeVia::VolumeWrittenBack,
            TreeVia::VolumeReadOnly,
            TreeVia::InsideCopy,
        ];
        all.extend(trees.map(|via| Container::Tree {
            path: p("/w"),
            via,
            link_to: None,
        }));
        all.push(Container::Tree {
            path: p("/lib"),
            via: TreeVia::Bind,
            link_to: Some(p("/usr/lib")),
        });
        all.extend([
            Container::Image {
                name: "debian:12".into(),
                id: None,
            },
            Container::Network { bridge: true },
            Container::Network { bridge: false },
            Container::CopiedWithoutIdmap {
                why: "EPERM".into(),
            },
            Container::EngineWarning {
                warning: "Memory limited without swap.".into(),
                swap_unlimited: true,
            },
            Container::EngineWarning {
                warning: "something".into(),
                swap_unlimited: false,
            },
            Container::WarmPool,
        ]);
        all.to_vec()
    }

    /// The defect that shipped once: a line continuation inside a string literal that kept
    /// the next line's indentation (26 spaces inside a sentence).
    #[test]
    fn no_rendered_line_has_two_spaces_or_a_line_break() {
        for fact in every_fact() {
            let line = fact.to_string();
            assert!(!line.contains("  "), "two spaces in {fact:?}: {line:?}");
            assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
            assert_eq!(line.trim(), line, "{line:?}");
            assert!(!line.is_empty());
        }
    }

    #[test]
    fn namespaces_render() {
        let r = |n: Namespaces| Enforced::from(n).to_string();
        assert_eq!(
            r(Namespaces::Network {
                in_user_namespace: true,
                loopback: true
            }),
            "network: a private namespace (in a user namespace), loopback up"
        );
        assert_eq!(
            r(Namespaces::Network {
                in_user_namespace: false,
                loopback: false
            }),
            "network: a private namespace with no interface up; the host's /proc/net out of \
             sight"
        );
        assert_eq!(
            r(Namespaces::LoopbackOverGranted),
            "loopback over-granted as the host's network"
        );
        assert!(r(Namespaces::NoneWithoutNamespace).starts_with("network none: no sockets"));
        assert!(r(Namespaces::Pid).starts_with("processes: a pid namespace of its own"));
        assert!(r(Namespaces::SubreaperWithoutPid)
            .starts_with("processes: no pid namespace; the sandbox's waiter, a child subreaper"));
        assert!(r(Namespaces::MountsReadOnly).starts_with("mounts: every mount read-only"));
        assert!(r(Namespaces::NoMountNamespace).starts_with("no mount namespace can be made"));
        assert_eq!(
            r(Namespaces::CarveoutsBound {
                dirs: vec!["/w/.git".into(), "/w/.env".into()]
            }),
            "carve-outs: bind-mounted read-only in a mount namespace of the command's own: \
             /w/.git, /w/.env"
        );
    }

    #[test]
    fn landlock_renders() {
        let r = |l: Landlock| Enforced::from(l).to_string();
        assert_eq!(
            r(Landlock::Ruleset {
                abi: 6,
                kernel_abi: 7,
                needed_abi: 3,
                fs_rights: 16,
                rules: 12
            }),
            "landlock ABI 6 (kernel ABI 7, needed 3): 16 filesystem rights handled, 12 rules"
        );
        assert_eq!(
            r(Landlock::TcpDenied),
            "landlock: TCP bind and connect denied"
        );
        assert!(r(Landlock::Scopes).starts_with("landlock scopes: signals"));
        assert_eq!(
            r(Landlock::AbstractUnixScoped),
            "abstract unix sockets confined (landlock)"
        );
        assert_eq!(
            r(Landlock::CarveoutsFixed {
                dirs: vec!["/w".into(), "/w/a".into()]
            }),
            "carve-outs: no entry can be created, removed or renamed directly in /w, /w/a"
        );
        assert!(r(Landlock::RootReadLayer { rules: 40 }).contains("(40 rules); root-only"));
    }

    #[test]
    fn seccomp_renders() {
        let r = |s: Seccomp| Enforced::from(s).to_string();
        assert_eq!(
            r(Seccomp::SharedFilter { notifies: false }),
            "seccomp: the shared filter"
        );
        assert_eq!(
            r(Seccomp::SharedFilter { notifies: true }),
            "seccomp: the shared filter; denied calls reported (user notification, answered \
             EPERM)"
        );
        assert!(r(Seccomp::UnixSocketsDenied { landlock_abi: 6 })
            .starts_with("socket(AF_UNIX) denied by seccomp: landlock ABI 6 cannot"));
        assert!(r(Seccomp::SentryProfile).contains("it does not notify"));
    }

    #[test]
    fn identity_renders() {
        let r = |i: Identity| Enforced::from(i).to_string();
        assert_eq!(
            r(Identity::HandedOver {
                id: 7,
                by: Dropper::Command
            }),
            "root host: the command runs as uid and gid 7 (no account has it, no \
             supplementary groups); the workspace and the writable paths are idmapped to it \
             (on-disk root shown as 7), so root-only files elsewhere are refused by the \
             kernel's own permission checks"
        );
        assert!(r(Identity::HandedOver {
            id: 7,
            by: Dropper::Bwrap
        })
        .starts_with("host is root: bwrap runs as uid and gid 7 (no account"));
        assert_eq!(
            r(Identity::KeepsRoot {
                why: "w".into(),
                by: Dropper::Command
            }),
            "root host: the command keeps uid 0 (without capabilities): w"
        );
        assert_eq!(
            r(Identity::KeepsRoot {
                why: "w".into(),
                by: Dropper::Bwrap
            }),
            "host is root: bwrap runs as root (the command as uid 0 without capabilities): w"
        );
        assert_eq!(
            r(Identity::RootOnlyHidden { count: 3 }),
            "host is root: 3 root-only entries of the system and named paths hidden"
        );
        assert!(r(Identity::CapabilitiesDropped).ends_with("SECBIT_NOROOT locked"));
        assert_eq!(
            r(Identity::InSentry { uid: 1, gid: 2 }),
            "runs as uid 1 gid 2 inside the Sentry, no capabilities"
        );
        assert_eq!(
            r(Identity::InContainer {
                uid: 1,
                gid: 2,
                chosen: ChosenUid::Caller
            }),
            "runs as uid 1 gid 2 (the caller's own uid), no capabilities"
        );
        assert_eq!(
            r(Identity::IdmappedTree {
                path: "/w".into(),
                uid: 1
            }),
            "/w handed to uid 1 by an idmapped mount"
        );
    }

    #[test]
    fn runtime_and_layer_render() {
        assert_eq!(
            Enforced::from(Runtime::Bwrap { version: None }).to_string(),
            "bwrap (unknown version)"
        );
        assert_eq!(
            Enforced::from(Runtime::Gvisor {
                version: Some("v1".into()),
                rootless: false
            })
            .to_string(),
            "gVisor v1 (runsc as root), platform ptrace"
        );
        assert_eq!(
            Enforced::from(Layer::Workspace {
                made_by: LayerMechanism::Reflink,
                changes: Changes::Review
            })
            .to_string(),
            "workspace layer: reflink (changes held for review)"
        );
        assert_eq!(
            Enforced::from(Layer::Workspace {
                made_by: LayerMechanism::Copy,
                changes: Changes::Discard
            })
            .to_string(),
            "workspace layer: copy (changes discarded)"
        );
    }

    #[test]
    fn door_renders() {
        let r = |d: Door| Enforced::from(d).to_string();
        assert_eq!(
            r(Door::WaysOut {
                proxy: Some(Proxy {
                    port: 3128,
                    allow: vec!["a.com".into(), "*.b.org".into()],
                    upstream: None,
                }),
                host_ports: vec![5432, 6379],
                published: vec![8080],
            }),
            "network: a private namespace whose ways out are the egress proxy on \
             127.0.0.1:3128 (HTTP CONNECT, HTTP, SOCKS5), allowing a.com, *.b.org; the \
             host's 127.0.0.1 ports 5432, 6379 (and no other); its 127.0.0.1 ports 8080 \
             published on the host's loopback (connections made by the host with sockets \
             created in the namespace)"
        );
        assert_eq!(
            r(Door::WaysOut {
                proxy: Some(Proxy {
                    port: 3128,
                    allow: vec!["a.com".into()],
                    upstream: Some("proxy.corp:8080".into()),
                }),
                host_ports: Vec::new(),
                published: Vec::new(),
            }),
            "network: a private namespace whose ways out are the egress proxy on \
             127.0.0.1:3128 (HTTP CONNECT, HTTP, SOCKS5), allowing a.com, each connection \
             through the upstream proxy proxy.corp:8080 (CONNECT; it resolves the names)"
        );
        assert_eq!(
            r(Door::WaysOut {
                proxy: None,
                host_ports: Vec::new(),
                published: Vec::new()
            }),
            "network: a private namespace with only its loopback"
        );
        assert_eq!(
            r(Door::Mediated {
                proxy: Proxy {
                    port: 3128,
                    allow: vec!["a.com".into()],
                    upstream: None,
                },
                host_ports: Vec::new(),
            }),
            "network: no namespace of its own; every connect mediated by the sandbox's \
             supervisor, which reaches only the egress proxy on 127.0.0.1:3128 (HTTP CONNECT, \
             HTTP, SOCKS5), allowing a.com; listen, UDP and raw sockets refused"
        );
        assert_eq!(
            r(Door::Published {
                ports: vec![Published {
                    port: 80,
                    host: "127.0.0.1:4000".parse().unwrap()
                }]
            }),
            "published: the command's 127.0.0.1 ports 80 at 127.0.0.1:4000 on the host \
             (connections made by the host inside the sandbox's namespace)"
        );
        assert_eq!(
            r(Door::Secrets {
                names: vec!["GH_TOKEN".into(), "NPM_TOKEN".into()],
                hosts: vec!["github.com".into()],
                bundle: "/tmp/b/ca-bundle.pem".into(),
            }),
            "secrets: GH_TOKEN, NPM_TOKEN held as placeholders; the proxy terminates TLS for \
             github.com under the run's own authority and puts the values in there alone; the \
             command trusts it through /tmp/b/ca-bundle.pem (read-only, no key)"
        );
    }

    #[test]
    fn limits_render() {
        let r = |l: Limits| Enforced::from(l).to_string();
        assert_eq!(
            r(Limits::ForkJoinedCgroups { why: "w".into() }),
            "spawned by fork, joining the run's cgroups by cgroup.procs (w)"
        );
        assert_eq!(
            r(Limits::CpuQuota {
                nano_cpus: 1_500_000_000
            }),
            "CPU quota: 1.5 CPUs"
        );
        assert_eq!(
            r(Limits::CpuQuota {
                nano_cpus: 100_000_000
            }),
            "CPU quota: 0.1 CPUs"
        );
        assert_eq!(
            r(Limits::OutOfMemoryKilled),
            "the out-of-memory killer ran in the container"
        );
    }

    #[test]
    fn container_renders() {
        let r = |c: Container| Enforced::from(c).to_string();
        assert_eq!(
            r(Container::Image {
                name: "debian:12".into(),
                id: Some("sha256:1".into())
            }),
            "image debian:12 (sha256:1)"
        );
        assert_eq!(
            r(Container::Network { bridge: false }),
            "network: none (a loopback private to the container)"
        );
        assert_eq!(
            r(Container::Tree {
                path: "/w".into(),
                via: TreeVia::IdmappedBind { uid: 1, gid: 2 },
                link_to: None
            }),
            "/w: bind-mounted through an idmapped mount: uid 1 gid 2's files appear as the \
             command's, and what it writes is theirs on disk"
        );
        assert_eq!(
            r(Container::Tree {
                path: "/w".into(),
                via: TreeVia::VolumeDiscarded,
                link_to: None
            }),
            "/w: copied into a volume; changes discarded (snapshot)"
        );
        assert_eq!(
            r(Container::Tree {
                path: "/lib".into(),
                via: TreeVia::Bind,
                link_to: Some("/usr/lib".into())
            }),
            "/lib: a symlink on the host to /usr/lib, which is bind-mounted at both paths"
        );
        assert!(r(Container::CopiedWithoutIdmap { why: "x".into() })
            .starts_with("idmapped mounts are unavailable here (x); trees"));
        assert_eq!(
            r(Container::EngineWarning {
                warning: "w".into(),
                swap_unlimited: true
            }),
            "engine: w (swap use is not limited)"
        );
        assert_eq!(
            r(Container::WarmPool),
            "container: started ahead of time with this policy (warm pool)"
        );
    }

    /// JSON consumers match on `mechanism` and `fact`; `notes` stays the rendered lines.
    #[test]
    fn json_has_notes_and_the_tagged_list() {
        let mut r = Record::new();
        r.push(Seccomp::SharedFilter { notifies: true });
        r.push(Container::Tree {
            path: "/w".into(),
            via: TreeVia::Bind,
            link_to: None,
        });
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["notes"][0], r[0].to_string());
        assert_eq!(
            j["enforced"][0],
            serde_json::json!({"mechanism": "seccomp", "fact": "shared_filter", "notifies": true})
        );
        assert_eq!(
            j["enforced"][1],
            serde_json::json!({"mechanism": "container", "fact": "tree", "path": "/w",
                               "via": {"how": "bind"}, "link_to": null})
        );
        for fact in every_fact() {
            let v = serde_json::to_value(&fact).unwrap();
            assert!(v["mechanism"].is_string() && v["fact"].is_string(), "{v}");
        }
    }
}
