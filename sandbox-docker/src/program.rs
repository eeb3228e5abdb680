//! Finding `argv[0]` inside the created container before it starts.
//!
//! The engine's init (`tini`) is pid 1 and runs the command; when the program does not
//! exist, tini prints a line and exits 127, which cannot be told from a program that
//! exits 127 itself. So the program is looked up first, the way `execvp` will look it up:
//! through the archive API, which sees the image and the mounts of the created
//! container. A program that is not there is a "not found" error (127 in the command-line
//! tool) and nothing runs.

use std::path::{Path, PathBuf};

use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use crate::error::DockerError;

/// What a path is, as the archive API reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// A regular file with this mode, owner and group.
    File { mode: u32, uid: u32, gid: u32 },
    /// A symbolic link to this target.
    Link(PathBuf),
    /// A directory or anything else: not executable.
    Other,
}

/// Stat `path` in container `id`: the first header of its archive, or `None` if absent.
async fn stat(docker: &Docker, id: &str, path: &Path) -> Result<Option<Node>, DockerError> {
    let Some(p) = path.to_str() else {
        return Ok(None);
    };
    let opts = DownloadFromContainerOptionsBuilder::new().path(p).build();
    let mut stream = docker.download_from_container(id, Some(opts));
    let mut head = Vec::new();
    // Only the first 512-byte header is needed; the stream is dropped after it, which
    // closes the request instead of transferring a large binary.
    while head.len() < 512 {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => {
                let e = DockerError::engine(format!("look up {}", path.display()), e);
                return if e.is_not_found() { Ok(None) } else { Err(e) };
            }
            None => break,
        }
    }
    if head.len() < 512 {
        return Ok(None);
    }
    let h = tar::Header::from_byte_slice(&head[..512]);
    Ok(Some(match h.entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous => Node::File {
            mode: h.mode().unwrap_or(0),
            uid: h.uid().unwrap_or(0) as u32,
            gid: h.gid().unwrap_or(0) as u32,
        },
        tar::EntryType::Symlink => match h.link_name() {
            Ok(Some(l)) => Node::Link(l.into_owned()),
            _ => Node::Other,
        },
        _ => Node::Other,
    }))
}

/// Whether `uid`/`gid` may execute a file with this mode and owner (no capabilities, so
/// no override).
pub(crate) fn may_execute(mode: u32, owner: u32, group: u32, uid: u32, gid: u32) -> bool {
    let bit = if owner == uid {
        0o100
    } else if group == gid {
        0o010
    } else {
        0o001
    };
    mode & bit != 0
}

/// The candidates `execvp` tries for `argv0`, in order.
pub(crate) fn candidates(argv0: &str, path_var: &str, cwd: &Path) -> Vec<PathBuf> {
    if argv0.contains('/') {
        return vec![cwd.join(argv0)];
    }
    path_var
        .split(':')
        .map(|d| {
            if d.is_empty() {
                cwd.join(argv0)
            } else {
                cwd.join(d).join(argv0)
            }
        })
        .collect()
}

/// Resolve a link found at `at` to the path it names.
fn follow(at: &Path, target: &Path) -> PathBuf {
    let joined = match at.parent() {
        Some(dir) if target.is_relative() => dir.join(target),
        _ => target.to_path_buf(),
    };
    // Lexical normalisation of `.` and `..`; the archive API resolves the directories of
    // a path itself, this only keeps the path readable and bounded.
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Check that `argv0` will be found and can be executed by `uid`/`gid` in container `id`,
/// looking where `execvp` would (`path_var`, relative paths against `cwd`). Returns every
/// path it looked at, in order, the program's last.
pub(crate) async fn check(
    docker: &Docker,
    id: &str,
    image: &str,
    argv0: &str,
    path_var: &str,
    cwd: &Path,
    (uid, gid): (u32, u32),
) -> Result<Vec<PathBuf>, DockerError> {
    let mut denied: Option<(PathBuf, String)> = None;
    let mut looked = Vec::new();
    for cand in candidates(argv0, path_var, cwd) {
        let mut at = cand.clone();
        looked.push(at.clone());
        let mut node = stat(docker, id, &at).await?;
        // Follow a bounded chain of links, as the kernel would (40 is its limit).
        for _ in 0..40 {
            match node {
                Some(Node::Link(t)) => {
                    at = follow(&at, &t);
                    looked.push(at.clone());
                    node = stat(docker, id, &at).await?;
                }
                _ => break,
            }
        }
        match node {
            None => continue,
            Some(Node::File {
                mode,
                uid: o,
                gid: g,
            }) if may_execute(mode, o, g, uid, gid) => return Ok(looked),
            Some(Node::File { mode, .. }) => {
                denied.get_or_insert((
                    cand,
                    format!("mode {:o} has no execute bit for it", mode & 0o7777),
                ));
            }
            Some(Node::Link(_)) => {
                denied.get_or_insert((cand, "too many levels of symbolic links".into()));
            }
            Some(Node::Other) => {
                denied.get_or_insert((cand, "not a regular file".into()));
            }
        }
    }
    match denied {
        Some((path, why)) => Err(DockerError::NotExecutable {
            program: path.display().to_string(),
            image: image.to_string(),
            uid,
            why,
        }),
        None => Err(DockerError::ProgramNotFound {
            program: argv0.to_string(),
            image: image.to_string(),
            searched: if argv0.contains('/') {
                format!("looked at {}", cwd.join(argv0).display())
            } else {
                format!("searched PATH={path_var}")
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        let cwd = Path::new("/ws");
        assert_eq!(
            candidates("ls", "/usr/bin:/bin", cwd),
            vec![PathBuf::from("/usr/bin/ls"), PathBuf::from("/bin/ls")]
        );
        assert_eq!(
            candidates("./run.sh", "/bin", cwd),
            vec![PathBuf::from("/ws/./run.sh")]
        );
        assert_eq!(
            candidates("/abs/p", "/bin", cwd),
            vec![PathBuf::from("/abs/p")]
        );
        // An empty PATH entry is the current directory.
        assert_eq!(
            candidates("x", ":/bin", cwd),
            vec![PathBuf::from("/ws/x"), PathBuf::from("/bin/x")]
        );
    }

    #[test]
    fn execute_permission_is_judged_for_the_command_uid() {
        assert!(may_execute(0o755, 0, 0, 1000, 1000));
        assert!(!may_execute(0o750, 0, 0, 1000, 1000));
        assert!(may_execute(0o750, 0, 1000, 1000, 1000));
        assert!(may_execute(0o700, 1000, 0, 1000, 1000));
        assert!(!may_execute(0o644, 1000, 1000, 1000, 1000));
    }

    #[test]
    fn links_resolve_against_their_directory() {
        assert_eq!(
            follow(Path::new("/bin/sh"), Path::new("busybox")),
            PathBuf::from("/bin/busybox")
        );
        assert_eq!(
            follow(Path::new("/usr/bin/x"), Path::new("../lib/y")),
            PathBuf::from("/usr/lib/y")
        );
        assert_eq!(
            follow(Path::new("/a/b"), Path::new("/c/d")),
            PathBuf::from("/c/d")
        );
    }
}
