//! The `docker` backend: each command in its own container, through the Docker Engine API.
//!
//! For hosts where user namespaces are locked down, for commands that need a root
//! filesystem of their own, and for engines on other machines: the same [`Sandbox`]
//! contract, enforced by a local or remote Docker engine.
//!
//! # What it confines
//!
//! The container runs the configured image with a read-only root filesystem and a
//! private tmpfs `/tmp`; the workspace at its own path (the working directory), the named
//! read-only and writable paths, and nothing else of the host. Every capability is
//! dropped, `no-new-privileges` is set, and our system-call profile replaces the engine's
//! default: the same kernel surface denied as the bwrap and landlock backends (tracing,
//! mounts, namespaces, the keyring, bpf, io_uring, ...), setuid and setgid bits refused,
//! unknown calls answered `ENOSYS` (core's table rendered by its OCI allow-list, see
//! `seccomp.rs`). The command runs as the caller's
//! uid, or, when the caller is root, as an unprivileged one (see [the uid](#the-uid)).
//! Network mode `none` and `loopback` both get a network namespace with only its own
//! loopback; `full` gets the engine's default bridge (the outside world and the host's
//! own addresses, never the host's `127.0.0.1`). Network mode `proxy`, host ports and
//! published ports get that same namespace, and the host (root, with a local engine) enters
//! it to make the proxy's and host ports' listeners before the command runs and the
//! sockets of published connections, exactly as the bwrap and landlock backends see them
//! (see `egress.rs`); a caller that is not root, or a remote engine, is refused by the
//! capability. Memory and process counts are limited
//! by the container's cgroup; CPU time and open files by rlimits; a CPU quota comes from
//! [`DockerConfig::cpus`]. Only the named environment variables are set, plus what the
//! engine always adds (`HOSTNAME`) and the image's own `ENV` lines (the image is
//! configuration the host chose; both are listed in the outcome's policy). Every
//! container and volume carries [`LABEL`] and is removed after `wait` or `kill`, also
//! when a run fails half way or its runtime shuts down; [`cleanup_leftovers`] removes
//! what a crashed host left, and the first run of every process calls it for the owners
//! that are gone (a host SIGKILLed mid-run leaves its container running until then:
//! [`Capability::dies_with_host`](sandbox_core::Capability::dies_with_host) is false). An
//! engine that stops answering mid-run (restarting) ends the run with an error, never a
//! guessed status, and the removal keeps trying long enough to outlast a restart.
//!
//! The output streams while the command runs ([`Sandbox::logs`] sees it) and is capped
//! like every backend's; the timeout and [`Sandbox::kill`] kill the container (its init,
//! and with it the whole pid namespace); an OOM kill is reported as
//! [`Status::OutOfMemory`](sandbox_core::Status::OutOfMemory).
//!
//! # The uid
//!
//! Root on the host is not root in the container: a uid-0 process without capabilities
//! still owns root's files, so it could read a root-only file in a directory it was only
//! granted to read, and leave a setuid-root program in the workspace. So:
//!
//! - a caller that is not root runs the command as itself;
//! - a root caller runs it as the workspace's owner when that is an ordinary user (the
//!   files it makes belong to that user, as if they had run it);
//! - a root caller with a root-owned workspace (CI) runs it as `nobody` (65534).
//!   `nobody` cannot write root's tree, and changing the ownership or ACLs of the user's
//!   files is not ours to do, so the tree is bind-mounted through an **idmapped mount**
//!   on which root's files appear as `nobody`'s (Linux 5.12+; see `idmap.rs`). The
//!   command writes the workspace live, and what it makes is root's on disk; since a
//!   setuid bit there would make a setuid-root program, the system-call profile refuses
//!   setuid and setgid bits on every run. Where the kernel or filesystem cannot make
//!   idmapped mounts, the tree travels by copy instead (uploaded owned by `nobody`, the
//!   changes copied back after the end, setuid bits dropped), and the outcome says so.
//!
//! Named writable paths the command's uid does not own are handled the same way; named
//! read-only paths are bound as they are, so a root-only file in them stays unreadable.
//!
//! # Workspace modes
//!
//! [`WorkspaceMode::Bind`] (the default) bind-mounts at the same paths; the command's
//! writes land on the host as they happen. [`WorkspaceMode::Copy`] uploads every named
//! path into a volume of its own before the start and copies the changes of writable ones
//! back after the end: the mode for a remote engine, whose disk is not ours (in bind
//! mode such an engine fails the run with that remedy). A snapshot in bind mode runs on
//! core's layer (below), thrown away after the run: a host copy that keeps a sparse file's
//! holes and stops at core's cap. In copy mode it is a volume that is thrown away (the
//! engine writes every hole out, so a file counts at its whole length against the cap);
//! captured files are then read from the container.
//!
//! # A change set to review
//!
//! A run with [`Changes::Review`](sandbox_core::Changes::Review) works on core's
//! copy-on-write layer ([`sandbox_host::HostLayer`]), so its change set is the
//! same as every other backend's: the layer is made on the host (a copy sharing blocks
//! where the filesystem can; core's overlay lives in a process's own mount namespace,
//! which the engine's never sees), its tree is bound at the workspace's path (through
//! an idmapped mount when the host is root, exactly like a workspace the command's uid
//! does not own), and once the container is removed core scans it into the outcome's
//! [`ChangeSet`](sandbox_core::ChangeSet). Carve-outs inside the workspace are bound
//! from the same places in the layer. Such a run is never served by the warm pool (its
//! bind did not exist when a pooled container was made). In copy mode a review is
//! refused by [`capability_in`]: the tree would come back through an archive that drops
//! FIFOs and hard links, so the change set would not be what the command did; a root
//! host that cannot make idmapped mounts refuses it for the same reason.
//!
//! # Start-up
//!
//! A [`DockerBackend`] value (and its clones) keeps one engine connection for its runs,
//! and a **warm pool**: once a policy comes back (its second run), the next container for
//! it is created and started ahead of time, idle behind a tiny static waiter that reads
//! the argv from its standard input and execs it under the engine's init. Each command
//! still gets a fresh container, removed after it; a run takes a pooled one only when the
//! whole create-container body (image id included) is identical to its own; lookups of
//! `argv[0]` in the image are remembered per image id and policy. The pool goes with the
//! backend value (and at process exit). Why a waiter on standard input rather than the
//! engine's exec API, and the rest of the design, is in `pool.rs`. Runs that need a copy,
//! idmapped staging (a root host with a root-owned workspace) or a layer are not pooled.
//!
//! # What it cannot do
//!
//! - Tell "killed by signal N" from "exited with 128+N": the engine's init reports both
//!   the same ([`Capability::signal_status`] is false).
//! - Hide the image's `ENV` variables or the engine's `HOSTNAME`.
//! - Make submounts of a bind-mounted read-only path read-only (engines before 25 bind
//!   recursively but apply read-only to the top mount only).
//! - In copy mode, a carve-out inside the workspace is read-only but can be renamed away
//!   inside the container; its host copy is never written either way.
//! - Report an OOM kill that the engine reports neither in its `OOMKilled` flag nor in
//!   its event log within two seconds of the exit.
//!
//! # What it needs
//!
//! A Docker engine speaking API 1.30 or later at `DOCKER_HOST` (the local socket by
//! default) that this user may use, with its init binary (`docker-init`), seccomp, and
//! memory and pids cgroup controllers; the image on the engine (never pulled unless
//! [`DockerConfig::allow_pull`]). With no registry, [`build_image_from_host`] (`sandbox
//! image --from-host`) makes one of the host's system directories, without what others
//! may not read, and [`build_image_from_binaries`] one from named host binaries. [`Sandbox::preflight`] checks all of it by running a real
//! container with the full policy.
//!
//! # Tests
//!
//! `spec.rs` (the container specification, every policy knob), `handover.rs`,
//! `direct.rs` (the `docker run --rm` command line of the same container, the bench's
//! baseline), `transfer.rs` and the rest are unit-tested without an engine (the seccomp
//! profile is core's, tested there against its table both ways); `tests/` runs commands against the local engine in an
//! image built in the test from a static busybox (`apt-get install busybox-static`),
//! checks their effects from the host, and checks that no container, volume or staging
//! mount of ours is left. The conformance suite runs with `SANDBOX_BACKEND=docker`, in
//! an image it builds around its probe.
//!
//! # Dependencies
//!
//! `bollard` (the Engine API over the unix socket or TCP), `tar` (archives for images and
//! copy mode), `tokio`, `futures-util` and `bytes` (streams of the API), `tokio-util`
//! (the engine's archive stream read as a blocking `Read` by the write-back), `serde_json`
//! (the seccomp profile, and the container body read field by field for the `docker run`
//! baseline), `nix` and `libc` (uids, random run names, the idmapped mount's
//! system calls), `thiserror` (the backend's error), `tempfile` (the preflight's scratch
//! workspace), `tracing` (diagnostics). `build.rs` compiles the pool's waiter
//! (`waiter/main.rs`, std only) with the same `rustc`, statically linked.
//!
//! [`Sandbox`]: sandbox_core::Sandbox
//! [`Sandbox::logs`]: sandbox_core::Sandbox::logs
//! [`Sandbox::kill`]: sandbox_core::Sandbox::kill
//! [`Sandbox::preflight`]: sandbox_core::Sandbox::preflight
//! [`Capability::signal_status`]: sandbox_core::Capability::signal_status

