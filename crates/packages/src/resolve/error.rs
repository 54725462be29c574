//! Why a script's dependencies cannot be provided, with the code and status an API
//! answers with, and which refusals are worth remembering.

use std::time::Duration;

use crate::build::human;
use crate::confine::ConfineError;
use crate::metadata::MetadataError;
use crate::process::ToolError;
use crate::store::StoreError;

/// Why a script's dependencies cannot be provided. [`DepsError::code`] and
/// [`DepsError::status`] are what an API answers with.
#[derive(Debug, thiserror::Error)]
pub enum DepsError {
    /// The metadata block is malformed (bad TOML, non-string dependencies, URLs or
    /// options as dependencies, two blocks).
    #[error("bad script metadata: {0}")]
    BadMetadata(#[from] MetadataError),
    /// The block names more dependencies than a block may, or they resolve to more
    /// packages than a set may hold.
    #[error("{what}: at most {max} are taken")]
    TooMany {
        /// What was counted, in words, with the count.
        what: String,
        /// The limit.
        max: usize,
    },
    /// The policy refuses a package of the closure, or its metadata names a
    /// dependency by URL.
    #[error("dependency {package} is refused: {reason}")]
    Denied {
        /// The package.
        package: String,
        /// Why, in words.
        reason: String,
    },
    /// No such package, no version matching, or no wheel for this Python.
    #[error("dependency {package} was not found: {message}")]
    NotFound {
        /// The package pip named.
        package: String,
        /// What is missing (says that only wheels are installed).
        message: String,
    },
    /// The dependencies contradict each other or the base set's versions.
    #[error(
        "the dependencies cannot be installed together with the preinstalled packages: {detail}"
    )]
    Conflict {
        /// pip's account of the conflict.
        detail: String,
    },
    /// The installed set would exceed the policy's size.
    #[error("the dependencies {requested} take {} installed, above the limit of {}",
        installed_size(*.bytes, *.max_bytes), human(*.max_bytes))]
    TooLarge {
        /// The requested dependencies.
        requested: String,
        /// Their installed size, when it was measured (not when unpacking them
        /// filled the space allowed).
        bytes: Option<u64>,
        /// The policy's limit.
        max_bytes: u64,
    },
    /// pip ran out of the memory the resolver may use (its cgroup's limit) on these
    /// dependencies.
    #[error("resolving the dependencies {requested} took more memory than the resolver may use")]
    OutOfMemory {
        /// The requested dependencies.
        requested: String,
    },
    /// Resolving and installing took longer than the policy allows.
    #[error("installing the dependencies {requested} took longer than the limit of {}s", timeout.as_secs_f64())]
    Timeout {
        /// The requested dependencies.
        requested: String,
        /// The policy's timeout.
        timeout: Duration,
    },
    /// The package index could not be reached from the host.
    #[error("the package index could not be reached{}: {detail}", package.as_deref().map(|p| format!(" while looking for {p}")).unwrap_or_default())]
    IndexUnreachable {
        /// The package pip was looking for, if it said.
        package: Option<String>,
        /// The connection error.
        detail: String,
    },
    /// The script's `requires-python` excludes the sandboxes' Python.
    #[error("the script requires Python {requires}, the sandboxes run Python {version}")]
    PythonUnsupported {
        /// The script's specifier.
        requires: String,
        /// The sandboxes' Python.
        version: String,
    },
    /// The resolver is stopping (its runner shuts down): nothing was installed.
    #[error("the runner is stopping: the dependencies {requested} were not installed")]
    Stopping {
        /// The requested dependencies.
        requested: String,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The resolver's place could not be prepared.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// pip (or the interpreter) could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// pip failed for another reason, or wrote a report this crate cannot read.
    #[error("{step} failed: {detail}")]
    Failed {
        /// The step.
        step: &'static str,
        /// The end of pip's output.
        detail: String,
    },
}

/// An installed size, or what is known of it.
fn installed_size(bytes: Option<u64>, max_bytes: u64) -> String {
    bytes.map_or_else(|| format!("more than {}", human(max_bytes)), human)
}

