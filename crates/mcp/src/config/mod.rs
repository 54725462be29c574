//! The server's configuration: one typed struct, validated once at start-up.
//!
//! [`McpConfig`] is what [`crate::serve`] takes and [`ToolConfig`] what [`crate::serve_stdio`]
//! takes; the command line ([`ServeArgs`], [`ToolArgs`]) fills them from flags and environment
//! variables.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;

use crate::handle::HandleKey;
use crate::language_tools::LanguageTools;
use crate::origin::AllowedOrigin;
pub use crate::origin::OriginPolicy;
use crate::runner_target::{RunnerTarget, RunnerUrlError};
use crate::upstreams::{UpstreamsConfig, UpstreamsError};

/// The largest `/mcp` request body accepted by default, in bytes: room for a program at the
/// runner's 1 MiB code cap even when JSON escaping makes it several times longer.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;
/// MCP sessions open at once, by default.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Tool calls in flight in one session, by default.
pub const DEFAULT_MAX_CALLS_PER_SESSION: usize = 8;
/// On SIGTERM, how long calls in flight may go on by default, in milliseconds.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 30_000;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No token for `/mcp` was given.
    #[error("MCP_AUTH_TOKEN is required: set it (or --auth-token) to the bearer token clients must send")]
    MissingAuthToken,
    /// `SANDBOX_RUNNER_URL` is not an `http://` URL.
    #[error(transparent)]
    BadRunnerUrl(#[from] RunnerUrlError),
    /// `SANDBOX_TIMEOUT_MS` is zero.
    #[error("SANDBOX_TIMEOUT_MS={0} is out of range: use at least 1 (and at most the runner's largest timeout)")]
    BadTimeout(u64),
    /// An entry of `MCP_ALLOWED_ORIGINS` is not an origin.
    #[error("MCP_ALLOWED_ORIGINS entry {0:?} is not an origin: use scheme://host[:port], scheme://host:* or *")]
    BadOrigin(String),
    /// An HTTP limit cannot be used.
    #[error("MCP_HEADER_TIMEOUT_MS, MCP_MAX_HEADER_BYTES, MCP_MAX_CONNECTIONS or MCP_BODY_TIMEOUT_MS: {0}")]
    BadHttpLimit(#[from] http_limits::LimitError),
    /// A cap of zero would refuse everything.
    #[error("{0} must be at least 1")]
    ZeroCap(&'static str),
    /// `SANDBOX_HANDLE_KEY` is too short to be a secret.
    #[error(
        "SANDBOX_HANDLE_KEY is {0} characters long: use at least {min} random characters \
         (for example `openssl rand -hex 32`), the same on every replica",
        min = MIN_HANDLE_KEY_LEN
    )]
    WeakHandleKey(usize),
    /// `MCP_UPSTREAMS` cannot be used.
    #[error(transparent)]
    Upstreams(#[from] UpstreamsError),
    /// An entry of `MCP_LANGUAGE_TOOLS` cannot be a language's name.
    #[error("MCP_LANGUAGE_TOOLS: {0}; list language names as GET /health gives them, such as bash,python,ruby")]
    BadLanguageTool(#[from] sandbox_protocol::BadLangName),
}

/// The shortest `SANDBOX_HANDLE_KEY` accepted.
pub const MIN_HANDLE_KEY_LEN: usize = 32;

/// A bearer token; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

impl AuthToken {
    /// Tokens shorter than this are accepted with a warning.
    pub const RECOMMENDED_LEN: usize = 16;

    /// Refuses an empty token.
    pub fn new(token: impl Into<String>) -> Result<Self, ConfigError> {
        let token = token.into();
        if token.trim().is_empty() {
            return Err(ConfigError::MissingAuthToken);
        }
        Ok(AuthToken(token))
    }

    /// Whether the token is short enough to be guessed.
    pub fn is_weak(&self) -> bool {
        self.0.len() < Self::RECOMMENDED_LEN
    }

    /// The secret itself, for comparing or sending.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(<redacted>)")
    }
}

/// Which `Host` header values `/mcp` accepts (DNS-rebinding protection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPolicy {
    /// `localhost`, `127.0.0.1` and `::1`, any port: right for a server bound to loopback.
    Loopback,
    /// Any host: the default for a server bound to another interface, where clients reach it
    /// by names the server cannot know; the bearer token and the Origin check still apply.
    Any,
    /// The listed hosts, as `host` or `host:port`.
    List(Vec<String>),
}

/// Between two resolutions of the runners' host names, by default, in milliseconds.
pub const DEFAULT_RESOLVE_MS: u64 = 5_000;
/// Between two health polls of each runner, by default, in milliseconds.
pub const DEFAULT_RUNNER_HEALTH_MS: u64 = 2_000;

