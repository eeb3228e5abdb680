//! Writing one run's bundle: a private temp directory holding `config.json`, the root's
//! skeleton (`rootfs/`) and runsc's state directory (`state/`, its `--root`), all removed
//! when the run is over. A state directory per run means no run sees another's
//! containers, and nothing of runsc's is left in a shared place.

use std::path::{Path, PathBuf};

use sandbox_core::SandboxError;

use crate::spec::{Bundle, Skeleton};

/// A written bundle; removed (with runsc's state) when dropped.
#[derive(Debug)]
pub(crate) struct Written {
    dir: tempfile::TempDir,
}

impl Written {
    /// The bundle directory (`--bundle`).
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// runsc's state directory (`--root`).
    pub(crate) fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

fn io(what: &str, p: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::io(format!("{what} {} of the gVisor bundle", p.display()), e)
}

/// Write `bundle` into a new private temp directory.
pub(crate) fn write(bundle: &Bundle) -> Result<Written, SandboxError> {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-gvisor-")
        .tempdir()
        .map_err(|e| SandboxError::io("creating the gVisor bundle directory", e))?;
    let rootfs = dir.path().join("rootfs");
    let state = dir.path().join("state");
    for d in [&rootfs, &state] {
        std::fs::create_dir(d).map_err(|e| io("creating", d, e))?;
    }
    let inside = |p: &Path| rootfs.join(p.strip_prefix("/").unwrap_or(p));
    for s in &bundle.skeleton {
        match s {
            Skeleton::Dir(p) => {
                let at = inside(p);
                std::fs::create_dir_all(&at).map_err(|e| io("creating", &at, e))?;
            }
            Skeleton::File(p) => {
                let at = inside(p);
                std::fs::File::create(&at).map_err(|e| io("creating", &at, e))?;
            }
            Skeleton::Symlink { at, target } => {
                let at = inside(at);
                std::os::unix::fs::symlink(target, &at).map_err(|e| io("linking", &at, e))?;
            }
        }
    }
    let config = dir.path().join("config.json");
    let text = serde_json::to_vec_pretty(&bundle.config)
        .map_err(|e| SandboxError::io("encoding config.json", std::io::Error::other(e)))?;
    std::fs::write(&config, text).map_err(|e| io("writing", &config, e))?;
    Ok(Written { dir })
}
