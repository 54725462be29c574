//! A runner inside this process, for `up` and `stdio --embedded`: the process backend on
//! a loopback port with a random token, reached over the same HTTP client a split
//! deployment uses.
//!
//! Every runner setting that makes sense embedded is taken (the `RUNNER_*` variables
//! below, and the sandboxes' own); the ones that cannot apply are refused by name rather
//! than silently ignored.

use sandbox_mcp::config::ToolArgs;
use sandbox_runner::config::{PoolArgs, SandboxArgs};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Settings of the runner embedded by `up` and `stdio --embedded`.
#[derive(Debug, Clone, clap::Args)]
pub struct EmbeddedRunnerArgs {
    /// The embedded runner's pool, queue and largest program (`RUNNER_POOL_SIZE`,
    /// `RUNNER_QUEUE_SIZE`, `RUNNER_QUEUE_TIMEOUT_MS`, `RUNNER_CODE_CAP_BYTES`); a call
    /// that finds the queue full or waits it out is asked again up to its deadline.
    #[command(flatten)]
    pub pool: PoolArgs,
    /// On SIGTERM, how long the embedded runner's runs may go on, in milliseconds.
    #[arg(long, env = "RUNNER_SHUTDOWN_GRACE_MS", default_value_t = 30_000)]
    pub runner_shutdown_grace_ms: u64,
    /// The embedded runner's sandboxes.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Runner variables that have no meaning for an embedded runner: its address and token
/// are its own, and only this process talks to it.
const REFUSED_VARIABLES: [(&str, &str); 5] = [
    ("RUNNER_LISTEN", "it listens on a loopback port of its own"),
    (
        "RUNNER_HEADER_TIMEOUT_MS",
        "only this process talks to it (the MCP_* HTTP limits apply to clients)",
    ),
    (
        "RUNNER_MAX_HEADER_BYTES",
        "only this process talks to it (the MCP_* HTTP limits apply to clients)",
    ),
    (
        "RUNNER_MAX_CONNECTIONS",
        "only this process talks to it (the MCP_* HTTP limits apply to clients)",
    ),
    (
        "RUNNER_BODY_TIMEOUT_MS",
        "only this process talks to it (the MCP_* HTTP limits apply to clients)",
    ),
];

/// Why the embedded runner could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Not root, and what stands in for root is missing: no sandbox can be made.
    #[error("{0}")]
    NotRoot(NotRoot),
    /// A setting was given that an embedded runner cannot honour.
    #[error(
        "{variable} is set, but {command} runs its own runner and cannot use it ({why}); \
         unset it, or run `sandbox-mcp serve` against a runner of your own"
    )]
    Refused {
        /// The variable (or flag) concerned.
        variable: &'static str,
        /// `up` or `stdio --embedded`.
        command: &'static str,
        /// Why it cannot apply.
        why: &'static str,
    },
    /// A runner setting is not usable.
    #[error(transparent)]
    Config(#[from] sandbox_runner::config::ConfigError),
    /// No random token could be made.
    #[error("making a random token from /dev/urandom: {0}")]
    Random(std::io::Error),
    /// The runner's loopback port could not be bound.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address concerned.
        addr: SocketAddr,
        /// What failed underneath.
        source: std::io::Error,
    },
    /// The runner failed.
    #[error("the embedded runner: {0}")]
    Runner(#[from] sandbox_runner::server::ServeError),
    /// The runner's task ended without saying why (it panicked or was cancelled).
    #[error("the embedded runner stopped: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The runner stopped before it was ready, without an error.
    #[error("the embedded runner stopped before it was ready")]
    Gone,
}

