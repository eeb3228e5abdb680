//! A root host's command as an unprivileged id, its trees handed to it by idmapped mounts:
//! the kernel's own permission checks then keep root-only files closed, and no survey of
//! the system directories is needed. Shared by the process backends (landlock attaches
//! the trees in its own namespace step; bwrap's launcher runs as the id in a mount
//! namespace holding them, see [`Enter`]).
//!
//! # Why
//!
//! A command that keeps uid 0 (capabilities dropped) still owns every root-owned file, so
//! file modes let it read `/etc/shadow`; the other way to keep such files closed is to
//! hide or deny each one, found by a walk of `/usr`, `/etc` and the named paths (~100k
//! entries, ~0.4 s of system time per process), which cannot be cached (a `chmod 600`
//! changes no directory's mtime, so a stale walk would widen what is readable).
//!
//! Here instead the command runs as [`SPARE_COMMAND_ID`] (uid and gid; no account has it),
//! with no supplementary groups. The workspace and each writable path are mounted in the
//! command's mount namespace through an idmapped copy where on-disk root (uid and gid 0)
//! shows as that id: the command owns exactly what uid 0 owned there before, writes it
//! as its owner, and what it creates is stored as root's on disk, as before. Everywhere
//! else it is "others" to every file, as uid 65534 is: a root-only file is refused by the
//! kernel, whenever it became root-only.
//!
//! # What it needs, else the survey
//!
//! Checked per run, in the parent, before anything is forked ([`hand_over`]); where one
//! fails, the backend keeps its proven path (uid 0 without capabilities, root-only files
//! found by the walk and closed), which confines as much, only slower. Never a run with
//! neither: the outcome's notes say which path a run took and why.
//!
//! - with a copy-on-write layer over the workspace: an overlay on Linux 5.19 or later
//!   (idmapped layers), the workspace itself a handed-over tree (no writable path holding
//!   it, where the host's tree attached would cover the overlay); a copy is a tree like
//!   any other;
//! - no local account or group with the id;
//! - every tree to hand over idmappable, all mounts beneath it included (ext4, xfs, btrfs,
//!   overlayfs, tmpfs from Linux 6.3; not FUSE, 9p or ramfs);
//! - the workspace, the writable and read-only paths, the working directory and the
//!   program reachable by "others" (every directory on the way searchable, the program
//!   executable): uid 0 reached `/root/project` as the owner of `/root`, an unprivileged id
//!   cannot, and such a run keeps uid 0.
//!
//! # Named read-only paths
//!
//! Not idmapped: a root-only file in one stays unreadable, as it was for uid 0 (the walk
//! covered them too and left only their world-readable parts) and as it is for any
//! unprivileged user. Idmapping them would hand root's files to the command.
//!
//! # Under an overlay
//!
//! overlayfs cannot itself be idmapped, but takes idmapped layers: the workspace and the
//! layer's private directory (upper and work) are idmapped here, and core's overlay step
//! attaches both in the command's mount namespace, mounts the overlay over the workspace
//! on them, and detaches the layer's directory again, so the command sees the overlay
//! alone. What the command writes is stored as root's in the upper directory, as it was
//! when the command kept uid 0. The backend binds the workspace as it finds it at its
//! path (the overlay) instead of attaching the host's tree over it ([`Handover::trees`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::idmap::{self, SPARE_COMMAND_ID};
use crate::sys::PreExec;
use sandbox_core::{Changes, LayerMechanism, Plan};

/// What a run hands to the command's id: detached idmapped copies of its writable trees,
/// to attach over their own paths in the command's mount namespace.
#[derive(Debug, Clone)]
pub struct Handover {
    /// The command's uid and gid.
    pub id: u32,
    /// The trees' paths.
    pub paths: Vec<PathBuf>,
    /// One detached tree per entry of `paths`, in its order; `None` for the workspace under
    /// an overlay, which is bound as the command's namespace shows it (the overlay, on
    /// [`Handover::layer`]).
    pub trees: Arc<Vec<Option<OwnedFd>>>,
    /// Under an overlay: its layers, idmapped as the trees are.
    pub layer: Option<LayerTrees>,
}

