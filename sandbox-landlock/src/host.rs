//! What this host offers, found once when the backend is built: the landlock ABI, seccomp,
//! whether the command's namespaces (network, mount) can be made, and what the process
//! itself holds. The namespace answers come from the host record when it has them (see
//! `Host::detect`); everything else is asked again, a system call or a file read each.

use std::io;

use landlock::ABI;

use std::path::Path;

use crate::child::{c_path, IdMaps, MountPlan, Namespaces, ProcMask};
use crate::error::Error;
use sandbox_host::facts::HostRecord;
use sandbox_host::handover::Handover;
use sandbox_host::process::PreExec;

/// Landlock on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Landlock {
    /// Available at this ABI (`raw` is the kernel's number, which may be newer than any
    /// ABI the crate knows).
    Available { abi: ABI, raw: i32 },
    /// Built in, not enabled at boot (`EOPNOTSUPP`).
    NotEnabled,
    /// Not built in (`ENOSYS`).
    NotImplemented,
}

impl Landlock {
    /// Ask the kernel (`landlock_create_ruleset` with `LANDLOCK_CREATE_RULESET_VERSION`).
    pub fn detect() -> Self {
        match sandbox_host::kernel::landlock_abi() {
            Ok(v) => {
                let raw = i32::try_from(v).unwrap_or(i32::MAX);
                // The crate warns against ABIs from the running kernel because its
                // best-effort mode would then differ per host; here every right is a hard
                // requirement and the ABI only says which rights to ask for.
                Self::Available {
                    abi: ABI::from(raw),
                    raw,
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Self::NotEnabled,
            Err(_) => Self::NotImplemented,
        }
    }

    /// The ABI, or why there is none.
    pub fn abi(self) -> Result<ABI, Error> {
        match self {
            Self::Available { abi, .. } => Ok(abi),
            Self::NotEnabled => Err(Error::NotEnabled),
            Self::NotImplemented => Err(Error::NotImplemented),
        }
    }
}

/// How the command's namespaces (network for loopback, mount for carve-outs) are made
/// here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NsMode {
    /// `unshare` alone (root).
    Plain,
    /// Inside a new user namespace mapping the caller's own ids.
    UserNs(IdMaps),
}

impl NsMode {
    /// The step making the namespaces: network when `net`, a pid namespace with its own
    /// `/proc` when `pid`, and the mount namespace that `spec` describes (see
    /// `src/ruleset.rs`), with a root host's writable trees from `handover` where they are
    /// handed to an unprivileged id (`sandbox_host::handover`).
    pub fn step(
        &self,
        net: bool,
        pid: bool,
        spec: &crate::ruleset::Spec,
        cwd: &Path,
        handover: Option<&Handover>,
    ) -> Namespaces {
        // uid 0 without capabilities still reads what root owns; another uid does not,
        // but still lists the keys it possesses (the host process's session keyring).
        let mask = rustix::process::geteuid()
            .is_root()
            .then(|| match handover {
                Some(_) => ProcMask::keys_only(),
                None => ProcMask::of_this_host(),
            });
        self.build(net, pid, spec, cwd, handover.map(|h| h.trees.clone()), mask)
    }

    /// The step the host probe tries (network, and a pid namespace when `pid`): as a run's,
    /// but a root host's mask of `/proc` holds only its two always-present files. The
    /// mounts are the same as for the full list, which is then found (a walk of
    /// `/proc/sys`) only when a run keeps uid 0 and needs it.
    pub fn probe_step(&self, pid: bool, spec: &crate::ruleset::Spec, cwd: &Path) -> Namespaces {
        let mask = rustix::process::geteuid()
            .is_root()
            .then(ProcMask::keys_only);
        self.build(true, pid, spec, cwd, None, mask)
    }

