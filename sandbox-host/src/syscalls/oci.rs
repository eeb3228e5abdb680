//! The table rendered as an OCI seccomp section (the runtime spec's `linux.seccomp`, which
//! is also the format of a container engine's `seccomp=` profile): for a runtime that
//! applies the filter itself instead of taking a BPF program. Two renderings, one per kind
//! of kernel the command talks to.
//!
//! # [`allow_list`]: the host's kernel (a container engine)
//!
//! Every call the table does not deny is allowed by name, and the rest gets `ENOSYS`, so
//! the C library falls back from calls it cannot use (`clone3` to `clone`, `openat2` to
//! `openat`, whose arguments the filter can read). A deny list would be wrong here: an
//! engine drops the names its libseccomp does not know (Debian 12's does not know
//! `fchmodat2`), and a deny rule that is dropped silently allows the call. An allowed name
//! that is dropped is merely denied.
//!
//! A call with a conditional rule is allowed when none of the rule's bits is in its
//! argument and refused with `EPERM` when one is (one rule per bit: the rules of one call
//! are alternatives, and a rule's conditions must all hold). For the calls that create a
//! file only with a creating flag (`open`, `openat`), the mode alone decides: a mode
//! argument is ignored without `O_CREAT`, and the C library passes 0 then, so this is
//! stricter than the BPF program only for a caller that passes a setuid mode it does not
//! use.
//!
//! `ioctl(TIOCSTI)` is not filtered (the table's one rule this rendering leaves out, a
//! [`Rule::TerminalInjection`]): such a runtime's command has no terminal (stdio are pipes),
//! so there is no input to push into.
//!
//! # [`setid_denials`]: a kernel of the runtime's own (gVisor's Sentry)
//!
//! Such a kernel never passes the command's system calls to the host's, so only the
//! table's rules about the files left behind on the host apply: every call that sets a
//! mode is refused (`EPERM`) with a setuid or setgid bit (`open` and `openat` only when
//! they create a file), and everything else is allowed.
//!
//! Both are checked against the table and against the BPF program in both directions
//! (tests below).

use serde::Serialize;

use super::{Rule, SyscallPolicy, NAMESPACE_FLAGS, SETID_BITS, TABLE, X86_64_NAMES};

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;

/// The flags that make `open`/`openat` create a file.
const CREATING: [u64; 2] = [libc::O_CREAT as u64, libc::O_TMPFILE as u64];

/// An OCI seccomp section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// What a call no rule names gets.
    pub default_action: Action,
    /// The errno of an `ERRNO` default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_errno_ret: Option<u32>,
    /// The architectures the rules are for: calls of any other (32-bit x86 on x86-64) are
    /// not judged by them, so the runtime refuses them outright.
    pub architectures: Vec<&'static str>,
    /// The rules.
    pub syscalls: Vec<SyscallRule>,
}

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    /// Let the call through.
    #[serde(rename = "SCMP_ACT_ALLOW")]
    Allow,
    /// Fail it with the rule's errno.
    #[serde(rename = "SCMP_ACT_ERRNO")]
    Errno,
}

/// One rule: `action` for the calls `names` when every condition of `args` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyscallRule {
    /// The calls.
    pub names: Vec<&'static str>,
    /// What they get.
    pub action: Action,
    /// The errno of an `ERRNO` action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<u32>,
    /// The conditions, all of which must hold; none: whatever the arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Condition>,
}

/// Argument `index` masked with `value` equals `value_two` (`SCMP_CMP_MASKED_EQ`, the one
/// comparison the table needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The argument.
    pub index: u8,
    /// The mask.
    pub value: u64,
    /// What the masked argument must equal.
    pub value_two: u64,
    /// Always `SCMP_CMP_MASKED_EQ`.
    pub op: &'static str,
}

fn masked(index: u8, mask: u64, equals: u64) -> Condition {
    Condition {
        index,
        value: mask,
        value_two: equals,
        op: "SCMP_CMP_MASKED_EQ",
    }
}

fn errno(names: Vec<&'static str>, errno: u32, args: Vec<Condition>) -> SyscallRule {
    SyscallRule {
        names,
        action: Action::Errno,
        errno_ret: Some(errno),
        args,
    }
}

/// Rules that allow `name` when argument `index` has none of `bits`, and deny it with
/// `EPERM` when it has any.
fn allowed_without(name: &'static str, index: u8, bits: &[u64]) -> Vec<SyscallRule> {
    let all = bits.iter().fold(0, |a, b| a | b);
    let mut rules = vec![SyscallRule {
        names: vec![name],
        action: Action::Allow,
        errno_ret: None,
        args: vec![masked(index, all, 0)],
    }];
    for &bit in bits {
        rules.push(errno(vec![name], EPERM, vec![masked(index, bit, bit)]));
    }
    rules
}

