//! The one table of system calls the sandboxes deny, and why: the source the BPF program
//! of the backends that filter their own process ([`crate::seccomp`]) and the OCI seccomp
//! profiles of the runtimes that filter for them ([`oci`]) are all rendered from, so the
//! kernel surface denied is the same on every backend.
//!
//! # What is denied, and why
//!
//! Denied calls fail with `EPERM` (never a kill), so a program reports a clear error:
//!
//! | calls | why |
//! |---|---|
//! | `ptrace`, `process_vm_readv`, `process_vm_writev`, `kcmp` | reading or steering other processes' memory; `kcmp` compares kernel objects of two processes, a side channel on kernel addresses |
//! | `mount`, `umount2`, `pivot_root`, `chroot`, `fsopen`, `fsconfig`, `fsmount`, `fspick`, `move_mount`, `open_tree`, `open_tree_attr`, `mount_setattr` | changing what the filesystem confinement sees (`open_tree_attr`, Linux 6.15, is `open_tree` with `mount_setattr` in one call) |
//! | `unshare`, `setns`, `clone` with namespace flags | new namespaces are where most kernel privilege-escalation bugs are reached from |
//! | `keyctl`, `add_key`, `request_key` | the kernel keyring is not namespaced: the host's keys |
//! | `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*` | large kernel attack surface; io_uring also bypasses seccomp for the calls it performs |
//! | `kexec_*`, `init_module`, `finit_module`, `delete_module`, `reboot`, `swapon`, `swapoff`, `acct`, `quotactl`, `quotactl_fd`, `syslog`, `settimeofday`, `clock_settime`, `clock_adjtime`, `adjtimex`, `vhangup` | host administration (`quotactl_fd` is `quotactl` by descriptor) |
//! | `open_by_handle_at`, `name_to_handle_at` | opening files by handle sidesteps path-based confinement (the "shocker" container escape) |
//! | `uselib`, `modify_ldt`, `ioperm`, `iopl`, `_sysctl`, `lookup_dcookie` and x86-64's unimplemented slots | obsolete or hardware-level calls no sandboxed program needs (the container engines' default profiles refuse them too) |
//! | `ioctl(TIOCSTI)`, `ioctl(TIOCLINUX)` | pushing input into the caller's terminal; matched on the request's low 32 bits, since the kernel ignores the high ones (CVE-2019-10063) |
//! | `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, and `open`/`openat` (with `O_CREAT` or `O_TMPFILE`)/`creat`/`mknod`/`mknodat` creating a file, with setuid or setgid bits | no setuid file left behind for the host to run |
//! | `socket` of any family but `AF_UNIX` (when the network mode is `none`) | no network at all, not even netlink or packet sockets |
//! | with a mediated door (`proxy` without a namespace): `socket` but `AF_UNIX` and TCP, `listen`, `sendto` with an address, `MSG_FASTOPEN` on any send | every connection is the supervisor's to make ([`crate::seccomp`] notifies `connect`); nothing else may open a way, in or out |
//!
//! `setsid` and `setpgid` are allowed under every policy, on every backend: no tree kill
//! depends on sessions or process groups (a pid namespace, a cgroup, a container, or core's
//! waiter as a child subreaper holds the tree), and tools need them (`git`'s detached
//! maintenance, `setsid`, Python's `start_new_session`).
//!
//! `clone3` and `openat2` fail with `ENOSYS` instead: their arguments are behind a pointer a
//! filter cannot read, and `ENOSYS` makes the C library fall back to `clone` and `openat`,
//! which the filter does check.
//!
//! # What the sandbox itself needs
//!
//! [`HOST_CALLS`] names the calls of this table that the sandbox makes to confine a
//! command (its namespaces and mounts): what a container it runs in must allow it, which
//! `sandbox container-profile` adds to a container engine's default profile.
//!
//! # Renderings
//!
//! The BPF program numbers calls natively ([`Denial::nr`]); the OCI allow-list
//! ([`oci::allow_list`]) names them, and allows every name in [`X86_64_NAMES`] that this
//! table does not deny; for a runtime with a kernel of its own, [`oci::setid_denials`]
//! keeps only the rules about files left on the host. Each rendering is tested against
//! this table in both directions (a denied call is never in the allow-list; everything the
//! allow-list allows, the BPF program allows).

