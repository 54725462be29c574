//! Host identities of sandboxes: no two sandboxes that exist at the same time share a
//! host uid, so that no per-user count the kernel keeps (pipe buffer pages, file
//! descriptors in flight, queued signals, and every count charged to a user
//! namespace's owner) adds up across sandboxes.
//!
//! Sandbox `i` (the lowest index free when it is made) maps its root, the agent, to
//! `base + i * STRIDE` and its user, the program, to that + 1000. An index is given back
//! only once every process of its sandbox is gone.

use sandbox_jail::layout::SANDBOX_UID;
use sandbox_jail::HostIds;
use std::sync::{Mutex, PoisonError};

/// Host ids set aside per sandbox index (as subordinate id ranges are usually sized).
pub const STRIDE: u32 = 65_536;

/// The host ids `n` sandboxes at once use from `base`: `[base, base + n * STRIDE)`.
pub fn range_end(base: u32, sandboxes: usize) -> u64 {
    u64::from(base) + sandboxes as u64 * u64::from(STRIDE)
}

/// No index is left whose ids fit below `u32::MAX`.
#[derive(Debug, thiserror::Error)]
#[error(
    "no host ids are left for another sandbox from {base} (sandboxes holding theirs: {in_use})"
)]
pub struct Exhausted {
    base: u32,
    in_use: usize,
}

/// The indices in use.
#[derive(Debug)]
pub struct Identities {
    base: u32,
    in_use: Mutex<Vec<bool>>,
}

/// One sandbox's index and host ids.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    index: usize,
    /// The host ids of the sandbox.
    pub ids: HostIds,
}

impl Identities {
    /// Identities from host id `base` up.
    pub fn new(base: u32) -> Self {
        Identities {
            base,
            in_use: Mutex::new(Vec::new()),
        }
    }

    /// The lowest free index and its ids.
    pub fn take(&self) -> Result<Identity, Exhausted> {
        // A panic while the lock was held left a plain Vec<bool>, consistent at every step.
        let mut in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        let index = in_use.iter().position(|used| !used).unwrap_or(in_use.len());
        let root = u32::try_from(range_end(self.base, index))
            .ok()
            .filter(|root| root.checked_add(SANDBOX_UID).is_some())
            .ok_or(Exhausted {
                base: self.base,
                in_use: in_use.iter().filter(|u| **u).count(),
            })?;
        if index == in_use.len() {
            in_use.push(true);
        } else {
            in_use[index] = true;
        }
        Ok(Identity {
            index,
            ids: HostIds {
                root,
                user: root + SANDBOX_UID,
            },
        })
    }

    /// Frees an index: every process that had its ids is gone.
    pub fn give_back(&self, identity: Identity) {
        let mut in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(used) = in_use.get_mut(identity.index) {
            *used = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandboxes_at_once_get_distinct_ids_and_the_lowest_free_index() {
        let ids = Identities::new(1_000_000);
        let a = ids.take().unwrap();
        let b = ids.take().unwrap();
        assert_eq!(
            a.ids,
            HostIds {
                root: 1_000_000,
                user: 1_001_000
            }
        );
        assert_eq!(
            b.ids,
            HostIds {
                root: 1_065_536,
                user: 1_066_536
            }
        );
        ids.give_back(a);
        let c = ids.take().unwrap();
        assert_eq!(c.ids.root, 1_000_000, "the freed index is reused");
        assert_eq!(ids.take().unwrap().ids.root, 1_131_072);
    }

    #[test]
    fn ids_past_the_top_of_the_uid_space_are_refused() {
        let ids = Identities::new(u32::MAX - STRIDE - 10);
        ids.take().expect("the first fits");
        let err = ids.take().expect_err("the second would overflow");
        assert!(err.to_string().contains("no host ids are left"), "{err}");
    }
}
