//! How the tools' texts, their results and the banner say a quantity: a count with its
//! noun ("3 files"), a byte size ("1 MiB"), a CPU share ("half a CPU"), and what every
//! sandbox has ("no network access, 256 MB of memory and half a CPU").

use sandbox_protocol::api::Limits;

/// `n` and the noun, in the plural (with an "s" or, after "x" or "s", "es") unless `n`
/// is 1.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        let s = if noun.ends_with(['x', 's']) {
            "es"
        } else {
            "s"
        };
        format!("{n} {noun}{s}")
    }
}

/// A byte count in the largest binary unit that divides it: "1 MiB", "64 KiB", "1000 bytes".
pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// A CPU share as people say it: "half a CPU", "1 CPU", "1.5 CPUs".
pub fn cpus(cpus: f64) -> String {
    if cpus == 0.5 {
        "half a CPU".to_owned()
    } else if cpus == 1.0 {
        "1 CPU".to_owned()
    } else {
        format!("{cpus} CPUs")
    }
}

/// "no network access, 256 MB of memory and half a CPU": what every sandbox has.
pub fn sandbox_resources(limits: &Limits) -> String {
    let network = if limits.network {
        "no network access but, through a proxy, to the hosts the run tools name"
    } else {
        "no network access"
    };
    let resources = if limits.resource_limits {
        format!(
            "{} MB of memory and {}",
            limits.memory_mb,
            cpus(limits.cpus)
        )
    } else {
        "NO memory or CPU limit (this server runs with --unsafe-no-resource-limits: keep \
         programs small)"
            .to_owned()
    };
    format!("{network}, {resources}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_their_plural() {
        assert_eq!(plural(1, "file"), "1 file");
        assert_eq!(plural(0, "file"), "0 files");
        assert_eq!(plural(3, "sandbox"), "3 sandboxes");
        assert_eq!(plural(1, "sandbox"), "1 sandbox");
        assert_eq!(plural(2, "process"), "2 processes");
    }

    #[test]
    fn sizes_take_the_largest_unit_that_divides_them() {
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes((1 << 20) + 1024), "1025 KiB");
        assert_eq!(bytes(1000), "1000 bytes");
        assert_eq!(bytes(0), "0 bytes");
    }

    #[test]
    fn cpu_shares_and_resources_read_as_people_say_them() {
        assert_eq!(cpus(0.5), "half a CPU");
        assert_eq!(cpus(1.0), "1 CPU");
        assert_eq!(cpus(1.5), "1.5 CPUs");
        assert_eq!(
            sandbox_resources(&Limits::default()),
            "no network access, 256 MB of memory and half a CPU"
        );
        let unlimited = Limits {
            resource_limits: false,
            ..Limits::default()
        };
        assert!(sandbox_resources(&unlimited).starts_with("no network access, NO memory or CPU"));
    }
}
