//! What the caller configures once per backend: the image and how the workspace travels.

use sandbox_core::SandboxError;

/// How the workspace (and the other named paths) reach the container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkspaceMode {
    /// Bind-mounted at the same path: the command's writes land on the host as they happen.
    /// Needs the engine to see the host's disk (a local engine).
    #[default]
    Bind,
    /// Uploaded into a volume before the start and the changed files downloaded after the
    /// end: the way to use a remote engine whose disk is not ours. The host sees the
    /// command's writes only once it has ended.
    Copy,
}

/// The docker backend's configuration.
///
/// Not exhaustive: build it with [`DockerConfig::new`] and set the public fields.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct DockerConfig {
    /// The image every command runs in (`name:tag` or an image id). It must already be on
    /// the engine unless [`allow_pull`](Self::allow_pull) is set.
    pub image: String,
    /// Pull the image from its registry when the engine does not have it. Off by default:
    /// a sandbox that fetches code from the network on its own is a surprise.
    pub allow_pull: bool,
    /// How the workspace reaches the container.
    pub workspace_mode: WorkspaceMode,
    /// A CPU quota in CPUs (docker's `--cpus`, e.g. `1.5`): a share of the machine, on top
    /// of the CPU-time limit of the run options. `None`: no quota.
    pub cpus: Option<f64>,
}

impl DockerConfig {
    /// A configuration for `image`, with the defaults: no pull, bind mode, no CPU quota.
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            allow_pull: false,
            workspace_mode: WorkspaceMode::Bind,
            cpus: None,
        }
    }

    /// Refuse a configuration that cannot work, before anything talks to the engine.
    pub(crate) fn validate(&self) -> Result<(), SandboxError> {
        let image = self.image.trim();
        if image.is_empty() {
            return Err(SandboxError::invalid(
                "image",
                "is empty: name the image to run commands in (e.g. `debian:12`)",
            ));
        }
        if image != self.image || self.image.chars().any(|c| c.is_whitespace() || c == '\0') {
            return Err(SandboxError::invalid(
                "image",
                format!("`{}` contains whitespace", self.image.escape_debug()),
            ));
        }
        if let Some(cpus) = self.cpus {
            if !cpus.is_finite() || cpus <= 0.0 {
                return Err(SandboxError::invalid(
                    "cpus",
                    format!("{cpus} is not a positive number of CPUs"),
                ));
            }
            // Docker's NanoCPUs is an integer; below 0.01 CPU the engine refuses it.
            if cpus < 0.01 {
                return Err(SandboxError::invalid(
                    "cpus",
                    format!("{cpus} is below the engine's minimum of 0.01 CPU"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_safe() {
        let c = DockerConfig::new("img:1");
        assert!(!c.allow_pull);
        assert_eq!(c.workspace_mode, WorkspaceMode::Bind);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_images_and_quotas_are_refused() {
        for image in ["", "  ", "a b", "img\n"] {
            assert!(DockerConfig::new(image).validate().is_err(), "{image:?}");
        }
        for cpus in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.001] {
            let mut c = DockerConfig::new("img");
            c.cpus = Some(cpus);
            let e = c.validate().unwrap_err();
            assert!(
                matches!(e, SandboxError::InvalidConfig { field: "cpus", .. }),
                "{e}"
            );
        }
    }
}
