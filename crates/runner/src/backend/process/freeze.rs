//! A session's sandbox between its calls: frozen by its cgroup's freezer, on the host,
//! by the runner (see `sandbox_jail::cgroup::Freezer`).

use super::{ProcessError, ProcessSandbox};
use crate::backend::cgroup::{CgroupError, Freezer};

impl ProcessSandbox {
    /// Freezes every process of the sandbox, and returns once all are frozen: none runs,
    /// whatever signal it gets, until [`thaw`](Self::thaw). A sandbox without cgroups
    /// has no freezer: its agent stops a session's processes itself instead
    /// (`Job::sigstop_between_runs`), which a program can escape.
    pub async fn freeze(&mut self) -> Result<(), ProcessError> {
        self.with_freezer(Freezer::freeze).await
    }

    /// Lets the processes [`freeze`](Self::freeze) froze run again.
    pub async fn thaw(&mut self) -> Result<(), ProcessError> {
        self.with_freezer(Freezer::thaw).await
    }

    /// Does `step` with the sandbox's freezer, if it has one, off the async threads
    /// (freezing waits for the kernel).
    async fn with_freezer(
        &self,
        step: fn(&Freezer) -> Result<(), CgroupError>,
    ) -> Result<(), ProcessError> {
        let Some(freezer) = self.freezer.clone() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || step(&freezer))
            .await
            .map_err(ProcessError::FreezerTask)?
            .map_err(ProcessError::Freezer)
    }
}
