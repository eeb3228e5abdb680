//! Files in and out of a run: the throwaway copy for snapshot mode, and captured files.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// Copy `src` into a new temporary directory: regular files, directories and symlinks (as
/// links, never followed), with their permission bits. Returns the temp dir, removed on drop.
pub fn snapshot_copy(src: &Path) -> Result<tempfile::TempDir, SandboxError> {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-snapshot-")
        .tempdir()
        .map_err(|e| SandboxError::io("creating the snapshot directory", e))?;
    copy_tree(src, dir.path())
        .map_err(|e| SandboxError::io(format!("copying {} for the snapshot", src.display()), e))?;
    // The copy's root gets the original's mode (tempdir makes it 0700).
    if let Ok(meta) = fs::metadata(src) {
        let _ = fs::set_permissions(dir.path(), meta.permissions());
    }
    Ok(dir)
}

fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if ty.is_dir() {
            fs::create_dir(&to)?;
            copy_tree(&entry.path(), &to)?;
            fs::set_permissions(&to, entry.metadata()?.permissions())?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &to)?;
        } else if ty.is_file() {
            fs::copy(entry.path(), &to)?;
        }
        // Sockets, fifos and devices are not copied: a snapshot is of source trees.
    }
    Ok(())
}

/// Read the files named in `names` (relative to `workspace`) into a map, each up to `cap`
/// bytes. A file that is missing, not a regular file, or that resolves outside the
/// workspace (a symlink planted by the command to exfiltrate a host file) is left out.
pub fn capture_files(
    workspace: &Path,
    names: &[PathBuf],
    cap: usize,
) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for name in names {
        let path = workspace.join(name);
        let Ok(canon) = path.canonicalize() else {
            continue;
        };
        if !canon.starts_with(workspace) {
            continue;
        }
        let Ok(f) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&canon)
        else {
            continue;
        };
        if !f.metadata().map(|m| m.is_file()).unwrap_or(false) {
            continue;
        }
        let mut buf = Vec::new();
        if f.take(cap as u64).read_to_end(&mut buf).is_ok() {
            out.insert(name.clone(), buf);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_copies_files_dirs_and_links() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir(src.path().join("d")).unwrap();
        fs::write(src.path().join("d/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("l")).unwrap();
        let copy = snapshot_copy(src.path()).unwrap();
        assert_eq!(fs::read(copy.path().join("d/f")).unwrap(), b"x");
        assert_eq!(
            fs::read_link(copy.path().join("l")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn capture_refuses_links_out_of_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        fs::write(ws_path.join("ok"), b"fine").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ws_path.join("leak")).unwrap();
        let got = capture_files(
            &ws_path,
            &["ok".into(), "leak".into(), "missing".into()],
            1024,
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[Path::new("ok")], b"fine");
    }
}
