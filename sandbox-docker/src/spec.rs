//! The container specification: a pure function from the plan to the engine's
//! create-container body. Every policy knob is decided here and unit-tested without an
//! engine.
//!
//! What each field is for:
//!
//! - `Entrypoint` is the whole argv and `Cmd` is unset: the image's own entrypoint and
//!   command would otherwise wrap or replace ours, and the argv is passed as an argv,
//!   never joined into a shell string.
//! - `Init`: the engine's `tini` is pid 1 and the command pid 2. A pid 1 ignores every
//!   signal it has no handler for (a command that kills itself with SIGTERM would live
//!   on) and would have to reap orphans; tini forwards signals and reaps. The whole pid
//!   namespace dies with it.
//! - `User`: see [`crate::handover`]; `CapDrop: ALL` and `no-new-privileges`: nothing
//!   in the container can gain privileges, setuid programs in the image included.
//! - `seccomp=`: our system-call profile ([`crate::seccomp`]), the same surface denied as
//!   the other backends, setuid and setgid bits included.
//! - Bind mounts at the same paths; a tree that a root host hands over through an
//!   idmapped mount is bound from its staging path ([`crate::idmap`]).
//! - `ReadonlyRootfs` plus a private tmpfs on `/tmp`: the command writes only the
//!   workspace, the named writable paths and its own scratch space.
//! - `NetworkMode`: `none` for network none *and* loopback (a container with no network
//!   still has its own loopback, private to it: the host's `127.0.0.1` services are not
//!   reachable), `bridge` for full.
//! - `Memory` with `MemorySwap` equal to it (no swap on top, so the limit is the limit),
//!   `PidsLimit`, CPU time and open files as `Ulimits`, `NanoCpus` from the config.
//! - `LogConfig: none`: the output reaches us through the attach stream; the engine's
//!   log file would keep an unbounded second copy on its disk.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountTypeEnum, MountVolumeOptions, ResourcesUlimits,
};
use sandbox_core::{NetworkMode, Plan, Stdin};

use crate::config::DockerConfig;
use crate::error::DockerError;
use crate::handover::{Handover, Identity, Via};

/// The engine refuses memory limits below 6 MiB.
pub(crate) const MIN_MEMORY: u64 = 6 << 20;

/// Where the loader container mounts the volume of handover `i`.
pub(crate) fn loader_path(i: usize) -> String {
    format!("/.sandbox-load/{i}")
}

/// The volume of each handover that travels by copy, by its index in `handovers`.
pub(crate) fn volume_names(run_id: &str, handovers: &[Handover]) -> Vec<(usize, String)> {
    handovers
        .iter()
        .enumerate()
        .filter(|(_, h)| matches!(h.via, Via::Volume { .. }))
        .map(|(i, _)| (i, format!("{run_id}-v{i}")))
        .collect()
}

/// Everything the specification depends on.
#[derive(Debug)]
pub(crate) struct SpecInput<'a> {
    /// The checked plan.
    pub plan: &'a Plan,
    /// The backend's configuration.
    pub config: &'a DockerConfig,
    /// Who the command runs as.
    pub identity: Identity,
    /// How each path travels.
    pub handovers: &'a [Handover],
    /// This run's name (the volumes are named after it).
    pub run_id: &'a str,
    /// The labels that mark the container as ours.
    pub labels: HashMap<String, String>,
}

fn text(field: &'static str, s: &OsStr) -> Result<String, DockerError> {
    s.to_str()
        .map(str::to_owned)
        .ok_or_else(|| DockerError::Invalid {
            field,
            reason: format!(
                "{s:?} is not valid UTF-8, and the docker engine's API carries only text"
            ),
        })
}

fn path_text(field: &'static str, p: &Path) -> Result<String, DockerError> {
    text(field, p.as_os_str())
}

fn signed(field: &'static str, v: u64) -> Result<i64, DockerError> {
    i64::try_from(v).map_err(|_| DockerError::Invalid {
        field,
        reason: format!("{v} is more than the engine accepts"),
    })
}

