//! Admission: what each lane accepts from a backend, decided from its capability.
//!
//! The host chooses the lane, never the sandboxed program. A lane turns a backend's
//! [`Capability`] and a request into either a list of grants (each with how it is enforced)
//! or a refusal naming the lane, the backend and what falls short. The whole table:
//!
//! | requirement                                         | `strict` | `fast`     | `trusted`            |
//! |-----------------------------------------------------|----------|------------|----------------------|
//! | writes confined to the workspace and named paths    | required | required   | over-grant accepted  |
//! | reads confined (home, keys, credentials unreadable) | required | required   | over-grant accepted  |
//! | read-only carve-outs, when asked                    | required | required   | over-grant accepted  |
//! | the network mode asked, exactly                     | required | required   | over-grant accepted  |
//! | `none`, `proxy`: the host's or pod's network state unseen | required | disclosure recorded | disclosure recorded |
//! | `proxy` mode, by a backend that can run the proxy   | required | required   | required             |
//! | every descendant killed with the command            | required | required   | required             |
//! | host root's power dropped, when the host is root    | required | required   | not required         |
//! | cannot see or signal the host's processes           | required | —          | —                    |
//! | each resource limit asked                           | required | required   | required             |
//! | snapshot, when asked                                | required | required   | required             |
//! | a change set to review, when asked                  | required | required   | required             |
//!
//! - `strict` is the default: everything asked is enforced exactly, and the command is in
//!   its own process world and its own network state. bwrap and docker qualify.
//! - `fast` is for the many short commands an agent runs (`ls`, `grep`, `cargo check`): the
//!   same exact enforcement of everything asked, without requiring process isolation, so a
//!   backend that confines with landlock and seccomp alone (no namespaces, near a bare
//!   spawn's cost) qualifies. That is also what runs inside a default container or pod,
//!   where no namespace can be made: there network `none` is still exact (no socket but
//!   `AF_UNIX`, TCP bind and connect denied, io_uring denied: nothing reaches a network),
//!   but `/proc/net` shows the host's (in a pod, the pod's) sockets, listeners and routes.
//!   That disclosure is of the same kind as the host processes `fast` already shows: it is
//!   accepted, and recorded in the outcome's effective policy as a grant the backend
//!   over-fulfils, so a host can see it after the fact. `strict` refuses it.
//! - `trusted` is for commands the host already trusts: it accepts a documented over-grant
//!   (loopback given as the whole network, no filesystem confinement at all; the `none`
//!   backend runs only here). What was over-granted is recorded in the outcome's effective
//!   policy, so a host can see it after the fact.
//!
//! Two things no lane waives: killing every descendant (a sandbox that leaves processes
//! behind breaks every later guarantee) and resource limits (they protect the host, not the
//! command's trust).

use crate::capability::{Capability, Enforcement};
use crate::outcome::Grant;
use crate::{Lane, NetworkMode, ResourceLimits, SandboxError};

/// The grant a backend without a network namespace of its own over-fulfils with `none`.
pub const NETWORK_STATE_UNSEEN: &str =
    "network state out of sight with `none` or `proxy` (/proc/net)";

/// What such a backend discloses instead.
pub const NETWORK_STATE_DISCLOSED: &str = "the host's (in a container, the pod's) network \
     state readable in /proc/net: unix socket paths, listeners, connections, routes";

/// What a run asks for, as far as the lane is concerned.
#[derive(Clone, Debug)]
pub struct LaneRequest<'a> {
    /// The network mode asked.
    pub network: NetworkMode,
    /// Whether read-only carve-outs were named.
    pub carveouts: bool,
    /// The resource limits asked.
    pub limits: &'a ResourceLimits,
    /// What is asked of the command's writes (a throwaway copy, a change set).
    pub changes: crate::Changes,
    /// Whether the host process runs as root (euid 0).
    pub host_is_root: bool,
}

