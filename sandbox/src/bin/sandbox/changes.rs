//! `--changes`: the change set shown (`git diff --stat`-like, and `--changes-diff` as a
//! patch `git apply` takes), then applied, asked about, or discarded.
//!
//! The command chose every name and line shown here, so what reaches a terminal goes
//! through core's [`escape`](sandbox::escape): an escape sequence in a name or a line
//! cannot erase the entries above it or print ones that are not there. Changes under a
//! `.git` directory are listed apart (git runs what some of them name). On a terminal the
//! diff is printed file by file up to [`TERMINAL_CAP`]; past it, the rest is left out and
//! the complete patch is kept in a file whose path is printed. What is not a terminal
//! (a pipe, a file) and the patch file get every byte as the command wrote it.
//!
//! The diff is made one file at a time, so the host holds at most one file's old and new
//! contents (each at most [`DIFF_CAP`]) and its diff, whatever the change set's size.

use std::fs::File;
use std::io::{BufRead, BufWriter, IsTerminal, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use sandbox::changes::ApplyError;
use sandbox::{escape, Change, ChangeKind, ChangeSet};

use crate::args::ChangesArg;

/// The most of one file the diff reads; a larger file is named, not diffed.
const DIFF_CAP: usize = 1 << 20;

/// The most of the diff printed on a terminal, in bytes as shown.
pub const TERMINAL_CAP: usize = 256 << 10;

/// What became of the change set, for `--json`.
#[derive(Debug, Serialize)]
pub struct Settled {
    /// Written into the workspace.
    pub applied: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The complete patch, kept in a file: when the diff on a terminal was cut short, or
    /// the apply met a conflict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<PathBuf>,
    /// The apply failed (refused, conflict, I/O): `sandbox` exits 125.
    #[serde(skip)]
    pub failed: bool,
}

/// What the command line asked of the review.
#[derive(Clone, Copy, Debug)]
pub struct Review {
    /// Apply, ask or discard.
    pub mode: ChangesArg,
    /// `--changes-diff`.
    pub diff: bool,
    /// `--changes-force`: apply over a conflict (never over a refusal).
    pub force: bool,
}

/// Where the review goes: stderr, escaped and capped when it is a terminal.
struct Out {
    terminal: bool,
}

impl Out {
    fn stderr() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// A name or message from the command as shown here: escaped whole on a terminal (a
    /// line break in it shown as `\n`, so it cannot start a line of its own), else as it
    /// is.
    fn text(&self, text: &[u8]) -> Vec<u8> {
        if self.terminal {
            escape(text).into_owned().into_bytes()
        } else {
            text.to_vec()
        }
    }

    /// A patch as shown here: escaped on a terminal line by line (the line breaks kept),
    /// else as it is.
    fn render(&self, text: &[u8]) -> Vec<u8> {
        if !self.terminal {
            return text.to_vec();
        }
        let mut out = Vec::with_capacity(text.len());
        for line in text.split_inclusive(|&b| b == b'\n') {
            let (body, nl) = match line.strip_suffix(b"\n") {
                Some(b) => (b, true),
                None => (line, false),
            };
            out.extend_from_slice(escape(body).as_bytes());
            if nl {
                out.push(b'\n');
            }
        }
        out
    }

    /// Write what is already as it should be shown.
    fn write(&self, shown: &[u8]) {
        let _ = std::io::stderr().lock().write_all(shown);
    }

    /// One line of `sandbox`'s own, holding text from the command.
    fn line(&self, text: &str) {
        let mut l = b"sandbox: ".to_vec();
        l.extend_from_slice(&self.text(text.as_bytes()));
        l.push(b'\n');
        self.write(&l);
    }
}

fn what(c: &Change, out: &Out) -> Vec<u8> {
    match &c.kind {
        ChangeKind::Added => format!("+{} B (added)", c.size).into_bytes(),
        ChangeKind::Modified => match (c.old_mode, c.mode) {
            (Some(o), Some(n)) => format!("{} B (modified, mode {o:o} -> {n:o})", c.size),
            _ => format!("{} B (modified)", c.size),
        }
        .into_bytes(),
        ChangeKind::Deleted { dir: true } => b"(directory deleted)".to_vec(),
        ChangeKind::Deleted { dir: false } => format!("-{} B (deleted)", c.size).into_bytes(),
        ChangeKind::ModeChanged => format!(
            "mode {:o} -> {:o}",
            c.old_mode.unwrap_or(0),
            c.mode.unwrap_or(0)
        )
        .into_bytes(),
        ChangeKind::Symlink { target } => {
            let mut v = b"-> ".to_vec();
            v.extend_from_slice(&out.text(target.as_os_str().as_bytes()));
            v.extend_from_slice(b" (symlink)");
            v
        }
        ChangeKind::DirAdded => b"(directory added)".to_vec(),
        ChangeKind::Special => b"(device, FIFO or socket: never applied)".to_vec(),
    }
}

/// Whether `p` lies in a repository's own directory.
fn under_git(p: &Path) -> bool {
    p.components()
        .any(|c| matches!(c, Component::Normal(n) if n == ".git"))
}

/// The `git diff --stat`-like summary, names as `on` shows them; changes under `.git`
/// listed apart, after the others.
fn summary(set: &ChangeSet, on: &Out) -> Vec<u8> {
    if set.is_empty() {
        return b"sandbox: the command changed nothing in the workspace\n".to_vec();
    }
    let shown = |c: &Change| on.text(c.path.as_os_str().as_bytes());
    let width = set
        .changes()
        .iter()
        .map(|c| shown(c).len())
        .max()
        .unwrap_or(0)
        .min(60);
    let entry = |v: &mut Vec<u8>, c: &Change| {
        let name = shown(c);
        v.push(b' ');
        v.extend_from_slice(&name);
        v.resize(v.len() + width.saturating_sub(name.len()), b' ');
        v.extend_from_slice(b" | ");
        v.extend_from_slice(&what(c, on));
        v.push(b'\n');
    };
    let mut out = Vec::new();
    let (git, rest): (Vec<&Change>, Vec<&Change>) =
        set.changes().iter().partition(|c| under_git(&c.path));
    for c in rest {
        entry(&mut out, c);
    }
    if !git.is_empty() {
        out.extend_from_slice(
            format!(
                " {} changes under .git (a repository's own files: git runs what its hooks \
                 and config name):\n",
                git.len()
            )
            .as_bytes(),
        );
        for c in git {
            entry(&mut out, c);
        }
    }
    let count = |f: fn(&ChangeKind) -> bool| set.changes().iter().filter(|c| f(&c.kind)).count();
    out.extend_from_slice(
        format!(
            " {} changes: {} added, {} modified, {} deleted, {} mode changes, {} symlinks ({} layer)\n",
            set.changes().len(),
            count(|k| matches!(k, ChangeKind::Added | ChangeKind::DirAdded)),
            count(|k| matches!(k, ChangeKind::Modified)),
            count(|k| matches!(k, ChangeKind::Deleted { .. })),
            count(|k| matches!(k, ChangeKind::ModeChanged)),
            count(|k| matches!(k, ChangeKind::Symlink { .. })),
            set.mechanism().as_str()
        )
        .as_bytes(),
    );
    out
}

/// One side of a changed path, as git sees it.
enum Side {
    /// Absent.
    Absent,
    /// A regular file: executable by its owner, and its contents when they are text of at
    /// most [`DIFF_CAP`] bytes (`None`: binary or larger).
    File { exec: bool, text: Option<String> },
    /// A symlink and its target.
    Link(Vec<u8>),
    /// A directory or anything else git does not record.
    Other,
}

impl Side {
    fn mode(&self) -> &'static str {
        match self {
            Self::File { exec: true, .. } => "100755",
            Self::Link(_) => "120000",
            _ => "100644",
        }
    }

    /// The contents, where git's patch can carry them.
    fn text(&self) -> Option<&str> {
        match self {
            Self::Absent => Some(""),
            Self::File { text, .. } => text.as_deref(),
            Self::Link(t) => std::str::from_utf8(t).ok(),
            Self::Other => None,
        }
    }
}

