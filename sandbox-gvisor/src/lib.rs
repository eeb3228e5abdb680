//! The `gvisor` backend: each command under gVisor's user-space kernel (`runsc`).
//!
//! gVisor's Sentry implements Linux's system calls itself, in an unprivileged process, so
//! the command never talks to the host's kernel: a kernel bug it could reach through bwrap
//! or landlock is out of its reach here. It costs more than a namespace (a runtime starts
//! per command, and every system call is intercepted), so `auto` prefers bwrap.
//!
//! This crate turns a [`Plan`] into an OCI bundle with a pure function (`spec.rs`) and
//! lets core's process machinery run `runsc run` on it: runsc is a host process like
//! bwrap, so core's cgroups, tree kill, output capture and timeout apply as they are.
//!
//! # What it confines
//!
//! - **Filesystem**: a read-only root of our own with the system directories bound
//!   read-only (`/usr`, `/etc`, `/opt`, `/nix/store`, real `/bin`, `/lib*`; the host's
//!   symlinks recreated), gVisor's own `/proc`, `/dev` and `/sys`, private tmpfs on
//!   `/tmp` (sized to the memory limit), `/home`, `/root`, `/run`; the workspace and the
//!   named writable paths writable, carve-outs and named read-only paths read-only, the
//!   program's own file when nothing else shows it (at the name it was given, when that
//!   is hidden); nothing else of the host. Every bind
//!   is `nosuid`, `nodev`; host unix sockets and FIFOs cannot be opened through them.
//! - **Processes**: the command's processes exist only inside the Sentry; it sees and
//!   signals nothing of the host's.
//! - **Privileges**: no capabilities in any set, `noNewPrivileges`.
//! - **System calls**: core's one syscall table, rendered as the OCI seccomp profile
//!   docker's engine gets and applied by the Sentry (runsc `--oci-seccomp`): the same
//!   kernel surface as every other backend (no nested namespaces, io_uring, ptrace or
//!   keyring; no setuid or setgid bit on any call that sets a mode), `setsid` allowed as
//!   on bwrap and docker. A denied call fails with its errno; the filter never notifies
//!   (gVisor has no seccomp user notification), so denied calls are not reported.
//! - **Network**: `none` and `loopback` get gVisor's own network stack with only its
//!   loopback (`--network=none`): nothing of the host's is reachable. `full` is the host's
//!   network stack (`--network=host`), which runsc offers only to a root host.
//! - **Limits**: the process cap and the open-files limit are rlimits the Sentry
//!   enforces for the sandbox's own processes (see `Launch::limits_inside`); memory is
//!   the run's cgroup over runsc's whole tree (the Sentry's memory is the command's), or
//!   `RLIMIT_AS` inside where no cgroup can be made; CPU time is `RLIMIT_CPU` on each of
//!   the runtime's processes, where the command's instructions run (ptrace platform).
//!
//! # The uid
//!
//! - A host that is **not root** runs runsc `--rootless`: the Sentry and its file proxy
//!   (the gofer) run as the caller, whose uid is the only one mapped; the command is uid 0
//!   inside the Sentry, without capabilities, which is the caller on the host.
//! - A **root** host runs runsc as root (the gofer needs it to serve files) and the
//!   command as the **workspace's owner** (group 0 replaced by `nogroup`): the Sentry
//!   checks every access against that uid, so root-only files stay unreadable and what
//!   the command makes belongs to that user. With a root-owned workspace (CI) it runs as
//!   `nobody`, and the workspace (and any writable path the command's uid does not own)
//!   is handed over by an **idmapped mount** ([`sandbox_host::idmap`], Linux 5.12+) on
//!   which its owner's files appear as the command's: the command writes it live, what
//!   it makes is the owner's on disk, and setuid bits are refused by the filter. runsc's
//!   gofer creates each file as root and then hands it to the command's uid, so root is
//!   mapped too, to an on-disk id no account has (`bundle::SPARE_ID`), which a new file
//!   holds for that moment, inside the tree's own (root-owned) directory. Where idmapped
//!   mounts cannot be made, such a run is refused with the remedy.
//!
//! # A run that never started
//!
//! runsc exits 128 when it cannot make the sandbox (user namespaces refused, a broken
//! install), a status the command could have exited with too. Its `--pid-file` is a FIFO
//! in the bundle whose reader is core's ready pipe (`Launch::ready_pipe`): runsc writes
//! the sandbox's pid there once the sandbox exists, before the command starts, so a runsc
//! that ends without writing ran nothing, and the run is an error with what runsc said,
//! not an outcome of 128.
//!
//! # What it cannot do
//!
//! - Tell "killed by signal N" from "exited with 128+N": runsc reports both the same
//!   ([`Capability::signal_status`] is false); an OOM kill is reported as runsc's exit.
//! - The full network without root (`runsc --rootless` has no host network).
//! - Run what gVisor does not implement: this runsc (Debian's 2022 build) refuses
//!   `statx` with `AT_NO_AUTOMOUNT`, so coreutils' `ls` and `stat` fail inside.
//! - Run a program named through a link the sandbox does not show (a link under a
//!   private tmpfs on the way to it): runsc looks the program up by its name inside, and
//!   such a name is refused with the remedy (`spec::program_by_name`).
//!
//! # What it needs
//!
//! `runsc` on `PATH` (`apt-get install runsc`; Debian's 2022 build tested), and either
//! root or unprivileged user namespaces for `--rootless`.
//! [`Sandbox::preflight`](sandbox_core::Sandbox::preflight) runs a real command and says
//! what is missing.
//!
//! # Tests
//!
//! `spec.rs` is unit-tested for every knob without spawning; `tests/smoke.rs` runs real
//! commands and checks their effects and leftovers from the host. The conformance suite
//! runs it as root and as uid 65534.
//!
//! # Dependencies
//!
//! `sandbox-core` (everything shared: the process machinery, the mount table, idmapped
//! mounts), `async-trait` (the launcher trait), `serde_json` (the OCI spec), `tempfile`
//! (the bundle and runsc's state, per run), `thiserror` (the backend's error), `which`
//! (finding runsc), `nix` (the host's uid, the ready FIFO), `libc` (mode and open-flag constants for the
//! filter), `tokio` (the preflight's run), `tracing` (a staging mount that would not go).

