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
//! - `prctl` (bounding set, ambient set, securebits, `no_new_privs`), `capset`, `capget`;
//! - `landlock_restrict_self` (through `syscall`);
//! - `seccomp` (through `syscall`, in [`crate::filter`] and core's shared filter).
//!
//! Errors are built with [`io::Error::last_os_error`] or [`io::Error::from_raw_os_error`],
//! which store the number inline: no allocation. Nothing allocated is dropped in the child.
//!
//! # Order
//!
//! Core has already joined the cgroups, set the rlimits and marked every descriptor but
//! stdio close-on-exec. Then, in the order [`crate::LandlockBackend`] lists them:
//!
//! 1. [`Namespaces`] (loopback, carve-outs): needs `CAP_SYS_ADMIN` (root's, or the new
//!    user namespace's), so it comes before the capabilities go; and mounting must happen
//!    before landlock, which forbids it.
//! 2. [`DropCapabilities`] (root host, or a new user namespace): no capability survives.
//! 3. [`RestrictSelf`]: `no_new_privs`, then landlock; works without capabilities because
//!    `no_new_privs` is set.
//! 4. The filters, last: they deny `unshare` and `socket` calls the steps above make.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use sandbox_core::process::PreExec;

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `write(2)` the whole of `data` to `path`, then close it.
///
/// # Safety
///
/// Only system calls; callable between fork and exec.
unsafe fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(if n < 0 {
                err
            } else {
                io::Error::from_raw_os_error(libc::EIO)
            });
        }
    }
    Ok(())
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
    /// The working directory, entered again after the mounts.
    pub cwd: CString,
}

impl Namespaces {
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
    fn pre_exec(&self) -> io::Result<()> {
        let mut flags = 0;
        if self.userns.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        if self.mount.is_some() {
            flags |= libc::CLONE_NEWNS;
        }
        if flags == 0 {
            return Ok(());
        }
        // SAFETY: system calls on data prepared before the fork (module docs).
        unsafe {
            check(libc::unshare(flags))?;
            if let Some(maps) = &self.userns {
                // `setgroups` must be denied before an unprivileged gid map is accepted.
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &maps.uid_map)?;
                write_file(c"/proc/self/gid_map", &maps.gid_map)?;
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
                    for (slot, path) in clones.iter_mut().zip(&plan.writable) {
                        *slot = Self::clone_tree(path)?;
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
                check(libc::chdir(self.cwd.as_ptr()))?;
            }
            if self.net {
                Self::loopback_up()?;
            }
        }
        Ok(())
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
}

// SAFETY: `prctl`, `capset` and `capget` on stack values; errors are raw errnos.
unsafe impl PreExec for DropCapabilities {
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
}

// SAFETY: `prctl` and `landlock_restrict_self` on descriptors opened before the fork;
// iterating a slice allocated before the fork allocates nothing.
unsafe impl PreExec for RestrictSelf {
    fn pre_exec(&self) -> io::Result<()> {
        // SAFETY: system calls on descriptors opened before the fork; iterating a slice
        // allocated before the fork allocates nothing.
        unsafe {
            // Needed by landlock without CAP_SYS_ADMIN; also stops setuid and file
            // capabilities from raising privilege on exec.
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
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
            }),
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
                        bounding: false
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
            cwd: c"/".to_owned(),
        };
        struct Both(Namespaces, DropCapabilities);
        // SAFETY: runs two steps that are each async-signal-safe, in turn.
        unsafe impl PreExec for Both {
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
