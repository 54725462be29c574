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

/// Where the host ids of sandboxes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdLayout {
    /// The first host uid (sandbox 0's root).
    pub uid_base: u32,
    /// The first host gid.
    pub gid_base: u32,
    /// Ids per sandbox index.
    pub stride: u32,
    /// The sandbox user's id above its root's.
    pub user_offset: u32,
    /// How many indices fit.
    pub slots: u64,
}

impl IdLayout {
    /// A root runner's: from `base` up, [`STRIDE`] ids per sandbox, the user 1000 above
    /// its root, as far as the uid space goes.
    pub fn root(base: u32) -> Self {
        let room = u64::from(u32::MAX) - u64::from(base);
        IdLayout {
            uid_base: base,
            gid_base: base,
            stride: STRIDE,
            user_offset: SANDBOX_UID,
            slots: room
                .checked_sub(u64::from(SANDBOX_UID))
                .map_or(0, |r| r / u64::from(STRIDE) + 1),
        }
    }

    /// An ordinary user's: two of their subordinate ids per sandbox, root then user.
    pub fn subordinate(uids: (u32, u32), gids: (u32, u32)) -> Self {
        IdLayout {
            uid_base: uids.0,
            gid_base: gids.0,
            stride: 2,
            user_offset: 1,
            slots: u64::from(uids.1.min(gids.1) / 2),
        }
    }

    /// The host uids and gids of sandbox index `index`.
    pub fn ids_of(&self, index: usize) -> (HostIds, HostIds) {
        (
            self.ids(self.uid_base, index),
            self.ids(self.gid_base, index),
        )
    }

    fn ids(&self, base: u32, index: usize) -> HostIds {
        let root = base + index as u32 * self.stride;
        HostIds {
            root,
            user: root + self.user_offset,
        }
    }
}

/// No index is left.
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
    layout: IdLayout,
    in_use: Mutex<Vec<bool>>,
}

/// One sandbox's index and host ids.
#[derive(Debug, PartialEq, Eq)]
pub struct Identity {
    index: usize,
    /// The host uids of the sandbox.
    pub ids: HostIds,
    /// The host gids of the sandbox.
    pub gids: HostIds,
}

impl Identity {
    /// Its index (the lowest free when it was taken).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Identities {
    /// Identities laid out as `layout` says.
    pub fn new(layout: IdLayout) -> Self {
        Identities {
            layout,
            in_use: Mutex::new(Vec::new()),
        }
    }

    /// The lowest free index and its ids.
    pub fn take(&self) -> Result<Identity, Exhausted> {
        // A panic while the lock was held left a plain Vec<bool>, consistent at every step.
        let mut in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        let index = in_use.iter().position(|used| !used).unwrap_or(in_use.len());
        if index as u64 >= self.layout.slots {
            return Err(Exhausted {
                base: self.layout.uid_base,
                in_use: in_use.iter().filter(|u| **u).count(),
            });
        }
        if index == in_use.len() {
            in_use.push(true);
        } else {
            in_use[index] = true;
        }
        Ok(Identity {
            index,
            ids: self.layout.ids(self.layout.uid_base, index),
            gids: self.layout.ids(self.layout.gid_base, index),
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
        let ids = Identities::new(IdLayout::root(1_000_000));
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
    fn an_ordinary_user_s_sandboxes_take_two_subordinate_ids_each() {
        let ids = Identities::new(IdLayout::subordinate((100_000, 5), (200_000, 65_536)));
        let a = ids.take().unwrap();
        assert_eq!(
            (a.ids, a.gids),
            (
                HostIds {
                    root: 100_000,
                    user: 100_001
                },
                HostIds {
                    root: 200_000,
                    user: 200_001
                }
            )
        );
        assert_eq!(ids.take().unwrap().ids.root, 100_002);
        let err = ids.take().expect_err("five uids hold two sandboxes");
        assert!(err.to_string().contains("no host ids are left"), "{err}");
    }

    #[test]
    fn ids_past_the_top_of_the_uid_space_are_refused() {
        let ids = Identities::new(IdLayout::root(u32::MAX - STRIDE - 10));
        ids.take().expect("the first fits");
        let err = ids.take().expect_err("the second would overflow");
        assert!(err.to_string().contains("no host ids are left"), "{err}");
    }
}