/// For a command on the host's kernel: see the module docs. The first rule is the
/// unconditional allow-list.
pub fn allow_list(policy: &SyscallPolicy) -> Profile {
    let denied: Vec<&super::Denial> = super::denials(policy).collect();
    let allowed: Vec<&'static str> = X86_64_NAMES
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
    let names = |want: fn(Rule) -> bool| -> Vec<&'static str> {
        denied
            .iter()
            .filter(|d| want(d.rule))
            .map(|d| d.name)
            .collect()
    };
    let mut rules = vec![
        SyscallRule {
            names: allowed,
            action: Action::Allow,
            errno_ret: None,
            args: Vec::new(),
        },
        errno(names(|r| matches!(r, Rule::Always)), EPERM, Vec::new()),
        errno(names(|r| r == Rule::FallBack), ENOSYS, Vec::new()),
    ];
    for d in &denied {
        match d.rule {
            Rule::Always | Rule::FallBack => {}
            Rule::TerminalInjection { .. } => {}
            Rule::NamespaceFlags { flags } => {
                rules.extend(allowed_without(d.name, flags, &NAMESPACE_FLAGS));
            }
            Rule::SetidMode { mode } | Rule::CreatingSetid { mode, .. } => {
                rules.extend(allowed_without(d.name, mode, &SETID_BITS));
            }
            // A socket family is an argument the allow rule would have to enumerate; no
            // policy rendered this way (a runtime with a network namespace of its own)
            // asks for it. Kept exhaustive so a new rule is a compile error here.
            Rule::NetworkSockets { .. } => {}
            // Only for a command whose every connect the host's supervisor mediates: no
            // runtime rendered this way is one.
            Rule::MediatedSockets { .. } | Rule::Mediated | Rule::MediatedSend { .. } => {}
        }
    }
    Profile {
        default_action: Action::Errno,
        default_errno_ret: Some(ENOSYS),
        architectures: vec!["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        syscalls: rules,
    }
}

