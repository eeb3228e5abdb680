//! The `bwrap` backend: each command in a bubblewrap sandbox of its own.
//!
//! Bubblewrap is the confinement most Linux users already trust (Flatpak runs on it). This
//! backend turns a [`Plan`] into bwrap's arguments with a pure function (`argv.rs`) and
//! lets core's process machinery run it.
//!
//! # What it confines
//!
//! - **Namespaces**: user, pid, ipc, uts, cgroup (where the kernel has it), and network
//!   unless the mode is `full`; nested user namespaces disabled (bwrap 0.8+).
//! - **Filesystem**: an empty root with the system read-only (`/usr`, `/etc`, `/opt`,
//!   `/nix/store` where present; `/bin`, `/sbin`, `/lib*` bound or recreated as the
//!   host's symlinks, asked of the host), a fresh `/proc` (with `/proc/sys` read-only) and
//!   `/dev`, private empty tmpfs on `/tmp`, `/home`, `/root`, `/run`; the workspace and the
//!   named writable paths are the only writable host places, carve-outs and named
//!   read-only paths read-only; everything else of the host is absent (no `/sys`, no
//!   `/var`). Paths nested in others, or named twice, do what the caller meant (see
//!   `argv.rs`). A program outside all of that (a tool in the caller's home, a test binary
//!   in a build directory) gets its own file bound read-only: naming it to run grants it,
//!   not its directory.
//! - **Environment**: `--clearenv`, then exactly the plan's variables. The options travel
//!   to bwrap on a descriptor (`--args`), so values never show in the host's process list.
//! - **Network**: `none` and `loopback` get a network namespace of their own with only a
//!   loopback (and with `none`, the seccomp program also refuses every socket family but
//!   unix); `full` shares the host's, with abstract unix sockets confined by landlock
//!   where the kernel can (6.12+); `proxy` and host ports are `loopback` plus listeners the
//!   waiter makes inside bwrap's network namespace and hands to the run's proxy
//!   (`sandbox-proxy`) before the command starts.
//! - **System calls**: the seccomp program shared with the landlock backend
//!   (`sandbox_host::seccomp`), handed to bwrap's `--seccomp`: bwrap has none of its own.
//! - **Terminal**: `--new-session`, so the command cannot push input into the caller's
//!   terminal (TIOCSTI; the seccomp program refuses it too).
//! - **Process tree**: bwrap's pid namespace and `--die-with-parent`: killing bwrap ends
//!   every process in the namespace, including ones that double-forked and called
//!   `setsid`; core adds a cgroup where it can create one.
//! - **Process cap**: a cgroup where core can make one; and always `RLIMIT_NPROC`, set by
//!   the waiter inside the sandbox's user namespace, where it counts this sandbox's
//!   processes alone (bwrap's init and the waiter among them) rather than every process
//!   of the user on the host.
//!
//! # Host root
//!
//! bwrap maps the sandbox to the caller's uid (its `--uid` only renames it inside: the
//! kernel still sees the caller), so a root caller's command would be kuid 0 and pass
//! every owner check on root's files. So on a root host bwrap itself is not run as root:
//! between fork and exec our child makes a private mount namespace, attaches there the
//! workspace and the writable paths as idmapped copies where on-disk root shows as an id
//! no account has ([`sandbox_host::idmap::SPARE_COMMAND_ID`]), and becomes that id; bwrap
//! then runs as that ordinary user (unprivileged user namespaces), binds the trees by
//! path, and the kernel refuses the command every root-only file, whenever it became one
//! (see `sandbox_host::handover`). Nothing is walked or hidden. Files it creates are
//! root's on disk, as before.
//!
//! Where that cannot be had for a run (a tree on a filesystem without idmapped mounts, a
//! path only root can reach, a writable path holding a layered workspace, bwrap unable
//! to make a user namespace
//! as that id), bwrap runs as root, the command as kuid 0: files it creates belong to
//! root, and it passes every owner check on root's files. What keeps it from root's power
//! then:
//!
//! - every capability dropped (`--cap-drop ALL`: bwrap would otherwise leave a root
//!   caller's command all of them), with `no_new_privs`;
//! - the system directories and the named paths shown as any user sees them: root-only
//!   entries (`/etc/shadow`, host keys, TLS private keys) hidden (see `rootview.rs`). The
//!   workspace is not filtered: it is the command's own, as for any caller;
//! - `/proc/sys` and other global `/proc` entries read-only: bwrap's own cover skips
//!   `/proc/sys` for a root caller, and kuid 0 may write global sysctls
//!   (`kernel.core_pattern`) without any capability;
//! - setuid/setgid bits refused by the seccomp program, so no setuid-root file is left in
//!   the workspace for the host to run;
//! - with the full network, abstract unix sockets confined with landlock, since some root
//!   services accept any uid-0 peer there; on kernels that cannot, `full` as root is an
//!   over-grant only the `trusted` lane accepts.
//!
//! # Exit status
//!
//! bwrap folds "killed by signal N" into exit code 128+N. Core's small waiter
//! (`sandbox_host::process::waiter`, embedded, handed to bwrap on a descriptor)
//! runs the command inside, waits for it and writes its real wait status on a pipe that
//! core reads, so `exit 137` and SIGKILL stay apart ([`Capability::signal_status`]). It
//! also gives the command the `argv[0]` it was called by.
//!
//! # What it cannot do
//!
//! - Snapshots and change sets use core's layer (`sandbox_core::changes`): an overlay
//!   that core mounts over the workspace in a mount namespace of its own (inside a user
//!   namespace when the host is not root) just before bwrap is executed, which bwrap's
//!   namespaces inherit and bind like any directory; bwrap's own `--overlay` (0.9+) is
//!   not used.
//! - Root-only files added to `/usr` or `/opt` after the first run of a process are not
//!   hidden until the next process (those trees are walked once); `/etc` and the named
//!   paths are walked per run, and a file created between that walk and bwrap's mounts
//!   is not hidden.
//! - With the full network the command reaches everything the host does over IP; on
//!   kernels before 6.12 (no landlock ABI 6) also the host's abstract unix sockets (for a
//!   root host, an over-grant only the `trusted` lane accepts).
//! # When bwrap cannot set the sandbox up
//!
//! Host-wide failures (user namespaces refused) are caught before the first run of a
//! shape by a set-up probe (`preflight.rs`), whose success is recorded (in this process,
//! and in a caller's fact store: `sandbox_host::facts`), as are bwrap's version and
//! options, under the identity of the bwrap binary. When bwrap still cannot set a
//! sandbox up for one run (a named path removed after the plan was made, user namespaces
//! refused since the probe was recorded), it exits before our waiter runs, the waiter never
//! says the sandbox is set up (`Launch::ready_pipe`), and `run` is an
//! [`Unavailable`](SandboxError::Unavailable) error with bwrap's message: nothing ran.
//!
//! # What it needs
//!
//! `bwrap` 0.5 or later on `PATH` (0.8 tested) and unprivileged user namespaces (or root).
//! [`Sandbox::preflight`](sandbox_core::Sandbox::preflight) says what is missing and how to
//! fix it.
//!
//! # Tests
//!
//! `argv.rs` is unit-tested for every knob without spawning. `tests/bwrap.rs` runs real
//! commands and checks their effects from the host, as root and (the same binary under
//! `setpriv --reuid=65534`) as an unprivileged user. The conformance suite runs it too.
//!
//! # Dependencies
//!
//! `sandbox-core` (everything shared, with its `seccomp` feature), `async-trait` (the
//! launcher trait), `thiserror` (the backend's error), `which` (finding bwrap), `nix` and
//! `libc` (memfds, pipes, the landlock ABI query), `tempfile` (preflight's workspace),
//! `tokio` (preflight's blocking probe off the executor), `sandbox-proxy` (the egress proxy
//! and host ports of network mode `proxy`).

