//! The `landlock` backend: a command confined by the kernel's own mechanisms, with no helper
//! binary and nearly the cost of a bare fork and exec.
//!
//! # What it confines
//!
//! - **Files** (landlock): the workspace and the named writable paths are read-write; the
//!   system directories (see `src/system.rs` for the list and why each entry is
//!   there) and the named read-only paths are readable; everything else, including the
//!   caller's home, is denied with `EACCES`. Every filesystem right of the kernel's ABI is
//!   handled, as a hard requirement: a kernel that cannot enforce what a run needs refuses
//!   it as unavailable, naming its ABI and the remedy.
//! - **Read-only carve-outs** inside the workspace: bind-mounted read-only in a mount
//!   namespace of the command's own, with the directories on the way to them pinned in
//!   place, so the rest of the workspace stays fully writable; where no mount namespace can
//!   be made, by landlock rules alone, at the price of fixing the directories on the way to
//!   them (nothing created or removed directly in them). What neither can hold (a
//!   hard-linked file in a carve-out, a writable path inside one) is refused. See
//!   `src/ruleset.rs`.
//! - **System calls** (seccomp): the filter shared with bwrap (`sandbox_host::seccomp`),
//!   the same on every lane and backend (`setsid` and `setpgid` allowed); plus, on
//!   kernels before landlock ABI 9, `socket(AF_UNIX)`, since connecting to a unix socket by
//!   path is not confined there (see `src/filter.rs`). Denied calls fail with
//!   `EPERM`; `no_new_privs` is set.
//! - **Network**: `none` by seccomp (no socket but `AF_UNIX`) and landlock (TCP bind and
//!   connect, ABI 4), in a private network namespace with nothing up, so the host's
//!   `/proc/net` (unix socket paths, listeners, routes) is out of sight; `loopback` by a
//!   private network namespace with its own `lo`; both made through a user namespace when
//!   the host is not root; `full` unrestricted; `proxy` and host ports are `loopback` plus
//!   listeners made in that namespace between fork and exec and handed to the run's proxy
//!   (`sandbox-proxy`). Where no namespace can be made (a default container or pod: its
//!   seccomp profile refuses `unshare`), `none` is enforced by the filters and landlock
//!   alone, exactly: no socket but `AF_UNIX`, no io_uring, no TCP bind or connect; what is
//!   left is the host's (the pod's) `/proc/net` readable, which the capability states
//!   (`network_state_private` false) and the lane table accepts and records on `fast` and
//!   refuses on `strict`. `loopback` is then over-granted (the lane decides); `proxy` is a
//!   door the supervisor mediates (`sandbox_host::process::Mediation`): the filter notifies
//!   it of every `connect`, it connects a socket of its own to the run's proxy and installs
//!   that in the command's place, and it refuses every other address; `listen`, sockets but
//!   `AF_UNIX` and TCP, sends to an address of their own and `MSG_FASTOPEN` are denied, and
//!   landlock denies the command's own TCP, with the same `/proc/net` disclosure recorded.
//!   Host ports work the same way (with `proxy`); published ports are refused there. Signals and abstract unix sockets are scoped to the sandbox
//!   (ABI 6) on every run, so runs that share the host's uid and network cannot signal or
//!   reach each other.
//! - **Processes** (on `strict`): a pid namespace of the command's own, with a private
//!   `/proc` that shows only its processes. Core's `clone3` makes the spawned process the
//!   namespace's init (`sandbox_host::process::BornIn`); every step below confines it, and
//!   it execs core's waiter (`sandbox_host::process::waiter`) from a sealed in-memory file,
//!   which starts the command, reaps orphans and hands out the command's exact status (an
//!   init cannot die of its own signal, so the command is not pid 1 itself). The init's
//!   exec leaves the host's memory, so the command is forked from a small program: no
//!   process of the run copies the host, however large it is. `fast` and `trusted` skip
//!   the namespace (they do not require process isolation) and save its cost, but not the
//!   waiter: there it is a child subreaper (`PR_SET_CHILD_SUBREAPER`) that every orphan of
//!   the run is re-parented to, and it kills every descendant until none is left when the
//!   command ends, the host kills the run or the host dies, whatever sessions or process
//!   groups the command made. The command runs in a landlock domain nested in the
//!   waiter's that scopes signals (ABI 6), so it cannot kill the waiter first; where the
//!   kernel has no signal scoping and no cgroup can kill the tree, every lane gets the pid
//!   namespace, and a host with neither refuses the run.
//! - **Root**: a root host's command loses every capability in all five sets, with
//!   `SECBIT_NOROOT` locked so no exec gives any back, and landlock scopes keep its
//!   signals and abstract unix sockets inside the sandbox (ABI 6, required for a root
//!   host). It then runs as an unprivileged id no account has
//!   ([`sandbox_host::idmap::SPARE_COMMAND_ID`]), the workspace and the writable paths
//!   attached in its mount namespace as idmapped copies where on-disk root shows as that
//!   id: the kernel's own permission checks refuse it every root-only file, as they do an
//!   ordinary user (see `sandbox_host::handover`). Where that cannot be had for a run (a
//!   tree on a filesystem without idmapped mounts, a path only root can reach, a writable
//!   path holding a layered workspace), it keeps uid 0 (a root-owned workspace must stay writable) and a
//!   first landlock layer lets it read the system directories and the named read-only
//!   paths only as an unprivileged user could, so root-only files like `/etc/shadow` stay
//!   closed although uid 0 owns them (see `src/compile.rs`; this needs a walk of those
//!   directories, ~0.4 s per process); the root-only files of `/proc` (`slabinfo`,
//!   `kpageflags`, `timer_list`, `keys`, ...) are then covered by unreadable binds
//!   (`ProcMask` in `src/child.rs`). The outcome's notes say which path a run took.
//! - **Resources, output, timeout, tree kill, environment**: core's, as for every process
//!   backend.
//! - **Change sets**: core's copy-on-write layer (`sandbox_core::changes`), an overlay
//!   core mounts over the workspace in the child before this backend's steps. Landlock
//!   skips a directory a mount covers, so the workspace's rules are added once more on the
//!   overlay after it is mounted (`child::RulesOnLayer`); the upper directory itself is in
//!   a temp dir the command is granted nothing of.
//!
//! # What it cannot
//!
//! - **Process isolation where no namespace can be made** (a host that is not root with
//!   unprivileged user namespaces off): then there is no pid namespace, the command can
//!   list host processes in `/proc` and read their command lines (not their memory,
//!   environment or descriptors: landlock denies ptrace out of the sandbox), and cannot
//!   signal them when the ABI has signal scoping (6+). The capability then does not claim
//!   `process_isolation` (decided when the backend is built, by making one), and the
//!   `strict` lane refuses this backend with the remedy ([`PID_NS_REMEDY`]); `fast` still
//!   runs it.
//! - As root where the command keeps uid 0, a rename across directories is refused with
//!   `EXDEV` (a root host's first layer handles reads only, and landlock denies
//!   reparenting unless every layer grants it): `mv` falls back to copy and delete, as
//!   across filesystems.
//! - `/tmp` is not writable unless named: set `TMPDIR` into the workspace for tools that
//!   need one.
//!
//! # What it needs
//!
//! Linux with landlock enabled at ABI 3 or newer (6.2; ABI 6, Linux 6.12, when the host
//! runs as root) and seccomp filters; for `strict`, network `none` and `loopback`, and for
//! carve-outs that leave the workspace root writable, unprivileged user namespaces (or
//! root).
//! [`Sandbox::preflight`](sandbox_core::Sandbox::preflight) checks each and runs a real
//! command.
//!
//! # How it works
//!
//! Everything is prepared in the parent, in `prepare`: the ruleset (a pure function of
//! the plan, `src/ruleset.rs`, made into a kernel ruleset by
//! `src/compile.rs`), the compiled filters (cached per process), the namespace
//! maps and mount paths. Between fork and exec the child only applies them with raw
//! system calls (see `src/child.rs` for the order and why each call is safe after
//! a fork in a multi-threaded program). What does not depend on the run is found once: the
//! ABI, the namespace probe, the filters, the system grants, a root host's read layer. The
//! namespace probes (two forked children that make the namespaces a run would) are the
//! only part that starts a process: their answers are recorded (`sandbox_host::facts`: once
//! per process, and in the caller's store across processes, only when they worked) and a
//! recorded answer is taken without a probe. It only says how the namespaces are made: a
//! run whose `unshare` fails ends before its command starts, and the preflight probes
//! afresh and reports the stale record.
//!
//! The cost over core's own process machinery is some 30 µs of parent work (a dozen
//! rules) and, in the child, a few system calls plus the kernel's preparation of two
//! seccomp filters; `examples/landlock-bench.rs` measures it against a bare spawn.
//!
//! # Testing
//!
//! Unit tests cover the ruleset for every knob against a made-up tree, the filters and
//! each child step in a forked child. `tests/` runs real commands and checks the effects
//! from the host, one test per denied call class, and 64 sandboxes started at once,
//! repeatedly, on a multi-threaded runtime. Both are meant to run as root and as an
//! unprivileged uid.
//!
//! # Dependencies
//!
//! `sandbox-core` (the contract and the process machinery), `sandbox-proxy` (the egress
//! proxy and host ports of network mode `proxy`), `landlock` (rulesets, ABI
//! vocabulary, hard-requirement mode), `seccompiler` (this backend's own small filter),
//! `libc` (the raw calls between fork and exec), `rustix` (the calls of the pid
//! namespace's waiter and init once they share memory with a running process: rustix's
//! raw system calls write no `errno`, glibc's wrappers do), `thiserror` (the private error type),
//! `tempfile` (the preflight's throwaway workspace), `async-trait` (the launcher trait).

