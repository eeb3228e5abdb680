//! The removal of what dead owners left (their cgroups, layers, bundles, temp dirs):
//! the pipeline's first stage. Above the process floor, since cgroups are among what it
//! removes; the objects themselves know their owner only by [`crate::owner`]'s tags.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::fs::fsx::{self, Kind};
use crate::owner::temp_owner;

/// What [`remove_dead_leftovers`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Removed {
    /// Cgroups (their processes killed first).
    pub cgroups: Vec<PathBuf>,
    /// Temp directories.
    pub dirs: Vec<PathBuf>,
    /// Mounts detached from inside those directories.
    pub mounts: Vec<PathBuf>,
}

/// Remove what makers that are gone left on this host: their run cgroups (killing any
/// process still in them) and their temp directories in the host's temp dir, after
/// detaching any mount inside them (a delete never goes through a mount: it would delete
/// the tree mounted there). Only what this process may remove; the rest is left, and a
/// live maker's objects are never touched.
pub fn remove_dead_leftovers() -> Removed {
    let mut removed = Removed {
        cgroups: crate::process::cgroup::remove_dead(crate::process::cgroup::CgroupSupport::get()),
        ..Removed::default()
    };
    // This user's runs directory, and the temp dir itself (where hosts before it made
    // theirs); the runs directory is not made here.
    let bases = [sandbox_core::runs_dir(), std::env::temp_dir()];
    let mut dead = Vec::new();
    for e in bases
        .iter()
        .filter_map(|b| std::fs::read_dir(b).ok())
        .flat_map(|d| d.flatten())
    {
        let name = e.file_name();
        let Some(owner) = name.to_str().and_then(temp_owner) else {
            continue;
        };
        if !owner.is_alive() && e.file_type().is_ok_and(|t| t.is_dir()) {
            dead.push(e.path());
        }
    }
    // Every mount first: one dir's mount may show another's tree (a bundle's staging mount
    // of a layer's copy).
    let mut blocked = Vec::new();
    for dir in &dead {
        for m in mounts_under(dir) {
            if nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).is_ok() {
                removed.mounts.push(m);
            } else {
                blocked.push(dir.clone());
            }
        }
    }
    for dir in dead {
        if blocked.contains(&dir) || !mounts_under(&dir).is_empty() {
            continue;
        }
        if remove_tree(&dir).is_ok() {
            removed.dirs.push(dir);
        }
    }
    removed
}

static LEFTOVERS_REMOVED: std::sync::Once = std::sync::Once::new();

/// Whether [`remove_dead_leftovers_once`] has run in this process: every run after the
/// first can skip the hop to a blocking thread that would do nothing.
pub fn dead_leftovers_removed() -> bool {
    LEFTOVERS_REMOVED.is_completed()
}

/// [`remove_dead_leftovers`], once per process (the first run of any backend calls it).
pub fn remove_dead_leftovers_once() {
    LEFTOVERS_REMOVED.call_once(|| {
        let r = remove_dead_leftovers();
        if r != Removed::default() {
            tracing::info!("removed what dead sandbox hosts left: {r:?}");
        }
    });
}

/// Mount points at or below `dir` in this mount namespace, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Delete `dir` and everything in it, never leaving its filesystem (a mount point that is
/// still there fails the delete instead of being walked into) and never following a link.
fn remove_tree(dir: &Path) -> io::Result<()> {
    let fd = fsx::open_root(dir)?;
    let dev = rustix::fs::fstat(&fd)?.st_dev;
    clear_same_dev(fd.as_fd(), dev)?;
    std::fs::remove_dir(dir)
}

fn clear_same_dev(dir: std::os::fd::BorrowedFd<'_>, dev: u64) -> io::Result<()> {
    for name in fsx::list(dir)? {
        let Some(st) = fsx::stat_at(dir, &name)? else {
            continue;
        };
        if fsx::kind(&st) == Kind::Dir {
            if st.st_dev != dev {
                return Err(io::Error::other("a mount is still inside"));
            }
            let _ = nix::sys::stat::fchmodat(
                dir,
                name.as_os_str(),
                nix::sys::stat::Mode::from_bits_truncate(0o700),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            );
            let sub = fsx::open_dir_at(dir, &name)?;
            clear_same_dev(sub.as_fd(), dev)?;
            nix::unistd::unlinkat(dir, name.as_os_str(), nix::unistd::UnlinkatFlags::RemoveDir)
                .map_err(fsx::nix_io)?;
        } else {
            nix::unistd::unlinkat(
                dir,
                name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(fsx::nix_io)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owner::temp_dir;

    #[test]
    fn a_dead_owners_dir_goes_and_a_live_ones_stays() {
        // A pid that cannot be running: above the kernel's maximum.
        let dead = std::env::temp_dir().join("sandbox-test@4194305-1-abc");
        std::fs::create_dir_all(dead.join("sub")).unwrap();
        std::fs::write(dead.join("sub/f"), b"x").unwrap();
        let live = temp_dir("test").unwrap();
        std::fs::write(live.path().join("f"), b"x").unwrap();
        let dead_run = live
            .path()
            .parent()
            .unwrap()
            .join("sandbox-test@4194305-1-def");
        std::fs::create_dir_all(&dead_run).unwrap();
        let r = remove_dead_leftovers();
        assert!(r.dirs.contains(&dead), "{r:?}");
        assert!(r.dirs.contains(&dead_run), "{r:?}");
        assert!(!dead.exists() && !dead_run.exists());
        assert!(live.path().join("f").exists());
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