/// Decide whether `lane` runs `request` on a backend with `cap`; on success, the grants with
/// how each is enforced, for the outcome's effective policy.
pub fn check_lane(
    lane: Lane,
    backend: &'static str,
    cap: &Capability,
    request: &LaneRequest<'_>,
) -> Result<Vec<Grant>, SandboxError> {
    let refuse = |reason: String| SandboxError::PolicyRefused {
        lane: lane.to_string(),
        backend,
        reason,
    };
    let mut grants = Vec::new();
    // A grant the backend can only over-fulfil: accepted on an over-grant lane (and
    // recorded), refused elsewhere.
    let mut soft = |what: &str, enforcement: Enforcement, over: &'static str| match enforcement {
        Enforcement::Exact => {
            grants.push(Grant::new(what, Enforcement::Exact));
            Ok(())
        }
        Enforcement::OverGrant(gives) if lane.accepts_over_grant() => {
            grants.push(Grant::new(what, Enforcement::OverGrant(gives)));
            Ok(())
        }
        Enforcement::Unsupported if lane.accepts_over_grant() => {
            grants.push(Grant::new(what, Enforcement::OverGrant(over)));
            Ok(())
        }
        Enforcement::OverGrant(gives) => Err(refuse(format!(
            "{what} can only be over-granted by this backend ({gives}); use a backend that \
                 enforces it exactly, or the `trusted` lane to accept the over-grant"
        ))),
        Enforcement::Unsupported => Err(refuse(format!(
            "{what} is not enforced by this backend; use a backend that enforces it, or \
                 the `trusted` lane to run unconfined"
        ))),
    };
    let exact = |b: bool| {
        if b {
            Enforcement::Exact
        } else {
            Enforcement::Unsupported
        }
    };

    soft(
        "filesystem write confinement",
        exact(cap.confine_writes),
        "writes anywhere the user can write",
    )?;
    soft(
        "filesystem read confinement",
        exact(cap.confine_reads),
        "reads anywhere the user can read",
    )?;
    if request.carveouts {
        soft(
            "read-only carve-outs inside the workspace",
            exact(cap.readonly_carveouts),
            "carve-outs stay writable",
        )?;
    }
    // An allowlist proxy the backend cannot run is refused on every lane: running the
    // command anyway would need a choice (no network, or all of it) nobody asked for. A
    // backend that states an over-grant (`none`: the host's network) runs on `trusted`.
    if request.network == NetworkMode::Proxy && cap.network_proxy == Enforcement::Unsupported {
        return Err(SandboxError::NotSupported {
            backend,
            feature: "network mode `proxy` (egress through an allowlist proxy)".into(),
            // A wider network is no remedy: the allowlist is what was asked for.
            remedy: "use a backend that enforces it (`sandbox doctor` lists them)".into(),
        });
    }
    soft(
        &format!("network mode `{}`", request.network),
        cap.network(request.network),
        "the host's whole network",
    )?;
    // `none` and `proxy` both promise a network of the command's own; where the backend
    // keeps them exact without a namespace (the filter, landlock, a mediated door), the
    // host's network state stays readable.
    if matches!(request.network, NetworkMode::None | NetworkMode::Proxy)
        && cap.network(request.network).is_exact()
        && !cap.network_state_private
    {
        if lane == Lane::Strict {
            return Err(refuse(format!(
                "network mode `{}` without a network namespace of its own leaves {}; use \
                 the `fast` lane, which accepts and records that, or make namespaces \
                 possible here",
                request.network, NETWORK_STATE_DISCLOSED
            )));
        }
        grants.push(Grant::new(
            NETWORK_STATE_UNSEEN,
            Enforcement::OverGrant(NETWORK_STATE_DISCLOSED),
        ));
    }
    if request.host_is_root && lane != Lane::Trusted {
        if !cap.drops_host_root {
            return Err(refuse(
                "the host runs as root and this backend would run the command with root's \
                 power over host files; run the host as an ordinary user, or use a backend \
                 that drops root"
                    .into(),
            ));
        }
        grants.push(Grant::new("host root dropped", Enforcement::Exact));
    }
    if lane == Lane::Strict {
        if !cap.process_isolation {
            return Err(refuse(
                "process isolation (the command must not see or signal host processes) is \
                 not provided by this backend; use the `fast` lane, or a namespace or \
                 container backend"
                    .into(),
            ));
        }
        grants.push(Grant::new("process isolation", Enforcement::Exact));
    }

    // Not waived by any lane.
    let hard = |what: &str, ok: bool| -> Result<(), SandboxError> {
        if ok {
            Ok(())
        } else {
            Err(SandboxError::NotSupported {
                backend,
                feature: what.to_string(),
                remedy: "choose a backend whose capability lists it (see `sandbox doctor`)".into(),
            })
        }
    };
    hard(
        "killing every descendant of the command (none may outlive it)",
        cap.tree_kill,
    )?;
    let limits = request.limits;
    if limits.memory_bytes.is_some() {
        hard("a memory limit", cap.memory_limit)?;
    }
    if limits.cpu_seconds.is_some() {
        hard("a CPU-time limit", cap.cpu_limit)?;
    }
    if limits.max_processes.is_some() {
        hard("a process-count limit", cap.process_limit)?;
    }
    if limits.open_files.is_some() {
        hard("an open-files limit", cap.open_files_limit)?;
    }
    match request.changes {
        crate::Changes::Direct => {}
        crate::Changes::Discard => hard(
            "running against a throwaway copy (snapshot)",
            cap.snapshot || cap.change_layer.is_some(),
        )?,
        crate::Changes::Review => hard(
            "a copy-on-write layer over the workspace with a change set to review",
            cap.change_layer.is_some(),
        )?,
    }
    Ok(grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_cap() -> Capability {
        Capability::everything()
    }

    fn req(limits: &ResourceLimits) -> LaneRequest<'_> {
        LaneRequest {
            network: NetworkMode::None,
            carveouts: false,
            limits,
            changes: crate::Changes::Direct,
            host_is_root: false,
        }
    }

    /// What a lane answers for one row of the table.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Want {
        /// Runs, everything exact.
        Runs,
        /// Runs, with an over-grant recorded in the grants.
        Recorded,
        /// Refused by the lane.
        Refused,
        /// Refused on every lane as not supported.
        Unsupported,
    }

    /// One row of the module's table: what the backend lacks (or the request asks), and
    /// the answer of `strict`, `fast` and `trusted`.
    struct Row {
        requirement: &'static str,
        change: fn(&mut Capability, &mut LaneRequest<'_>),
        want: [Want; 3],
    }

    /// A test per row of the table in the module docs, in its order: the table and the
    /// code change together.
    #[test]
    fn each_row_of_the_table_holds_on_each_lane() {
        use Want::*;
        static MEMORY: ResourceLimits = ResourceLimits {
            memory_bytes: Some(1 << 20),
            cpu_seconds: None,
            max_processes: None,
            open_files: None,
        };
        let rows = [
            Row {
                requirement: "writes confined",
                change: |c, _| c.confine_writes = false,
                want: [Refused, Refused, Recorded],
            },
            Row {
                requirement: "reads confined",
                change: |c, _| c.confine_reads = false,
                want: [Refused, Refused, Recorded],
            },
            Row {
                requirement: "read-only carve-outs",
                change: |c, r| {
                    c.readonly_carveouts = false;
                    r.carveouts = true;
                },
                want: [Refused, Refused, Recorded],
            },
            Row {
                requirement: "the network mode exactly",
                change: |c, r| {
                    c.network_loopback = Enforcement::OverGrant("the host's whole network");
                    r.network = NetworkMode::Loopback;
                },
                want: [Refused, Refused, Recorded],
            },
            Row {
                requirement: "network state unseen with `none`",
                change: |c, _| c.network_state_private = false,
                want: [Refused, Recorded, Recorded],
            },
            Row {
                requirement: "network state unseen with `proxy`",
                change: |c, r| {
                    c.network_state_private = false;
                    r.network = NetworkMode::Proxy;
                },
                want: [Refused, Recorded, Recorded],
            },
            Row {
                requirement: "proxy by a backend that runs it",
                change: |c, r| {
                    c.network_proxy = Enforcement::Unsupported;
                    r.network = NetworkMode::Proxy;
                },
                want: [Unsupported, Unsupported, Unsupported],
            },
            Row {
                requirement: "every descendant killed",
                change: |c, _| c.tree_kill = false,
                want: [Unsupported, Unsupported, Unsupported],
            },
            Row {
                requirement: "host root dropped",
                change: |c, r| {
                    c.drops_host_root = false;
                    r.host_is_root = true;
                },
                want: [Refused, Refused, Runs],
            },
            Row {
                requirement: "process isolation",
                change: |c, _| c.process_isolation = false,
                want: [Refused, Runs, Runs],
            },
            Row {
                requirement: "each resource limit",
                change: |c, r| {
                    c.memory_limit = false;
                    r.limits = &MEMORY;
                },
                want: [Unsupported, Unsupported, Unsupported],
            },
            Row {
                requirement: "snapshot",
                change: |c, r| {
                    c.snapshot = false;
                    c.change_layer = None;
                    r.changes = crate::Changes::Discard;
                },
                want: [Unsupported, Unsupported, Unsupported],
            },
            Row {
                requirement: "a change set to review",
                change: |c, r| {
                    c.change_layer = None;
                    r.changes = crate::Changes::Review;
                },
                want: [Unsupported, Unsupported, Unsupported],
            },
        ];
        let limits = ResourceLimits::none();
        // The baseline: everything claimed runs on every lane, all of it exact.
        for lane in Lane::ALL {
            let grants = check_lane(lane, "b", &full_cap(), &req(&limits)).unwrap();
            assert!(
                grants.iter().all(|g| g.enforcement.is_exact()),
                "{grants:?}"
            );
        }
        for row in rows {
            for (lane, want) in Lane::ALL.into_iter().zip(row.want) {
                let mut cap = full_cap();
                let mut r = req(&limits);
                (row.change)(&mut cap, &mut r);
                let got = match check_lane(lane, "b", &cap, &r) {
                    Ok(g) if g.iter().all(|g| g.enforcement.is_exact()) => Runs,
                    Ok(_) => Recorded,
                    Err(SandboxError::PolicyRefused { lane: l, .. }) => {
                        assert_eq!(l, lane.as_str());
                        Refused
                    }
                    Err(SandboxError::NotSupported { .. }) => Unsupported,
                    Err(e) => panic!("{}: {lane}: {e}", row.requirement),
                };
                assert_eq!(got, want, "{} on `{lane}`", row.requirement);
            }
        }
    }

    /// Without a network namespace, `none` on `fast` runs with the disclosure named in its
    /// grants; `strict` names it in the refusal. A backend whose `none` is itself an
    /// over-grant (the whole network) gets no second line for it.
    #[test]
    fn the_network_state_disclosure_is_recorded_on_fast_and_named_on_strict() {
        let mut cap = full_cap();
        cap.network_state_private = false;
        let limits = ResourceLimits::none();
        let grants = check_lane(Lane::Fast, "b", &cap, &req(&limits)).unwrap();
        let g = grants
            .iter()
            .find(|g| g.what == NETWORK_STATE_UNSEEN)
            .expect("the disclosure is a grant");
        assert_eq!(
            g.enforcement,
            Enforcement::OverGrant(NETWORK_STATE_DISCLOSED)
        );
        assert!(grants
            .iter()
            .any(|g| g.what == "network mode `none`" && g.enforcement.is_exact()));
        let err = check_lane(Lane::Strict, "b", &cap, &req(&limits)).unwrap_err();
        assert!(err.to_string().contains("/proc/net"), "{err}");
        // Other modes are not concerned.
        let mut r = req(&limits);
        r.network = NetworkMode::Full;
        assert!(check_lane(Lane::Strict, "b", &cap, &r).is_ok());
        cap.network_none = Enforcement::OverGrant("the host's whole network");
        let grants = check_lane(Lane::Trusted, "b", &cap, &req(&limits)).unwrap();
        assert!(!grants.iter().any(|g| g.what == NETWORK_STATE_UNSEEN));
    }

    #[test]
    fn default_capability_is_refused_on_strict_and_fast() {
        let limits = ResourceLimits::none();
        for lane in [Lane::Strict, Lane::Fast] {
            let err = check_lane(lane, "x", &Capability::default(), &req(&limits)).unwrap_err();
            assert!(matches!(err, SandboxError::PolicyRefused { .. }), "{err}");
        }
    }

    #[test]
    fn over_grant_is_refused_on_strict_and_named() {
        let mut cap = full_cap();
        cap.network_loopback = Enforcement::OverGrant("the host's whole network");
        let limits = ResourceLimits::none();
        let mut r = req(&limits);
        r.network = NetworkMode::Loopback;
        let err = check_lane(Lane::Strict, "somebackend", &cap, &r).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("strict") && text.contains("somebackend"),
            "{text}"
        );
        assert!(text.contains("loopback"), "{text}");
        let grants = check_lane(Lane::Trusted, "somebackend", &cap, &r).unwrap();
        assert!(grants
            .iter()
            .any(|g| matches!(g.enforcement, Enforcement::OverGrant(_))));
    }

    #[test]
    fn fast_does_not_require_process_isolation_but_strict_does() {
        let mut cap = full_cap();
        cap.process_isolation = false;
        let limits = ResourceLimits::none();
        assert!(check_lane(Lane::Fast, "x", &cap, &req(&limits)).is_ok());
        assert!(check_lane(Lane::Strict, "x", &cap, &req(&limits)).is_err());
    }

    #[test]
    fn proxy_unsupported_is_refused_everywhere_and_an_over_grant_only_on_trusted() {
        let mut cap = full_cap();
        cap.network_proxy = Enforcement::Unsupported;
        let limits = ResourceLimits::none();
        let mut r = req(&limits);
        r.network = NetworkMode::Proxy;
        for lane in Lane::ALL {
            let err = check_lane(lane, "x", &cap, &r).unwrap_err();
            assert!(
                matches!(&err, SandboxError::NotSupported { feature, .. } if feature.contains("proxy")),
                "{lane}: {err}"
            );
        }
        cap.network_proxy = Enforcement::OverGrant("the host's whole network, no allowlist");
        assert!(check_lane(Lane::Strict, "x", &cap, &r).is_err());
        assert!(check_lane(Lane::Fast, "x", &cap, &r).is_err());
        let grants = check_lane(Lane::Trusted, "x", &cap, &r).unwrap();
        assert!(grants.iter().any(|g| g.what.contains("proxy")
            && matches!(g.enforcement, Enforcement::OverGrant(w) if w.contains("no allowlist"))));
        cap.network_proxy = Enforcement::Exact;
        assert!(check_lane(Lane::Strict, "x", &cap, &r).is_ok());
    }

    #[test]
    fn tree_kill_and_limits_are_required_on_every_lane() {
        let mut cap = full_cap();
        cap.tree_kill = false;
        let limits = ResourceLimits::none();
        for lane in Lane::ALL {
            assert!(check_lane(lane, "x", &cap, &req(&limits)).is_err());
        }
        let mut cap = full_cap();
        cap.memory_limit = false;
        let limits = ResourceLimits {
            memory_bytes: Some(1 << 20),
            ..ResourceLimits::none()
        };
        for lane in Lane::ALL {
            let err = check_lane(lane, "x", &cap, &req(&limits)).unwrap_err();
            assert!(matches!(err, SandboxError::NotSupported { .. }));
        }
    }

    #[test]
    fn root_host_needs_a_backend_that_drops_root_except_on_trusted() {
        let mut cap = full_cap();
        cap.drops_host_root = false;
        let limits = ResourceLimits::none();
        let mut r = req(&limits);
        r.host_is_root = true;
        assert!(check_lane(Lane::Strict, "x", &cap, &r).is_err());
        assert!(check_lane(Lane::Fast, "x", &cap, &r).is_err());
        assert!(check_lane(Lane::Trusted, "x", &cap, &r).is_ok());
    }

    #[test]
    fn nothing_claimed_runs_only_on_trusted_with_every_over_grant_recorded() {
        let mut cap = Capability {
            tree_kill: true,
            network_full: Enforcement::Exact,
            ..Capability::default()
        };
        cap.network_none = Enforcement::OverGrant("the host's whole network");
        let limits = ResourceLimits::none();
        let grants = check_lane(Lane::Trusted, "b", &cap, &req(&limits)).unwrap();
        let over: Vec<_> = grants
            .iter()
            .filter(|g| matches!(g.enforcement, Enforcement::OverGrant(_)))
            .collect();
        assert_eq!(over.len(), 3, "{grants:?}");
    }
}