/// An overlay's layers idmapped for the command's id: the workspace (its lower layer) and
/// the layer's private directory (holding upper and work, which must share a mount).
#[derive(Debug, Clone)]
pub struct LayerTrees {
    pub lower: Arc<OwnedFd>,
    pub dir: Arc<OwnedFd>,
}

/// The mode, owner and group of a path, for [`may`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Whether the command's id gets permission `bit` (`0o1` search/execute, `0o4` read) on a
/// path of `owner`: as its owner (on-disk root, inside a handed-over tree), as a member of
/// its group (likewise), or as "others".
pub fn may(owner: Owner, handed_over: bool, bit: u32) -> bool {
    if handed_over && owner.uid == 0 {
        owner.mode & (bit << 6) != 0
    } else if handed_over && owner.gid == 0 {
        owner.mode & (bit << 3) != 0
    } else {
        owner.mode & bit != 0
    }
}

/// The first path of `paths` that the command's id cannot reach (a directory on the way
/// not searchable by it), or, for `program`, cannot execute; `stat` gives a path's
/// [`Owner`] (following symlinks), `trees` are the handed-over trees.
pub fn unreachable<'a>(
    paths: &'a [&'a Path],
    program: &'a Path,
    trees: &[PathBuf],
    stat: &dyn Fn(&Path) -> Option<Owner>,
) -> Option<&'a Path> {
    let inside = |p: &Path| trees.iter().any(|t| p.starts_with(t));
    let searchable = |p: &Path| {
        p.ancestors()
            .skip(1)
            .all(|a| stat(a).is_some_and(|o| may(o, inside(a), 0o1)))
    };
    if let Some(p) = paths.iter().find(|p| !searchable(p)) {
        return Some(p);
    }
    let runs = searchable(program) && stat(program).is_some_and(|o| may(o, inside(program), 0o1));
    (!runs).then_some(program)
}

fn host_owner(p: &Path) -> Option<Owner> {
    std::fs::metadata(p).ok().map(|m| Owner {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
    })
}

/// The trees a run writes: the workspace and the writable paths, without those inside
/// another.
pub fn writable_trees(plan: &Plan) -> Vec<PathBuf> {
    let mut all = vec![plan.workspace.clone()];
    all.extend(plan.writable_paths.iter().cloned());
    let mut out: Vec<PathBuf> = Vec::new();
    for p in &all {
        if all.iter().any(|o| o != p && p.starts_with(o)) || out.contains(p) {
            continue;
        }
        out.push(p.clone());
    }
    out
}

/// The handover of `trees` (the run's writable trees, outermost) for `plan`, or why this
/// run keeps uid 0 (see the module docs).
pub fn hand_over(plan: &Plan, trees: &[PathBuf]) -> Result<Handover, String> {
    if trees.is_empty() || trees.iter().any(|t| t == Path::new("/")) {
        return Err("the whole filesystem is writable".into());
    }
    let overlay = match (&plan.changes, &plan.layer) {
        (Changes::Direct, _) => None,
        (_, Some((LayerMechanism::Overlay, dir))) => {
            overlay_can_be_handed_over(&plan.workspace, trees)?;
            Some(dir)
        }
        // A copy: the plan's workspace is the copy, a tree like any other.
        (_, Some(_)) => None,
        (_, None) => {
            return Err("a copy-on-write layer is mounted over the workspace".into());
        }
    };
    let id = SPARE_COMMAND_ID;
    if !idmap::no_local_account_has(id) {
        return Err(format!(
            "an account or group in /etc/passwd or /etc/group has id {id}"
        ));
    }
    let mut paths: Vec<&Path> = trees.iter().map(PathBuf::as_path).collect();
    paths.extend(plan.read_only_paths.iter().map(PathBuf::as_path));
    paths.push(&plan.cwd);
    if let Some(p) = unreachable(&paths, &plan.program, trees, &host_owner) {
        return Err(format!(
            "{} is out of an unprivileged user's reach (a directory on the way, or the \
             program, is not open to others)",
            p.display()
        ));
    }
    let userns = idmap::shared_user_namespace(&[((0, 0), (id, id))])
        .map_err(|e| format!("a user namespace for the idmapping: {e}"))?;
    let idmapped = |t: &Path| {
        idmap::idmapped_tree(t, userns.as_fd(), 0, true)
            .map_err(|e| format!("{} cannot be idmapped: {e}", t.display()))
    };
    let mut fds = Vec::with_capacity(trees.len());
    let mut layer = None;
    for t in trees {
        match overlay {
            Some(dir) if *t == plan.workspace => {
                // overlayfs makes its work directory and copies up as its mounter (uid 0),
                // which must have an id on the upper layer's mount: on-disk `id` (nothing
                // of the host's has it) shows as 0 there, and on-disk root as `id`.
                let both = idmap::shared_user_namespace(&[((0, 0), (id, id)), ((id, id), (0, 0))])
                    .map_err(|e| format!("a user namespace for the idmapping: {e}"))?;
                let dir = idmap::idmapped_tree(dir, both.as_fd(), 0, true)
                    .map_err(|e| format!("{} cannot be idmapped: {e}", dir.display()))?;
                layer = Some(LayerTrees {
                    lower: Arc::new(idmapped(t)?),
                    dir: Arc::new(dir),
                });
                fds.push(None);
            }
            _ => fds.push(Some(idmapped(t)?)),
        }
    }
    Ok(Handover {
        id,
        paths: trees.to_vec(),
        trees: Arc::new(fds),
        layer,
    })
}