/// What the tools need: the same over HTTP and stdio.
#[derive(Clone, Debug)]
pub struct ToolConfig {
    /// The runner (the first of `SANDBOX_RUNNER_URL`'s list); `None` is the not-configured
    /// mode, where every call says so.
    pub runner: Option<RunnerTarget>,
    /// The runners after the first in `SANDBOX_RUNNER_URL`'s comma-separated list.
    pub more_runners: Vec<RunnerTarget>,
    /// How often the runners' names are resolved again and their health polled.
    pub cadence: crate::runner_client::Cadence,
    /// The run timeout when a call gives none; the runner's own default when `None`.
    pub default_timeout: Option<Duration>,
    /// Whether the three tools exist at all (`FEATURE_SANDBOX_EXEC`).
    pub exec_enabled: bool,
    /// Whether a program that ran and failed (non-zero exit, timeout, out of memory) is
    /// reported with `isError` (`MCP_FAILED_RUN_IS_ERROR`); by default it is a normal
    /// result, and `isError` is kept for calls that could not run.
    pub failed_run_is_error: bool,
    /// The key of sandbox ids from `SANDBOX_HANDLE_KEY`; without it, the key is drawn from
    /// the runner's token (see [`crate::handle`]).
    pub handle_key: Option<HandleKey>,
    /// The MCP servers whose tools Python, TypeScript and Node programs may call
    /// (`MCP_UPSTREAMS`); `None`: no tools from code, and nothing of them is visible.
    pub upstreams: Option<UpstreamsConfig>,
    /// The languages with a `run_<name>` tool of their own (`MCP_LANGUAGE_TOOLS`); every
    /// offered language runs through `run_code`.
    pub language_tools: LanguageTools,
}

impl Default for ToolConfig {
    /// No runner, the runner's default timeout, tools on.
    fn default() -> Self {
        ToolConfig {
            runner: None,
            more_runners: Vec::new(),
            cadence: crate::runner_client::Cadence {
                resolve_every: Duration::from_millis(DEFAULT_RESOLVE_MS),
                health_every: Duration::from_millis(DEFAULT_RUNNER_HEALTH_MS),
            },
            default_timeout: None,
            exec_enabled: true,
            failed_run_is_error: false,
            handle_key: None,
            upstreams: None,
            language_tools: LanguageTools::default(),
        }
    }
}

/// Everything the HTTP server needs, validated.
#[derive(Clone, Debug)]
pub struct McpConfig {
    /// The token clients must send on `/mcp`.
    pub auth_token: AuthToken,
    /// What the tools need.
    pub tools: ToolConfig,
    /// Which browser origins may call `/mcp`.
    pub allowed_origins: OriginPolicy,
    /// Which `Host` headers `/mcp` accepts.
    pub allowed_hosts: HostPolicy,
    /// Limits on HTTP clients: header and body timeouts, header size, connections.
    pub http: http_limits::Limits,
    /// The largest `/mcp` request body, in bytes (more gets 413).
    pub max_body_bytes: usize,
    /// MCP sessions open at once (a new one beyond gets 503).
    pub max_sessions: usize,
    /// Tool calls in flight in one session (one more gets an error result).
    pub max_calls_per_session: usize,
    /// On shutdown, how long calls in flight may go on before their connections close.
    pub shutdown_grace: Duration,
}

impl McpConfig {
    /// A configuration for a server bound to loopback: local origins and host names only.
    pub fn new(auth_token: AuthToken, tools: ToolConfig) -> Self {
        McpConfig {
            auth_token,
            tools,
            allowed_origins: OriginPolicy::Loopback,
            allowed_hosts: HostPolicy::Loopback,
            http: http_limits::Limits::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_calls_per_session: DEFAULT_MAX_CALLS_PER_SESSION,
            shutdown_grace: Duration::from_millis(DEFAULT_SHUTDOWN_GRACE_MS),
        }
    }
}

/// Every environment variable the command line reads.
pub const ENV_VARS: [&str; 21] = [
    "MCP_AUTH_TOKEN",
    "MCP_HEADER_TIMEOUT_MS",
    "MCP_MAX_HEADER_BYTES",
    "MCP_MAX_CONNECTIONS",
    "MCP_BODY_TIMEOUT_MS",
    "MCP_MAX_BODY_BYTES",
    "MCP_MAX_SESSIONS",
    "MCP_MAX_CALLS_PER_SESSION",
    "MCP_SHUTDOWN_GRACE_MS",
    "PORT",
    "BIND",
    "MCP_ALLOWED_ORIGINS",
    "MCP_ALLOWED_HOSTS",
    "SANDBOX_RUNNER_URL",
    "SANDBOX_RUNNER_TOKEN",
    "SANDBOX_TIMEOUT_MS",
    "SANDBOX_HANDLE_KEY",
    "FEATURE_SANDBOX_EXEC",
    "MCP_UPSTREAMS",
    "MCP_LANGUAGE_TOOLS",
    "RUST_LOG",
];

