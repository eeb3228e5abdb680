//! Whether this process runs inside a container that keeps it from making namespaces, and
//! what that container would have to allow: the remedy every refusal and `doctor` name
//! there, instead of a host sysctl that is not the cause.
//!
//! A default container (Docker, containerd, CRI-O; a default Kubernetes pod) differs from a
//! workstation in three ways that matter here, each read from a file of `/proc/self`:
//!
//! - **a seccomp filter** (`Seccomp: 2` in `status`): the engines' default profiles refuse
//!   `unshare` and `clone` with namespace flags (`EPERM`) to a process without
//!   `CAP_SYS_ADMIN`, whatever `user.max_user_namespaces` says. Where that sysctl is 0,
//!   the sysctl is the cause instead (on the node, for a container).
//! - **a masked `/proc`** (mounts beneath `/proc` in `mountinfo`: `/proc/kcore` and
//!   `/proc/keys` covered, `/proc/sys` read-only): the kernel refuses a new `proc` mount
//!   where the existing one is not fully visible, so a pid namespace cannot get its own
//!   `/proc` even where namespaces can be made.
//! - **no `CAP_SYS_ADMIN`** (`CapEff`): nothing is made without a user namespace first.
//!
//! Only files are read; nothing is tried. The landlock backend's probes try the real calls.

use std::fmt;

/// What keeps namespaces from this process, as far as its own `/proc` files say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// A seccomp filter is installed on this process (`Seccomp: 2`).
    pub seccomp_filtered: bool,
    /// Something is mounted beneath `/proc` other than `binfmt_misc` (which the kernel
    /// allows): the engine masked it.
    pub proc_masked: bool,
    /// `CAP_SYS_ADMIN` is in the effective set.
    pub cap_sys_admin: bool,
    /// `user.max_user_namespaces`, where it could be read.
    pub max_user_namespaces: Option<u64>,
}

/// Why no namespace can be made, as far as the files say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceCause {
    /// The sysctl `user.max_user_namespaces` is 0.
    SysctlZero,
    /// A seccomp filter (a container's profile) refuses namespace creation.
    SeccompProfile,
}

impl Confinement {
    /// Read this process's files.
    pub fn detect() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Self::from_files(
            &read("/proc/self/status"),
            &read("/proc/self/mountinfo"),
            std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
                .ok()
                .as_deref(),
        )
    }

    /// From the texts of `/proc/self/status`, `/proc/self/mountinfo` and
    /// `/proc/sys/user/max_user_namespaces`.
    pub fn from_files(status: &str, mountinfo: &str, max_userns: Option<&str>) -> Self {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let seccomp_filtered = field("Seccomp:") == Some("2");
        // CAP_SYS_ADMIN is bit 21.
        let cap_sys_admin = field("CapEff:")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .is_some_and(|c| c & (1 << 21) != 0);
        let proc_masked = mountinfo.lines().any(|l| {
            // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE ...`
            let mut f = l.split(' ');
            let point = f.nth(4).unwrap_or("");
            let fstype = l.split(" - ").nth(1).and_then(|r| r.split(' ').next());
            point.starts_with("/proc/") && fstype != Some("binfmt_misc")
        });
        Self {
            seccomp_filtered,
            proc_masked,
            cap_sys_admin,
            max_user_namespaces: max_userns.and_then(|s| s.trim().parse().ok()),
        }
    }

    /// Whether this looks like a container that withholds namespaces or its own `/proc`.
    pub fn in_restricting_container(&self) -> bool {
        (self.seccomp_filtered && !self.cap_sys_admin) || self.proc_masked
    }

    /// The likely cause, given that making a namespace failed with `EPERM`.
    pub fn namespace_cause(&self) -> Option<NamespaceCause> {
        if self.max_user_namespaces == Some(0) {
            Some(NamespaceCause::SysctlZero)
        } else if self.seccomp_filtered && !self.cap_sys_admin {
            Some(NamespaceCause::SeccompProfile)
        } else {
            None
        }
    }

    /// What the container must allow for namespaces (the `fast` lane's `loopback`,
    /// `proxy`, host ports; `strict`'s own network state), or `None` outside such a
    /// container.
    pub fn namespaces_remedy(&self) -> Option<String> {
        match self.namespace_cause()? {
            NamespaceCause::SysctlZero => Some(
                "`user.max_user_namespaces` is 0 (for a container, set it on the node: \
                 `sysctl user.max_user_namespaces=15000`)"
                    .into(),
            ),
            NamespaceCause::SeccompProfile => Some(format!("{SECCOMP_CAUSE}; {SECCOMP_FIX}")),
        }
    }

    /// What the container must allow for `strict` (namespaces and an unmasked `/proc`), or
    /// `None` where neither is withheld by a container.
    pub fn strict_remedy(&self) -> Option<String> {
        let ns = self.namespaces_remedy();
        let proc = self.proc_masked.then_some(PROC_FIX);
        match (ns, proc) {
            (None, None) => None,
            (Some(n), None) => Some(n),
            (None, Some(p)) => Some(p.into()),
            (Some(n), Some(p)) => Some(format!("{n}; and {p}")),
        }
    }
}

