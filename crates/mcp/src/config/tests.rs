//! The command line into configurations: defaults, lists, limits, and what is refused.

use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// The tools' settings alone, as `stdio` takes them (no token).
#[derive(Parser)]
struct Tools {
    #[command(flatten)]
    tools: ToolArgs,
}

/// Parses `sandbox-mcp ARGS` as `P` (a flag clap refuses fails the test), then validates
/// it with `into`.
fn validated<P: Parser, C>(
    args: &[&str],
    into: impl FnOnce(P) -> Result<C, ConfigError>,
) -> Result<C, ConfigError> {
    P::try_parse_from([&["sandbox-mcp"][..], args].concat())
        .map_err(|e| panic!("{e}"))
        .and_then(into)
}

fn parse(args: &[&str]) -> Result<McpConfig, ConfigError> {
    validated(args, |cli: Cli| cli.serve.into_config())
}

/// `parse` with a token given.
fn with_token(args: &[&str]) -> Result<McpConfig, ConfigError> {
    parse(&[&["--auth-token", "0123456789abcdef"][..], args].concat())
}

fn tools(args: &[&str]) -> Result<ToolConfig, ConfigError> {
    validated(args, |cli: Tools| cli.tools.into_config())
}

#[test]
fn refuses_to_start_without_a_token() {
    assert!(matches!(parse(&[]), Err(ConfigError::MissingAuthToken)));
    assert!(matches!(
        parse(&["--auth-token", " "]),
        Err(ConfigError::MissingAuthToken)
    ));
    let short = parse(&["--auth-token", "short"]).unwrap();
    assert!(short.auth_token.is_weak());
}

#[test]
fn defaults_are_not_configured_loopback_and_tools_on() {
    let config = parse(&["--auth-token", "0123456789abcdef"]).unwrap();
    assert!(config.tools.runner.is_none());
    assert!(config.tools.exec_enabled);
    assert_eq!(config.tools.default_timeout, None, "the runner's default");
    assert_eq!(config.allowed_origins, OriginPolicy::Loopback);
    assert_eq!(config.allowed_hosts, HostPolicy::Loopback);
    assert!(!format!("{config:?}").contains("0123456789abcdef"));
}

#[test]
fn all_interfaces_accept_any_host() {
    let config = parse(&["--auth-token", "0123456789abcdef", "--bind", "0.0.0.0"]).unwrap();
    assert_eq!(config.allowed_hosts, HostPolicy::Any);
}

#[test]
fn feature_flag_accepts_common_spellings() {
    for (value, want) in [
        ("false", false),
        ("0", false),
        ("no", false),
        ("true", true),
    ] {
        let config = parse(&[
            "--auth-token",
            "0123456789abcdef",
            "--feature-sandbox-exec",
            value,
        ])
        .unwrap();
        assert_eq!(config.tools.exec_enabled, want, "{value}");
    }
}

#[test]
fn bad_values_are_refused_with_the_variable_named() {
    let token = ["--auth-token", "0123456789abcdef"];
    let err = parse(&[&token[..], &["--timeout-ms", "0"]].concat()).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_TIMEOUT_MS"));
    let err = parse(&[&token[..], &["--runner-url", "https://x"]].concat()).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_RUNNER_URL"));
    let err = parse(&[&token[..], &["--allowed-origins", "evil"]].concat()).unwrap_err();
    assert!(err.to_string().contains("MCP_ALLOWED_ORIGINS"));
    let err = parse(&[&token[..], &["--max-sessions", "0"]].concat()).unwrap_err();
    assert!(err.to_string().contains("MCP_MAX_SESSIONS"));
    let err = parse(&[&token[..], &["--max-header-bytes", "10"]].concat()).unwrap_err();
    assert!(err.to_string().contains("MCP_MAX_HEADER_BYTES"));
}

