//! The policy: a plan and the host's facts in, an OCI bundle's `config.json` and runsc's
//! arguments out. Pure: it touches nothing (the one question it asks of the filesystem,
//! whether a source is a directory, comes in as a function), so every knob is unit-tested
//! without spawning.
//!
//! # The sandbox's filesystem
//!
//! The root is a directory of our own, read-only, holding only mount points and the
//! host's top-level symlinks (`/bin -> usr/bin` on a merged-`/usr` host). On it, shallowest
//! first:
//!
//! - the system read-only: `/usr`, `/etc`, `/opt`, `/nix/store` and the `/bin`, `/sbin`,
//!   `/lib*` that are real directories on the host;
//! - gVisor's own `/proc` (the sandbox's processes only), `/dev` and `/sys`;
//! - private tmpfs on `/tmp` (sized to the memory limit when there is one), `/home`,
//!   `/root` and `/run`;
//! - the caller's paths: extra read-only paths, the workspace and extra writable paths
//!   writable, carve-outs read-only over them; the program's own file read-only when
//!   nothing else shows it (at the name it was given, when that is hidden).
//!
//! A path named more than once gets one mount, the one the caller meant: a carve-out (a
//! restriction) over a writable grant over a read-only grant; a caller's path replaces a
//! system mount at the same place. The host root, `/proc`, `/sys` (and anything in them)
//! and `/dev` itself cannot be named: the sandbox has its own.
//!
//! # The process
//!
//! `argv[0]` exactly as given (the Sentry resolves it inside, to the program the host
//! resolved: see `program_by_name`) with the plan's arguments, environment and working
//! directory; no capabilities in any set, `noNewPrivileges`; the uid of [`Identity`];
//! the process cap, the open-files limit and (without a cgroup) the memory limit as
//! rlimits that the Sentry enforces for the sandbox's own processes; core's one syscall
//! table as an OCI seccomp filter, applied by the Sentry (see [`SYSCALL_POLICY`]).

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use sandbox_core::{NetworkMode, Plan};
use sandbox_host::layout::{depth, MountTable, Origin, SystemEntry};
use sandbox_host::syscalls::{denials, oci, Rule, SyscallPolicy};
use serde_json::{json, Value};

use crate::error::GvisorError;

/// The table's policy here, as for docker's containers: the Sentry is the init of a pid
/// namespace of its own holding the whole tree, so a new session or process group
/// escapes no kill (`setsid` allowed, as on bwrap and docker); the network is gVisor's
/// own stack (only its loopback, or the host's with `full`), so sockets are not filtered.
///
/// The Sentry answers the command's calls with its own kernel, never the host's, so
/// what the table denies is not a host escape here either way; it is denied so that the
/// command meets the same kernel surface on every backend (no nested user namespaces, no
/// io_uring, no ptrace, no keyring), and the setuid rules still keep a setuid file off
/// the host's disk. Checked on this runsc build (Debian's 2022 one): it applies the
/// masked argument comparisons (`clone`'s namespace flags, a mode's setuid bits) but not
/// `errnoRet` nor `defaultErrnoRet` (see [`profile`]), as `kernel::surface_refused` and
/// the smoke tests show.
pub(crate) const SYSCALL_POLICY: SyscallPolicy = SyscallPolicy {
    network: NetworkMode::Full,
    mediated: false,
};

/// Core's allow-list for [`SYSCALL_POLICY`], as docker's engine gets it, save the calls
/// the table refuses with `ENOSYS` so that the C library falls back (`clone3`, `openat2`):
/// this runsc turns every refusal into `EPERM` (it ignores `errnoRet` and
/// `defaultErrnoRet`), and glibc falls back from `clone3` to `clone` only on `ENOSYS`, so
/// refusing it here would break every thread and `posix_spawn`. The Sentry does not
/// implement `clone3` and answers `ENOSYS` itself (this runsc cannot name `openat2`, so
/// the filter still refuses that one, with `EPERM`), which the smoke test
/// `the_syscall_table_applies_with_its_errnos` and the case `kernel::surface_refused`
/// check: a runsc that implemented `clone3` would fail them before its namespace flags
/// went unfiltered. For the same reason a call no rule names (one this runsc cannot name,
/// which is most calls numbered from 427 on, or a number past the table) gets `EPERM`, not
/// `ENOSYS`; of those the Sentry implements none, and glibc 2.36 falls back from none.
pub(crate) fn profile() -> oci::Profile {
    let mut p = oci::allow_list(&SYSCALL_POLICY);
    let fall_back: Vec<&'static str> = denials(&SYSCALL_POLICY)
        .filter(|d| d.rule == Rule::FallBack)
        .map(|d| d.name)
        .collect();
    p.syscalls.retain_mut(|r| {
        r.names.retain(|n| !fall_back.contains(n));
        !r.names.is_empty()
    });
    if let Some(allow) = p
        .syscalls
        .iter_mut()
        .find(|r| r.action == oci::Action::Allow && r.args.is_empty())
    {
        allow.names.extend(fall_back);
    }
    p
}

/// The private tmpfs directories.
const PRIVATE_TMPFS: &[&str] = &["/tmp", "/home", "/root", "/run"];

/// The uid and gid of the command inside the sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub uid: u32,
    pub gid: u32,
}

