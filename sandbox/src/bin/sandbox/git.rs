//! The repositories in the workspace, and the parts of them the command may not write.
//!
//! Git runs code named by a repository's own files: the hooks in `hooks/`, and the
//! programs `config` names (`core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, filter
//! and diff drivers), also from `config.worktree`, and `info/` says which filters apply.
//! A command that writes one of them gets its code run by the user's next `git commit`,
//! outside any sandbox. So in a repository that exists before the run, these stay
//! read-only: in the workspace's own `.git`, in every submodule's repository under
//! `.git/modules`, in each worktree's `config.worktree`, and in every nested repository's
//! `.git` (a `.git` file that points to a directory inside the workspace included). The
//! rest of `.git` (objects, refs, the index) stays writable, so `git commit` works inside.
//!
//! A repository without `hooks/` (made with an empty template) has its whole `.git`
//! read-only: creating the directory would plant a hook. A `config.worktree` that does not
//! exist is read only when `config` turns `extensions.worktreeConfig` on: where it does,
//! the whole `.git` is read-only too; where it does not, `config` is read-only, so the
//! command cannot turn it on. An `info/` that does not exist is left: it selects drivers
//! only `config` can define.
//!
//! `--writable-git` turns this off. What is protected is what exists when the run starts;
//! a repository the command creates is its own.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The entries of a repository's directory the command may not write.
const PROTECTED: [&str; 4] = ["hooks", "config", "config.worktree", "info"];

/// Every path of the repositories in `workspace` that stays read-only, absolute, existing
/// and inside the workspace (a link out of it is not followed: outside the workspace the
/// command cannot write anyway, unless granted).
pub fn carveouts(workspace: &Path) -> Vec<PathBuf> {
    let all = protected(workspace);
    // A repository carved out whole: say why, since `git commit` fails inside it.
    for p in all.iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| !PROTECTED.iter().any(|x| n == *x))
    }) {
        eprintln!(
            "sandbox: the repository {} is read-only as a whole: it has no `hooks` directory \
             (or no `config.worktree` where its config turns one on), which the command could \
             create to run code; remedy: `mkdir {0}/hooks`, or --writable-git",
            // A name an earlier command may have chosen.
            sandbox::escape(p.as_os_str().as_bytes())
        );
    }
    all
}

/// [`carveouts`], without a word.
fn protected(workspace: &Path) -> Vec<PathBuf> {
    let Ok(ws) = workspace.canonicalize() else {
        // The library refuses a workspace that does not resolve, naming it.
        return Vec::new();
    };
    let mut gitdirs = BTreeSet::new();
    let mut stack = vec![ws.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ty) = e.file_type() else { continue };
            let path = e.path();
            if e.file_name() == ".git" {
                if ty.is_dir() {
                    gitdirs.insert(path);
                } else if ty.is_file() {
                    if let Some(d) = linked_gitdir(&path, &ws) {
                        gitdirs.insert(d);
                    }
                }
            } else if ty.is_dir() {
                stack.push(path);
            }
        }
    }
    let mut out = BTreeSet::new();
    for d in gitdirs {
        protect(&d, &ws, &mut out);
    }
    // A path under another carve-out is covered by it.
    let all: Vec<PathBuf> = out.into_iter().collect();
    all.iter()
        .filter(|p| !all.iter().any(|o| o != *p && p.starts_with(o)))
        .cloned()
        .collect()
}

/// The repository a `.git` file (`gitdir: PATH`) points to, where it is a directory inside
/// the workspace.
fn linked_gitdir(file: &Path, ws: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let target = file.parent()?.join(target).canonicalize().ok()?;
    (target.starts_with(ws) && target.is_dir()).then_some(target)
}

