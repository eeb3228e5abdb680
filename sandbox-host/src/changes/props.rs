//! The apply path under random input: a random workspace (files of several modes, one the
//! owner cannot read, directories, links inside and out, hard links), a random sequence of
//! what a command does on a copy layer over it (writes, modes with set-id bits, removals,
//! renames across directories, directories and links replacing each other, link chains),
//! the same done to a model, then the change set scanned and applied and the real
//! workspace read back with `lstat`/`readlink`, never following a link:
//!
//! - the refusals are exactly the model's: every set-id bit, every link of the change set
//!   whose physical resolution after the apply leads out of the workspace (not into the
//!   host's program directories) or loops, and every link of the workspace's own that the
//!   changes turn out of it; each refused path is named in the error;
//! - refused, the workspace is its initial tree, entry for entry; applied, it is the model;
//! - a directory beside the workspace, which links point into, is never written.
//!
//! The layer is a copy (an overlay needs the command's mount namespace; its change set is
//! the same path by path, which the conformance suite checks end to end). The model
//! resolves links over its own tree (a map of paths, not the change set over
//! descriptors that `resolve` walks), so the two meet only in what they must agree on.
//!
//! Runs as root only: the workspace holds a file its owner cannot read (mode 000), which an
//! unprivileged host cannot copy into a layer, and the model keeps set-id bits across a
//! write, as the kernel does for a writer with `CAP_FSETID`. `cargo xtask fuzz` runs it with
//! more cases (`PROPTEST_CASES`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use proptest::prelude::*;

use super::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64)
}

/// What the workspace holds at a path, as read from the host side.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File { bytes: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Link { target: PathBuf },
}

type Tree = BTreeMap<PathBuf, Node>;

/// An entry of the command's view: files by inode, so a write through one hard link shows
/// at the others.
#[derive(Clone, Debug)]
enum Entry {
    File(usize),
    Dir(u32),
    Link(PathBuf),
}

/// The model of the layer as the command sees it.
#[derive(Clone, Debug, Default)]
struct View {
    entries: BTreeMap<PathBuf, Entry>,
    inodes: Vec<(Vec<u8>, u32)>,
}

impl View {
    fn tree(&self) -> Tree {
        self.entries
            .iter()
            .map(|(p, e)| {
                let n = match e {
                    Entry::File(i) => Node::File {
                        bytes: self.inodes[*i].0.clone(),
                        mode: self.inodes[*i].1,
                    },
                    Entry::Dir(mode) => Node::Dir { mode: *mode },
                    Entry::Link(t) => Node::Link { target: t.clone() },
                };
                (p.clone(), n)
            })
            .collect()
    }

