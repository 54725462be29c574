//! A short-lived helper process the runner starts and waits for (a language's version
//! command, a `sandbox-agent`'s build probe): waited for within a bound, and killed and
//! reaped past it, or if waiting fails, so that none is left behind.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How often a helper's end is looked for.
const POLL: Duration = Duration::from_millis(5);

/// Why a helper was not seen to end.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// It was still running past its bound (it has been killed).
    #[error("took over {0:?}")]
    Timeout(Duration),
    /// Its status could not be read (it has been killed).
    #[error("{0}")]
    Wait(std::io::Error),
}

/// Waits for `child` to end within `timeout`; past it, or if waiting fails, kills and
/// reaps it.
pub fn wait_within(child: &mut Child, timeout: Duration) -> Result<ExitStatus, HelperError> {
    let deadline = Instant::now() + timeout;
    let error = loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => break HelperError::Timeout(timeout),
            Err(e) => break HelperError::Wait(e),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    Err(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_helper_that_ends_gives_its_status_and_one_that_hangs_is_killed() {
        let mut quick = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let status = wait_within(&mut quick, Duration::from_secs(10)).unwrap();
        assert_eq!(status.code(), Some(3));
        let mut slow = Command::new("sleep").arg("60").spawn().unwrap();
        let started = Instant::now();
        let e = wait_within(&mut slow, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, HelperError::Timeout(_)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // Reaped: nothing is left to wait for.
        assert!(slow.try_wait().unwrap().is_some());
    }
}
