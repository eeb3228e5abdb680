//! Making the layer: overlayfs in the command's own mount namespace, else a reflink copy,
//! else a plain copy.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::LayerMechanism;
use crate::fs::fsx::{self, Kind};
use crate::sys::{raw_write_file, PreExec};
use sandbox_core::SandboxError;

/// The layer of one run: a private temp dir with the overlay's `upper` and `work`, or the
/// copy; removed on drop.
#[derive(Debug)]
pub(crate) struct Layer {
    dir: PathBuf,
    mechanism: LayerMechanism,
    workspace: PathBuf,
    /// Where the command's view lives on the host: `upper` or the copy.
    source: PathBuf,
    /// The `ctime` of a file made when the layer was: real files changed since are
    /// conflicts.
    start: (i64, i64),
}

impl Layer {
    /// A layer over `workspace` with the best mechanism up to `best`.
    pub(crate) fn prepare(
        workspace: &Path,
        best: LayerMechanism,
        budget: &crate::fs::tree::Budget,
    ) -> Result<Self, SandboxError> {
        // An apply killed half way over this workspace is undone before the command sees
        // it (best effort: the apply's own recovery says why if it cannot).
        let _ = super::journal::recover(workspace);
        let tmp = crate::owner::temp_dir("layer")?;
        let dir = tmp.keep();
        let mut layer = Self {
            dir: dir.clone(),
            mechanism: best,
            workspace: workspace.to_path_buf(),
            source: dir.join("upper"),
            start: (0, 0),
        };
        // From here the directory is `layer`'s, removed if anything below fails.
        let stamp = dir.join("start");
        std::fs::write(&stamp, b"")
            .and_then(|()| std::fs::symlink_metadata(&stamp))
            .map(|m| layer.start = (m.ctime(), m.ctime_nsec()))
            .map_err(|e| SandboxError::io("stamping the layer's start", e))?;
        if best == LayerMechanism::Overlay && overlay_works(workspace) {
            for d in ["upper", "work"] {
                std::fs::create_dir(dir.join(d))
                    .map_err(|e| SandboxError::io("creating the overlay's directories", e))?;
            }
            return Ok(layer);
        }
        if workspace.starts_with(&dir) || dir.starts_with(workspace) {
            return Err(SandboxError::invalid(
                "workspace",
                format!(
                    "{} holds the temp directory {}: a copy of it would copy itself; set \
                     TMPDIR elsewhere",
                    workspace.display(),
                    dir.display()
                ),
            ));
        }
        let copy = dir.join("copy");
        std::fs::create_dir(&copy).map_err(|e| SandboxError::io("creating the copy", e))?;
        // The race-free walk every host-side copy uses (no symlink followed, no fifo
        // opened, holes kept, under the run's deadline and the copy cap). Its data moves
        // with copy_file_range, which shares extents where the filesystem can; the layer
        // claims only a copy.
        crate::fs::files::copy_tree(workspace, &copy, budget).map_err(|e| {
            SandboxError::io(format!("copying {} for the layer", workspace.display()), e)
        })?;
        if let Ok(m) = std::fs::metadata(workspace) {
            let _ = std::fs::set_permissions(&copy, m.permissions());
        }
        layer.mechanism = LayerMechanism::Copy;
        layer.source = copy;
        Ok(layer)
    }

    pub(crate) fn mechanism(&self) -> LayerMechanism {
        self.mechanism
    }

    pub(crate) fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The upper directory or the copy.
    pub(crate) fn source(&self) -> &Path {
        &self.source
    }

    pub(crate) fn start(&self) -> (i64, i64) {
        self.start
    }

    /// The step that mounts the overlay in the child (overlay only).
    pub(crate) fn mount_step(&self, cwd: &Path) -> Result<Option<OverlayMount>, SandboxError> {
        if self.mechanism != LayerMechanism::Overlay {
            return Ok(None);
        }
        OverlayMount::new(
            &self.workspace,
            &self.workspace,
            &self.source,
            &self.dir.join("work"),
            cwd,
        )
        .map(Some)
        .map_err(|e| SandboxError::io("preparing the overlay mount", e))
    }