use sandbox_core::NetworkMode;

pub mod oci;

/// What the filter depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SyscallPolicy {
    /// With `None`, sockets of every family but `AF_UNIX` are denied.
    pub network: NetworkMode,
    /// The door is mediated (network `proxy` with no namespace of the command's own): the
    /// command's every `connect` notifies the run's supervisor, which makes the connection
    /// itself ([`crate::seccomp`]'s program does that ahead of the table), and the table's
    /// mediated rules deny what would open a way the supervisor does not see.
    pub mediated: bool,
}

impl SyscallPolicy {
    /// Whether the door is mediated: `mediated`, for network `proxy` (the one mode with a
    /// door to mediate).
    pub fn mediates(&self) -> bool {
        self.mediated && self.network == NetworkMode::Proxy
    }
}

/// When a call in the table is denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Whatever its arguments.
    Always,
    /// `ENOSYS` whatever its arguments, so the C library falls back to a call whose
    /// arguments a filter can read.
    FallBack,
    /// When argument `mode` (a file mode) has the setuid or setgid bit.
    SetidMode {
        /// The index of the mode argument.
        mode: u8,
    },
    /// When argument `flags` creates a file (`O_CREAT`, or `O_TMPFILE`) and argument `mode`
    /// has the setuid or setgid bit.
    CreatingSetid {
        /// The index of the open flags.
        flags: u8,
        /// The index of the mode argument.
        mode: u8,
    },
    /// When argument `flags` (clone flags) has any of [`NAMESPACE_FLAGS`].
    NamespaceFlags {
        /// The index of the flags argument.
        flags: u8,
    },
    /// When the low 32 bits of argument `request` are one of [`TERMINAL_REQUESTS`]. Only
    /// where the command can reach a terminal: a rendering for a command that has none
    /// (a container with pipes for stdio) may leave it out.
    TerminalInjection {
        /// The index of the request argument.
        request: u8,
    },
    /// Only with network mode `none`: when argument `domain` is not `AF_UNIX`.
    NetworkSockets {
        /// The index of the domain argument.
        domain: u8,
    },
    /// Only with a mediated door: a socket of any family but `AF_UNIX`, `AF_INET` and
    /// `AF_INET6`, or of those two any type but `SOCK_STREAM` or a protocol but TCP (no
    /// datagram that names its own address, no raw socket).
    MediatedSockets {
        /// The index of the domain argument.
        domain: u8,
        /// The index of the type argument (its low four bits; the rest are flags).
        kind: u8,
        /// The index of the protocol argument.
        protocol: u8,
    },
    /// Only with a mediated door, whatever its arguments: `listen` (on an unbound TCP
    /// socket it binds one itself, which landlock's bind right does not see).
    Mediated,
    /// Only with a mediated door: when argument `flags` has `MSG_FASTOPEN` (a send that
    /// connects, past the supervisor), or argument `addr`, where the call has one, is not
    /// null (a send to an address of its own).
    MediatedSend {
        /// The index of the flags argument.
        flags: u8,
        /// The index of the address argument, if the call has one in a register.
        addr: Option<u8>,
    },
}

impl Rule {
    /// Whether the rule is part of the filter for `policy`.
    pub fn applies(self, policy: &SyscallPolicy) -> bool {
        match self {
            Self::NetworkSockets { .. } => policy.network == NetworkMode::None,
            Self::MediatedSockets { .. } | Self::Mediated | Self::MediatedSend { .. } => {
                policy.mediates()
            }
            _ => true,
        }
    }

    /// Whether the call is denied whatever its arguments.
    pub fn unconditional(self) -> bool {
        matches!(self, Self::Always | Self::FallBack)
    }
}

/// One denied call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Its name, as `seccomp` profiles and `man 2` spell it.
    pub name: &'static str,
    /// Its number on this architecture, or `None` where the architecture has no such call.
    pub nr: Option<i64>,
    /// When it is denied.
    pub rule: Rule,
}

/// `clone` flags that make a namespace.
pub const NAMESPACE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
];