/// Treats a variable set to the empty string (`PORT=` in a compose file) as unset, so that
/// it takes its default instead of failing to parse. Call before parsing, while the process
/// has one thread.
pub fn forget_empty_env_vars() {
    for var in ENV_VARS {
        if std::env::var_os(var).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(var);
        }
    }
}

/// What the tools need, shared by `serve` and `stdio`.
#[derive(Clone, Debug, clap::Args)]
pub struct ToolArgs {
    /// Base URL of the sandbox runner, or a comma-separated list of them (a host name with
    /// several addresses stands for one runner per address); without it every call
    /// explains that none is configured. A user name and password in a URL are sent as
    /// HTTP Basic authentication and never shown.
    #[arg(long, env = "SANDBOX_RUNNER_URL", hide_env_values = true)]
    pub runner_url: Option<String>,
    /// How often runners' host names are resolved again, in milliseconds.
    #[arg(long, env = "SANDBOX_RUNNER_RESOLVE_MS", default_value_t = DEFAULT_RESOLVE_MS,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub runner_resolve_ms: u64,
    /// How often each runner's /health is polled, in milliseconds.
    #[arg(long, env = "SANDBOX_RUNNER_HEALTH_MS", default_value_t = DEFAULT_RUNNER_HEALTH_MS,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub runner_health_ms: u64,
    /// Bearer token for the runner's `POST /run`.
    #[arg(long, env = "SANDBOX_RUNNER_TOKEN", hide_env_values = true)]
    pub runner_token: Option<String>,
    /// Timeout of a run when the call gives none, in milliseconds (at most the runner's
    /// largest); the runner's own default when unset.
    #[arg(long, env = "SANDBOX_TIMEOUT_MS")]
    pub timeout_ms: Option<u64>,
    /// Offer the run tools (run_bash, run_python, ... one per language) (true/false).
    #[arg(long, env = "FEATURE_SANDBOX_EXEC", default_value = "true",
          value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub feature_sandbox_exec: bool,
    /// Report a program that ran and failed (non-zero exit, timeout, out of memory) with
    /// `isError: true`, as before 0.2; by default it is a normal result (true/false).
    #[arg(long, env = "MCP_FAILED_RUN_IS_ERROR", default_value = "false",
          value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub failed_run_is_error: bool,
    /// Secret that authenticates sandbox ids (at least 32 characters), the same on every
    /// replica; by default one is derived from SANDBOX_RUNNER_TOKEN. Prefer the variable:
    /// flags are visible in `ps`.
    #[arg(long, env = "SANDBOX_HANDLE_KEY", hide_env_values = true)]
    pub handle_key: Option<String>,
    /// A TOML file naming MCP servers whose allowed tools Python, TypeScript and Node
    /// programs may call through a `tools` module (README: "Tools from code"); their
    /// addresses and headers stay in this process.
    #[arg(long, env = "MCP_UPSTREAMS")]
    pub upstreams: Option<std::path::PathBuf>,
    /// Comma-separated languages that get a run_<name> tool of their own (those the
    /// runner offers); every offered language runs through run_code.
    #[arg(
        long,
        env = "MCP_LANGUAGE_TOOLS",
        value_delimiter = ',',
        default_value = crate::language_tools::DEFAULT
    )]
    pub language_tools: Vec<String>,
}

http_limits::limit_args!(
    /// Limits on HTTP clients (see the `http-limits` crate): `MCP_HEADER_TIMEOUT_MS`,
    /// `MCP_MAX_HEADER_BYTES`, `MCP_MAX_CONNECTIONS`, `MCP_BODY_TIMEOUT_MS`.
    pub struct HttpLimitArgs,
    "MCP"
);

/// The limits of `sandbox-mcp serve` against slow and greedy clients.
#[derive(Clone, Debug, clap::Args)]
pub struct LimitArgs {
    /// Limits on HTTP clients.
    #[command(flatten)]
    pub http: HttpLimitArgs,
    /// Largest /mcp request body in bytes; more gets 413.
    #[arg(long, env = "MCP_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// MCP sessions open at once; a new one beyond gets 503.
    #[arg(long, env = "MCP_MAX_SESSIONS", default_value_t = DEFAULT_MAX_SESSIONS)]
    pub max_sessions: usize,
    /// Tool calls in flight in one session; one more gets an error result.
    #[arg(long, env = "MCP_MAX_CALLS_PER_SESSION", default_value_t = DEFAULT_MAX_CALLS_PER_SESSION)]
    pub max_calls_per_session: usize,
    /// On SIGTERM, how long calls in flight may go on before the server closes, in
    /// milliseconds.
    #[arg(long, env = "MCP_SHUTDOWN_GRACE_MS", default_value_t = DEFAULT_SHUTDOWN_GRACE_MS)]
    pub shutdown_grace_ms: u64,
}

