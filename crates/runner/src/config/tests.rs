//! The runner's flags parsed and validated as `serve` does, without root: the defaults,
//! every refusal, and the combinations that change what a backend gets (no resource
//! limits, the vm backend and its image). The environment is not read (a variable set
//! where the tests run changes nothing), the package store is an empty temporary folder,
//! and the language table keeps bash only (plus, where a test says so, a row that asks
//! for memory of its own), so that nothing depends on this host's toolchains.

use super::*;
use crate::backend::cgroup::CgroupLimits;
use clap::{CommandFactory, FromArgMatches, Parser};
use sandbox_protocol::api::Limits;
use std::path::Path;
use tempfile::TempDir;

/// `sandbox-runner serve`'s flags.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A row of the test table that asks for more memory than a sandbox has.
const BIG_ROW: &str = r#"
[[language]]
name = "big"
file = "main.sh"
run = ["bash", "{file}"]
memory_mb = 4096
"#;

/// The folders a test's flags point at: an empty package store, a language table.
struct Host {
    dir: TempDir,
}

impl Host {
    /// A language table of bash alone.
    fn new() -> Host {
        Host::with_rows("")
    }

    /// A language table of bash and `rows`.
    fn with_rows(rows: &str) -> Host {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let table = format!(
            "debian = false\nremove = [\"python\", \"node\", \"typescript\", \"c\", \"cpp\", \"go\", \"java\"]\n{rows}"
        );
        std::fs::write(dir.path().join("languages.toml"), table).expect("the table is written");
        Host { dir }
    }

    /// `serve`'s flags: `args`, after those that point at this host's folders and a token
    /// where `args` give none of their own.
    fn parse(&self, args: &[&str]) -> ServeArgs {
        let dir = self.dir.path();
        let given = |flag: &str| args.iter().any(|a| a.starts_with(flag));
        let mut all: Vec<String> = vec!["serve".into()];
        if !given("--packages-dir") {
            all.extend(["--packages-dir".into(), path(&dir.join("packages"))]);
        }
        if !given("--languages") {
            all.extend(["--languages".into(), path(&dir.join("languages.toml"))]);
        }
        if !given("--token") && !given("--no-auth") {
            all.extend(["--token".into(), "secret-token".into()]);
        }
        all.extend(args.iter().map(|a| a.to_string()));
        parse_exactly(&all)
    }

    /// A VM image folder whose `image.json` lists `languages`.
    fn image(&self, languages: &[&str]) -> String {
        let image = self.dir.path().join("image");
        std::fs::create_dir_all(&image).expect("the image folder is made");
        let info = serde_json::json!({ "languages": languages });
        std::fs::write(image.join(sandbox_image::INFO_FILE), info.to_string())
            .expect("image.json is written");
        path(&image)
    }
}

/// `path` as a flag's value.
fn path(path: &Path) -> String {
    path.display().to_string()
}

/// `args` (the program's name first) parsed as `serve`'s flags, the environment unread.
fn parse_exactly(args: &[String]) -> ServeArgs {
    let matches = Cli::command()
        .mut_args(|arg| arg.env(None))
        .try_get_matches_from(args)
        .expect("the flags parse");
    Cli::from_arg_matches(&matches)
        .expect("the flags fill the struct")
        .serve
}

/// The name of the setting `result` refuses as out of range.
fn refused<T>(result: Result<T, ConfigError>) -> &'static str {
    match result {
        Err(ConfigError::OutOfRange { name, .. }) => name,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("accepted"),
    }
}

fn process(config: &RunnerConfig) -> &ProcessConfig {
    match &config.sandbox.backend {
        BackendConfig::Process(process) => process,
        BackendConfig::Vm(_) => panic!("the vm backend"),
    }
}

fn vm(config: &SandboxConfig) -> &VmConfig {
    match &config.backend {
        BackendConfig::Vm(vm) => vm,
        BackendConfig::Process(_) => panic!("the process backend"),
    }
}

