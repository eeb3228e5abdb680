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
            "choose a backend that enforces the request (`sandbox doctor` shows what each \
             enforces), or another --lane"
                .to_string(),
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
