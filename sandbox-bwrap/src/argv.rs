//! The policy: a plan and the host's facts in, bwrap's arguments out. Pure: it touches
//! nothing, so every knob is unit-tested without spawning.
//!
//! # The sandbox's filesystem
//!
//! bwrap starts from an empty tmpfs root. On it, in this order:
//!
//! - the system read-only: `/usr`, `/etc`, `/opt` and `/nix/store` where the host has them;
//!   `/bin`, `/sbin`, `/lib*` bound where they are directories and recreated as the same
//!   symlinks where the host merged them into `/usr`;
//! - a fresh `/proc` (with `/proc/sys` and friends read-only, host-wide entries hidden) and
//!   a fresh `/dev`;
//! - private empty tmpfs on `/tmp`, `/home`, `/root` and `/run`;
//! - the caller's paths: extra read-only paths, the workspace and extra writable paths
//!   writable, the carve-outs read-only; the program's own file read-only when nothing
//!   else shows it;
//! - on a root host, the root-only entries of the system directories and of the named
//!   paths hidden (see `rootview`), so a grant shows what anyone may read there;
//! - credentials inside a toolchain grant (`Plan::hidden_paths`, from core's table) hidden
//!   the same way, whatever the host's uid;
//! - finally the root tmpfs and the hiding tmpfs are remounted read-only.
//!
//! Mounts are applied shallowest first, so a path under another bind lands on top of it
//! whichever list it came from. A path named more than once gets one mount, the one the
//! caller meant: a carve-out (a restriction) over a writable grant over a read-only grant.
//! A caller's path replaces a system mount at the same place (naming `/tmp` writable gives
//! the host's `/tmp`). The host root, `/proc` (and anything in it) and `/dev` itself cannot
//! be named: the sandbox builds its own.

use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use sandbox_core::{Lane, NetworkMode, Plan};
use sandbox_host::layout::{self, MountTable, Origin};
use sandbox_host::process::waiter::WaiterArgs;

use crate::error::BwrapError;
use crate::host::PROC_READ_ONLY;
use crate::rootview::Hidden;
use sandbox_host::layout::SystemEntry;

/// The most options bwrap reads from `--args` (its own `MAX_ARGS` is 9000; the margin is
/// for what it adds). Past it bwrap fails with "Exceeded maximum number of arguments", so
/// the run is refused before it starts, with the reason and a remedy.
pub(crate) const MAX_OPTIONS: usize = 8900;

/// Where the waiter is placed inside: a directory of the sandbox's own root tmpfs, which no
/// caller path can cover (the host root cannot be named).
pub(crate) const WAITER_PATH: &str = "/.sandbox-bwrap/waiter";

/// The private tmpfs directories.
const PRIVATE_TMPFS: &[&str] = &["/tmp", "/home", "/root", "/run"];

/// What the policy needs from the host, found once (see `host::HostFacts`).
#[derive(Clone, Debug)]
pub(crate) struct Layout<'a> {
    /// The system directories and how the host has each.
    pub system: &'a [(PathBuf, SystemEntry)],
    /// `/etc/resolv.conf`'s target when it lives outside `/etc`.
    pub resolv_conf: Option<&'a Path>,
    /// The `/proc` entries this kernel has: those of `PROC_READ_ONLY` are bound
    /// read-only, every other one is hidden.
    pub proc_entries: &'a [String],
    /// bwrap has `--disable-userns`.
    pub disable_userns: bool,
    /// Abstract unix sockets can be confined (landlock ABI 6).
    pub scope_abstract_unix: bool,
}

/// Descriptors the arguments refer to (their numbers in bwrap).
#[derive(Clone, Debug)]
pub(crate) struct Fds {
    /// The seccomp program.
    pub seccomp: RawFd,
    /// The waiter's executable.
    pub waiter: RawFd,
    /// The write end of the status pipe.
    pub status: RawFd,
    /// The write end of the ready pipe (the waiter writes a byte once the sandbox is set
    /// up, before the command starts).
    pub ready: RawFd,
    /// The run's door (network mode `proxy`, host or published ports): the unix socket the
    /// waiter sends the listeners on, and the ports it makes them for, in order.
    pub proxy: Option<(RawFd, Vec<u16>)>,
}

