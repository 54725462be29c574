//! The jail: what every sandboxed program runs in, whichever backend made the sandbox.
//!
//! The process backend's runner starts the jail on the host, as root, for each
//! sandbox; a VM's init (the agent) starts the same jail inside the guest, as the
//! guest's root. Either way the jail sets the sandbox up around itself (a cgroup,
//! fresh namespaces, a minimal root, capabilities, seccomp) and then becomes the
//! sandbox's agent, which runs the program as the sandbox user (see [`setup`] for the
//! steps and docs/security.md for what each one stops).
//!
//! - [`setup`]: the steps, in order;
//! - [`spec`]: [`JailSpec`], what the jail is told; [`error`]: [`JailError`], the step
//!   that failed;
//! - [`exec`]: the last step, the agent executed afresh;
//! - [`forked`]: the same sandbox made from a fork of a template (issue 16), with the
//!   runner doing the steps that need host root;
//! - [`rootfs`]: the sandbox's file system (overlays, `/etc`, masked `/proc`, `/dev`);
//! - [`seccomp`]: the system-call filter;
//! - [`fdpass`]: descriptors passed over a Unix socket;
//! - [`cgroup`]: per-sandbox control groups, v1 and v2, used by the runner on a host
//!   and by the init inside a guest;
//! - [`owner`]: the probe for user namespaces made by an unprivileged identity;
//! - [`layout`]: what the sandbox looks like from inside (user, home, `/etc`);
//! - [`net`]: the loopback interface.

pub mod cgroup;
pub mod error;
pub mod exec;
pub mod fdpass;
pub mod forked;
pub mod layout;
pub mod net;
pub mod owner;
pub mod rootfs;
pub mod seccomp;
pub mod setup;
pub mod signals;
pub mod spec;

pub use error::JailError;
pub use setup::{
    channel_to_fd3, main, AGENT_ARG, AGENT_CAPS, CHANNEL_FD, JAIL_ARG, MEMLOCK_MAX, SIGPENDING_MAX,
};
pub use spec::{HostIds, JailSpec, Rootless};