mod argv;
mod error;
mod host;
mod preflight;
mod rootview;
mod seam;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use sandbox_core::record::{Dropper, Identity, Landlock, Record, Runtime};
use sandbox_core::registry::{AutoRank, BackendConfig, BackendInfo, HostKey};
use sandbox_core::{Capability, Enforcement, NetworkMode, Plan, Preflight, SandboxError};
use sandbox_host::facts::HostRecord;
use sandbox_host::handover;
use sandbox_host::idmap::SPARE_COMMAND_ID;
use sandbox_host::pipeline::run_true;
use sandbox_host::pipeline::ProcessSandbox;
use sandbox_host::process::{DoorEnd, HostSupport, Launch, Launcher};

use crate::error::BwrapError;
use crate::host::{HostFacts, SystemEntry};

/// The backend's name.
pub const NAME: &str = "bwrap";

/// What the facade's registry knows of this backend. `auto` tries it first on `strict`
/// and `trusted` (namespaces give a host program its own mount, pid, network and user
/// world) and second on `fast` (where landlock's cheaper start wins).
pub const INFO: BackendInfo = BackendInfo {
    name: NAME,
    summary: "namespaces with bubblewrap",
    auto_rank: AutoRank {
        strict: Some(10),
        fast: Some(20),
        trusted: Some(10),
    },
    unconfined: false,
    // Unprivileged user namespaces are all it needs.
    unprivileged: true,
    image: None,
    make: |config| Ok(Arc::new(BwrapBackend::with_config(config))),
    host_key: HostKey::Program("bwrap"),
    leaves: None,
};