fn offered(config: &SandboxConfig) -> Vec<&str> {
    config.languages.names()
}

#[test]
fn the_defaults_are_the_published_ones() {
    let host = Host::new();
    let config = host.parse(&[]).validate().expect("the defaults are valid");
    // A client that cannot ask assumes the larger margin (a VM's); the process backend
    // publishes its own.
    let process_margin = crate::backend::process::REPORT_GRACE.as_millis() as u64;
    let published = Limits {
        answer_margin_ms: process_margin,
        ..Limits::default()
    };
    assert_eq!(config.limits, published);
    assert_eq!(config.listen, "127.0.0.1:8081".parse().unwrap());
    assert_eq!(config.token.as_deref(), Some("secret-token"));
    assert_eq!(config.pool.size, defaults::POOL_SIZE);
    assert_eq!(config.pool.queue_size, defaults::QUEUE_SIZE);
    assert_eq!(
        config.pool.queue_timeout,
        Duration::from_millis(defaults::QUEUE_TIMEOUT_MS)
    );
    assert_eq!(config.code_cap_bytes as u64, defaults::CODE_CAP_BYTES);
    assert_eq!(config.shutdown_grace, Duration::from_secs(30));
    assert_eq!(config.http, http_limits::Limits::default());
    let sandbox = &config.sandbox;
    assert_eq!(
        sandbox.default_timeout,
        Duration::from_millis(defaults::TIMEOUT_MS)
    );
    assert_eq!(
        sandbox.max_timeout,
        Duration::from_millis(defaults::MAX_TIMEOUT_MS)
    );
    assert_eq!(sandbox.output_cap_bytes as u64, defaults::OUTPUT_CAP_BYTES);
    assert!(sandbox.packages.set.is_none(), "the store was never built");
    assert_eq!(
        sandbox.packages.warm_imports,
        ["numpy", "pandas", "matplotlib.pyplot"]
    );
    assert!(
        sandbox.packages.deps.is_some(),
        "inline dependencies are on"
    );
    assert_eq!(offered(sandbox), ["bash"]);
    let sessions = &config.sessions;
    assert_eq!(sessions.idle, Duration::from_secs(600));
    assert_eq!(sessions.ttl, Duration::from_secs(3600));
    assert_eq!(sessions.max_idle, Duration::from_secs(3600));
    assert_eq!(sessions.max_ttl, Duration::from_secs(86_400));
    assert_eq!(sessions.max_sessions, 16);
    assert_eq!(sessions.file_cap_bytes, 16 << 20);
    assert_eq!(config.sandboxes(), defaults::POOL_SIZE + 16);
}

#[test]
fn the_process_backend_gets_the_sandbox_limits() {
    let host = Host::new();
    let config = host.parse(&[]).validate().unwrap();
    let made = process(&config);
    assert_eq!(
        made.limits,
        CgroupLimits {
            memory_bytes: defaults::MEMORY_MB << 20,
            cpu_quota_us: 50_000,
            cpu_period_us: 100_000,
            pids_max: defaults::PIDS_MAX,
        }
    );
    assert_eq!(made.tmpfs_bytes, 64 << 20);
    assert_eq!(made.id_base, 1_000_000);
    assert_eq!(made.nofile, 1024);
    assert_eq!(made.create_timeout, Duration::from_secs(10));
    assert_eq!(made.cgroup_mount, Path::new("/sys/fs/cgroup"));
    assert_eq!(made.state_dir, Path::new("/run/sandbox-runner"));
    assert!(made.templates);
    assert!(!made.unsafe_no_resource_limits);
    assert!(made.packages.is_none());

    let changed = host
        .parse(&["--memory-mb", "512", "--cpus", "1.5", "--pids-max", "100"])
        .validate()
        .unwrap();
    let limits = process(&changed).limits;
    assert_eq!(limits.memory_bytes, 512 << 20);
    assert_eq!(limits.cpu_quota_us, 150_000);
    assert_eq!(limits.pids_max, 100);
    assert_eq!(changed.limits.memory_mb, 512);
    assert_eq!(changed.limits.cpus, 1.5);
}