/// `ioctl` requests that push input into a terminal: `TIOCSTI`, `TIOCLINUX`.
pub const TERMINAL_REQUESTS: [u64; 2] = [0x5412, 0x541C];

/// The mode bits no created file may carry: setuid, setgid.
pub const SETID_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// The open flags that create a file: `O_CREAT`, and `O_TMPFILE` (unnamed, then linked
/// into place) without its `O_DIRECTORY` bit, which it shares with plain directory opens.
pub const CREATING_FLAGS: [u64; 2] = [
    libc::O_CREAT as u64,
    (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64,
];

/// A call every supported architecture has, by its `libc` constant.
macro_rules! call {
    ($name:literal, $sys:ident, $rule:expr) => {
        Denial {
            name: $name,
            nr: Some(libc::$sys as i64),
            rule: $rule,
        }
    };
}

/// A call only x86-64 has (the others came later and use the generic table).
macro_rules! x86 {
    ($name:literal, $nr:expr, $rule:expr) => {
        Denial {
            name: $name,
            nr: if cfg!(target_arch = "x86_64") {
                Some($nr)
            } else {
                None
            },
            rule: $rule,
        }
    };
}

/// A call of the unified table (number 403 and up: the same on every architecture),
/// which the `libc` crate may not name yet.
macro_rules! unified {
    ($name:literal, $nr:literal, $rule:expr) => {
        Denial {
            name: $name,
            nr: Some($nr),
            rule: $rule,
        }
    };
}

use Rule::*;

/// Every denied call. See the module docs for why. A call is named once, or once per
/// policy where its entries' policies exclude each other (`socket`).
pub const TABLE: &[Denial] = &[
    // Reading or steering other processes.
    call!("ptrace", SYS_ptrace, Always),
    call!("process_vm_readv", SYS_process_vm_readv, Always),
    call!("process_vm_writev", SYS_process_vm_writev, Always),
    call!("kcmp", SYS_kcmp, Always),
    // Changing what the filesystem confinement sees.
    call!("mount", SYS_mount, Always),
    call!("umount2", SYS_umount2, Always),
    call!("pivot_root", SYS_pivot_root, Always),
    call!("chroot", SYS_chroot, Always),
    call!("fsopen", SYS_fsopen, Always),
    call!("fsconfig", SYS_fsconfig, Always),
    call!("fsmount", SYS_fsmount, Always),
    call!("fspick", SYS_fspick, Always),
    call!("move_mount", SYS_move_mount, Always),
    call!("open_tree", SYS_open_tree, Always),
    unified!("open_tree_attr", 467, Always),
    call!("mount_setattr", SYS_mount_setattr, Always),
    // New namespaces.
    call!("unshare", SYS_unshare, Always),
    call!("setns", SYS_setns, Always),
    call!("clone", SYS_clone, NamespaceFlags { flags: 0 }),
    // The kernel keyring is not namespaced.
    call!("keyctl", SYS_keyctl, Always),
    call!("add_key", SYS_add_key, Always),
    call!("request_key", SYS_request_key, Always),
    // Large kernel attack surface; io_uring also bypasses the filter for its calls.
    call!("bpf", SYS_bpf, Always),
    call!("perf_event_open", SYS_perf_event_open, Always),
    call!("userfaultfd", SYS_userfaultfd, Always),
    call!("io_uring_setup", SYS_io_uring_setup, Always),
    call!("io_uring_enter", SYS_io_uring_enter, Always),
    call!("io_uring_register", SYS_io_uring_register, Always),
    // Host administration.
    call!("kexec_load", SYS_kexec_load, Always),
    call!("kexec_file_load", SYS_kexec_file_load, Always),
    call!("init_module", SYS_init_module, Always),
    call!("finit_module", SYS_finit_module, Always),
    call!("delete_module", SYS_delete_module, Always),
    call!("reboot", SYS_reboot, Always),
    call!("swapon", SYS_swapon, Always),
    call!("swapoff", SYS_swapoff, Always),
    call!("acct", SYS_acct, Always),
    call!("quotactl", SYS_quotactl, Always),
    call!("quotactl_fd", SYS_quotactl_fd, Always),
    call!("syslog", SYS_syslog, Always),
    call!("settimeofday", SYS_settimeofday, Always),
    call!("clock_settime", SYS_clock_settime, Always),
    call!("clock_adjtime", SYS_clock_adjtime, Always),
    call!("adjtimex", SYS_adjtimex, Always),
    call!("vhangup", SYS_vhangup, Always),
    // Opening files by handle sidesteps path-based confinement.
    call!("open_by_handle_at", SYS_open_by_handle_at, Always),
    call!("name_to_handle_at", SYS_name_to_handle_at, Always),
    // Obsolete or hardware-level calls.
    call!("lookup_dcookie", SYS_lookup_dcookie, Always),
    x86!("uselib", 134, Always),
    x86!("_sysctl", 156, Always),
    x86!("modify_ldt", 154, Always),
    x86!("iopl", 172, Always),
    x86!("ioperm", 173, Always),
    x86!("create_module", 174, Always),
    x86!("get_kernel_syms", 177, Always),
    x86!("query_module", 178, Always),
    x86!("nfsservctl", 180, Always),
    x86!("getpmsg", 181, Always),
    x86!("putpmsg", 182, Always),
    x86!("afs_syscall", 183, Always),
    x86!("tuxcall", 184, Always),
    x86!("security", 185, Always),
    x86!("vserver", 236, Always),
    // Pushing input into the caller's terminal.
    call!("ioctl", SYS_ioctl, TerminalInjection { request: 1 }),
    // No setuid or setgid file left behind.
    x86!("chmod", 90, SetidMode { mode: 1 }),
    call!("fchmod", SYS_fchmod, SetidMode { mode: 1 }),
    call!("fchmodat", SYS_fchmodat, SetidMode { mode: 2 }),
    unified!("fchmodat2", 452, SetidMode { mode: 2 }),
    x86!("creat", 85, SetidMode { mode: 1 }),
    x86!("mknod", 133, SetidMode { mode: 1 }),
    call!("mknodat", SYS_mknodat, SetidMode { mode: 2 }),
    x86!("open", 2, CreatingSetid { flags: 1, mode: 2 }),
    call!("openat", SYS_openat, CreatingSetid { flags: 2, mode: 3 }),
    // Arguments behind a pointer: ENOSYS, so the C library falls back.
    unified!("clone3", 435, FallBack),
    unified!("openat2", 437, FallBack),
    // No network at all.
    call!("socket", SYS_socket, NetworkSockets { domain: 0 }),
    // A mediated door: the supervisor makes every connection; nothing else opens a way.
    call!(
        "socket",
        SYS_socket,
        MediatedSockets {
            domain: 0,
            kind: 1,
            protocol: 2
        }
    ),
    call!("listen", SYS_listen, Mediated),
    call!(
        "sendto",
        SYS_sendto,
        MediatedSend {
            flags: 3,
            addr: Some(4)
        }
    ),
    call!(
        "sendmsg",
        SYS_sendmsg,
        MediatedSend {
            flags: 2,
            addr: None
        }
    ),
    call!(
        "sendmmsg",
        SYS_sendmmsg,
        MediatedSend {
            flags: 3,
            addr: None
        }
    ),
];

/// A call of [`TABLE`] that the sandbox itself makes to confine a command, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCall {
    /// Its name, as in [`TABLE`].
    pub name: &'static str,
    /// The step of the sandbox that makes it.
    pub why: &'static str,
}

