//! What a run reports: its status from the engine's answers, and the policy it enforced.

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::EventsOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::record::{Container, Limits, TreeVia};
use sandbox_core::{EffectivePolicy, LimitMechanism, LimitRecord, Plan, Status, TreeKill};

use crate::config::DockerConfig;
use crate::handover::{Handover, Identity, Role, Via};
use crate::NAME;

/// Whether the engine reported an OOM kill in this container.
///
/// The engine's `OOMKilled` flag is set only when its OOM event arrives before the
/// container's exit is processed; with an init as pid 1 the killed process is its
/// child, the init exits at once, and the event often comes a few milliseconds late.
/// The event itself is still delivered, so it is looked up in the engine's event log
/// (filtered by this container's id, from the start of time, so clock skew with a
/// remote engine cannot hide it). A command that died of SIGKILL (137) waits up to
/// two seconds for a late event; other failures only look at what already arrived.
pub(crate) async fn oom_event(docker: &Docker, id: &str, code: i64) -> bool {
    let filters = HashMap::from([
        ("container", vec![id.to_string()]),
        ("type", vec!["container".to_string()]),
        ("event", vec!["oom".to_string()]),
    ]);
    let opts = EventsOptionsBuilder::new()
        .since("1")
        .filters(&filters)
        .build();
    let mut events = docker.events(Some(opts));
    let patience = if code == 137 {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(200)
    };
    matches!(
        tokio::time::timeout(patience, events.next()).await,
        Ok(Some(Ok(ev))) if ev.action.as_deref() == Some("oom")
    )
}

/// The status from the engine's exit code and OOM flag. Under tini, a command killed by
/// signal N exits 128+N, so a signal cannot be told from such an exit code (the
/// capability says so). An OOM kill anywhere in the container, followed by a failing
/// exit, is reported as what it was.
pub(crate) fn decode(code: i64, oom: bool, policy: &mut EffectivePolicy) -> Status {
    if oom {
        policy.enforced.push(Limits::OutOfMemoryKilled);
        if code != 0 {
            return Status::OutOfMemory;
        }
    }
    Status::Exited {
        code: i32::try_from(code).unwrap_or(-1),
    }
}

/// What the run enforces, for the outcome.
pub(crate) fn policy(
    plan: &Plan,
    config: &DockerConfig,
    identity: &Identity,
    handovers: &[Handover],
    image: &bollard::models::ImageInspect,
) -> EffectivePolicy {
    let mut p = plan.effective_policy(NAME);
    p.tree_kill = Some(TreeKill::Container);
    let l = &plan.limits;
    for (limit, value, mechanism) in [
        ("memory", l.memory_bytes, LimitMechanism::Container),
        ("processes", l.max_processes, LimitMechanism::Container),
        ("cpu", l.cpu_seconds, LimitMechanism::Rlimit),
        ("open_files", l.open_files, LimitMechanism::Rlimit),
    ] {
        if let Some(value) = value {
            p.limits.push(LimitRecord {
                limit,
                value,
                mechanism,
            });
        }
    }
    // The engine adds HOSTNAME, and the image's own ENV lines for names we do not set.
    let mut extra = vec!["HOSTNAME".to_string()];
    if let Some(env) = image.config.as_ref().and_then(|c| c.env.as_ref()) {
        for kv in env {
            let name = kv.split('=').next().unwrap_or_default().to_string();
            if !name.is_empty() && !p.env_names.contains(&name) && !extra.contains(&name) {
                extra.push(name);
            }
        }
    }
    p.env_names.extend(extra);
    p.enforced.push(Container::Image {
        name: config.image.clone(),
        id: image.id.clone(),
    });
    p.enforced.push(identity.record());
    if let Some(cpus) = config.cpus {
        p.enforced.push(Limits::CpuQuota {
            nano_cpus: (cpus * 1e9).round() as u64,
        });
    }
    p.enforced.push(Container::Network {
        bridge: plan.network == sandbox_core::NetworkMode::Full,
    });
    for h in handovers {
        let via = match (h.role, h.via) {
            (_, Via::Bind) => TreeVia::Bind,
            (_, Via::IdmappedBind { from }) => TreeVia::IdmappedBind {
                uid: from.0,
                gid: from.1,
            },
            (Role::Workspace, Via::Volume { write_back: false }) => TreeVia::VolumeDiscarded,
            (_, Via::Volume { write_back: true }) if !h.read_only => TreeVia::VolumeWrittenBack,
            (_, Via::Volume { .. }) => TreeVia::VolumeReadOnly,
            (_, Via::InsideCopy) => TreeVia::InsideCopy,
        };
        // A read-only path named through a host symlink is bound at both paths.
        let link_to = (h.role == Role::ReadOnly && h.source != h.path).then(|| h.source.clone());
        p.enforced.push(Container::Tree {
            path: h.path.clone(),
            via,
            link_to,
        });
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_with_a_failing_exit_is_out_of_memory() {
        let dir = tempfile::tempdir().unwrap();
        let opts = sandbox_core::SandboxOpts::new(dir.path(), ["x"]);
        let plan = Plan::new(&opts, NAME, &crate::capability()).unwrap();
        let mut p = plan.effective_policy(NAME);
        assert_eq!(decode(137, true, &mut p), Status::OutOfMemory);
        assert!(p.enforced.contains(&Limits::OutOfMemoryKilled.into()));
        let mut p = plan.effective_policy(NAME);
        assert_eq!(decode(0, true, &mut p), Status::Exited { code: 0 });
        assert_eq!(decode(137, false, &mut p), Status::Exited { code: 137 });
        assert_eq!(decode(3, false, &mut p), Status::Exited { code: 3 });
    }
}