/// The cause a container's seccomp profile is.
pub const SECCOMP_CAUSE: &str = "this container's seccomp profile refuses namespace creation \
     (`unshare` fails with EPERM under its filter; `user.max_user_namespaces` is not the \
     cause)";

/// What lets namespaces be made in a container.
pub const SECCOMP_FIX: &str = "start it with the profile `sandbox container-profile` prints \
     (the engine's default plus the namespace and mount calls the sandbox makes): `docker run \
     --security-opt seccomp=PROFILE`, or in Kubernetes `securityContext.seccompProfile: \
     {type: Localhost, localhostProfile: PROFILE}` with the file in the kubelet's seccomp \
     directory (see docs/cluster.md)";

/// What gives a pid namespace its own `/proc` in a container.
pub const PROC_FIX: &str = "this container's /proc is masked, so no pid namespace can mount \
     its own: start it with `docker run --security-opt systempaths=unconfined`, or in Kubernetes \
     `securityContext.procMount: Unmasked` with `hostUsers: false` (see docs/cluster.md)";

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seccomp filter: {}; /proc masked: {}; CAP_SYS_ADMIN: {}; \
             user.max_user_namespaces: {}",
            yes(self.seccomp_filtered),
            yes(self.proc_masked),
            yes(self.cap_sys_admin),
            self.max_user_namespaces
                .map_or_else(|| "unknown".into(), |n| n.to_string())
        )
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKER_STATUS: &str = "Name:\tsh\nCapEff:\t0000000000000000\nNoNewPrivs:\t0\n\
                                 Seccomp:\t2\nSeccomp_filters:\t1\n";
    const ROOT_STATUS: &str = "Name:\tsh\nCapEff:\t000001ffffffffff\nSeccomp:\t0\n";
    /// What a default Docker container's mountinfo shows (abridged, as recorded).
    const DOCKER_MOUNTS: &str = "\
73 48 0:41 / / rw,relatime - overlay overlay rw
74 73 0:42 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
49 73 0:42 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
54 73 0:43 /null /proc/keys rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
";
    const HOST_MOUNTS: &str = "\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
23 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
24 23 0:23 / /proc/sys/fs/binfmt_misc rw,relatime - binfmt_misc binfmt_misc rw
";

    #[test]
    fn a_default_container_is_its_seccomp_profile_and_masked_proc() {
        let c = Confinement::from_files(DOCKER_STATUS, DOCKER_MOUNTS, Some("96367\n"));
        assert!(c.seccomp_filtered && c.proc_masked && !c.cap_sys_admin);
        assert!(c.in_restricting_container());
        assert_eq!(c.namespace_cause(), Some(NamespaceCause::SeccompProfile));
        let r = c.strict_remedy().unwrap();
        assert!(
            r.contains("seccomp=PROFILE") && r.contains("seccompProfile"),
            "{r}"
        );
        assert!(r.contains("systempaths=unconfined") && r.contains("procMount: Unmasked"));
        assert!(r.contains("is not the cause"), "{r}");
    }

    #[test]
    fn a_host_with_binfmt_misc_and_no_filter_is_not_a_container() {
        let c = Confinement::from_files(ROOT_STATUS, HOST_MOUNTS, Some("96367"));
        assert!(!c.seccomp_filtered && !c.proc_masked && c.cap_sys_admin);
        assert!(!c.in_restricting_container());
        assert_eq!(c.namespace_cause(), None);
        assert_eq!(c.strict_remedy(), None);
    }

    #[test]
    fn the_sysctl_is_named_only_when_it_is_zero() {
        let c = Confinement::from_files(DOCKER_STATUS, HOST_MOUNTS, Some("0"));
        assert_eq!(c.namespace_cause(), Some(NamespaceCause::SysctlZero));
        let r = c.strict_remedy().unwrap();
        assert!(r.contains("user.max_user_namespaces") && !r.contains("seccompProfile"));
        // A filter with CAP_SYS_ADMIN (a privileged container) is not the cause.
        let c = Confinement::from_files(
            "CapEff:\t0000000000200000\nSeccomp:\t2\n",
            HOST_MOUNTS,
            Some("5"),
        );
        assert_eq!(c.namespace_cause(), None);
    }

    /// This process's own files parse (on this host: no filter on the test process).
    #[test]
    fn this_process_is_read() {
        let c = Confinement::detect();
        assert!(c.max_user_namespaces.is_some(), "{c}");
    }
}
