//! The steps this backend runs in the child, between fork and exec.
//!
//! # Why each call is safe there
//!
//! The host is a multi-threaded async program. After `fork` only the forking thread exists
//! in the child, and any lock another thread held at that instant (the allocator's, stdio's,
//! a `Mutex` in our caches) stays locked forever; so between fork and exec the child may
//! only make calls that take no user-space lock: raw system calls. Everything these steps
//! use is prepared in the parent by [`crate::LandlockBackend`]'s `prepare`: the ruleset
//! descriptor, the compiled filters, the uid/gid map lines, the C strings of the `/proc`
//! paths. The steps then make only these calls, each a plain system call with no
//! user-space state (the libc wrappers only set `errno`, which is per thread):
//!
//! - `unshare`, `open`, `write`, `close` (namespaces and their id maps), `mount`,
//!   `open_tree`, `mount_setattr`, `move_mount`, `chdir` (read-only carve-outs), `socket`,
//!   `ioctl` (the loopback);
//! - `fsopen`, `fsconfig`, `fsmount`, `openat` (the tmpfs behind [`ProcMask`]);
//! - `landlock_add_rule` (the private `/proc`, [`RestrictSelf`]);
//! - `prctl` (bounding set, ambient set, securebits, `no_new_privs`), `capset`, `capget`,
//!   `setgroups`, `setresgid`, `setresuid` (a root host's command leaving uid 0; the raw
//!   calls, [`sandbox_host::process::become_ids`], not glibc's, which signal every thread
//!   glibc believes the process has);
//! - `landlock_restrict_self` (through `syscall`);
//! - `seccomp` (through `syscall`, in [`crate::filter`] and core's shared filter).
//!
//! Core makes the child without copying the host (`CLONE_VM | CLONE_VFORK`): it runs in
//! the host's memory until its exec, beside the host's other threads. The steps are fit for
//! that: they write nothing but locals on their own stack, and none waits for the host. On
//! `strict` the child is also born the init of a pid namespace of its own (core's `clone3`,
//! `sandbox_host::process::BornIn`): [`Namespaces`] mounts its `/proc`, and its exec is
//! core's waiter (`sandbox_host::process::waiter`), confined by every step here, which
//! then starts the command. So no process of the run ever holds a copy of the host.
//!
//! Errors are built with [`io::Error::last_os_error`] or [`io::Error::from_raw_os_error`],
//! which store the number inline: no allocation. Nothing allocated is dropped in the child.
//!
//! # Order
//!
//! Core has already joined the cgroups, set the rlimits and marked every descriptor but
//! stdio close-on-exec. Then, in the order [`crate::LandlockBackend`] lists them:
//!
//! 1. [`Namespaces`] (network, carve-outs, root-only `/proc` files, and on `strict` the
//!    pid namespace's `/proc`): needs `CAP_SYS_ADMIN` (root's, or the new user
//!    namespace's), so it comes before the capabilities go; and mounting must happen
//!    before landlock, which forbids it.
//! 2. [`ProcessLimit`] (a user namespace, no cgroup): `RLIMIT_NPROC` counted inside it.
//! 3. [`DropCapabilities`] (root host, or a new user namespace): no capability survives;
//!    a root host's command whose trees were handed over (`sandbox_host::handover`) leaves uid 0
//!    here, after the bounding set, before landlock.
//! 4. [`RestrictSelf`]: `no_new_privs`, then landlock (with the private `/proc` granted);
//!    works without capabilities because `no_new_privs` is set.
//! 5. The filters, last: they deny `unshare` and `socket` calls the steps above make.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use sandbox_host::process::{raw_write_file, PreExec};

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The uid and gid maps of a new user namespace: the caller's own ids, mapped to
/// themselves, so files keep their owners and nothing else is gained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

