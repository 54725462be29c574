//! The error of a list entry that does not parse.

use super::MAX_ENTRIES;

/// A list entry that does not parse; the message names the entry and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A host name that is not one.
    #[error("egress entry `{entry}`: {reason}")]
    BadName {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A port that is not 1-65535.
    #[error("egress entry `{entry}`: the port must be a number from 1 to 65535")]
    BadPort {
        /// The entry as written.
        entry: String,
    },
    /// An address range that does not parse.
    #[error("egress range `{entry}`: not an IPv4 or IPv6 address or range (e.g. 10.1.0.0/16)")]
    BadRange {
        /// The entry as written.
        entry: String,
    },
    /// An address among the names: addresses are opened by the ranges list.
    #[error("egress entry `{entry}`: an address, not a name; open addresses with RUNNER_EGRESS_ALLOW_CIDRS")]
    AddressAsName {
        /// The entry as written.
        entry: String,
    },
    /// More entries than [`MAX_ENTRIES`].
    #[error("egress list: {count} entries, more than {MAX_ENTRIES}")]
    TooMany {
        /// How many the list had.
        count: usize,
    },
}