mod bundle;
mod error;
mod host;
mod spec;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use sandbox_core::record::{Identity, Runtime, Seccomp};
use sandbox_core::registry::{AutoRank, BackendConfig, BackendInfo, HostKey};
use sandbox_core::{
    Capability, Enforcement, LimitMechanism, NetworkMode, Plan, Preflight, SandboxError, TreeKill,
    DEFAULT_PATH,
};
use sandbox_host::pipeline::run_true;
use sandbox_host::pipeline::ProcessSandbox;
use sandbox_host::process::{DoorEnd, HostSupport, Launch, Launcher};

use crate::error::GvisorError;
use crate::host::HostFacts;

/// The backend's name.
pub const NAME: &str = "gvisor";

/// What the facade's registry knows of this backend. On `strict` and `trusted`, `auto`
/// tries it after bwrap (a runtime per command costs more than namespaces) and before
/// docker (no image or engine needed, and a kernel of its own); on `fast`, where every
/// backend enforces the same and the cheapest start wins, last.
pub const INFO: BackendInfo = BackendInfo {
    name: NAME,
    summary: "gVisor's user-space kernel (runsc)",
    auto_rank: AutoRank {
        strict: Some(15),
        fast: Some(40),
        trusted: Some(15),
    },
    unconfined: false,
    // `runsc --rootless`.
    unprivileged: true,
    image: None,
    make: |config| Ok(Arc::new(GvisorBackend::with_config(config))),
    host_key: HostKey::Program("runsc"),
    leaves: None,
};

/// What the workspace's own tools (the bench, CI) need to know of this backend.
#[cfg(feature = "tooling")]
pub const TOOLING: sandbox_core::registry::Tooling = sandbox_core::registry::Tooling {
    launcher: Some(|config| sandbox_host::pipeline::erase(GvisorBackend::with_config(config))),
    direct: None,
    host_packages: &["runsc"],
    cost: sandbox_core::registry::CostTargets::NONE,
};

/// A sandbox run by gVisor.
pub type GvisorSandbox = ProcessSandbox<GvisorBackend>;

/// The launcher: runsc, as found on this host.
#[derive(Clone, Debug)]
pub struct GvisorBackend {
    facts: Arc<HostFacts>,
    capability: Capability,
}

