//! `sandbox container-profile`: the seccomp profile for running the sandbox itself inside a
//! container on the `strict` lane. It is the engine's default profile, every rule of it
//! unchanged, plus one rule that allows, whatever the capabilities, exactly the calls the
//! sandbox makes to confine a command ([`HOST_CALLS`]: namespaces and mounts, which the
//! default admits only with `CAP_SYS_ADMIN`). The command gets none of them: the sandbox's
//! own filter, rendered from the same table, still denies them to it.
//!
//! The added rule comes first. For a call with two rules that match whatever the arguments,
//! libseccomp keeps the first and drops the later one silently, and the default has such a
//! rule for `clone3` (`ENOSYS` without `CAP_SYS_ADMIN`, so that the C library falls back to
//! `clone`, whose flags a filter can read): after it, the added `clone3` would be dropped
//! and `strict` refused (measured with Docker 20.10, runc 1.1.5, libseccomp 2.5.4). Before
//! it, moby's rule is the one dropped, for the one call the sandbox needs.
//!
//! # The default profile
//!
//! `profile/moby-default.json` is moby's default seccomp profile, kept byte for byte as
//! published: `vendor/github.com/moby/profiles/seccomp/default.json` of moby/moby at commit
//! b985e2313a8676e18072b442911fc8f64f17d440 (after docker-v29.7.2), which is the module
//! `github.com/moby/profiles/seccomp` v0.2.3, last changed by moby commit
//! 35797366d7cdae8d1d84eac06fbb314ccaf3ccaf. Until July 2025 the same file was moby's
//! `profiles/seccomp/default.json`. To update it, replace the file with a newer release's,
//! unchanged, and change the commit here; the tests check that every addition is still not
//! allowed by it unconditionally.
//!
//! Kubernetes takes the same document: a kubelet's `Localhost` profile is read by
//! containerd or CRI-O, both of which take Docker's format (`archMap`, `includes`,
//! `excludes`).

use std::io::Write;

use serde_json::{json, Map, Value};
use thiserror::Error;

use sandbox_host::syscalls::HOST_CALLS;

use crate::args::{ContainerProfileArgs, EngineArg};
use crate::error::SANDBOX_FAILED;

/// Moby's default profile, unchanged (module docs).
pub const MOBY_DEFAULT: &str = include_str!("profile/moby-default.json");

/// The `comment` of the added rule, so that a reader of the profile knows where it ends.
pub const ADDED_COMMENT: &str = "added by `sandbox container-profile`: the calls the sandbox \
     makes to confine a command on the strict lane (its namespaces and mounts); the command \
     is still denied them by the sandbox's own filter";

/// Why the profile could not be made or written.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// The built-in default profile is not JSON.
    #[error("the built-in default seccomp profile is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The built-in default profile has no list of rules.
    #[error("the built-in default seccomp profile has no `syscalls` list")]
    NoRules,
    /// Stdout could not be written.
    #[error("could not write the profile to stdout: {0}")]
    Write(std::io::Error),
}

impl ProfileError {
    /// The one thing to do about it.
    pub fn remedy(&self) -> &'static str {
        match self {
            Self::NotJson(_) | Self::NoRules => {
                "rebuild `sandbox` from a source tree whose \
                 sandbox/src/bin/sandbox/profile/moby-default.json is moby's file unchanged"
            }
            Self::Write(_) => "redirect stdout to a file on a writable filesystem",
        }
    }
}

/// The one rule the profile adds: [`HOST_CALLS`], allowed whatever the arguments and the
/// capabilities (no `args`, no `includes`).
pub fn added_rule() -> Value {
    let names: Vec<&str> = HOST_CALLS.iter().map(|c| c.name).collect();
    json!({
        "names": names,
        "action": "SCMP_ACT_ALLOW",
        "comment": ADDED_COMMENT,
    })
}

/// The profile for `engine`.
pub fn profile(engine: EngineArg) -> Result<Value, ProfileError> {
    // Both engines read the same format (module docs); an engine that did not would get a
    // rendering of its own here.
    match engine {
        EngineArg::Docker | EngineArg::Kubernetes => {}
    }
    let mut profile: Value = serde_json::from_str(MOBY_DEFAULT).map_err(ProfileError::NotJson)?;
    profile
        .as_object_mut()
        .and_then(|o: &mut Map<String, Value>| o.get_mut("syscalls"))
        .and_then(Value::as_array_mut)
        .ok_or(ProfileError::NoRules)?
        .insert(0, added_rule());
    Ok(profile)
}