impl IdMaps {
    /// The maps for a process running as `uid`:`gid`.
    pub fn identity(uid: u32, gid: u32) -> Self {
        Self {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        }
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// The most writable trees (the workspace and the named writable paths) a run may have:
/// their clones are held in a fixed array, since the child may not allocate.
pub(crate) const MAX_WRITABLE: usize = 64;

/// What the command's mount namespace looks like, as C strings prepared in the parent.
#[derive(Debug, Clone, Default)]
pub(crate) struct MountPlan {
    /// Make every mount read-only. False only when `/` itself is writable (a workspace or
    /// writable path of `/`), where there is nothing to keep read-only.
    pub readonly_root: bool,
    /// Bound back read-write after every mount is made read-only (the workspace, the
    /// writable paths; disjoint).
    pub writable: Vec<CString>,
    /// Bound onto themselves so that they cannot be renamed; outermost first.
    pub pinned: Vec<CString>,
    /// The carve-outs: bound onto themselves read-only.
    pub readonly: Vec<CString>,
    /// Detached trees prepared in the parent, one per entry of `writable`, attached there
    /// instead of clones of the host's: a root host's idmapped copies that hand the trees
    /// to the command's unprivileged id (see `sandbox_host::handover`); `None` for the
    /// workspace under an overlay, cloned from its path as the others are without a
    /// hand-over (core's overlay, already mounted on idmapped layers).
    pub prepared: Option<Arc<Vec<Option<OwnedFd>>>>,
}

/// The namespaces of the command, made in one `unshare`:
///
/// - a **user** namespace when the host is not root (it is what lets an unprivileged
///   process make the others), mapping the caller's own ids to themselves;
/// - a **network** namespace for `loopback`, with its `lo` up: the command serves and
///   connects on its own `127.0.0.1` and reaches nothing of the host's, not even the
///   host's loopback;
/// - a **mount** namespace (see `src/ruleset.rs`): every mount is made private (nothing
///   done here reaches the host's namespace) and read-only, recursively; the writable
///   trees are cloned from the host's namespace (`open_tree`, as they are there) and
///   attached over their read-only selves (`move_mount`); the pinned directories are bound
///   onto themselves; each carve-out is cloned, made read-only (`mount_setattr`) and
///   attached onto itself. Last, the working directory is entered again, so that it is the
///   one in the new mounts.
#[derive(Debug, Clone)]
pub(crate) struct Namespaces {
    /// `Some` to create a user namespace too, with these maps.
    pub userns: Option<IdMaps>,
    pub net: bool,
    pub mount: Option<MountPlan>,
    /// This process is the init of a pid namespace of its own, born so by core's `clone3`
    /// (`sandbox_host::process::BornIn`, with the user namespace too where `userns` is
    /// set, whose maps core then writes): it mounts its private `/proc` here, and its exec
    /// is the waiter's, which then
    /// starts the command (see `crate::LandlockBackend`'s `prepare`).
    pub pid: bool,
    /// Cover what a root host's command must not read in `/proc` (after the private
    /// `/proc` is mounted, where there is one).
    pub mask: Option<&'static ProcMask>,
    /// The working directory, entered again after the mounts.
    pub cwd: CString,
}

impl Namespaces {
    /// The namespaces the process running this step must be born in: the pid namespace,
    /// and with it the user namespace that must own it where there is one.
    pub fn born_in(&self) -> sandbox_host::process::BornIn {
        sandbox_host::process::BornIn {
            pid: self.pid,
            user: self.pid && self.userns.is_some(),
        }
    }

    /// Bring `lo` up in the current network namespace.
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec.
    unsafe fn loopback_up() -> io::Result<()> {
        // SAFETY: a zeroed `ifreq` is valid; the ioctls read and write only it.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut ifr: libc::ifreq = std::mem::zeroed();
            ifr.ifr_name[0] = b'l' as libc::c_char;
            ifr.ifr_name[1] = b'o' as libc::c_char;
            let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr);
            if r == 0 {
                ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
                r = libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr);
            }
            let err = io::Error::last_os_error();
            libc::close(fd);
            if r != 0 {
                return Err(err);
            }
        }
        Ok(())
    }

    /// A detached copy of the mount tree at `path` (`open_tree(OPEN_TREE_CLONE)`).
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec.
    unsafe fn clone_tree(path: &CStr) -> io::Result<libc::c_int> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                path.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
            )
        };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(fd as libc::c_int)
        }
    }

    /// Attach the detached tree `fd` at `path`, and close `fd`.
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec.
    unsafe fn attach(fd: libc::c_int, path: &CStr) -> io::Result<()> {
        // SAFETY: a descriptor from `clone_tree` and a NUL-terminated path.
        unsafe {
            let r = libc::syscall(
                libc::SYS_move_mount,
                fd,
                c"".as_ptr(),
                libc::AT_FDCWD,
                path.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            );
            let err = io::Error::last_os_error();
            libc::close(fd);
            if r != 0 {
                return Err(err);
            }
        }
        Ok(())
    }

    /// Bind `path` onto itself, recursively; read-only when `readonly`.
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec.
    unsafe fn bind(path: &CStr, readonly: bool) -> io::Result<()> {
        // SAFETY: system calls on a NUL-terminated path and a stack `mount_attr`.
        unsafe {
            let fd = Self::clone_tree(path)?;
            if readonly {
                let attr = MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                let r = libc::syscall(
                    libc::SYS_mount_setattr,
                    fd,
                    c"".as_ptr(),
                    libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                );
                if r != 0 {
                    let err = io::Error::last_os_error();
                    libc::close(fd);
                    return Err(err);
                }
            }
            Self::attach(fd, path)
        }
    }
}