/// Text git's patch can carry: no NUL, valid UTF-8, at most [`DIFF_CAP`].
fn text(bytes: Option<Vec<u8>>) -> Option<String> {
    let b = bytes?;
    if b.len() > DIFF_CAP || b.contains(&0) {
        return None;
    }
    String::from_utf8(b).ok()
}

/// The real path before the apply.
fn old_side(set: &ChangeSet, c: &Change) -> Side {
    let real = set.workspace().join(&c.path);
    match std::fs::symlink_metadata(&real) {
        Err(_) => Side::Absent,
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&real) {
            Ok(t) => Side::Link(t.into_os_string().into_vec()),
            Err(_) => Side::Other,
        },
        Ok(m) if m.file_type().is_file() => Side::File {
            exec: m.mode() & 0o100 != 0,
            text: text(set.old_contents(&c.path, DIFF_CAP + 1)),
        },
        Ok(_) => Side::Other,
    }
}

/// The path as the command left it.
fn new_side(set: &ChangeSet, c: &Change, old: &Side) -> Side {
    match &c.kind {
        ChangeKind::Added | ChangeKind::Modified => Side::File {
            exec: c.mode.unwrap_or(0o644) & 0o100 != 0,
            text: text(set.new_contents(&c.path, DIFF_CAP + 1)),
        },
        ChangeKind::ModeChanged => match old {
            Side::File { text, .. } => Side::File {
                exec: c.mode.unwrap_or(0o644) & 0o100 != 0,
                text: text.clone(),
            },
            _ => Side::Other,
        },
        ChangeKind::Symlink { target } => Side::Link(target.as_os_str().as_bytes().to_vec()),
        ChangeKind::Deleted { dir: false } => Side::Absent,
        ChangeKind::Deleted { dir: true } | ChangeKind::DirAdded | ChangeKind::Special => {
            Side::Other
        }
    }
}

