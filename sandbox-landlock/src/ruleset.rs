//! The policy: a plan turned into the landlock ruleset it needs, as plain data.
//!
//! Pure apart from the reads of [`FsView`] (what a path is, what sits next to a carve-out),
//! so every knob is unit-tested against a made-up tree. [`crate::compile`] turns the
//! [`Spec`] into a kernel ruleset.
//!
//! # What is granted
//!
//! - The system paths ([`crate::system`]): read (and execute where it makes sense).
//! - The workspace and each writable path: every filesystem right the ABI has.
//! - Each read-only path: read and execute; one that holds a hidden credential path
//!   (`Plan::hidden_paths`) is split around it, entry by entry, since a rule reaches
//!   everything beneath it. Any other rule above a hidden path (the workspace, a writable
//!   path) is refused: rules cannot subtract.
//! - The program being run: read and execute of that one file, so that a tool outside the
//!   system directories (`target/debug/tool`) can be started without granting its
//!   directory.
//! - With the `full` network: the file `/etc/resolv.conf` points to, when it points out of
//!   `/etc` (systemd-resolved keeps it in `/run`).
//!
//! Everything else is denied: landlock handles every filesystem right of the ABI in use,
//! so an access without a rule fails with `EACCES`.
//!
//! # The mount namespace: modes, timestamps and carve-outs
//!
//! Landlock has no right for changing a file's mode, owner, timestamps or extended
//! attributes: a command may `chmod` any file its uid owns that it can name, wherever it
//! is. For a root host that is every root-owned file (`chmod 666 /etc/passwd`). And
//! landlock rules only add access down a hierarchy: a write right on the workspace reaches
//! every carve-out inside it, and no rule can take it back.
//!
//! Both are solved by a mount namespace of the command's own ([`MountNs::Private`],
//! wherever one can be made: a root host, or unprivileged user namespaces), set up in the
//! child before landlock applies (see [`crate::child::Namespaces`]):
//!
//! - every mount is made read-only, recursively: outside the workspace and the writable
//!   paths nothing can be changed, modes and timestamps included (`EROFS`); devices such
//!   as `/dev/null` can still be written, which is not a change to the filesystem;
//! - the workspace and each writable path are bound back read-write ([`Spec::writable_mounts`]);
//! - each carve-out is bound onto itself read-only, recursively: it cannot be changed
//!   (`EROFS`), nor removed or renamed (`EBUSY`: it is a mount point). The rest of the
//!   workspace keeps every right, new top-level files included;
//! - every directory on the way to a carve-out that the command could rename (`.git` for
//!   `.git/hooks`; the workspace itself when a writable path holds it) is *pinned*: bound
//!   onto itself, so it is a mount point too, and cannot be moved aside for a new `.git`
//!   with planted hooks.
//!
//! Mounting is then denied by landlock and by seccomp.
//!
//! Without a mount namespace ([`MountNs::Shared`]: not root, and no unprivileged user
//! namespaces) the modes and timestamps of the user's own files outside the workspace are
//! not confined (the outcome's notes say so; a root host is refused, see
//! `drops_host_root`), and carve-outs are enforced by **split rules**: the workspace is
//! readable as a whole and write access is granted child by child: every entry that is
//! neither a carve-out nor on the way to one is writable as a whole; an entry on the way
//! to a carve-out (`.git` for `.git/hooks`) is split the same way. The carve-outs are
//! read-only exactly, but the directories on the way (the workspace root itself, `.git`)
//! are *fixed*: their existing entries can be written, but nothing can be created, removed
//! or renamed directly in them (`EACCES`: stricter than asked, never looser). The fixed
//! directories are listed in the outcome's notes.
//!
//! What cannot be enforced is refused before anything runs, in both ways:
//!
//! - a file inside a carve-out with more than one hard link: the other name may sit in a
//!   writable place, and both landlock and a read-only mount judge the name used, not the
//!   file. (The command cannot make such a link itself: landlock refuses links that would
//!   gain rights.)
//! - a writable path inside a carve-out (the two requests contradict each other);
//! - with split rules, a writable path that contains a carve-out (its rule would reach the
//!   carve-out; a read-only mount has no such problem).

use std::path::{Path, PathBuf};

use landlock::{Access, AccessFs, AccessNet, BitFlags, Scope, ABI};
use sandbox_core::record::{Landlock, Namespaces, Record, Seccomp};
use sandbox_core::NetworkMode;

use crate::error::Error;
use crate::fsview::{FsView, Kind};
use crate::system::{SysAccess, SystemView};

/// The oldest ABI the backend runs on: ABI 3 (Linux 6.2) adds the truncate right. Before
/// it, `truncate(2)` and `open(O_RDONLY | O_TRUNC)` could empty any file the user may
/// write, wherever it is, which would make "writes confined" false.
pub(crate) const MIN_ABI: ABI = ABI::V3;
/// The oldest ABI for a root host: ABI 6 (Linux 6.12) scopes signals to the sandbox.
/// Without it a command running as uid 0 can signal every root process on the host (uid
/// checks pass without any capability), including the program that started it.
pub(crate) const ROOT_ABI: ABI = ABI::V6;
/// The newest ABI this backend was written and reviewed against: rights of a newer kernel
/// are not handled until someone reads what they mean and adds them here.
pub(crate) const NEWEST_ABI: ABI = ABI::V9;

/// Whether the command gets a mount namespace of its own (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MountNs {
    /// Its own: every mount read-only, the workspace and the writable paths bound back
    /// read-write, carve-outs as read-only mounts.
    Private,
    /// The host's (none can be made here): landlock rules alone.
    Shared,
}

