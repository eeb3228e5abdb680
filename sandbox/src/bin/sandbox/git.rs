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
//! A repository's `config` may also name a path inside the work tree whose contents git
//! runs or reads as config: `core.hooksPath` (`.husky`), `core.fsmonitor`,
//! `core.sshCommand`, a filter, diff or merge driver, `include.path` and
//! `includeIf.*.path`. Each such path is read-only too: one that exists, as itself; one
//! that does not (the command would create the hooks), as its nearest existing directory
//! in the workspace, said on stderr with the remedy (create it, so that only it is
//! read-only). The config is read with `git config --list`: where git cannot be run, it
//! cannot run what the config names either. An included file's own includes are not
//! followed (it is read-only, so what it names was chosen before the run).
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
    let (all, stand_ins) = protected_with(workspace);
    for (p, named) in &stand_ins {
        eprintln!(
            "sandbox: {} is read-only: a repository's config names {} inside it, which does \
             not exist yet and which git would run or read; remedy: create {1} before the \
             run (only it is then read-only), or --writable-git",
            sandbox::escape(p.as_os_str().as_bytes()),
            sandbox::escape(named.as_os_str().as_bytes())
        );
    }
    // A repository carved out whole: say why, since `git commit` fails inside it.
    for p in all.iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n == ".git" || p.join("HEAD").exists())
            && !stand_ins.iter().any(|(s, _)| s == *p)
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
#[cfg(test)]
fn protected(workspace: &Path) -> Vec<PathBuf> {
    protected_with(workspace).0
}