/// `prefix` and `path` as git writes a name in a patch: in double quotes with C escapes
/// when it holds a control byte, a quote, a backslash or a byte over 0x7e.
fn git_name(prefix: &str, path: &Path) -> Vec<u8> {
    let b = path.as_os_str().as_bytes();
    let mut out = Vec::new();
    if !b
        .iter()
        .any(|&c| !(0x20..0x7f).contains(&c) || c == b'"' || c == b'\\')
    {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(b);
        return out;
    }
    out.push(b'"');
    out.extend_from_slice(prefix.as_bytes());
    for &c in b {
        match c {
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            c if !(0x20..0x7f).contains(&c) => {
                out.extend_from_slice(format!("\\{c:03o}").as_bytes())
            }
            c => out.push(c),
        }
    }
    out.push(b'"');
    out
}

/// A `---`/`+++` line: git ends a name holding a space with a tab, so that the name's end
/// is not taken for trailing space.
fn file_line(out: &mut Vec<u8>, marker: &str, name: Option<(&str, &Path)>) {
    out.extend_from_slice(marker.as_bytes());
    match name {
        None => out.extend_from_slice(b"/dev/null"),
        Some((prefix, path)) => {
            let n = git_name(prefix, path);
            let space = n.contains(&b' ');
            out.extend_from_slice(&n);
            if space {
                out.push(b'\t');
            }
        }
    }
    out.push(b'\n');
}

/// One path's patch, from `old` to `new`, in git's format.
fn patch_one(out: &mut Vec<u8>, path: &Path, old: &Side, new: &Side) {
    let (Some(o), Some(n)) = (old.text(), new.text()) else {
        out.extend_from_slice(b"Binary file ");
        out.extend_from_slice(&git_name("", path));
        out.extend_from_slice(b" differs (binary, or over 1 MiB): not in this patch\n");
        return;
    };
    // A file that became a link or the reverse: git writes a deletion and an addition.
    let kinds_differ = matches!(
        (old, new),
        (Side::File { .. }, Side::Link(_)) | (Side::Link(_), Side::File { .. })
    );
    if kinds_differ {
        patch_one(out, path, old, &Side::Absent);
        patch_one(out, path, &Side::Absent, new);
        return;
    }
    out.extend_from_slice(b"diff --git ");
    out.extend_from_slice(&git_name("a/", path));
    out.push(b' ');
    out.extend_from_slice(&git_name("b/", path));
    out.push(b'\n');
    match (old, new) {
        (Side::Absent, _) => {
            out.extend_from_slice(format!("new file mode {}\n", new.mode()).as_bytes())
        }
        (_, Side::Absent) => {
            out.extend_from_slice(format!("deleted file mode {}\n", old.mode()).as_bytes())
        }
        _ if old.mode() != new.mode() => out.extend_from_slice(
            format!("old mode {}\nnew mode {}\n", old.mode(), new.mode()).as_bytes(),
        ),
        _ => {}
    }
    let diff = similar::TextDiff::from_lines(o, n);
    let udiff = diff.unified_diff();
    let mut hunks = udiff.iter_hunks().peekable();
    if hunks.peek().is_none() {
        return;
    }
    let a = (!matches!(old, Side::Absent)).then_some(("a/", path));
    let b = (!matches!(new, Side::Absent)).then_some(("b/", path));
    file_line(out, "--- ", a);
    file_line(out, "+++ ", b);
    for h in hunks {
        // Infallible: writing to a Vec.
        let _ = h.to_writer(&mut *out);
    }
}