/// A runner serving inside this process.
#[derive(Debug)]
pub struct EmbeddedRunner {
    /// Its loopback URL.
    pub url: String,
    /// The token it wants.
    pub token: String,
    /// What its sandboxes can import.
    pub packages: sandbox_protocol::api::Packages,
    /// The languages it offers, in its table's order.
    pub languages: Vec<sandbox_protocol::Lang>,
    /// What its sandboxes may reach through its egress proxy: the hosts
    /// (`RUNNER_EGRESS_ALLOW`), then the address ranges (`RUNNER_EGRESS_ALLOW_CIDRS`);
    /// empty: no network.
    pub network: Vec<String>,
    /// Whether a call that names no `egress` gets all of [`network`](Self::network)
    /// (`RUNNER_EGRESS_DEFAULT=all`).
    pub network_by_default: bool,
    task: JoinHandle<Result<(), sandbox_runner::server::ServeError>>,
}

impl EmbeddedRunner {
    /// Waits for the runner to stop (after `stop` turned true), and says how it ended.
    pub async fn stopped(self) -> Result<(), EmbedError> {
        Ok(self.task.await??)
    }
}

/// Refuses settings meant for a runner elsewhere: `command` runs its own.
pub fn refuse_foreign_settings(tools: &ToolArgs, command: &'static str) -> Result<(), EmbedError> {
    let refused = |variable, why| EmbedError::Refused {
        variable,
        command,
        why,
    };
    if tools.runner_url.is_some() {
        return Err(refused(
            "SANDBOX_RUNNER_URL",
            "its runner's URL is a loopback port of its own",
        ));
    }
    if tools.runner_token.is_some() {
        return Err(refused(
            "SANDBOX_RUNNER_TOKEN",
            "its runner's token is made at each start",
        ));
    }
    match refused_variable(|variable| std::env::var_os(variable)) {
        Some((variable, why)) => Err(refused(variable, why)),
        None => Ok(()),
    }
}

/// The first runner variable set (to something) that an embedded runner cannot use, and
/// why; `lookup` reads a variable.
fn refused_variable(
    lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<(&'static str, &'static str)> {
    REFUSED_VARIABLES
        .into_iter()
        .find(|(variable, _)| lookup(variable).is_some_and(|v| !v.is_empty()))
}

/// Starts the runner; it serves until `stop` turns true.
pub async fn start(
    args: &EmbeddedRunnerArgs,
    stop: watch::Receiver<bool>,
) -> Result<EmbeddedRunner, EmbedError> {
    let token = random_hex().map_err(EmbedError::Random)?;
    let config = runner_config(args, &token)?;
    let mut packages = sandbox_runner::deps::installed(&config.sandbox.packages);
    packages.inline_dependencies = config.sandbox.packages.deps.is_some()
        && config.sandbox.backend.kind() == sandbox_runner::config::BackendKind::Process;
    let languages = config
        .sandbox
        .languages
        .iter()
        .map(|l| l.name().clone())
        .collect();
    let egress = &config.sandbox.egress;
    let mut network = egress.policy.names();
    network.extend(egress.policy.ranges());
    let network_by_default =
        egress.is_on() && egress.default == sandbox_runner::config::EgressDefault::All;
    let addr = config.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| EmbedError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| EmbedError::Listen { addr, source })?;
    let (ready_tx, ready_rx) = oneshot::channel();
    let task = tokio::spawn(sandbox_runner::server::serve(
        config,
        listener,
        stopped(stop),
        move || {
            let _ = ready_tx.send(());
        },
    ));
    if ready_rx.await.is_err() {
        // The runner ended before it was ready: its error says why.
        let error = match task.await {
            Ok(Err(e)) => e.into(),
            Ok(Ok(())) => EmbedError::Gone,
            Err(e) => e.into(),
        };
        if nix::unistd::geteuid().is_root() {
            return Err(error);
        }
        return Err(EmbedError::NotRoot(NotRoot::new(error.to_string())?));
    }
    Ok(EmbeddedRunner {
        url: format!("http://{bound}"),
        token,
        packages,
        languages,
        network,
        network_by_default,
        task,
    })
}

fn runner_config(
    args: &EmbeddedRunnerArgs,
    token: &str,
) -> Result<sandbox_runner::config::RunnerConfig, EmbedError> {
    Ok(serve_args(args, token).validate()?)
}

