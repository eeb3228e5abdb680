//! Idmapped bind mounts: how a root host hands a root-owned tree to the unprivileged
//! command uid, live, without changing a single owner or ACL of the user's files.
//!
//! An idmapped mount (Linux 5.12+, `mount_setattr(MOUNT_ATTR_IDMAP)`) shows the files of
//! one on-disk owner as owned by another, on that mount only. A backend makes one of the
//! tree, where its owner's files (root's, usually) appear owned by the command's uid, at
//! a private staging path (under a root-only directory, so no host user can go through
//! it), and binds the staging path into the sandbox. The command then writes the tree as
//! its owner, its writes land on the host as they happen, and what it creates is stored
//! as the tree's owner on disk, exactly as if the owner had written it.
//!
//! That last point is also the danger: a file the command makes setuid is setuid *root*
//! on disk. A backend using this must refuse setuid and setgid bits (docker's and
//! gVisor's system-call filters do); the mount is `nosuid`, `nodev`.
//!
//! The mapping needs a user namespace to name it: a short-lived child process unshares
//! one, we write its maps, take a descriptor of it, and let the child exit.
//!
//! Shared by the docker and gvisor backends (moved here from docker).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One mapping of an idmapped mount: files of on-disk `(uid, gid)` (the first) shown as
/// owned by the second.
pub type Mapping = ((u32, u32), (u32, u32));

// From <linux/mount.h>; not all in the libc crate's version.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` (the first version, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// An idmapped view of a tree at a staging path; unmounted and removed on [`remove`] or
/// drop.
///
/// [`remove`]: IdmappedMount::remove
#[derive(Debug)]
pub struct IdmappedMount {
    path: PathBuf,
    mounted: bool,
}

impl IdmappedMount {
    /// Mount `source` at `staging` (a path that must not exist yet, under a root-only
    /// directory), with on-disk owner `from` shown as `to`. Blocking.
    pub fn create(
        source: &Path,
        staging: &Path,
        from: (u32, u32),
        to: (u32, u32),
    ) -> io::Result<Self> {
        Self::create_with(source, staging, &[(from, to)])
    }

    /// [`create`](Self::create) with several mappings, each on-disk `(uid, gid)` shown as
    /// another. A runtime whose file server creates files as root and then hands them to
    /// the command's uid (gVisor's gofer) needs root itself mapped, to an on-disk id that
    /// no account uses, or its creations fail with `EOVERFLOW`.
    pub fn create_with(source: &Path, staging: &Path, maps: &[Mapping]) -> io::Result<Self> {
        // The mount point must be of the source's kind: a directory, or a file for a
        // named writable file.
        if fs::metadata(source)?.is_dir() {
            fs::DirBuilder::new().mode(0o700).create(staging)?;
        } else {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(staging)?;
        }
        let mut m = Self {
            path: staging.to_path_buf(),
            mounted: false,
        };
        let userns = user_namespace(maps)?;
        let tree = idmapped_tree(
            source,
            userns.as_fd(),
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            false,
        )?;
        let dst = cstring(staging)?;
        let empty = CString::default();
        // SAFETY: move_mount of our detached tree onto a directory we just created.
        let r = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_FDCWD,
                dst.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if r != 0 {
            return Err(last("move_mount"));
        }
        m.mounted = true;
        Ok(m)
    }

    /// The staging path (the bind source for the runtime).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unmount (lazily: a container that has not let go yet keeps its own reference) and
    /// remove the staging directory.
    pub fn remove(&mut self) -> io::Result<()> {
        if self.mounted {
            detach(&self.path)?;
            self.mounted = false;
        }
        let removed = match fs::symlink_metadata(&self.path) {
            Ok(m) if m.is_dir() => fs::remove_dir(&self.path),
            Ok(_) => fs::remove_file(&self.path),
            Err(e) => Err(e),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for IdmappedMount {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::error!(
                "sandbox-core: removing the idmapped mount {}: {e}",
                self.path.display()
            );
        }
    }
}

/// A detached copy of the mount tree at `source` (`open_tree(OPEN_TREE_CLONE)`), idmapped
/// by the user namespace `userns` (`mount_setattr(MOUNT_ATTR_IDMAP)`) with `attrs` set
/// too; with `recursive`, every mount beneath it is copied and idmapped as well. Nothing is
/// attached: the caller attaches it with `move_mount` (in this mount namespace, or in a
/// child's new one), and closing the descriptor of a tree never attached unmounts it.
///
/// Fails where a filesystem of the tree cannot be idmapped (`EINVAL`: a FUSE or 9p mount,
/// tmpfs before Linux 6.3), or the caller may not clone mounts (not root).
pub fn idmapped_tree(
    source: &Path,
    userns: BorrowedFd<'_>,
    attrs: u64,
    recursive: bool,
) -> io::Result<OwnedFd> {
    let src = cstring(source)?;
    let empty = CString::default();
    let rec = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: open_tree with a valid NUL-terminated path; the result is a new
    // descriptor we own (or -1).
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            src.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | rec,
        )
    };
    if tree < 0 {
        return Err(last("open_tree"));
    }
    // SAFETY: `tree` is a fresh descriptor returned to us above.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr on our detached tree, with a pointer to a live, correctly
    // sized `struct mount_attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | rec,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(last("mount_setattr (idmap)"));
    }
    Ok(tree)
}