/// What a container the sandbox runs in must allow the sandbox itself for `strict`, beyond
/// an engine's default profile, which admits these only with `CAP_SYS_ADMIN`:
/// `sandbox container-profile` adds exactly these, unconditionally, to the engine's default.
/// Each is a call a step of the `strict` lane makes; each is also in [`TABLE`], so the
/// command is still denied it by the filter the sandbox puts on it (tested below).
///
/// Not here, because no step makes them: `clone` with namespace flags (namespaces are made
/// at birth by `clone3`, or by `unshare` and a plain `clone`, which the default allows),
/// `pivot_root`, `chroot`, `fspick`, `open_tree_attr`.
pub const HOST_CALLS: &[HostCall] = &[
    HostCall {
        name: "unshare",
        why: "the command's user, mount and network namespaces (sandbox-landlock's child, \
              the copy-on-write layer, the id-mapped mounts)",
    },
    HostCall {
        name: "clone3",
        why: "the command born in its own pid and user namespaces, into its cgroup \
              (sandbox-host's spawn)",
    },
    HostCall {
        name: "setns",
        why: "the egress proxy's thread entering the command's network namespace",
    },
    HostCall {
        name: "mount",
        why: "mounts made private, the pid namespace's own /proc, read-only binds",
    },
    HostCall {
        name: "umount2",
        why: "the copy-on-write layer's staging mounts, and the sweep of a dead host's",
    },
    HostCall {
        name: "open_tree",
        why: "the writable trees cloned before the root turns read-only; id-mapped mounts",
    },
    HostCall {
        name: "move_mount",
        why: "attaching those trees, the layer and the /proc masks",
    },
    HostCall {
        name: "mount_setattr",
        why: "the read-only root, and id-mapped mounts",
    },
    HostCall {
        name: "fsopen",
        why: "the mode-000 tmpfs that masks a root host's /proc files",
    },
    HostCall {
        name: "fsconfig",
        why: "configuring that tmpfs",
    },
    HostCall {
        name: "fsmount",
        why: "mounting that tmpfs",
    },
];