/// Each change's patch in turn (empty for what git does not record: directories, special
/// files), made when asked for.
fn patches(set: &ChangeSet) -> impl Iterator<Item = Vec<u8>> + '_ {
    set.changes().iter().filter_map(|c| {
        let old = old_side(set, c);
        let new = new_side(set, c, &old);
        if matches!(old, Side::Other) || matches!(new, Side::Other) {
            return None;
        }
        let mut out = Vec::new();
        patch_one(&mut out, &c.path, &old, &new);
        Some(out)
    })
}

/// Where kept patches go: `$XDG_STATE_HOME/sandbox/patches`, else
/// `~/.local/state/sandbox/patches`, else the temp dir; only this user can read it.
fn patch_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| Path::new(v).is_absolute())
                .map(|h| PathBuf::from(h).join(".local/state"))
        });
    match base {
        Some(b) => b.join("sandbox/patches"),
        None => std::env::temp_dir(),
    }
}

/// A new file for a patch, readable by this user only.
fn new_patch_file() -> std::io::Result<(PathBuf, File)> {
    let dir = patch_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let pid = std::process::id();
    for n in 0.. {
        let path = dir.join(format!("changes-{secs}-{pid}-{n}.patch"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::ErrorKind::AlreadyExists.into())
}

/// The complete patch, written to a new file; its path.
fn keep_patch(set: &ChangeSet) -> std::io::Result<PathBuf> {
    let (path, f) = new_patch_file()?;
    let mut w = BufWriter::new(f);
    for p in patches(set) {
        w.write_all(&p)?;
    }
    w.flush()?;
    Ok(path)
}

/// Print the diff. Not on a terminal: all of it, raw. On a terminal: escaped, file by
/// file while the total stays under [`TERMINAL_CAP`]; the complete patch goes to a file
/// meanwhile, kept (its path returned) when something was left out.
fn show_diff(set: &ChangeSet, out: &Out) -> Option<PathBuf> {
    if !out.terminal {
        let mut err = std::io::stderr().lock();
        for p in patches(set) {
            let _ = err.write_all(&p);
        }
        return None;
    }
    let mut file = match new_patch_file() {
        Ok((path, f)) => Some((path, BufWriter::new(f))),
        Err(e) => {
            eprintln!(
                "sandbox: cannot keep the complete patch ({e}): the diff below may be cut \
                 short; remedy: check that {} is writable",
                patch_dir().display()
            );
            None
        }
    };
    let (mut shown, mut left_out) = (0usize, 0usize);
    for p in patches(set) {
        if let Some((_, w)) = &mut file {
            if w.write_all(&p).is_err() {
                file = None;
            }
        }
        let r = out.render(&p);
        if left_out == 0 && shown + r.len() <= TERMINAL_CAP {
            shown += r.len();
            let _ = std::io::stderr().lock().write_all(&r);
        } else {
            left_out += 1;
        }
    }
    let kept = file.and_then(|(path, mut w)| {
        if w.flush().is_ok() && left_out > 0 {
            Some(path)
        } else {
            let _ = std::fs::remove_file(&path);
            None
        }
    });
    if left_out > 0 {
        match &kept {
            Some(p) => eprintln!(
                "sandbox: {left_out} files left out of the diff (over {} KiB on a terminal); \
                 the complete patch: {}",
                TERMINAL_CAP >> 10,
                p.display()
            ),
            None => eprintln!(
                "sandbox: {left_out} files left out of the diff (over {} KiB on a terminal); \
                 remedy: --changes-diff with stderr redirected to a file shows all of it",
                TERMINAL_CAP >> 10
            ),
        }
    }
    kept
}

/// Ask on the terminal whether to apply.
fn ask(set: &ChangeSet, out: &Out) -> bool {
    let mut prompt = format!("Apply these {} changes to ", set.changes().len()).into_bytes();
    prompt.extend_from_slice(&out.text(set.workspace().as_os_str().as_bytes()));
    prompt.extend_from_slice(b"? [y/N] ");
    out.write(&prompt);
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

fn apply(set: &ChangeSet, force: bool, out: &Out, mut patch: Option<PathBuf>) -> Settled {
    match set.apply(force) {
        Ok(r) => {
            eprintln!(
                "sandbox: changes applied ({} written, {} deleted, {} mode changes)",
                r.written, r.deleted, r.modes
            );
            if !r.forced.is_empty() {
                out.line(&format!(
                    "--changes-force overwrote what changed in the workspace meanwhile: {}",
                    r.forced
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Settled {
                applied: true,
                reason: None,
                patch,
                failed: false,
            }
        }
        Err(e) => {
            let remedy = match &e {
                ApplyError::Conflict { .. } => {
                    // The user's work and the command's both stand: the change set is
                    // kept for applying by hand.
                    if patch.is_none() {
                        match keep_patch(set) {
                            Ok(p) => patch = Some(p),
                            Err(err) => eprintln!(
                                "sandbox: cannot keep the change set as a patch in {}: {err}",
                                patch_dir().display()
                            ),
                        }
                    }
                    "re-run the command, or with --changes-force to overwrite, or apply the \
                     kept patch by hand"
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
            out.line(&format!("changes not applied: {e}; remedy: {remedy}"));
            if let (ApplyError::Conflict { .. }, Some(p)) = (&e, &patch) {
                eprintln!(
                    "sandbox: the change set is kept as a patch: {} (in {}: git apply {0})",
                    p.display(),
                    set.workspace().display()
                );
            }
            set.discard();
            Settled {
                applied: false,
                reason: Some(e.to_string()),
                patch,
                failed: true,
            }
        }
    }
}

/// Show the change set and do what `review` says with it.
pub fn settle(set: &ChangeSet, review: Review) -> Settled {
    let out = Out::stderr();
    if review.mode != ChangesArg::Discard || review.diff {
        out.write(&summary(set, &out));
    }
    let patch = if review.diff && !set.is_empty() {
        show_diff(set, &out)
    } else {
        None
    };
    let not = |reason: &str, patch: Option<PathBuf>| {
        eprintln!("sandbox: {reason}");
        set.discard();
        Settled {
            applied: false,
            reason: Some(reason.into()),
            patch,
            failed: false,
        }
    };
    if set.is_empty() {
        return Settled {
            applied: false,
            reason: Some("nothing changed".into()),
            patch: None,
            failed: false,
        };
    }
    match review.mode {
        ChangesArg::Discard => not("changes discarded (--changes discard)", patch),
        ChangesArg::Apply => apply(set, review.force, &out, patch),
        ChangesArg::Ask => {
            if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                not("--changes ask: no terminal to ask on, so nothing was applied (use --changes apply to apply without asking)", patch)
            } else if ask(set, &out) {
                apply(set, review.force, &out, patch)
            } else {
                not("changes discarded", patch)
            }
        }
    }
}

/// The change set as `--json` shows it: the library's shape, except that a name which is
/// not UTF-8 (the command's choice) is written lossily in `path` (or `target`) with its
/// exact bytes beside it in `path_bytes` (`target_bytes`), so that such a name cannot make
/// the whole outcome unwritable.
#[derive(Debug)]
pub struct JsonChanges<'a>(pub &'a ChangeSet);

/// A path as JSON can carry it: a string, and its bytes when the string is not exact.
fn lossy(p: &Path) -> (String, Option<&[u8]>) {
    match p.to_str() {
        Some(s) => (s.to_owned(), None),
        None => (
            String::from_utf8_lossy(p.as_os_str().as_bytes()).into_owned(),
            Some(p.as_os_str().as_bytes()),
        ),
    }
}

impl Serialize for JsonChanges<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("ChangeSet", 3)?;
        st.serialize_field("mechanism", &self.0.mechanism())?;
        st.serialize_field("workspace", &lossy(self.0.workspace()).0)?;
        let changes: Vec<JsonChange<'_>> = self.0.changes().iter().map(JsonChange).collect();
        st.serialize_field("changes", &changes)?;
        st.end()
    }
}

struct JsonChange<'a>(&'a Change);

impl Serialize for JsonChange<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let c = self.0;
        let mut m = s.serialize_map(None)?;
        let (path, bytes) = lossy(&c.path);
        m.serialize_entry("path", &path)?;
        if let Some(b) = bytes {
            m.serialize_entry("path_bytes", b)?;
        }
        let kind = match &c.kind {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted { .. } => "deleted",
            ChangeKind::ModeChanged => "mode_changed",
            ChangeKind::Symlink { .. } => "symlink",
            ChangeKind::DirAdded => "dir_added",
            ChangeKind::Special => "special",
        };
        m.serialize_entry("kind", kind)?;
        match &c.kind {
            ChangeKind::Deleted { dir } => m.serialize_entry("dir", dir)?,
            ChangeKind::Symlink { target } => {
                let (t, bytes) = lossy(target);
                m.serialize_entry("target", &t)?;
                if let Some(b) = bytes {
                    m.serialize_entry("target_bytes", b)?;
                }
            }
            _ => {}
        }
        m.serialize_entry("size", &c.size)?;
        m.serialize_entry("old_mode", &c.old_mode)?;
        m.serialize_entry("mode", &c.mode)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_as_git_quotes_them() {
        assert_eq!(git_name("a/", Path::new("src/x y.rs")), b"a/src/x y.rs");
        assert_eq!(
            git_name("b/", Path::new("t\tab\"q\\.txt")),
            b"\"b/t\\tab\\\"q\\\\.txt\""
        );
        assert_eq!(
            git_name("a/", Path::new("n\x1b[2K.txt")),
            b"\"a/n\\033[2K.txt\""
        );
        assert_eq!(git_name("a/", Path::new("é")), b"\"a/\\303\\251\"");
    }

    #[test]
    fn a_name_that_is_not_utf8_is_lossy_with_its_bytes_beside_it() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"bad\xffname"));
        assert_eq!(
            lossy(p),
            ("bad\u{fffd}name".to_string(), Some(&b"bad\xffname"[..]))
        );
        assert_eq!(lossy(Path::new("ok")), ("ok".to_string(), None));
    }

    #[test]
    fn only_a_git_directory_is_under_git() {
        assert!(under_git(Path::new(".git/hooks/pre-commit")));
        assert!(under_git(Path::new("vendor/x/.git/config")));
        assert!(!under_git(Path::new(".github/workflows/ci.yml")));
        assert!(!under_git(Path::new("src/.gitignore")));
    }

    #[test]
    fn added_and_deleted_files_are_against_dev_null_with_their_modes() {
        let mut out = Vec::new();
        let file = |exec, t: &str| Side::File {
            exec,
            text: Some(t.into()),
        };
        patch_one(&mut out, Path::new("n"), &Side::Absent, &file(true, "x\n"));
        patch_one(&mut out, Path::new("d"), &file(false, "y"), &Side::Absent);
        patch_one(&mut out, Path::new("e"), &Side::Absent, &file(false, ""));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "diff --git a/n b/n\nnew file mode 100755\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n\
             diff --git a/d b/d\ndeleted file mode 100644\n--- a/d\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n\\ No newline at end of file\n\
             diff --git a/e b/e\nnew file mode 100644\n"
        );
    }

    #[test]
    fn on_a_terminal_every_line_is_escaped_and_the_breaks_kept() {
        let out = Out { terminal: true };
        assert_eq!(
            out.render(b"+x\x1b[2K\n+\x1b[1Ay\n"),
            b"+x\\x1b[2K\n+\\x1b[1Ay\n"
        );
        let raw = Out { terminal: false };
        assert_eq!(raw.render(b"+x\x1b[2K\n"), b"+x\x1b[2K\n");
    }
}