// SAFETY: only the system calls the module docs list, on C strings, byte buffers and
// fixed-size arrays prepared before the fork; errors are raw errnos.
unsafe impl PreExec for Namespaces {
    fn name(&self) -> &'static str {
        "namespaces"
    }

    fn pre_exec(&self) -> io::Result<()> {
        let mut flags = 0;
        // rustix's getpid is the raw system call: callable between fork and exec.
        if self.pid && rustix::process::getpid().as_raw_nonzero().get() != 1 {
            // Not born the init of a namespace of its own: refuse rather than run the
            // command in the host's pid namespace.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // Born in it with the pid namespace (which it must own), else made here.
        if self.userns.is_some() && !self.pid {
            flags |= libc::CLONE_NEWUSER;
        }
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        // The private /proc and the masks are mounts too: never in the host's namespace.
        let own_mounts = self.mount.is_some() || self.pid || self.mask.is_some();
        if own_mounts {
            flags |= libc::CLONE_NEWNS;
        }
        if flags == 0 && self.userns.is_none() {
            return Ok(());
        }
        // SAFETY: system calls on data prepared before the fork (module docs).
        unsafe {
            if flags != 0 {
                check(libc::unshare(flags))?;
            }
            // Born in the user namespace, the process had its maps written by core.
            if let (Some(maps), false) = (&self.userns, self.pid) {
                // `setgroups` must be denied before an unprivileged gid map is accepted.
                raw_write_file(c"/proc/self/setgroups", b"deny")?;
                raw_write_file(c"/proc/self/uid_map", &maps.uid_map)?;
                raw_write_file(c"/proc/self/gid_map", &maps.gid_map)?;
            }
            if let Some(plan) = &self.mount {
                check(libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                if plan.readonly_root {
                    // The writable trees, cloned before everything turns read-only: the
                    // clones keep their flags, and nothing locked has to be cleared.
                    let mut clones = [-1 as libc::c_int; MAX_WRITABLE];
                    if plan.writable.len() > MAX_WRITABLE {
                        return Err(io::Error::from_raw_os_error(libc::E2BIG));
                    }
                    match &plan.prepared {
                        Some(trees) if trees.len() == plan.writable.len() => {
                            // Closed by `attach` in this process only; the parent's
                            // descriptors stay its own.
                            for ((slot, tree), path) in
                                clones.iter_mut().zip(trees.iter()).zip(&plan.writable)
                            {
                                *slot = match tree {
                                    Some(t) => t.as_raw_fd(),
                                    None => Self::clone_tree(path)?,
                                };
                            }
                        }
                        Some(_) => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
                        None => {
                            for (slot, path) in clones.iter_mut().zip(&plan.writable) {
                                *slot = Self::clone_tree(path)?;
                            }
                        }
                    }
                    let attr = MountAttr {
                        attr_set: MOUNT_ATTR_RDONLY,
                        attr_clr: 0,
                        propagation: 0,
                        userns_fd: 0,
                    };
                    let r = libc::syscall(
                        libc::SYS_mount_setattr,
                        libc::AT_FDCWD,
                        c"/".as_ptr(),
                        AT_RECURSIVE,
                        &attr as *const MountAttr,
                        std::mem::size_of::<MountAttr>(),
                    );
                    if r != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    for (fd, path) in clones.iter().zip(&plan.writable) {
                        Self::attach(*fd, path)?;
                    }
                }
                for path in &plan.pinned {
                    Self::bind(path, false)?;
                }
                for path in &plan.readonly {
                    Self::bind(path, true)?;
                }
                // rustix's chdir passes the C string as it is (no copy, no allocation)
                // to the raw system call.
                rustix::process::chdir(self.cwd.as_c_str())?;
            }
            if self.net {
                Self::loopback_up()?;
            }
            if own_mounts && self.mount.is_none() {
                // Nothing mounted here may reach the host's mount namespace.
                check(libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
            }
            if self.pid {
                // Only a process inside the namespace can mount its `/proc` (proc shows the
                // pid namespace of whoever mounts it).
                check(libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
                    std::ptr::null(),
                ))?;
            }
            if let Some(mask) = self.mask {
                mask.apply()?;
            }
        }
        Ok(())
    }
}

/// What a root host's command must not read in `/proc` although uid 0 owns it: the files
/// and directories an unprivileged user cannot read (`slabinfo`, `kpageflags`,
/// `timer_list`, `/proc/sys/kernel/cad_pid`, ...: kernel-exploitation aids), and `keys`
/// and `key-users`, which show every key and user quota to uid 0. Each is covered by a
/// read-only bind of an empty mode-000 file (or directory) from a tiny tmpfs made in the
/// child: opening it fails with `EACCES` for a uid 0 without capabilities, and nothing
/// can unmount or change it (no `CAP_SYS_ADMIN`, a read-only mount). The lists are found
/// once, in the parent, by walking the host's `/proc` (see [`ProcMask::of_this_host`]).
#[derive(Debug, Default)]
pub(crate) struct ProcMask {
    pub files: Vec<CString>,
    pub dirs: Vec<CString>,
}

const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

impl ProcMask {
    /// `keys` and `key-users` alone, for a command that left uid 0 (see
    /// `sandbox_host::handover`): the kernel refuses it the root-only files by their modes,
    /// but these two are world-readable and list every key the process possesses, the
    /// host process's session keyring (root's) included.
    pub fn keys_only() -> &'static ProcMask {
        static MASK: std::sync::OnceLock<ProcMask> = std::sync::OnceLock::new();
        MASK.get_or_init(|| ProcMask {
            files: vec![c"/proc/keys".to_owned(), c"/proc/key-users".to_owned()],
            dirs: Vec::new(),
        })
    }

    /// This host's list, found once: the top of `/proc` and `/proc/sys`, `/proc/tty`,
    /// `/proc/driver` beneath it (the pid directories are the processes' own).
    pub fn of_this_host() -> &'static ProcMask {
        static MASK: std::sync::OnceLock<ProcMask> = std::sync::OnceLock::new();
        MASK.get_or_init(|| {
            use std::os::unix::fs::PermissionsExt;
            let mut mask = ProcMask::default();
            let mut push = |p: &std::path::Path, dir: bool| {
                let c = c_path(p);
                if dir {
                    mask.dirs.push(c);
                } else {
                    mask.files.push(c);
                }
            };
            for name in ["/proc/keys", "/proc/key-users"] {
                push(std::path::Path::new(name), false);
            }
            let mut todo = vec![std::path::PathBuf::from("/proc")];
            while let Some(dir) = todo.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in entries.flatten() {
                    let path = e.path();
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    if dir == std::path::Path::new("/proc")
                        && (name.bytes().all(|b| b.is_ascii_digit())
                            || matches!(&*name, "self" | "thread-self"))
                    {
                        continue;
                    }
                    let Ok(meta) = std::fs::symlink_metadata(&path) else {
                        continue;
                    };
                    let mode = meta.permissions().mode();
                    if meta.is_dir() {
                        if mode & 0o005 != 0o005 {
                            push(&path, true);
                        } else if dir == std::path::Path::new("/proc")
                            && matches!(&*name, "sys" | "tty" | "driver")
                            || dir.starts_with("/proc/sys")
                            || dir.starts_with("/proc/tty")
                        {
                            todo.push(path);
                        }
                    } else if meta.is_file() && mode & 0o004 == 0 && mode & 0o400 != 0 {
                        push(&path, false);
                    }
                }
            }
            mask
        })
    }

    /// Cover every listed path that exists in the current mount namespace's `/proc`.
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec. Needs `CAP_SYS_ADMIN`.
    unsafe fn apply(&self) -> io::Result<()> {
        if self.files.is_empty() && self.dirs.is_empty() {
            return Ok(());
        }
        // SAFETY: system calls on static C strings, prepared paths and stack values.
        unsafe {
            let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC);
            if fs < 0 {
                return Err(io::Error::last_os_error());
            }
            let fs = fs as libc::c_int;
            let configured = libc::syscall(
                libc::SYS_fsconfig,
                fs,
                FSCONFIG_SET_STRING,
                c"mode".as_ptr(),
                c"0".as_ptr(),
                0,
            ) == 0
                && libc::syscall(
                    libc::SYS_fsconfig,
                    fs,
                    FSCONFIG_SET_STRING,
                    c"size".as_ptr(),
                    c"4k".as_ptr(),
                    0,
                ) == 0
                && libc::syscall(
                    libc::SYS_fsconfig,
                    fs,
                    FSCONFIG_CMD_CREATE,
                    std::ptr::null::<libc::c_char>(),
                    std::ptr::null::<libc::c_char>(),
                    0,
                ) == 0;
            if !configured {
                let e = io::Error::last_os_error();
                libc::close(fs);
                return Err(e);
            }
            let mnt = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
            let e = io::Error::last_os_error();
            libc::close(fs);
            if mnt < 0 {
                return Err(e);
            }
            let mnt = mnt as libc::c_int;
            let r = self.cover(mnt);
            libc::close(mnt);
            r
        }
    }

    /// Bind the mode-000 file and directory of the tmpfs `mnt` over the lists.
    ///
    /// # Safety
    ///
    /// Only system calls; callable between fork and exec.
    unsafe fn cover(&self, mnt: libc::c_int) -> io::Result<()> {
        // SAFETY: system calls on a descriptor, prepared paths and stack values.
        unsafe {
            let f = libc::openat(
                mnt,
                c"masked".as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0,
            );
            if f < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(f);
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY
                    | MOUNT_ATTR_NOSUID
                    | MOUNT_ATTR_NODEV
                    | MOUNT_ATTR_NOEXEC,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            let lists: [(&[CString], &CStr, libc::c_uint); 2] = [
                (&self.files, c"masked", 0),
                (&self.dirs, c"", libc::AT_EMPTY_PATH as libc::c_uint),
            ];
            for (targets, source, flags) in lists {
                for target in targets {
                    let t = libc::syscall(
                        libc::SYS_open_tree,
                        mnt,
                        source.as_ptr(),
                        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | flags,
                    );
                    if t < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    let t = t as libc::c_int;
                    if libc::syscall(
                        libc::SYS_mount_setattr,
                        t,
                        c"".as_ptr(),
                        libc::AT_EMPTY_PATH as libc::c_uint,
                        &attr as *const MountAttr,
                        std::mem::size_of::<MountAttr>(),
                    ) != 0
                    {
                        let e = io::Error::last_os_error();
                        libc::close(t);
                        return Err(e);
                    }
                    if let Err(e) = Namespaces::attach(t, target) {
                        // Not in this /proc (another network namespace's interfaces, a
                        // kernel without it): nothing to cover.
                        if e.raw_os_error() != Some(libc::ENOENT) {
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// `RLIMIT_NPROC` set inside the command's own user namespace, where it counts the
/// sandbox's processes alone. Set on the host's side of the namespace (as core does where
/// there is none) it would also count every process the user has on the host, and through
/// the namespace's recorded limit keep doing so inside.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessLimit(pub libc::rlim_t);

// SAFETY: one `setrlimit` on a stack value (rustix's, the raw system call; its
// `RLIM_INFINITY` is `u64::MAX` either way).
unsafe impl PreExec for ProcessLimit {
    fn name(&self) -> &'static str {
        "process limit"
    }

    fn pre_exec(&self) -> io::Result<()> {
        let lim = rustix::process::Rlimit {
            current: Some(self.0),
            maximum: Some(self.0),
        };
        Ok(rustix::process::setrlimit(
            rustix::process::Resource::Nproc,
            lim,
        )?)
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// uid 0 gets no capability back on exec, and none of this can be undone: `SECBIT_NOROOT`
/// and the lock bits for it, for keep-caps and for ambient raising.
const SECUREBITS: libc::c_ulong = (1 << 0) // NOROOT
    | (1 << 1) // NOROOT_LOCKED
    | (1 << 5) // KEEP_CAPS_LOCKED (keep-caps stays off)
    | (1 << 6) // NO_CAP_AMBIENT_RAISE
    | (1 << 7); // NO_CAP_AMBIENT_RAISE_LOCKED

/// Every capability gone, in all five sets: the bounding set (so no exec can give any
/// back, even to uid 0), the ambient set, and the effective, permitted and inheritable
/// sets. Checked afterwards with `capget`.
#[derive(Debug, Clone)]
pub(crate) struct DropCapabilities {
    /// `/proc/sys/kernel/cap_last_cap`, read in the parent.
    pub last_cap: u32,
    /// Whether the process holds `CAP_SETPCAP` (root, or a new user namespace), which
    /// dropping the bounding set and setting securebits need. Without it the bounding set
    /// cannot matter: only uid 0 is handed the bounding set on exec.
    pub bounding: bool,
    /// A root host's command leaving uid 0 for this uid and gid (no supplementary
    /// groups), after the bounding set and the securebits are set (they need
    /// `CAP_SETPCAP`, which the change of uid takes away).
    pub switch_to: Option<u32>,
}

// SAFETY: `prctl`, `setgroups`, `setresgid`, `setresuid`, `capset` and `capget` on stack
// values; errors are raw errnos.
unsafe impl PreExec for DropCapabilities {
    fn name(&self) -> &'static str {
        "drop capabilities"
    }

    fn pre_exec(&self) -> io::Result<()> {
        // SAFETY: prctl/capset/capget on stack values (module docs).
        unsafe {
            if self.bounding {
                for cap in 0..=self.last_cap {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                        let e = io::Error::last_os_error();
                        // A number this kernel does not know is not in its bounding set.
                        if e.raw_os_error() != Some(libc::EINVAL) {
                            return Err(e);
                        }
                    }
                }
                check(libc::prctl(libc::PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0))?;
            }
            if let Some(id) = self.switch_to {
                sandbox_host::handover::become_id(id)?;
            }
            check(libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            let mut header = CapHeader {
                version: LINUX_CAPABILITY_VERSION_3,
                pid: 0,
            };
            let mut data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            let left = data
                .iter()
                .any(|d| d.effective | d.permitted | d.inheritable != 0);
            if left {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
        }
        Ok(())
    }
}

/// `no_new_privs`, then one landlock layer per ruleset prepared in the parent (two for a
/// root host, see [`crate::compile`]); the kernel intersects them.
#[derive(Debug)]
pub(crate) struct RestrictSelf {
    /// The rulesets; close-on-exec. Shared (a root host's first layer serves every run),
    /// and closed in the parent when the last holder is done.
    pub layers: Vec<Arc<OwnedFd>>,
    /// Grant reading the `/proc` mounted in the child (a pid namespace's own) in every
    /// layer. The parent's rule for `/proc` names the host's proc, which that mount hides
    /// (landlock judges a path by the inodes it walks, and skips the covered mount
    /// points), so the rule can only be added here, after the mount. A rule added to a
    /// shared first layer also lands in the other runs that use it until it is rebuilt
    /// (see [`crate::system::ETC_REFRESH`]); it names this run's proc alone, which no other
    /// run can reach (another pid and mount namespace, and landlock denies tracing into
    /// this domain), and their own layers do not grant it: the layers intersect.
    pub private_proc: bool,
}

/// `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
/// `LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR`: what the system list
/// grants `/proc` (see `src/system.rs`), and what every layer handles.
const PROC_ACCESS: u64 = (1 << 2) | (1 << 3);

// SAFETY: `prctl`, `open`, `landlock_add_rule`, `close` and `landlock_restrict_self` on
// descriptors opened before the fork and stack values; iterating a slice allocated before
// the fork allocates nothing.
unsafe impl PreExec for RestrictSelf {
    fn name(&self) -> &'static str {
        "landlock"
    }

    fn pre_exec(&self) -> io::Result<()> {
        // SAFETY: system calls on descriptors opened before the fork; iterating a slice
        // allocated before the fork allocates nothing.
        unsafe {
            // Needed by landlock without CAP_SYS_ADMIN; also stops setuid and file
            // capabilities from raising privilege on exec.
            // rustix's is the raw prctl on a constant: callable between fork and exec.
            rustix::thread::set_no_new_privs(true)?;
            if self.private_proc {
                let proc = libc::open(
                    c"/proc".as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                );
                if proc < 0 {
                    return Err(io::Error::last_os_error());
                }
                let attr = PathBeneathAttr {
                    allowed_access: PROC_ACCESS,
                    parent_fd: proc,
                };
                for layer in &self.layers {
                    if libc::syscall(
                        libc::SYS_landlock_add_rule,
                        layer.as_raw_fd(),
                        LANDLOCK_RULE_PATH_BENEATH,
                        &attr as *const PathBeneathAttr,
                        0 as libc::c_uint,
                    ) != 0
                    {
                        let e = io::Error::last_os_error();
                        libc::close(proc);
                        return Err(e);
                    }
                }
                libc::close(proc);
            }
            for layer in &self.layers {
                if libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    layer.as_raw_fd(),
                    0 as libc::c_uint,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// The workspace's rules again, on the copy-on-write layer mounted over it.
///
/// Landlock ties a rule to an inode and, walking up from a file, skips the directory a
/// mount covers: a rule on the workspace's own directory does not reach an overlay
/// mounted on it (made in the child by core, see `sandbox_core::changes`). So, after that
/// mount, every rule at or under the workspace is added once more to the run's own layer,
/// on the inode the path now shows, with the same rights. The run's layer is its own
/// (never the cached first layer of a root host), so adding to it here changes nothing
/// another run uses. Where the layer is a copy the paths show the same inodes as in the
/// parent and the rules are added twice, which changes nothing.
#[derive(Debug)]
pub(crate) struct RulesOnLayer {
    /// The run's own ruleset.
    pub ruleset: Arc<OwnedFd>,
    /// Each rule's path and rights (`landlock_path_beneath_attr.allowed_access`).
    pub rules: Vec<(CString, u64)>,
}

// SAFETY: `open`, `landlock_add_rule` and `close` on C strings and a stack attribute
// prepared before the fork; iterating a slice allocated before it allocates nothing;
// errors are raw errnos.
unsafe impl PreExec for RulesOnLayer {
    fn name(&self) -> &'static str {
        "landlock on the layer"
    }

    fn pre_exec(&self) -> io::Result<()> {
        for (path, access) in &self.rules {
            // SAFETY: open/landlock_add_rule/close on a C string and a stack attribute
            // prepared before the fork.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let attr = PathBeneathAttr {
                    allowed_access: *access,
                    parent_fd: fd,
                };
                let r = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    self.ruleset.as_raw_fd(),
                    LANDLOCK_RULE_PATH_BENEATH,
                    &attr as *const PathBeneathAttr,
                    0 as libc::c_uint,
                );
                let err = io::Error::last_os_error();
                libc::close(fd);
                if r != 0 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

/// `path` as a C string (a path from the kernel or `canonicalize` has no NUL).
pub(crate) fn c_path(path: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_maps_map_the_caller_to_itself() {
        let m = IdMaps::identity(1000, 100);
        assert_eq!(m.uid_map, b"1000 1000 1");
        assert_eq!(m.gid_map, b"100 100 1");
    }

    /// Runs `step` in a forked child and returns its exit code: 0 when the step and the
    /// `check` after it succeed.
    fn in_child(step: &dyn PreExec, check: fn() -> i32) -> i32 {
        // SAFETY: the child makes only system calls and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match step.pre_exec() {
                Ok(()) => check(),
                Err(e) => 100 + e.raw_os_error().unwrap_or(0).min(100),
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        libc::WEXITSTATUS(status)
    }

    fn own_userns() -> Option<IdMaps> {
        if unsafe { libc::geteuid() } == 0 {
            None
        } else {
            Some(IdMaps::identity(unsafe { libc::getuid() }, unsafe {
                libc::getgid()
            }))
        }
    }

    #[test]
    fn carveouts_are_read_only_mounts_in_the_child_and_nothing_changes_for_the_host() {
        use std::os::unix::ffi::OsStrExt;
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("pin/ro/sub")).unwrap();
        std::fs::write(ws.join("pin/ro/sub/file"), "x").unwrap();
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let outside_file = outside.path().canonicalize().unwrap().join("mine");
        std::fs::write(&outside_file, "x").unwrap();
        let step = Namespaces {
            userns: own_userns(),
            net: false,
            mount: Some(MountPlan {
                readonly_root: true,
                writable: vec![c(&ws)],
                pinned: vec![c(&ws.join("pin"))],
                readonly: vec![c(&ws.join("pin/ro"))],
                prepared: None,
            }),
            pid: false,
            mask: (unsafe { libc::geteuid() } == 0).then(ProcMask::of_this_host),
            // The working directory inside the carve-out: entered again, read-only.
            cwd: c(&ws.join("pin/ro/sub")),
        };
        let outside_c = c(&outside_file);
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        // SAFETY: the child makes only system calls and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = unsafe {
                let errno = || *libc::__errno_location();
                let mut bad = 0;
                if step.pre_exec().is_err() {
                    libc::_exit(100);
                }
                // Relative to the working directory, inside the carve-out: read-only.
                let fd = libc::open(c"new".as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
                if fd >= 0 || errno() != libc::EROFS {
                    bad |= 1;
                }
                // The carve-out cannot be renamed away (a mount point)...
                if libc::rename(c"..".as_ptr(), c"../../moved".as_ptr()) == 0 {
                    bad |= 2;
                }
                // ...nor the pinned directory holding it.
                if libc::rename(c"../..".as_ptr(), c"../../../moved".as_ptr()) == 0 {
                    bad |= 8;
                }
                // Next to the carve-out: writable.
                if libc::mkdir(c"../../beside".as_ptr(), 0o755) != 0 {
                    bad |= 4;
                }
                // Outside the writable trees: read-only, modes included.
                if libc::chmod(outside_c.as_ptr(), 0o666) == 0 || errno() != libc::EROFS {
                    bad |= 16;
                }
                // Devices can still be written.
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if null < 0 || libc::write(null, b"x".as_ptr().cast(), 1) != 1 {
                    bad |= 32;
                }
                // A root host: root-only /proc files are covered (only the mount keeps
                // this uid 0 out here, since it keeps its capabilities).
                if libc::geteuid() == 0 {
                    let st = libc::open(c"/proc/slabinfo".as_ptr(), libc::O_RDONLY);
                    let mut sb: libc::stat = std::mem::zeroed();
                    if st < 0 || libc::fstat(st, &mut sb) != 0 || sb.st_mode & 0o777 != 0 {
                        bad |= 64;
                    }
                }
                bad
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "failed checks bitmask");
        assert!(!ws.join("pin/ro/sub/new").exists());
        assert!(ws.join("pin/ro/sub/file").exists());
        assert!(!ws.join("moved").exists() && !ws.join("pin/moved").exists());
        assert!(ws.join("pin/beside").is_dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&outside_file)
            .unwrap()
            .permissions()
            .mode();
        assert_ne!(mode & 0o777, 0o666, "a mode outside the workspace changed");
        // The host's mount table did not change.
        assert_eq!(
            std::fs::read_to_string("/proc/self/mountinfo").unwrap(),
            mountinfo
        );
    }

    fn caps_all_zero() -> i32 {
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        let sets = data
            .iter()
            .any(|d| d.effective | d.permitted | d.inheritable != 0);
        let ambient = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
                21, // CAP_SYS_ADMIN
                0,
                0,
            )
        };
        let bounding = unsafe { libc::prctl(libc::PR_CAPBSET_READ, 21, 0, 0, 0) };
        i32::from(sets) | (i32::from(ambient == 1) << 1) | (i32::from(bounding == 1) << 2)
    }

    fn last_cap() -> u32 {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn dropping_capabilities_leaves_none_in_any_set_as_root() {
        if unsafe { libc::geteuid() } != 0 {
            // The unprivileged half of this test is the next one; this one needs root's
            // capabilities to have something to drop.
            assert_eq!(
                in_child(
                    &DropCapabilities {
                        last_cap: last_cap(),
                        bounding: false,
                        switch_to: None
                    },
                    caps_all_zero
                ) & 1,
                0
            );
            return;
        }
        let step = DropCapabilities {
            last_cap: last_cap(),
            bounding: true,
            switch_to: None,
        };
        assert_eq!(in_child(&step, caps_all_zero), 0);
    }

    #[test]
    fn dropping_capabilities_in_a_new_user_namespace_drops_that_namespaces_caps() {
        // A new user namespace gives a full set; the step takes all of it away.
        let netns = Namespaces {
            userns: Some(IdMaps::identity(unsafe { libc::getuid() }, unsafe {
                libc::getgid()
            })),
            net: true,
            mount: None,
            pid: false,
            mask: None,
            cwd: c"/".to_owned(),
        };
        struct Both(Namespaces, DropCapabilities);
        // SAFETY: runs two steps that are each async-signal-safe, in turn.
        unsafe impl PreExec for Both {
            fn name(&self) -> &'static str {
                "both"
            }

            fn pre_exec(&self) -> io::Result<()> {
                self.0.pre_exec()?;
                self.1.pre_exec()
            }
        }
        let step = Both(
            netns,
            DropCapabilities {
                last_cap: last_cap(),
                bounding: true,
                switch_to: None,
            },
        );
        assert_eq!(in_child(&step, caps_all_zero), 0);
    }

    #[test]
    fn a_private_netns_has_loopback_up_and_no_other_interface() {
        let step = Namespaces {
            userns: own_userns(),
            net: true,
            mount: None,
            pid: false,
            mask: None,
            cwd: c"/".to_owned(),
        };
        fn check() -> i32 {
            // Serve on 127.0.0.1 and connect to it: loopback works.
            unsafe {
                let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                let mut addr: libc::sockaddr_in = std::mem::zeroed();
                addr.sin_family = libc::AF_INET as u16;
                addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
                let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
                if libc::bind(s, (&addr as *const libc::sockaddr_in).cast(), len) != 0 {
                    return 1;
                }
                if libc::listen(s, 1) != 0 {
                    return 2;
                }
                let mut bound: libc::sockaddr_in = std::mem::zeroed();
                let mut blen = len;
                libc::getsockname(s, (&mut bound as *mut libc::sockaddr_in).cast(), &mut blen);
                let c = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                if libc::connect(c, (&bound as *const libc::sockaddr_in).cast(), len) != 0 {
                    return 3;
                }
                // Only `lo` exists: index 2 (the host's first real interface) does not.
                let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
                if !libc::if_indextoname(2, name.as_mut_ptr()).is_null() {
                    return 4;
                }
                0
            }
        }
        assert_eq!(in_child(&step, check), 0);
    }
}