#[test]
fn limits_have_defaults() {
    let config = parse(&["--auth-token", "0123456789abcdef"]).unwrap();
    assert_eq!(config.http, http_limits::Limits::default());
    assert_eq!(config.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(config.max_sessions, DEFAULT_MAX_SESSIONS);
    assert_eq!(config.max_calls_per_session, DEFAULT_MAX_CALLS_PER_SESSION);
}

#[test]
fn a_handle_key_must_be_long_enough_and_is_never_printed() {
    let token = ["--auth-token", "0123456789abcdef"];
    let err = parse(&[&token[..], &["--handle-key", "short"]].concat()).unwrap_err();
    assert!(err.to_string().contains("SANDBOX_HANDLE_KEY"), "{err}");
    let key = "k".repeat(MIN_HANDLE_KEY_LEN);
    let config = parse(&[&token[..], &["--handle-key", &key]].concat()).unwrap();
    assert!(config.tools.handle_key.is_some());
    assert!(!format!("{config:?}").contains(&key));
    let unset = parse(&[&token[..], &["--handle-key", " "]].concat()).unwrap();
    assert!(unset.tools.handle_key.is_none());
}

#[test]
fn a_comma_list_names_several_runners_that_share_the_token() {
    let config = tools(&[
        "--runner-url",
        "http://10.0.0.1:8081, ,http://10.0.0.2:8081/",
        "--runner-token",
        "tok",
    ])
    .unwrap();
    let runner = config.runner.expect("the first runner");
    assert_eq!(runner.url().as_str(), "http://10.0.0.1:8081/");
    assert_eq!(runner.token(), Some("tok"));
    let more: Vec<_> = config
        .more_runners
        .iter()
        .map(|r| (r.url().as_str(), r.token()))
        .collect();
    assert_eq!(more, [("http://10.0.0.2:8081/", Some("tok"))]);
    let blank = tools(&["--runner-url", " , "]).unwrap();
    assert!(blank.runner.is_none() && blank.more_runners.is_empty());
    let err = tools(&["--runner-url", "http://10.0.0.1:8081,ftp://10.0.0.2"]).unwrap_err();
    assert!(matches!(err, ConfigError::BadRunnerUrl(_)), "{err}");
}

#[test]
fn the_tools_settings_are_taken_as_given_or_defaulted() {
    let config = tools(&[
        "--timeout-ms",
        "2500",
        "--runner-resolve-ms",
        "250",
        "--runner-health-ms",
        "300",
        "--failed-run-is-error",
        "yes",
        "--feature-sandbox-exec",
        "off",
    ])
    .unwrap();
    assert_eq!(config.default_timeout, Some(Duration::from_millis(2_500)));
    assert_eq!(config.cadence.resolve_every, Duration::from_millis(250));
    assert_eq!(config.cadence.health_every, Duration::from_millis(300));
    assert!(config.failed_run_is_error);
    assert!(!config.exec_enabled);
    let defaults = tools(&[]).unwrap();
    assert_eq!(
        defaults.cadence.resolve_every,
        Duration::from_millis(DEFAULT_RESOLVE_MS)
    );
    assert_eq!(
        defaults.cadence.health_every,
        Duration::from_millis(DEFAULT_RUNNER_HEALTH_MS)
    );
    assert!(!defaults.failed_run_is_error);
    assert!(defaults.handle_key.is_none());
    for flag in ["--runner-resolve-ms", "--runner-health-ms"] {
        let polled = Tools::try_parse_from(["sandbox-mcp", flag, "99"]);
        assert!(polled.is_err(), "{flag} 99 is under 100 ms");
    }
}

#[test]
fn origins_and_hosts_take_lists_or_a_star() {
    let config = with_token(&[
        "--allowed-origins",
        "https://app.example, http://localhost:*",
        "--allowed-hosts",
        "mcp.example,mcp.example:3000",
    ])
    .unwrap();
    assert_eq!(
        config.allowed_origins,
        OriginPolicy::List(vec![
            "https://app.example".into(),
            "http://localhost:*".into()
        ])
    );
    assert_eq!(
        config.allowed_hosts,
        HostPolicy::List(vec!["mcp.example".into(), "mcp.example:3000".into()])
    );
    let star = with_token(&[
        "--allowed-origins",
        "https://app.example,*",
        "--allowed-hosts",
        "*",
    ])
    .unwrap();
    assert_eq!(star.allowed_origins, OriginPolicy::Any);
    assert_eq!(star.allowed_hosts, HostPolicy::Any);
    // A list holds on every interface too; blank entries are none.
    let listed = with_token(&["--bind", "0.0.0.0", "--allowed-hosts", "mcp.example, "]).unwrap();
    assert_eq!(
        listed.allowed_hosts,
        HostPolicy::List(vec!["mcp.example".into()])
    );
    let blank = with_token(&["--allowed-origins", " "]).unwrap();
    assert_eq!(blank.allowed_origins, OriginPolicy::Loopback);
}

#[test]
fn limits_are_taken_as_given_and_a_zero_cap_is_refused() {
    let config = with_token(&[
        "--max-body-bytes",
        "1024",
        "--max-calls-per-session",
        "2",
        "--shutdown-grace-ms",
        "5",
    ])
    .unwrap();
    assert_eq!(config.max_body_bytes, 1024);
    assert_eq!(config.max_calls_per_session, 2);
    assert_eq!(config.shutdown_grace, Duration::from_millis(5));
    let defaults = with_token(&[]).unwrap();
    assert_eq!(
        defaults.shutdown_grace,
        Duration::from_millis(DEFAULT_SHUTDOWN_GRACE_MS)
    );
    for (flag, variable) in [
        ("--max-body-bytes", "MCP_MAX_BODY_BYTES"),
        ("--max-calls-per-session", "MCP_MAX_CALLS_PER_SESSION"),
    ] {
        let err = with_token(&[flag, "0"]).unwrap_err();
        assert!(
            matches!(err, ConfigError::ZeroCap(v) if v == variable),
            "{err}"
        );
    }
}

#[test]
fn upstreams_come_from_a_file_whose_refusal_stops_the_start() {
    assert!(tools(&[]).unwrap().upstreams.is_none(), "none by default");
    let dir = std::env::temp_dir().join(format!("config-upstreams-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("upstreams.toml");
    std::fs::write(
        &file,
        "[[server]]\nname = \"docs\"\nurl = \"http://127.0.0.1:9/mcp\"\nallow = [\"*\"]\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let config = tools(&["--upstreams", path]).unwrap();
    assert_eq!(
        config.upstreams.map(|u| u.names()),
        Some(vec!["docs".to_owned()])
    );
    std::fs::write(&file, "[[server]]\nname = \"docs\"\n").unwrap();
    let refused = tools(&["--upstreams", path]).unwrap_err();
    assert!(matches!(refused, ConfigError::Upstreams(_)), "{refused:?}");
    assert!(refused.to_string().contains(path), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_languages_with_a_tool_of_their_own_are_a_checked_list() {
    let config = tools(&[]).unwrap();
    assert_eq!(config.language_tools, LanguageTools::default());
    let config = tools(&["--language-tools", "ruby, bash,,sql"]).unwrap();
    let expected = LanguageTools::parse(&["ruby", "bash", "sql"]).unwrap();
    assert_eq!(config.language_tools, expected);
    let config = tools(&["--language-tools", ""]).unwrap();
    assert_eq!(
        config.language_tools,
        LanguageTools::parse::<&str>(&[]).unwrap(),
        "an empty list: run_code alone"
    );
    let bad = tools(&["--language-tools", "bash,C++"]).unwrap_err();
    assert!(matches!(bad, ConfigError::BadLanguageTool(_)), "{bad}");
    assert!(bad.to_string().contains("\"C++\""), "{bad}");
}
