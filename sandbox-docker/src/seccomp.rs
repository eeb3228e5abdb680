//! The container's system-call filter: core's table of denied calls
//! ([`sandbox_core::syscalls`], which the bwrap and landlock backends install as a BPF
//! program), rendered as the engine's seccomp profile.
//!
//! # Why our own profile
//!
//! The engine's default profile lets a process set the setuid bit on a file it owns. With
//! the command running as its own uid that is harmless, but a root host hands a root-owned
//! tree over through an idmapped mount ([`crate::idmap`]), where what the command owns is
//! root's on disk: a setuid bit there would leave a setuid-root program in the workspace.
//! So `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, and `open`, `openat`, `creat`, `mknod`,
//! `mknodat` with a setuid or setgid bit in their mode fail with `EPERM`, on every run.
//! The rest of core's table is denied with `EPERM` too (tracing, mounts, namespaces, the
//! keyring, bpf, perf, userfaultfd, io_uring, which performs calls the filter never sees,
//! host administration, file handles, obsolete calls). The profile is rendered for the
//! policy of a container: its network is its own namespace and its tree dies with it, so
//! `socket` and `setsid` are not filtered (see [`POLICY`]).
//!
//! # An allow list
//!
//! The profile allows every call it names and answers `ENOSYS` to the rest, so the C
//! library falls back from calls it cannot use (`clone3` to `clone`, `openat2` to
//! `openat`, whose arguments the filter can read). A deny list would be wrong here: the
//! engine drops the names its libseccomp does not know (Debian 12's does not know
//! `fchmodat2`), and a deny rule that is dropped silently allows the call. An allowed
//! name that is dropped is merely denied.
//!
//! `ioctl(TIOCSTI)` is not filtered (the table's one rule this rendering leaves out, a
//! [`Rule::TerminalInjection`]): the container has no terminal (`Tty` is off, stdio are
//! pipes), so there is no input to push into.

use std::sync::OnceLock;

use sandbox_core::syscalls::{
    self, Rule, SyscallPolicy, NAMESPACE_FLAGS, SETID_BITS, X86_64_NAMES,
};
use sandbox_core::NetworkMode;
use serde_json::{json, Value};

/// The table's policy for a container: its network is its own namespace (the engine's
/// `none` has no interface but loopback), and its whole tree dies with it, so neither
/// sockets nor new process groups need filtering.
pub(crate) const POLICY: SyscallPolicy = SyscallPolicy {
    network: NetworkMode::Full,
    deny_setsid: false,
};

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

fn masked(index: u8, mask: u64, equals: u64) -> Value {
    json!({ "index": index, "value": mask, "valueTwo": equals, "op": "SCMP_CMP_MASKED_EQ" })
}

/// The profile, as the engine's `SecurityOpt` value (`seccomp=<json>`).
pub(crate) fn security_opt() -> &'static str {
    static OPT: OnceLock<String> = OnceLock::new();
    OPT.get_or_init(|| format!("seccomp={}", profile()))
}

/// Rules that allow `name` when argument `index` has none of `bits`, and deny it with
/// `EPERM` when it has any (one rule per bit: the rules of one call are alternatives; a
/// rule's conditions must all hold).
fn allowed_without(name: &str, index: u8, bits: &[u64]) -> Vec<Value> {
    let all = bits.iter().fold(0, |a, b| a | b);
    let mut rules = vec![json!({
        "names": [name],
        "action": "SCMP_ACT_ALLOW",
        "args": [masked(index, all, 0)],
    })];
    for &bit in bits {
        rules.push(json!({
            "names": [name],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [masked(index, bit, bit)],
        }));
    }
    rules
}