sandbox_host::launcher_backend!(GvisorBackend);

impl GvisorBackend {
    /// Find runsc and learn the host. Never fails: a host without runsc gets a backend
    /// whose preflight and runs say so, with the remedy.
    pub fn new() -> Self {
        Self::with_config(&BackendConfig::default())
    }

    /// As [`new`](Self::new), with runsc's version taken from and kept in `config`'s fact
    /// store, under the identity of the runsc found: a new process then starts no runsc
    /// but the command's.
    pub fn with_config(config: &BackendConfig) -> Self {
        Self::with_facts(HostFacts::detect(config))
    }

    fn with_facts(facts: HostFacts) -> Self {
        Self {
            capability: capability(&facts),
            facts: Arc::new(facts),
        }
    }

    fn runsc(&self) -> Result<&Path, GvisorError> {
        self.facts
            .runsc
            .as_deref()
            .map_err(|e| GvisorError::Missing(e.clone()))
    }
}

impl Default for GvisorBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// A new gVisor sandbox.
pub fn sandbox() -> GvisorSandbox {
    ProcessSandbox::new(GvisorBackend::new())
}

/// What gVisor enforces on a host with these facts.
fn capability(facts: &HostFacts) -> Capability {
    // The command is never root on the host (see the crate docs).
    let host = HostSupport::detect(true);
    let mut cap = Capability {
        confine_writes: true,
        confine_reads: true,
        readonly_carveouts: true,
        network_none: Enforcement::Exact,
        // `none` is a network namespace (or, for gVisor, a network stack) of its own.
        network_state_private: true,
        network_loopback: Enforcement::Exact,
        network_full: if facts.is_root {
            Enforcement::Exact
        } else {
            Enforcement::Unsupported
        },
        full_network_is_host: facts.is_root,
        tree_kill: true,
        process_isolation: true,
        drops_host_root: true,
        host_programs: true,
        ..Capability::default()
    };
    host.apply(&mut cap);
    // Inside the Sentry, whatever the host's cgroups.
    cap.process_limit = true;
    // runsc folds the Sentry's OOM kill into its own exit code.
    cap.oom_status = false;
    // The command is the container's first process and nothing else in the sandbox waits
    // for orphans: they stay zombies (bounded by the process cap) until the run ends.
    cap.reaps_orphans = false;
    // runsc dies with the host (`PR_SET_PDEATHSIG`), and its sandbox (the Sentry, holding
    // every process of the command) with runsc.
    cap.dies_with_host = true;
    // gVisor's file proxy serves the workspace from its host path as the runtime found it
    // (on a root host through an idmapped mount made before the command's namespaces
    // exist), so an overlay mounted over that path between fork and exec is not what the
    // command writes to. Its layer is a copy, which the plan moves onto.
    cap.change_layer = Some(sandbox_core::LayerMechanism::Copy);
    // The Sentry reports a file's blocks from its own view, so kept holes cannot be shown
    // from inside; do not claim them.
    cap.sparse_snapshot = false;
    // No secrets: their values are put in by the egress proxy, and this backend has no
    // door for it into the Sentry's network (its `proxy` capability is unsupported), so
    // core refuses a run with secrets and says so.
    cap.secrets = false;
    cap
}