#[test]
fn the_token_is_required_unless_no_auth_on_loopback() {
    let host = Host::new();
    let open = host.parse(&["--no-auth"]).validate().unwrap();
    assert_eq!(open.token, None);
    let ipv6 = host.parse(&["--no-auth", "--listen", "[::1]:9000"]);
    assert_eq!(ipv6.validate().unwrap().token, None);
    assert!(matches!(
        host.parse(&["--no-auth", "--listen", "0.0.0.0:8081"])
            .validate(),
        Err(ConfigError::NoAuthNotLoopback(_))
    ));
    assert!(matches!(
        host.parse(&["--no-auth", "--token", "t", "--listen", "10.0.0.1:8081"])
            .validate(),
        Err(ConfigError::NoAuthNotLoopback(_))
    ));
    assert!(matches!(
        host.parse(&["--token="]).validate(),
        Err(ConfigError::EmptyToken)
    ));
    let no_token = parse_exactly(&["serve".into()]);
    assert!(matches!(
        no_token.validate(),
        Err(ConfigError::MissingToken)
    ));
}

#[test]
fn the_start_up_line_never_shows_the_token() {
    let host = Host::new();
    let config = host.parse(&[]).validate().unwrap();
    let line = config.to_string();
    assert!(!line.contains("secret-token"), "{line}");
    assert!(line.contains("auth=bearer"), "{line}");
    assert!(line.contains("backend=Process"), "{line}");
    assert!(line.contains("memory_bytes=268435456"), "{line}");
    let open = host.parse(&["--no-auth"]).validate().unwrap();
    assert!(open.to_string().contains("auth=none"));
}

#[test]
fn every_value_out_of_range_is_refused_by_name() {
    let host = Host::new();
    let cases: &[(&[&str], &str)] = &[
        (&["--max-timeout-ms", "0"], "RUNNER_MAX_TIMEOUT_MS"),
        (&["--default-timeout-ms", "0"], "SANDBOX_TIMEOUT_MS"),
        (
            &["--default-timeout-ms", "2000", "--max-timeout-ms", "1000"],
            "SANDBOX_TIMEOUT_MS",
        ),
        (&["--memory-mb", "15"], "RUNNER_MEMORY_MB"),
        (&["--cpus", "0.001"], "RUNNER_CPUS"),
        (&["--cpus", "1025"], "RUNNER_CPUS"),
        (&["--pids-max", "7"], "RUNNER_PIDS_MAX"),
        (&["--output-cap-bytes", "0"], "RUNNER_OUTPUT_CAP_BYTES"),
        (&["--tmpfs-mb", "0"], "RUNNER_TMPFS_MB"),
        (&["--id-base", "0"], "RUNNER_ID_BASE"),
        (&["--id-base", "4294367295"], "RUNNER_ID_BASE"),
        // Room for the sandbox's own ids, not for 65536 per sandbox of the pool.
        (&["--id-base", "4294000000"], "RUNNER_ID_BASE"),
        (&["--vm-boot-timeout-ms", "0"], "RUNNER_VM_BOOT_TIMEOUT_MS"),
        (
            &["--backend", "vm", "--unsafe-no-resource-limits"],
            "RUNNER_UNSAFE_NO_RESOURCE_LIMITS",
        ),
        (&["--warm-imports", "os;import sys"], "RUNNER_WARM_IMPORTS"),
        (&["--deps-max-mb", "0"], "RUNNER_DEPS_MAX_MB"),
        (&["--deps-timeout-ms", "999"], "RUNNER_DEPS_TIMEOUT_MS"),
        (&["--pool-size", "0"], "RUNNER_POOL_SIZE"),
        (&["--pool-size", "1025"], "RUNNER_POOL_SIZE"),
        (&["--queue-timeout-ms", "0"], "RUNNER_QUEUE_TIMEOUT_MS"),
        (&["--code-cap-bytes", "0"], "RUNNER_CODE_CAP_BYTES"),
        (&["--session-idle-ms", "0"], "RUNNER_SESSION_IDLE_MS"),
        (
            &["--session-idle-ms", "2000", "--session-max-idle-ms", "1000"],
            "RUNNER_SESSION_IDLE_MS",
        ),
        (&["--session-ttl-ms", "0"], "RUNNER_SESSION_TTL_MS"),
        (
            &["--session-ttl-ms", "2000", "--session-max-ttl-ms", "1000"],
            "RUNNER_SESSION_TTL_MS",
        ),
        (&["--max-sandbox-sessions", "1025"], "RUNNER_MAX_SESSIONS"),
        (&["--file-cap-bytes", "0"], "RUNNER_FILE_CAP_BYTES"),
        (&["--file-cap-bytes", "16777217"], "RUNNER_FILE_CAP_BYTES"),
        (&["--egress-max-bytes", "0"], "RUNNER_EGRESS_MAX_BYTES"),
        (
            &["--egress-max-connections", "0"],
            "RUNNER_EGRESS_MAX_CONNECTIONS",
        ),
    ];
    for (args, name) in cases {
        assert_eq!(refused(host.parse(args).validate()), *name, "{args:?}");
    }
    // The sandbox settings alone (as `run` and an embedding program check them).
    let sandbox = host.parse(&["--memory-mb", "15"]).sandbox;
    assert_eq!(refused(sandbox.validate()), "RUNNER_MEMORY_MB");
    let sandbox = host.parse(&["--id-base", "4294000000"]).sandbox;
    assert!(sandbox.validate().is_ok(), "room for the sandbox's own ids");
}