    /// The directories, the top (`""`) first.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![PathBuf::new()];
        v.extend(
            self.entries
                .iter()
                .filter(|(_, e)| matches!(e, Entry::Dir(_)))
                .map(|(p, _)| p.clone()),
        );
        v
    }

    fn files(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn links(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Link(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn all(&self) -> Vec<PathBuf> {
        self.entries.keys().cloned().collect()
    }

    fn has_children(&self, dir: &Path) -> bool {
        self.entries
            .keys()
            .any(|p| p.parent() == Some(dir) && p != dir)
    }

    /// Remove `p` and everything beneath it.
    fn remove(&mut self, p: &Path) {
        self.entries.retain(|q, _| !q.starts_with(p));
    }

    fn file(&mut self, p: PathBuf, bytes: Vec<u8>, mode: u32) {
        self.inodes.push((bytes, mode));
        self.entries.insert(p, Entry::File(self.inodes.len() - 1));
    }
}

/// Names entries take.
const NAMES: &[&str] = &["a", "b", "c", "d", "up", "esc", "lib", "bin", "x"];
/// Names a link's target may also use: the host's and the temp dir's.
const TARGET_NAMES: &[&str] = &[
    "a", "b", "c", "d", "up", "esc", "lib", "bin", "x", "ws", "outside", "secret", "etc", "passwd",
    "usr", "python3",
];

#[derive(Clone, Debug)]
enum Comp {
    Up,
    Dot,
    Name(usize),
}

/// A symlink's target.
#[derive(Clone, Debug)]
enum Target {
    /// Relative, these steps.
    Rel(Vec<Comp>),
    /// Relative, to the entry of this index in the view (inside, by its text).
    Into(usize),
    /// Enough `..` to reach `/` from anywhere in the workspace, then these steps.
    ToRoot(Vec<Comp>),
    /// Absolute, under the temp dir holding the workspace and `outside`.
    TmpRoot(Vec<Comp>),
    /// Absolute, a host path.
    Abs(usize),
}

const HOST: &[&str] = &[
    "/etc",
    "/etc/passwd",
    "/usr/bin/python3",
    "/bin/sh",
    "/usr/lib",
    "/root",
    "/",
];

/// A file's modes (with set-id bits only as a command sets them).
const FILE_MODES: &[u32] = &[0o644, 0o755, 0o600, 0o000];
const DIR_MODES: &[u32] = &[0o755, 0o700, 0o750];
const CHMODS: &[u32] = &[0o644, 0o755, 0o600, 0o000, 0o700, 0o4755, 0o2755, 0o6711];

fn comps() -> impl Strategy<Value = Vec<Comp>> {
    proptest::collection::vec(
        prop_oneof![
            3 => Just(Comp::Up),
            1 => Just(Comp::Dot),
            4 => (0..TARGET_NAMES.len()).prop_map(Comp::Name),
        ],
        0..5,
    )
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        4 => comps().prop_map(Target::Rel),
        3 => any::<usize>().prop_map(Target::Into),
        1 => comps().prop_map(Target::ToRoot),
        1 => comps().prop_map(Target::TmpRoot),
        2 => (0..HOST.len()).prop_map(Target::Abs),
    ]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(prop_oneof![Just(b'x'), Just(b'y'), any::<u8>()], 0..6)
}

/// One step of the initial workspace; indices are taken modulo what exists.
#[derive(Clone, Debug)]
enum Make {
    Dir(usize, usize, usize),
    File(usize, usize, Vec<u8>, usize),
    Link(usize, usize, Target),
    Hard(usize, usize, usize),
}

fn make() -> impl Strategy<Value = Make> {
    let n = NAMES.len();
    prop_oneof![
        2 => (any::<usize>(), 0..n, 0..DIR_MODES.len()).prop_map(|(d, n, m)| Make::Dir(d, n, m)),
        4 => (any::<usize>(), 0..n, bytes(), 0..FILE_MODES.len())
            .prop_map(|(d, n, b, m)| Make::File(d, n, b, m)),
        2 => (any::<usize>(), 0..n, target()).prop_map(|(d, n, t)| Make::Link(d, n, t)),
        1 => (any::<usize>(), any::<usize>(), 0..n).prop_map(|(f, d, n)| Make::Hard(f, d, n)),
    ]
}

/// What a command does; indices are taken modulo what exists, a step that cannot be taken
/// is skipped.
#[derive(Clone, Debug)]
enum Op {
    Write(usize, Vec<u8>),
    Create(usize, usize, Vec<u8>, usize),
    Chmod(usize, usize),
    Remove(usize),
    Mkdir(usize, usize),
    Rmdir(usize),
    Rename(usize, usize, usize),
    DirToLink(usize, Target),
    LinkToDir(usize),
    Symlink(usize, usize, Target),
    Hard(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = NAMES.len();
    let u = any::<usize>;
    prop_oneof![
        2 => (u(), bytes()).prop_map(|(f, b)| Op::Write(f, b)),
        2 => (u(), 0..n, bytes(), 0..FILE_MODES.len()).prop_map(|(d, n, b, m)| Op::Create(d, n, b, m)),
        2 => (u(), 0..CHMODS.len()).prop_map(|(e, m)| Op::Chmod(e, m)),
        2 => u().prop_map(Op::Remove),
        1 => (u(), 0..n).prop_map(|(d, n)| Op::Mkdir(d, n)),
        1 => u().prop_map(Op::Rmdir),
        3 => (u(), u(), 0..n).prop_map(|(e, d, n)| Op::Rename(e, d, n)),
        1 => (u(), target()).prop_map(|(d, t)| Op::DirToLink(d, t)),
        1 => u().prop_map(Op::LinkToDir),
        4 => (u(), 0..n, target()).prop_map(|(d, n, t)| Op::Symlink(d, n, t)),
        1 => (u(), u(), 0..n).prop_map(|(f, d, n)| Op::Hard(f, d, n)),
    ]
}

fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
    (!v.is_empty()).then(|| v[i % v.len()].clone())
}

/// Where the temp dir, the workspace and `outside` are.
struct Places {
    root: PathBuf,
    ws: PathBuf,
}

impl Places {
    fn render(&self, view: &View, at: &Path, t: &Target) -> PathBuf {
        let steps = |c: &[Comp]| -> PathBuf {
            let mut p = PathBuf::new();
            for s in c {
                p.push(match s {
                    Comp::Up => "..",
                    Comp::Dot => ".",
                    Comp::Name(i) => TARGET_NAMES[*i],
                });
            }
            p
        };
        let ups = |n: usize| -> PathBuf { (0..n).map(|_| "..").collect() };
        let p = match t {
            Target::Rel(c) => steps(c),
            Target::Into(i) => match pick(&view.all(), *i) {
                Some(e) => {
                    let depth = at.parent().map_or(0, |p| p.components().count());
                    ups(depth).join(e)
                }
                None => PathBuf::from("."),
            },
            Target::ToRoot(c) => ups(self.ws.components().count() + 1).join(steps(c)),
            Target::TmpRoot(c) => self.root.join(steps(c)),
            Target::Abs(i) => PathBuf::from(HOST[*i]),
        };
        if p.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            p
        }
    }
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Build the initial workspace on disk and as a model (hard links as the one inode they
/// are on disk).
fn build(places: &Places, steps: &[Make]) -> View {
    let ws = &places.ws;
    let mut v = View::default();
    for s in steps.iter().take(15) {
        let dirs: Vec<PathBuf> = v.dirs().into_iter().filter(|d| depth(d) <= 2).collect();
        let (d, n) = match s {
            Make::Dir(d, n, _) | Make::File(d, n, ..) | Make::Link(d, n, _) => (*d, *n),
            Make::Hard(_, d, n) => (*d, *n),
        };
        let Some(dir) = pick(&dirs, d) else { continue };
        let path = dir.join(NAMES[n]);
        if v.entries.contains_key(&path) {
            continue;
        }
        let abs = ws.join(&path);
        match s {
            Make::Dir(_, _, m) => {
                if v.dirs().len() > 8 || depth(&path) > 2 {
                    continue;
                }
                fs::create_dir(&abs).unwrap();
                set_mode(&abs, DIR_MODES[*m]);
                v.entries.insert(path, Entry::Dir(DIR_MODES[*m]));
            }
            Make::File(_, _, b, m) => {
                fs::write(&abs, b).unwrap();
                set_mode(&abs, FILE_MODES[*m]);
                v.file(path, b.clone(), FILE_MODES[*m]);
            }
            Make::Link(_, _, t) => {
                let t = places.render(&v, &path, t);
                symlink(&t, &abs).unwrap();
                v.entries.insert(path, Entry::Link(t));
            }
            Make::Hard(f, ..) => {
                let Some(from) = pick(&v.files(), *f) else {
                    continue;
                };
                fs::hard_link(ws.join(&from), &abs).unwrap();
                let e = v.entries[&from].clone();
                v.entries.insert(path, e);
            }
        }
    }
    v
}

/// Take `op` on the layer's copy `c` and on the view; a description of what was done, or
/// `None` where it could not be taken.
fn take(places: &Places, c: &Path, v: &mut View, op: &Op) -> Option<String> {
    let shallow =
        |v: &View| -> Vec<PathBuf> { v.dirs().into_iter().filter(|d| depth(d) <= 2).collect() };
    let fresh = |v: &View, d: usize, n: usize| -> Option<PathBuf> {
        let p = pick(&shallow(v), d)?.join(NAMES[n]);
        (!v.entries.contains_key(&p)).then_some(p)
    };
    match op {
        Op::Write(f, b) => {
            let p = pick(&v.files(), *f)?;
            // In place: every hard link of the layer's inode sees it.
            let mut w = fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(c.join(&p))
                .unwrap();
            w.write_all(b).unwrap();
            let Entry::File(i) = v.entries[&p] else {
                unreachable!()
            };
            v.inodes[i].0 = b.clone();
            Some(format!("write {} {b:?}", p.display()))
        }
        Op::Create(d, n, b, m) => {
            let p = fresh(v, *d, *n)?;
            fs::write(c.join(&p), b).unwrap();
            set_mode(&c.join(&p), FILE_MODES[*m]);
            v.file(p.clone(), b.clone(), FILE_MODES[*m]);
            Some(format!("create {} {:o}", p.display(), FILE_MODES[*m]))
        }
        Op::Chmod(e, m) => {
            let mut all = v.files();
            all.extend(v.dirs().into_iter().skip(1));
            let p = pick(&all, *e)?;
            let mode = match v.entries.get_mut(&p)? {
                Entry::File(i) => {
                    v.inodes[*i].1 = CHMODS[*m];
                    CHMODS[*m]
                }
                // A directory stays one its owner can list and enter (set-gid allowed).
                Entry::Dir(mode) => {
                    *mode = (CHMODS[*m] & 0o6755) | 0o700;
                    *mode
                }
                Entry::Link(_) => unreachable!(),
            };
            set_mode(&c.join(&p), mode);
            Some(format!("chmod {} {mode:o}", p.display()))
        }
        Op::Remove(e) => {
            let p = pick(&v.all(), *e)?;
            if matches!(v.entries[&p], Entry::Dir(_)) {
                fs::remove_dir_all(c.join(&p)).unwrap();
            } else {
                fs::remove_file(c.join(&p)).unwrap();
            }
            v.remove(&p);
            Some(format!("rm -r {}", p.display()))
        }
        Op::Mkdir(d, n) => {
            let p = fresh(v, *d, *n)?;
            fs::create_dir(c.join(&p)).unwrap();
            set_mode(&c.join(&p), 0o755);
            v.entries.insert(p.clone(), Entry::Dir(0o755));
            Some(format!("mkdir {}", p.display()))
        }
        Op::Rmdir(d) => {
            let empty: Vec<PathBuf> = v
                .dirs()
                .into_iter()
                .skip(1)
                .filter(|d| !v.has_children(d))
                .collect();
            let p = pick(&empty, *d)?;
            fs::remove_dir(c.join(&p)).unwrap();
            v.remove(&p);
            Some(format!("rmdir {}", p.display()))
        }
        Op::Rename(e, d, n) => {
            let from = pick(&v.all(), *e)?;
            let dir = pick(&v.dirs(), *d)?;
            let to = dir.join(NAMES[*n]);
            let is_dir = matches!(v.entries[&from], Entry::Dir(_));
            if to.starts_with(&from) {
                return None;
            }
            match v.entries.get(&to) {
                None => {}
                // Two names of one inode: rename(2) does nothing.
                Some(Entry::File(i)) if matches!(v.entries[&from], Entry::File(j) if j == *i) => {
                    return None
                }
                // A file or link over a file or link replaces it, as rename(2) does.
                Some(Entry::File(_) | Entry::Link(_)) if !is_dir => v.remove(&to),
                Some(_) => return None,
            }
            fs::rename(c.join(&from), c.join(&to)).unwrap();
            let moved: Vec<(PathBuf, Entry)> = v
                .entries
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, e)| {
                    let rest = p.strip_prefix(&from).unwrap();
                    let q = if rest.as_os_str().is_empty() {
                        to.clone()
                    } else {
                        to.join(rest)
                    };
                    (q, e.clone())
                })
                .collect();
            v.remove(&from);
            v.entries.extend(moved);
            Some(format!("mv {} {}", from.display(), to.display()))
        }
        Op::DirToLink(d, t) => {
            let p = pick(&v.dirs()[1..], *d)?;
            fs::remove_dir_all(c.join(&p)).unwrap();
            v.remove(&p);
            let t = places.render(v, &p, t);
            symlink(&t, c.join(&p)).unwrap();
            v.entries.insert(p.clone(), Entry::Link(t.clone()));
            Some(format!(
                "rm -r {0}; ln -s {1} {0}",
                p.display(),
                t.display()
            ))
        }
        Op::LinkToDir(l) => {
            let p = pick(&v.links(), *l)?;
            fs::remove_file(c.join(&p)).unwrap();
            fs::create_dir(c.join(&p)).unwrap();
            set_mode(&c.join(&p), 0o755);
            v.entries.insert(p.clone(), Entry::Dir(0o755));
            Some(format!("rm {0}; mkdir {0}", p.display()))
        }
        Op::Symlink(d, n, t) => {
            let p = fresh(v, *d, *n)?;
            let t = places.render(v, &p, t);
            symlink(&t, c.join(&p)).unwrap();
            v.entries.insert(p.clone(), Entry::Link(t.clone()));
            Some(format!("ln -s {} {}", t.display(), p.display()))
        }
        Op::Hard(f, d, n) => {
            let from = pick(&v.files(), *f)?;
            let p = fresh(v, *d, *n)?;
            fs::hard_link(c.join(&from), c.join(&p)).unwrap();
            let e = v.entries[&from].clone();
            v.entries.insert(p.clone(), e);
            Some(format!("ln {} {}", from.display(), p.display()))
        }
    }
}