/// The profile as JSON: every call core's table does not deny under [`POLICY`] allowed by
/// name, the denied ones refused as the table says.
pub(crate) fn profile() -> Value {
    let denied: Vec<&syscalls::Denial> = syscalls::denials(&POLICY).collect();
    let allowed: Vec<&str> = X86_64_NAMES
        .iter()
        .copied()
        .filter(|n| !denied.iter().any(|d| d.name == *n))
        // Left out of this rendering (no terminal): allowed as any other call.
        .chain(
            denied
                .iter()
                .filter(|d| matches!(d.rule, Rule::TerminalInjection { .. }))
                .map(|d| d.name),
        )
        .collect();
    let names = |want: fn(Rule) -> bool| -> Vec<&str> {
        denied
            .iter()
            .filter(|d| want(d.rule))
            .map(|d| d.name)
            .collect()
    };
    let mut rules = vec![
        json!({ "names": allowed, "action": "SCMP_ACT_ALLOW" }),
        json!({
            "names": names(|r| matches!(r, Rule::Always | Rule::ProcessGroup)),
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
        }),
        json!({
            "names": names(|r| r == Rule::FallBack),
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": ENOSYS,
        }),
    ];
    for d in &denied {
        match d.rule {
            Rule::Always | Rule::ProcessGroup | Rule::FallBack => {}
            Rule::TerminalInjection { .. } => {}
            Rule::NamespaceFlags { flags } => {
                rules.extend(allowed_without(d.name, flags, &NAMESPACE_FLAGS));
            }
            // The mode alone decides here, whether or not the flags create a file: a mode
            // argument is ignored without `O_CREAT`, and the C library passes 0 then, so
            // this is stricter than the BPF program only for a caller that passes a
            // setuid mode it does not use.
            Rule::SetidMode { mode } | Rule::CreatingSetid { mode, .. } => {
                rules.extend(allowed_without(d.name, mode, &SETID_BITS));
            }
            // Not under this policy; kept exhaustive so a new rule is a compile error here.
            Rule::NetworkSockets { .. } => {}
        }
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": ENOSYS,
        // Only the native calls: another architecture's (32-bit x86 on x86-64) are not
        // judged by these rules, so the engine refuses them outright.
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::seccomp::SeccompProgram;

    fn rules() -> Vec<Value> {
        profile()["syscalls"].as_array().unwrap().clone()
    }

    fn names(rule: &Value) -> Vec<String> {
        rule["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    }

    /// The names allowed whatever their arguments.
    fn allow_list() -> Vec<String> {
        let r = &rules()[0];
        assert_eq!(r["action"], "SCMP_ACT_ALLOW");
        assert!(r.get("args").is_none());
        names(r)
    }

    #[test]
    fn unknown_calls_get_enosys_and_denied_ones_eperm() {
        let p = profile();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(p["defaultErrnoRet"], 38);
        let denied = rules()
            .into_iter()
            .find(|r| r["errnoRet"] == 1 && r.get("args").is_none())
            .unwrap();
        for n in [
            "ptrace",
            "mount",
            "unshare",
            "keyctl",
            "bpf",
            "io_uring_setup",
            "kcmp",
            "quotactl_fd",
            "open_tree_attr",
        ] {
            assert!(names(&denied).contains(&n.to_string()), "{n}");
        }
        // Everyday calls are there.
        for n in [
            "read",
            "execve",
            "wait4",
            "futex",
            "rseq",
            "statx",
            "close_range",
        ] {
            assert!(allow_list().contains(&n.to_string()), "{n}");
        }
    }

    /// One direction: every call core's table denies (for a container's policy) is absent
    /// from the allow-list and has a rule of its own, save the one rule this rendering
    /// leaves out on purpose (no terminal).
    #[test]
    fn nothing_the_table_denies_is_allowed_unconditionally() {
        let allow = allow_list();
        for d in syscalls::denials(&POLICY) {
            if matches!(d.rule, Rule::TerminalInjection { .. }) {
                assert!(allow.contains(&d.name.to_string()), "{}", d.name);
                continue;
            }
            assert!(
                !allow.contains(&d.name.to_string()),
                "{} is allowed",
                d.name
            );
            let ruled = rules()[1..]
                .iter()
                .any(|r| names(r).contains(&d.name.to_string()));
            assert!(ruled, "{} has no rule", d.name);
        }
    }

    /// The other direction: everything the profile allows (by name, or by a rule whose
    /// conditions zero arguments meet), core's BPF program allows too. Judged by
    /// interpreting that program at each name's x86-64 number.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn everything_the_profile_allows_the_bpf_program_allows() {
        let program = SeccompProgram::build(&POLICY).unwrap();
        let allowed_names: Vec<String> = rules()
            .iter()
            .filter(|r| r["action"] == "SCMP_ACT_ALLOW")
            .flat_map(names)
            .collect();
        assert!(allowed_names.len() > 300, "{}", allowed_names.len());
        for name in &allowed_names {
            let d = syscalls::denial(name);
            if d.is_some_and(|d| matches!(d.rule, Rule::TerminalInjection { .. })) {
                // Allowed here for every request; the program allows all but two.
                continue;
            }
            let nr = syscalls::x86_64_number(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(
                program.decide(nr, [0; 6]),
                libc::SECCOMP_RET_ALLOW,
                "the profile allows {name}, the BPF program does not"
            );
        }
        // And the conditional rules' denials are the program's denials.
        for r in rules().iter().filter(|r| r["action"] == "SCMP_ACT_ERRNO") {
            for name in names(r) {
                let nr = syscalls::x86_64_number(&name).unwrap();
                let mut args = [0u64; 6];
                if let Some(c) = r["args"].as_array().and_then(|a| a.first()) {
                    let index = c["index"].as_u64().unwrap() as usize;
                    args[index] = c["valueTwo"].as_u64().unwrap();
                    // A call that creates only with a creating flag: give it one.
                    if let Some(Rule::CreatingSetid { flags, .. }) =
                        syscalls::denial(&name).map(|d| d.rule)
                    {
                        args[flags as usize] = libc::O_CREAT as u64;
                    }
                }
                assert_ne!(
                    program.decide(nr, args),
                    libc::SECCOMP_RET_ALLOW,
                    "the profile denies {name} {args:?}, the BPF program allows it"
                );
            }
        }
    }

    #[test]
    fn setuid_and_setgid_bits_are_refused_on_every_call_that_takes_a_mode() {
        let moded = syscalls::TABLE.iter().filter_map(|d| match d.rule {
            Rule::SetidMode { mode } | Rule::CreatingSetid { mode, .. } => Some((d.name, mode)),
            _ => None,
        });
        let mut n = 0;
        for (name, index) in moded {
            n += 1;
            let rs: Vec<Value> = rules()
                .into_iter()
                .filter(|r| names(r) == [name.to_string()])
                .collect();
            let allow = rs.iter().find(|r| r["action"] == "SCMP_ACT_ALLOW").unwrap();
            assert_eq!(allow["args"][0]["index"], index);
            assert_eq!(allow["args"][0]["value"], 0o6000);
            assert_eq!(allow["args"][0]["valueTwo"], 0);
            for bit in [0o4000, 0o2000] {
                assert!(
                    rs.iter().any(|r| r["action"] == "SCMP_ACT_ERRNO"
                        && r["args"][0]["value"] == bit
                        && r["args"][0]["valueTwo"] == bit),
                    "{name} bit {bit:o}"
                );
            }
        }
        assert_eq!(
            n, 9,
            "chmod, fchmod, fchmodat, fchmodat2, creat, mknod, mknodat, open, openat"
        );
    }
}