/// What a run asks for, as far as landlock is concerned. Paths are canonical (the plan's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request<'a> {
    pub workspace: &'a Path,
    pub carveouts: &'a [PathBuf],
    pub read_only: &'a [PathBuf],
    /// Credentials inside a toolchain grant, to stay unreadable (`Plan::hidden_paths`).
    pub hidden: &'a [PathBuf],
    pub writable: &'a [PathBuf],
    pub program: &'a Path,
    pub network: NetworkMode,
    pub host_is_root: bool,
    pub mount_ns: MountNs,
}

impl<'a> Request<'a> {
    /// The request of a checked plan.
    pub fn from_plan(plan: &'a sandbox_core::Plan, mount_ns: MountNs) -> Self {
        Self {
            workspace: &plan.workspace,
            carveouts: &plan.readonly_carveouts,
            read_only: &plan.read_only_paths,
            hidden: &plan.hidden_paths,
            writable: &plan.writable_paths,
            program: &plan.program,
            network: plan.network,
            host_is_root: plan.host_is_root,
            mount_ns,
        }
    }
}

/// Why a rule is there (for tests and notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    System,
    Workspace,
    /// A child of a fixed directory, writable as a whole.
    WorkspacePart,
    ReadOnly,
    Writable,
    Program,
    Resolver,
}

/// One landlock rule: `access` beneath `path` (or on that file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PathRule {
    pub path: PathBuf,
    pub access: BitFlags<AccessFs>,
    pub why: Why,
}

/// The whole landlock policy of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The ABI whose rights are handled: the kernel's, up to [`NEWEST_ABI`].
    pub abi: ABI,
    /// The oldest ABI this request can be enforced with.
    pub needed: ABI,
    pub handled_fs: BitFlags<AccessFs>,
    /// TCP bind and connect, denied outright with the `none` network (ABI 4).
    pub handled_net: BitFlags<AccessNet>,
    /// Signals and abstract unix sockets kept inside the sandbox (ABI 6).
    pub scopes: BitFlags<Scope>,
    pub rules: Vec<PathRule>,
    /// Connecting to a unix socket by path is confined only from ABI 9; before it the
    /// seccomp layer denies `socket(AF_UNIX)` (see [`crate::filter`]).
    pub deny_unix_sockets: bool,
    /// Directories on the way to a carve-out, where nothing can be created or removed
    /// (split rules).
    pub fixed_dirs: Vec<PathBuf>,
    /// The trees bound back read-write in the command's read-only mount namespace: the
    /// workspace and the writable paths, the outermost only (mounts).
    pub writable_mounts: Vec<PathBuf>,
    /// Carve-outs to bind-mount read-only in the command's mount namespace (mounts).
    pub readonly_mounts: Vec<PathBuf>,
    /// Directories on the way to a carve-out to bind onto themselves (read-write), so that
    /// they cannot be renamed or removed; outermost first (mounts).
    pub pinned_dirs: Vec<PathBuf>,
}

impl Spec {
    /// A spec that handles and grants nothing (a base for probes and tests).
    pub fn empty() -> Self {
        Spec {
            abi: MIN_ABI,
            needed: MIN_ABI,
            handled_fs: BitFlags::EMPTY,
            handled_net: BitFlags::EMPTY,
            scopes: BitFlags::EMPTY,
            rules: Vec::new(),
            deny_unix_sockets: false,
            fixed_dirs: Vec::new(),
            writable_mounts: Vec::new(),
            readonly_mounts: Vec::new(),
            pinned_dirs: Vec::new(),
        }
    }
}

/// The oldest ABI a request needs.
pub(crate) fn needed_abi(host_is_root: bool) -> ABI {
    if host_is_root {
        ROOT_ABI
    } else {
        MIN_ABI
    }
}

/// The ABI whose rights a kernel at `kernel` gets handled.
pub(crate) fn usable_abi(kernel: ABI) -> ABI {
    kernel.min(NEWEST_ABI)
}

fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute
}

/// `access` as the kernel accepts it for a path of `kind`: directory-only rights dropped
/// for a file.
fn fit(access: BitFlags<AccessFs>, kind: Kind, abi: ABI) -> BitFlags<AccessFs> {
    if kind == Kind::Dir {
        access
    } else {
        access & AccessFs::from_file(abi)
    }
}

fn stat_kind(fs: &dyn FsView, path: &Path) -> Result<Kind, Error> {
    fs.stat(path).map(|m| m.kind).map_err(|source| Error::Stat {
        path: path.to_path_buf(),
        source,
    })
}

/// The carve-outs without those inside another one (the outer one already covers them).
fn outermost(carveouts: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for c in carveouts {
        if carveouts.iter().any(|o| o != c && c.starts_with(o)) || out.contains(c) {
            continue;
        }
        out.push(c.clone());
    }
    out
}

