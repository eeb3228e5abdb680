//! `docker run --rm` with the flags of the container this backend creates: the bench's
//! baseline for its start-up ("the same image and flags"), given to the registry as
//! [`ImageSupport::direct`](sandbox_core::registry::ImageSupport::direct).
//!
//! The backend's create-container body ([`DockerBackend::container_body`]) is translated
//! field by field into the docker command line. Any field set in the body that this
//! module does not translate is an error, not a silent omission: a baseline with fewer
//! flags would flatter the backend.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptionsPropagationEnum, MountTypeEnum,
};
use sandbox_core::registry::{find_program, DirectRun};
use sandbox_core::SandboxError;
use serde_json::Value;

use crate::{DockerBackend, DockerConfig, NAME};

/// How the baseline is made, for the bench's notes.
const NOTE: &str = "`docker run --rm`: the flags are translated field by field from the \
                    backend's own create-container body (`DockerBackend::container_body`, \
                    every path bind-mounted as it is: a workspace owned by the command's \
                    uid); a field the translation does not know fails the row instead of \
                    being left out.";

/// `docker run --rm` with the same image and flags, when the `docker` client is installed
/// (files the command line needs go under `scratch`).
pub(crate) fn docker_run(image: &str, scratch: &Path) -> Result<Option<DirectRun>, SandboxError> {
    let Some(docker) = find_program("docker") else {
        return Ok(None);
    };
    let backend = DockerBackend::new(DockerConfig::new(image))?;
    let scratch = scratch.to_path_buf();
    Ok(Some(DirectRun {
        label: "`docker run --rm` with the same image and flags".into(),
        note: NOTE,
        program: docker,
        args: Arc::new(move |opts| {
            let body = backend.container_body(opts)?;
            run_args(&body, &scratch).map_err(|what| SandboxError::NotSupported {
                backend: NAME,
                feature: format!("the `docker run` baseline of {what}"),
                remedy: "translate the field in sandbox-docker's `direct.rs`".into(),
            })
        }),
    }))
}

/// The body fields translated below (JSON names, as the engine API spells them).
const BODY_FIELDS: &[&str] = &[
    "Image",
    "Entrypoint",
    "Cmd",
    "Env",
    "WorkingDir",
    "User",
    "Labels",
    "Tty",
    "AttachStdin",
    "OpenStdin",
    "StdinOnce",
    "AttachStdout",
    "AttachStderr",
    "HostConfig",
];

/// The host-config fields translated below.
const HOST_FIELDS: &[&str] = &[
    "Init",
    "ReadonlyRootfs",
    "CapDrop",
    "CapAdd",
    "SecurityOpt",
    "Privileged",
    "NetworkMode",
    "IpcMode",
    "Tmpfs",
    "Mounts",
    "Memory",
    "MemorySwap",
    "PidsLimit",
    "Ulimits",
    "NanoCpus",
    "LogConfig",
    "AutoRemove",
];