/// The user namespace of `maps` (see [`IdmappedMount::create_with`]), made on the first
/// call for these maps and kept for the life of the process: a backend that idmaps a tree
/// for every run pays the fork that makes one only once. The namespace holds no process;
/// the descriptor alone keeps it.
pub fn shared_user_namespace(maps: &[Mapping]) -> io::Result<Arc<OwnedFd>> {
    static MADE: Mutex<Vec<(Vec<Mapping>, Arc<OwnedFd>)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, ns)) = made.iter().find(|(m, _)| m == maps) {
        return Ok(ns.clone());
    }
    let ns = Arc::new(user_namespace(maps)?);
    made.push((maps.to_vec(), ns.clone()));
    Ok(ns)
}

/// The uid and gid a root host's command runs as where its backend hands it the
/// workspace by an idmapped mount instead of keeping uid 0: an id no account has, so the
/// kernel's own permission checks treat it as "others" on every file but those handed to
/// it (2^31 - 3: in the range systemd leaves unused, below the ids whose sign is
/// ambiguous; next to gVisor's spare id, `2^31 - 2`, and distinct from it).
pub const SPARE_COMMAND_ID: u32 = 0x7fff_fffd;

/// The unprivileged `nobody`, uid and gid.
pub const NOBODY: u32 = 65534;

/// Who a root host runs the command as, for a backend that hands a tree it does not own
/// to the command by an idmapped mount: the workspace's owner (its uid and gid, from
/// `workspace_owner`) when that is not root, so that what the command makes belongs to
/// that user, exactly as if they had run it; `nobody` for a root-owned workspace, or one
/// whose owner cannot be read. Group 0 is never handed over ([`not_group_root`]): a
/// workspace owned by `alice:root` runs as `alice:nogroup`.
pub fn root_host_identity(workspace_owner: Option<(u32, u32)>) -> (u32, u32) {
    match workspace_owner {
        Some((uid, gid)) if uid != 0 => (uid, not_group_root(gid)),
        _ => (NOBODY, NOBODY),
    }
}

/// `gid`, or `nobody`'s group in place of group 0 (a command in group root owns what root's
/// group may write).
pub fn not_group_root(gid: u32) -> u32 {
    if gid == 0 {
        NOBODY
    } else {
        gid
    }
}

/// Whether no local account or group has `id` (`/etc/passwd`, `/etc/group`): the
/// condition for running a command as it. A file that cannot be read answers no. Accounts
/// served by NSS modules (LDAP, sssd) are not consulted.
pub fn no_local_account_has(id: u32) -> bool {
    let field3 = |file: &str| -> Option<bool> {
        let text = fs::read_to_string(file).ok()?;
        Some(text.lines().any(|l| {
            l.split(':')
                .nth(2)
                .and_then(|v| v.trim().parse::<u32>().ok())
                == Some(id)
        }))
    };
    matches!(
        (field3("/etc/passwd"), field3("/etc/group")),
        (Some(false), Some(false))
    )
}

