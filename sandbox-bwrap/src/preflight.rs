//! Does bwrap work here? Two checks, both doing the real thing:
//!
//! - the **setup probe**: bwrap builds every namespace this backend uses (user, pid, ipc,
//!   uts, cgroup, a network namespace with its loopback) with a fresh `/proc` and `/dev`,
//!   then tries to execute a path that does not exist. Reaching that `execvp` error proves
//!   the set-up works, and nothing at all runs. Synchronous and quick (a few milliseconds),
//!   so `prepare` runs it before the first command of a shape, and records a success
//!   (`sandbox_host::facts`): a host that forbids user namespaces is an error with a
//!   remedy, not an "exit 1" outcome. Where a recorded success no longer holds, the run's
//!   own bwrap fails the same way before the command starts, and the run says so as an
//!   error (the waiter never reported the sandbox set up).
//! - the **preflight**: a real `true` through the whole backend (seccomp, the waiter, the
//!   filesystem), reporting the bwrap version.
//!
//! Failures are classified from bwrap's message into a cause and a remedy a person can act
//! on; the classification is a pure function, unit-tested on bwrap's actual messages.

use sandbox_core::SandboxError;
use sandbox_host::facts::HostRecord;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::NAME;

/// The path the probe asks bwrap to execute: absent, on purpose.
const PROBE_TARGET: &str = "/.sandbox-bwrap-probe-does-not-exist";

/// Why bwrap could not set a sandbox up, from its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SetupFailure {
    /// User namespaces are not allowed to this user.
    UserNamespaces,
    /// The loopback interface of a new network namespace could not be configured.
    Loopback,
    /// The kernel refused the seccomp program.
    Seccomp,
    /// Anything else.
    Other,
}

/// Classify bwrap's error output.
pub(crate) fn classify(stderr: &str) -> SetupFailure {
    let s = stderr.to_ascii_lowercase();
    if s.contains("loopback") {
        SetupFailure::Loopback
    } else if s.contains("seccomp") {
        SetupFailure::Seccomp
    } else if s.contains("namespace")
        || s.contains("uid map")
        || s.contains("gid map")
        || s.contains("setgroups")
        || s.contains("unshare")
    {
        SetupFailure::UserNamespaces
    } else {
        SetupFailure::Other
    }
}

/// The error for a set-up failure, with bwrap's own words and the remedy.
pub(crate) fn setup_error(stderr: &str) -> SandboxError {
    let said = stderr.trim();
    let (reason, remedy) = match classify(stderr) {
        SetupFailure::UserNamespaces => (
            format!("bwrap cannot create user namespaces here ({said})"),
            "allow unprivileged user namespaces: on Ubuntu 23.10 and later AppArmor blocks \
             them (`sysctl kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor \
             profile granting `userns` to /usr/bin/bwrap); on older Debian \
             `sysctl kernel.unprivileged_userns_clone=1`; `user.max_user_namespaces` must be \
             above 0; inside a container, run it with user namespaces allowed",
        ),
        SetupFailure::Loopback => (
            format!(
                "bwrap cannot set up the loopback interface of a new network namespace \
                 ({said})"
            ),
            "run where network namespaces can be configured (this container or host forbids \
             it); network modes `none` and `loopback` depend on it",
        ),
        SetupFailure::Seccomp => (
            format!("the kernel refused the seccomp program ({said})"),
            "use a kernel built with CONFIG_SECCOMP_FILTER",
        ),
        SetupFailure::Other => (
            format!("bwrap could not set up a sandbox ({said})"),
            "run `bwrap --unshare-all --dev /dev --proc /proc --ro-bind /usr /usr -- \
             /usr/bin/true` by hand to see what the host refuses",
        ),
    };
    SandboxError::unavailable(NAME, reason, remedy)
}

/// The setup probe (see the module docs), with a network namespace of its own when
/// `own_network`, run as uid and gid `as_id` when given (a root host's launcher that
/// leaves uid 0, see `sandbox_host::handover`). Ok when bwrap got as far as executing.
pub(crate) fn probe(
    bwrap: &Path,
    own_network: bool,
    as_id: Option<u32>,
) -> Result<(), SandboxError> {
    let mut cmd = Command::new(bwrap);
    if let Some(id) = as_id {
        // std drops the supplementary groups too when root changes uid.
        cmd.uid(id).gid(id).current_dir("/");
    }
    cmd.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    if own_network {
        cmd.arg("--unshare-net");
    }
    let out = cmd
        .args([
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            PROBE_TARGET,
        ])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            SandboxError::unavailable(
                NAME,
                format!("could not run {}: {e}", bwrap.display()),
                "install bubblewrap (`apt-get install bubblewrap`) and make sure `bwrap` is \
                 executable",
            )
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("execvp") && stderr.contains(PROBE_TARGET) {
        Ok(())
    } else {
        Err(setup_error(&stderr))
    }
}