/// Who the command runs as: see the crate docs. `owner` is the workspace's owner.
///
/// - A host that is not root runs runsc rootless, whose one mapped uid is the caller:
///   the command is uid 0 *inside* (no capabilities), which is the caller on the host.
/// - A root host runs the command as the workspace's owner when that is an ordinary
///   user (group 0 replaced by `nogroup`), so what it makes belongs to that user; with a
///   root-owned workspace, as `nobody`, the workspace handed over by an idmapped mount.
pub(crate) fn identity(host_is_root: bool, owner: (u32, u32)) -> Identity {
    if !host_is_root {
        return Identity { uid: 0, gid: 0 };
    }
    let (uid, gid) = sandbox_host::idmap::root_host_identity(Some(owner));
    Identity { uid, gid }
}

/// Limits the Sentry enforces inside (see `Launch::limits_inside`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InsideLimits {
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC`.
    pub processes: Option<u64>,
    /// `RLIMIT_AS`, where no cgroup holds the memory limit.
    pub address_space: Option<u64>,
    /// The size of each private tmpfs, in bytes (the memory limit: tmpfs is memory).
    pub tmpfs_bytes: Option<u64>,
}

/// The host's layout, as the policy needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout<'a> {
    /// The system directories and how the host has each.
    pub system: &'a [(PathBuf, SystemEntry)],
    /// Caller's paths bound from elsewhere: the idmapped staging mount that hands a tree
    /// to the command's uid (destination, source).
    pub staged: &'a [(PathBuf, PathBuf)],
    /// The path the Sentry resolves `argv[0]` to (see `crate::named_path`).
    pub named: &'a Path,
}

/// Something to make in the bundle's root directory before runsc starts: a mount point
/// (the root is read-only inside, so the runtime cannot make them), or a system symlink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Skeleton {
    Dir(PathBuf),
    File(PathBuf),
    Symlink { at: PathBuf, target: PathBuf },
}

/// A bundle to write: `config.json` and the root's skeleton (paths absolute as seen
/// inside; the bundle writer puts them under its root directory).
#[derive(Clone, Debug)]
pub(crate) struct Bundle {
    pub config: Value,
    pub skeleton: Vec<Skeleton>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    RoBind,
    Bind,
    Tmpfs,
}

fn text<'a>(field: &'static str, what: &'static str, s: &'a OsStr) -> Result<&'a str, GvisorError> {
    s.to_str().ok_or_else(|| GvisorError::NotUtf8 {
        field,
        what,
        shown: s.to_string_lossy().into_owned(),
    })
}

/// Refuse caller paths the sandbox builds itself.
fn check_user_path(field: &'static str, p: &Path) -> Result<(), GvisorError> {
    let why = if p == Path::new("/") {
        Some("the host root is never bound wholesale; name the directories you need")
    } else if p.starts_with("/proc") || p.starts_with("/sys") || p == Path::new("/dev") {
        Some("the sandbox has its own /proc, /sys and /dev; the host's cannot be granted")
    } else {
        None
    };
    match why {
        Some(why) => Err(GvisorError::Path {
            field,
            path: p.to_path_buf(),
            why,
        }),
        None => Ok(()),
    }
}

/// The shared mount table (`sandbox_host::layout`) with this backend's operations.
type Table = MountTable<Op>;

/// A caller's path, bound writable or read-only by its origin.
fn grant(t: &mut Table, dest: &Path, origin: Origin) {
    let op = if origin.writable() {
        Op::Bind
    } else {
        Op::RoBind
    };
    t.caller(dest, origin, op);
}

/// The directories strictly between each carve-out and the deepest writable grant (the
/// workspace or a writable path) that holds it, shallowest first.
fn pinned_dirs(plan: &Plan) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for c in &plan.readonly_carveouts {
        let Some(root) = std::iter::once(&plan.workspace)
            .chain(&plan.writable_paths)
            .filter(|r| c.starts_with(r))
            .max_by_key(|r| depth(r))
        else {
            continue;
        };
        let Ok(rel) = c.strip_prefix(root) else {
            continue;
        };
        let mut at = root.clone();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            at.push(part);
            if !out.contains(&at) {
                out.push(at.clone());
            }
        }
    }
    out
}

/// Whether `path` shows the host's own file inside: the deepest mount over it is a bind
/// (a private tmpfs over a host path hides it).
fn shows_host(t: &Table, path: &Path) -> bool {
    matches!(t.deepest(path, |_| true), Some((_, m)) if m.op != Op::Tmpfs)
}

/// Whether a mount strictly above `path` holds it (else it sits on our own root).
fn above(t: &Table, path: &Path) -> bool {
    t.mounts
        .keys()
        .any(|d| d.as_path() != path && path.starts_with(d))
}

/// Where `path` leads inside the sandbox, following links as the kernel does (`..` after
/// a link is taken from the link's target). Each link on the way must be one the sandbox
/// shows, the host's own through a bind or a system link recreated on our root: else
/// `Err` with that link, which does not exist inside. `read_link` is the host's.
fn follow(
    t: &Table,
    system: &[(PathBuf, SystemEntry)],
    path: &Path,
    read_link: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Result<PathBuf, PathBuf> {
    // The components still to walk, the next one last.
    fn push(rest: &mut Vec<OsString>, p: &Path) {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => rest.push(n.to_owned()),
                Component::ParentDir => rest.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    let mut rest = Vec::new();
    push(&mut rest, path);
    let mut at = PathBuf::from("/");
    // The kernel's own bound on links followed in one lookup.
    let mut hops = 0;
    while let Some(c) = rest.pop() {
        if c == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&c);
        let Some(target) = read_link(&next) else {
            at = next;
            continue;
        };
        let recreated = system
            .iter()
            .any(|(p, e)| *p == next && matches!(e, SystemEntry::Symlink(_)));
        hops += 1;
        if hops > 40 || !(recreated || shows_host(t, &next)) {
            return Err(next);
        }
        if target.is_absolute() {
            at = PathBuf::from("/");
        }
        push(&mut rest, &target);
    }
    Ok(at)
}

/// Make the program's name, as given, lead to the program inside; the destination of a
/// bind of the program's file made for it, if one was.
///
/// runsc has no separate path to execute: `args[0]` is both the name the command sees
/// and the path the Sentry looks up inside (against the working directory, or on the
/// `PATH`), so that path must lead to the file the host resolved before anything runs.
/// Its directory is walked as the kernel would inside ([`follow`]); a link there the
/// sandbox does not show is refused. The name in that directory:
/// - shown (the workspace, a system directory, a granted path): the host's own entry,
///   a link kept as a link (a venv's `bin/python` next to its `pyvenv.cfg`), followed to
///   the program, whose file is granted where nothing else shows it;
/// - not shown (a tool in the caller's home, under a private tmpfs): the program's file
///   bound read-only at that name, which grants the file, not its directory.
///
/// Inside, a name on the `PATH` cannot be found earlier than on the host: every file
/// the sandbox shows is the host's at the same path.
fn program_by_name(
    table: &mut Table,
    plan: &Plan,
    layout: &Layout<'_>,
    read_link: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Result<Option<PathBuf>, GvisorError> {
    let named = layout.named;
    let refused = |link: PathBuf| GvisorError::ProgramLink {
        named: named.to_path_buf(),
        link,
        program: plan.program.clone(),
    };
    let (Some(dir), Some(name)) = (named.parent(), named.file_name()) else {
        return Err(refused(named.to_path_buf()));
    };
    let at = follow(table, layout.system, dir, read_link)
        .map_err(refused)?
        .join(name);
    if shows_host(table, &at) {
        let end = follow(table, layout.system, &at, read_link).map_err(refused)?;
        if end != plan.program {
            return Err(GvisorError::ProgramElsewhere {
                named: named.to_path_buf(),
                inside: end,
                program: plan.program.clone(),
            });
        }
        if !shows_host(table, &plan.program) {
            check_user_path("argv", &plan.program)?;
            grant(table, &plan.program, Origin::Program);
        }
        Ok(None)
    } else {
        check_user_path("argv", &at)?;
        grant(table, &at, Origin::Program);
        Ok(Some(at))
    }
}

/// The bundle for `plan`. `is_dir` says whether a host path is a directory (for the
/// kind of mount point to make); `read_link` reads a host link (`None`: not a link).
pub(crate) fn bundle(
    plan: &Plan,
    layout: Layout<'_>,
    who: Identity,
    limits: InsideLimits,
    is_dir: &dyn Fn(&Path) -> bool,
    read_link: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Result<Bundle, GvisorError> {
    let mut table = Table::default();
    let mut skeleton = Vec::new();
    for (path, entry) in layout.system {
        match entry {
            SystemEntry::Dir => table.system(path, Op::RoBind),
            SystemEntry::Symlink(target) => skeleton.push(Skeleton::Symlink {
                at: path.clone(),
                target: target.clone(),
            }),
            SystemEntry::Absent => {}
        }
    }
    for t in PRIVATE_TMPFS {
        table.system(*t, Op::Tmpfs);
    }
    let lists: [(&'static str, Origin, &[PathBuf]); 4] = [
        (
            "read_only_paths",
            Origin::ReadOnlyPath,
            &plan.read_only_paths,
        ),
        ("writable_paths", Origin::Writable, &plan.writable_paths),
        (
            "workspace",
            Origin::Workspace,
            std::slice::from_ref(&plan.workspace),
        ),
        (
            "readonly_carveouts",
            Origin::Carveout,
            &plan.readonly_carveouts,
        ),
    ];
    for (field, origin, paths) in lists {
        for p in paths {
            check_user_path(field, p)?;
            grant(&mut table, p, origin);
        }
    }
    // Each directory between a writable grant and a carve-out in it is bound onto itself,
    // writable: a mount point cannot be renamed, so the command cannot move it away with
    // the carve-out in it and make its own in its place (`mv .git x; mkdir -p .git/hooks`).
    // Mount order is by depth, so these land before the carve-outs on top of them.
    // A pin inside a tree handed over by an idmapped staging mount is bound from the same
    // place in it, so its files stay the command's to write.
    let mut pinned = Vec::new();
    for d in pinned_dirs(plan) {
        if !table.mounts.contains_key(&d) && is_dir(&d) {
            grant(&mut table, &d, Origin::Workspace);
            let staged = layout
                .staged
                .iter()
                .filter(|(at, _)| d.starts_with(at))
                .max_by_key(|(at, _)| depth(at))
                .and_then(|(at, from)| Some(from.join(d.strip_prefix(at).ok()?)));
            if let Some(from) = staged {
                pinned.push((d, from));
            }
        }
    }
    // The program, by the name it was given: `args[0]` is `argv[0]` as given, which the
    // Sentry resolves inside (see `program_by_name`).
    let named_bind = program_by_name(&mut table, plan, &layout, read_link)?;

    // `/dev/shm` is a writable tmpfs of the Sentry's: without a size it is unbounded (as
    // the class 3 found on the other backends), so it gets the memory limit too.
    let mut shm = vec![
        "nosuid".to_owned(),
        "nodev".into(),
        "noexec".into(),
        "mode=1777".into(),
    ];
    if let Some(b) = limits.tmpfs_bytes {
        shm.push(format!("size={b}"));
    }
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "noexec", "mode=755"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "tmpfs", "options": shm}),
    ];
    for (dest, m) in table.ordered() {
        let d = text("mounts", "a path", dest.as_os_str())?;
        let entry = match m.op {
            Op::Tmpfs => {
                let mut options = vec!["nosuid".to_owned(), "nodev".into(), "mode=1777".into()];
                if let Some(b) = limits.tmpfs_bytes {
                    options.push(format!("size={b}"));
                }
                json!({"destination": d, "type": "tmpfs", "source": "tmpfs", "options": options})
            }
            Op::RoBind | Op::Bind => {
                let rw = if m.op == Op::Bind { "rw" } else { "ro" };
                let source = match layout
                    .staged
                    .iter()
                    .chain(&pinned)
                    .find(|(at, _)| at == dest)
                {
                    Some((_, from)) => text("mounts", "a path", from.as_os_str())?,
                    None if named_bind.as_deref() == Some(dest.as_path()) => {
                        text("argv", "the program", plan.program.as_os_str())?
                    }
                    None => d,
                };
                json!({"destination": d, "type": "bind", "source": source,
                       "options": ["rbind", rw, "nosuid", "nodev"]})
            }
        };
        mounts.push(entry);
        // Mount points on our own (read-only) root are made in the bundle beforehand.
        if !above(&table, dest) {
            let mut parents: Vec<PathBuf> = dest
                .ancestors()
                .skip(1)
                .filter(|a| depth(a) > 0)
                .map(Path::to_path_buf)
                .collect();
            parents.reverse();
            for a in parents {
                let s = Skeleton::Dir(a);
                if !skeleton.contains(&s) {
                    skeleton.push(s);
                }
            }
            let point = if m.op == Op::Tmpfs || is_dir(dest) {
                Skeleton::Dir(dest.clone())
            } else {
                Skeleton::File(dest.clone())
            };
            if !skeleton.contains(&point) {
                skeleton.push(point);
            }
        }
    }

    // Exactly as given: a launcher that looks at how it was called (a venv's
    // `bin/python`, rustup's `cargo`) sees the name, not its target.
    let mut args = vec![text("argv", "the program", &plan.argv[0])?.to_owned()];
    for a in &plan.argv[1..] {
        args.push(text("argv", "an argument", a)?.to_owned());
    }
    let env = plan
        .env
        .iter()
        .map(|(k, v)| {
            Ok(format!(
                "{}={}",
                text("env", "a variable name", k)?,
                text("env", "a variable's value", v)?
            ))
        })
        .collect::<Result<Vec<_>, GvisorError>>()?;
    let mut rlimits = Vec::new();
    for (name, v) in [
        ("RLIMIT_NOFILE", limits.open_files),
        ("RLIMIT_NPROC", limits.processes),
        ("RLIMIT_AS", limits.address_space),
    ] {
        if let Some(v) = v {
            rlimits.push(json!({"type": name, "hard": v, "soft": v}));
        }
    }
    let none: [&str; 0] = [];
    // With the full network, runsc's host network is the network namespace it runs in:
    // the spec must not ask for a new one.
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    if plan.network != NetworkMode::Full {
        namespaces.push(json!({"type": "network"}));
    }
    let config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": who.uid, "gid": who.gid},
            "args": args,
            "env": env,
            "cwd": text("cwd", "the working directory", plan.cwd.as_os_str())?,
            "capabilities": {
                "bounding": none, "effective": none, "inheritable": none,
                "permitted": none, "ambient": none
            },
            "noNewPrivileges": true,
            "rlimits": rlimits,
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            // The command's filter, applied by the Sentry: core's whole table (see
            // `profile`).
            "seccomp": profile(),
        },
    });
    Ok(Bundle { config, skeleton })
}

/// runsc's arguments: global options, then `run` of the bundle. `rootless` for a host
/// that is not root. runsc writes the sandbox's pid to `pid_file` once the sandbox is
/// created, before the command starts (the run's ready signal, see `Written::ready`).
pub(crate) fn runsc_args(
    state: &Path,
    bundle: &Path,
    pid_file: &Path,
    id: &str,
    network: NetworkMode,
    rootless: bool,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut opt = |s: &str| a.push(s.into());
    let mut root = OsString::from("--root=");
    root.push(state);
    // `none` and `loopback` alike: gVisor's own network stack with only its loopback,
    // nothing of the host's. `full`: the host's network stack (root only). `proxy` is not
    // claimed (the lane refuses it before a spec is built); were it asked, no network.
    opt(match network {
        NetworkMode::None | NetworkMode::Loopback | NetworkMode::Proxy => "--network=none",
        NetworkMode::Full => "--network=host",
    });
    // The Sentry intercepts system calls by ptrace: works everywhere, no /dev/kvm.
    opt("--platform=ptrace");
    // The whole tree is already in the run's cgroups (core's), where the host has them.
    opt("--ignore-cgroups");
    // The command's filter (core's syscall table), applied by the Sentry.
    opt("--oci-seccomp");
    // No host unix socket or FIFO may be opened through a bound path.
    opt("--host-uds=none");
    opt("--host-fifo=none");
    if rootless {
        opt("--rootless");
    }
    a.insert(0, root);
    a.push("run".into());
    let mut b = OsString::from("--bundle=");
    b.push(bundle);
    a.push(b);
    let mut p = OsString::from("--pid-file=");
    p.push(pid_file);
    a.push(p);
    a.push(id.into());
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::{Capability, SandboxError, SandboxOpts};

    /// The backend's own capability, as on a root host (every network mode).
    fn cap() -> Capability {
        let mut facts =
            crate::host::HostFacts::detect(&sandbox_core::registry::BackendConfig::default());
        facts.is_root = true;
        crate::capability(&facts)
    }

    fn system() -> Vec<(PathBuf, SystemEntry)> {
        vec![
            ("/usr".into(), SystemEntry::Dir),
            ("/etc".into(), SystemEntry::Dir),
            ("/opt".into(), SystemEntry::Absent),
            ("/bin".into(), SystemEntry::Symlink("usr/bin".into())),
        ]
    }

    /// The error `bundle` gives for `opts`.
    fn refusal(opts: &SandboxOpts) -> GvisorError {
        let plan = Plan::new(opts, "gvisor", &cap()).unwrap();
        let sys = system();
        let named = crate::named_path(&plan).unwrap();
        let layout = Layout {
            system: &sys,
            staged: &[],
            named: &named,
        };
        bundle(
            &plan,
            layout,
            WHO,
            InsideLimits::default(),
            &|_| true,
            &link,
        )
        .unwrap_err()
    }

    /// The host's links, as `prepare` reads them.
    fn link(p: &Path) -> Option<PathBuf> {
        std::fs::read_link(p).ok()
    }

    const WHO: Identity = Identity {
        uid: 1000,
        gid: 1000,
    };

    fn build(opts: &SandboxOpts, limits: InsideLimits) -> Bundle {
        let plan = Plan::new(opts, "gvisor", &cap()).unwrap();
        let sys = system();
        let named = crate::named_path(&plan).unwrap();
        bundle(
            &plan,
            Layout {
                system: &sys,
                staged: &[],
                named: &named,
            },
            WHO,
            limits,
            &|p: &Path| p.is_dir(),
            &link,
        )
        .unwrap()
    }

    fn mounts(b: &Bundle) -> Vec<(String, String, Vec<String>)> {
        b.config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["destination"].as_str().unwrap().to_owned(),
                    m["type"].as_str().unwrap().to_owned(),
                    m["options"]
                        .as_array()
                        .map(|o| o.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    fn mount_of(b: &Bundle, dest: &Path) -> Option<(String, Vec<String>)> {
        mounts(b)
            .into_iter()
            .find(|(d, _, _)| Path::new(d) == dest)
            .map(|(_, t, o)| (t, o))
    }

    #[test]
    fn the_system_is_read_only_and_symlinks_are_recreated() {
        let ws = tempfile::tempdir().unwrap();
        let b = build(
            &SandboxOpts::new(ws.path(), ["true"]),
            InsideLimits::default(),
        );
        let (t, o) = mount_of(&b, Path::new("/usr")).unwrap();
        assert_eq!(t, "bind");
        assert!(o.contains(&"ro".to_owned()), "{o:?}");
        assert!(mount_of(&b, Path::new("/opt")).is_none());
        assert!(b.skeleton.contains(&Skeleton::Symlink {
            at: "/bin".into(),
            target: "usr/bin".into()
        }));
        assert_eq!(b.config["root"]["readonly"], true);
        for t in PRIVATE_TMPFS {
            assert_eq!(mount_of(&b, Path::new(t)).unwrap().0, "tmpfs", "{t}");
        }
        // Nothing else of the host: no /home bind, no /var, no /root of the host.
        assert!(mounts(&b)
            .iter()
            .all(|(d, t, _)| t != "bind" || !(d.starts_with("/var") || d == "/")));
    }

    #[test]
    fn workspace_is_writable_and_carveouts_and_named_paths_are_not() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        let ro = tempfile::tempdir().unwrap();
        let rw = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.readonly_carveouts.push(".git".into());
        opts.read_only_paths.push(ro.path().into());
        opts.writable_paths.push(rw.path().into());
        let b = build(&opts, InsideLimits::default());
        let canon = |p: &Path| p.canonicalize().unwrap();
        let w = canon(ws.path());
        assert!(mount_of(&b, &w).unwrap().1.contains(&"rw".to_owned()));
        assert!(mount_of(&b, &w.join(".git"))
            .unwrap()
            .1
            .contains(&"ro".to_owned()));
        assert!(mount_of(&b, &canon(ro.path()))
            .unwrap()
            .1
            .contains(&"ro".to_owned()));
        assert!(mount_of(&b, &canon(rw.path()))
            .unwrap()
            .1
            .contains(&"rw".to_owned()));
        // The carve-out is mounted after (over) the workspace.
        let order: Vec<String> = mounts(&b).into_iter().map(|m| m.0).collect();
        let at = |p: &Path| order.iter().position(|d| Path::new(d) == p).unwrap();
        assert!(at(&w) < at(&w.join(".git")));
        // Every bind is nosuid and nodev.
        for (d, t, o) in mounts(&b) {
            if t == "bind" {
                assert!(
                    o.contains(&"nosuid".into()) && o.contains(&"nodev".into()),
                    "{d}"
                );
            }
        }
    }

    #[test]
    fn the_directories_on_the_way_to_a_carveout_are_bound_onto_themselves_writable() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("vendor/lib/.git/hooks")).unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.readonly_carveouts.push("vendor/lib/.git/hooks".into());
        let b = build(&opts, InsideLimits::default());
        let w = ws.path().canonicalize().unwrap();
        let order: Vec<String> = mounts(&b).into_iter().map(|m| m.0).collect();
        let at = |p: &Path| {
            order
                .iter()
                .position(|d| Path::new(d) == p)
                .unwrap_or_else(|| panic!("{} is not mounted", p.display()))
        };
        let mut last = at(&w);
        for d in ["vendor", "vendor/lib", "vendor/lib/.git"] {
            let d = w.join(d);
            let (typ, options) = mount_of(&b, &d).unwrap();
            assert_eq!(typ, "bind");
            let m = b.config["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| Path::new(m["destination"].as_str().unwrap()) == d)
                .unwrap();
            assert_eq!(Path::new(m["source"].as_str().unwrap()), d);
            assert!(options.contains(&"rw".to_owned()), "{}", d.display());
            assert!(last < at(&d), "{} before its parent", d.display());
            last = at(&d);
        }
        let hooks = w.join("vendor/lib/.git/hooks");
        assert!(last < at(&hooks), "the carve-out goes on top");
        assert!(mount_of(&b, &hooks).unwrap().1.contains(&"ro".to_owned()));
    }

    #[test]
    fn a_staged_tree_is_bound_from_its_staging_mount() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.readonly_carveouts.push(".git/hooks".into());
        let plan = Plan::new(&opts, "gvisor", &cap()).unwrap();
        let sys = system();
        let w = ws.path().canonicalize().unwrap();
        let staged = [(w.clone(), PathBuf::from("/b/stage/0"))];
        let named = crate::named_path(&plan).unwrap();
        let layout = Layout {
            system: &sys,
            staged: &staged,
            named: &named,
        };
        let b = bundle(
            &plan,
            layout,
            WHO,
            InsideLimits::default(),
            &|_| true,
            &link,
        )
        .unwrap();
        let m = b.config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| Path::new(m["destination"].as_str().unwrap()) == w)
            .unwrap();
        assert_eq!(m["source"], "/b/stage/0");
        assert_eq!(m["options"][1], "rw");
        // A directory pinned on the way to a carve-out stays the command's to write: it
        // comes from the same place in the staging mount.
        let source_of = |d: &Path| {
            b.config["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| Path::new(m["destination"].as_str().unwrap()) == d)
                .map(|m| (m["source"].clone(), m["options"][1].clone()))
                .unwrap()
        };
        assert_eq!(
            source_of(&w.join(".git")),
            ("/b/stage/0/.git".into(), "rw".into())
        );
        assert_eq!(source_of(&w.join(".git/hooks")).1, "ro");
    }

    #[test]
    fn a_path_named_twice_gets_the_restriction() {
        let ws = tempfile::tempdir().unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true"]);
        opts.read_only_paths.push(ws.path().into());
        let b = build(&opts, InsideLimits::default());
        let w = ws.path().canonicalize().unwrap();
        // The workspace outweighs a read-only grant of the same path.
        assert!(mount_of(&b, &w).unwrap().1.contains(&"rw".to_owned()));
        let n = mounts(&b).iter().filter(|m| Path::new(&m.0) == w).count();
        assert_eq!(n, 1);
    }

    #[test]
    fn reserved_paths_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        for bad in ["/", "/proc", "/sys/kernel", "/dev"] {
            // `Plan::new` refuses these first (grants on control filesystems); the bundle's
            // own check is the second line, so it gets a plan with the path put in by hand.
            let opts = SandboxOpts::new(ws.path(), ["true"]);
            let mut plan = Plan::new(&opts, "gvisor", &cap()).unwrap();
            plan.read_only_paths.push(bad.into());
            let sys = system();
            let named = crate::named_path(&plan).unwrap();
            let layout = Layout {
                system: &sys,
                staged: &[],
                named: &named,
            };
            let e = bundle(
                &plan,
                layout,
                WHO,
                InsideLimits::default(),
                &|_| true,
                &link,
            )
            .unwrap_err();
            assert!(
                matches!(e, GvisorError::Path { field: "read_only_paths", ref path, .. } if path == Path::new(bad)),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn process_argv_env_cwd_user_and_no_privileges() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        let mut opts = SandboxOpts::new(ws.path(), ["true", "a b", "", "$(id)"]);
        opts.cwd = Some("sub".into());
        opts.env.set.push(("FOO".into(), "x=y".into()));
        let b = build(&opts, InsideLimits::default());
        let p = &b.config["process"];
        // `argv[0]` exactly as given, which the Sentry looks up on the `PATH` inside.
        assert_eq!(p["args"], json!(["true", "a b", "", "$(id)"]));
        let env: Vec<&str> = p["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(env.contains(&"FOO=x=y"), "{env:?}");
        assert!(env.iter().any(|e| e.starts_with("PATH=")));
        assert_eq!(
            Path::new(p["cwd"].as_str().unwrap()),
            ws.path().canonicalize().unwrap().join("sub")
        );
        assert_eq!(p["user"], json!({"uid": 1000, "gid": 1000}));
        assert_eq!(p["noNewPrivileges"], true);
        for set in [
            "bounding",
            "effective",
            "inheritable",
            "permitted",
            "ambient",
        ] {
            assert_eq!(p["capabilities"][set], json!([]), "{set}");
        }
    }

    #[test]
    fn limits_become_rlimits_and_the_tmpfs_size() {
        let ws = tempfile::tempdir().unwrap();
        let limits = InsideLimits {
            open_files: Some(64),
            processes: Some(32),
            address_space: None,
            tmpfs_bytes: Some(1 << 20),
        };
        let b = build(&SandboxOpts::new(ws.path(), ["true"]), limits);
        let r = &b.config["process"]["rlimits"];
        assert_eq!(
            *r,
            json!([
                {"type": "RLIMIT_NOFILE", "hard": 64, "soft": 64},
                {"type": "RLIMIT_NPROC", "hard": 32, "soft": 32}
            ])
        );
        let (_, o) = mount_of(&b, Path::new("/tmp")).unwrap();
        assert!(o.contains(&"size=1048576".to_owned()), "{o:?}");
    }

    /// The bundle for a plan whose program the host found at `program` (a path this test
    /// names, wherever the checkout lies: the policy only asks the host whether it is a
    /// directory or a link, and a path that does not exist is neither).
    fn build_for_program(ws: &Path, program: &Path) -> Bundle {
        let me = std::env::current_exe().unwrap();
        let mut plan =
            Plan::new(&SandboxOpts::new(ws, [me.as_os_str()]), "gvisor", &cap()).unwrap();
        plan.program = program.to_path_buf();
        plan.argv[0] = program.as_os_str().to_owned();
        let sys = system();
        let layout = Layout {
            system: &sys,
            staged: &[],
            named: program,
        };
        bundle(
            &plan,
            layout,
            WHO,
            InsideLimits::default(),
            &|p: &Path| p.is_dir(),
            &link,
        )
        .unwrap()
    }

    #[test]
    fn a_program_outside_everything_gets_its_own_file_and_mount_points() {
        let ws = tempfile::tempdir().unwrap();
        // A test binary in a build directory nothing else shows, on our own root.
        let prog = Path::new("/sandbox-gvisor-test-build/target/debug/prog");
        let b = build_for_program(ws.path(), prog);
        let (t, o) = mount_of(&b, prog).unwrap();
        assert_eq!(t, "bind");
        assert!(o.contains(&"ro".to_owned()));
        assert!(b.skeleton.contains(&Skeleton::File(prog.into())));
        for a in prog.ancestors().skip(1).filter(|a| depth(a) > 0) {
            assert!(
                b.skeleton.contains(&Skeleton::Dir(a.into())),
                "{}",
                a.display()
            );
        }
        // Under a private tmpfs, the program's file is still bound; runsc makes its mount
        // point in the tmpfs, so the bundle's root gets none.
        let prog = Path::new("/tmp/sandbox-gvisor-test-build/prog");
        let b = build_for_program(ws.path(), prog);
        let (t, o) = mount_of(&b, prog).unwrap();
        assert_eq!(t, "bind");
        assert!(o.contains(&"ro".to_owned()));
        let dir = prog.parent().unwrap();
        assert!(!b
            .skeleton
            .iter()
            .any(|s| matches!(s, Skeleton::File(p) | Skeleton::Dir(p) if p.starts_with(dir))));
        // A system program gets nothing of its own.
        let b = build(
            &SandboxOpts::new(ws.path(), ["true"]),
            InsideLimits::default(),
        );
        assert!(!mounts(&b).iter().any(|m| m.0.ends_with("/true")));
    }

    /// A file that can be run, in `dir`.
    fn executable(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn args0_is_the_name_given_and_a_shown_link_is_kept() {
        // A venv's `bin/python` in the workspace: a link, relative, to a system program.
        let ws = tempfile::tempdir().unwrap();
        let bin = ws.path().join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let system = which::which("true").unwrap();
        std::os::unix::fs::symlink(&system, bin.join("python")).unwrap();
        let b = build(
            &SandboxOpts::new(ws.path(), [".venv/bin/python", "-c", "x"]),
            InsideLimits::default(),
        );
        assert_eq!(
            b.config["process"]["args"],
            json!([".venv/bin/python", "-c", "x"])
        );
        // Shown by the workspace, and its target by the system: nothing of their own.
        assert!(
            !mounts(&b)
                .iter()
                .any(|m| m.0.ends_with("/python") || m.0.ends_with("/true")),
            "{:?}",
            mounts(&b)
        );
    }

    #[test]
    fn a_name_under_a_private_tmpfs_gets_the_program_s_file() {
        // rustup's `cargo`: a link, in a directory the sandbox hides, to a program
        // nothing shows either.
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let home = home.path().canonicalize().unwrap();
        let real = executable(&home, "rustup");
        let named = home.join("cargo");
        std::os::unix::fs::symlink("rustup", &named).unwrap();
        let b = build(
            &SandboxOpts::new(ws.path(), [named.as_os_str()]),
            InsideLimits::default(),
        );
        assert_eq!(b.config["process"]["args"][0], named.to_str().unwrap());
        let m = b.config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| Path::new(m["destination"].as_str().unwrap()) == named)
            .unwrap();
        // The program's file at the name, read-only; not its directory, not the target's
        // own path.
        assert_eq!(m["source"], real.to_str().unwrap());
        assert_eq!(m["options"][1], "ro");
        assert!(mount_of(&b, &real).is_none());
        assert!(mount_of(&b, &home).is_none());
    }

    #[test]
    fn a_name_through_a_link_the_sandbox_does_not_show_is_refused() {
        // `/tmp/…/lnk -> WORKSPACE/bin`: the program is shown, but the link leading to it
        // lies under a private tmpfs, so the name leads nowhere inside.
        let ws = tempfile::tempdir().unwrap();
        let bin = ws.path().canonicalize().unwrap().join("bin");
        std::fs::create_dir(&bin).unwrap();
        executable(&bin, "tool");
        let hidden = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let lnk = hidden.path().canonicalize().unwrap().join("lnk");
        std::os::unix::fs::symlink(&bin, &lnk).unwrap();
        let e = refusal(&SandboxOpts::new(ws.path(), [lnk.join("tool").as_os_str()]));
        assert!(
            matches!(&e, GvisorError::ProgramLink { link, .. } if *link == lnk),
            "{e}"
        );
        let shown = SandboxError::from(e).to_string();
        assert!(shown.contains("grant the link's directory"), "{shown}");
    }

    #[test]
    fn a_name_that_leads_elsewhere_inside_is_refused() {
        // `l/../tool` with `l -> a/b`: the host's kernel takes `..` from the link's target
        // (`a/tool`), runsc cleans the name first (`tool`): another program.
        let ws = tempfile::tempdir().unwrap();
        let w = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(w.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a/b", w.join("l")).unwrap();
        let meant = executable(&w.join("a"), "tool");
        executable(&w, "tool");
        let e = refusal(&SandboxOpts::new(ws.path(), ["l/../tool"]));
        assert!(
            matches!(&e, GvisorError::ProgramElsewhere { program, .. } if *program == meant),
            "{e}"
        );
    }

    #[test]
    fn the_filter_is_core_s_whole_table_with_setsid_allowed() {
        let ws = tempfile::tempdir().unwrap();
        let b = build(
            &SandboxOpts::new(ws.path(), ["true"]),
            InsideLimits::default(),
        );
        let f = &b.config["linux"]["seccomp"];
        assert_eq!(f["defaultAction"], "SCMP_ACT_ERRNO");
        // Core's allow-list, save the two calls the Sentry answers ENOSYS itself.
        let core = serde_json::to_value(oci::allow_list(&SYSCALL_POLICY)).unwrap();
        let without = |v: &Value| {
            let mut v = v.clone();
            let rules = v["syscalls"].as_array_mut().unwrap();
            for r in rules.iter_mut() {
                let names = r["names"].as_array_mut().unwrap();
                names.retain(|n| n != "clone3" && n != "openat2");
            }
            rules.retain(|r| !r["names"].as_array().unwrap().is_empty());
            v
        };
        assert_eq!(without(f), without(&core));
        let allowed = f["syscalls"][0]["names"].as_array().unwrap();
        for n in ["clone3", "openat2"] {
            assert!(allowed.iter().any(|a| a == n), "{n}");
        }
        for n in ["unshare", "io_uring_setup", "ptrace", "keyctl", "clone"] {
            assert!(
                !allowed.iter().any(|a| a == n),
                "{n} is allowed whatever its arguments"
            );
        }
        // A tree held by the Sentry's pid namespace: sessions escape no kill.
        for n in ["setsid", "setpgid", "socket", "execve"] {
            assert!(allowed.iter().any(|a| a == n), "{n}");
        }
    }

    #[test]
    fn identity_follows_the_rules() {
        let id = |uid, gid| Identity { uid, gid };
        assert_eq!(identity(false, (1000, 1000)), id(0, 0));
        assert_eq!(identity(true, (1000, 1000)), id(1000, 1000));
        use sandbox_host::idmap::NOBODY;
        assert_eq!(identity(true, (1000, 0)), id(1000, NOBODY));
        assert_eq!(identity(true, (0, 0)), id(NOBODY, NOBODY));
    }

    #[test]
    fn only_the_full_network_shares_the_hosts_namespace() {
        let ws = tempfile::tempdir().unwrap();
        let has_netns = |mode| {
            let mut opts = SandboxOpts::new(ws.path(), ["true"]);
            opts.network = mode;
            let b = build(&opts, InsideLimits::default());
            b.config["linux"]["namespaces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["type"] == "network")
        };
        assert!(has_netns(NetworkMode::None));
        assert!(has_netns(NetworkMode::Loopback));
        assert!(!has_netns(NetworkMode::Full));
    }

    #[test]
    fn network_modes_map_to_runsc() {
        let a = |n, rootless| {
            runsc_args(
                Path::new("/s"),
                Path::new("/b"),
                Path::new("/b/ready"),
                "id",
                n,
                rootless,
            )
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect::<Vec<_>>()
        };
        assert!(a(NetworkMode::None, false).contains(&"--network=none".into()));
        assert!(a(NetworkMode::Loopback, false).contains(&"--network=none".into()));
        assert!(a(NetworkMode::Full, false).contains(&"--network=host".into()));
        assert!(a(NetworkMode::None, true).contains(&"--rootless".into()));
        assert!(!a(NetworkMode::None, false).contains(&"--rootless".into()));
        let v = a(NetworkMode::None, false);
        assert_eq!(
            &v[v.len() - 4..],
            ["run", "--bundle=/b", "--pid-file=/b/ready", "id"]
        );
        assert_eq!(v[0], "--root=/s");
    }

    #[test]
    fn a_non_utf8_argument_is_refused() {
        use std::os::unix::ffi::OsStringExt;
        let ws = tempfile::tempdir().unwrap();
        let bad = OsString::from_vec(vec![0xff, 0xfe]);
        let opts = SandboxOpts::new(ws.path(), [OsString::from("true"), bad]);
        let e = refusal(&opts);
        assert!(
            matches!(e, GvisorError::NotUtf8 { field: "argv", .. }),
            "{e}"
        );
    }
}
