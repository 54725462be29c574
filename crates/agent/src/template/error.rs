//! Why a template stopped.

use std::io;

/// Why the template stopped.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// Its spec could not be read.
    #[error("bad template spec: {0}")]
    Spec(serde_json::Error),
    /// Reading a request failed.
    #[error("reading a request: {0}")]
    Receive(io::Error),
    /// A step of its own confinement failed.
    #[error("{step}: {source}")]
    Confine {
        /// The step.
        step: &'static str,
        /// What failed underneath.
        source: io::Error,
    },
    /// A step of the jail's failed: a device node, or reading the host.
    #[error(transparent)]
    Jail(#[from] sandbox_jail::JailError),
}
