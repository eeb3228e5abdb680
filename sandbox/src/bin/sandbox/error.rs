//! The command's errors, and how each becomes one line on stderr and an exit status.
//!
//! Every failure of `sandbox` itself exits 125 (as `docker run` does), except that a
//! program that cannot be found or executed exits 127 or 126 (as a shell does), so a caller
//! can tell "my command failed" from "the sandbox did not run it".

use std::path::PathBuf;

use sandbox::{Lane, Plan, SandboxError, SandboxOpts};

/// The exit status for a failure of `sandbox` itself.
pub const SANDBOX_FAILED: i32 = 125;
/// The exit status for a program that exists but cannot be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// The exit status for a program that was not found.
pub const NOT_FOUND: i32 = 127;

/// Why `sandbox` did not run, or did not finish running, the command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value is wrong.
    #[error("invalid --{flag}: {reason}")]
    Option {
        /// The flag, without its dashes.
        flag: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The policy file cannot be read or parsed.
    #[error("policy file {}: {reason}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The library refused or failed; `hint` is a remedy better than the library's own,
    /// when the command line knows one.
    #[error("{source}")]
    Sandbox {
        /// The error.
        source: SandboxError,
        /// A remedy in the command line's own terms.
        hint: Option<String>,
    },
    /// The host refused something `sandbox` needs to run at all.
    #[error("{context}: {source}")]
    Host {
        /// What we were doing.
        context: &'static str,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

impl From<SandboxError> for CliError {
    fn from(source: SandboxError) -> Self {
        Self::Sandbox { source, hint: None }
    }
}

/// The command-line flag for a field of the library's options.
fn flag_of(field: &str) -> &str {
    match field {
        "workspace" => "--workspace",
        "read_only_paths" => "--read",
        "writable_paths" => "--write",
        "env.set" | "env.pass" => "--env",
        "upstream_cas" => "--upstream-ca",
        "upstream_proxy" => "--upstream-proxy",
        "timeout" => "--timeout",
        "output_limit" => "--max-output",
        "limits.memory_bytes" => "--memory",
        "backend" => "--backend",
        "image" => "--image",
        "argv" => "PROGRAM",
        "cwd" => "the current directory",
        other => other,
    }
}

impl CliError {
    /// An error in the value of `--flag`.
    pub fn option(flag: &'static str, reason: impl Into<String>) -> Self {
        Self::Option {
            flag,
            reason: reason.into(),
        }
    }

    /// The exit status this error ends `sandbox` with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Sandbox { source, .. } if source.is_not_found() => NOT_FOUND,
            Self::Sandbox { source, .. } if source.is_not_executable() => NOT_EXECUTABLE,
            _ => SANDBOX_FAILED,
        }
    }

    /// A short machine-readable name of the cause, for `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Option { .. } | Self::Config { .. } => "invalid_options",
            Self::Sandbox { source, .. } if source.is_not_found() => "not_found",
            Self::Sandbox { source, .. } if source.is_not_executable() => "not_executable",
            Self::Sandbox { source, .. } => match source {
                SandboxError::InvalidConfig { .. } => "invalid_options",
                SandboxError::Unavailable { .. } => "unavailable",
                SandboxError::PolicyRefused { .. } => "policy_refused",
                SandboxError::NotSupported { .. } => "not_supported",
                _ => "sandbox_failed",
            },
            Self::Host { .. } => "sandbox_failed",
        }
    }

    /// The reason and the remedy, each a sentence without line breaks.
    pub fn explain(&self) -> (String, String) {
        let (reason, remedy) = match self {
            Self::Option { .. } => (
                self.to_string(),
                "fix the option; `sandbox run --help` lists them".to_string(),
            ),
            Self::Config { .. } => (
                self.to_string(),
                "fix the file; its keys are the names of `sandbox run`'s options".to_string(),
            ),
            Self::Sandbox { source, hint } => {
                let (reason, remedy) = explain_sandbox(source);
                (reason, hint.clone().unwrap_or(remedy))
            }
            Self::Host { .. } => (
                self.to_string(),
                "check the host's limits (open files, threads, memory)".to_string(),
            ),
        };
        (one_line(&reason), one_line(&remedy))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn explain_sandbox(e: &SandboxError) -> (String, String) {
    match e {
        SandboxError::InvalidConfig { field, reason } if *field == "argv" => {
            let remedy = if e.is_not_executable() {
                "make it executable (chmod +x), or run it through its interpreter"
            } else if e.is_not_found() {
                "check the name; the command's PATH is the system one unless you set \
                 another with --env PATH=..."
            } else {
                "name the program to run after `--`"
            };
            (reason.clone(), remedy.to_string())
        }
        SandboxError::InvalidConfig { field, reason } => (
            format!("invalid {}: {reason}", flag_of(field)),
            "fix the option; `sandbox run --help` lists them".to_string(),
        ),
        SandboxError::ControlGrant {
            field,
            path,
            what,
            remedy,
        } => (
            format!(
                "{} {} is refused: it is {what}",
                flag_of(field),
                path.display()
            ),
            remedy.clone(),
        ),
        SandboxError::Unavailable {
            backend,
            reason,
            remedy,
        } => (
            format!("backend `{backend}` cannot run here: {reason}"),
            remedy.clone(),
        ),
        SandboxError::PolicyRefused {
            lane,
            backend,
            reason,
        } => (
            format!("lane `{lane}` refuses backend `{backend}`: {reason}"),
            match sandbox::select::container_strict_remedy() {
                Some(container) if lane == "strict" => {
                    format!("{container}; or use --lane fast, which runs here without namespaces")
                }
                _ => "choose a backend that enforces the request (`sandbox doctor` shows what \
                      each enforces), or another --lane"
                    .to_string(),
            },
        ),
        SandboxError::NotSupported {
            backend,
            feature,
            remedy,
        } => (
            format!("backend `{backend}` cannot enforce {feature}"),
            remedy.clone(),
        ),
        SandboxError::TempDir {
            dir,
            what,
            reason,
            source,
        } => (
            format!(
                "cannot create the {what} directory in the host's temp dir {} (TMPDIR): \
                 {reason}: {source}",
                dir.display()
            ),
            "point TMPDIR at a writable directory with free space".to_string(),
        ),
        SandboxError::Spawn { .. } => (
            e.to_string(),
            "`sandbox doctor` checks whether the backend works here".to_string(),
        ),
        other => (
            other.to_string(),
            "`sandbox doctor` checks whether the backend works here".to_string(),
        ),
    }
}

/// The grants a backend does not enforce exactly, each as "what (what it gives instead)":
/// how every door of the command says what a `trusted` lane gives away.
pub fn over_grants(grants: &[sandbox::Grant]) -> Vec<String> {
    grants
        .iter()
        .filter_map(|g| match g.enforcement {
            sandbox::Enforcement::OverGrant(gives) => Some(format!("{} ({gives})", g.what)),
            _ => None,
        })
        .collect()
}

/// When `backend` refused `opts` on its lane but the `trusted` lane would run them, the
/// remedy that says exactly that, with what `trusted` would over-grant.
///
/// This is how `--backend none` without `--lane trusted` gets told that `none` runs only
/// there, and that even network `none` is then the host's whole network.
pub fn trusted_lane_hint(
    opts: &SandboxOpts,
    backend: &'static str,
    cap: &sandbox::Capability,
) -> Option<String> {
    if opts.lane == Lane::Trusted {
        return None;
    }
    if opts.lane == Lane::Strict {
        // `fast` first: inside a container that withholds namespaces it runs what `strict`
        // refuses, with what it gives up recorded; the container's remedy is for `strict`.
        let mut fast = opts.clone();
        fast.lane = Lane::Fast;
        if let Ok(plan) = Plan::new(&fast, backend, cap) {
            let over = over_grants(&plan.grants);
            let gives = if over.is_empty() {
                String::new()
            } else {
                format!(", where it does not enforce: {}", over.join(", "))
            };
            let strict = sandbox::select::container_strict_remedy()
                .map(|r| format!("; for `strict`: {r}"))
                .unwrap_or_default();
            return Some(format!(
                "backend `{backend}` runs this on `--lane fast`{gives}{strict}"
            ));
        }
    }
    let mut trusted = opts.clone();
    trusted.lane = Lane::Trusted;
    let plan = match Plan::new(&trusted, backend, cap) {
        Ok(plan) => plan,
        Err(SandboxError::PolicyRefused { .. }) => return None,
        Err(_) => {
            return Some(format!(
                "backend `{backend}` runs this only on `--lane trusted`, and cannot run even \
                 there on this host (`sandbox doctor` says why and what to do); choose a \
                 confining backend"
            ))
        }
    };
    let over = over_grants(&plan.grants);
    Some(if over.is_empty() {
        format!("backend `{backend}` runs this only on `--lane trusted`; add it to accept that")
    } else {
        format!(
            "backend `{backend}` runs this only on `--lane trusted`, where it does not \
             enforce: {}; add `--lane trusted` to accept that, or choose a confining backend",
            over.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_and_docker_conventions() {
        let nf = CliError::from(SandboxError::invalid(
            "argv",
            "program nope not found on PATH /bin",
        ));
        assert_eq!(nf.exit_code(), NOT_FOUND);
        let nx = CliError::from(SandboxError::invalid(
            "argv",
            "program ./x is not executable",
        ));
        assert_eq!(nx.exit_code(), NOT_EXECUTABLE);
        let ws = CliError::from(SandboxError::invalid("workspace", "/x does not exist"));
        assert_eq!(ws.exit_code(), SANDBOX_FAILED);
        let un = CliError::from(SandboxError::unavailable("b", "no tool", "install it"));
        assert_eq!(un.exit_code(), SANDBOX_FAILED);
        assert_eq!(
            CliError::option("timeout", "bad").exit_code(),
            SANDBOX_FAILED
        );
    }

    /// The string literals of a Rust source, continuation lines joined, comments and
    /// character literals skipped.
    fn literals(src: &str) -> Vec<String> {
        let b = src.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'/' if b.get(i + 1) == Some(&b'/') => {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                }
                // A character literal (`'"'`, `'\''`), not a lifetime.
                b'\'' if b.get(i + 1) == Some(&b'\\') => {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                }
                b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
                b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                    && !b[..i]
                        .last()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') =>
                {
                    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                    let start = i + 1 + hashes;
                    if b.get(start) != Some(&b'"') {
                        i += 1;
                        continue;
                    }
                    let end = format!("\"{}", "#".repeat(hashes));
                    let rest = &src[start + 1..];
                    let len = rest.find(&end).unwrap_or(rest.len());
                    out.push(rest[..len].to_string());
                    i = start + 1 + len + end.len();
                }
                b'"' => {
                    let mut text = String::new();
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        if b[i] == b'\\' && b.get(i + 1) == Some(&b'\n') {
                            // A continuation: the line break and the next line's indent
                            // are not part of the text.
                            i += 2;
                            while i < b.len() && b[i].is_ascii_whitespace() {
                                i += 1;
                            }
                            continue;
                        }
                        if b[i] == b'\\' {
                            text.push(b[i] as char);
                            i += 1;
                        }
                        let ch = src[i..].chars().next().unwrap_or(' ');
                        text.push(ch);
                        i += ch.len_utf8();
                    }
                    i += 1;
                    out.push(text);
                }
                _ => i += 1,
            }
        }
        out
    }

    /// The `--flag`s a literal names as the command's own: in prose, not an argument
    /// the product passes to another program (a literal that is one flag, `"--ro-bind"`),
    /// nor another program's flag in a quoted command (`` `cargo build --features X` ``)
    /// or after its name (`runsc --rootless`).
    fn own_flags(text: &str) -> Vec<String> {
        // Flags of other programs: their names, and `diff` for the header line of a patch.
        const OTHER_PROGRAMS: [&str; 7] =
            ["runsc", "bwrap", "docker", "cargo", "git", "curl", "diff"];
        let trimmed = text.trim();
        if trimmed.starts_with("--") && !trimmed.contains(' ') {
            return Vec::new();
        }
        let mut flags = Vec::new();
        let mut from = 0;
        while let Some(at) = text[from..].find("--").map(|a| a + from) {
            from = at + 2;
            let before = text[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_') {
                continue;
            }
            let name: String = text[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                continue;
            }
            let pre = &text[..at];
            let span_start = pre.rfind('`').map_or(0, |q| q + 1);
            let quoted = pre.matches('`').count() % 2 == 1;
            let first_word = pre[span_start..].split_whitespace().next().unwrap_or("");
            if quoted && !first_word.is_empty() && first_word != "sandbox" {
                continue;
            }
            let previous_word = pre
                .split_whitespace()
                .last()
                .unwrap_or("")
                .trim_matches(|c: char| !c.is_alphanumeric());
            if OTHER_PROGRAMS.contains(&previous_word) {
                continue;
            }
            flags.push(name);
        }
        flags
    }

    /// Every `--flag` a message of the product names as the command's (remedies, hints,
    /// help) is a real flag of `sandbox`: the sources of every product crate are read, up
    /// to their test module, and each flag is looked up in clap's definition.
    #[test]
    fn every_flag_a_message_names_exists() {
        use clap::CommandFactory;
        let cli = crate::args::Cli::command();
        let mut real: Vec<String> = vec!["help".into(), "version".into()];
        for sub in cli.get_subcommands() {
            real.extend(
                sub.get_arguments()
                    .filter_map(|a| a.get_long())
                    .map(str::to_string),
            );
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut sources = Vec::new();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n == "sandbox" || n.starts_with("sandbox-"))
            })
            .map(|p| p.join("src"))
            .collect();
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    sources.push(p);
                }
            }
        }
        assert!(
            sources.len() > 20,
            "found the product's sources: {sources:?}"
        );
        let mut wrong = Vec::new();
        let mut named = 0;
        // What `--help` says, too: clap's texts come from doc comments the scan skips.
        let mut cmd = crate::args::Cli::command();
        for sub in cmd.get_subcommands_mut() {
            let help = sub.render_long_help().to_string();
            for flag in own_flags(&help) {
                named += 1;
                if !real.contains(&flag) {
                    wrong.push(format!("{} --help: --{flag}", sub.get_name()));
                }
            }
        }
        for path in &sources {
            let src = std::fs::read_to_string(path).unwrap();
            let src = src
                .find("#[cfg(test)]\nmod tests")
                .map_or(src.as_str(), |end| &src[..end]);
            for text in literals(src) {
                for flag in own_flags(&text) {
                    named += 1;
                    if !real.contains(&flag) {
                        wrong.push(format!("{}: --{flag} in {text:?}", path.display()));
                    }
                }
            }
        }
        assert!(named > 10, "the scan finds the flags messages name");
        assert!(
            wrong.is_empty(),
            "flags `sandbox` does not have: {wrong:#?}"
        );
    }

    #[test]
    fn the_flag_scan_reads_prose_and_skips_other_programs() {
        let src = "let a = \"--ro-bind\"; // \"--not-this\"\nlet c = '\"'; \
                   let b = \"set it (--memory, \\\n    --max-procs) or `cargo b --features x`\";";
        let lits = literals(src);
        assert_eq!(lits.len(), 2, "{lits:?}");
        let flags: Vec<String> = lits.iter().flat_map(|l| own_flags(l)).collect();
        assert_eq!(flags, ["memory", "max-procs"]);
        assert!(own_flags("runsc --rootless needs").is_empty());
        assert!(own_flags("(runsc --rootless has none)").is_empty());
        assert_eq!(own_flags("add `--lane trusted`"), ["lane"]);
        assert_eq!(own_flags("`sandbox run --nope` x"), ["nope"]);
    }

    #[test]
    fn explanations_are_single_lines_with_the_flag_named() {
        let e = CliError::from(SandboxError::invalid(
            "workspace",
            "/x does not exist:\n No such file",
        ));
        let (reason, remedy) = e.explain();
        assert!(reason.contains("--workspace"), "{reason}");
        assert!(!reason.contains('\n') && !remedy.contains('\n'));
        let e = CliError::from(SandboxError::unavailable("b", "missing", "apt install"));
        assert_eq!(e.explain().1, "apt install");
    }
}