impl DepsError {
    /// A stable code for the error (`dependency_denied`, ...; `internal` for failures
    /// of the host).
    pub fn code(&self) -> &'static str {
        match self {
            DepsError::BadMetadata(_) => "bad_script_metadata",
            DepsError::TooMany { .. } => "too_many_dependencies",
            DepsError::Denied { .. } => "dependency_denied",
            DepsError::NotFound { .. } => "dependency_not_found",
            DepsError::Conflict { .. } => "dependency_conflict",
            DepsError::TooLarge { .. } | DepsError::OutOfMemory { .. } => "dependency_too_large",
            DepsError::Timeout { .. } => "dependency_timeout",
            DepsError::IndexUnreachable { .. } => "index_unreachable",
            DepsError::PythonUnsupported { .. } => "python_version_unsupported",
            DepsError::Stopping { .. } => "draining",
            DepsError::Store(_)
            | DepsError::Confine(_)
            | DepsError::Spawn { .. }
            | DepsError::Failed { .. } => "internal",
        }
    }

    /// The HTTP status that fits: 400 for malformed metadata, 422 for dependencies that
    /// cannot be provided, 503 while stopping, 500 for failures of the host.
    pub fn status(&self) -> u16 {
        match self.code() {
            "bad_script_metadata" => 400,
            "draining" => 503,
            "internal" => 500,
            _ => 422,
        }
    }

    /// A copy of a refusal that the same request would get again (the package, its
    /// metadata and the policy decide it), to be remembered for a while; `None` for
    /// failures of the host or the index, which may pass.
    pub(crate) fn remembered(&self) -> Option<DepsError> {
        Some(match self {
            DepsError::TooMany { what, max } => DepsError::TooMany {
                what: what.clone(),
                max: *max,
            },
            DepsError::Denied { package, reason } => DepsError::Denied {
                package: package.clone(),
                reason: reason.clone(),
            },
            DepsError::NotFound { package, message } => DepsError::NotFound {
                package: package.clone(),
                message: message.clone(),
            },
            DepsError::Conflict { detail } => DepsError::Conflict {
                detail: detail.clone(),
            },
            DepsError::TooLarge {
                requested,
                bytes,
                max_bytes,
            } => DepsError::TooLarge {
                requested: requested.clone(),
                bytes: *bytes,
                max_bytes: *max_bytes,
            },
            DepsError::OutOfMemory { requested } => DepsError::OutOfMemory {
                requested: requested.clone(),
            },
            DepsError::Timeout { requested, timeout } => DepsError::Timeout {
                requested: requested.clone(),
                timeout: *timeout,
            },
            _ => return None,
        })
    }

    /// The error a failed pip (or interpreter) means for `requested`.
    pub(crate) fn from_tool(
        e: ToolError,
        requested: &str,
        timeout: Duration,
        max_bytes: u64,
    ) -> DepsError {
        match e {
            ToolError::Spawn { program, source } => DepsError::Spawn { program, source },
            ToolError::Io { path, source } => StoreError::Io { path, source }.into(),
            ToolError::Timeout => DepsError::Timeout {
                requested: requested.to_owned(),
                timeout,
            },
            ToolError::NotFound { package, message } => DepsError::NotFound { package, message },
            ToolError::Unreachable { package, detail } => {
                DepsError::IndexUnreachable { package, detail }
            }
            ToolError::Conflict { detail } => DepsError::Conflict { detail },
            ToolError::Output { path, reason } => DepsError::Failed {
                step: "reading pip's report",
                detail: format!("{}: {reason}", path.display()),
            },
            ToolError::Failed { step, detail } => DepsError::Failed { step, detail },
            ToolError::UrlDependency {
                package,
                distribution,
                dependency,
                url,
            } => DepsError::Denied {
                reason: format!(
                    "its metadata{} names its dependency {dependency} by URL ({url}): \
                     dependencies are installed from the package index only, and nothing \
                     was fetched from that URL",
                    if distribution.is_empty() {
                        String::new()
                    } else {
                        format!(" ({distribution})")
                    }
                ),
                package,
            },
            ToolError::OutOfMemory => DepsError::OutOfMemory {
                requested: requested.to_owned(),
            },
            ToolError::NoSpace => DepsError::TooLarge {
                requested: requested.to_owned(),
                bytes: None,
                max_bytes,
            },
        }
    }
}