#[test]
fn the_bounds_themselves_are_accepted() {
    let host = Host::new();
    let edges = [
        "--max-timeout-ms",
        "1",
        "--default-timeout-ms",
        "1",
        "--memory-mb",
        "16",
        "--cpus",
        "0.01",
        "--pids-max",
        "8",
        "--output-cap-bytes",
        "1",
        "--tmpfs-mb",
        "1",
        "--id-base",
        "1",
        "--vm-boot-timeout-ms",
        "1",
        "--pool-size",
        "1024",
        "--max-sandbox-sessions",
        "1024",
        "--queue-timeout-ms",
        "1",
        "--code-cap-bytes",
        "1",
        "--file-cap-bytes",
        "16777216",
    ];
    let config = host.parse(&edges).validate().unwrap();
    assert_eq!(config.sandboxes(), 2048);
    let high = [
        "--cpus",
        "1024",
        "--id-base",
        "4294367294",
        "--pool-size",
        "1",
    ];
    let high = host.parse(&high);
    assert!(high.sandbox.validate().is_ok());
}

#[test]
fn http_limits_are_checked() {
    let host = Host::new();
    for args in [
        ["--max-connections", "0"],
        ["--header-timeout-ms", "0"],
        ["--body-timeout-ms", "0"],
        ["--max-header-bytes", "1"],
    ] {
        assert!(
            matches!(host.parse(&args).validate(), Err(ConfigError::HttpLimit(_))),
            "{args:?}"
        );
    }
}

#[test]
fn a_language_table_that_cannot_be_read_is_refused() {
    let host = Host::new();
    let missing = path(&host.dir.path().join("no-such-table.toml"));
    assert!(matches!(
        host.parse(&["--languages", &missing]).validate(),
        Err(ConfigError::Languages(
            crate::languages::LanguagesError::Read { .. }
        ))
    ));
    let bad = Host::with_rows("[[language]]\nname = \"Bad Name\"\n");
    assert!(matches!(
        bad.parse(&[]).validate(),
        Err(ConfigError::Languages(
            crate::languages::LanguagesError::Invalid { .. }
        ))
    ));
}

