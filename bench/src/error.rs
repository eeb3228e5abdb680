//! Why a measurement could not be taken. A failed run is never turned into a number: the
//! row says FAILED with this text, and the bench exits non-zero.

use sandbox_core::SandboxError;

/// A measurement that could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The library refused or failed a run that should have worked.
    #[error("{what}: {source}")]
    Sandbox {
        /// The run that failed.
        what: String,
        /// The library's error (it carries the remedy).
        #[source]
        source: SandboxError,
    },
    /// A baseline or the harness itself hit an operating-system error.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A run completed but not as it must for its time to count (non-zero exit, missing
    /// output): the time would measure something else.
    #[error("{what} did not do what was measured: {detail}")]
    Wrong {
        /// The run.
        what: String,
        /// What it did instead.
        detail: String,
    },
}

impl BenchError {
    /// Shorthand for [`BenchError::Io`].
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// Shorthand for [`BenchError::Sandbox`].
    pub fn sandbox(what: impl Into<String>, source: SandboxError) -> Self {
        Self::Sandbox {
            what: what.into(),
            source,
        }
    }

    /// Shorthand for [`BenchError::Wrong`].
    pub fn wrong(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Wrong {
            what: what.into(),
            detail: detail.into(),
        }
    }
}