mod child;
mod compile;
mod error;
mod filter;
mod fsview;
mod host;
mod ruleset;
mod system;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sandbox_core::record::{Dropper, Identity, Landlock, Namespaces, Seccomp};
use sandbox_core::registry::{AutoRank, BackendConfig, BackendInfo, HostKey};
use sandbox_core::{
    Capability, Changes, DenialKinds, DoorPlace, Enforcement, Lane, NetworkMode, Plan, Preflight,
    SandboxError, SandboxExt, SandboxOpts, Status, TreeKill,
};
use sandbox_host::facts::HostRecord;
use sandbox_host::pipeline::ProcessSandbox;
use sandbox_host::process::{DoorEnd, HostSupport, Launch, Launcher};

use crate::child::{DropCapabilities, ProcessLimit, RestrictSelf};
use crate::error::Error;
use crate::host::{Host, NsMode};
use crate::ruleset::{MountNs, Request};

/// The backend's name.
pub const NAME: &str = "landlock";

/// What to do where no pid namespace can be made, for the `strict` lane.
pub const PID_NS_REMEDY: &str = "enable unprivileged user namespaces (`sysctl \
     user.max_user_namespaces=15000`; on Debian also `kernel.unprivileged_userns_clone=1`; on \
     Ubuntu `kernel.apparmor_restrict_unprivileged_userns=0`), run the host as root, or use the \
     `fast` lane, which does not need process isolation";