/// bwrap's arguments: the options (handed over on a descriptor with `--args`, so that
/// environment values never show in the host's process list) and the command after `--`
/// (bwrap reads `--` only from its real command line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BwrapArgs {
    pub options: Vec<OsString>,
    pub command: Vec<OsString>,
}

/// One mount (or file-system operation) in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    RoBind,
    Bind,
    /// Bound read-only when the host has it (`/proc` entries).
    RoBindTry,
    Tmpfs,
    Proc,
    Dev,
    Symlink(PathBuf),
    Dir,
    /// A root-only file: `/dev/null` bound over it (`nodev` makes it unopenable).
    HideFile,
    /// A root-only directory: an empty tmpfs, read-only at the end.
    HideDir,
    /// The waiter, copied from a descriptor, read-only and executable.
    Waiter(RawFd),
}

/// The shared mount table (`sandbox_host::layout`) with bwrap's operations.
type Table = MountTable<Op>;
type Mount = layout::Mount<Op>;

/// bwrap's reading of the shared table.
trait BwrapTable {
    /// A caller's path, bound writable or read-only by its origin.
    fn user(&mut self, dest: &Path, origin: Origin);
    /// The mount whose destination is the longest prefix of `path`, ignoring hides.
    fn covering(&self, path: &Path) -> Option<(&Path, &Mount)>;
    /// Whether `path` shows the host's own file inside: the deepest mount over it, hides
    /// included, is a bind.
    fn shows_host(&self, path: &Path) -> bool;
}

impl BwrapTable for Table {
    fn user(&mut self, dest: &Path, origin: Origin) {
        let op = if origin.writable() {
            Op::Bind
        } else {
            Op::RoBind
        };
        self.caller(dest, origin, op);
    }

    fn covering(&self, path: &Path) -> Option<(&Path, &Mount)> {
        self.deepest(path, |m| !matches!(m.op, Op::HideFile | Op::HideDir))
    }

    fn shows_host(&self, path: &Path) -> bool {
        matches!(self.deepest(path, |_| true), Some((_, m)) if matches!(m.op, Op::RoBind | Op::Bind))
    }
}

fn push(out: &mut Vec<OsString>, items: &[&OsStr]) {
    out.extend(items.iter().map(|s| s.to_os_string()));
}

/// Refuse caller paths the sandbox builds itself.
fn check_user_path(field: &'static str, p: &Path) -> Result<(), BwrapError> {
    let reserved = |r: &str| p.starts_with(r);
    if p == Path::new("/") {
        return Err(BwrapError::Path {
            field,
            path: p.to_path_buf(),
            why: "the host root is never bound wholesale; name the directories you need",
        });
    }
    // The host's /proc would show the host's processes; the host's /dev in place of the
    // sandbox's would leave it without usable devices (binds are `nodev`). Paths under
    // /dev (a workspace in /dev/shm) are fine: `nodev` keeps device nodes unusable.
    if reserved("/proc") || p == Path::new("/dev") {
        return Err(BwrapError::Path {
            field,
            path: p.to_path_buf(),
            why: "the sandbox has its own /proc and /dev; the host's cannot be granted",
        });
    }
    if reserved("/.sandbox-bwrap") {
        return Err(BwrapError::Path {
            field,
            path: p.to_path_buf(),
            why: "this path is reserved for the backend's own helper",
        });
    }
    Ok(())
}