/// Add `gitdir`'s protected entries (or `gitdir` itself), then those of its submodules'
/// repositories and worktrees.
fn protect(gitdir: &Path, ws: &Path, out: &mut BTreeSet<PathBuf>) {
    let Some(gitdir) = inside(gitdir, ws) else {
        return;
    };
    // Without `hooks/`, creating it would plant a hook; without `config.worktree` where
    // `config` turns it on, creating it would set git's options.
    let worktree_config = std::fs::read_to_string(gitdir.join("config"))
        .is_ok_and(|c| c.to_ascii_lowercase().contains("worktreeconfig"));
    if std::fs::symlink_metadata(gitdir.join("hooks")).is_err()
        || (worktree_config && std::fs::symlink_metadata(gitdir.join("config.worktree")).is_err())
    {
        out.insert(gitdir);
        return;
    }
    for name in PROTECTED {
        if let Some(p) = inside(&gitdir.join(name), ws) {
            out.insert(p);
        }
    }
    // Worktrees: `worktrees/NAME/config.worktree` (their hooks and config are the main
    // repository's).
    if let Ok(entries) = std::fs::read_dir(gitdir.join("worktrees")) {
        for e in entries.flatten() {
            if let Some(p) = inside(&e.path().join("config.worktree"), ws) {
                out.insert(p);
            }
        }
    }
    // Submodules: `modules/NAME`, where a name may hold slashes, and a submodule's own
    // submodules under its `modules/`.
    let mut stack = vec![gitdir.join("modules")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if p.join("HEAD").exists() || p.join("config").exists() {
                protect(&p, ws, out);
            } else {
                stack.push(p);
            }
        }
    }
}

/// `p` resolved, when it exists and lies inside the workspace.
fn inside(p: &Path, ws: &Path) -> Option<PathBuf> {
    let c = p.canonicalize().ok()?;
    c.starts_with(ws).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for p in paths {
            let full = d.path().join(p);
            if let Some(dir) = p.strip_suffix('/') {
                std::fs::create_dir_all(d.path().join(dir)).unwrap();
            } else {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(full, "x").unwrap();
            }
        }
        d
    }

    fn rel(d: &Path, v: Vec<PathBuf>) -> Vec<String> {
        let root = d.canonicalize().unwrap();
        v.into_iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn a_repository_s_hooks_config_and_info_and_its_submodules_and_nested_ones() {
        let d = tree(&[
            ".git/hooks/",
            ".git/config",
            ".git/info/exclude",
            ".git/objects/",
            ".git/modules/a/b/HEAD",
            ".git/modules/a/b/hooks/",
            ".git/modules/a/b/config",
            ".git/worktrees/w/config.worktree",
            "src/x.rs",
            "vendor/lib/.git/hooks/",
            "vendor/lib/.git/config",
        ]);
        let got = rel(d.path(), protected(d.path()));
        assert_eq!(
            got,
            [
                ".git/config",
                ".git/hooks",
                ".git/info",
                ".git/modules/a/b/config",
                ".git/modules/a/b/hooks",
                ".git/worktrees/w/config.worktree",
                "vendor/lib/.git/config",
                "vendor/lib/.git/hooks",
            ]
        );
    }

    #[test]
    fn without_hooks_the_whole_repository_is_read_only() {
        let d = tree(&[".git/config", ".git/objects/"]);
        assert_eq!(rel(d.path(), protected(d.path())), [".git"]);
    }

    #[test]
    fn a_gitdir_file_inside_the_workspace_is_followed_and_one_outside_is_not() {
        let d = tree(&["repo.git/hooks/", "repo.git/config", "wt/a"]);
        std::fs::write(d.path().join("wt/.git"), "gitdir: ../repo.git\n").unwrap();
        std::fs::write(d.path().join(".git"), "gitdir: /nonexistent/x\n").unwrap();
        assert_eq!(
            rel(d.path(), protected(d.path())),
            ["repo.git/config", "repo.git/hooks"]
        );
    }

    #[test]
    fn a_worktree_config_that_git_would_read_but_is_missing_makes_it_all_read_only() {
        let d = tree(&[".git/hooks/", ".git/objects/"]);
        std::fs::write(
            d.path().join(".git/config"),
            "[extensions]\n\tworktreeConfig = true\n",
        )
        .unwrap();
        assert_eq!(rel(d.path(), protected(d.path())), [".git"]);
    }

    #[test]
    fn no_repository_no_carveouts() {
        let d = tree(&["src/main.rs", "git/hooks/"]);
        assert!(protected(d.path()).is_empty());
    }
}