/// Why an overlay over `workspace` cannot be mounted on idmapped layers for a run whose
/// writable trees are `trees`, if it cannot.
fn overlay_can_be_handed_over(workspace: &Path, trees: &[PathBuf]) -> Result<(), String> {
    // overlayfs takes idmapped layers from Linux 5.19.
    if !crate::kernel::release_at_least(5, 19) {
        return Err(
            "a copy-on-write layer is mounted over the workspace, and overlayfs \
                    takes idmapped layers only from Linux 5.19"
                .into(),
        );
    }
    // A writable tree holding the workspace would be attached from the host's namespace,
    // over the overlay: the command would write the real workspace.
    if let Some(t) = trees
        .iter()
        .find(|t| workspace.starts_with(t) && *t != workspace)
    {
        return Err(format!(
            "the writable path {} holds the workspace under its copy-on-write layer",
            t.display()
        ));
    }
    if !trees.iter().any(|t| t == workspace) {
        return Err("the workspace under its layer is not one of the run's trees".into());
    }
    Ok(())
}

/// Leave uid 0 for `id` (and gid; no supplementary groups).
///
/// # Safety
///
/// Only system calls; callable between fork and exec.
pub unsafe fn become_id(id: u32) -> io::Result<()> {
    // SAFETY: the caller's contract: a single-threaded child between fork and exec.
    unsafe { crate::sys::become_ids(id, id) }
}

const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// The step, between fork and exec, that runs a launcher (bwrap) as the handed-over id: a
/// private mount namespace of its own (`unshare(CLONE_NEWNS)`, every mount made private,
/// so nothing reaches the host's), the handed-over trees attached over their paths, the
/// working directory entered again (so it is the one in the new mounts), then the id.
/// The launcher then binds the trees by path, as for any unprivileged caller.
#[derive(Debug)]
pub struct Enter {
    id: u32,
    trees: Arc<Vec<Option<OwnedFd>>>,
    paths: Vec<CString>,
    cwd: CString,
}

impl Enter {
    /// The step for `handover`, entering `cwd` again.
    pub fn new(handover: &Handover, cwd: &Path) -> io::Result<Self> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
        };
        Ok(Self {
            id: handover.id,
            trees: handover.trees.clone(),
            paths: handover
                .paths
                .iter()
                .map(|p| c(p))
                .collect::<io::Result<_>>()?,
            cwd: c(cwd)?,
        })
    }
}