/// A tree read from the host side: `lstat` and `readlink`, no link followed.
fn read_tree(root: &Path) -> Tree {
    fn walk(d: &Path, rel: &Path, out: &mut Tree) {
        for e in fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let m = fs::symlink_metadata(e.path()).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            let node = if m.file_type().is_symlink() {
                Node::Link {
                    target: fs::read_link(e.path()).unwrap(),
                }
            } else if m.is_dir() {
                walk(&e.path(), &r, out);
                Node::Dir { mode }
            } else {
                assert!(
                    m.is_file(),
                    "{}: not a file, directory or link",
                    r.display()
                );
                Node::File {
                    bytes: fs::read(e.path()).unwrap(),
                    mode,
                }
            };
            out.insert(r, node);
        }
    }
    let mut out = Tree::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// The host's program and library directories, which a link may lead into (what the run
/// could read anyway; `resolve::SYSTEM`).
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

#[derive(Debug, PartialEq)]
enum Place {
    Inside,
    Outside(PathBuf),
    Loop,
}

impl Place {
    fn allowed(&self) -> bool {
        match self {
            Place::Inside => true,
            Place::Outside(p) => SYSTEM.iter().any(|s| p.starts_with(s)),
            Place::Loop => false,
        }
    }
}

/// Where the link at `at` with `target` leads when the workspace is `tree`: each step
/// taken as the kernel takes it, links followed (the host's too), `..` from where a link
/// led; a name that is missing or not a directory is passed lexically, as a fail-closed
/// judge must (the kernel would stop there).
fn resolve(tree: &Tree, ws: &Path, at: &Path, target: &Path) -> Place {
    enum Cur {
        Ws(PathBuf),
        Host(PathBuf),
    }
    let enter = |p: PathBuf| {
        if p == ws {
            Cur::Ws(PathBuf::new())
        } else {
            Cur::Host(p)
        }
    };
    // Pushes `t`'s steps in front; `Some("/")` when it starts again at the root.
    let push = |todo: &mut VecDeque<Option<std::ffi::OsString>>, t: &Path| {
        for c in t.components().collect::<Vec<_>>().into_iter().rev() {
            match c {
                Component::ParentDir => todo.push_front(None),
                Component::Normal(n) => todo.push_front(Some(n.to_os_string())),
                _ => {}
            }
        }
        t.has_root()
    };
    let mut todo = VecDeque::new();
    let mut cur = Cur::Ws(at.parent().unwrap_or(Path::new("")).to_path_buf());
    if push(&mut todo, target) {
        cur = enter(PathBuf::from("/"));
    }
    let mut followed = 0;
    while let Some(step) = todo.pop_front() {
        let link = |cur: &Cur, n: &std::ffi::OsStr| -> Option<PathBuf> {
            match cur {
                Cur::Ws(rel) => match tree.get(&rel.join(n)) {
                    Some(Node::Link { target }) => Some(target.clone()),
                    _ => None,
                },
                Cur::Host(p) => fs::read_link(p.join(n)).ok(),
            }
        };
        cur = match (cur, step) {
            (Cur::Ws(mut rel), None) => {
                if rel.pop() {
                    Cur::Ws(rel)
                } else {
                    enter(ws.parent().unwrap().to_path_buf())
                }
            }
            (Cur::Host(mut p), None) => {
                p.pop();
                enter(p)
            }
            (cur, Some(n)) => match link(&cur, &n) {
                Some(t) => {
                    followed += 1;
                    if followed > 40 {
                        return Place::Loop;
                    }
                    if push(&mut todo, &t) {
                        enter(PathBuf::from("/"))
                    } else {
                        cur
                    }
                }
                None => match cur {
                    Cur::Ws(rel) => Cur::Ws(rel.join(n)),
                    Cur::Host(p) => enter(p.join(n)),
                },
            },
        };
    }
    match cur {
        Cur::Ws(_) => Place::Inside,
        Cur::Host(p) => Place::Outside(p),
    }
}