/// For a command on a kernel of the runtime's own: see the module docs.
pub fn setid_denials() -> Profile {
    let mut rules = Vec::new();
    for d in TABLE {
        for bit in SETID_BITS {
            match d.rule {
                Rule::SetidMode { mode } => {
                    rules.push(errno(vec![d.name], EPERM, vec![masked(mode, bit, bit)]));
                }
                Rule::CreatingSetid { flags, mode } => {
                    for f in CREATING {
                        let args = vec![masked(mode, bit, bit), masked(flags, f, f)];
                        rules.push(errno(vec![d.name], EPERM, args));
                    }
                }
                _ => {}
            }
        }
    }
    Profile {
        default_action: Action::Allow,
        default_errno_ret: None,
        architectures: vec![if cfg!(target_arch = "aarch64") {
            "SCMP_ARCH_AARCH64"
        } else {
            "SCMP_ARCH_X86_64"
        }],
        syscalls: rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::NetworkMode;

    /// A container's policy: its network is its own namespace, its whole tree dies with it.
    const CONTAINER: SyscallPolicy = SyscallPolicy {
        network: NetworkMode::Full,
        mediated: false,
    };

    fn names(rule: &SyscallRule) -> Vec<String> {
        rule.names.iter().map(|n| n.to_string()).collect()
    }

    /// The names allowed whatever their arguments.
    fn allow_list_names() -> Vec<String> {
        let p = allow_list(&CONTAINER);
        let r = &p.syscalls[0];
        assert_eq!(r.action, Action::Allow);
        assert!(r.args.is_empty());
        names(r)
    }

    #[test]
    fn unknown_calls_get_enosys_and_denied_ones_eperm() {
        let p = allow_list(&CONTAINER);
        assert_eq!(p.default_action, Action::Errno);
        assert_eq!(p.default_errno_ret, Some(38));
        let denied = p
            .syscalls
            .iter()
            .find(|r| r.errno_ret == Some(1) && r.args.is_empty())
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
            assert!(names(denied).contains(&n.to_string()), "{n}");
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
            assert!(allow_list_names().contains(&n.to_string()), "{n}");
        }
    }

    #[test]
    fn it_serializes_as_the_runtime_spec_spells_it() {
        let json = serde_json::to_value(allow_list(&CONTAINER)).unwrap();
        assert_eq!(json["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(json["defaultErrnoRet"], 38);
        assert!(json["syscalls"][0].get("args").is_none());
        assert!(json["syscalls"][0].get("errnoRet").is_none());
        let conditional = json["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"][0] == "chmod" && r["action"] == "SCMP_ACT_ERRNO")
            .unwrap();
        assert_eq!(conditional["errnoRet"], 1);
        assert_eq!(conditional["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert!(conditional["args"][0].get("valueTwo").is_some());
        let own = serde_json::to_value(setid_denials()).unwrap();
        assert_eq!(own["defaultAction"], "SCMP_ACT_ALLOW");
        assert!(own.get("defaultErrnoRet").is_none());
    }

    /// One direction: every call the table denies (for a container's policy) is absent
    /// from the allow-list and has a rule of its own, save the one rule this rendering
    /// leaves out on purpose (no terminal).
    #[test]
    fn nothing_the_table_denies_is_allowed_unconditionally() {
        let allow = allow_list_names();
        let rules = allow_list(&CONTAINER).syscalls;
        for d in super::super::denials(&CONTAINER) {
            if matches!(d.rule, Rule::TerminalInjection { .. }) {
                assert!(allow.contains(&d.name.to_string()), "{}", d.name);
                continue;
            }
            assert!(
                !allow.contains(&d.name.to_string()),
                "{} is allowed",
                d.name
            );
            let ruled = rules[1..]
                .iter()
                .any(|r| names(r).contains(&d.name.to_string()));
            assert!(ruled, "{} has no rule", d.name);
        }
    }

    /// The other direction: everything the allow-list allows (by name, or by a rule whose
    /// conditions zero arguments meet), core's BPF program allows too, and what its
    /// conditional rules refuse the program refuses. Judged by interpreting that program at
    /// each name's x86-64 number.
    #[cfg(all(target_arch = "x86_64", feature = "seccomp"))]
    #[test]
    fn everything_the_allow_list_allows_the_bpf_program_allows() {
        use crate::seccomp::SeccompProgram;
        let program = SeccompProgram::build(&CONTAINER).unwrap();
        let rules = allow_list(&CONTAINER).syscalls;
        let allowed_names: Vec<String> = rules
            .iter()
            .filter(|r| r.action == Action::Allow)
            .flat_map(names)
            .collect();
        assert!(allowed_names.len() > 300, "{}", allowed_names.len());
        for name in &allowed_names {
            let d = super::super::denial(name);
            if d.is_some_and(|d| matches!(d.rule, Rule::TerminalInjection { .. })) {
                // Allowed here for every request; the program allows all but two.
                continue;
            }
            let nr = super::super::x86_64_number(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(
                program.decide(nr, [0; 6]),
                libc::SECCOMP_RET_ALLOW,
                "the profile allows {name}, the BPF program does not"
            );
        }
        for r in rules.iter().filter(|r| r.action == Action::Errno) {
            for name in names(r) {
                let nr = super::super::x86_64_number(&name).unwrap();
                let mut args = [0u64; 6];
                if let Some(c) = r.args.first() {
                    args[c.index as usize] = c.value_two;
                    // A call that creates only with a creating flag: give it one.
                    if let Some(Rule::CreatingSetid { flags, .. }) =
                        super::super::denial(&name).map(|d| d.rule)
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

    /// Every call of the table that takes a mode refuses setuid and setgid bits in both
    /// renderings; the allow-list allows it with neither.
    #[test]
    fn setuid_and_setgid_bits_are_refused_on_every_call_that_takes_a_mode() {
        let moded: Vec<(&str, u8)> = TABLE
            .iter()
            .filter_map(|d| match d.rule {
                Rule::SetidMode { mode } | Rule::CreatingSetid { mode, .. } => Some((d.name, mode)),
                _ => None,
            })
            .collect();
        assert_eq!(
            moded.len(),
            9,
            "chmod, fchmod, fchmodat, fchmodat2, creat, mknod, mknodat, open, openat"
        );
        let host = allow_list(&CONTAINER).syscalls;
        let own = setid_denials();
        assert_eq!(own.default_action, Action::Allow);
        for (name, index) in moded {
            let rs: Vec<&SyscallRule> = host.iter().filter(|r| r.names == [name]).collect();
            let allow = rs.iter().find(|r| r.action == Action::Allow).unwrap();
            assert_eq!(allow.args, [masked(index, 0o6000, 0)]);
            for bit in [0o4000, 0o2000] {
                let refused = |rules: &[&SyscallRule]| {
                    rules.iter().any(|r| {
                        r.action == Action::Errno
                            && r.errno_ret == Some(1)
                            && r.args.contains(&masked(index, bit, bit))
                    })
                };
                assert!(refused(&rs), "{name} bit {bit:o} on the host's kernel");
                let own_rules: Vec<&SyscallRule> =
                    own.syscalls.iter().filter(|r| r.names == [name]).collect();
                assert!(refused(&own_rules), "{name} bit {bit:o} on its own kernel");
            }
        }
        // On its own kernel, open and openat refuse only when creating.
        let open: Vec<&SyscallRule> = own
            .syscalls
            .iter()
            .filter(|r| r.names == ["openat"])
            .collect();
        assert_eq!(open.len(), 4, "two bits, two creating flags");
        assert!(open.iter().all(|r| r.args.len() == 2));
        // And nothing else is filtered there.
        assert!(own
            .syscalls
            .iter()
            .all(|r| TABLE.iter().any(|d| d.name == r.names[0]
                && matches!(d.rule, Rule::SetidMode { .. } | Rule::CreatingSetid { .. }))));
    }
}