/// What the workspace's own tools (the bench, CI) need to know of this backend.
#[cfg(feature = "tooling")]
pub const TOOLING: sandbox_core::registry::Tooling = sandbox_core::registry::Tooling {
    launcher: Some(|config| sandbox_host::pipeline::erase(BwrapBackend::with_config(config))),
    direct: None,
    host_packages: &["bubblewrap"],
    // A wrapper of bwrap: near bwrap run directly with the same argv (issue 7).
    cost: sandbox_core::registry::CostTargets {
        startup_vs_direct: Some(1.05),
        ..sandbox_core::registry::CostTargets::NONE
    },
};

/// A sandbox run by bwrap.
pub type BwrapSandbox = ProcessSandbox<BwrapBackend>;

/// The launcher: bwrap, as found on this host.
#[derive(Clone, Debug)]
pub struct BwrapBackend {
    facts: Arc<HostFacts>,
    capability: Capability,
    /// bwrap's recorded version and options and its setup probes' successes, under its
    /// identity (see `sandbox_host::facts`).
    record: Arc<HostRecord>,
}

sandbox_host::launcher_backend!(BwrapBackend);

impl BwrapBackend {
    /// Find bwrap and learn the host (system layout, bwrap's version and options, the
    /// kernel's landlock ABI). Never fails: a host without bwrap gets a backend whose
    /// preflight and runs say so, with the remedy.
    pub fn new() -> Self {
        Self::with_config(&BackendConfig::default())
    }

    /// As [`new`](Self::new), with what running bwrap taught (its version and options,
    /// which setup probes worked) taken from and kept in `config`'s fact store too,
    /// under the identity of the bwrap binary found: a new process then starts no bwrap
    /// but the command's.
    pub fn with_config(config: &BackendConfig) -> Self {
        let bwrap = host::find_bwrap();
        let record = HostRecord::open(config, NAME, &host::own_key(&bwrap));
        let facts = HostFacts::detect(bwrap, &record);
        let capability = capability(&facts);
        Self {
            facts: Arc::new(facts),
            capability,
            record: Arc::new(record),
        }
    }

    /// The bwrap to run, or why there is none usable.
    fn bwrap(&self) -> Result<&PathBuf, BwrapError> {
        let path = self
            .facts
            .bwrap
            .as_ref()
            .map_err(|e| BwrapError::Missing(e.clone()))?;
        if !self.facts.features.missing.is_empty() {
            return Err(BwrapError::TooOld {
                version: self
                    .facts
                    .version
                    .clone()
                    .unwrap_or_else(|| "unknown version".into()),
                missing: self.facts.features.missing.join(", "),
            });
        }
        Ok(path)
    }

    /// Root-only entries to hide for one run (none when the host is not root): of the
    /// system directories, and of the paths `plan` names (if any).
    fn hidden(&self, plan: Option<&Plan>) -> Vec<rootview::Hidden> {
        if !self.facts.is_root {
            return Vec::new();
        }
        let trees: Vec<PathBuf> = self
            .facts
            .system
            .iter()
            .filter(|(p, e)| {
                *e == SystemEntry::Dir && p.as_os_str() != "/etc" && p.as_os_str() != "/nix/store"
            })
            .map(|(p, _)| p.clone())
            .collect();
        let mut hidden = rootview::root_only_cached(&trees).to_vec();
        let mut roots = vec![std::path::Path::new("/etc")];
        let mut skip = Vec::new();
        if let Some(plan) = plan {
            roots.extend(plan.read_only_paths.iter().map(PathBuf::as_path));
            roots.extend(plan.writable_paths.iter().map(PathBuf::as_path));
            skip.push(plan.workspace.as_path());
        }
        hidden.extend(rootview::root_only(&roots, &skip));
        hidden
    }
}