/// A path the engine owns inside every container: binding over it would break the
/// container or be refused.
fn reserved(p: &Path) -> bool {
    p == Path::new("/") || ["/proc", "/sys", "/dev"].iter().any(|r| p.starts_with(r))
}

fn field_of(h: &Handover) -> &'static str {
    match h.role {
        crate::handover::Role::Workspace => "workspace",
        crate::handover::Role::Carveout => "readonly_carveouts",
        crate::handover::Role::ReadOnly => "read_only_paths",
        crate::handover::Role::Writable => "writable_paths",
    }
}

/// The mounts, shallowest first (the engine sorts them the same way; sorting here keeps
/// the body stable for tests and logs).
fn mounts(input: &SpecInput<'_>) -> Result<Vec<Mount>, DockerError> {
    let names: HashMap<usize, String> = volume_names(input.run_id, input.handovers)
        .into_iter()
        .collect();
    let mut out = Vec::new();
    let mut order: Vec<(usize, &Handover)> = input.handovers.iter().enumerate().collect();
    order.sort_by_key(|(_, h)| (h.path.components().count(), h.path.clone()));
    for (i, h) in order {
        let field = field_of(h);
        if reserved(&h.path) {
            return Err(DockerError::Invalid {
                field,
                reason: format!(
                    "{} is managed by the container engine and cannot be handed to the command",
                    h.path.display()
                ),
            });
        }
        let target = path_text(field, &h.path)?;
        match h.via {
            Via::Bind => out.push(Mount {
                source: Some(path_text(field, &h.source)?),
                target: Some(target),
                typ: Some(MountTypeEnum::BIND),
                read_only: Some(h.read_only),
                bind_options: Some(MountBindOptions {
                    // Mounts made later on the host under the path do not appear inside.
                    propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Via::IdmappedBind { .. } => {
                let staged = crate::idmap::staging_path(input.run_id, i);
                out.push(Mount {
                    source: Some(path_text(field, &staged)?),
                    target: Some(target),
                    typ: Some(MountTypeEnum::BIND),
                    read_only: Some(h.read_only),
                    bind_options: Some(MountBindOptions {
                        propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            }
            Via::Volume { .. } => out.push(Mount {
                target: Some(target),
                source: names.get(&i).cloned(),
                typ: Some(MountTypeEnum::VOLUME),
                read_only: Some(h.read_only),
                volume_options: Some(MountVolumeOptions {
                    // The image's files at that path must not seed the volume.
                    no_copy: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            // Travels inside the workspace's volume.
            Via::InsideCopy => {}
        }
    }
    Ok(out)
}

fn ulimit(name: &str, v: i64) -> ResourcesUlimits {
    ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(v),
        hard: Some(v),
    }
}

/// The create-container body for the command.
pub(crate) fn container(input: &SpecInput<'_>) -> Result<ContainerCreateBody, DockerError> {
    let plan = input.plan;
    let argv = plan
        .argv
        .iter()
        .map(|a| text("argv", a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = plan
        .env
        .iter()
        .map(|(k, v)| Ok(format!("{}={}", text("env", k)?, text("env", v)?)))
        .collect::<Result<Vec<_>, DockerError>>()?;
    let cwd = path_text("cwd", &plan.cwd)?;

    let limits = &plan.limits;
    let memory = match limits.memory_bytes {
        Some(m) if m < MIN_MEMORY => {
            return Err(DockerError::Invalid {
                field: "limits.memory_bytes",
                reason: format!("{m} bytes is below the docker engine's minimum of 6 MiB"),
            })
        }
        Some(m) => Some(signed("limits.memory_bytes", m)?),
        None => None,
    };
    let mut ulimits = Vec::new();
    if let Some(n) = limits.open_files {
        ulimits.push(ulimit("nofile", signed("limits.open_files", n)?));
    }
    if let Some(s) = limits.cpu_seconds {
        ulimits.push(ulimit("cpu", signed("limits.cpu_seconds", s)?));
    }
    let pids_limit = limits
        .max_processes
        .map(|n| signed("limits.max_processes", n))
        .transpose()?;
    let nano_cpus = input.config.cpus.map(|c| (c * 1e9).round() as i64);

    let mounts = mounts(input)?;
    // The workspace (or another path) may be `/tmp` itself: it then is the scratch space.
    // Sized inside the run's memory limit (the kernel's default is half of the host's RAM);
    // an explicitly unlimited run keeps that default.
    let tmpfs_opts = match plan.limits.memory_bytes {
        Some(b) => format!("rw,nosuid,nodev,mode=1777,size={b}"),
        None => "rw,nosuid,nodev,mode=1777".to_string(),
    };
    let tmpfs = (!input.handovers.iter().any(|h| h.path == Path::new("/tmp")))
        .then(|| HashMap::from([("/tmp".to_string(), tmpfs_opts)]));
    let network_mode = match plan.network {
        // `Proxy` never gets here (the capability says unsupported and every lane refuses
        // it); were it to, no network is the side that fails closed.
        NetworkMode::None | NetworkMode::Loopback | NetworkMode::Proxy => "none",
        NetworkMode::Full => "bridge",
    };
    let stdin = matches!(plan.stdin, Stdin::Bytes(_));

    Ok(ContainerCreateBody {
        image: Some(input.config.image.clone()),
        entrypoint: Some(argv),
        cmd: None,
        env: Some(env),
        working_dir: Some(cwd),
        user: Some(format!("{}:{}", input.identity.uid, input.identity.gid)),
        labels: Some(input.labels.clone()),
        tty: Some(false),
        attach_stdin: Some(stdin),
        open_stdin: Some(stdin),
        // The command's stdin closes when our attach stream closes its input.
        stdin_once: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        host_config: Some(HostConfig {
            init: Some(true),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec![
                "no-new-privileges".into(),
                crate::seccomp::security_opt()?.to_string(),
            ]),
            privileged: Some(false),
            network_mode: Some(network_mode.into()),
            ipc_mode: Some("private".into()),
            tmpfs,
            mounts: Some(mounts),
            memory,
            memory_swap: memory,
            pids_limit,
            ulimits: (!ulimits.is_empty()).then_some(ulimits),
            nano_cpus,
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            auto_remove: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The loader: a container that is never started, only used to unpack the copies into
/// their volumes. Uploading through the command's own container cannot work: its root
/// filesystem is read-only, read-only volumes refuse uploads, and the engine never
/// applies an archive's entry for the directory it unpacks into, so a volume's top
/// directory could not be given to the command's uid.
pub(crate) fn loader(
    image: &str,
    run_id: &str,
    handovers: &[Handover],
    labels: HashMap<String, String>,
) -> ContainerCreateBody {
    let mounts = volume_names(run_id, handovers)
        .into_iter()
        .map(|(i, name)| Mount {
            target: Some(loader_path(i)),
            source: Some(name),
            typ: Some(MountTypeEnum::VOLUME),
            read_only: Some(false),
            volume_options: Some(MountVolumeOptions {
                no_copy: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    ContainerCreateBody {
        image: Some(image.to_string()),
        // Never started; a path that exists nowhere makes sure of it.
        entrypoint: Some(vec!["/.sandbox-loader-is-never-started".into()]),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            log_config: Some(HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::path::PathBuf;

    use sandbox_core::{Capability, Enforcement, SandboxOpts};

    use super::*;
    use crate::config::WorkspaceMode;
    use crate::handover::{choose_identity, plan_handovers, Role};

    struct Fixture {
        _dirs: Vec<tempfile::TempDir>,
        ws: PathBuf,
        other: PathBuf,
        opts: SandboxOpts,
    }

    fn fixture() -> Fixture {
        let ws = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
        let wsp = ws.path().canonicalize().unwrap();
        let op = other.path().canonicalize().unwrap();
        let opts = SandboxOpts::new(&wsp, ["prog", "a b", "'quoted'", "$HOME"]);
        Fixture {
            _dirs: vec![ws, other],
            ws: wsp,
            other: op,
            opts,
        }
    }

    fn cap() -> Capability {
        crate::capability()
    }

    fn build(
        opts: &SandboxOpts,
        config: &DockerConfig,
    ) -> Result<ContainerCreateBody, DockerError> {
        let plan = Plan::new(opts, "docker", &cap()).map_err(|e| DockerError::Invalid {
            field: "plan",
            reason: e.to_string(),
        })?;
        let identity = choose_identity(1000, 1000, None);
        let handovers = plan_handovers(&crate::handover::Request {
            workspace: &plan.workspace,
            layer: None,
            carveouts: &plan.readonly_carveouts,
            read_only: &plan.read_only_paths,
            read_only_links: &plan.read_only_links,
            writable: &plan.writable_paths,
            mode: config.workspace_mode,
            snapshot: plan.snapshot,
            host_is_root: false,
            identity: &identity,
            idmap: true,
            owner: &|_| Some((1000, 1000)),
        });
        container(&SpecInput {
            plan: &plan,
            config,
            identity,
            handovers: &handovers,
            run_id: "sandbox-test",
            labels: crate::labels::labels("run"),
        })
    }

    fn host(body: &ContainerCreateBody) -> &HostConfig {
        body.host_config.as_ref().unwrap()
    }

    fn mount<'a>(body: &'a ContainerCreateBody, target: &Path) -> &'a Mount {
        host(body)
            .mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.target.as_deref() == target.to_str())
            .unwrap_or_else(|| panic!("no mount at {}", target.display()))
    }

    #[test]
    fn argv_is_the_entrypoint_verbatim_and_the_image_command_is_not_used() {
        let f = fixture();
        let body = build(&f.opts, &DockerConfig::new("img:1")).unwrap();
        assert_eq!(
            body.entrypoint.as_deref().unwrap(),
            ["prog", "a b", "'quoted'", "$HOME"]
        );
        assert_eq!(body.cmd, None);
        assert_eq!(body.image.as_deref(), Some("img:1"));
    }

    #[test]
    fn confinement_knobs_are_all_set() {
        let f = fixture();
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        let h = host(&body);
        assert_eq!(h.init, Some(true));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.cap_drop.as_deref().unwrap(), ["ALL"]);
        assert_eq!(h.cap_add, None);
        assert_eq!(h.privileged, Some(false));
        let opts = h.security_opt.as_deref().unwrap();
        assert_eq!(opts[0], "no-new-privileges");
        assert!(opts[1].starts_with("seccomp={"), "{}", &opts[1][..40]);
        assert_eq!(opts.len(), 2);
        assert_eq!(h.ipc_mode.as_deref(), Some("private"));
        assert_eq!(h.pid_mode, None, "the pid namespace stays private");
        assert_eq!(h.auto_remove, Some(false), "we inspect, then remove");
        assert_eq!(
            h.tmpfs.as_ref().unwrap().get("/tmp").map(String::as_str),
            Some(
                format!(
                    "rw,nosuid,nodev,mode=1777,size={}",
                    sandbox_core::DEFAULT_MEMORY_BYTES
                )
                .as_str()
            ),
            "/tmp is sized inside the (default) memory limit"
        );
        assert_eq!(h.log_config.as_ref().unwrap().typ.as_deref(), Some("none"));
        assert_eq!(body.user.as_deref(), Some("1000:1000"));
        assert_eq!(body.tty, Some(false));
        let labels = body.labels.as_ref().unwrap();
        assert_eq!(
            labels.get(crate::LABEL).map(String::as_str),
            Some(crate::labels::LABEL_VALUE)
        );
        assert!(labels.contains_key(crate::labels::LABEL_OWNER));
    }

    #[test]
    fn workspace_is_bound_at_its_own_path_and_is_the_working_directory() {
        let mut f = fixture();
        f.opts.cwd = Some(".git".into());
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        let m = mount(&body, &f.ws);
        assert_eq!(m.typ, Some(MountTypeEnum::BIND));
        assert_eq!(m.source.as_deref(), f.ws.to_str());
        assert_eq!(m.read_only, Some(false));
        assert_eq!(body.working_dir.as_deref(), f.ws.join(".git").to_str());
    }

    #[test]
    fn carveouts_and_read_only_paths_are_read_only_and_writable_paths_are_not() {
        let mut f = fixture();
        f.opts.readonly_carveouts = vec![".git/hooks".into()];
        let ro = f.other.join("ro");
        let rw = f.other.join("rw");
        std::fs::create_dir(&ro).unwrap();
        std::fs::create_dir(&rw).unwrap();
        f.opts.read_only_paths = vec![ro.clone()];
        f.opts.writable_paths = vec![rw.clone()];
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        assert_eq!(mount(&body, &f.ws.join(".git/hooks")).read_only, Some(true));
        assert_eq!(mount(&body, &ro).read_only, Some(true));
        assert_eq!(mount(&body, &rw).read_only, Some(false));
        // `.git` is bound onto itself, writable, so it cannot be renamed away.
        assert_eq!(mount(&body, &f.ws.join(".git")).read_only, Some(false));
        // Nothing else of the host is mounted.
        assert_eq!(host(&body).mounts.as_ref().unwrap().len(), 5);
        assert_eq!(host(&body).binds, None);
        // The carve-out comes after the workspace it sits in.
        let targets: Vec<_> = host(&body)
            .mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.target.clone().unwrap())
            .collect();
        let ws_at = targets.iter().position(|t| Path::new(t) == f.ws).unwrap();
        let co_at = targets
            .iter()
            .position(|t| Path::new(t) == f.ws.join(".git/hooks"))
            .unwrap();
        let pin_at = targets
            .iter()
            .position(|t| Path::new(t) == f.ws.join(".git"))
            .unwrap();
        assert!(ws_at < pin_at && pin_at < co_at, "{targets:?}");
    }

    #[test]
    fn network_modes_map_to_none_none_and_bridge() {
        let f = fixture();
        for (mode, want) in [
            (NetworkMode::None, "none"),
            (NetworkMode::Loopback, "none"),
            (NetworkMode::Full, "bridge"),
        ] {
            let mut opts = f.opts.clone();
            opts.network = mode;
            let body = build(&opts, &DockerConfig::new("img")).unwrap();
            assert_eq!(host(&body).network_mode.as_deref(), Some(want), "{mode}");
        }
    }

    #[test]
    fn limits_map_to_the_engine_and_swap_is_not_extra() {
        let mut f = fixture();
        f.opts.limits.memory_bytes = Some(64 << 20);
        f.opts.limits.max_processes = Some(42);
        f.opts.limits.cpu_seconds = Some(7);
        f.opts.limits.open_files = Some(99);
        let mut config = DockerConfig::new("img");
        config.cpus = Some(1.5);
        let body = build(&f.opts, &config).unwrap();
        let h = host(&body);
        assert_eq!(h.memory, Some(64 << 20));
        assert_eq!(h.memory_swap, Some(64 << 20));
        assert_eq!(h.pids_limit, Some(42));
        assert_eq!(h.nano_cpus, Some(1_500_000_000));
        let ul = h.ulimits.as_ref().unwrap();
        let get = |n: &str| ul.iter().find(|u| u.name.as_deref() == Some(n)).unwrap();
        assert_eq!(
            (get("nofile").soft, get("nofile").hard),
            (Some(99), Some(99))
        );
        assert_eq!((get("cpu").soft, get("cpu").hard), (Some(7), Some(7)));
    }

    #[test]
    fn unset_limits_are_not_sent() {
        let mut f = fixture();
        f.opts.limits = sandbox_core::ResourceLimits::none();
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        let h = host(&body);
        assert_eq!((h.memory, h.memory_swap, h.pids_limit), (None, None, None));
        assert_eq!(h.ulimits, None);
        assert_eq!(h.nano_cpus, None);
    }

    #[test]
    fn memory_below_the_engine_minimum_is_a_clear_error() {
        let mut f = fixture();
        f.opts.limits.memory_bytes = Some(1 << 20);
        let e = build(&f.opts, &DockerConfig::new("img")).unwrap_err();
        assert!(
            matches!(
                e,
                DockerError::Invalid {
                    field: "limits.memory_bytes",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn environment_is_exactly_the_plans() {
        let mut f = fixture();
        f.opts.env.set = vec![("FOO".into(), "bar=baz".into())];
        std::env::set_var("SANDBOX_DOCKER_SPEC_SECRET", "s3cret");
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        let env = body.env.unwrap();
        assert!(env.contains(&"FOO=bar=baz".to_string()), "{env:?}");
        assert!(env.iter().any(|e| e.starts_with("PATH=")));
        assert!(env.contains(&format!("HOME={}", f.ws.display())), "{env:?}");
        assert!(!env.iter().any(|e| e.contains("s3cret")), "{env:?}");
        assert_eq!(env.len(), 4, "{env:?}");
    }

    #[test]
    fn non_utf8_arguments_are_refused_not_mangled() {
        let f = fixture();
        let mut opts = f.opts.clone();
        opts.argv.push(OsString::from_vec(vec![0xff, 0xfe]));
        let e = build(&opts, &DockerConfig::new("img")).unwrap_err();
        assert!(
            matches!(e, DockerError::Invalid { field: "argv", .. }),
            "{e}"
        );
    }

    #[test]
    fn stdin_is_attached_only_when_there_are_bytes() {
        let f = fixture();
        let body = build(&f.opts, &DockerConfig::new("img")).unwrap();
        assert_eq!(
            (body.open_stdin, body.attach_stdin, body.stdin_once),
            (Some(false), Some(false), Some(false))
        );
        let mut opts = f.opts.clone();
        opts.stdin = Stdin::Bytes(b"hi".to_vec());
        let body = build(&opts, &DockerConfig::new("img")).unwrap();
        assert_eq!(
            (body.open_stdin, body.attach_stdin, body.stdin_once),
            (Some(true), Some(true), Some(true))
        );
    }

    #[test]
    fn copy_mode_mounts_named_volumes_without_seeding_them_from_the_image() {
        let mut f = fixture();
        f.opts.readonly_carveouts = vec![".git/hooks".into()];
        let ro = f.other.join("ro");
        std::fs::create_dir(&ro).unwrap();
        f.opts.read_only_paths = vec![ro.clone()];
        let mut config = DockerConfig::new("img");
        config.workspace_mode = WorkspaceMode::Copy;
        let body = build(&f.opts, &config).unwrap();
        let ws = mount(&body, &f.ws);
        assert_eq!(ws.typ, Some(MountTypeEnum::VOLUME));
        assert!(ws.source.as_deref().unwrap().starts_with("sandbox-test-v"));
        assert_eq!(ws.read_only, Some(false));
        assert_eq!(ws.volume_options.as_ref().unwrap().no_copy, Some(true));
        let rom = mount(&body, &ro);
        assert_eq!(rom.typ, Some(MountTypeEnum::VOLUME));
        assert_eq!(rom.read_only, Some(true));
        // The carve-out travels inside the workspace's volume, not as a mount of the host.
        assert!(host(&body)
            .mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.typ != Some(MountTypeEnum::BIND)));
    }

    #[test]
    fn the_loader_mounts_every_volume_writable_under_its_own_path() {
        let ident = choose_identity(1000, 1000, None);
        let hs = plan_handovers(&crate::handover::Request {
            workspace: Path::new("/ws"),
            layer: None,
            carveouts: &[],
            read_only: &[PathBuf::from("/ro")],
            read_only_links: &[],
            writable: &[],
            mode: WorkspaceMode::Copy,
            snapshot: false,
            host_is_root: false,
            identity: &ident,
            idmap: true,
            owner: &|_| Some((1000, 1000)),
        });
        assert!(hs.iter().all(|h| h.role != Role::Carveout));
        let body = loader("img", "run1", &hs, HashMap::new());
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts.len(), 2);
        assert!(mounts.iter().all(|m| m.read_only == Some(false)));
        assert_eq!(mounts[0].target.as_deref(), Some("/.sandbox-load/0"));
        assert_eq!(mounts[0].source.as_deref(), Some("run1-v0"));
    }

    #[test]
    fn paths_the_engine_owns_are_refused() {
        let f = fixture();
        let mut opts = f.opts.clone();
        // Core refuses /proc, /sys and /dev themselves (control filesystems); /dev/shm is a
        // plain tmpfs that only the engine's own mounts make off limits.
        opts.read_only_paths = vec!["/dev/shm".into()];
        let e = build(&opts, &DockerConfig::new("img")).unwrap_err();
        assert!(
            matches!(
                e,
                DockerError::Invalid {
                    field: "read_only_paths",
                    ..
                }
            ),
            "{e}"
        );
        let mut opts = f.opts.clone();
        opts.read_only_paths = vec!["/".into()];
        assert!(build(&opts, &DockerConfig::new("img")).is_err());
    }

    #[test]
    fn an_idmapped_tree_is_bound_from_its_staging_path() {
        let f = fixture();
        let plan = Plan::new(&f.opts, "docker", &cap()).unwrap();
        let identity = choose_identity(0, 0, Some((0, 0)));
        let hs = plan_handovers(&crate::handover::Request {
            workspace: &plan.workspace,
            layer: None,
            carveouts: &[],
            read_only: &[],
            read_only_links: &[],
            writable: &[],
            mode: WorkspaceMode::Bind,
            snapshot: false,
            host_is_root: true,
            identity: &identity,
            idmap: true,
            owner: &|_| Some((0, 0)),
        });
        let body = container(&SpecInput {
            plan: &plan,
            config: &DockerConfig::new("img"),
            identity,
            handovers: &hs,
            run_id: "sandbox-r",
            labels: HashMap::new(),
        })
        .unwrap();
        let m = mount(&body, &f.ws);
        assert_eq!(m.typ, Some(MountTypeEnum::BIND));
        assert_eq!(m.source.as_deref(), Some("/run/sandbox-docker/sandbox-r/0"));
        assert_eq!(m.read_only, Some(false));
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
    }

    #[test]
    fn a_workspace_at_tmp_replaces_the_scratch_tmpfs() {
        let f = fixture();
        let plan = Plan::new(&f.opts, "docker", &cap()).unwrap();
        let identity = choose_identity(1000, 1000, None);
        let hs = vec![Handover {
            path: PathBuf::from("/tmp"),
            source: PathBuf::from("/tmp"),
            role: Role::Workspace,
            via: Via::Bind,
            read_only: false,
        }];
        let body = container(&SpecInput {
            plan: &plan,
            config: &DockerConfig::new("img"),
            identity,
            handovers: &hs,
            run_id: "r",
            labels: HashMap::new(),
        })
        .unwrap();
        assert_eq!(host(&body).tmpfs, None);
    }

    #[test]
    fn capability_is_what_the_spec_enforces() {
        let c = cap();
        assert!(c.confine_reads && c.confine_writes && c.readonly_carveouts);
        assert_eq!(c.network_none, Enforcement::Exact);
        assert_eq!(c.network_loopback, Enforcement::Exact);
        assert_eq!(c.network_full, Enforcement::Exact);
        assert!(c.tree_kill && c.process_isolation && c.drops_host_root);
        assert!(!c.host_programs);
        assert!(!c.signal_status, "tini reports a signal as 128+N");
    }
}
