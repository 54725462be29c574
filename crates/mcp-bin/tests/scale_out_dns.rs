//! Runners found by DNS (issue 15), all real: three `sandbox-runner serve`, each a host of
//! its own in a network namespace joined by a veth pair to the namespace of one
//! `sandbox-mcp serve`, whose `SANDBOX_RUNNER_URL` is one name served by a dnsmasq of the
//! test's own (in that namespace; `/etc/netns/<ns>/resolv.conf` points the server's
//! resolver at it). The name's records change during the test: a runner added to them gets
//! calls, one removed gets no more; every call is answered.
//!
//! Needs root (network namespaces), iproute2 and dnsmasq (scripts/test installs them); the
//! runner binary as the other tests. Skips, saying why, when not root. Every namespace and
//! process is removed at the end, also on failure.

mod common;
#[path = "common/observe.rs"]
mod observe;
#[path = "common/scale_out.rs"]
mod scale_out;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{call, connect_to, runner_bin};
use observe::{get_json, runs_started};
use rmcp::service::RunningService;
use rmcp::RoleClient;
use scale_out::{seven_times, seven_times_output, stdout_of, PoolEnv};
use test_support::Service;

/// The runners' port, the same on every host: the name gives only addresses.
const PORT: u16 = 8081;
const NAME: &str = "runners.scale-out.test";
const START: Duration = Duration::from_secs(30);

/// The namespaces, processes and files of one test; all removed on drop.
struct Net {
    prefix: String,
    /// Second octet of the test's 10.x.0.0/16.
    octet: u8,
    namespaces: Vec<String>,
    services: Vec<Service>,
    dnsmasq: Option<Child>,
    hosts_file: PathBuf,
}

impl Net {
    fn new() -> Net {
        let pid = std::process::id();
        Net {
            prefix: format!("so{}", pid % 100_000),
            octet: 200 + (pid % 50) as u8,
            namespaces: Vec::new(),
            services: Vec::new(),
            dnsmasq: None,
            hosts_file: std::env::temp_dir().join(format!("scale-out-hosts-{pid}")),
        }
    }