impl LimitArgs {
    /// Validates the limits into `config`.
    fn apply(&self, config: &mut McpConfig) -> Result<(), ConfigError> {
        config.http = self.http.to_limits()?;
        for (value, name) in [
            (self.max_body_bytes, "MCP_MAX_BODY_BYTES"),
            (self.max_sessions, "MCP_MAX_SESSIONS"),
            (self.max_calls_per_session, "MCP_MAX_CALLS_PER_SESSION"),
        ] {
            if value == 0 {
                return Err(ConfigError::ZeroCap(name));
            }
        }
        config.max_body_bytes = self.max_body_bytes;
        config.max_sessions = self.max_sessions;
        config.max_calls_per_session = self.max_calls_per_session;
        config.shutdown_grace = Duration::from_millis(self.shutdown_grace_ms);
        Ok(())
    }
}

/// The flags and environment of `sandbox-mcp serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Bearer token that clients must send on /mcp (required).
    #[arg(long, env = "MCP_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// TCP port to listen on (0 picks a free one).
    #[arg(long, env = "PORT", default_value_t = 3000)]
    pub port: u16,
    /// Address to listen on; 0.0.0.0 (or ::) serves on all interfaces.
    #[arg(long, env = "BIND", default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Comma-separated browser origins allowed on /mcp (scheme://host[:port|:*], or *);
    /// by default only pages on this machine (localhost, 127.0.0.1, [::1]).
    #[arg(long, env = "MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Comma-separated Host header values accepted on /mcp (host or host:port, or *);
    /// by default loopback names when bound to loopback, any host otherwise.
    #[arg(long, env = "MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Limits on clients.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// What the tools need.
    #[command(flatten)]
    pub tools: ToolArgs,
}

impl ServeArgs {
    /// Validates the arguments into a configuration.
    pub fn into_config(self) -> Result<McpConfig, ConfigError> {
        let token = AuthToken::new(self.auth_token.unwrap_or_default())?;
        let mut config = McpConfig::new(token, self.tools.into_config()?);
        config.allowed_origins = origin_policy(&self.allowed_origins)?;
        config.allowed_hosts = host_policy(&self.allowed_hosts, self.bind);
        self.limits.apply(&mut config)?;
        Ok(config)
    }
}

impl ToolArgs {
    /// Validates the tool settings.
    pub fn into_config(self) -> Result<ToolConfig, ConfigError> {
        if self.timeout_ms == Some(0) {
            return Err(ConfigError::BadTimeout(0));
        }
        let mut runners = self
            .runner_url
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(|url| RunnerTarget::new(url, self.runner_token.clone()))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        let runner = runners.next();
        let more_runners = runners.collect();
        let handle_key = match self.handle_key.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(key) if key.chars().count() < MIN_HANDLE_KEY_LEN => {
                return Err(ConfigError::WeakHandleKey(key.chars().count()))
            }
            Some(key) => Some(HandleKey::derive(key.as_bytes())),
        };
        let upstreams = match &self.upstreams {
            Some(path) if !path.as_os_str().is_empty() => Some(UpstreamsConfig::load(path)?),
            _ => None,
        };
        Ok(ToolConfig {
            runner,
            more_runners,
            cadence: crate::runner_client::Cadence {
                resolve_every: Duration::from_millis(self.runner_resolve_ms),
                health_every: Duration::from_millis(self.runner_health_ms),
            },
            default_timeout: self.timeout_ms.map(Duration::from_millis),
            exec_enabled: self.feature_sandbox_exec,
            failed_run_is_error: self.failed_run_is_error,
            handle_key,
            upstreams,
            language_tools: LanguageTools::parse(&self.language_tools)?,
        })
    }
}

fn cleaned(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect()
}

fn origin_policy(entries: &[String]) -> Result<OriginPolicy, ConfigError> {
    let entries = cleaned(entries);
    if entries.is_empty() {
        return Ok(OriginPolicy::Loopback);
    }
    if entries.iter().any(|e| e == "*") {
        return Ok(OriginPolicy::Any);
    }
    if let Some(bad) = entries.iter().find(|e| AllowedOrigin::parse(e).is_none()) {
        return Err(ConfigError::BadOrigin(bad.clone()));
    }
    Ok(OriginPolicy::List(entries))
}

fn host_policy(entries: &[String], bind: IpAddr) -> HostPolicy {
    let entries = cleaned(entries);
    if entries.iter().any(|e| e == "*") {
        HostPolicy::Any
    } else if !entries.is_empty() {
        HostPolicy::List(entries)
    } else if bind.is_loopback() {
        HostPolicy::Loopback
    } else {
        HostPolicy::Any
    }
}

#[cfg(test)]
mod tests;
