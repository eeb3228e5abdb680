//! `--changes`: the change set shown (`git diff --stat`-like, and `--changes-diff` as a
//! unified diff of the text files), then applied, asked about, or discarded.

use std::io::{BufRead, IsTerminal, Write};

use serde::Serialize;

use sandbox::changes::ApplyError;
use sandbox::{Change, ChangeKind, ChangeSet};

use crate::args::ChangesArg;

/// The most of one file a diff reads.
const DIFF_CAP: usize = 1 << 20;

/// What became of the change set, for `--json`.
#[derive(Debug, Serialize)]
pub struct Settled {
    /// Written into the workspace.
    pub applied: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The apply failed (refused, conflict, I/O): `sandbox` exits 125.
    #[serde(skip)]
    pub failed: bool,
}

fn what(c: &Change) -> String {
    match &c.kind {
        ChangeKind::Added => format!("+{} B (added)", c.size),
        ChangeKind::Modified => match (c.old_mode, c.mode) {
            (Some(o), Some(n)) => format!("{} B (modified, mode {o:o} -> {n:o})", c.size),
            _ => format!("{} B (modified)", c.size),
        },
        ChangeKind::Deleted { dir: true } => "(directory deleted)".into(),
        ChangeKind::Deleted { dir: false } => format!("-{} B (deleted)", c.size),
        ChangeKind::ModeChanged => format!(
            "mode {:o} -> {:o}",
            c.old_mode.unwrap_or(0),
            c.mode.unwrap_or(0)
        ),
        ChangeKind::Symlink { target } => format!("-> {} (symlink)", target.display()),
        ChangeKind::DirAdded => "(directory added)".into(),
        ChangeKind::Special => "(device, FIFO or socket: never applied)".into(),
    }
}

/// The `git diff --stat`-like summary.
pub fn summary(set: &ChangeSet) -> String {
    if set.is_empty() {
        return "sandbox: the command changed nothing in the workspace\n".into();
    }
    let width = set
        .changes()
        .iter()
        .map(|c| c.path.as_os_str().len())
        .max()
        .unwrap_or(0)
        .min(60);
    let mut out = String::new();
    for c in set.changes() {
        out.push_str(&format!(" {:<width$} | {}\n", c.path.display(), what(c)));
    }
    let count = |f: fn(&ChangeKind) -> bool| set.changes().iter().filter(|c| f(&c.kind)).count();
    out.push_str(&format!(
        " {} changes: {} added, {} modified, {} deleted, {} mode changes, {} symlinks ({} layer)\n",
        set.changes().len(),
        count(|k| matches!(k, ChangeKind::Added | ChangeKind::DirAdded)),
        count(|k| matches!(k, ChangeKind::Modified)),
        count(|k| matches!(k, ChangeKind::Deleted { .. })),
        count(|k| matches!(k, ChangeKind::ModeChanged)),
        count(|k| matches!(k, ChangeKind::Symlink { .. })),
        set.mechanism().as_str()
    ));
    out
}

fn text(bytes: Option<Vec<u8>>) -> Option<String> {
    let b = bytes.unwrap_or_default();
    if b.contains(&0) {
        return None;
    }
    String::from_utf8(b).ok()
}

/// A unified diff of each changed text file (binary files are named, not shown).
pub fn diff(set: &ChangeSet) -> String {
    let mut out = String::new();
    for c in set.changes() {
        let (old, new) = match c.kind {
            ChangeKind::Added => (Some(Vec::new()), set.new_contents(&c.path, DIFF_CAP)),
            ChangeKind::Modified => (
                set.old_contents(&c.path, DIFF_CAP),
                set.new_contents(&c.path, DIFF_CAP),
            ),
            ChangeKind::Deleted { dir: false } => {
                (set.old_contents(&c.path, DIFF_CAP), Some(Vec::new()))
            }
            _ => continue,
        };
        let p = c.path.display();
        match (text(old), text(new)) {
            (Some(o), Some(n)) => {
                let d = similar::TextDiff::from_lines(&o, &n);
                out.push_str(
                    &d.unified_diff()
                        .header(&format!("a/{p}"), &format!("b/{p}"))
                        .to_string(),
                );
            }
            _ => out.push_str(&format!("Binary file {p} differs\n")),
        }
    }
    out
}

/// Ask on the terminal whether to apply.
fn ask(set: &ChangeSet) -> bool {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "Apply these {} changes to {}? [y/N] ",
        set.changes().len(),
        set.workspace().display()
    );
    let _ = err.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

fn apply(set: &ChangeSet) -> Settled {
    match set.apply(false) {
        Ok(r) => {
            eprintln!(
                "sandbox: changes applied ({} written, {} deleted, {} mode changes)",
                r.written, r.deleted, r.modes
            );
            Settled {
                applied: true,
                reason: None,
                failed: false,
            }
        }
        Err(e) => {
            let remedy = match &e {
                ApplyError::Conflict { .. } => {
                    "re-run the command, or apply from the library with force"
                }
                ApplyError::Refused { .. } => "nothing was written; the change set was discarded",
                ApplyError::NoSpace { .. } => {
                    "nothing was written; free space on the workspace's disk and re-run"
                }
                ApplyError::Io { .. } => {
                    "nothing was written (what was, was undone); fix the cause and re-run"
                }
                _ => {
                    "check the workspace: it is part way; the next layered run on it undoes \
                     the rest"
                }
            };
            eprintln!("sandbox: changes not applied: {e}; remedy: {remedy}");
            set.discard();
            Settled {
                applied: false,
                reason: Some(e.to_string()),
                failed: true,
            }
        }
    }
}

/// Show the change set and do what `mode` says with it.
pub fn settle(set: &ChangeSet, mode: ChangesArg, show_diff: bool) -> Settled {
    if mode != ChangesArg::Discard || show_diff {
        eprint!("{}", summary(set));
    }
    if show_diff {
        eprint!("{}", diff(set));
    }
    let not = |reason: &str| {
        eprintln!("sandbox: {reason}");
        set.discard();
        Settled {
            applied: false,
            reason: Some(reason.into()),
            failed: false,
        }
    };
    if set.is_empty() {
        return Settled {
            applied: false,
            reason: Some("nothing changed".into()),
            failed: false,
        };
    }
    match mode {
        ChangesArg::Discard => not("changes discarded (--changes discard)"),
        ChangesArg::Apply => apply(set),
        ChangesArg::Ask => {
            if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                not("--changes ask: no terminal to ask on, so nothing was applied (use --changes apply to apply without asking)")
            } else if ask(set) {
                apply(set)
            } else {
                not("changes discarded")
            }
        }
    }
}