/// The name of the recorded fact that the setup probe of this shape worked.
fn probe_fact(own_network: bool, as_id: Option<u32>) -> String {
    format!(
        "setup probe: {} network, {}",
        if own_network { "own" } else { "host" },
        match as_id {
            Some(id) => format!("as uid {id}"),
            None => "as the caller".to_string(),
        }
    )
}

/// The probe, once per network shape and identity for as long as `record` holds its
/// success (this process, and a caller's fact store): a success is recorded, a failure is
/// not (the host may be fixed). A recorded success that no longer holds costs nothing
/// unsafe: bwrap then cannot set the run's sandbox up either, runs nothing, and the run
/// is an error (see `Launch::ready_pipe`). A host that cannot set up a loopback still
/// runs commands that share its network.
pub(crate) fn probe_once(
    bwrap: &Path,
    own_network: bool,
    as_id: Option<u32>,
    record: &HostRecord,
) -> Result<(), SandboxError> {
    let fact = probe_fact(own_network, as_id);
    if record.get(&fact).as_deref() == Some("ok") {
        return Ok(());
    }
    probe(bwrap, own_network, as_id)?;
    record.set(&fact, "ok");
    Ok(())
}

/// Every setup probe `record` holds a success of, run again: the preflight's real trial.
/// One that fails now drops the record and is the error.
pub(crate) fn recheck(bwrap: &Path, record: &HostRecord) -> Result<(), SandboxError> {
    for own_network in [true, false] {
        for as_id in [None, Some(sandbox_host::idmap::SPARE_COMMAND_ID)] {
            if record.get(&probe_fact(own_network, as_id)).as_deref() != Some("ok") {
                continue;
            }
            if let Err(e) = probe(bwrap, own_network, as_id) {
                record.forget();
                return Err(e);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bwraps_messages_are_classified() {
        // The messages of bubblewrap 0.4 to 0.10, as users report them.
        for (msg, want) in [
            (
                "bwrap: No permissions to creating new namespace, likely because the kernel \
                 does not allow non-privileged user namespaces.",
                SetupFailure::UserNamespaces,
            ),
            (
                "bwrap: setting up uid map: Permission denied",
                SetupFailure::UserNamespaces,
            ),
            (
                "bwrap: Creating new namespace failed: No space left on device",
                SetupFailure::UserNamespaces,
            ),
            (
                "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
                SetupFailure::Loopback,
            ),
            (
                "bwrap: prctl(PR_SET_SECCOMP): Invalid argument",
                SetupFailure::Seccomp,
            ),
            (
                "bwrap: Can't mount proc on /newroot/proc",
                SetupFailure::Other,
            ),
        ] {
            assert_eq!(classify(msg), want, "{msg}");
        }
    }

    #[test]
    fn errors_carry_the_message_and_an_actionable_remedy() {
        let e = setup_error("bwrap: setting up uid map: Permission denied");
        let text = e.to_string();
        assert!(text.contains("uid map"), "{text}");
        assert!(
            text.contains("kernel.apparmor_restrict_unprivileged_userns"),
            "{text}"
        );
        let e = setup_error("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted");
        assert!(e.to_string().contains("loopback"), "{e}");
        assert!(matches!(e, SandboxError::Unavailable { .. }));
    }

    #[test]
    fn the_probe_passes_on_this_host() {
        // CI installs bwrap and requires the backend: a missing bwrap is a failure here.
        let bwrap = which::which("bwrap").expect("bwrap is installed on test hosts");
        probe(&bwrap, true, None).unwrap();
        probe(&bwrap, false, None).unwrap();
    }

    #[test]
    fn a_missing_bwrap_is_unavailable_with_the_install_remedy() {
        let e = probe(Path::new("/nonexistent/bwrap"), true, None).unwrap_err();
        assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}");
        assert!(e.to_string().contains("apt-get install bubblewrap"), "{e}");
    }
}