#[test]
fn a_package_store_whose_current_set_is_broken_is_refused() {
    let host = Host::new();
    let store = host.dir.path().join("packages");
    std::fs::create_dir_all(&store).unwrap();
    std::os::unix::fs::symlink("elsewhere", store.join("current")).unwrap();
    assert!(matches!(
        host.parse(&[]).validate(),
        Err(ConfigError::Packages(_))
    ));
}

#[test]
fn without_resource_limits_health_says_so_and_sessions_are_not_frozen() {
    let host = Host::new();
    let config = host
        .parse(&["--unsafe-no-resource-limits"])
        .validate()
        .unwrap();
    assert!(!config.limits.resource_limits);
    assert!(!config.limits.sessions_frozen);
    assert!(process(&config).unsafe_no_resource_limits);
    assert_eq!(
        config.limits.memory_mb,
        defaults::MEMORY_MB,
        "still published"
    );
}

#[test]
fn the_vm_backend_gets_its_own_settings() {
    let host = Host::new();
    let image = host.image(&["bash"]);
    let args = [
        "--backend",
        "vm",
        "--vm-image",
        &image,
        "--memory-mb",
        "300",
        "--vm-guest-overhead-mb",
        "100",
        "--vmm-overhead-mb",
        "50",
        "--cpus",
        "0.25",
        "--id-base",
        "2000000",
        "--vm-boot-timeout-ms",
        "7000",
        "--vmm",
        "firecracker",
        "--firecracker-bin",
        "/opt/fc/firecracker",
        "--firecracker-without-jailer",
    ];
    let config = host.parse(&args).validate().unwrap();
    assert_eq!(config.sandbox.backend.kind(), BackendKind::Vm);
    assert!(config.limits.resource_limits && config.limits.sessions_frozen);
    // A VM's sandboxes take no inline dependencies, so a caller need not wait for them.
    assert_eq!(config.limits.dependencies_timeout_ms, 0);
    let vm = vm(&config.sandbox);
    assert_eq!(vm.guest_memory_mb, 400);
    assert_eq!(vm.sandbox_limits.memory_bytes, 300 << 20);
    assert_eq!(vm.sandbox_limits.cpu_quota_us, 25_000);
    // The VMM's own bound: the guest and its overhead, one whole CPU.
    assert_eq!(vm.vmm_limits.memory_bytes, 450 << 20);
    assert_eq!(vm.vmm_limits.cpu_quota_us, vm.vmm_limits.cpu_period_us);
    assert_eq!(vm.vmm_uid_base, 2_500_000);
    assert_eq!(vm.boot_timeout, Duration::from_secs(7));
    assert_eq!(vm.image_dir, Path::new(&image));
    assert_eq!(vm.firecracker.binary, Path::new("/opt/fc/firecracker"));
    assert_eq!(vm.firecracker.jailer, None);
    assert!(vm.firecracker.snapshots);
    assert!(config
        .to_string()
        .contains("NONE (--firecracker-without-jailer)"));
}

#[test]
fn a_vm_offers_what_its_image_holds_and_no_language_with_memory_of_its_own() {
    let host = Host::with_rows(BIG_ROW);
    // On the process backend, a row may ask for more memory than the default.
    let process = host.parse(&[]).sandbox.validate().unwrap();
    assert_eq!(offered(&process), ["bash", "big"]);

    let image = host.image(&["bash", "big"]);
    let in_vm = host.parse(&["--backend", "vm", "--vm-image", &image]);
    assert_eq!(offered(&in_vm.sandbox.validate().unwrap()), ["bash"]);

    let image = host.image(&["python"]);
    let lacking = host.parse(&["--backend", "vm", "--vm-image", &image]);
    assert!(matches!(
        lacking.sandbox.validate(),
        Err(ConfigError::Languages(
            crate::languages::LanguagesError::Empty(_)
        ))
    ));

    // An image that says nothing of its languages (or is not there yet) keeps the
    // host's table, less what needs memory of its own.
    let no_image = path(&host.dir.path().join("no-image"));
    let unknown = host.parse(&["--backend", "vm", "--vm-image", &no_image]);
    assert_eq!(offered(&unknown.sandbox.validate().unwrap()), ["bash"]);
}