/// The calls denied under `policy`, in [`TABLE`] order.
pub fn denials(policy: &SyscallPolicy) -> impl Iterator<Item = &'static Denial> + '_ {
    TABLE.iter().filter(move |d| d.rule.applies(policy))
}

/// The denial of the call called `name`, if the table has one.
pub fn denial(name: &str) -> Option<&'static Denial> {
    TABLE.iter().find(|d| d.name == name)
}

/// Every system-call name of x86-64 Linux up to 6.17, in number order: 0 to 334, then the
/// unified table from 424 ([`x86_64_number`]). The same names cover arm64 and riscv64,
/// whose tables are subsets; a profile that names a call a platform lacks is fine (the
/// engine ignores it).
pub const X86_64_NAMES: &[&str] = &[
    "read",
    "write",
    "open",
    "close",
    "stat",
    "fstat",
    "lstat",
    "poll",
    "lseek",
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "ioctl",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "access",
    "pipe",
    "select",
    "sched_yield",
    "mremap",
    "msync",
    "mincore",
    "madvise",
    "shmget",
    "shmat",
    "shmctl",
    "dup",
    "dup2",
    "pause",
    "nanosleep",
    "getitimer",
    "alarm",
    "setitimer",
    "getpid",
    "sendfile",
    "socket",
    "connect",
    "accept",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "shutdown",
    "bind",
    "listen",
    "getsockname",
    "getpeername",
    "socketpair",
    "setsockopt",
    "getsockopt",
    "clone",
    "fork",
    "vfork",
    "execve",
    "exit",
    "wait4",
    "kill",
    "uname",
    "semget",
    "semop",
    "semctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "fcntl",
    "flock",
    "fsync",
    "fdatasync",
    "truncate",
    "ftruncate",
    "getdents",
    "getcwd",
    "chdir",
    "fchdir",
    "rename",
    "mkdir",
    "rmdir",
    "creat",
    "link",
    "unlink",
    "symlink",
    "readlink",
    "chmod",
    "fchmod",
    "chown",
    "fchown",
    "lchown",
    "umask",
    "gettimeofday",
    "getrlimit",
    "getrusage",
    "sysinfo",
    "times",
    "ptrace",
    "getuid",
    "syslog",
    "getgid",
    "setuid",
    "setgid",
    "geteuid",
    "getegid",
    "setpgid",
    "getppid",
    "getpgrp",
    "setsid",
    "setreuid",
    "setregid",
    "getgroups",
    "setgroups",
    "setresuid",
    "getresuid",
    "setresgid",
    "getresgid",
    "getpgid",
    "setfsuid",
    "setfsgid",
    "getsid",
    "capget",
    "capset",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigqueueinfo",
    "rt_sigsuspend",
    "sigaltstack",
    "utime",
    "mknod",
    "uselib",
    "personality",
    "ustat",
    "statfs",
    "fstatfs",
    "sysfs",
    "getpriority",
    "setpriority",
    "sched_setparam",
    "sched_getparam",
    "sched_setscheduler",
    "sched_getscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "mlock",
    "munlock",
    "mlockall",
    "munlockall",
    "vhangup",
    "modify_ldt",
    "pivot_root",
    "_sysctl",
    "prctl",
    "arch_prctl",
    "adjtimex",
    "setrlimit",
    "chroot",
    "sync",
    "acct",
    "settimeofday",
    "mount",
    "umount2",
    "swapon",
    "swapoff",
    "reboot",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "create_module",
    "init_module",
    "delete_module",
    "get_kernel_syms",
    "query_module",
    "quotactl",
    "nfsservctl",
    "getpmsg",
    "putpmsg",
    "afs_syscall",
    "tuxcall",
    "security",
    "gettid",
    "readahead",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "tkill",
    "time",
    "futex",
    "sched_setaffinity",
    "sched_getaffinity",
    "set_thread_area",
    "io_setup",
    "io_destroy",
    "io_getevents",
    "io_submit",
    "io_cancel",
    "get_thread_area",
    "lookup_dcookie",
    "epoll_create",
    "epoll_ctl_old",
    "epoll_wait_old",
    "remap_file_pages",
    "getdents64",
    "set_tid_address",
    "restart_syscall",
    "semtimedop",
    "fadvise64",
    "timer_create",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    "timer_delete",
    "clock_settime",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "exit_group",
    "epoll_wait",
    "epoll_ctl",
    "tgkill",
    "utimes",
    "vserver",
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
    "kexec_load",
    "waitid",
    "add_key",
    "request_key",
    "keyctl",
    "ioprio_set",
    "ioprio_get",
    "inotify_init",
    "inotify_add_watch",
    "inotify_rm_watch",
    "migrate_pages",
    "openat",
    "mkdirat",
    "mknodat",
    "fchownat",
    "futimesat",
    "newfstatat",
    "unlinkat",
    "renameat",
    "linkat",
    "symlinkat",
    "readlinkat",
    "fchmodat",
    "faccessat",
    "pselect6",
    "ppoll",
    "unshare",
    "set_robust_list",
    "get_robust_list",
    "splice",
    "tee",
    "sync_file_range",
    "vmsplice",
    "move_pages",
    "utimensat",
    "epoll_pwait",
    "signalfd",
    "timerfd_create",
    "eventfd",
    "fallocate",
    "timerfd_settime",
    "timerfd_gettime",
    "accept4",
    "signalfd4",
    "eventfd2",
    "epoll_create1",
    "dup3",
    "pipe2",
    "inotify_init1",
    "preadv",
    "pwritev",
    "rt_tgsigqueueinfo",
    "perf_event_open",
    "recvmmsg",
    "fanotify_init",
    "fanotify_mark",
    "prlimit64",
    "name_to_handle_at",
    "open_by_handle_at",
    "clock_adjtime",
    "syncfs",
    "sendmmsg",
    "setns",
    "getcpu",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "finit_module",
    "sched_setattr",
    "sched_getattr",
    "renameat2",
    "seccomp",
    "getrandom",
    "memfd_create",
    "kexec_file_load",
    "bpf",
    "execveat",
    "userfaultfd",
    "membarrier",
    "mlock2",
    "copy_file_range",
    "preadv2",
    "pwritev2",
    "pkey_mprotect",
    "pkey_alloc",
    "pkey_free",
    "statx",
    "io_pgetevents",
    "rseq",
    "pidfd_send_signal",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "pidfd_open",
    "clone3",
    "close_range",
    "openat2",
    "pidfd_getfd",
    "faccessat2",
    "process_madvise",
    "epoll_pwait2",
    "mount_setattr",
    "quotactl_fd",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "memfd_secret",
    "process_mrelease",
    "futex_waitv",
    "set_mempolicy_home_node",
    "cachestat",
    "fchmodat2",
    "map_shadow_stack",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "statmount",
    "listmount",
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
    "mseal",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
    "open_tree_attr",
    "file_getattr",
    "file_setattr",
];

