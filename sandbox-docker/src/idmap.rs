//! Where docker stages its idmapped mounts (the mounts themselves are
//! [`sandbox_host::idmap`]'s): `/run/sandbox-docker/RUN/N`, mode 0700, so no host user can
//! go through them, and an `owner` file per run for [`crate::cleanup_leftovers`].

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(crate) use sandbox_host::idmap::{detach, IdmappedMount};

/// Where the staging mounts live: root's, mode 0700.
pub(crate) const STAGING_ROOT: &str = "/run/sandbox-docker";

/// Where handover `i` of run `run_id` is staged (the engine's bind source).
pub(crate) fn staging_path(run_id: &str, i: usize) -> PathBuf {
    Path::new(STAGING_ROOT).join(run_id).join(i.to_string())
}

/// The run's staging directory, made root-only; `owner` is written into it so that
/// [`crate::cleanup_leftovers`] can tell whose it is.
pub(crate) fn run_dir(run_id: &str, owner: &str) -> io::Result<PathBuf> {
    let root = Path::new(STAGING_ROOT);
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(root)?;
    // Whatever made it, it must not let another user through.
    fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
    let dir = root.join(run_id);
    fs::DirBuilder::new().mode(0o700).create(&dir)?;
    fs::write(dir.join("owner"), owner)?;
    Ok(dir)
}

/// Remove a run's staging directory: unmount what is still mounted in it, then delete.
pub(crate) fn remove_run_dir(dir: &Path) -> io::Result<()> {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name() != "owner" {
                detach(&p)?;
            }
        }
    }
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