/// Build bwrap's arguments for `plan` on a host laid out as `layout`, hiding `hidden`
/// (root-only entries of the system directories and named paths; empty when the host is
/// not root).
pub(crate) fn build(
    plan: &Plan,
    layout: &Layout<'_>,
    hidden: &[Hidden],
    fds: Fds,
) -> Result<BwrapArgs, BwrapError> {
    let full = plan.network == NetworkMode::Full;
    // The host's network namespace carries its abstract unix sockets, where some root
    // services accept any peer whose uid is 0 (the containerd-shim escape, CVE-2020-15257).
    // Host root keeps that power unless landlock can scope them; only `trusted` accepts it.
    if full && plan.host_is_root && !layout.scope_abstract_unix && plan.lane != Lane::Trusted {
        return Err(BwrapError::RootFullNetwork { lane: plan.lane });
    }

    let mut t = Table::default();
    for (dir, entry) in layout.system {
        match entry {
            SystemEntry::Dir => t.system(dir, Op::RoBind),
            SystemEntry::Symlink(target) => t.system(dir, Op::Symlink(target.clone())),
            SystemEntry::Absent => {}
        }
    }
    t.system("/proc", Op::Proc);
    for entry in layout.proc_entries {
        if PROC_READ_ONLY.contains(&entry.as_str()) {
            t.system(entry, Op::RoBindTry);
        } else {
            t.system(entry, Op::HideFile);
        }
    }
    t.system("/dev", Op::Dev);
    for dir in PRIVATE_TMPFS {
        t.system(*dir, Op::Tmpfs);
    }
    // bwrap's /dev is a tmpfs it cannot size, with a writable /dev/shm in it: a sized tmpfs
    // of our own goes over /dev/shm, so no writable tmpfs escapes the memory limit.
    t.system("/dev/shm", Op::Tmpfs);

    for p in &plan.read_only_paths {
        check_user_path("read_only_paths", p)?;
        t.user(p, Origin::ReadOnlyPath);
    }
    for p in &plan.writable_paths {
        check_user_path("writable_paths", p)?;
        t.user(p, Origin::Writable);
    }
    check_user_path("workspace", &plan.workspace)?;
    t.user(&plan.workspace, Origin::Workspace);
    for p in &plan.readonly_carveouts {
        t.user(p, Origin::Carveout);
    }
    // Each directory between the workspace and a carve-out is bound onto itself: a mount
    // point cannot be renamed, so the command cannot move it away with the carve-out in it
    // and make its own in its place (`mv .git x; mkdir -p .git/hooks`).
    for p in &plan.readonly_carveouts {
        let Ok(rel) = p.strip_prefix(&plan.workspace) else {
            continue;
        };
        let mut at = plan.workspace.clone();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            at.push(c);
            if !t.mounts.contains_key(&at) {
                t.user(&at, Origin::Workspace);
            }
        }
    }

    // Root-only entries of the system directories and of the named paths: a granted
    // directory shows what anyone may read in it, never what only root's power opens. Not
    // in the workspace (the command's own, as for any caller), nor a path named itself.
    for h in hidden {
        let applies = matches!(
            t.covering(&h.path),
            Some((_, m)) if matches!(m.op, Op::RoBind | Op::Bind)
                && matches!(m.origin, Origin::System | Origin::ReadOnlyPath | Origin::Writable)
        );
        if applies && !t.mounts.contains_key(&h.path) {
            t.system(
                h.path.clone(),
                if h.dir { Op::HideDir } else { Op::HideFile },
            );
        }
    }

    // Credentials inside a toolchain grant (core's table, `Plan::hidden_paths`): hidden
    // whatever the host's uid, on top of the grant (core refuses a grant at or inside
    // one). The one read of the filesystem here: whether it is a directory, for the mount
    // that can cover it.
    for h in &plan.hidden_paths {
        let op = if h.is_dir() {
            Op::HideDir
        } else {
            Op::HideFile
        };
        t.system(h.clone(), op);
    }

    // HOME inside one of the private tmpfs: make it exist, so it is writable there.
    if let Some(home) = plan.env_var("HOME").map(Path::new) {
        if home.is_absolute() && !t.mounts.contains_key(home) {
            if let Some((_, m)) = t.covering(home) {
                if m.op == Op::Tmpfs && m.origin == Origin::System {
                    t.system(home, Op::Dir);
                }
            }
        }
    }

    // Name resolution with the host's network, when the host's resolver file is in /run.
    if full {
        if let Some(target) = layout.resolv_conf {
            if matches!(t.covering(target), Some((_, m)) if m.op == Op::Tmpfs) {
                t.system(target, Op::RoBind);
            }
        }
    }

    t.system(WAITER_PATH, Op::Waiter(fds.waiter));

    // The program runs at the path it was resolved to on the host. Outside everything
    // granted (a tool in the caller's home, a test binary in a build directory), naming it
    // to run grants it: the file alone, read-only, not its directory.
    if !t.shows_host(&plan.program) {
        t.mounts.insert(
            plan.program.clone(),
            Mount {
                op: Op::RoBind,
                origin: Origin::Program,
            },
        );
    }

    let mut o: Vec<OsString> = Vec::new();
    // Every namespace; the network one unless the host's network was asked for.
    push(
        &mut o,
        &[
            "--unshare-user".as_ref(),
            "--unshare-pid".as_ref(),
            // The waiter is the pid namespace's init: the kernel delivers no signal from
            // inside the namespace to an init without a handler, SIGKILL included, so the
            // command cannot kill it and lose its status.
            "--as-pid-1".as_ref(),
            "--unshare-ipc".as_ref(),
            "--unshare-uts".as_ref(),
            "--unshare-cgroup-try".as_ref(),
        ],
    );
    if !full {
        push(&mut o, &["--unshare-net".as_ref()]);
    }
    if layout.disable_userns {
        push(&mut o, &["--disable-userns".as_ref()]);
    }
    // Dies with us; a new session so the command cannot push input into the caller's
    // terminal (TIOCSTI); no capability even when the host is root.
    push(
        &mut o,
        &[
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
            "--cap-drop".as_ref(),
            "ALL".as_ref(),
        ],
    );
    push(&mut o, &["--clearenv".as_ref()]);
    for (k, v) in &plan.env {
        push(&mut o, &["--setenv".as_ref(), k.as_os_str(), v.as_os_str()]);
    }
    let seccomp = fds.seccomp.to_string();
    push(&mut o, &["--seccomp".as_ref(), seccomp.as_ref()]);

    let tmpfs_size = plan.limits.memory_bytes.map(|b| b.to_string());
    let mut remount_ro: Vec<&Path> = Vec::new();
    for (dest, m) in t.ordered() {
        let d = dest.as_os_str();
        match &m.op {
            Op::RoBind => push(&mut o, &["--ro-bind".as_ref(), d, d]),
            Op::Bind => push(&mut o, &["--bind".as_ref(), d, d]),
            Op::RoBindTry => push(&mut o, &["--ro-bind-try".as_ref(), d, d]),
            Op::Tmpfs => {
                // Inside the run's memory limit (the kernel's default is half of RAM, for
                // each tmpfs); an explicitly unlimited run keeps the kernel's default.
                if let Some(size) = &tmpfs_size {
                    push(&mut o, &["--size".as_ref(), size.as_ref()]);
                }
                push(&mut o, &["--tmpfs".as_ref(), d]);
            }
            Op::Proc => push(&mut o, &["--proc".as_ref(), d]),
            Op::Dev => push(&mut o, &["--dev".as_ref(), d]),
            Op::Symlink(target) => push(&mut o, &["--symlink".as_ref(), target.as_os_str(), d]),
            Op::Dir => push(&mut o, &["--dir".as_ref(), d]),
            Op::HideFile => push(&mut o, &["--ro-bind".as_ref(), "/dev/null".as_ref(), d]),
            Op::HideDir => {
                push(&mut o, &["--tmpfs".as_ref(), d]);
                remount_ro.push(dest);
            }
            Op::Waiter(fd) => {
                let fd = fd.to_string();
                push(
                    &mut o,
                    &[
                        "--perms".as_ref(),
                        "0555".as_ref(),
                        "--ro-bind-data".as_ref(),
                        fd.as_ref(),
                        d,
                    ],
                );
            }
        }
    }
    // Last, once every mount point exists: nothing outside the named places is writable.
    for d in remount_ro {
        push(&mut o, &["--remount-ro".as_ref(), d.as_os_str()]);
    }
    push(&mut o, &["--remount-ro".as_ref(), "/".as_ref()]);
    push(&mut o, &["--chdir".as_ref(), plan.cwd.as_os_str()]);

    // bwrap sets PWD itself; the waiter removes it unless the caller named it.
    let mut flags = String::new();
    if full && layout.scope_abstract_unix {
        flags.push('a');
    }
    if plan.env_var("PWD").is_none() {
        flags.push('p');
    }
    // The process cap is set by the waiter inside the user namespace, where it counts this
    // sandbox's processes only (see `Launch::process_rlimit_inside`).
    let waiter = WaiterArgs {
        status: fds.status,
        ready: fds.ready,
        flags,
        nproc: plan.limits.max_processes,
        proxy: fds.proxy,
        program: plan.program.clone(),
        argv: plan.argv.clone(),
    };
    let mut command: Vec<OsString> = vec!["--".into(), WAITER_PATH.into()];
    command.extend(waiter.to_args());
    if o.len() > MAX_OPTIONS {
        return Err(BwrapError::TooManyMounts {
            max: MAX_OPTIONS,
            options: o.len(),
            hidden: hidden.len(),
        });
    }
    Ok(BwrapArgs {
        options: o,
        command,
    })
}

#[cfg(test)]
mod tests;