mod backend;
mod client;
mod config;
mod copy;
mod create;
mod direct;
mod egress;
mod error;
mod handover;
mod hostimage;
mod idmap;
mod image;
mod labels;
mod leftovers;
mod pool;
mod prepare;
mod program;
mod report;
mod resources;
mod run;
mod seccomp;
mod spec;
mod transfer;

use std::sync::Arc;

use sandbox_core::registry::{
    AutoRank, BackendConfig, BackendInfo, CostTargets, HostKey, HostObjects, ImageSupport,
};
use sandbox_core::{Backend, SandboxError};

pub use backend::{capability, capability_in, DockerBackend, DockerSandbox, DockerStarter};
pub use client::{connect, DockerEngine};
pub use config::{DockerConfig, WorkspaceMode};
pub use handover::NOBODY;
pub use hostimage::{build_image_from_host, HOST_ROOTS};
pub use image::build_image_from_binaries;
pub use labels::{owner, LABEL, LABEL_OWNER, LABEL_ROLE, LABEL_VALUE};
pub use leftovers::{cleanup_leftovers, Removed, Scope};

/// The backend's name.
pub const NAME: &str = "docker";

/// What the facade's registry knows of this backend. `auto` tries it second on `strict`
/// and `trusted` (a container is as strong as namespaces but needs an image and an
/// engine) and last on `fast` (its start costs hundreds of milliseconds). It runs every
/// command in an image the caller names, so an image named with `auto` means this
/// backend.
pub const INFO: BackendInfo = BackendInfo {
    name: NAME,
    summary: "a container (needs --image)",
    auto_rank: AutoRank {
        strict: Some(20),
        fast: Some(30),
        trusted: Some(20),
    },
    unconfined: false,
    // The engine's socket is root on the host by another name.
    unprivileged: false,
    image: Some(ImageSupport {
        build_from_binaries: |tag, files| {
            Box::pin(async move {
                let docker = connect().await?;
                build_image_from_binaries(&docker, &tag, &files).await
            })
        },
        build_from_host: |tag| {
            Box::pin(async move {
                let docker = connect().await?;
                build_image_from_host(&docker, &tag).await
            })
        },
        direct: Some(direct::docker_run),
    }),
    make: make_for_registry,
    launcher: None,
    // The engine is reached over its socket on every run; one that went away is a launch
    // that fails, which the command line diagnoses with the preflight.
    host_key: HostKey::Nothing,
    leaves: Some(HostObjects {
        what: "containers and volumes",
        made_by: |pid| Box::pin(leftovers::made_by(pid)),
    }),
    // The engine is the host's own (Docker Engine, or Debian's `docker.io`), not installed
    // for the tests.
    host_packages: &[],
    // Issue 12: repeated commands come from the warm pool, far below `docker run --rm`; a
    // first command, with nothing warm, no slower than it.
    cost: CostTargets {
        startup_vs_bare_spawn: None,
        startup_vs_direct: Some(0.3),
        first_vs_direct: Some(1.0),
    },
};

fn make_for_registry(config: &BackendConfig) -> Result<Arc<dyn Backend>, SandboxError> {
    let image = config.image.clone().ok_or_else(|| {
        SandboxError::invalid(
            "image",
            "the docker backend needs a container image to run the command in; name one \
             (`--image IMAGE`, or `image` in the policy file)",
        )
    })?;
    Ok(Arc::new(DockerBackend::new(DockerConfig::new(image))?))
}