    /// The file `rel` as the command left it: from the upper directory, else (not hidden by
    /// a whiteout or an opaque directory) from the workspace; from the copy otherwise.
    /// Never follows a symlink; `None` if it is not a regular file.
    pub(crate) fn read_merged(&self, rel: &Path, cap: usize) -> Option<Vec<u8>> {
        if self.mechanism != LayerMechanism::Overlay {
            return read_under(&self.source, rel, cap);
        }
        let mut upper = Some(fsx::open_root(&self.source).ok()?);
        let mut lower = Some(fsx::open_root(&self.workspace).ok()?);
        let comps = normal_components(rel)?;
        let (last, dirs) = comps.split_last()?;
        for d in dirs {
            if let Some(u) = &upper {
                match fsx::stat_at(u.as_fd(), d).ok()?.map(|s| fsx::kind(&s)) {
                    Some(Kind::Dir) => {
                        let sub = fsx::open_dir_at(u.as_fd(), d).ok()?;
                        if is_opaque(sub.as_fd()) {
                            lower = None;
                        }
                        upper = Some(sub);
                    }
                    Some(_) => return None,
                    None => upper = None,
                }
            }
            lower = lower.and_then(|l| fsx::open_dir_at(l.as_fd(), d).ok());
            if upper.is_none() && lower.is_none() {
                return None;
            }
        }
        if let Some(u) = &upper {
            if let Some(st) = fsx::stat_at(u.as_fd(), last).ok()? {
                return match fsx::kind(&st) {
                    Kind::File => read_file(u.as_fd(), last, cap),
                    _ => None,
                };
            }
        }
        read_file(lower?.as_fd(), last, cap)
    }

    /// A regular file of the layer's source tree.
    pub(crate) fn read_source(&self, rel: &Path, cap: usize) -> Option<Vec<u8>> {
        read_under(&self.source, rel, cap)
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        if let Ok(fd) = fsx::open_root(&self.dir) {
            let _ = fsx::clear_dir(fd.as_fd());
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn normal_components(rel: &Path) -> Option<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Some(n),
            Component::CurDir => None,
            _ => Some(OsStr::new("..")),
        })
        .filter(|c| c.is_some())
        .collect::<Option<Vec<_>>>()
        .filter(|v| v.iter().all(|c| *c != ".."))
}

pub(crate) fn is_opaque(dir: BorrowedFd<'_>) -> bool {
    fsx::xattr(dir, &[c"trusted.overlay.opaque", c"user.overlay.opaque"])
        .is_some_and(|v| v.first() == Some(&b'y'))
}

fn read_file(dir: BorrowedFd<'_>, name: &OsStr, cap: usize) -> Option<Vec<u8>> {
    let f = fsx::open_file_at(dir, name).ok()?;
    let mut buf = Vec::new();
    f.take(cap as u64).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// The regular file `rel` under the directory `root`, read without following any symlink.
pub(crate) fn read_under(root: &Path, rel: &Path, cap: usize) -> Option<Vec<u8>> {
    let root = fsx::open_root(root).ok()?;
    normal_components(rel)?;
    let parent = fsx::open_parent(root.as_fd(), rel).ok()??;
    read_file(parent.as_fd(), fsx::file_name(rel), cap)
}

/// Mounts the overlay between fork and exec: a new mount namespace (and, when the host is
/// not root, a user namespace mapping the caller's own ids to themselves, in which
/// overlayfs may be mounted since Linux 5.11), every mount made private so nothing reaches
/// the host's namespace, the overlay on `target`, and the working directory entered again
/// so that it is the one in the overlay. The namespace, and so the mount, ends with the
/// last process of the command: nothing to unmount on the host.
///
/// Only system calls on data prepared in the parent (see `process/child.rs`).
#[derive(Debug)]
pub(crate) struct OverlayMount {
    userns: Option<(Vec<u8>, Vec<u8>)>,
    target: CString,
    data: CString,
    cwd: CString,
    idmapped: Option<IdmappedLayers>,
}

/// The overlay's layers idmapped for a root host's command that runs as an unprivileged
/// id (see `crate::handover`): attached over the workspace (the lower layer) and over the
/// layer's directory (upper and work) before the overlay is mounted on them; the layer's
/// directory is detached again right after, so the command never sees the upper directory
/// under its own id.
#[derive(Debug)]
struct IdmappedLayers {
    lower: Arc<OwnedFd>,
    dir: Arc<OwnedFd>,
    dir_path: CString,
}

/// Characters that cannot be given in overlayfs' mount options (separators, escapes).
fn option_safe(p: &Path) -> bool {
    !p.as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | b'=' | b'\n'))
}

