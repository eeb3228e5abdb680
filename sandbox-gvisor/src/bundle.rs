//! One run's bundle: a private temp directory (mode 0700) holding `config.json`, the
//! root's skeleton (`rootfs/`), runsc's state directory (`state/`, its `--root`) and, on a
//! root host, the idmapped staging mounts that hand trees to the command's uid
//! (`stage/N`). All of it is removed when the run is over. A state directory per run
//! means no run sees another's containers, and nothing of runsc's is left in a shared
//! place.

use std::path::{Path, PathBuf};

use sandbox_core::SandboxError;
use sandbox_host::idmap::IdmappedMount;

use crate::spec::{Bundle, Skeleton};

/// The on-disk uid and gid that root's own creations on a staging mount get until the
/// gofer hands them to the command: an id no account has (2^31 - 2).
pub(crate) const SPARE_ID: u32 = 0x7fff_fffe;

/// A run's bundle directory; its staging mounts are detached before anything is deleted
/// (a recursive delete through a live mount would delete the user's tree).
#[derive(Debug)]
pub(crate) struct Written {
    mounts: Vec<IdmappedMount>,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

fn io(what: &str, p: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::io(format!("{what} {} of the gVisor bundle", p.display()), e)
}

impl Written {
    /// A new, empty bundle directory.
    pub(crate) fn new() -> Result<Self, SandboxError> {
        // Named after this process: a crashed host's bundle (and its staging mounts) is
        // removed by the next start (`sandbox_host::owner`).
        let dir = sandbox_host::owner::temp_dir("gvisor")?;
        let path = dir.path().to_path_buf();
        Ok(Self {
            mounts: Vec::new(),
            dir: Some(dir),
            path,
        })
    }

    /// The bundle directory (`--bundle`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// runsc's state directory (`--root`).
    pub(crate) fn state(&self) -> PathBuf {
        self.path.join("state")
    }

    /// A FIFO for runsc's `--pid-file`, and the host's end of it: runsc writes the
    /// sandbox's pid there once the sandbox is created, before the command starts, and a
    /// runsc that could not create it (user namespaces refused, say) exits 128 without
    /// writing, a status the command could have had too. Core's ready pipe
    /// (`Launch::ready_pipe`) tells the two apart. Opened for reading and writing, so
    /// that the open waits for no writer and a read waits for runsc's bytes, never sees
    /// an end of file before them.
    pub(crate) fn ready(&self) -> Result<(PathBuf, std::os::fd::OwnedFd), SandboxError> {
        let at = self.path.join("ready");
        nix::unistd::mkfifo(
            &at,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(|e| io("making the FIFO", &at, e.into()))?;
        let end = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&at)
            .map_err(|e| io("opening", &at, e))?;
        Ok((at, end.into()))
    }

    /// Show `source` (owned `from` on disk) as owned by `to` at a new staging path; the
    /// path, for the bind's source.
    ///
    /// gVisor's gofer (root) creates each file as itself and then hands it to the
    /// command's uid; so root is mapped too, to [`SPARE_ID`] on disk, which no account
    /// uses: a new file is owned by it between the gofer's create and its chown (inside
    /// a root-only staging directory and the tree's own directory), then by `from`.
    pub(crate) fn stage(
        &mut self,
        source: &Path,
        from: (u32, u32),
        to: (u32, u32),
    ) -> std::io::Result<PathBuf> {
        let stage = self.path.join("stage");
        if !stage.exists() {
            std::fs::create_dir(&stage)?;
        }
        let at = stage.join(self.mounts.len().to_string());
        let mut maps = vec![(from, to)];
        if to.0 != 0 && to.1 != 0 && from.0 != SPARE_ID && from.1 != SPARE_ID {
            maps.push(((SPARE_ID, SPARE_ID), (0, 0)));
        }
        let m = IdmappedMount::create_with(source, &at, &maps)?;
        self.mounts.push(m);
        Ok(at)
    }

    /// Write `config.json`, the skeleton and the state directory.
    pub(crate) fn write(&self, bundle: &Bundle) -> Result<(), SandboxError> {
        let rootfs = self.path.join("rootfs");
        let state = self.state();
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
        let config = self.path.join("config.json");
        let text = serde_json::to_vec_pretty(&bundle.config)
            .map_err(|e| SandboxError::io("encoding config.json", std::io::Error::other(e)))?;
        std::fs::write(&config, text).map_err(|e| io("writing", &config, e))
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        let mut all_gone = true;
        for m in &mut self.mounts {
            if m.remove().is_err() {
                all_gone = false;
            }
        }
        if !all_gone {
            // Never delete through a mount that is still there: leave the directory (it
            // holds nothing but the mount point, runsc's state and the skeleton).
            if let Some(d) = self.dir.take() {
                let kept = d.keep();
                tracing::error!(
                    "sandbox-gvisor: a staging mount in {} could not be removed; the \
                     directory is kept",
                    kept.display()
                );
            }
        }
    }
}
