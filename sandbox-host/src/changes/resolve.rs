//! Where a symlink leads once the change set is applied, resolved as the kernel will resolve
//! it: component by component, following every link met on the way (the change set's own
//! new links, the real workspace's links, the host's), `..` taken from the directory a link
//! led to, not from the text.
//!
//! A lexical check cannot do this: with `up -> .` in the workspace,
//! `esc -> up/up/../../etc` stays inside by its text and is `/etc` to anyone who follows it
//! (the user, an editor, `tar`, the next unconfined step).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Component, Path, PathBuf};

use super::{Change, ChangeKind};
use crate::fs::fsx::{self, Kind};

/// How many links one resolution follows before giving up, as the kernel (`MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// The host's directories of programs and libraries: a link into them only reaches what the
/// run could read anyway (a virtual environment's `bin/python -> /usr/bin/python3`). `/etc`
/// is not one of them although runs read it: it holds the host's configuration and secrets,
/// and no tool's tree links there.
const SYSTEM: &[&str] = &[
    "/usr",
    "/opt",
    "/nix/store",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
];

/// Where a link leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Inside the workspace (relative to it), existing or not.
    Inside(PathBuf),
    /// On the host, out of the workspace: the path reached, physically resolved as far as
    /// it exists.
    Outside(PathBuf),
    /// More than [`MAX_LINKS`] links: the kernel resolves it nowhere.
    Loop,
}

impl Place {
    /// The host path, for a place out of the workspace.
    pub(crate) fn outside(self) -> Option<PathBuf> {
        match self {
            Self::Outside(p) => Some(p),
            Self::Inside(_) | Self::Loop => None,
        }
    }

    /// Whether a link leading here may be written into the workspace.
    pub(crate) fn allowed(&self) -> bool {
        match self {
            Self::Inside(_) => true,
            Self::Outside(p) => SYSTEM.iter().any(|s| p.starts_with(s)),
            // Fail closed: a resolution this module gave up on is not known to stay inside.
            Self::Loop => false,
        }
    }
}

/// What a path is after the apply, as far as the change set says.
#[derive(Clone, Copy)]
enum Entry<'a> {
    /// A link with this target.
    Link(&'a Path),
    /// A directory the change set creates: only the change set's entries are in it.
    NewDir,
    /// A file, or a special file (refused anyway).
    Other,
    /// Deleted, and nothing made at its place.
    Gone,
    /// The real entry, its mode changed.
    Real,
}

/// The workspace as it will be after the apply: the change set over the real workspace.
pub(crate) struct After<'a> {
    ws: &'a Path,
    real: BorrowedFd<'a>,
    entries: HashMap<&'a Path, Entry<'a>>,
}

/// What a lookup found.
enum Node {
    Link(PathBuf),
    Other,
}

enum Cur {
    /// Relative to the workspace.
    Ws(PathBuf),
    /// Absolute on the host, out of the workspace.
    Host(PathBuf),
}

enum Step {
    Up,
    Name(OsString),
}

impl<'a> After<'a> {
    pub(crate) fn new(ws: &'a Path, real: BorrowedFd<'a>, changes: &'a [Change]) -> Self {
        let mut entries = HashMap::new();
        // In path order a deletion comes before what is made at the same path: the last
        // word wins.
        for c in changes {
            let e = match &c.kind {
                ChangeKind::Symlink { target } => Entry::Link(target),
                ChangeKind::DirAdded => Entry::NewDir,
                ChangeKind::Added | ChangeKind::Modified | ChangeKind::Special => Entry::Other,
                ChangeKind::Deleted { .. } => Entry::Gone,
                ChangeKind::ModeChanged => Entry::Real,
            };
            entries.insert(c.path.as_path(), e);
        }
        Self { ws, real, entries }
    }

    /// The entry at `rel` after the apply.
    fn lookup(&self, rel: &Path) -> Node {
        match self.entries.get(rel) {
            Some(Entry::Link(t)) => return Node::Link(t.to_path_buf()),
            Some(Entry::NewDir | Entry::Other | Entry::Gone) => return Node::Other,
            Some(Entry::Real) | None => {}
        }
        // Beneath a directory the change set made or deleted, the real workspace has no say.
        let mut a = rel.parent();
        while let Some(p) = a.filter(|p| !p.as_os_str().is_empty()) {
            if !matches!(self.entries.get(p), None | Some(Entry::Real)) {
                return Node::Other;
            }
            a = p.parent();
        }
        let Ok(Some(parent)) = fsx::open_parent(self.real, rel) else {
            return Node::Other;
        };
        let name = fsx::file_name(rel);
        match fsx::stat_at(parent.as_fd(), name) {
            Ok(Some(st)) if fsx::kind(&st) == Kind::Symlink => {
                match nix::fcntl::readlinkat(parent.as_fd(), name) {
                    Ok(t) => Node::Link(PathBuf::from(t)),
                    Err(_) => Node::Other,
                }
            }
            _ => Node::Other,
        }
    }

