//! What a runner in a container lacks, said when it cannot make its first sandbox.
//!
//! The process backend needs, inside a container, what a privileged container has:
//! `CAP_SYS_ADMIN` (namespaces, mounts, cgroups), no seccomp filter of the engine's (the
//! default Docker profile refuses `pivot_root`), a `/proc` without the engine's masks
//! (the kernel refuses a sandbox's own `/proc` while parts of the container's are
//! hidden), and a writable cgroup file system. The jail's own error names the step that
//! failed; this names the container setting behind it.

use sandbox_jail::cgroup::in_container;

/// `CAP_SYS_ADMIN`'s bit in the capability sets.
const CAP_SYS_ADMIN: u32 = 21;

/// What this container lacks for the process backend, one phrase each, from the texts
/// of `/proc/self/status` and `/proc/self/mountinfo`; empty when nothing is missing.
pub fn lacks(status: &str, mountinfo: &str, cgroup_mount: &str) -> Vec<String> {
    let mut lacking = Vec::new();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    let effective = field("CapEff:").and_then(|hex| u64::from_str_radix(hex, 16).ok());
    if effective.is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) == 0) {
        lacking.push("CAP_SYS_ADMIN".to_owned());
    }
    if field("Seccomp:") == Some("2") {
        lacking.push(
            "seccomp unconfined (a filter is on: the engine's default profile refuses pivot_root; \
             seccomp=unconfined)"
                .to_owned(),
        );
    }
    let mounts: Vec<(&str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            Some((*fields.get(4)?, *fields.get(5)?))
        })
        .collect();
    let masked: Vec<&str> = mounts
        .iter()
        .map(|(point, _)| *point)
        .filter(|point| point.starts_with("/proc/"))
        .collect();
    if let Some(first) = masked.first() {
        lacking.push(format!(
            "a /proc without masks ({} paths masked, {first} among them: \
             systempaths=unconfined)",
            masked.len()
        ));
    }
    let prefix = format!("{}/", cgroup_mount.trim_end_matches('/'));
    if mounts.iter().any(|(point, options)| {
        (*point == cgroup_mount || point.starts_with(&prefix))
            && options.split(',').any(|o| o == "ro")
    }) {
        lacking.push(format!("a writable {cgroup_mount}"));
    }
    lacking
}

/// A sentence for the error of a runner in a container that could not make its first
/// sandbox: what the container lacks, or nothing outside a container.
pub fn hint(cgroup_mount: &std::path::Path) -> String {
    if !in_container() {
        return String::new();
    }
    let read = |file: &str| std::fs::read_to_string(file).unwrap_or_default();
    let lacking = lacks(
        &read("/proc/self/status"),
        &read("/proc/self/mountinfo"),
        &cgroup_mount.to_string_lossy(),
    );
    let what = if lacking.is_empty() {
        "nothing this runner can see".to_owned()
    } else {
        lacking.join("; ")
    };
    format!(
        ". This runner is in a container, which lacks: {what}. Run it privileged (docker run \
         --privileged, Kubernetes securityContext.privileged: true), or see \
         docs/operations.md, \"The runner in a container\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKER_DEFAULT_STATUS: &str = "Name:\tsandbox-runner\nCapEff:\t00000000a80425fb\n\
        NoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n";
    const PRIVILEGED_STATUS: &str = "CapEff:\t000001ffffffffff\nSeccomp:\t0\n";
    const DOCKER_DEFAULT_MOUNTS: &str = "\
600 599 0:50 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
601 600 0:50 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
607 600 0:54 / /proc/acpi ro,relatime - tmpfs tmpfs ro
608 600 0:5 /null /proc/kcore rw,nosuid - devtmpfs udev rw
612 604 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
";

    #[test]
    fn docker_defaults_lack_all_four_by_name() {
        let lacking = lacks(
            DOCKER_DEFAULT_STATUS,
            DOCKER_DEFAULT_MOUNTS,
            "/sys/fs/cgroup",
        );
        assert_eq!(lacking.len(), 4, "{lacking:?}");
        assert_eq!(lacking[0], "CAP_SYS_ADMIN");
        assert!(lacking[1].contains("seccomp=unconfined"));
        assert!(
            lacking[2].contains("3 paths masked, /proc/bus among them"),
            "{}",
            lacking[2]
        );
        assert_eq!(lacking[3], "a writable /sys/fs/cgroup");
    }

    #[test]
    fn a_privileged_container_lacks_nothing() {
        let mounts = "600 599 0:50 / /proc rw - proc proc rw\n\
            612 604 0:32 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n";
        assert!(lacks(PRIVILEGED_STATUS, mounts, "/sys/fs/cgroup").is_empty());
    }
}