/// Refuse a carve-out holding a file with another hard link (see the module docs).
fn check_links(fs: &dyn FsView, carveout: &Path) -> Result<(), Error> {
    let meta = fs.stat(carveout).map_err(|source| Error::Stat {
        path: carveout.to_path_buf(),
        source,
    })?;
    let mut stack = Vec::new();
    match meta.kind {
        Kind::Dir => stack.push(carveout.to_path_buf()),
        Kind::File if meta.nlink > 1 => {
            return Err(Error::HardLinked {
                carveout: carveout.to_path_buf(),
                file: carveout.to_path_buf(),
                links: meta.nlink,
            })
        }
        _ => {}
    }
    while let Some(dir) = stack.pop() {
        let entries = fs.list(&dir).map_err(|source| Error::Stat {
            path: dir.clone(),
            source,
        })?;
        for e in entries {
            let p = dir.join(&e.name);
            match e.meta.kind {
                Kind::Dir => stack.push(p),
                Kind::File if e.meta.nlink > 1 => {
                    return Err(Error::HardLinked {
                        carveout: carveout.to_path_buf(),
                        file: p,
                        links: e.meta.nlink,
                    })
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Write access to everything in `dir` but the carve-outs, splitting the entries on the way
/// to one (see the module docs). `dir` itself becomes fixed.
fn split(
    fs: &dyn FsView,
    dir: &Path,
    carveouts: &[PathBuf],
    abi: ABI,
    spec: &mut Spec,
) -> Result<(), Error> {
    spec.fixed_dirs.push(dir.to_path_buf());
    let full = AccessFs::from_all(abi);
    let mut entries = fs.list(dir).map_err(|source| Error::Stat {
        path: dir.to_path_buf(),
        source,
    })?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        let p = dir.join(&e.name);
        if carveouts.contains(&p) {
            continue;
        }
        if carveouts.iter().any(|c| c.starts_with(&p)) {
            split(fs, &p, carveouts, abi, spec)?;
            continue;
        }
        match e.meta.kind {
            // A symlink's target is judged by its own rules.
            Kind::Symlink => {}
            kind => spec.rules.push(PathRule {
                path: p,
                access: fit(full, kind, abi),
                why: Why::WorkspacePart,
            }),
        }
    }
    Ok(())
}

/// Read access to everything in `dir` but the hidden paths, splitting the entries on the way
/// to one; `dir` itself and each directory on the way get no rule (cannot be listed), since
/// a rule on a directory reaches everything beneath it.
fn split_read(
    fs: &dyn FsView,
    dir: &Path,
    hidden: &[PathBuf],
    abi: ABI,
    spec: &mut Spec,
) -> Result<(), Error> {
    let mut entries = fs.list(dir).map_err(|source| Error::Stat {
        path: dir.to_path_buf(),
        source,
    })?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        let p = dir.join(&e.name);
        if hidden.contains(&p) {
            continue;
        }
        if hidden.iter().any(|h| h.starts_with(&p)) {
            if e.meta.kind == Kind::Dir {
                split_read(fs, &p, hidden, abi, spec)?;
            }
            continue;
        }
        match e.meta.kind {
            // A symlink's target is judged by its own rules.
            Kind::Symlink => {}
            kind => spec.rules.push(PathRule {
                path: p,
                access: fit(read_rights(), kind, abi),
                why: Why::ReadOnly,
            }),
        }
    }
    Ok(())
}

/// The directories on the way to a carve-out that the command could rename or remove:
/// those whose parent is inside the workspace or a writable path. Outermost first.
fn pinned(carveouts: &[PathBuf], workspace: &Path, writable: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for c in carveouts {
        for a in c.ancestors().skip(1) {
            let Some(parent) = a.parent() else {
                break;
            };
            let movable =
                parent.starts_with(workspace) || writable.iter().any(|w| parent.starts_with(w));
            if movable && !out.iter().any(|o| o == a) {
                out.push(a.to_path_buf());
            }
        }
    }
    out.sort_by_key(|p| p.components().count());
    out
}

/// Whether `path` is already readable and executable under the rules so far.
fn covered(rules: &[PathRule], path: &Path) -> bool {
    rules.iter().any(|r| {
        r.access.contains(AccessFs::ReadFile | AccessFs::Execute) && path.starts_with(&r.path)
    })
}

/// The landlock policy for `req` on a kernel at `kernel`, with the system grants `system`.
pub(crate) fn spec(
    req: &Request<'_>,
    system: &SystemView,
    kernel: ABI,
    fs: &dyn FsView,
) -> Result<Spec, Error> {
    let needed = needed_abi(req.host_is_root);
    if kernel < needed {
        return Err(Error::AbiTooOld {
            kernel,
            needed,
            why: if req.host_is_root {
                "a root host needs signals scoped to the sandbox (ABI 6, Linux 6.12)"
            } else {
                "confining writes needs the truncate right (ABI 3, Linux 6.2)"
            },
        });
    }
    let abi = usable_abi(kernel);
    let full = AccessFs::from_all(abi);
    let mut spec = Spec {
        abi,
        needed,
        handled_fs: full,
        // No TCP bind or connect of the command's own: with network `none`, and with a
        // mediated door (`proxy` where no namespace is made), whose every connection the
        // supervisor makes for it.
        handled_net: if abi >= ABI::V4
            && (req.network == NetworkMode::None
                || (req.network == NetworkMode::Proxy && req.mount_ns == MountNs::Shared))
        {
            AccessNet::BindTcp | AccessNet::ConnectTcp
        } else {
            BitFlags::EMPTY
        },
        scopes: Scope::from_all(abi),
        rules: Vec::new(),
        deny_unix_sockets: abi < ABI::V9,
        fixed_dirs: Vec::new(),
        writable_mounts: Vec::new(),
        readonly_mounts: Vec::new(),
        pinned_dirs: Vec::new(),
    };

    for g in system.iter() {
        let access = match g.access {
            SysAccess::Read => read_rights(),
            SysAccess::ReadNoExec => AccessFs::ReadFile | AccessFs::ReadDir,
            SysAccess::Device => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
            SysAccess::DeviceRead => AccessFs::ReadFile.into(),
        };
        spec.rules.push(PathRule {
            path: g.path.clone(),
            access: fit(access & full, g.kind, abi),
            why: Why::System,
        });
    }

    // Carve-outs first: what cannot be enforced is refused before any rule matters.
    let carveouts = outermost(req.carveouts);
    for w in req.writable {
        for c in &carveouts {
            if c.starts_with(w) && req.mount_ns == MountNs::Shared {
                return Err(Error::CarveoutUnderWritable {
                    writable: w.clone(),
                    carveout: c.clone(),
                });
            }
            if w.starts_with(c) {
                return Err(Error::WritableInCarveout {
                    writable: w.clone(),
                    carveout: c.clone(),
                });
            }
        }
    }
    // The sandbox's own runs directory is not walked: what is in it is made by hosts
    // (layers, copies, bundles), which link nothing out of it, and a walk would read every
    // other run's tree (a copy of a whole workspace, an overlay's work directory another
    // user's namespace made unreadable).
    let runs = sandbox_core::runs_dir().canonicalize().ok();
    for c in carveouts.iter().filter(|c| Some(*c) != runs.as_ref()) {
        check_links(fs, c)?;
    }

    if req.mount_ns == MountNs::Private {
        let mut writable = vec![req.workspace.to_path_buf()];
        writable.extend(req.writable.iter().cloned());
        spec.writable_mounts = outermost(&writable);
    }
    if carveouts.is_empty() || req.mount_ns == MountNs::Private {
        spec.pinned_dirs = pinned(&carveouts, req.workspace, req.writable);
        spec.readonly_mounts = carveouts;
        spec.rules.push(PathRule {
            path: req.workspace.to_path_buf(),
            access: full,
            why: Why::Workspace,
        });
    } else {
        spec.rules.push(PathRule {
            path: req.workspace.to_path_buf(),
            access: read_rights(),
            why: Why::Workspace,
        });
        if !carveouts.iter().any(|c| c == req.workspace) {
            split(fs, req.workspace, &carveouts, abi, &mut spec)?;
        }
    }

    for p in req.read_only {
        let kind = stat_kind(fs, p)?;
        if req.hidden.iter().any(|h| h.starts_with(p)) {
            split_read(fs, p, req.hidden, abi, &mut spec)?;
            continue;
        }
        spec.rules.push(PathRule {
            path: p.clone(),
            access: fit(read_rights(), kind, abi),
            why: Why::ReadOnly,
        });
    }
    for p in req.writable {
        let kind = stat_kind(fs, p)?;
        spec.rules.push(PathRule {
            path: p.clone(),
            access: fit(full, kind, abi),
            why: Why::Writable,
        });
    }

    // Rules only add access: any rule above a hidden path (the workspace, a writable path,
    // another read grant) would show it, so the request is refused.
    for h in req.hidden {
        if let Some(r) = spec.rules.iter().find(|r| {
            h.starts_with(&r.path) && r.access.intersects(AccessFs::ReadFile | AccessFs::ReadDir)
        }) {
            return Err(Error::HiddenUnderGrant {
                grant: r.path.clone(),
                hidden: h.clone(),
            });
        }
    }

    if !covered(&spec.rules, req.program) {
        let kind = stat_kind(fs, req.program)?;
        spec.rules.push(PathRule {
            path: req.program.to_path_buf(),
            access: fit(AccessFs::ReadFile | AccessFs::Execute, kind, abi),
            why: Why::Program,
        });
    }

    if req.network == NetworkMode::Full {
        if let Ok(target) = fs.canonical(Path::new("/etc/resolv.conf")) {
            let readable = fs
                .stat(&target)
                .map(|m| m.kind == Kind::File && (!req.host_is_root || m.mode & 0o004 != 0))
                .unwrap_or(false);
            if readable && !covered(&spec.rules, &target) {
                spec.rules.push(PathRule {
                    path: target,
                    access: AccessFs::ReadFile.into(),
                    why: Why::Resolver,
                });
            }
        }
    }
    Ok(spec)
}

/// The rights a root host's read layer handles: reading, and `REFER`. Landlock denies
/// every rename or link across directories (`EXDEV`) in a layer that does not grant
/// `REFER` on both sides, whether or not it handles the right; so the read layer handles
/// it and grants it exactly where the run's own layer does ([`refer_rules`]), or a
/// `cargo build` fails moving its `.rmeta` out of a temp directory.
fn read_layer_rights() -> BitFlags<AccessFs> {
    read_rights() | AccessFs::Refer
}

/// The first layer of a root host: read rights only, granted on `view` (the unprivileged
/// view, [`crate::system::unprivileged_view`]); `REFER` is handled but granted only by the
/// run's [`refer_rules`].
pub(crate) fn read_layer(view: &[(PathBuf, Kind)], abi: ABI) -> Spec {
    Spec {
        abi,
        needed: ROOT_ABI,
        handled_fs: read_layer_rights(),
        handled_net: BitFlags::EMPTY,
        scopes: BitFlags::EMPTY,
        rules: view
            .iter()
            .map(|(path, kind)| PathRule {
                path: path.clone(),
                access: fit(read_rights(), *kind, abi),
                why: Why::System,
            })
            .collect(),
        deny_unix_sockets: false,
        fixed_dirs: Vec::new(),
        writable_mounts: Vec::new(),
        readonly_mounts: Vec::new(),
        pinned_dirs: Vec::new(),
    }
}

/// The rules a root host's read layer must add for this run: the run's own grants
/// (workspace, writable paths, program, resolver) that the cached layer does not cover,
/// such as a workspace in a top-level directory created after the layer was built. The
/// run's system grants and read-only paths are never added: the layer has walked them,
/// and taking their root-only parts away is its purpose.
pub(crate) fn uncovered(layer: &Spec, run: &Spec) -> Vec<PathRule> {
    run.rules
        .iter()
        .filter(|r| r.why != Why::System && r.why != Why::ReadOnly)
        .filter_map(|r| {
            let need = r.access & read_rights();
            let covered = layer
                .rules
                .iter()
                .any(|l| l.access.contains(need) && r.path.starts_with(&l.path));
            (!need.is_empty() && !covered).then(|| PathRule {
                path: r.path.clone(),
                access: need,
                why: r.why,
            })
        })
        .collect()
}

/// The `REFER` rules a root host's read layer adds for this run: one for each writable
/// grant of the run's own layer (the workspace, its writable parts, the writable paths)
/// that grants `REFER` there, and nothing else. A rename or link then passes the read
/// layer only between two writable places, which the run's own layer demands as well:
/// the intersection grants nothing the run's layer did not.
pub(crate) fn refer_rules(run: &Spec) -> Vec<PathRule> {
    run.rules
        .iter()
        .filter(|r| matches!(r.why, Why::Workspace | Why::WorkspacePart | Why::Writable))
        .filter(|r| r.access.contains(AccessFs::Refer))
        .map(|r| PathRule {
            path: r.path.clone(),
            access: AccessFs::Refer.into(),
            why: r.why,
        })
        .collect()
}

impl Spec {
    /// What this ruleset enforces, for the outcome's effective policy.
    pub fn record(&self, kernel: ABI) -> Record {
        let mut r = Record::new();
        r.push(Landlock::Ruleset {
            abi: self.abi as u32,
            kernel_abi: kernel as u32,
            needed_abi: self.needed as u32,
            fs_rights: self.handled_fs.len(),
            rules: self.rules.len(),
        });
        if !self.handled_net.is_empty() {
            r.push(Landlock::TcpDenied);
        }
        if !self.scopes.is_empty() {
            r.push(Landlock::Scopes);
        }
        if self.deny_unix_sockets {
            r.push(Seccomp::UnixSocketsDenied {
                landlock_abi: self.abi as u32,
            });
        }
        if !self.writable_mounts.is_empty()
            && !self.writable_mounts.iter().any(|w| w == Path::new("/"))
        {
            r.push(Namespaces::MountsReadOnly);
        }
        if !self.readonly_mounts.is_empty() {
            r.push(Namespaces::CarveoutsBound {
                dirs: self.readonly_mounts.clone(),
            });
        }
        if !self.fixed_dirs.is_empty() {
            r.push(Landlock::CarveoutsFixed {
                dirs: self.fixed_dirs.clone(),
            });
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsview::fake::FakeFs;
    use crate::system::{resolve, SYSTEM_PATHS};

    fn host() -> FakeFs {
        let mut fs = FakeFs::new();
        fs.file("/usr/bin/true", 0o755)
            .file("/usr/lib/libc.so.6", 0o644)
            .symlink("/bin", "/usr/bin")
            .file("/etc/passwd", 0o644)
            .dir("/proc", 0o555)
            .special("/dev/null", 0o666)
            .special("/dev/urandom", 0o666)
            .dir("/ws/src", 0o755)
            .file("/ws/src/main.rs", 0o644)
            .file("/ws/README", 0o644)
            .dir("/ws/.git/hooks", 0o755)
            .file("/ws/.git/hooks/pre-commit", 0o755)
            .file("/ws/.git/config", 0o644)
            .dir("/ws/.git/objects", 0o755)
            .file("/ws/.git/HEAD", 0o644)
            .symlink("/ws/link", "/etc")
            .dir("/data", 0o755)
            .dir("/out", 0o755)
            .file("/home/me/tool", 0o755);
        fs
    }

    fn req<'a>(carveouts: &'a [PathBuf], writable: &'a [PathBuf]) -> Request<'a> {
        Request {
            workspace: Path::new("/ws"),
            carveouts,
            read_only: &[],
            hidden: &[],
            writable,
            program: Path::new("/usr/bin/true"),
            network: NetworkMode::None,
            host_is_root: false,
            mount_ns: MountNs::Shared,
        }
    }

    fn system(fs: &FakeFs) -> SystemView {
        SystemView::from_grants(resolve(fs, SYSTEM_PATHS))
    }

    fn rule<'a>(s: &'a Spec, p: &str) -> Option<&'a PathRule> {
        s.rules.iter().find(|r| r.path == Path::new(p))
    }

    fn p(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn plain_workspace_gets_every_right_and_system_paths_read() {
        let fs = host();
        let s = spec(&req(&[], &[]), &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(s.abi, ABI::V7);
        assert_eq!(s.needed, ABI::V3);
        assert_eq!(s.handled_fs, AccessFs::from_all(ABI::V7));
        assert_eq!(rule(&s, "/ws").unwrap().access, AccessFs::from_all(ABI::V7));
        let usr = rule(&s, "/usr").unwrap();
        assert_eq!(usr.access, read_rights());
        assert!(!usr.access.contains(AccessFs::WriteFile));
        // /bin is /usr/bin: no rule of its own.
        assert!(rule(&s, "/usr/bin").is_none() && rule(&s, "/bin").is_none());
        let proc = rule(&s, "/proc").unwrap();
        assert!(!proc
            .access
            .intersects(AccessFs::WriteFile | AccessFs::Execute));
        let null = rule(&s, "/dev/null").unwrap();
        assert_eq!(
            null.access,
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate
        );
        assert_eq!(
            rule(&s, "/dev/urandom").unwrap().access,
            BitFlags::from(AccessFs::ReadFile)
        );
        // Nothing for /home, /tmp, /data: denied.
        for denied in ["/home", "/home/me", "/tmp", "/data", "/out"] {
            assert!(
                !s.rules
                    .iter()
                    .any(|r| Path::new(denied).starts_with(&r.path)),
                "{denied}"
            );
        }
        assert!(s.fixed_dirs.is_empty());
    }

    #[test]
    fn network_knob_handles_tcp_only_without_network_and_from_abi_4() {
        let fs = host();
        let mut r = req(&[], &[]);
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(s.handled_net, AccessNet::BindTcp | AccessNet::ConnectTcp);
        let s = spec(&r, &system(&fs), ABI::V3, &fs).unwrap();
        assert!(s.handled_net.is_empty());
        for mode in [NetworkMode::Loopback, NetworkMode::Full, NetworkMode::Proxy] {
            r.network = mode;
            // In a namespace of its own: the proxy is its private loopback's.
            r.mount_ns = MountNs::Private;
            let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
            assert!(s.handled_net.is_empty(), "{mode}");
        }
        // A mediated door: no namespace, so the command's own TCP is denied outright.
        r.network = NetworkMode::Proxy;
        r.mount_ns = MountNs::Shared;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(s.handled_net, AccessNet::BindTcp | AccessNet::ConnectTcp);
    }

    #[test]
    fn full_network_grants_the_resolver_file_outside_etc() {
        let mut fs = host();
        fs.file("/run/resolve/stub-resolv.conf", 0o644)
            .symlink("/etc/resolv.conf", "/run/resolve/stub-resolv.conf");
        let mut r = req(&[], &[]);
        r.network = NetworkMode::Full;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        let rr = rule(&s, "/run/resolve/stub-resolv.conf").unwrap();
        assert_eq!(rr.access, BitFlags::from(AccessFs::ReadFile));
        assert_eq!(rr.why, Why::Resolver);
        r.network = NetworkMode::None;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(rule(&s, "/run/resolve/stub-resolv.conf").is_none());
    }

    #[test]
    fn scopes_and_unix_socket_denial_follow_the_abi() {
        let fs = host();
        let r = req(&[], &[]);
        let s = spec(&r, &system(&fs), ABI::V5, &fs).unwrap();
        assert!(s.scopes.is_empty());
        assert!(s.deny_unix_sockets);
        let s = spec(&r, &system(&fs), ABI::V6, &fs).unwrap();
        assert_eq!(s.scopes, Scope::AbstractUnixSocket | Scope::Signal);
        assert!(s.deny_unix_sockets);
        let s = spec(&r, &system(&fs), ABI::V9, &fs).unwrap();
        assert!(!s.deny_unix_sockets);
        assert!(s.handled_fs.contains(AccessFs::ResolveUnix));
        assert!(rule(&s, "/ws")
            .unwrap()
            .access
            .contains(AccessFs::ResolveUnix));
        // A kernel newer than the backend knows is used at the newest known ABI.
        let s = spec(&r, &system(&fs), ABI::V10, &fs).unwrap();
        assert_eq!(s.abi, NEWEST_ABI);
        assert_eq!(s.handled_fs, AccessFs::from_all(NEWEST_ABI));
    }

    #[test]
    fn too_old_a_kernel_is_refused_with_the_needed_abi() {
        let fs = host();
        let mut r = req(&[], &[]);
        let e = spec(&r, &system(&fs), ABI::V2, &fs).unwrap_err();
        assert!(
            matches!(
                e,
                Error::AbiTooOld {
                    kernel: ABI::V2,
                    needed: ABI::V3,
                    ..
                }
            ),
            "{e}"
        );
        r.host_is_root = true;
        let e = spec(&r, &system(&fs), ABI::V5, &fs).unwrap_err();
        assert!(
            matches!(
                e,
                Error::AbiTooOld {
                    needed: ABI::V6,
                    ..
                }
            ),
            "{e}"
        );
        assert!(spec(&r, &system(&fs), ABI::V6, &fs).is_ok());
    }

    #[test]
    fn read_only_and_writable_paths_get_their_rights_fitted_to_files() {
        let mut fs = host();
        fs.file("/data/one.csv", 0o644);
        let mut r = req(&[], &[]);
        let ro = p(&["/data", "/data/one.csv"]);
        let rw = p(&["/out"]);
        r.read_only = &ro;
        r.writable = &rw;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(rule(&s, "/data").unwrap().access, read_rights());
        assert_eq!(
            rule(&s, "/data/one.csv").unwrap().access,
            AccessFs::ReadFile | AccessFs::Execute
        );
        assert_eq!(
            rule(&s, "/out").unwrap().access,
            AccessFs::from_all(ABI::V7)
        );
    }

    #[test]
    fn a_program_outside_every_grant_gets_a_rule_for_that_file_only() {
        let fs = host();
        let mut r = req(&[], &[]);
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(!s.rules.iter().any(|x| x.why == Why::Program));
        r.program = Path::new("/home/me/tool");
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        let pr = rule(&s, "/home/me/tool").unwrap();
        assert_eq!(pr.access, AccessFs::ReadFile | AccessFs::Execute);
        assert!(rule(&s, "/home/me").is_none());
    }

    #[test]
    fn carveouts_split_the_workspace_and_fix_the_directories_on_the_way() {
        let fs = host();
        let c = p(&["/ws/.git/hooks", "/ws/.git/config"]);
        let s = spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).unwrap();
        let full = AccessFs::from_all(ABI::V7);
        // The workspace as a whole: read only.
        assert_eq!(rule(&s, "/ws").unwrap().access, read_rights());
        // Siblings of the way: writable as a whole.
        assert_eq!(rule(&s, "/ws/src").unwrap().access, full);
        assert_eq!(rule(&s, "/ws/.git/objects").unwrap().access, full);
        // Files in fixed directories: writable, file rights only.
        assert_eq!(
            rule(&s, "/ws/README").unwrap().access,
            full & AccessFs::from_file(ABI::V7)
        );
        assert!(rule(&s, "/ws/.git/HEAD").is_some());
        // The carve-outs and the way to them: no write rule at all.
        for ro in ["/ws/.git", "/ws/.git/hooks", "/ws/.git/config"] {
            assert!(
                !s.rules.iter().any(|r| Path::new(ro).starts_with(&r.path)
                    && r.access.contains(AccessFs::WriteFile)),
                "{ro} writable"
            );
        }
        // A symlink gets no rule (its target is judged on its own).
        assert!(rule(&s, "/ws/link").is_none() && rule(&s, "/etc").is_some());
        assert_eq!(s.fixed_dirs, p(&["/ws", "/ws/.git"]));
        // No write rule reaches inside a carve-out, whatever the order of the rules.
        for r in &s.rules {
            if r.access.contains(AccessFs::WriteFile) {
                assert!(!c.iter().any(|c| c.starts_with(&r.path)), "{r:?}");
            }
        }
    }

    #[test]
    fn with_mounts_the_workspace_keeps_every_right_and_the_carveouts_are_mounted() {
        let fs = host();
        let c = p(&["/ws/.git/hooks", "/ws/.git/config", "/ws/.git"]);
        let mut r = req(&c, &[]);
        r.mount_ns = MountNs::Private;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(rule(&s, "/ws").unwrap().access, AccessFs::from_all(ABI::V7));
        // Only the outermost carve-out needs a mount (it is recursive); the workspace
        // root cannot be moved (its parent is not writable): nothing pinned.
        assert_eq!(s.readonly_mounts, p(&["/ws/.git"]));
        assert_eq!(s.writable_mounts, p(&["/ws"]));
        assert!(s.pinned_dirs.is_empty());
        let c2 = p(&["/ws/.git/hooks", "/ws/src"]);
        let mut r = req(&c2, &[]);
        r.mount_ns = MountNs::Private;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(s.pinned_dirs, p(&["/ws/.git"]));
        assert!(s.fixed_dirs.is_empty());
        assert!(!s.rules.iter().any(|x| x.why == Why::WorkspacePart));
        // A writable path around a carve-out is fine: the mount still holds, and every
        // directory on the way from the writable path is pinned.
        let w = p(&["/"]);
        let c3 = p(&["/ws/.git/hooks"]);
        let mut r = req(&c3, &w);
        r.mount_ns = MountNs::Private;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert_eq!(s.pinned_dirs, p(&["/ws", "/ws/.git"]));
        // Only the outermost writable tree is bound back.
        assert_eq!(s.writable_mounts, p(&["/"]));
        // A hard link or a writable path inside is refused all the same.
        let mut fs = host();
        fs.linked_file("/ws/.git/hooks/x", 2);
        let mut r = req(&c, &[]);
        r.mount_ns = MountNs::Private;
        let e = spec(&r, &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::HardLinked { .. }), "{e}");
        let fs = host();
        let w = p(&["/ws/.git/objects"]);
        let mut r = req(&c, &w);
        r.mount_ns = MountNs::Private;
        let e = spec(&r, &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::WritableInCarveout { .. }), "{e}");
    }

    #[test]
    fn with_a_mount_namespace_the_writable_places_are_bound_back_and_nothing_else() {
        let fs = host();
        let w = p(&["/out", "/data"]);
        let mut r = req(&[], &w);
        r.mount_ns = MountNs::Private;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(s.readonly_mounts.is_empty() && s.pinned_dirs.is_empty());
        assert_eq!(s.writable_mounts, p(&["/ws", "/out", "/data"]));
        // Without one: nothing mounted.
        let s = spec(&req(&[], &w), &system(&fs), ABI::V7, &fs).unwrap();
        assert!(s.writable_mounts.is_empty() && s.readonly_mounts.is_empty());
    }

    #[test]
    fn a_carveout_of_the_whole_workspace_makes_it_read_only() {
        let fs = host();
        let c = p(&["/ws"]);
        let s = spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).unwrap();
        assert!(s
            .rules
            .iter()
            .filter(|r| r.path.starts_with("/ws"))
            .all(|r| r.access == read_rights()));
        assert!(s.fixed_dirs.is_empty());
    }

    #[test]
    fn nested_carveouts_are_covered_by_the_outer_one() {
        let fs = host();
        let c = p(&["/ws/.git", "/ws/.git/hooks"]);
        let s = spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).unwrap();
        assert!(rule(&s, "/ws/.git/objects").is_none());
        assert_eq!(s.fixed_dirs, p(&["/ws"]));
    }

    #[test]
    fn writable_paths_overlapping_a_carveout_are_refused() {
        let fs = host();
        let c = p(&["/ws/.git/hooks"]);
        let w = p(&["/"]);
        let e = spec(&req(&c, &w), &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::CarveoutUnderWritable { .. }), "{e}");
        let w = p(&["/ws/.git/hooks"]);
        let e = spec(&req(&c, &w), &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::CarveoutUnderWritable { .. }), "{e}");
        let mut fs = host();
        fs.dir("/ws/.git/hooks/sub", 0o755);
        let w = p(&["/ws/.git/hooks/sub"]);
        let e = spec(&req(&c, &w), &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::WritableInCarveout { .. }), "{e}");
        // Disjoint is fine.
        let w = p(&["/out"]);
        assert!(spec(&req(&c, &w), &system(&fs), ABI::V7, &fs).is_ok());
    }

    #[test]
    fn hard_linked_files_in_a_carveout_are_refused() {
        let mut fs = host();
        fs.linked_file("/ws/.git/hooks/post-checkout", 2);
        let c = p(&["/ws/.git/hooks"]);
        let e = spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(
            matches!(&e, Error::HardLinked { file, links: 2, .. } if file.ends_with("post-checkout")),
            "{e}"
        );
        let mut fs = host();
        fs.linked_file("/ws/.git/config", 3);
        let c = p(&["/ws/.git/config"]);
        let e = spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::HardLinked { links: 3, .. }), "{e}");
        // A hard-linked file elsewhere in the workspace does not matter.
        let mut fs = host();
        fs.linked_file("/ws/src/lib.rs", 2);
        let c = p(&["/ws/.git/hooks"]);
        assert!(spec(&req(&c, &[]), &system(&fs), ABI::V7, &fs).is_ok());
    }

    #[test]
    fn missing_named_paths_are_an_error_not_a_silent_skip() {
        let fs = host();
        let mut r = req(&[], &[]);
        let ro = p(&["/gone"]);
        r.read_only = &ro;
        let e = spec(&r, &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::Stat { .. }), "{e}");
    }

    #[test]
    fn the_read_layer_handles_only_reads_and_adds_what_a_run_needs_beyond_it() {
        let fs = host();
        let view = vec![
            (PathBuf::from("/usr"), Kind::Dir),
            (PathBuf::from("/etc/passwd"), Kind::File),
            (PathBuf::from("/ws"), Kind::Dir),
            (PathBuf::from("/proc"), Kind::Dir),
            (PathBuf::from("/dev"), Kind::Dir),
        ];
        let layer = read_layer(&view, ABI::V7);
        assert_eq!(layer.handled_fs, read_layer_rights());
        assert!(layer.handled_net.is_empty() && layer.scopes.is_empty());
        assert_eq!(
            rule(&layer, "/etc/passwd").unwrap().access,
            AccessFs::ReadFile | AccessFs::Execute
        );
        // A run in /ws with its system grants: nothing to add (the run's /etc grant is
        // the layer's to narrow, never to widen).
        let r = req(&[], &[]);
        let run = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(uncovered(&layer, &run).is_empty());
        // A writable path and a program the layer does not cover are added, reads only; a
        // read-only path is not (the layer walked it).
        let mut r = req(&[], &[]);
        let ro = p(&["/data"]);
        let rw = p(&["/out"]);
        r.read_only = &ro;
        r.writable = &rw;
        r.program = Path::new("/home/me/tool");
        let run = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        let extra = uncovered(&layer, &run);
        let got: Vec<_> = extra.iter().map(|x| x.path.display().to_string()).collect();
        assert_eq!(got, ["/out", "/home/me/tool"]);
        assert!(extra.iter().all(|x| (x.access & !read_rights()).is_empty()));
    }

    #[test]
    fn a_read_grant_is_split_around_hidden_credentials_or_refused() {
        let mut fs = host();
        fs.dir("/home/me/.cargo/bin", 0o755)
            .file("/home/me/.cargo/bin/cargo", 0o755)
            .file("/home/me/.cargo/credentials.toml", 0o600)
            .file("/home/me/.cargo/config.toml", 0o644)
            .dir("/home/me/.cargo/registry", 0o755);
        let mut r = req(&[], &[]);
        let ro = p(&["/home/me/.cargo"]);
        let hidden = p(&["/home/me/.cargo/credentials.toml"]);
        r.read_only = &ro;
        r.hidden = &hidden;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(rule(&s, "/home/me/.cargo").is_none());
        assert!(rule(&s, "/home/me/.cargo/credentials.toml").is_none());
        for granted in [
            "/home/me/.cargo/bin",
            "/home/me/.cargo/config.toml",
            "/home/me/.cargo/registry",
        ] {
            let g = rule(&s, granted).unwrap();
            assert!(g.access.contains(AccessFs::ReadFile), "{granted}");
        }
        assert!(!s
            .rules
            .iter()
            .any(|r| Path::new("/home/me/.cargo/credentials.toml").starts_with(&r.path)));
        // Every read grant above it is split the same way.
        let wide = p(&["/home/me/.cargo", "/home/me"]);
        r.read_only = &wide;
        let s = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        assert!(!s
            .rules
            .iter()
            .any(|r| Path::new("/home/me/.cargo/credentials.toml").starts_with(&r.path)));
        // A writable grant above it would show it: refused.
        let rw = p(&["/home/me"]);
        r.read_only = &ro;
        r.writable = &rw;
        let e = spec(&r, &system(&fs), ABI::V7, &fs).unwrap_err();
        assert!(matches!(e, Error::HiddenUnderGrant { .. }), "{e}");
    }

    #[test]
    fn the_read_layer_grants_refer_only_where_the_run_may_write() {
        let fs = host();
        let layer = read_layer(&[(PathBuf::from("/ws"), Kind::Dir)], ABI::V7);
        assert!(layer.handled_fs.contains(AccessFs::Refer));
        assert!(layer
            .rules
            .iter()
            .all(|r| !r.access.contains(AccessFs::Refer)));
        // A private mount namespace: the workspace and a writable directory, never a
        // read-only path, a system path or the program.
        let mut r = req(&[], &[]);
        let ro = p(&["/data"]);
        let rw = p(&["/out"]);
        r.read_only = &ro;
        r.writable = &rw;
        r.program = Path::new("/home/me/tool");
        r.mount_ns = MountNs::Private;
        let run = spec(&r, &system(&fs), ABI::V7, &fs).unwrap();
        let refer = refer_rules(&run);
        let got: Vec<_> = refer.iter().map(|x| x.path.display().to_string()).collect();
        assert_eq!(got, ["/ws", "/out"]);
        assert!(refer
            .iter()
            .all(|x| x.access == BitFlags::from(AccessFs::Refer)));
        // Split rules: the workspace itself is fixed (no REFER), its writable parts keep it.
        let carve = p(&["/ws/.git/hooks"]);
        let run = spec(&req(&carve, &[]), &system(&fs), ABI::V7, &fs).unwrap();
        let got: Vec<_> = refer_rules(&run)
            .iter()
            .map(|x| x.path.display().to_string())
            .collect();
        assert!(!got.contains(&"/ws".to_string()) && got.contains(&"/ws/src".to_string()));
        assert!(!got.iter().any(|g| g.starts_with("/ws/.git/hooks")));
    }

    #[test]
    fn system_rules_never_grant_more_than_read_except_devices() {
        let fs = host();
        let s = spec(&req(&[], &[]), &system(&fs), ABI::V7, &fs).unwrap();
        for r in s.rules.iter().filter(|r| r.why == Why::System) {
            if !r.path.starts_with("/dev") {
                assert!(
                    (r.access & !read_rights()).is_empty(),
                    "{} gets {:?}",
                    r.path.display(),
                    r.access
                );
            }
        }
    }
}