impl Default for BwrapBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// What bwrap enforces on a host with these facts; limits from core.
fn capability(facts: &HostFacts) -> Capability {
    let host = HostSupport::detect(false);
    let full = if facts.is_root && !facts.can_scope_abstract_unix() {
        Enforcement::OverGrant(
            "the host's network, with root's access to its abstract unix sockets (this \
             kernel cannot confine them)",
        )
    } else {
        Enforcement::Exact
    };
    let mut cap = Capability {
        confine_writes: true,
        confine_reads: true,
        readonly_carveouts: true,
        hide_paths: true,
        network_none: Enforcement::Exact,
        // `none` is a network namespace (or, for gVisor, a network stack) of its own.
        network_state_private: true,
        network_loopback: Enforcement::Exact,
        network_full: full,
        // bwrap's own network namespace holds only `lo`; the waiter hands the proxy its
        // listener from inside it.
        network_proxy: Enforcement::Exact,
        host_ports: true,
        // The waiter also hands over the namespace itself; the host makes the sockets of
        // published ports in it (entering it as root, through a forked helper otherwise).
        publish: true,
        // Only what the proxy refuses: bwrap itself reports nothing, and a path outside
        // the command's view cannot be told from a missing file.
        reports_denials: sandbox_core::DenialKinds {
            network_connect: true,
            ..sandbox_core::DenialKinds::default()
        },
        tree_kill: true,
        process_isolation: true,
        // The waiter is the pid namespace's init (`--as-pid-1`) and waits for orphans.
        reaps_orphans: true,
        // bwrap runs with `PR_SET_PDEATHSIG` and `--die-with-parent`; its pid namespace
        // ends with it.
        dies_with_host: true,
        drops_host_root: true,
        signal_status: true,
        host_programs: true,
        full_network_is_host: true,
        // The proxy is the only way out of bwrap's namespace, and the run's bundle is bound
        // read-only like any read-only path (core's door stage makes both).
        secrets: true,
        ..Capability::default()
    };
    host.apply(&mut cap);
    cap
}