#[test]
fn the_dependencies_timeout_is_published_where_they_are_taken() {
    let host = Host::new();
    let taken = host.parse(&["--deps-timeout-ms", "7000"]).validate();
    assert_eq!(taken.expect("valid").limits.dependencies_timeout_ms, 7_000);
    let off = host.parse(&["--no-inline-deps"]).validate();
    assert_eq!(off.expect("valid").limits.dependencies_timeout_ms, 0);
}

#[test]
fn egress_is_off_by_default_and_published_when_on() {
    let host = Host::new();
    let off = host.parse(&[]).validate().expect("the defaults are valid");
    assert!(!off.sandbox.egress.is_on());
    assert!(!off.limits.network && off.limits.network_hosts.is_empty());
    let bash = off.sandbox.languages.get("bash").expect("bash");
    assert!(
        !bash.recipe.env.contains_key("HTTPS_PROXY"),
        "no proxy variables when off"
    );
    assert_eq!(off.sandbox.egress.grant(None), Ok(None));
    assert_eq!(off.sandbox.egress.grant(Some(&[])), Ok(None));
    assert!(off
        .sandbox
        .egress
        .grant(Some(&["pypi.org".into()]))
        .is_err());

    let on = host
        .parse(&["--egress-allow", "pypi.org,*.pythonhosted.org"])
        .validate()
        .expect("an allow list is valid");
    assert!(on.limits.network);
    assert_eq!(on.limits.network_hosts, ["pypi.org", "*.pythonhosted.org"]);
    assert!(!on.limits.network_by_default);
    let bash = on.sandbox.languages.get("bash").expect("bash");
    assert_eq!(
        bash.recipe.env.get("HTTPS_PROXY").map(String::as_str),
        Some("http://127.0.0.1:3128")
    );
    let egress = &on.sandbox.egress;
    assert_eq!(egress.max_bytes, 256 << 20);
    assert_eq!(egress.max_connections, 16);
    let none = egress.grant(None).expect("the default").expect("on");
    assert!(
        none.names().is_empty(),
        "RUNNER_EGRESS_DEFAULT=none grants nothing"
    );
    let some = egress.grant(Some(&["files.pythonhosted.org".into()]));
    assert_eq!(
        some.expect("covered").expect("on").names(),
        ["files.pythonhosted.org"]
    );
    let outside = egress.grant(Some(&["example.com".into()]));
    assert_eq!(outside.expect_err("outside").0, ["example.com"]);

    let all = host
        .parse(&["--egress-allow", "pypi.org", "--egress-default", "all"])
        .validate()
        .expect("valid");
    assert!(all.limits.network_by_default);
    let granted = all
        .sandbox
        .egress
        .grant(None)
        .expect("the default")
        .expect("on");
    assert_eq!(granted.names(), ["pypi.org"]);
}

#[test]
fn an_egress_policy_that_cannot_be_used_is_refused_naming_the_entry() {
    let host = Host::new();
    for (args, says) in [
        (&["--egress-allow", "not a name"][..], "not a name"),
        (&["--egress-allow", "pypi.org:0"], "pypi.org:0"),
        (&["--egress-allow-cidrs", "10.0.0.0/33"], "10.0.0.0/33"),
        // Not built for Firecracker yet: refused rather than left open or ignored.
        (
            &[
                "--backend",
                "vm",
                "--vmm",
                "firecracker",
                "--egress-allow",
                "pypi.org",
            ],
            "Firecracker",
        ),
    ] {
        match host.parse(args).validate() {
            Err(ConfigError::Egress(message)) => assert!(message.contains(says), "{message}"),
            Err(other) => panic!("{args:?}: refused for another reason: {other}"),
            Ok(_) => panic!("{args:?} accepted"),
        }
    }
}
