//! Refusals remembered for a while, so that asking again for what was refused costs
//! nothing: no process, no request to the index.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::DepsError;

/// How long a refusal is remembered.
pub(crate) const REMEMBERED_FOR: Duration = Duration::from_secs(10 * 60);
/// How many refusals are remembered at most (the oldest go first).
const CAPACITY: usize = 4096;

/// Refusals by request digest.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    by_digest: Mutex<HashMap<String, (Instant, DepsError)>>,
}

impl Refusals {
    /// The refusal `digest` got less than [`REMEMBERED_FOR`] ago, if any.
    pub fn get(&self, digest: &str) -> Option<DepsError> {
        let map = self
            .by_digest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(digest)
            .filter(|(at, _)| at.elapsed() < REMEMBERED_FOR)
            .and_then(|(_, e)| e.remembered())
    }

    /// Remembers `error` for `digest` if it is a refusal worth remembering.
    pub fn remember(&self, digest: &str, error: &DepsError) {
        let Some(copy) = error.remembered() else {
            return;
        };
        // A panic while holding this lock leaves the map consistent: keep using it.
        let mut map = self
            .by_digest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, (at, _)| at.elapsed() < REMEMBERED_FOR);
        if map.len() >= CAPACITY {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(digest.to_owned(), (Instant::now(), copy));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_remembered_and_failures_are_not() {
        let refusals = Refusals::default();
        let denied = DepsError::Denied {
            package: "evil".into(),
            reason: "no".into(),
        };
        refusals.remember("a", &denied);
        let again = refusals.get("a").expect("remembered");
        assert_eq!(again.to_string(), denied.to_string());
        assert_eq!(again.code(), "dependency_denied");

        let unreachable = DepsError::IndexUnreachable {
            package: None,
            detail: "refused".into(),
        };
        refusals.remember("b", &unreachable);
        assert!(refusals.get("b").is_none());
        assert!(refusals.get("c").is_none());
    }

    #[test]
    fn the_memory_is_bounded() {
        let refusals = Refusals::default();
        let e = DepsError::Conflict { detail: "x".into() };
        for i in 0..CAPACITY + 10 {
            refusals.remember(&i.to_string(), &e);
        }
        let len = refusals.by_digest.lock().unwrap().len();
        assert_eq!(len, CAPACITY);
    }
}