    /// Where the link at `at` (relative) with `target` leads after the apply.
    pub(crate) fn resolve(&self, at: &Path, target: &Path) -> Place {
        let mut cur = Cur::Ws(at.parent().unwrap_or(Path::new("")).to_path_buf());
        let mut todo = VecDeque::new();
        if expand(&mut todo, target) {
            cur = self.enter(PathBuf::from("/"));
        }
        let mut links = 0;
        while let Some(step) = todo.pop_front() {
            cur = match (cur, step) {
                (Cur::Ws(mut rel), Step::Up) => {
                    if rel.pop() {
                        Cur::Ws(rel)
                    } else {
                        Cur::Host(self.ws.parent().unwrap_or(Path::new("/")).to_path_buf())
                    }
                }
                (Cur::Host(mut p), Step::Up) => {
                    p.pop();
                    self.enter(p)
                }
                (Cur::Ws(rel), Step::Name(n)) => {
                    let next = rel.join(&n);
                    match self.lookup(&next) {
                        Node::Link(t) => {
                            links += 1;
                            if links > MAX_LINKS {
                                return Place::Loop;
                            }
                            if expand(&mut todo, &t) {
                                self.enter(PathBuf::from("/"))
                            } else {
                                Cur::Ws(rel)
                            }
                        }
                        Node::Other => Cur::Ws(next),
                    }
                }
                (Cur::Host(p), Step::Name(n)) => {
                    let next = p.join(&n);
                    let link = std::fs::symlink_metadata(&next)
                        .ok()
                        .filter(|m| m.file_type().is_symlink())
                        .and_then(|_| std::fs::read_link(&next).ok());
                    match link {
                        Some(t) => {
                            links += 1;
                            if links > MAX_LINKS {
                                return Place::Loop;
                            }
                            if expand(&mut todo, &t) {
                                self.enter(PathBuf::from("/"))
                            } else {
                                Cur::Host(p)
                            }
                        }
                        None => self.enter(next),
                    }
                }
            };
        }
        match cur {
            Cur::Ws(rel) => Place::Inside(rel),
            Cur::Host(p) => Place::Outside(p),
        }
    }

    /// The real workspace's own links that the change set leaves in place but turns out of
    /// the workspace: `e -> a/../b` is inside while `a` is a directory and leads out once
    /// the change set makes `a -> .`. Walks the real workspace (entries are stat'ed, never
    /// followed), so it is only worth it when the change set writes a link: nothing else
    /// it writes can make a path that resolved inside resolve outside.
    pub(crate) fn redirected(&self) -> io::Result<Vec<(PathBuf, PathBuf, Place)>> {
        let before = After {
            ws: self.ws,
            real: self.real,
            entries: HashMap::new(),
        };
        let mut out = Vec::new();
        self.walk(&before, self.real, Path::new(""), &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        before: &After<'_>,
        dir: BorrowedFd<'_>,
        rel: &Path,
        out: &mut Vec<(PathBuf, PathBuf, Place)>,
    ) -> io::Result<()> {
        // A directory the host cannot read (its own, mode 000) is skipped: nothing in it
        // can be listed, and the kernel resolves no path through it for this user either.
        let names = match fsx::list(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => return Ok(()),
            r => r?,
        };
        for name in names {
            let path = rel.join(&name);
            // What the change set replaces or deletes is not the real workspace's any more.
            if !matches!(self.entries.get(path.as_path()), None | Some(Entry::Real)) {
                continue;
            }
            let Some(st) = fsx::stat_at(dir, &name)? else {
                continue;
            };
            match fsx::kind(&st) {
                Kind::Dir => {
                    let sub = match fsx::open_dir_at(dir, &name) {
                        Err(e) if e.raw_os_error() == Some(libc::EACCES) => continue,
                        r => r?,
                    };
                    self.walk(before, sub.as_fd(), &path, out)?;
                }
                Kind::Symlink => {
                    let target = PathBuf::from(
                        nix::fcntl::readlinkat(dir, name.as_os_str()).map_err(fsx::nix_io)?,
                    );
                    let now = self.resolve(&path, &target);
                    if !now.allowed() && before.resolve(&path, &target).allowed() {
                        out.push((path, target, now));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A host path, which may be the workspace itself (reached from outside, as an
    /// absolute link or a `..` out and back in does).
    fn enter(&self, p: PathBuf) -> Cur {
        if p == self.ws {
            Cur::Ws(PathBuf::new())
        } else {
            Cur::Host(p)
        }
    }
}

/// Put `target`'s steps in front of what is left to resolve; true when it is absolute (the
/// resolution starts again at `/`).
fn expand(todo: &mut VecDeque<Step>, target: &Path) -> bool {
    let steps: Vec<Step> = target
        .components()
        .filter_map(|c| match c {
            Component::ParentDir => Some(Step::Up),
            Component::Normal(n) => Some(Step::Name(n.to_os_string())),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    for s in steps.into_iter().rev() {
        todo.push_front(s);
    }
    target.has_root()
}