    fn build(
        &self,
        net: bool,
        pid: bool,
        spec: &crate::ruleset::Spec,
        cwd: &Path,
        prepared: Option<std::sync::Arc<Vec<Option<std::os::fd::OwnedFd>>>>,
        mask: Option<&'static ProcMask>,
    ) -> Namespaces {
        let c = |v: &[std::path::PathBuf]| v.iter().map(|p| c_path(p)).collect();
        Namespaces {
            userns: match self {
                Self::Plain => None,
                Self::UserNs(m) => Some(m.clone()),
            },
            net,
            mount: (!spec.writable_mounts.is_empty()).then(|| MountPlan {
                readonly_root: !spec.writable_mounts.iter().any(|w| w == Path::new("/")),
                writable: c(&spec.writable_mounts),
                pinned: c(&spec.pinned_dirs),
                readonly: c(&spec.readonly_mounts),
                prepared,
            }),
            pid,
            mask,
            cwd: c_path(cwd),
        }
    }
}

/// Everything the backend needs to know about the host.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub landlock: Landlock,
    /// The kernel has seccomp (`PR_GET_SECCOMP` answers).
    pub seccomp: bool,
    pub is_root: bool,
    /// The process holds some capability (file capabilities, ambient ones) though not root.
    pub has_caps: bool,
    /// `/proc/sys/kernel/cap_last_cap`.
    pub last_cap: u32,
    /// How the namespaces are made, or why they cannot be.
    pub ns: Result<NsMode, String>,
    /// Whether a pid namespace with its own `/proc` can be made too (in the way `ns`
    /// says), or why not: what `process_isolation` is claimed on.
    pub pid_ns: Result<(), String>,
}

/// Run `step` in a forked child and report whether it worked (the only way to try an
/// irreversible change without making it in the host process). A step that must run in a
/// process born in new namespaces (the pid namespace's init) runs in a grandchild that
/// is: the child makes them with `unshare`, whose next child is born in them, as a run's
/// process is by core's `clone3`.
fn try_in_child(step: &Namespaces) -> Result<(), String> {
    let born = step.born_in();
    let maps = sandbox_host::process::BornIn::identity_maps();
    // SAFETY: the child makes only the step's system calls and `_exit`s (see `child`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = |r: io::Result<()>| match r {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(255).clamp(1, 255),
        };
        let r = if !born.any() {
            step.pre_exec()
        } else {
            // SAFETY: system calls in the child, which ends in `_exit` below; the next
            // child is born in the namespaces as a run's process is.
            unsafe { born.enter_by_fork(&maps) }.and_then(|()| step.pre_exec())
        };
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code(r)) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid {
        return Err(format!("waitpid: {}", io::Error::last_os_error()));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else if libc::WIFEXITED(status) {
        Err(io::Error::from_raw_os_error(libc::WEXITSTATUS(status)).to_string())
    } else {
        Err(format!("the probe died with status {status}"))
    }
}

fn holds_capabilities() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget fills the two-element array of version 3.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()) };
    // When in doubt, say yes: the drop step is then run, which costs a few calls.
    r != 0
        || d.iter()
            .any(|x| x.effective | x.permitted | x.inheritable != 0)
}

/// The names of the facts this backend records (see `sandbox_host::facts`): how the
/// namespaces were made (`plain` or `userns`), and that a pid namespace with its own
/// `/proc` could be made that way (`ok`). Only successes are recorded.
const NAMESPACES: &str = "namespaces";
const PID_NAMESPACE: &str = "pid_namespace";

/// This backend's part of the facts' key: the landlock ABI (the kernel release, ids,
/// namespaces and sysctls are the common part) and the format of what is recorded.
pub(crate) fn own_key() -> String {
    format!("landlock facts v1; {:?}", Landlock::detect())
}

impl Host {
    /// Ask this host, taking the namespace probes' answers from `record` where it has
    /// them, and recording the ones that worked.
    pub fn detect(record: &HostRecord) -> Self {
        let (uid, gid) = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        let is_root = rustix::process::geteuid().is_root();
        // SAFETY: PR_GET_SECCOMP takes no pointer.
        let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            // CAP_CHECKPOINT_RESTORE, the last one as of Linux 6.x; unknown numbers are
            // skipped by the drop step anyway.
            .unwrap_or(40);
        let userns = NsMode::UserNs(IdMaps::identity(uid, gid));
        // A recorded way is taken only where it could be this host's: `plain` needs root.
        // The ids of the user namespace's maps are this process's own, never recorded.
        let recorded_ns = match record.get(NAMESPACES).as_deref() {
            Some("plain") if is_root => Some(NsMode::Plain),
            Some("userns") => Some(userns.clone()),
            _ => None,
        };
        let recorded_pid =
            recorded_ns.is_some() && record.get(PID_NAMESPACE).as_deref() == Some("ok");
        let (ns, pid_ns) = match recorded_ns {
            Some(mode) if recorded_pid => (Ok(mode), Ok(())),
            recorded => {
                let probes = Probes::new();
                let ns = match recorded {
                    Some(mode) => Ok(mode),
                    None => probes.namespaces(is_root, &userns),
                };
                // Separately: a host may allow the others but refuse a new /proc (a
                // container whose own /proc has masked files).
                let pid_ns = match &ns {
                    Ok(mode) => probes.pid_namespace(mode),
                    Err(e) => Err(e.clone()),
                };
                if let Ok(mode) = &ns {
                    record.set(
                        NAMESPACES,
                        match mode {
                            NsMode::Plain => "plain",
                            NsMode::UserNs(_) => "userns",
                        },
                    );
                }
                if pid_ns.is_ok() {
                    record.set(PID_NAMESPACE, "ok");
                }
                (ns, pid_ns)
            }
        };
        Self {
            landlock: Landlock::detect(),
            seccomp,
            is_root,
            has_caps: !is_root && holds_capabilities(),
            last_cap,
            ns,
            pid_ns,
        }
    }
}

