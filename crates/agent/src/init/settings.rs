//! The settings the runner passes on the kernel command line (`sandbox.*=N`).

/// Settings the runner passes on the kernel command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settings {
    /// Size of the sandbox's /tmp, and of its home, in MiB.
    pub(super) tmpfs_mb: u64,
    /// The sandbox's memory limit (no swap), in MiB.
    pub(super) memory_mb: u64,
    /// The sandbox's CPU time per period, in microseconds.
    pub(super) cpu_quota_us: u64,
    /// The CPU accounting period, in microseconds.
    pub(super) cpu_period_us: u64,
    /// The most processes (and threads) of the sandbox at once.
    pub(super) pids_max: u64,
    /// The host's vsock port to connect to, instead of the virtio serial port.
    pub(super) vsock_port: Option<u32>,
}

impl Settings {
    /// Reads `sandbox.*=N` from a kernel command line; absent values keep their defaults
    /// (the runner's).
    pub(super) fn parse(cmdline: &str) -> Settings {
        let mut settings = Settings {
            tmpfs_mb: 64,
            memory_mb: 256,
            cpu_quota_us: 50_000,
            cpu_period_us: 100_000,
            pids_max: 64,
            vsock_port: None,
        };
        for word in cmdline.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            match key {
                "sandbox.tmpfs_mb" => settings.tmpfs_mb = value,
                "sandbox.memory_mb" => settings.memory_mb = value,
                "sandbox.cpu_quota_us" => settings.cpu_quota_us = value,
                "sandbox.cpu_period_us" => settings.cpu_period_us = value,
                "sandbox.pids_max" => settings.pids_max = value,
                "sandbox.vsock_port" => settings.vsock_port = u32::try_from(value).ok(),
                _ => {}
            }
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_command_line() {
        let s = Settings::parse(
            "console=ttyS0 sandbox.tmpfs_mb=32 sandbox.pids_max=100 sandbox.memory_mb=300 \
             sandbox.cpu_quota_us=25000 sandbox.cpu_period_us=50000 -- --init",
        );
        assert_eq!(
            s,
            Settings {
                tmpfs_mb: 32,
                memory_mb: 300,
                cpu_quota_us: 25_000,
                cpu_period_us: 50_000,
                pids_max: 100,
                vsock_port: None,
            }
        );
        let defaults = Settings::parse("quiet sandbox.pids_max=lots");
        assert_eq!(defaults.pids_max, 64);
        let vsock = Settings::parse("sandbox.vsock_port=1024 sandbox.vsock_port=-1");
        assert_eq!(vsock.vsock_port, Some(1024));
        let too_big = Settings::parse("sandbox.vsock_port=4294967296");
        assert_eq!(too_big.vsock_port, None);
    }
}