impl OverlayMount {
    fn new(target: &Path, lower: &Path, upper: &Path, work: &Path, cwd: &Path) -> io::Result<Self> {
        if ![target, lower, upper, work].iter().all(|p| option_safe(p)) {
            return Err(io::Error::other(
                "a path has a character overlayfs options cannot carry (`,` `:` `\\` `=`)",
            ));
        }
        let root = nix::unistd::geteuid().is_root();
        let userns = (!root).then(|| {
            let (u, g) = (nix::unistd::getuid(), nix::unistd::getgid());
            (
                format!("{u} {u} 1").into_bytes(),
                format!("{g} {g} 1").into_bytes(),
            )
        });
        // No redirects and no metacopy, so the upper directory alone is the change set;
        // `volatile`: no sync of the host's filesystem when the namespace (and the mount)
        // goes away, which would make every run pay for everyone's dirty pages (the layer
        // is read from the page cache right after; nothing needs it to survive a crash);
        // `userxattr` for a mount in a user namespace (trusted.* cannot be set there).
        let mut data = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off,index=off,xino=off,volatile",
            lower.display(),
            upper.display(),
            work.display()
        );
        if !root {
            data.push_str(",userxattr");
        }
        Ok(Self {
            userns,
            target: fsx::cstring(target.as_os_str())?,
            data: fsx::cstring(OsStr::new(&data))?,
            cwd: fsx::cstring(cwd.as_os_str())?,
            idmapped: None,
        })
    }
}

impl OverlayMount {
    /// For a child born in a user namespace of its own whose maps core wrote
    /// ([`crate::process::BornIn::user`]): mount there, making no nested one.
    pub(crate) fn in_the_born_user_namespace(&mut self) {
        self.userns = None;
    }

    /// Mount on `lower` (the workspace) and `dir` (the layer's directory, `layer_dir`),
    /// idmapped trees made by the host (`crate::handover`), instead of the paths as they
    /// are. Only for a root host, which mounts the overlay in no user namespace.
    pub(crate) fn on_idmapped_layers(
        &mut self,
        lower: Arc<OwnedFd>,
        dir: Arc<OwnedFd>,
        layer_dir: &Path,
    ) -> io::Result<()> {
        if self.userns.is_some() {
            return Err(io::Error::other(
                "idmapped layers are for a root host's overlay, made in no user namespace",
            ));
        }
        self.idmapped = Some(IdmappedLayers {
            lower,
            dir,
            dir_path: fsx::cstring(layer_dir.as_os_str())?,
        });
        Ok(())
    }
}