// SAFETY: `unshare`, `mount`, `move_mount`, `chdir`, `setgroups`, `setresgid`,
// `setresuid` on C strings and descriptors prepared before the fork; iterating slices
// allocated before it allocates nothing; errors are raw errnos.
unsafe impl PreExec for Enter {
    fn name(&self) -> &'static str {
        "enter the hand-over"
    }

    fn pre_exec(&self) -> io::Result<()> {
        let check = |r: libc::c_long| {
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        if self.trees.len() != self.paths.len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: system calls on data prepared before the fork.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS).into())?;
            check(
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            for (tree, path) in self.trees.iter().zip(&self.paths) {
                // The workspace under an overlay: the overlay already at its path is bound.
                let Some(tree) = tree else { continue };
                // The descriptor stays open here (close-on-exec); the parent's is its own.
                check(libc::syscall(
                    libc::SYS_move_mount,
                    tree.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ))?;
            }
            check(libc::chdir(self.cwd.as_ptr()).into())?;
            become_id(self.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn o(mode: u32, uid: u32, gid: u32) -> Owner {
        Owner { mode, uid, gid }
    }

    #[test]
    fn root_owned_bits_count_as_the_commands_own_only_inside_a_handed_over_tree() {
        let root_only = o(0o700, 0, 0);
        assert!(may(root_only, true, 0o1));
        assert!(!may(root_only, false, 0o1));
        let group = o(0o750, 1000, 0);
        assert!(may(group, true, 0o1));
        assert!(!may(group, false, 0o1));
        // Another user's file: "others" everywhere.
        assert!(!may(o(0o770, 1000, 1000), true, 0o1));
        assert!(may(o(0o755, 1000, 1000), false, 0o1));
    }

    #[test]
    fn a_layered_workspace_is_handed_over_only_as_a_tree_of_its_own() {
        let ws = Path::new("/tmp/ws");
        if crate::kernel::release_at_least(5, 19) {
            assert_eq!(overlay_can_be_handed_over(ws, &[ws.into()]), Ok(()));
            assert_eq!(
                overlay_can_be_handed_over(ws, &[ws.into(), "/var/out".into()]),
                Ok(())
            );
        }
        // A writable path holding it would be attached over the overlay.
        let held = overlay_can_be_handed_over(ws, &["/tmp".into()]);
        assert!(held.is_err(), "{held:?}");
        let not_a_tree = overlay_can_be_handed_over(ws, &["/var/out".into()]);
        assert!(not_a_tree.is_err(), "{not_a_tree:?}");
    }

    #[test]
    fn a_workspace_below_a_root_only_directory_is_out_of_reach() {
        let fs: HashMap<&str, Owner> = [
            ("/", o(0o755, 0, 0)),
            ("/root", o(0o700, 0, 0)),
            ("/root/ws", o(0o755, 0, 0)),
            ("/tmp", o(0o1777, 0, 0)),
            ("/tmp/ws", o(0o700, 0, 0)),
            ("/tmp/ws/sub", o(0o700, 0, 0)),
            ("/usr", o(0o755, 0, 0)),
            ("/usr/bin", o(0o755, 0, 0)),
            ("/usr/bin/true", o(0o755, 0, 0)),
            ("/usr/sbin", o(0o755, 0, 0)),
            ("/usr/sbin/secret-tool", o(0o700, 0, 0)),
        ]
        .into_iter()
        .collect();
        let stat = |p: &Path| fs.get(p.to_str().unwrap()).copied();
        let p = Path::new;
        let trees = vec![PathBuf::from("/tmp/ws")];
        // A root-only (0700) workspace is fine: it is handed over, and so is what is in it.
        assert_eq!(
            unreachable(
                &[p("/tmp/ws"), p("/tmp/ws/sub")],
                p("/usr/bin/true"),
                &trees,
                &stat
            ),
            None
        );
        let trees = vec![PathBuf::from("/root/ws")];
        assert_eq!(
            unreachable(&[p("/root/ws")], p("/usr/bin/true"), &trees, &stat),
            Some(p("/root/ws"))
        );
        let trees = vec![PathBuf::from("/tmp/ws")];
        assert_eq!(
            unreachable(&[p("/tmp/ws")], p("/usr/sbin/secret-tool"), &trees, &stat),
            Some(p("/usr/sbin/secret-tool"))
        );
        // A path that cannot be looked at: out of reach (fail towards uid 0 and the survey).
        assert_eq!(
            unreachable(&[p("/gone/ws")], p("/usr/bin/true"), &trees, &stat),
            Some(p("/gone/ws"))
        );
    }
}