#[async_trait]
impl Launcher for BwrapBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capability(&self) -> Capability {
        self.capability.clone()
    }

    async fn preflight(&self) -> Result<Preflight, SandboxError> {
        let bwrap = self.bwrap()?.clone();
        // Off the executor: the probe spawns bwrap and waits. (No walk of the system trees
        // ahead of the run: a root host's run hands its trees to an unprivileged id and
        // walks nothing, and one that cannot walks what it needs itself.)
        // The setup probes again, whatever was recorded (a recorded success that fails now
        // drops the record), then the probe of the preflight's own shape.
        let record = Arc::clone(&self.record);
        tokio::task::spawn_blocking(move || {
            preflight::recheck(&bwrap, &record)?;
            preflight::probe(&bwrap, true, None)
        })
        .await
        .map_err(|e| SandboxError::io("running the bwrap probe", std::io::Error::other(e)))??;
        // The whole backend on a real command: seccomp, the waiter, the filesystem.
        let ran = run_true(self, "bwrap-preflight", NetworkMode::Loopback).await?;
        if let Err(how) = ran {
            return Err(preflight::setup_error(&format!(
                "`true` in the sandbox {how}"
            )));
        }
        let mut details = vec![format!("bwrap at {}", self.bwrap()?.display())];
        details.push(format!(
            "snapshots and change sets: core's layer ({})",
            self.capability.change_layer.map_or("none", |m| m.as_str())
        ));
        if self.facts.can_scope_abstract_unix() {
            details.push("abstract unix sockets confined with the full network (landlock)".into());
        }
        if self.facts.is_root {
            details.push(
                "host is root: bwrap runs as an unprivileged id with the workspace idmapped \
                 to it where the filesystem allows (else as root: capabilities dropped, \
                 root-only system files hidden, /proc/sys read-only); setuid bits refused"
                    .into(),
            );
        }
        Ok(Preflight::new(NAME, self.facts.version.clone(), details))
    }

    fn prepare(&self, plan: &Plan, door: Option<DoorEnd>) -> Result<Launch, SandboxError> {
        let bwrap = self.bwrap()?;
        let own_network = plan.network != NetworkMode::Full;
        // A root host: bwrap runs as an unprivileged id with the writable trees handed to
        // it, where that can be had; else as root, with the root-only entries hidden.
        let handover = if self.facts.is_root {
            preflight::probe_once(bwrap, own_network, Some(SPARE_COMMAND_ID), &self.record)
                .map_err(|e| format!("bwrap cannot run as uid {SPARE_COMMAND_ID}: {e}"))
                .and_then(|()| handover::hand_over(plan, &handover::writable_trees(plan)))
        } else {
            Err(String::new())
        };
        if handover.is_err() {
            preflight::probe_once(bwrap, own_network, None, &self.record)?;
        }
        let facts = &self.facts;
        let layout = argv::Layout {
            system: &facts.system,
            resolv_conf: facts.resolv_conf.as_deref(),
            proc_entries: &facts.proc_entries,
            disable_userns: facts.features.disable_userns,
            scope_abstract_unix: facts.can_scope_abstract_unix(),
        };
        let hidden = match &handover {
            // Root-only files are closed to the id by the kernel: nothing to hide.
            Ok(_) => Vec::new(),
            Err(_) => self.hidden(Some(plan)),
        };
        let mut record = Record::new();
        record.push(Runtime::Bwrap {
            version: facts.version.clone(),
        });
        match &handover {
            Ok(h) => record.push(Identity::HandedOver {
                id: h.id,
                by: Dropper::Bwrap,
            }),
            Err(why) if facts.is_root => record.push(Identity::KeepsRoot {
                why: why.to_string(),
                by: Dropper::Bwrap,
            }),
            Err(_) => {}
        }
        if !hidden.is_empty() {
            record.push(Identity::RootOnlyHidden {
                count: hidden.len(),
            });
        }
        if plan.network == NetworkMode::Full && layout.scope_abstract_unix {
            record.push(Landlock::AbstractUnixScoped);
        }
        let mut launch = seam::launch(bwrap, plan, &layout, &hidden, record, door)?;
        if let Ok(h) = &handover {
            launch.layer_trees = h.layer.clone();
            let enter = handover::Enter::new(h, &plan.cwd)
                .map_err(|e| SandboxError::io("preparing the handover", e))?;
            launch.pre_exec.push(Box::new(enter));
        }
        Ok(launch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{Sandbox, SandboxOpts};

    fn with_facts(edit: impl FnOnce(&mut HostFacts)) -> BwrapBackend {
        let record = HostRecord::fresh(NAME);
        let mut facts = HostFacts::detect(host::find_bwrap(), &record);
        edit(&mut facts);
        BwrapBackend {
            capability: capability(&facts),
            facts: Arc::new(facts),
            record: Arc::new(record),
        }
    }

    #[tokio::test]
    async fn a_missing_bwrap_fails_preflight_and_runs_with_the_install_remedy() {
        let b = with_facts(|f| f.bwrap = Err("cannot find binary path".into()));
        let e = ProcessSandbox::new(b.clone())
            .preflight()
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}");
        assert!(e.to_string().contains("apt-get install bubblewrap"), "{e}");
        let ws = tempfile::tempdir().unwrap();
        let sb = ProcessSandbox::new(b);
        let e = sb
            .run(SandboxOpts::new(ws.path(), ["true"]))
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_bwrap_without_the_needed_options_is_unavailable() {
        let b = with_facts(|f| {
            f.version = Some("0.3.1".into());
            f.features = host::Features::from_help("    --bind SRC DEST\n");
        });
        let e = ProcessSandbox::new(b).preflight().await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("0.3.1") && text.contains("--clearenv"),
            "{text}"
        );
    }

    #[test]
    fn full_network_as_root_is_an_over_grant_where_abstract_sockets_cannot_be_scoped() {
        let b = with_facts(|f| {
            f.is_root = true;
            f.landlock_abi = 5;
        });
        assert!(matches!(
            b.capability.network_full,
            Enforcement::OverGrant(_)
        ));
        let b = with_facts(|f| {
            f.is_root = true;
            f.landlock_abi = 6;
        });
        assert_eq!(b.capability.network_full, Enforcement::Exact);
        let b = with_facts(|f| {
            f.is_root = false;
            f.landlock_abi = 0;
        });
        assert_eq!(b.capability.network_full, Enforcement::Exact);
    }
}