const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// Attach the detached tree `fd` at `path` (the descriptor stays open: close-on-exec).
///
/// # Safety
///
/// Only a system call; callable between fork and exec.
unsafe fn attach(fd: BorrowedFd<'_>, path: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: a descriptor and a NUL-terminated path prepared before the fork.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

// SAFETY: `unshare`, `open`/`write`/`close` of the id maps, `mount`, `move_mount`,
// `umount2` and `chdir` on C strings, descriptors and byte buffers prepared before the
// fork; errors are raw errnos.
unsafe impl PreExec for OverlayMount {
    fn name(&self) -> &'static str {
        "overlay mount"
    }

    fn pre_exec(&self) -> io::Result<()> {
        let mut flags = libc::CLONE_NEWNS;
        if self.userns.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        // SAFETY: system calls on C strings and buffers prepared before the fork.
        unsafe {
            check(libc::unshare(flags))?;
            if let Some((uid_map, gid_map)) = &self.userns {
                // `setgroups` must be denied before an unprivileged gid map is accepted.
                raw_write_file(c"/proc/self/setgroups", b"deny")?;
                raw_write_file(c"/proc/self/uid_map", uid_map)?;
                raw_write_file(c"/proc/self/gid_map", gid_map)?;
            }
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            if let Some(l) = &self.idmapped {
                attach(l.dir.as_fd(), &l.dir_path)?;
                attach(l.lower.as_fd(), &self.target)?;
            }
            check(libc::mount(
                c"overlay".as_ptr(),
                self.target.as_ptr(),
                c"overlay".as_ptr(),
                0,
                self.data.as_ptr().cast(),
            ))?;
            if let Some(l) = &self.idmapped {
                // The overlay holds private clones of its layers' mounts; the idmapped
                // directory (upper and work, the command's as their owner) goes away.
                check(libc::umount2(l.dir_path.as_ptr(), libc::MNT_DETACH))?;
            }
            check(libc::chdir(self.cwd.as_ptr()))?;
        }
        Ok(())
    }
}

/// Whether an overlay can be mounted over `workspace` here (as this user), asked once per
/// filesystem of a workspace: a forked child makes the same mount on a scratch directory
/// and exits.
fn overlay_works(workspace: &Path) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    let Ok(dev) = std::fs::metadata(workspace).map(|m| m.dev()) else {
        return false;
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&dev).copied()) {
        return v;
    }
    let v = probe(workspace).is_ok();
    if let Ok(mut c) = cache.lock() {
        c.insert(dev, v);
    }
    v
}

/// Whether overlayfs can be mounted in a command's namespace on this host, as this user
/// (over a scratch lower directory); computed once, by a forked child. Not on any run's
/// path (a run that asks for a layer probes its own workspace's filesystem): for
/// `sandbox doctor`, which says what a layer will be here.
pub fn overlay_supported() -> bool {
    static ONCE: OnceLock<bool> = OnceLock::new();
    *ONCE.get_or_init(|| {
        let Ok(scratch) = tempfile::Builder::new()
            .prefix("sandbox-overlay-probe-")
            .tempdir()
        else {
            return false;
        };
        let lower = scratch.path().join("lower");
        std::fs::create_dir(&lower).is_ok() && probe(&lower).is_ok()
    })
}

fn probe(lower: &Path) -> io::Result<()> {
    let scratch = tempfile::Builder::new()
        .prefix("sandbox-overlay-probe-")
        .tempdir()?;
    for d in ["upper", "work", "mnt"] {
        std::fs::create_dir(scratch.path().join(d))?;
    }
    let mnt = scratch.path().join("mnt");
    let step = OverlayMount::new(
        &mnt,
        lower,
        &scratch.path().join("upper"),
        &scratch.path().join("work"),
        &mnt,
    )?;
    // SAFETY: the child makes only system calls on data prepared above, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = if step.pre_exec().is_ok() { 0 } else { 1 };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if let Ok(fd) = fsx::open_root(scratch.path()) {
        let _ = fsx::clear_dir(fd.as_fd());
    }
    if ok {
        Ok(())
    } else {
        Err(io::Error::other("overlay mount refused"))
    }
}