/// The namespace probes: each does in a forked child what a run would, a network
/// namespace with its loopback and a read-only mount namespace with a scratch directory
/// bound back read-write and a read-only carve-out inside it.
struct Probes {
    /// Removed with the probes.
    _scratch: Option<tempfile::TempDir>,
    dirs: Option<std::path::PathBuf>,
    spec: crate::ruleset::Spec,
}

impl Probes {
    fn new() -> Self {
        // Not only `TMPDIR`: an unwritable one is the run's problem, reported by the run
        // that needs it (naming it); it must not make this probe claim less of the host.
        let scratch = [std::env::temp_dir(), "/tmp".into(), "/dev/shm".into()]
            .iter()
            .find_map(|base| {
                tempfile::Builder::new()
                    .prefix("sandbox-landlock-probe-")
                    .tempdir_in(base)
                    .ok()
            });
        let dirs = scratch.as_ref().and_then(|d| {
            let root = d.path().canonicalize().ok()?;
            std::fs::create_dir(root.join("ro")).ok()?;
            Some(root)
        });
        let spec = crate::ruleset::Spec {
            writable_mounts: dirs.iter().cloned().collect(),
            readonly_mounts: dirs.iter().map(|d| d.join("ro")).collect(),
            ..crate::ruleset::Spec::empty()
        };
        Self {
            _scratch: scratch,
            dirs,
            spec,
        }
    }

    fn try_step(&self, mode: &NsMode, pid: bool) -> Result<(), String> {
        match self.dirs.as_deref() {
            Some(cwd) => try_in_child(&mode.probe_step(pid, &self.spec, cwd)),
            // Claim nothing that was not tried.
            None => Err("no scratch directory in $TMPDIR to try the mounts in".to_string()),
        }
    }

    /// How the namespaces can be made: without a user namespace as root, else in one.
    fn namespaces(&self, is_root: bool, userns: &NsMode) -> Result<NsMode, String> {
        if is_root {
            self.try_step(&NsMode::Plain, false)
                .map(|()| NsMode::Plain)
                .or_else(|plain| {
                    self.try_step(userns, false)
                        .map(|()| userns.clone())
                        .map_err(|u| {
                            format!(
                                "unshare(CLONE_NEWNET | CLONE_NEWNS): {plain}; with a user \
                                 namespace: {u}"
                            )
                        })
                })
        } else {
            self.try_step(userns, false)
                .map(|()| userns.clone())
                .map_err(|e| format!("unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS): {e}"))
        }
    }

    /// Whether a pid namespace with its own `/proc` can be made in the way `mode` says.
    fn pid_namespace(&self, mode: &NsMode) -> Result<(), String> {
        self.try_step(mode, true)
            .map_err(|e| format!("a pid namespace with its own /proc: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_landlock_abi_3_or_newer_and_seccomp() {
        // The brief's host: Linux 6.x with landlock ABI 7. A host without it fails here,
        // loudly, rather than skipping.
        let h = Host::detect(&HostRecord::fresh("landlock"));
        let abi = h.landlock.abi().unwrap();
        assert!(abi >= ABI::V3, "{abi:?}");
        assert!(h.seccomp);
        assert!(h.last_cap >= 36);
    }

    #[test]
    fn namespace_probe_matches_the_host() {
        let h = Host::detect(&HostRecord::fresh("landlock"));
        // Unprivileged user namespaces work on this host (root or not).
        let n = h.ns.unwrap();
        assert_eq!(matches!(n, NsMode::Plain), h.is_root);
        h.pid_ns.unwrap();
    }

    #[test]
    fn missing_landlock_is_an_error_naming_the_cause() {
        assert!(matches!(Landlock::NotEnabled.abi(), Err(Error::NotEnabled)));
        assert!(matches!(
            Landlock::NotImplemented.abi(),
            Err(Error::NotImplemented)
        ));
    }
}