/// [`carveouts`], and the directories carved out in place of a path a config names that
/// does not exist (with that path).
fn protected_with(workspace: &Path) -> (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>) {
    let Ok(ws) = workspace.canonicalize() else {
        // The library refuses a workspace that does not resolve, naming it.
        return (Vec::new(), Vec::new());
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
    let mut stand_ins = Vec::new();
    for d in gitdirs {
        protect(&d, &ws, &mut out);
        for named in named_by_config(&d, &ws) {
            match inside(&named, &ws) {
                Some(p) => {
                    out.insert(p);
                }
                None if named.starts_with(&ws) => {
                    if let Some(a) = named.ancestors().skip(1).find_map(|a| inside(a, &ws)) {
                        out.insert(a.clone());
                        stand_ins.push((a, named));
                    }
                }
                None => {}
            }
        }
    }
    // A path under another carve-out is covered by it.
    let all: Vec<PathBuf> = out.into_iter().collect();
    let outer: Vec<PathBuf> = all
        .iter()
        .filter(|p| !all.iter().any(|o| o != *p && p.starts_with(o)))
        .cloned()
        .collect();
    stand_ins.retain(|(a, _)| outer.contains(a));
    (outer, stand_ins)
}

/// The paths inside the workspace that `gitdir`'s config names for git to run or read
/// (see the module docs), made absolute without resolving (a path may not exist yet);
/// relative ones against the work tree (`gitdir`'s parent for a `.git` directory) or, for
/// an include, against `gitdir`.
fn named_by_config(gitdir: &Path, ws: &Path) -> Vec<PathBuf> {
    let Some(git) = std::env::split_paths(sandbox_core::DEFAULT_PATH)
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for file in ["config", "config.worktree"] {
        let config = gitdir.join(file);
        if !config.is_file() {
            continue;
        }
        let Ok(o) = std::process::Command::new(&git)
            .args(["config", "--no-includes", "--null", "--list", "--file"])
            .arg(&config)
            .env_clear()
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
        else {
            continue;
        };
        let worktree = (gitdir.file_name() == Some(std::ffi::OsStr::new(".git")))
            .then(|| gitdir.parent())
            .flatten();
        for entry in o.stdout.split(|b| *b == 0) {
            let Some(nl) = entry.iter().position(|b| *b == b'\n') else {
                continue;
            };
            let key = String::from_utf8_lossy(&entry[..nl]).to_ascii_lowercase();
            let value = std::ffi::OsStr::from_bytes(&entry[nl + 1..]);
            if let Some(p) = config_path(&key, value, gitdir, worktree) {
                if p.starts_with(ws) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The path `key = value` names for git to run or read, if it names one: the value
/// itself for a hooks directory or an include, a command's first word where it is a path
/// (a bare name is looked up on `PATH`, out of the workspace).
fn config_path(
    key: &str,
    value: &std::ffi::OsStr,
    gitdir: &Path,
    worktree: Option<&Path>,
) -> Option<PathBuf> {
    let include =
        key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
    let whole = key == "core.hookspath" || include;
    let command = matches!(key, "core.fsmonitor" | "core.sshcommand")
        || [".clean", ".smudge", ".process"]
            .iter()
            .any(|s| key.starts_with("filter.") && key.ends_with(s))
        || [".textconv", ".command"]
            .iter()
            .any(|s| key.starts_with("diff.") && key.ends_with(s))
        || (key.starts_with("merge.") && key.ends_with(".driver"));
    let bytes = value.as_bytes();
    let path: &[u8] = if whole {
        bytes
    } else if command {
        let word = bytes
            .split(|b| b.is_ascii_whitespace())
            .find(|w| !w.is_empty())?;
        let word = word
            .strip_prefix(b"\"")
            .and_then(|w| w.strip_suffix(b"\""))
            .or_else(|| word.strip_prefix(b"'").and_then(|w| w.strip_suffix(b"'")))
            .unwrap_or(word);
        // `core.fsmonitor = true` is git's own daemon; a bare name is looked up on PATH.
        if !word.contains(&b'/') {
            return None;
        }
        word
    } else {
        return None;
    };
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    if p.as_os_str().is_empty() || p.starts_with("~") {
        return None;
    }
    let base = if include { Some(gitdir) } else { worktree };
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base?.join(p)
    };
    Some(normalize(&joined))
}

/// `p` with `.` and `..` taken out lexically (it may not exist).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
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

    fn with_config(d: &Path, config: &str) {
        std::fs::write(d.join(".git/config"), config).unwrap();
    }

    fn git_here() -> bool {
        std::env::split_paths(sandbox_core::DEFAULT_PATH).any(|d| d.join("git").is_file())
    }

    #[test]
    fn paths_a_config_names_for_git_to_run_are_read_only() {
        if !git_here() {
            eprintln!("skipped: no git on core's PATH, which could run nothing a config names");
            return;
        }
        let d = tree(&[
            ".git/hooks/",
            ".git/objects/",
            ".husky/pre-commit",
            "tools/fsmon.sh",
            "shared.gitconfig",
            "src/x.rs",
        ]);
        with_config(
            d.path(),
            "[core]\n\thooksPath = .husky\n\tfsmonitor = ./tools/fsmon.sh --flag\n\
             \tsshCommand = ssh -i key\n[include]\n\tpath = ../shared.gitconfig\n\
             [filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n",
        );
        assert_eq!(
            rel(d.path(), protected(d.path())),
            [
                ".git/config",
                ".git/hooks",
                ".husky",
                "shared.gitconfig",
                "tools/fsmon.sh"
            ]
        );
        // A hooks directory that does not exist yet: its nearest existing directory.
        with_config(d.path(), "[core]\n\thooksPath = src/hooks\n");
        let (all, stand_ins) = protected_with(d.path());
        assert_eq!(rel(d.path(), all), [".git/config", ".git/hooks", "src"]);
        assert_eq!(stand_ins.len(), 1);
        // Outside the workspace (absolute, or through `..`): not the workspace's to protect.
        with_config(
            d.path(),
            "[core]\n\thooksPath = /usr/share/hooks\n\tfsmonitor = ../../x.sh\n",
        );
        assert_eq!(
            rel(d.path(), protected(d.path())),
            [".git/config", ".git/hooks"]
        );
    }

    #[test]
    fn no_repository_no_carveouts() {
        let d = tree(&["src/main.rs", "git/hooks/"]);
        assert!(protected(d.path()).is_empty());
    }
}