/// Lazily unmount `path`.
pub fn detach(path: &Path) -> io::Result<()> {
    let p = cstring(path)?;
    // SAFETY: umount2 with a valid path.
    if unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        // Not mounted (any more): nothing to do.
        if e.raw_os_error() != Some(libc::EINVAL) && e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
    }
    Ok(())
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn last(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A user namespace whose single mapping shows on-disk `from` as `to`: a descriptor of
/// it, kept alive by the descriptor alone.
fn user_namespace(maps: &[Mapping]) -> io::Result<OwnedFd> {
    let mut ready = [0i32; 2];
    let mut go = [0i32; 2];
    // SAFETY: pipe2 fills the two-element arrays we own.
    if unsafe { libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last("pipe2"));
    }
    // SAFETY: as above; the four descriptors are ours and wrapped at once.
    let (ready_r, ready_w) = unsafe {
        (
            OwnedFd::from_raw_fd(ready[0]),
            OwnedFd::from_raw_fd(ready[1]),
        )
    };
    if unsafe { libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last("pipe2"));
    }
    // SAFETY: as above.
    let (go_r, go_w) = unsafe { (OwnedFd::from_raw_fd(go[0]), OwnedFd::from_raw_fd(go[1])) };
    let (rr, rw) = (ready_r.as_raw_fd(), ready_w.as_raw_fd());
    let (gr, gw) = (go_r.as_raw_fd(), go_w.as_raw_fd());

    // SAFETY: fork in a multi-threaded process: the child makes only async-signal-safe
    // system calls (unshare, write, read, _exit) on descriptors prepared before the fork,
    // and never returns into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(last("fork"));
    }
    if pid == 0 {
        // The child: a fresh user namespace, then wait until the parent has its maps and
        // a descriptor of it. Its copies of the parent's ends are closed first, so that
        // the parent closing its end is an end of file here even if no byte arrives.
        unsafe {
            libc::close(rr);
            libc::close(gw);
            let ok: u8 = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                1
            } else {
                0
            };
            libc::write(rw, (&ok as *const u8).cast(), 1);
            let mut b = 0u8;
            libc::read(gr, (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(go_r);
    let result = (|| {
        let mut ok = [0u8; 1];
        // SAFETY: read into our one-byte buffer from our pipe.
        let n = unsafe { libc::read(rr, ok.as_mut_ptr().cast(), 1) };
        if n != 1 || ok[0] != 1 {
            return Err(io::Error::other(
                "could not create a user namespace for the idmapped mount",
            ));
        }
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let lines = |pick: fn(&(u32, u32)) -> u32| -> String {
            maps.iter()
                .map(|(from, to)| format!("{} {} 1\n", pick(from), pick(to)))
                .collect()
        };
        fs::write(proc.join("uid_map"), lines(|p| p.0))?;
        fs::write(proc.join("setgroups"), "deny\n")?;
        fs::write(proc.join("gid_map"), lines(|p| p.1))?;
        let ns = fs::File::open(proc.join("ns/user"))?;
        Ok(OwnedFd::from(ns))
    })();
    // Release and reap the child whatever happened.
    // SAFETY: a one-byte write from a live buffer to our pipe.
    unsafe { libc::write(gw, [1u8].as_ptr().cast(), 1) };
    drop(go_w);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    drop(ready_r);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_root_host_runs_as_the_owner_or_nobody_never_in_group_root() {
        assert_eq!(root_host_identity(Some((1000, 1001))), (1000, 1001));
        assert_eq!(root_host_identity(Some((1000, 0))), (1000, NOBODY));
        assert_eq!(root_host_identity(Some((0, 0))), (NOBODY, NOBODY));
        assert_eq!(root_host_identity(Some((0, 1000))), (NOBODY, NOBODY));
        assert_eq!(root_host_identity(None), (NOBODY, NOBODY));
    }

    #[test]
    fn root_owned_files_appear_owned_by_the_command_uid_and_its_writes_stay_roots() {
        let src = tempfile::tempdir().unwrap();
        let stage = tempfile::tempdir().unwrap();
        let at = stage.path().join("m");
        if !nix::unistd::geteuid().is_root() {
            // Mounts are root's: the attempt fails, and leaves no staging directory.
            assert!(IdmappedMount::create(src.path(), &at, (0, 0), (4242, 4243)).is_err());
            assert!(!at.exists());
            return;
        }
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("f"), "x").unwrap();
        let mut m = IdmappedMount::create(src.path(), &at, (0, 0), (4242, 4243)).unwrap();
        let meta = fs::metadata(m.path().join("f")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4242, 4243));
        // On the original path nothing changed.
        assert_eq!(fs::metadata(src.path().join("f")).unwrap().uid(), 0);
        m.remove().unwrap();
        assert!(!at.exists());
    }
}
