//! What host root must not see: the entries of the system directories and of the
//! caller's named paths that only root (or the root group) can read.
//!
//! bwrap maps the sandbox to the caller's uid, so under a root host the command's files
//! are owned by kuid 0 and it passes every owner check on root's files even with every
//! capability dropped: a wholesale `/etc` bind would hand it `/etc/shadow`, SSH host keys,
//! TLS private keys. The sandbox gets the system directories as any user on the host sees
//! them instead: every entry that is not world-readable is hidden (a directory behind an
//! empty read-only tmpfs, a file behind `/dev/null`, which `nodev` makes unopenable).
//! Directories the world may traverse but not list (`0711`) are walked into, since the
//! world can reach what is inside by name.
//!
//! `/etc` and the named paths are walked for every run (`/etc` is a thousand entries, a
//! few milliseconds; secrets such as host keys appear there at run time; the cost of a
//! named path is its size). The workspace is not: it is the command's own, as it is for
//! any caller. The larger, package-managed trees (`/usr`, `/opt`,
//! the unmerged `/bin`, `/lib*`, `/sbin`) are walked once per process. `/nix/store` is not
//! walked: the store is world-readable by construction. Not walked at all when the host is
//! not root: an ordinary user cannot read root-only files to begin with.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One entry to hide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hidden {
    /// The host path (the same path inside).
    pub path: PathBuf,
    /// A directory (else a file of any other kind).
    pub dir: bool,
}

/// Whether `mode` lets anyone read this entry: `r` for a file, `r` and `x` for a directory.
fn world_readable(mode: u32, dir: bool) -> bool {
    if dir {
        mode & 0o005 == 0o005
    } else {
        mode & 0o004 == 0o004
    }
}

/// Append to `out` every entry under `dir` (not `dir` itself) that the world cannot read,
/// not descending into `skip`. Symlinks are not followed (their target is judged where it
/// lives). A directory that cannot be listed is hidden whole: what cannot be checked is
/// not shown.
fn walk(dir: &Path, skip: &[&Path], out: &mut Vec<Hidden>) {
    let Ok(entries) = fs::read_dir(dir) else {
        out.push(Hidden {
            path: dir.to_path_buf(),
            dir: true,
        });
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if skip.iter().any(|s| path == *s) {
            continue;
        }
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let ft = meta.file_type();
        if ft.is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        let is_dir = ft.is_dir();
        if is_dir {
            if world_readable(mode, true) {
                walk(&path, skip, out);
            } else if mode & 0o001 != 0 {
                // Traversable by anyone, not listable: what is inside is reachable by name.
                walk(&path, skip, out);
            } else {
                out.push(Hidden { path, dir: true });
            }
        } else if !world_readable(mode, false)
            || ((ft.is_socket() || ft.is_fifo()) && mode & 0o002 == 0)
        {
            out.push(Hidden { path, dir: false });
        }
    }
}

/// Root-only entries under `roots` (each a directory; others are skipped), not looking
/// inside `skip` (the workspace: the command's own, and possibly large).
pub(crate) fn root_only(roots: &[&Path], skip: &[&Path]) -> Vec<Hidden> {
    let mut out = Vec::new();
    for root in roots {
        if skip.iter().any(|s| root.starts_with(s)) {
            continue;
        }
        if fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
            walk(root, skip, &mut out);
        }
    }
    out
}

/// Root-only entries of the package-managed trees (`roots`), found once per process.
pub(crate) fn root_only_cached(roots: &[PathBuf]) -> &'static [Hidden] {
    static CACHE: OnceLock<Vec<Hidden>> = OnceLock::new();
    CACHE.get_or_init(|| {
        let roots: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        root_only(&roots, &[])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path, m: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn only_what_the_world_cannot_read_is_hidden() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::write(r.join("public"), "x").unwrap();
        fs::write(r.join("secret"), "x").unwrap();
        mode(&r.join("secret"), 0o640);
        fs::create_dir(r.join("private")).unwrap();
        fs::write(r.join("private/inner"), "x").unwrap();
        mode(&r.join("private"), 0o700);
        fs::create_dir(r.join("traverse")).unwrap();
        fs::write(r.join("traverse/ok"), "x").unwrap();
        fs::write(r.join("traverse/key"), "x").unwrap();
        mode(&r.join("traverse/key"), 0o600);
        mode(&r.join("traverse"), 0o711);
        std::os::unix::fs::symlink("/etc/shadow", r.join("link")).unwrap();

        let mut got = root_only(&[r], &[]);
        got.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            got,
            vec![
                Hidden {
                    path: r.join("private"),
                    dir: true
                },
                Hidden {
                    path: r.join("secret"),
                    dir: false
                },
                Hidden {
                    path: r.join("traverse/key"),
                    dir: false
                },
            ]
        );
        // Nothing is looked for inside a skipped directory.
        let got = root_only(&[r], &[&r.join("traverse")]);
        assert!(!got.iter().any(|h| h.path.starts_with(r.join("traverse"))));
        assert!(root_only(&[&r.join("traverse")], &[r]).is_empty());
        mode(&r.join("private"), 0o755);
        mode(&r.join("traverse"), 0o755);
    }

    #[test]
    fn modes_are_judged_per_kind() {
        assert!(world_readable(0o644, false));
        assert!(!world_readable(0o640, false));
        assert!(world_readable(0o755, true));
        assert!(!world_readable(0o754, true));
        assert!(!world_readable(0o711, true));
    }
}
