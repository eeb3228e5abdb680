//! Shared by the integration tests: the test image, workspaces, and the host-side check
//! that nothing of ours is left on the engine.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sandbox_docker::{DockerBackend, DockerConfig, WorkspaceMode};

/// The image every test runs in: busybox (as `/bin/sh` too) and a dynamically linked
/// `/usr/bin/true`, built FROM scratch on the engine, no registry.
pub const IMAGE: &str = "sandbox-docker-test:latest";

/// The tests share one engine and check "nothing of ours is left" after each run, so
/// they run one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Build the test image once per test binary.
pub fn image() -> &'static str {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let docker = sandbox_docker::connect().await.map_err(|e| e.to_string())?;
                let busybox = PathBuf::from("/bin/busybox");
                assert!(
                    busybox.exists(),
                    "the tests need a static busybox: apt-get install -y busybox-static"
                );
                sandbox_docker::build_image_from_binaries(
                    &docker,
                    IMAGE,
                    &[
                        (busybox.clone(), "/bin/busybox".into()),
                        (busybox, "/bin/sh".into()),
                        ("/usr/bin/true".into(), "/usr/bin/true".into()),
                    ],
                )
                .await
                .map_err(|e| e.to_string())
            })
        })
        .join()
        .unwrap_or_else(|_| Err("image build panicked".into()))
    });
    if let Err(e) = r {
        panic!("building the test image failed: {e}");
    }
    IMAGE
}

pub fn backend(mode: WorkspaceMode) -> DockerBackend {
    let mut c = DockerConfig::new(image());
    c.workspace_mode = mode;
    DockerBackend::new(c).unwrap()
}

/// A workspace readable by everyone (so a dropped uid can read what the test puts in
/// named read-only paths), canonical.
pub fn dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("sandbox-docker-test-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = d.path().canonicalize().unwrap();
    (d, p)
}

pub fn is_root() -> bool {
    nix_uid() == 0
}

pub fn nix_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Give `p` (recursively) to `uid`: tests only, on their own temp dirs.
pub fn chown_tree(p: &Path, uid: u32) {
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// The docker CLI's output lines; a failure panics with its stderr.
pub fn docker_cli(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Our containers and volumes on the engine, as the docker CLI lists them.
pub fn ours() -> (Vec<String>, Vec<String>) {
    let filter = format!(
        "label={}={}",
        sandbox_docker::LABEL_OWNER,
        sandbox_docker::owner()
    );
    (
        docker_cli(&["ps", "-aq", "--filter", &filter]),
        docker_cli(&["volume", "ls", "-q", "--filter", &filter]),
    )
}

/// Nothing of this process is left on the engine.
pub fn assert_clean() {
    let (c, v) = ours();
    assert!(
        c.is_empty() && v.is_empty(),
        "left behind: containers {c:?} volumes {v:?}"
    );
}

/// A shell command in the test image.
pub fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}