/// The path the Sentry resolves `argv[0]` to, as runsc does: an absolute name as it is;
/// a relative one with a slash joined to the working directory and cleaned without
/// following links (runsc's `path.Join`); a bare name where the host found it on the
/// plan's `PATH`, whose directories the Sentry searches in the same order.
pub(crate) fn named_path(plan: &Plan) -> Result<PathBuf, SandboxError> {
    let given = Path::new(&plan.argv[0]);
    if given.is_absolute() {
        return Ok(given.to_path_buf());
    }
    if plan.argv[0].as_bytes().contains(&b'/') {
        let mut clean = PathBuf::from("/");
        for c in plan.cwd.join(given).components() {
            match c {
                Component::Normal(n) => clean.push(n),
                Component::ParentDir => {
                    clean.pop();
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        return Ok(clean);
    }
    let path = plan
        .env_var("PATH")
        .unwrap_or(std::ffi::OsStr::new(DEFAULT_PATH));
    which::which_in(given, Some(path), &plan.cwd).map_err(|e| {
        SandboxError::invalid(
            "argv",
            format!("program {} not found on PATH: {e}", given.display()),
        )
    })
}

/// A container id unique on this host for this process's lifetime.
fn container_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "sandbox-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[async_trait]
impl Launcher for GvisorBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        self.capability.clone()
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        let runsc = self.runsc()?.to_path_buf();
        // The whole backend on a real command: the bundle, runsc, the filter, the uid.
        let ran = match run_true(self, "gvisor-preflight", NetworkMode::None).await {
            Ok(ran) => ran,
            // runsc ended before the sandbox was made (core's ready pipe): what it said,
            // with this backend's remedy rather than core's general one.
            Err(SandboxError::Unavailable { reason, .. }) => {
                Err(format!("did not start: {reason}"))
            }
            Err(e) => return Err(e),
        };
        if let Err(how) = ran {
            return Err(SandboxError::unavailable(
                NAME,
                format!("`true` under runsc {how}"),
                if self.facts.is_root {
                    "check that runsc works: `runsc --network=none do true`"
                } else {
                    "runsc --rootless needs unprivileged user namespaces: \
                     `user.max_user_namespaces` above 0 (`sysctl user.max_user_namespaces=15000`), \
                     on Debian also `kernel.unprivileged_userns_clone=1`, on Ubuntu \
                     `kernel.apparmor_restrict_unprivileged_userns=0`; check with \
                     `runsc --rootless --network=none do true`"
                },
            ));
        }
        let mut details = vec![
            format!("runsc at {}", runsc.display()),
            "platform ptrace; network none/loopback: gVisor's own loopback".into(),
        ];
        details.push(if self.facts.is_root {
            "host is root: runsc as root, the command as the workspace's owner (nobody, \
             through an idmapped mount, for a root-owned one); full network is the host's"
                .into()
        } else {
            "rootless: runsc and the command as this user; no full network".into()
        });
        Ok(Preflight::new(NAME, self.facts.version.clone(), details))
    }

    fn prepare(&self, plan: &Plan, door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        if door.is_some() {
            // Its capability claims no door, so the plan asked for none; never run open.
            return Err(SandboxError::NotSupported {
                backend: NAME,
                feature: "the egress proxy, host ports or published ports".into(),
                remedy: "run `sandbox doctor` to see which backends enforce them".into(),
            });
        }
        let runsc = self.runsc()?;
        let rootless = !self.facts.is_root;
        if rootless && plan.network == NetworkMode::Full {
            return Err(SandboxError::NotSupported {
                backend: NAME,
                feature: "the full network without root (runsc --rootless has no host network)"
                    .into(),
                remedy: "run the host as root, use network `loopback` or `none`, or another \
                         backend"
                    .into(),
            });
        }
        let owner_of = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| (m.uid(), m.gid()))
                .map_err(|e| SandboxError::io(format!("reading the owner of {}", p.display()), e))
        };
        let who = spec::identity(self.facts.is_root, owner_of(&plan.workspace)?);
        let mut written = bundle::Written::new()?;
        // A root host hands each writable tree the command's uid does not own over by an
        // idmapped mount: its owner's files appear as the command's, live.
        let mut staged = Vec::new();
        if self.facts.is_root {
            let trees = std::iter::once(("workspace", &plan.workspace))
                .chain(plan.writable_paths.iter().map(|p| ("writable_paths", p)));
            for (field, tree) in trees {
                let (uid, gid) = owner_of(tree)?;
                if uid == who.uid {
                    continue;
                }
                let at = written
                    .stage(tree, (uid, gid), (who.uid, who.gid))
                    .map_err(|source| GvisorError::Handover {
                        field,
                        path: tree.clone(),
                        owner: uid,
                        uid: who.uid,
                        source,
                    })?;
                staged.push((tree.clone(), at));
            }
        }
        let host = HostSupport::detect(true);
        let memory_inside = host.memory == LimitMechanism::Rlimit;
        let limits = spec::InsideLimits {
            open_files: plan.limits.open_files,
            processes: plan.limits.max_processes,
            address_space: plan.limits.memory_bytes.filter(|_| memory_inside),
            tmpfs_bytes: plan.limits.memory_bytes,
        };
        let named = named_path(plan)?;
        let layout = spec::Layout {
            system: &self.facts.system,
            staged: &staged,
            named: &named,
        };
        let b = spec::bundle(
            plan,
            layout,
            who,
            limits,
            &|p: &Path| p.is_dir(),
            &|p: &Path| std::fs::read_link(p).ok(),
        )?;
        written.write(&b)?;
        let (pid_file, ready) = written.ready()?;
        let args = spec::runsc_args(
            &written.state(),
            written.path(),
            &pid_file,
            &container_id(),
            plan.network,
            rootless,
        );
        let env = vec![("PATH".into(), DEFAULT_PATH.into())];
        let mut launch = Launch::wrapped(runsc.to_path_buf(), args, env, plan);
        launch.limits_inside = true;
        // A runsc that cannot set the sandbox up exits 128 before the command runs: an
        // error, not the command's 128.
        // runsc opens its pid file once; a reader held for the whole run keeps any later
        // open from waiting for one.
        launch
            .keep_alive
            .push(Box::new(ready.try_clone().map_err(|e| {
                SandboxError::io("duplicating the gVisor ready FIFO's reader", e)
            })?));
        launch.ready_pipe = Some(ready);
        // Without a cgroup: the command's processes live only in the Sentry, which is the
        // init of a pid namespace of its own, and runsc's processes die with `runsc run`
        // (parent-death signals), which core kills with its process group.
        if host.cgroup_kill.is_none() {
            launch.tree_kill = Some(TreeKill::PidNamespace);
        }
        launch.enforced.push(Runtime::Gvisor {
            version: self.facts.version.clone(),
            rootless,
        });
        launch.enforced.push(Identity::InSentry {
            uid: who.uid,
            gid: who.gid,
        });
        launch.enforced.push(Seccomp::SentryProfile);
        for (tree, _) in &staged {
            launch.enforced.push(Identity::IdmappedTree {
                path: tree.clone(),
                uid: who.uid,
            });
        }
        launch.keep_alive.push(Box::new(written));
        Ok(launch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{Sandbox, SandboxOpts};

    #[tokio::test]
    async fn a_missing_runsc_fails_preflight_and_runs_with_the_install_remedy() {
        let mut facts = HostFacts::detect(&BackendConfig::default());
        facts.runsc = Err("cannot find binary path".into());
        let b = GvisorBackend::with_facts(facts);
        let e = ProcessSandbox::new(b.clone())
            .preflight()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, SandboxError::Unavailable { backend: NAME, remedy, .. }
                if remedy.contains("apt-get install runsc")),
            "{e}"
        );
        let ws = tempfile::tempdir().unwrap();
        let e = ProcessSandbox::new(b)
            .run(SandboxOpts::new(ws.path(), ["true"]))
            .await
            .unwrap_err();
        assert!(
            matches!(e, SandboxError::Unavailable { backend: NAME, .. }),
            "{e}"
        );
    }

    #[test]
    fn the_proxy_refusal_names_no_wider_network() {
        let facts = HostFacts::detect(&BackendConfig::default());
        let ws = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.network = NetworkMode::Proxy;
        opts.allow_hosts.push("example.test".into());
        let e = Plan::new(&opts, NAME, &capability(&facts)).unwrap_err();
        let SandboxError::NotSupported { remedy, .. } = &e else {
            panic!("{e}");
        };
        // The remedy keeps the confinement asked for: another backend, as doctor shows.
        assert!(remedy.contains("sandbox doctor"), "{remedy}");
        assert!(!remedy.contains("full"), "{remedy}");
        assert!(!remedy.contains('\n') && remedy.len() < 100, "{remedy}");
    }

    #[test]
    fn full_network_is_claimed_only_for_a_root_host() {
        let mut facts = HostFacts::detect(&BackendConfig::default());
        facts.is_root = false;
        let cap = capability(&facts);
        assert_eq!(cap.network_full, Enforcement::Unsupported);
        assert!(!cap.full_network_is_host);
        facts.is_root = true;
        let cap = capability(&facts);
        assert_eq!(cap.network_full, Enforcement::Exact);
        assert!(cap.full_network_is_host);
        assert!(!cap.signal_status && !cap.oom_status);
    }
}