    fn ns(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    fn add_ns(&mut self, what: &str) -> String {
        let ns = self.ns(what);
        ip(&["netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// The server's namespace `m`, joined to this one as 10.x.0.2 (here 10.x.0.1).
    fn hub(&mut self) -> String {
        let m = self.add_ns("m");
        let (here, there) = (self.ns("h0"), self.ns("m0"));
        ip(&["link", "add", &here, "type", "veth", "peer", "name", &there]);
        ip(&["link", "set", &there, "netns", &m]);
        ip(&[
            "addr",
            "add",
            &format!("10.{}.0.1/30", self.octet),
            "dev",
            &here,
        ]);
        ip(&["link", "set", &here, "up"]);
        ip(&[
            "-n",
            &m,
            "addr",
            "add",
            &format!("10.{}.0.2/30", self.octet),
            "dev",
            &there,
        ]);
        ip(&["-n", &m, "link", "set", &there, "up"]);
        run(Command::new("ip").args([
            "netns",
            "exec",
            &m,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]));
        let dir = PathBuf::from("/etc/netns").join(&m);
        std::fs::create_dir_all(&dir).expect("/etc/netns/<ns>");
        std::fs::write(dir.join("resolv.conf"), "nameserver 127.0.0.1\n").expect("resolv.conf");
        m
    }

    /// Runner host `n` (1..): namespace `r<n>` at 10.x.n.2, joined to the hub; reachable
    /// from here through it.
    fn runner_host(&mut self, n: u8) -> (String, String) {
        let r = self.add_ns(&format!("r{n}"));
        let m = self.ns("m");
        let (a, b) = (self.ns(&format!("a{n}")), self.ns(&format!("b{n}")));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        ip(&["link", "set", &a, "netns", &m]);
        ip(&["link", "set", &b, "netns", &r]);
        let o = self.octet;
        ip(&[
            "-n",
            &m,
            "addr",
            "add",
            &format!("10.{o}.{n}.1/30"),
            "dev",
            &a,
        ]);
        ip(&["-n", &m, "link", "set", &a, "up"]);
        ip(&[
            "-n",
            &r,
            "addr",
            "add",
            &format!("10.{o}.{n}.2/30"),
            "dev",
            &b,
        ]);
        ip(&["-n", &r, "link", "set", &b, "up"]);
        ip(&[
            "-n",
            &r,
            "route",
            "add",
            "default",
            "via",
            &format!("10.{o}.{n}.1"),
        ]);
        ip(&[
            "route",
            "add",
            &format!("10.{o}.{n}.0/30"),
            "via",
            &format!("10.{o}.0.2"),
        ]);
        (r, format!("10.{o}.{n}.2"))
    }

    fn start(&mut self, command: Command, announce: &str) -> String {
        let service = Service::start(command, announce, START).unwrap_or_else(|e| panic!("{e}"));
        let url = service.url().to_owned();
        self.services.push(service);
        url
    }

    /// Writes the name's records (one per address) and has dnsmasq read them again.
    fn records(&mut self, addresses: &[&str]) {
        let lines: String = addresses.iter().map(|a| format!("{a} {NAME}\n")).collect();
        std::fs::write(&self.hosts_file, lines).expect("hosts file");
        if let Some(dnsmasq) = &self.dnsmasq {
            let pid = nix::unistd::Pid::from_raw(dnsmasq.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
        }
    }

    fn start_dnsmasq(&mut self) {
        let m = self.ns("m");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &m,
                "dnsmasq",
                "--no-daemon",
                "--conf-file=/dev/null",
            ])
            .args([
                "--no-resolv",
                "--no-hosts",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
            ])
            .args(["--local-ttl=0", "--user=root", "--pid-file="])
            .arg(format!("--addn-hosts={}", self.hosts_file.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("dnsmasq");
        self.dnsmasq = Some(child);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.services.clear();
        if let Some(mut dnsmasq) = self.dnsmasq.take() {
            let _ = dnsmasq.kill();
            let _ = dnsmasq.wait();
        }
        for ns in self.namespaces.drain(..) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
            let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(&ns));
        }
        let _ = std::fs::remove_file(&self.hosts_file);
    }
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

fn run(command: &mut Command) {
    let status = command.status().expect("spawn");
    assert!(status.success(), "{command:?}: {status}");
}

/// Programs the runner at `address` started, from its `/metrics`.
async fn runs_of(address: &str) -> u64 {
    runs_started(&format!("http://{address}:{PORT}")).await
}

/// Waits until the server's `/health` lists exactly the runners at `addresses`.
async fn wait_for_runners(base: &str, addresses: &[&str]) {
    let mut want: Vec<String> = addresses
        .iter()
        .map(|a| format!("http://{a}:{PORT}/"))
        .collect();
    want.sort();
    let until = Instant::now() + Duration::from_secs(15);
    let mut last = serde_json::Value::Null;
    while Instant::now() < until {
        last = get_json(format!("{base}/health")).await;
        let mut seen: Vec<String> = last["runners"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .filter_map(|r| r["url"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        seen.sort();
        if seen == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the server never listed {want:?}: {last}");
}

/// `count` calls, four at a time; each must print its number times 7.
async fn calls(client: &RunningService<RoleClient, ()>, first: u64, count: u64) {
    for start in (first..first + count).step_by(4) {
        let batch = (start..(start + 4).min(first + count)).map(|n| async move {
            let params = call("run_bash", &seven_times(n), None);
            let result = client.call_tool(params).await.expect("tools/call");
            assert_eq!(stdout_of(&result), seven_times_output(n));
        });
        futures::future::join_all(batch).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_follow_their_dns_records() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED runners_follow_their_dns_records: needs root for network namespaces");
        return;
    }
    assert!(
        Command::new("dnsmasq")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "dnsmasq is missing: install dnsmasq-base (scripts/test does)"
    );
    let mut net = Net::new();
    let m = net.hub();
    let token = format!("dns-test-token-{}", std::process::id());
    let mut addresses = Vec::new();
    for n in 1..=3u8 {
        let (r, address) = net.runner_host(n);
        // nsenter, not `ip netns exec`: that mounts a sysfs of the namespace's over /sys,
        // which hides the cgroup hierarchies the runner needs.
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{r}"))
            .arg(runner_bin())
            .args([
                "serve",
                "--listen",
                &format!("{address}:{PORT}"),
                "--token",
                &token,
            ])
            .args(["--pool-size", "2"]);
        net.start(command, "sandbox-runner listening on ");
        addresses.push(address);
    }
    let [r1, r2, r3] = [
        addresses[0].as_str(),
        addresses[1].as_str(),
        addresses[2].as_str(),
    ];
    net.records(&[r1, r2]);
    net.start_dnsmasq();
    let mcp_token = format!("dns-mcp-token-{}", std::process::id());
    let pool_env = PoolEnv::new([format!("http://{NAME}:{PORT}")], &token, 300);
    let mut command = Command::new("ip");
    command
        .args([
            "netns",
            "exec",
            &m,
            env!("CARGO_BIN_EXE_sandbox-mcp"),
            "serve",
        ])
        .env("MCP_AUTH_TOKEN", &mcp_token)
        .env("BIND", format!("10.{}.0.2", net.octet))
        .env("PORT", "0")
        .env("RUST_LOG", "warn")
        .envs(pool_env.vars())
        .env("SANDBOX_RUNNER_RESOLVE_MS", "300")
        .env_remove("SANDBOX_HANDLE_KEY");
    let url = net.start(command, "sandbox-mcp listening on ");
    let base = url.trim_end_matches("/mcp").to_owned();
    let client = connect_to(&url, &mcp_token).await.expect("connect");

    // Two records: both runners get calls, the third none.
    wait_for_runners(&base, &[r1, r2]).await;
    calls(&client, 0, 12).await;
    let (one, two, three) = (runs_of(r1).await, runs_of(r2).await, runs_of(r3).await);
    assert!(one > 0 && two > 0 && three == 0, "{one} {two} {three}");
    assert_eq!(one + two, 12, "each call ran once");

    // A third record: the third runner gets calls, without a restart.
    net.records(&[r1, r2, r3]);
    wait_for_runners(&base, &[r1, r2, r3]).await;
    calls(&client, 12, 12).await;
    let three = runs_of(r3).await;
    assert!(three > 0, "the runner added to DNS got no calls");

    // The first record goes: its runner gets no more calls, all are still answered.
    net.records(&[r2, r3]);
    wait_for_runners(&base, &[r2, r3]).await;
    let one_before = runs_of(r1).await;
    calls(&client, 24, 12).await;
    assert_eq!(
        runs_of(r1).await,
        one_before,
        "the runner removed from DNS still got calls"
    );
    let total = runs_of(r1).await + runs_of(r2).await + runs_of(r3).await;
    assert_eq!(total, 36, "each of the 36 calls ran exactly once");
    client.cancel().await.ok();
}