/// What to do where no pid namespace can be made, for the `strict` lane: inside a container
/// that withholds namespaces or masks `/proc`, what the container must allow (the host's
/// sysctls are not the cause there); elsewhere [`PID_NS_REMEDY`].
pub fn pid_ns_remedy() -> String {
    sandbox_host::container::Confinement::detect()
        .strict_remedy()
        .unwrap_or_else(|| PID_NS_REMEDY.to_string())
}

/// What to do where no network namespace can be made (`proxy`, host ports).
fn net_ns_remedy() -> String {
    sandbox_host::container::Confinement::detect()
        .namespaces_remedy()
        .unwrap_or_else(|| "enable unprivileged user namespaces, or run the host as root".into())
}

/// What the facade's registry knows of this backend. `auto` tries it first on `fast` and
/// on `strict` (it costs about what a bare spawn does, its pid namespace a little more:
/// the cheapest of the backends that qualify, as the bench measures; where it cannot make
/// the namespace the `strict` lane refuses it and `auto` goes on to the next), and last on
/// `trusted`.
pub const INFO: BackendInfo = BackendInfo {
    name: NAME,
    summary: "landlock and seccomp; on strict a pid namespace with its own /proc",
    auto_rank: AutoRank {
        strict: Some(5),
        fast: Some(10),
        trusted: Some(30),
    },
    unconfined: false,
    unprivileged: true,
    image: None,
    make: |config| Ok(Arc::new(LandlockBackend::with_config(config))),
    // Whether the backend works here is the kernel's landlock ABI; seccomp and namespaces
    // come with the kernel release, which the command line's key holds already.
    host_key: HostKey::Fact(|| format!("landlock {:?}", host::Landlock::detect())),
    leaves: None,
};

/// What the workspace's own tools (the bench, CI) need to know of this backend.
#[cfg(feature = "tooling")]
pub const TOOLING: sandbox_core::registry::Tooling = sandbox_core::registry::Tooling {
    launcher: Some(|config| sandbox_host::pipeline::erase(LandlockBackend::with_config(config))),
    direct: None,
    // The kernel is all it needs.
    host_packages: &[],
    // The backend meant to cost next to nothing: near a bare spawn (issue 7).
    cost: sandbox_core::registry::CostTargets {
        startup_vs_bare_spawn: Some(1.3),
        ..sandbox_core::registry::CostTargets::NONE
    },
};

/// A sandbox confined by landlock and seccomp.
pub type LandlockSandbox = ProcessSandbox<LandlockBackend>;

/// The launcher: what the host offers, found once, and the capability that follows.
#[derive(Clone, Debug)]
pub struct LandlockBackend {
    host: Arc<Host>,
    capability: Capability,
    /// Where the namespace probes' answers were taken from and are kept.
    record: Arc<HostRecord>,
}

sandbox_host::launcher_backend!(LandlockBackend);

impl LandlockBackend {
    /// Ask the host (landlock ABI, seccomp, namespaces) and state the capability; the
    /// namespace probes run once per process (see `sandbox_host::facts`).
    pub fn new() -> Self {
        Self::with_config(&BackendConfig::default())
    }

    /// As [`new`](Self::new), with the namespace probes' answers taken from and kept in
    /// `config`'s fact store too, so that a new process need not fork them again. A
    /// recorded answer only says which way the namespaces are made: every run still makes
    /// them, and a run whose namespaces cannot be made fails before the command starts.
    pub fn with_config(config: &BackendConfig) -> Self {
        let record = HostRecord::open(config, NAME, &host::own_key());
        let host = Host::detect(&record);
        let capability = capability(&host);
        Self {
            host: Arc::new(host),
            capability,
            record: Arc::new(record),
        }
    }

