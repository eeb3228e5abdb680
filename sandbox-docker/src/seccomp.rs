//! The container's system-call filter: core's table of denied calls
//! ([`sandbox_host::syscalls`], which the process backends install as a BPF program),
//! rendered as the engine's seccomp profile by core's OCI allow-list
//! ([`sandbox_host::syscalls::oci::allow_list`], whose docs say why an allow-list).
//!
//! # Why our own profile
//!
//! The engine's default profile lets a process set the setuid bit on a file it owns. With
//! the command running as its own uid that is harmless, but a root host hands a root-owned
//! tree over through an idmapped mount ([`crate::idmap`]), where what the command owns is
//! root's on disk: a setuid bit there would leave a setuid-root program in the workspace.
//! So `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, and `open`, `openat`, `creat`, `mknod`,
//! `mknodat` with a setuid or setgid bit in their mode fail with `EPERM`, on every run.
//! The rest of core's table is denied with `EPERM` too (tracing, mounts, namespaces, the
//! keyring, bpf, perf, userfaultfd, io_uring, which performs calls the filter never sees,
//! host administration, file handles, obsolete calls). The profile is rendered for the
//! policy of a container: its network is its own namespace and its tree dies with it, so
//! `socket` and `setsid` are not filtered (see [`POLICY`]). The container has no terminal
//! (`Tty` is off, stdio are pipes), which is why the rendering may leave `TIOCSTI` out.

use std::sync::OnceLock;

use sandbox_core::NetworkMode;
use sandbox_host::syscalls::{oci, SyscallPolicy};

use crate::error::DockerError;

/// The table's policy for a container: its network is its own namespace (the engine's
/// `none` has no interface but loopback), and its whole tree dies with it, so neither
/// sockets nor new process groups need filtering.
pub(crate) const POLICY: SyscallPolicy = SyscallPolicy {
    network: NetworkMode::Full,
    mediated: false,
};

/// The profile, as the engine's `SecurityOpt` value (`seccomp=<json>`). Rendered once; a
/// profile that cannot be written (not expected of strings and numbers) refuses every
/// container rather than starting one without it.
pub(crate) fn security_opt() -> Result<&'static str, DockerError> {
    static OPT: OnceLock<Result<String, String>> = OnceLock::new();
    OPT.get_or_init(|| {
        serde_json::to_string(&oci::allow_list(&POLICY))
            .map(|profile| format!("seccomp={profile}"))
            .map_err(|e| e.to_string())
    })
    .as_deref()
    .map_err(|e| DockerError::Invalid {
        field: "seccomp",
        reason: format!("the system-call profile cannot be written: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_is_core_s_allow_list_for_a_container() {
        let json = security_opt().unwrap().strip_prefix("seccomp=").unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            v,
            serde_json::to_value(oci::allow_list(&POLICY)).unwrap(),
            "the same profile"
        );
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        // A container's policy: sockets and setsid are the container's own business.
        let allowed = v["syscalls"][0]["names"].as_array().unwrap();
        for n in ["socket", "setsid", "setpgid"] {
            assert!(allowed.iter().any(|a| a == n), "{n}");
        }
    }
}