/// The runner's `serve` settings: `args`, on a loopback port of its own that wants `token`,
/// its data folder (paused sessions, snapshots) in sandbox-mcp's state folder beside the
/// token unless `RUNNER_DATA_DIR` names another.
fn serve_args(args: &EmbeddedRunnerArgs, token: &str) -> sandbox_runner::config::ServeArgs {
    let mut pool = args.pool.clone();
    if pool.sessions.data_dir.as_os_str() == sandbox_runner::config::DEFAULT_DATA_DIR {
        if let Some(state) = crate::token_store::state_folder() {
            pool.sessions.data_dir = state.join("runner");
        }
    }
    sandbox_runner::config::ServeArgs {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: Some(token.to_owned()),
        no_auth: false,
        pool,
        shutdown_grace_ms: args.runner_shutdown_grace_ms,
        http: sandbox_runner::config::HttpLimitArgs::default(),
        sandbox: args.sandbox.clone(),
    }
}

/// This process's user name (its uid where it has none).
fn current_user() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |user| user.name)
}

/// Completes when `stop` turns true (or its sender is gone).
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// 32 random bytes from the kernel, as hex.
pub fn random_hex() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What to do instead when the embedded runner cannot make sandboxes as this user.
///
/// The process backend gives every sandbox host ids of its own and limits it with
/// cgroups. An ordinary user can do the same only where the kernel lets them make user
/// namespaces, `/etc/subuid` and `/etc/subgid` grant them ids (mapped by the uidmap
/// package's helpers), and a cgroup v2 subtree delegated to them can limit the sandboxes
/// (or they opt out of memory and CPU limits by name). The message says what was missing and gives commands that
/// work, with a fresh token filled in.
#[derive(Debug)]
pub struct NotRoot {
    reason: String,
    mcp: PathBuf,
    runner: PathBuf,
    token: String,
}

impl NotRoot {
    fn new(reason: String) -> Result<NotRoot, EmbedError> {
        let mcp = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sandbox-mcp"));
        let runner = mcp.with_file_name("sandbox-runner");
        Ok(NotRoot {
            reason,
            mcp,
            runner,
            token: random_hex().map_err(EmbedError::Random)?,
        })
    }
}