    /// The preflight's own look at the namespaces, probed afresh: an error when this value
    /// claims namespaces (from a recorded answer) that can no longer be made, or made the
    /// way it would make them; the record is then dropped. A host that offers more than
    /// this value claims is not an error: the value confines by what it claims.
    fn recheck(&self) -> Result<(), SandboxError> {
        let fresh = Host::detect(&HostRecord::fresh(NAME));
        let mode = |r: &Result<NsMode, String>| r.as_ref().ok().map(std::mem::discriminant);
        let stale = match (&self.host.ns, &fresh.ns) {
            (Ok(_), Err(_)) => true,
            (Ok(_), Ok(_)) => mode(&self.host.ns) != mode(&fresh.ns),
            (Err(_), _) => false,
        } || (self.host.pid_ns.is_ok() && fresh.pid_ns.is_err());
        if !stale {
            return Ok(());
        }
        self.record.forget();
        let found = match (&fresh.ns, &fresh.pid_ns) {
            (Err(e), _) | (Ok(_), Err(e)) => e.clone(),
            (Ok(_), Ok(())) => "they are made another way now".to_string(),
        };
        Err(SandboxError::unavailable(
            NAME,
            format!(
                "this backend was built on recorded host facts that no longer hold: the \
                 namespaces it would make fail ({found}); the record is dropped"
            ),
            format!(
                "{}; then run again, which probes the host afresh",
                pid_ns_remedy()
            ),
        ))
    }
}

impl Default for LandlockBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// A new landlock sandbox.
pub fn sandbox() -> LandlockSandbox {
    ProcessSandbox::new(LandlockBackend::new())
}

/// What landlock enforces on `host`. Claims assume landlock is usable; where it is not,
/// every run is refused as unavailable (never run with less).
fn capability(host: &Host) -> Capability {
    let support = HostSupport::detect(false);
    let mediated = host.ns.is_err() && mediation_possible(host);
    let mut cap = Capability {
        confine_writes: true,
        confine_reads: true,
        readonly_carveouts: true,
        hide_paths: true,
        // Nothing reaches a network with or without a namespace: the shared filter allows no
        // socket but `AF_UNIX` (no inet, packet or netlink socket) and no io_uring, landlock
        // denies every TCP bind and connect (ABI 4), and a unix socket reaches nothing of the
        // host's (by path: landlock ABI 9 or `socket(AF_UNIX)` denied; abstract: scoped,
        // ABI 6, or again no `AF_UNIX` socket at all). Without a network namespace of its own
        // the command still reads the host's (or pod's) network state in /proc/net: that is
        // `network_state_private`, which the lane table weighs.
        network_none: Enforcement::Exact,
        network_state_private: host.ns.is_ok(),
        network_loopback: if host.ns.is_ok() {
            Enforcement::Exact
        } else {
            Enforcement::OverGrant("the host's whole network")
        },
        network_full: Enforcement::Exact,
        // The proxy's listener is made inside the command's private network namespace;
        // without one, the run's supervisor mediates every connect (the door's
        // `DoorPlace::Mediated`), where the kernel can notify it.
        network_proxy: if host.ns.is_ok() || mediated {
            Enforcement::Exact
        } else {
            Enforcement::Unsupported
        },
        door: if mediated {
            DoorPlace::Mediated
        } else {
            DoorPlace::Namespace
        },
        // Through the mediated door too (with `proxy`): the supervisor connects the
        // command's `127.0.0.1:PORT` to the proxy's forwarder of that port.
        host_ports: host.ns.is_ok() || mediated,
        // The child also hands over its network namespace, for the sockets of published
        // ports.
        publish: host.ns.is_ok(),
        // A pid namespace on `strict`; elsewhere the waiter, a child subreaper, where the
        // command cannot signal it (ABI 6) or a cgroup kills the tree anyway; where neither
        // holds, `prepare` makes the pid namespace on every lane.
        tree_kill: host
            .landlock
            .abi()
            .is_ok_and(|abi| abi >= landlock::ABI::V6)
            || support.cgroup_kill.is_some()
            || (host.ns.is_ok() && host.pid_ns.is_ok()),
        // Claimed exactly when a pid namespace with its own /proc was made here.
        process_isolation: host.pid_ns.is_ok(),
        // The waiter waits for orphans on every lane: as the pid namespace's init, or as
        // the run's child subreaper.
        reaps_orphans: true,
        // The pid namespace's init dies with the host (`PR_SET_PDEATHSIG`), and with it
        // the whole namespace; without one, a descendant of the command could outlive it.
        dies_with_host: host.pid_ns.is_ok(),
        // Without a mount namespace a root host's command could still change the mode of
        // every root-owned file it can name (landlock has no right for that).
        drops_host_root: !host.is_root || host.ns.is_ok(),
        signal_status: true,
        host_programs: true,
        full_network_is_host: true,
        // Only what the notifying filter sees (the table's denied calls) and what the
        // proxy refuses, where it can run. Landlock's own refusals (files, network ports,
        // signals) go to the audit log, which this backend does not read, so they are not
        // claimed.
        // Inside a container whose own seccomp profile refuses a call (`mount`, `unshare`)
        // before this filter sees it, the kernel answers with the profile's errno and no
        // notification comes (an error action outranks a notification): not claimed there.
        reports_denials: DenialKinds {
            syscall: sandbox_host::seccomp::user_notification_available()
                && !sandbox_host::container::Confinement::detect().seccomp_filtered,
            ptrace: sandbox_host::seccomp::user_notification_available()
                && !sandbox_host::container::Confinement::detect().seccomp_filtered,
            network_connect: host.ns.is_ok() || mediated,
            ..DenialKinds::default()
        },
        // Where the proxy is the only way out (a private network namespace, or a mediated
        // door); the run's bundle is a read-only path the ruleset grants.
        secrets: host.ns.is_ok() || mediated,
        ..Capability::default()
    };
    support.apply(&mut cap);
    cap
}