/// Print the profile; the exit status of `sandbox`.
pub fn container_profile(args: &ContainerProfileArgs) -> i32 {
    let written = profile(args.engine).and_then(|p| {
        let mut out = std::io::stdout().lock();
        // Pretty (an operator reads and diffs it); a `Value` cannot fail to serialize.
        let text = serde_json::to_string_pretty(&p).map_err(ProfileError::NotJson)?;
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(ProfileError::Write)
    });
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandbox: {e}; remedy: {}", e.remedy());
            SANDBOX_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use sandbox_host::syscalls::denial;

    fn rules(v: &Value) -> &Vec<Value> {
        v["syscalls"].as_array().expect("a `syscalls` list")
    }

    fn names(rule: &Value) -> Vec<&str> {
        rule["names"]
            .as_array()
            .expect("names")
            .iter()
            .map(|n| n.as_str().expect("a name"))
            .collect()
    }

    /// Whether `rule` allows its calls whatever the arguments, the capabilities, the
    /// architecture and the kernel.
    fn unconditional_allow(rule: &Value) -> bool {
        let empty = |k: &str| {
            rule.get(k).is_none_or(|v| match v {
                Value::Null => true,
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            })
        };
        rule["action"] == "SCMP_ACT_ALLOW"
            && empty("args")
            && empty("includes")
            && empty("excludes")
    }

    /// The printed profile is moby's, every key and rule unchanged and in order, after one
    /// rule, first (module docs), that lists exactly the host calls, unconditionally.
    #[test]
    fn the_profile_is_moby_default_plus_one_rule_of_exactly_the_host_calls() {
        let moby: Value = serde_json::from_str(MOBY_DEFAULT).unwrap();
        for engine in [EngineArg::Docker, EngineArg::Kubernetes] {
            let printed = profile(engine).unwrap();
            let (m, p) = (moby.as_object().unwrap(), printed.as_object().unwrap());
            assert_eq!(
                m.keys().collect::<Vec<_>>(),
                p.keys().collect::<Vec<_>>(),
                "{engine:?}"
            );
            for (k, v) in m {
                if k != "syscalls" {
                    assert_eq!(&p[k], v, "{engine:?}: {k}");
                }
            }
            let (mr, pr) = (rules(&moby), rules(&printed));
            assert_eq!(pr.len(), mr.len() + 1, "{engine:?}: one rule added");
            assert_eq!(&pr[1..], &mr[..], "{engine:?}: moby's rules unchanged");
            let added = &pr[0];
            assert!(unconditional_allow(added), "{added}");
            let mut got = names(added);
            let mut want: Vec<&str> = HOST_CALLS.iter().map(|c| c.name).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
        // The data file is moby's as published: the default action and a rule only
        // CAP_SYS_ADMIN gets, as moby writes them.
        assert_eq!(moby["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(rules(&moby).iter().any(|r| {
            names(r).contains(&"mount") && r["includes"]["caps"][0] == "CAP_SYS_ADMIN"
        }));
    }

    /// Each addition is an addition: no rule of moby's already allows it whatever the
    /// arguments and capabilities (moby admits each only with `CAP_SYS_ADMIN`).
    #[test]
    fn no_addition_is_already_allowed_unconditionally_by_moby() {
        let moby: Value = serde_json::from_str(MOBY_DEFAULT).unwrap();
        for call in HOST_CALLS {
            let allowing: Vec<usize> = rules(&moby)
                .iter()
                .enumerate()
                .filter(|(_, r)| unconditional_allow(r) && names(r).contains(&call.name))
                .map(|(i, _)| i)
                .collect();
            assert!(
                allowing.is_empty(),
                "{} is allowed by moby's rules {allowing:?}",
                call.name
            );
        }
        // The check itself sees an unconditional rule: moby allows `read` so.
        assert!(rules(&moby)
            .iter()
            .any(|r| unconditional_allow(r) && names(r).contains(&"read")));
    }

    /// Each addition is for the sandbox, never for the command: the sandbox's own table
    /// denies it to the command under every policy, so the profile widens nothing the
    /// command can do.
    #[test]
    fn every_addition_is_still_denied_to_the_command_by_the_table() {
        for name in names(&added_rule()) {
            let d = denial(name).unwrap_or_else(|| panic!("{name} is not in the table"));
            assert!(d.rule.unconditional(), "{name}: {:?}", d.rule);
        }
    }
}