/// Fields set in `value` (a JSON object) that are not in `known`.
fn untranslated(value: &Value, known: &[&str]) -> Vec<String> {
    value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn mount_arg(m: &Mount) -> Result<String, String> {
    let mut parts = Vec::new();
    match m.typ {
        Some(MountTypeEnum::BIND) => parts.push("type=bind".to_string()),
        Some(MountTypeEnum::VOLUME) => parts.push("type=volume".to_string()),
        Some(MountTypeEnum::TMPFS) => parts.push("type=tmpfs".to_string()),
        other => return Err(format!("mount type {other:?}")),
    }
    if let Some(s) = &m.source {
        parts.push(format!("source={s}"));
    }
    let target = m.target.as_ref().ok_or("a mount without a target")?;
    parts.push(format!("target={target}"));
    if m.read_only == Some(true) {
        parts.push("readonly".into());
    }
    if let Some(b) = &m.bind_options {
        if let Some(p) = b.propagation {
            if p != MountBindOptionsPropagationEnum::EMPTY {
                parts.push(format!("bind-propagation={p}"));
            }
        }
        if b.non_recursive == Some(true) {
            parts.push("bind-nonrecursive=true".into());
        }
        let rest = untranslated(
            &serde_json::to_value(b).map_err(|e| e.to_string())?,
            &["Propagation", "NonRecursive"],
        );
        if !rest.is_empty() {
            return Err(format!("bind options {rest:?}"));
        }
    }
    if let Some(v) = &m.volume_options {
        if v.no_copy == Some(true) {
            parts.push("volume-nocopy".into());
        }
        let rest = untranslated(
            &serde_json::to_value(v).map_err(|e| e.to_string())?,
            &["NoCopy"],
        );
        if !rest.is_empty() {
            return Err(format!("volume options {rest:?}"));
        }
    }
    let rest = untranslated(
        &serde_json::to_value(m).map_err(|e| e.to_string())?,
        &[
            "Target",
            "Source",
            "Type",
            "ReadOnly",
            "BindOptions",
            "VolumeOptions",
        ],
    );
    if !rest.is_empty() {
        return Err(format!("mount fields {rest:?}"));
    }
    Ok(parts.join(","))
}

fn host_args(h: &HostConfig, scratch: &Path, args: &mut Vec<OsString>) -> Result<(), String> {
    let rest = untranslated(
        &serde_json::to_value(h).map_err(|e| e.to_string())?,
        HOST_FIELDS,
    );
    if !rest.is_empty() {
        return Err(format!("host-config fields {rest:?}"));
    }
    let mut flag = |f: &str, v: String| {
        args.push(f.into());
        args.push(v.into());
    };
    if h.privileged == Some(true) {
        return Err("a privileged container".into());
    }
    for c in h.cap_drop.iter().flatten() {
        flag("--cap-drop", c.clone());
    }
    for c in h.cap_add.iter().flatten() {
        flag("--cap-add", c.clone());
    }
    for (i, opt) in h.security_opt.iter().flatten().enumerate() {
        // The API takes a seccomp profile inline; the command line reads it from a file.
        match opt.strip_prefix("seccomp=") {
            Some(profile) if profile.trim_start().starts_with('{') => {
                let file = scratch.join(format!("seccomp-{i}.json"));
                std::fs::write(&file, profile)
                    .map_err(|e| format!("writing {}: {e}", file.display()))?;
                flag("--security-opt", format!("seccomp={}", file.display()));
            }
            _ => flag("--security-opt", opt.clone()),
        }
    }
    if let Some(n) = &h.network_mode {
        flag("--network", n.clone());
    }
    if let Some(i) = &h.ipc_mode {
        flag("--ipc", i.clone());
    }
    let mut tmpfs: Vec<_> = h.tmpfs.iter().flatten().collect();
    tmpfs.sort();
    for (path, opts) in tmpfs {
        flag("--tmpfs", format!("{path}:{opts}"));
    }
    for m in h.mounts.iter().flatten() {
        flag("--mount", mount_arg(m)?);
    }
    if let Some(m) = h.memory {
        flag("--memory", format!("{m}b"));
    }
    if let Some(m) = h.memory_swap {
        flag("--memory-swap", format!("{m}b"));
    }
    if let Some(p) = h.pids_limit {
        flag("--pids-limit", p.to_string());
    }
    for u in h.ulimits.iter().flatten() {
        let name = u.name.as_deref().ok_or("an unnamed ulimit")?;
        let soft = u.soft.ok_or("a ulimit without a soft value")?;
        let hard = u.hard.unwrap_or(soft);
        flag("--ulimit", format!("{name}={soft}:{hard}"));
    }
    if let Some(n) = h.nano_cpus {
        flag("--cpus", format!("{}", n as f64 / 1e9));
    }
    if let Some(l) = &h.log_config {
        if let Some(t) = &l.typ {
            flag("--log-driver", t.clone());
        }
        for (k, v) in l.config.iter().flatten() {
            flag("--log-opt", format!("{k}={v}"));
        }
    }
    if h.init == Some(true) {
        args.push("--init".into());
    }
    if h.readonly_rootfs == Some(true) {
        args.push("--read-only".into());
    }
    Ok(())
}

/// `docker` arguments (after the program name) that start the container `body` describes
/// in the foreground, output attached, removed at its end. Files the command line needs
/// (a seccomp profile) are written under `scratch`.
fn run_args(body: &ContainerCreateBody, scratch: &Path) -> Result<Vec<OsString>, String> {
    let value = serde_json::to_value(body).map_err(|e| e.to_string())?;
    let rest = untranslated(&value, BODY_FIELDS);
    if !rest.is_empty() {
        return Err(format!("container fields {rest:?}"));
    }
    if body.tty == Some(true) {
        return Err("a container with a terminal".into());
    }
    let mut args: Vec<OsString> = vec!["run".into(), "--rm".into()];
    // Foreground `docker run` attaches stdout and stderr; stdin only with -i.
    if body.attach_stdin == Some(true) || body.open_stdin == Some(true) {
        args.push("-i".into());
    }
    if let Some(u) = &body.user {
        args.extend(["--user".into(), u.into()]);
    }
    if let Some(w) = &body.working_dir {
        args.extend(["--workdir".into(), w.into()]);
    }
    for e in body.env.iter().flatten() {
        args.extend(["--env".into(), e.into()]);
    }
    let mut labels: Vec<_> = body.labels.iter().flatten().collect();
    labels.sort();
    for (k, v) in labels {
        args.extend(["--label".into(), format!("{k}={v}").into()]);
    }
    if let Some(h) = &body.host_config {
        host_args(h, scratch, &mut args)?;
    }
    let entry = body.entrypoint.clone().unwrap_or_default();
    let (first, rest_of_entry) = entry.split_first().ok_or("no entrypoint")?;
    args.extend(["--entrypoint".into(), first.into()]);
    args.push(body.image.clone().ok_or("no image")?.into());
    // The entrypoint's own arguments, then the command (none in our bodies).
    args.extend(rest_of_entry.iter().map(OsString::from));
    args.extend(body.cmd.iter().flatten().map(OsString::from));
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{HostConfigLogConfig, MountBindOptions, ResourcesUlimits};
    use std::collections::HashMap;

    fn body() -> ContainerCreateBody {
        ContainerCreateBody {
            image: Some("img:1".into()),
            entrypoint: Some(vec!["/bin/echo".into(), "a b".into()]),
            env: Some(vec!["PATH=/bin".into()]),
            working_dir: Some("/ws".into()),
            user: Some("65534:65534".into()),
            labels: Some(HashMap::from([("k".into(), "v".into())])),
            tty: Some(false),
            attach_stdin: Some(false),
            open_stdin: Some(false),
            stdin_once: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(HostConfig {
                init: Some(true),
                readonly_rootfs: Some(true),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec![
                    "no-new-privileges".into(),
                    "seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}".into(),
                ]),
                privileged: Some(false),
                network_mode: Some("none".into()),
                ipc_mode: Some("private".into()),
                tmpfs: Some(HashMap::from([("/tmp".into(), "rw,mode=1777".into())])),
                mounts: Some(vec![Mount {
                    target: Some("/ws".into()),
                    source: Some("/ws".into()),
                    typ: Some(MountTypeEnum::BIND),
                    read_only: Some(false),
                    bind_options: Some(MountBindOptions {
                        propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                memory: Some(1 << 30),
                memory_swap: Some(1 << 30),
                pids_limit: Some(512),
                ulimits: Some(vec![ResourcesUlimits {
                    name: Some("nofile".into()),
                    soft: Some(64),
                    hard: Some(64),
                }]),
                log_config: Some(HostConfigLogConfig {
                    typ: Some("none".into()),
                    config: None,
                }),
                auto_remove: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn text(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn every_flag_of_the_body_is_on_the_command_line() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let args = text(&run_args(&body(), dir.path()).unwrap_or_default());
        let joined = args.join(" ");
        for want in [
            "run --rm",
            "--user 65534:65534",
            "--workdir /ws",
            "--env PATH=/bin",
            "--label k=v",
            "--cap-drop ALL",
            "--security-opt no-new-privileges",
            "--network none",
            "--ipc private",
            "--tmpfs /tmp:rw,mode=1777",
            "--mount type=bind,source=/ws,target=/ws,bind-propagation=rprivate",
            "--memory 1073741824b",
            "--memory-swap 1073741824b",
            "--pids-limit 512",
            "--ulimit nofile=64:64",
            "--log-driver none",
            "--init",
            "--read-only",
        ] {
            assert!(joined.contains(want), "missing `{want}` in {joined}");
        }
        // The argv stays an argv: the entrypoint, the image, then each argument as is.
        let tail = &args[args.len() - 4..];
        assert_eq!(tail, ["--entrypoint", "/bin/echo", "img:1", "a b"]);
        assert!(!args.iter().any(|a| a == "-i"), "{joined}");
        // The inline seccomp profile went to a file the command line can name.
        let seccomp = args
            .iter()
            .find_map(|a| a.strip_prefix("seccomp="))
            .unwrap_or_default();
        let profile = std::fs::read_to_string(seccomp).unwrap_or_default();
        assert_eq!(profile, "{\"defaultAction\":\"SCMP_ACT_ALLOW\"}");
    }

    #[test]
    fn an_untranslated_field_is_an_error_not_a_missing_flag() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut b = body();
        b.hostname = Some("h".into());
        let e = run_args(&b, dir.path()).err().unwrap_or_default();
        assert!(e.contains("Hostname"), "{e}");
        let mut b = body();
        if let Some(h) = b.host_config.as_mut() {
            h.oom_kill_disable = Some(true);
        }
        let e = run_args(&b, dir.path()).err().unwrap_or_default();
        assert!(e.contains("OomKillDisable"), "{e}");
        let mut b = body();
        if let Some(m) = b.host_config.as_mut().and_then(|h| h.mounts.as_mut()) {
            m[0].consistency = Some("cached".into());
        }
        let e = run_args(&b, dir.path()).err().unwrap_or_default();
        assert!(e.contains("Consistency"), "{e}");
    }

    #[test]
    fn stdin_asks_for_interactive() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut b = body();
        b.attach_stdin = Some(true);
        b.open_stdin = Some(true);
        let args = text(&run_args(&b, dir.path()).unwrap_or_default());
        assert!(args.iter().any(|a| a == "-i"), "{args:?}");
    }
}