/// Whether a door without a namespace can be kept here: the kernel notifies a supervisor
/// (and installs its descriptors: `SECCOMP_ADDFD_FLAG_SETFD`, Linux 5.14, older than any
/// kernel with landlock's TCP rules), and landlock denies the command's own TCP (ABI 4).
fn mediation_possible(host: &Host) -> bool {
    sandbox_host::seccomp::user_notification_available()
        && host.seccomp
        && host
            .landlock
            .abi()
            .is_ok_and(|abi| abi >= landlock::ABI::V4)
}

impl LandlockBackend {
    fn kernel_abi(&self, host_is_root: bool) -> Result<landlock::ABI, Error> {
        let abi = self.host.landlock.abi()?;
        let needed = ruleset::needed_abi(host_is_root);
        if abi < needed {
            return Err(Error::AbiTooOld {
                kernel: abi,
                needed,
                why: if host_is_root {
                    "a root host needs signals scoped to the sandbox (ABI 6, Linux 6.12)"
                } else {
                    "confining writes needs the truncate right (ABI 3, Linux 6.2)"
                },
            });
        }
        if !self.host.seccomp {
            return Err(Error::NoSeccomp);
        }
        Ok(abi)
    }
}

#[async_trait]
impl Launcher for LandlockBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        self.capability.clone()
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        let abi = self.kernel_abi(self.host.is_root)?;
        // The real trial: the namespace probes again, whatever was recorded.
        self.recheck()?;
        let dir = sandbox_host::owner::temp_dir("landlock-preflight")?;
        let mut opts = SandboxOpts::new(dir.path(), ["true"]);
        // The strictest path this host claims: with the pid namespace where there is one.
        opts.lane = if self.capability.process_isolation {
            Lane::Strict
        } else {
            Lane::Fast
        };
        opts.timeout = Some(Duration::from_secs(30));
        let outcome = ProcessSandbox::new(self.clone()).execute(opts).await?;
        if outcome.status != (Status::Exited { code: 0 }) {
            return Err(SandboxError::unavailable(
                NAME,
                format!(
                    "`true` did not succeed in the sandbox: {:?}; stderr: {}",
                    outcome.status,
                    String::from_utf8_lossy(&outcome.stderr.bytes)
                ),
                "run `sandbox doctor` and report the output",
            ));
        }
        let mut details = outcome.policy.enforced.notes();
        details.push(match &self.host.ns {
            Ok(NsMode::Plain) => "namespaces: a private network namespace for `none` and \
                                  `loopback`, a read-only mount namespace for every run"
                .into(),
            Ok(NsMode::UserNs(_)) => "namespaces: a private network namespace for `none` and \
                                      `loopback`, a read-only mount namespace for every run, \
                                      inside a user namespace"
                .into(),
            Err(e) => format!(
                "no namespaces ({e}): loopback over-granted as the host's network, `none` \
                 with the host's /proc/net readable; carve-outs \
                 by split landlock rules (the directories on the way to them fixed); the \
                 modes and timestamps of the user's own files outside the workspace not \
                 confined"
            ),
        });
        details.push(match &self.host.pid_ns {
            Ok(()) => "processes: a pid namespace with a private /proc on `strict`".into(),
            Err(e) => format!(
                "no process isolation ({e}): `strict` refuses this backend; remedy: {}",
                pid_ns_remedy()
            ),
        });
        Ok(Preflight::new(
            NAME,
            Some(format!("landlock ABI {abi}")),
            details,
        ))
    }

    fn prepare(&self, plan: &Plan, mut door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        let kernel = self.kernel_abi(plan.host_is_root)?;
        let ns = self.host.ns.as_ref().ok();
        let mount_ns = if ns.is_some() {
            MountNs::Private
        } else {
            MountNs::Shared
        };
        let spec = ruleset::spec(
            &Request::from_plan(plan, mount_ns),
            &system::host_view(),
            kernel,
            &fsview::HostFs,
        )?;
        if spec.writable_mounts.len() > child::MAX_WRITABLE {
            return Err(SandboxError::invalid(
                "writable_paths",
                format!(
                    "{} writable trees; at most {} can be bound",
                    spec.writable_mounts.len(),
                    child::MAX_WRITABLE
                ),
            ));
        }
        let mut launch = Launch::direct(plan);
        launch.enforced = spec.record(kernel);
        let mut layers = Vec::with_capacity(2);
        // A root host: the command leaves uid 0 where its trees can be handed over, else it
        // keeps uid 0 under the surveyed read layer (see `sandbox_host::handover`).
        let handover = if plan.host_is_root {
            let handed = match ns {
                // The trees are attached in a mount namespace root itself makes.
                Some(NsMode::Plain) => {
                    sandbox_host::handover::hand_over(plan, &spec.writable_mounts)
                }
                _ => Err("no mount namespace made by root itself".into()),
            };
            match handed {
                Ok(h) => {
                    launch.enforced.push(Identity::HandedOver {
                        id: h.id,
                        by: Dropper::Command,
                    });
                    launch.layer_trees = h.layer.clone();
                    Some(h)
                }
                Err(why) => {
                    launch.enforced.push(Identity::KeepsRoot {
                        why: why.to_string(),
                        by: Dropper::Command,
                    });
                    None
                }
            }
        } else {
            None
        };
        if plan.host_is_root && handover.is_none() {
            let (layer, rules) =
                compile::RootLayer::for_run(spec.abi, &spec, &plan.read_only_paths)?;
            layers.push(layer);
            launch.enforced.push(Landlock::RootReadLayer { rules });
        }
        let own = Arc::new(compile::create(&spec)?);
        layers.push(own.clone());

        // Network `proxy` without a namespace: every connect goes to the supervisor, which
        // makes the connection to the proxy itself (the pipeline's mediated door).
        let mediated = plan.network == NetworkMode::Proxy && ns.is_none();
        let net = match (plan.network, ns) {
            (NetworkMode::Loopback | NetworkMode::None | NetworkMode::Proxy, Some(_)) => true,
            (NetworkMode::Proxy, None) if !mediation_possible(&self.host) => {
                // The capability says unsupported and the lane refused; never run it open.
                return Err(SandboxError::NotSupported {
                    backend: NAME,
                    feature: "network mode `proxy` without a network namespace".into(),
                    remedy: net_ns_remedy(),
                });
            }
            (NetworkMode::Loopback, None) => {
                // Only reachable on a lane that accepts the over-grant the capability
                // states; the lane check has run.
                launch.enforced.push(Namespaces::LoopbackOverGranted);
                false
            }
            (NetworkMode::None, None) => {
                launch.enforced.push(Namespaces::NoneWithoutNamespace);
                false
            }
            _ => false,
        };
        // A pid namespace where the lane asks for process isolation (the lane check has
        // run, so the host can make one); `fast` and `trusted` skip its cost.
        let pid = plan.lane == Lane::Strict;
        if pid && (ns.is_none() || self.host.pid_ns.is_err()) {
            return Err(SandboxError::unavailable(
                NAME,
                "no pid namespace can be made on this host",
                pid_ns_remedy(),
            ));
        }
        // Without a pid namespace the waiter, a child subreaper, kills the tree; it holds
        // only where the command cannot kill the waiter first (signals scoped, ABI 6), or a
        // cgroup kills the tree anyway. Else the pid namespace is made where it can be.
        let scoped = kernel >= landlock::ABI::V6;
        let cgroup = HostSupport::detect(false).cgroup_kill.is_some();
        let pid = pid || (!scoped && !cgroup && ns.is_some() && self.host.pid_ns.is_ok());
        if !pid && !scoped && !cgroup {
            return Err(SandboxError::unavailable(
                NAME,
                format!(
                    "nothing here can kill every descendant of the command: no pid \
                     namespace, no writable cgroup, and landlock ABI {} cannot keep the \
                     command from killing the sandbox's waiter (signal scoping needs ABI 6)",
                    kernel as i32
                ),
                format!(
                    "a Linux 6.12 kernel or later, a writable cgroup, or: {}",
                    pid_ns_remedy()
                ),
            ));
        }
        let mut userns = false;
        if let Some(mode) = ns {
            userns = matches!(mode, NsMode::UserNs(_));
            if net {
                launch.enforced.push(Namespaces::Network {
                    in_user_namespace: userns,
                    loopback: plan.network == NetworkMode::Loopback,
                });
            }

            launch.pre_exec.push(Box::new(mode.step(
                net,
                pid,
                &spec,
                &plan.cwd,
                handover.as_ref(),
            )));
            // The proxy and host ports: right after the namespaces are made, their listeners
            // are created in the network one and handed to the host, then closed here,
            // before the command runs.
            if let Some(d) = door.take().filter(|_| net) {
                launch.pre_exec.push(Box::new(d.send_step()));
                launch.keep_alive.push(Box::new(d.sock));
            }
            let by_rlimit =
                HostSupport::detect(false).processes == Some(sandbox_core::LimitMechanism::Rlimit);
            if let (true, true, Some(n)) = (userns, by_rlimit, plan.limits.max_processes) {
                // Counted in the user namespace; the waiter, ours, on top.
                launch.process_rlimit_inside = true;
                launch
                    .pre_exec
                    .push(Box::new(ProcessLimit(n.saturating_add(1) as libc::rlim_t)));
            }
        } else {
            launch.enforced.push(Namespaces::NoMountNamespace);
        }
        if door.is_some() {
            // The door's listeners are made in the command's own network namespace; without
            // one the plan should have been refused by the capability. Never run it open.
            return Err(SandboxError::NotSupported {
                backend: NAME,
                feature: "the egress proxy or host ports without a network namespace".into(),
                remedy: "run `sandbox doctor` to see what this host refuses".into(),
            });
        }
        if plan.host_is_root || userns || self.host.has_caps {
            launch.pre_exec.push(Box::new(DropCapabilities {
                last_cap: self.host.last_cap,
                bounding: plan.host_is_root || userns,
                switch_to: handover.as_ref().map(|h| h.id),
            }));
            launch.enforced.push(Identity::CapabilitiesDropped);
        }
        if plan.changes != Changes::Direct {
            // The layer over the workspace hides the workspace's inodes from its rules.
            let rules = spec
                .rules
                .iter()
                .filter(|r| r.path.starts_with(&plan.workspace))
                .map(|r| {
                    CString::new(r.path.as_os_str().as_bytes())
                        .map(|c| (c, r.access.bits()))
                        .map_err(|_| SandboxError::invalid("workspace", "contains a NUL byte"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            launch.pre_exec.push(Box::new(child::RulesOnLayer {
                ruleset: own,
                rules,
            }));
        }
        launch.pre_exec.push(Box::new(RestrictSelf {
            layers,
            private_proc: pid,
        }));
        if spec.deny_unix_sockets {
            launch.pre_exec.push(Box::new(filter::InstallFilter(
                filter::unix_socket_filter()?
            )));
        }
        // Last: it denies calls the steps above make. Where the kernel can notify, the
        // denied calls go to core's supervisor, which records each and answers EPERM; a
        // mediated door's filter notifies it of every `connect` whatever else it reports.
        let reports = plan.report_denials && sandbox_host::seccomp::user_notification_available();
        if reports || mediated {
            let program = if reports {
                filter::shared_notifying(plan.network, mediated)?
            } else {
                filter::shared(plan.network, mediated)?
            };
            let (step, host_end) = sandbox_host::seccomp::InstallNotifying::pair(program)?;
            launch.pre_exec.push(Box::new(step));
            launch.seccomp_listener = Some(host_end);
            launch
                .enforced
                .push(Seccomp::SharedFilter { notifies: reports });
        } else {
            launch.pre_exec.push(Box::new(
                filter::shared(plan.network, false)?.install_step(),
            ));
            launch
                .enforced
                .push(Seccomp::SharedFilter { notifies: false });
        }
        launch.enforced.push(if pid {
            Namespaces::Pid
        } else {
            Namespaces::SubreaperWithoutPid
        });
        launch.tree_kill = Some(if pid {
            TreeKill::PidNamespace
        } else {
            TreeKill::Subreaper
        });
        run_under_the_waiter(&mut launch, pid, userns, !pid && scoped)?;
        Ok(launch)
    }
}

/// Every lane: what the spawned process execs, once every step has confined it, is core's
/// waiter, from the process's one sealed copy (`/proc/self/fd/N`: the descriptor is
/// close-on-exec, so neither the waiter nor the command holds it). The waiter starts the
/// plan's program and reports its exact status; the ready pipe tells a waiter that could
/// not start from a command that ran.
///
/// With `pid` (`strict`), the spawned process is born the init of its own pid namespace
/// (and of the user namespace that owns it, where `userns`), and the namespace holds the
/// tree. Without, the waiter is a child subreaper that kills the tree itself; with
/// `scope_signals` it puts the command in a landlock domain that cannot signal it.
fn run_under_the_waiter(
    launch: &mut Launch,
    pid: bool,
    userns: bool,
    scope_signals: bool,
) -> Result<(), SandboxError> {
    use sandbox_host::process::waiter::{self, WaiterArgs};
    use std::os::fd::AsRawFd;
    let exe = waiter::executable()
        .map_err(|e| SandboxError::unavailable(NAME, e.to_string(), PID_NS_REMEDY))?;
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SandboxError::io("making the waiter's pipes", e.into()))
    };
    let (status_r, status_w) = pipe()?;
    let (ready_r, ready_w) = pipe()?;
    let mut argv = vec![launch.arg0.clone()];
    argv.append(&mut launch.args);
    launch.args = WaiterArgs {
        status: status_w.as_raw_fd(),
        ready: ready_w.as_raw_fd(),
        flags: if scope_signals { "s" } else { "" }.into(),
        nproc: None,
        proxy: None,
        program: std::mem::take(&mut launch.program),
        argv,
    }
    .to_args();
    launch.program = format!("/proc/self/fd/{}", exe.as_raw_fd()).into();
    launch.arg0 = "sandbox-init".into();
    launch.pass_fds.extend([status_w, ready_w]);
    launch.exit_status_pipe = Some(status_r);
    launch.ready_pipe = Some(ready_r);
    launch.born_in = sandbox_host::process::BornIn {
        pid,
        user: pid && userns,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{record, Enforced};
    use std::fs;

    /// The order of the steps between fork and exec, as `prepare` composes them for a
    /// run with a door on `strict`: the namespaces first, then the door's listeners made in
    /// the new network namespace (before anything restricts sockets), landlock before the
    /// system-call filter, and the filter last (nothing after it could be refused its own
    /// calls; the notifying one for denials comes after the plain one).
    #[test]
    fn the_steps_are_composed_in_the_order_their_rules_need() {
        let b = LandlockBackend::new();
        if b.host.ns.is_err() {
            eprintln!("skipped: this host makes no namespaces ({:?})", b.host.ns);
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.network = NetworkMode::Proxy;
        opts.allow_hosts = vec!["example.test".into()];
        let plan = Plan::new(&opts, NAME, &Launcher::capability(&b)).unwrap();
        let (sock, _host_end) = std::os::unix::net::UnixStream::pair().unwrap();
        let door = DoorEnd {
            sock: sock.into(),
            ports: vec![sandbox_core::PROXY_PORT],
        };
        let launch = b.prepare(&plan, Some(door)).unwrap();
        let names = launch.step_names();
        let at = |n: &str| {
            names
                .iter()
                .position(|s| s.starts_with(n))
                .unwrap_or_else(|| panic!("no `{n}` step in {names:?}"))
        };
        assert_eq!(at("namespaces"), 0, "{names:?}");
        assert!(at("send the door") > at("namespaces"), "{names:?}");
        assert!(at("landlock") > at("send the door"), "{names:?}");
        assert!(at("seccomp filter") > at("landlock"), "{names:?}");
        assert!(
            names[at("seccomp filter")..]
                .iter()
                .all(|s| s.starts_with("seccomp filter")),
            "a step after the filters: {names:?}"
        );
    }

    /// This host's backend as it would be where no namespace can be made.
    fn without_namespaces() -> LandlockBackend {
        let mut host = Host::detect(&HostRecord::fresh(NAME));
        host.ns = Err("disabled for the test".into());
        host.pid_ns = Err("disabled for the test".into());
        let capability = capability(&host);
        LandlockBackend {
            host: Arc::new(host),
            capability,
            record: Arc::new(HostRecord::fresh(NAME)),
        }
    }

    #[test]
    fn without_namespaces_loopback_is_an_over_grant_and_root_is_not_dropped() {
        let b = without_namespaces();
        let c = Launcher::capability(&b);
        assert!(matches!(c.network_loopback, Enforcement::OverGrant(_)));
        // `none` stays exact (the filter and landlock), its network state is the host's.
        assert_eq!(c.network_none, Enforcement::Exact);
        assert!(!c.network_state_private);
        assert!(!c.process_isolation);
        assert_eq!(c.drops_host_root, !b.host.is_root);
        assert!(c.readonly_carveouts && c.confine_writes && c.confine_reads);
    }

    /// The split-rule carve-outs, on a real run: the carve-out holds, the rest of the
    /// workspace is writable but its root is fixed.
    #[tokio::test(flavor = "multi_thread")]
    async fn without_namespaces_carveouts_hold_by_split_rules() {
        let b = without_namespaces();
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join(".git/hooks/pre-commit"), "orig").unwrap();
        fs::write(ws.join("README"), "readme").unwrap();
        let mut opts = SandboxOpts::new(
            ws,
            [
                "sh",
                "-c",
                "echo evil > .git/hooks/pre-commit; echo hook=$?; mv .git g; echo mv=$?; \
                 echo ok > src/new; echo src=$?; echo ok >> README; echo readme=$?; \
                 echo ok > top; echo top=$?",
            ],
        );
        opts.readonly_carveouts = vec![".git/hooks".into()];
        // `none` hides /proc/net only with a namespace: an over-grant here.
        opts.network = NetworkMode::Full;
        // A root host without namespaces runs only on the lane that accepts it.
        opts.lane = if b.host.is_root {
            Lane::Trusted
        } else {
            Lane::Fast
        };
        let o = ProcessSandbox::new(b).execute(opts).await.unwrap();
        let s = o.stdout.text();
        for want in ["hook=2", "mv=1", "src=0", "readme=0", "top=2"] {
            assert!(s.contains(want), "{want}: {s} {}", o.stderr.text());
        }
        assert_eq!(
            fs::read_to_string(ws.join(".git/hooks/pre-commit")).unwrap(),
            "orig"
        );
        assert!(ws.join(".git").is_dir() && !ws.join("top").exists());
        assert_eq!(fs::read_to_string(ws.join("src/new")).unwrap(), "ok\n");
        assert!(o.policy.enforced.iter().any(|e| matches!(
            e,
            Enforced::Landlock(record::Landlock::CarveoutsFixed { .. })
        )));
    }
}