/// The x86-64 number of the call called `name`.
pub fn x86_64_number(name: &str) -> Option<u32> {
    let index = X86_64_NAMES.iter().position(|n| *n == name)?;
    let index = u32::try_from(index).ok()?;
    Some(if index <= 334 {
        index
    } else {
        index - 335 + 424
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name is a call, and under any one policy at most one entry names it (a call
    /// has two entries only where their policies exclude each other: `socket` without
    /// network, and with a mediated door).
    #[test]
    fn names_are_unique_and_known() {
        for d in TABLE {
            assert!(X86_64_NAMES.contains(&d.name), "{} is not a call", d.name);
        }
        for network in [
            NetworkMode::None,
            NetworkMode::Loopback,
            NetworkMode::Full,
            NetworkMode::Proxy,
        ] {
            for mediated in [false, true] {
                let policy = SyscallPolicy { network, mediated };
                let names: Vec<_> = denials(&policy).map(|d| d.name).collect();
                for (i, n) in names.iter().enumerate() {
                    assert!(!names[..i].contains(n), "{n} twice under {policy:?}");
                }
            }
        }
    }

    /// The name list's numbering and the table's numbers agree: both are right, or the
    /// test catches the one that is not.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn on_x86_64_the_table_numbers_match_the_name_list() {
        for d in TABLE {
            assert_eq!(d.nr.map(|n| n as u32), x86_64_number(d.name), "{}", d.name);
        }
        assert_eq!(x86_64_number("read"), Some(0));
        assert_eq!(x86_64_number("rseq"), Some(334));
        assert_eq!(x86_64_number("pidfd_send_signal"), Some(424));
        assert_eq!(x86_64_number("file_setattr"), Some(469));
        assert_eq!(x86_64_number("getrandom"), Some(libc::SYS_getrandom as u32));
        assert_eq!(x86_64_number("futex_waitv"), Some(449));
        assert_eq!(X86_64_NAMES.len(), 335 + (469 - 424 + 1));
    }

    /// What the sandbox asks a container to allow it is still denied to the command: every
    /// host call is a call of the table (by name), once, and denied under every policy.
    #[test]
    fn every_host_call_is_denied_to_the_command() {
        for (i, h) in HOST_CALLS.iter().enumerate() {
            assert!(
                HOST_CALLS[..i].iter().all(|e| e.name != h.name),
                "{} twice",
                h.name
            );
            let d = denial(h.name).unwrap_or_else(|| panic!("{} is not in TABLE", h.name));
            for (network, mediated) in [
                (NetworkMode::None, false),
                (NetworkMode::Full, false),
                (NetworkMode::Proxy, true),
            ] {
                let policy = SyscallPolicy { network, mediated };
                assert!(d.rule.applies(&policy), "{}", h.name);
            }
            assert!(!h.why.is_empty(), "{}", h.name);
        }
    }

    #[test]
    fn policy_dependent_rules_apply_only_under_their_policy() {
        let open = SyscallPolicy {
            network: NetworkMode::Full,
            mediated: false,
        };
        let closed = SyscallPolicy {
            network: NetworkMode::None,
            mediated: false,
        };
        let mediated = SyscallPolicy {
            network: NetworkMode::Proxy,
            mediated: true,
        };
        let names = |p| denials(p).map(|d| d.name).collect::<Vec<_>>();
        assert!(!names(&open).contains(&"socket"));
        assert!(names(&closed).contains(&"socket"));
        for n in ["socket", "listen", "sendto", "sendmsg", "sendmmsg"] {
            assert!(names(&mediated).contains(&n), "{n}");
        }
        for n in ["listen", "sendto", "sendmsg", "sendmmsg"] {
            assert!(
                !names(&open).contains(&n) && !names(&closed).contains(&n),
                "{n}"
            );
        }
        // Sessions are the command's own under every policy: no tree kill depends on them.
        for n in ["setsid", "setpgid"] {
            assert!(
                !names(&open).contains(&n) && !names(&closed).contains(&n),
                "{n}"
            );
        }
        for n in ["kcmp", "quotactl_fd", "open_tree_attr", "ptrace", "clone3"] {
            assert!(names(&open).contains(&n), "{n}");
        }
    }
}