/// The paths the apply must refuse, turning `initial` into `after`.
fn refusals(initial: &Tree, after: &Tree, ws: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for (p, n) in after {
        match n {
            Node::File { mode, .. } | Node::Dir { mode } if mode & 0o6000 != 0 => {
                out.insert(p.clone());
            }
            Node::Link { target } => {
                let now = resolve(after, ws, p, target).allowed();
                // A link the changes leave as it was is the workspace's own: refused only
                // when the changes turn it out.
                let own = initial.get(p) == Some(n);
                if !now && (!own || resolve(initial, ws, p, target).allowed()) {
                    out.insert(p.clone());
                }
            }
            _ => {}
        }
    }
    out
}

/// Wait until a file made now has a later `ctime` than everything in `ws`, so the layer's
/// start stamp is after the initial tree (else every file of it would be a conflict).
fn settle(ws: &Path, tree: &Tree) {
    let newest = tree
        .keys()
        .map(|p| {
            let m = fs::symlink_metadata(ws.join(p)).unwrap();
            (m.ctime(), m.ctime_nsec())
        })
        .max()
        .unwrap_or((0, 0));
    let probe = ws.parent().unwrap().join("probe");
    loop {
        fs::write(&probe, b"").unwrap();
        let m = fs::symlink_metadata(&probe).unwrap();
        if (m.ctime(), m.ctime_nsec()) > newest {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// One case: build, edit, scan, apply, judge.
fn check(initial: &[Make], ops: &[Op]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let places = Places {
        ws: root.join("ws"),
        root: root.clone(),
    };
    let outside = root.join("outside");
    fs::create_dir_all(outside.join("d")).unwrap();
    fs::write(outside.join("secret"), "s").unwrap();
    fs::create_dir(&places.ws).unwrap();
    let outside_before = read_tree(&outside);

    let mut view = build(&places, initial);
    let before = view.tree();
    prop_assert_eq!(
        &read_tree(&places.ws),
        &before,
        "the initial tree was not made"
    );
    settle(&places.ws, &before);

    let layer = Layer::prepare(
        &places.ws,
        LayerMechanism::Copy,
        &crate::fs::tree::Budget::default(),
    )
    .unwrap();
    // The copy holds each of the workspace's hard links as a file of its own.
    let mut split = Vec::new();
    for e in view.entries.values_mut() {
        if let Entry::File(i) = e {
            split.push(view.inodes[*i].clone());
            *i = split.len() - 1;
        }
    }
    view.inodes = split;
    let copy = layer.source().to_path_buf();
    prop_assert_eq!(&read_tree(&copy), &before, "the copy is not the workspace");

    let mut log = Vec::new();
    for op in ops.iter().take(10) {
        if let Some(s) = take(&places, &copy, &mut view, op) {
            log.push(s);
        }
    }
    let after = view.tree();
    prop_assert_eq!(
        &read_tree(&copy),
        &after,
        "the model lost the layer: {:#?}",
        log
    );

    let want = refusals(&before, &after, &places.ws);
    let changes = scan::scan(&layer).unwrap();
    let set = ChangeSet::new(Box::new(Pending::new(layer)), changes, layer::read_under);
    let got = set.apply(false);
    let real = read_tree(&places.ws);
    match got {
        Ok(_) => {
            prop_assert!(
                want.is_empty(),
                "applied, but the model refuses {:?}; ops {:#?}",
                want,
                log
            );
            prop_assert_eq!(
                &real,
                &after,
                "applied, but not as the model; ops {:#?}",
                log
            );
        }
        Err(e) => {
            let text = e.to_string();
            let refused: BTreeSet<PathBuf> = match &e {
                ApplyError::Refused { refusals } => {
                    refusals.iter().map(|r| r.path.clone()).collect()
                }
                _ => BTreeSet::new(),
            };
            prop_assert_eq!(&refused, &want, "{}; ops {:#?}", text, log);
            for p in &want {
                prop_assert!(
                    text.contains(&p.display().to_string()),
                    "{} is not named in: {}",
                    p.display(),
                    text
                );
            }
            prop_assert_eq!(&real, &before, "refused, but wrote; ops {:#?}", log);
        }
    }
    prop_assert_eq!(
        read_tree(&outside),
        outside_before,
        "wrote outside; ops {:#?}",
        log
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_applied_change_set_is_the_model_and_a_refused_one_writes_nothing(
        initial in proptest::collection::vec(make(), 0..15),
        ops in proptest::collection::vec(op(), 0..10),
    ) {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: the workspace holds a file of mode 000, which needs root to copy");
            return Ok(());
        }
        check(&initial, &ops)?;
    }
}