impl std::fmt::Display for NotRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mcp, runner, token) = (self.mcp.display(), self.runner.display(), &self.token);
        writeln!(
            f,
            "the sandboxes need root here, or what stands in for it: each one gets user \
             ids of its own and cgroup limits (256 MB, half a CPU). As this user: {}",
            self.reason
        )?;
        writeln!(f)?;
        writeln!(f, "Ways that work:")?;
        writeln!(f)?;
        writeln!(f, "1. Run it as root:")?;
        writeln!(f, "     sudo {mcp} up")?;
        writeln!(f)?;
        writeln!(
            f,
            "2. Run the runner as root, and the MCP server as yourself (for clients that \
             start servers over stdio):"
        )?;
        if !self.runner.exists() {
            writeln!(
                f,
                "     cargo build --release -p sandbox-runner   # {runner} is not built yet"
            )?;
        }
        writeln!(
            f,
            "     sudo env SANDBOX_RUNNER_TOKEN={token} {runner} serve --listen 127.0.0.1:8081"
        )?;
        writeln!(
            f,
            "   then, as yourself (or in the client's server settings):"
        )?;
        writeln!(
            f,
            "     SANDBOX_RUNNER_URL=http://127.0.0.1:8081 SANDBOX_RUNNER_TOKEN={token} {mcp} stdio"
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "3. Without root, where the kernel lets you make user namespaces: give yourself \
             subordinate ids and the helpers that map them (once, as root):"
        )?;
        writeln!(
            f,
            "     sudo apt-get install uidmap && sudo usermod --add-subuids 100000-165535 \
             --add-subgids 100000-165535 {user}",
            user = current_user()
        )?;
        writeln!(
            f,
            "   then, on a host with cgroup v2 and systemd, run it in a cgroup delegated to \
             you, which keeps the memory and CPU limits:"
        )?;
        writeln!(
            f,
            "     systemd-run --user --scope -p Delegate=yes {mcp} up"
        )?;
        writeln!(
            f,
            "   (if the reason above names the cpu controller, delegate it once, as root: \
             sudo mkdir -p /etc/systemd/system/user@.service.d && printf \
             '[Service]\\nDelegate=cpu memory pids\\n' | sudo tee \
             /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl \
             daemon-reload, then log in again)"
        )?;
        writeln!(
            f,
            "   or, where no cgroup can be delegated (cgroup v1 hosts), run \
             without memory and CPU limits (UNSAFE: a program can take all of this \
             machine's memory and CPU; its processes stay capped):"
        )?;
        write!(f, "     RUNNER_UNSAFE_NO_RESOURCE_LIMITS=true {mcp} up")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tools: ToolArgs,
        #[command(flatten)]
        runner: EmbeddedRunnerArgs,
    }

    fn parse(args: &[&str]) -> Cli {
        let mut argv = vec!["sandbox-mcp"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_runner_url_or_token_of_another_runner_is_refused_by_name() {
        for (flag, value, variable) in [
            (
                "--runner-url",
                "http://127.0.0.1:8081",
                "SANDBOX_RUNNER_URL",
            ),
            ("--runner-token", "a-token", "SANDBOX_RUNNER_TOKEN"),
        ] {
            let cli = parse(&[flag, value]);
            let error = refuse_foreign_settings(&cli.tools, "stdio --embedded").unwrap_err();
            assert!(
                matches!(
                    error,
                    EmbedError::Refused { variable: v, command: "stdio --embedded", .. }
                        if v == variable
                ),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("{variable} is set, but stdio --embedded runs")),
                "{message}"
            );
            assert!(message.contains("sandbox-mcp serve"), "{message}");
        }
    }

    #[test]
    fn runner_variables_that_cannot_apply_are_refused_when_set() {
        let none = |_: &str| None;
        assert_eq!(refused_variable(none), None);
        let empty = |_: &str| Some(std::ffi::OsString::new());
        assert_eq!(refused_variable(empty), None, "an empty variable is unset");
        for (name, _) in REFUSED_VARIABLES {
            let set = |variable: &str| (variable == name).then(|| "1".into());
            let (variable, why) = refused_variable(set).unwrap();
            assert_eq!(variable, name);
            assert!(!why.is_empty());
        }
    }

    #[test]
    fn the_runner_listens_on_a_loopback_port_of_its_own_with_the_token_made() {
        let cli = parse(&[
            "--pool-size",
            "3",
            "--queue-size",
            "7",
            "--runner-shutdown-grace-ms",
            "1500",
        ]);
        let serve = serve_args(&cli.runner, "a-token");
        assert_eq!(serve.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(serve.token.as_deref(), Some("a-token"));
        assert!(!serve.no_auth);
        assert_eq!(
            (serve.pool.pool_size, serve.pool.queue_size),
            (3, 7),
            "the pool as given"
        );
        assert_eq!(serve.shutdown_grace_ms, 1500);
    }

    #[test]
    fn a_random_token_is_64_hex_digits_and_new_each_time() {
        let (one, two) = (random_hex().unwrap(), random_hex().unwrap());
        assert_eq!(one.len(), 64);
        assert!(one.chars().all(|c| c.is_ascii_hexdigit()), "{one}");
        assert_ne!(one, two);
    }

    #[test]
    fn the_not_root_advice_gives_commands_with_a_fresh_token() {
        let advice = NotRoot::new("no subordinate ids".into()).unwrap();
        let text = advice.to_string();
        assert!(text.contains("As this user: no subordinate ids"), "{text}");
        assert!(text.contains(&format!("SANDBOX_RUNNER_TOKEN={}", advice.token)));
        assert_eq!(advice.token.len(), 64);
        for needle in ["sudo ", "serve --listen 127.0.0.1:8081", " stdio", " up"] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }
}
