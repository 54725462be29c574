//! Every refusal of `MCP_UPSTREAMS`, and what a good file becomes.

use super::*;

const SECRET: &str = "Bearer s3cr3t-value-never-shown";

fn parse(text: &str) -> Result<UpstreamsConfig, UpstreamsError> {
    UpstreamsConfig::parse(
        Path::new("/etc/sandbox-mcp/upstreams.toml"),
        text,
        Path::new("/etc/sandbox-mcp"),
    )
}

/// The refusal of `text`, as the operator reads it (never showing the secret).
fn refusal(text: &str) -> String {
    let error = parse(text).expect_err("refused");
    let message = error.to_string();
    assert!(!message.contains("s3cr3t"), "{message}");
    assert!(
        message.starts_with("MCP_UPSTREAMS: /etc/sandbox-mcp/upstreams.toml"),
        "{message}"
    );
    message
}

fn entry_error(text: &str) -> EntryError {
    match parse(text) {
        Err(UpstreamsError::Entry { error, .. }) => error,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_good_file_becomes_servers() {
    let text = format!(
        r#"
[[server]]
name = "tracker"
url = "http://tracker.internal:8080/mcp"
headers = {{ Authorization = "{SECRET}" }}
allow = ["search_*", "get_issue"]
max_calls_per_run = 5
timeout_ms = 1500

[[server]]
name = "everything"
command = ["node", "server.js"]
allow = ["*"]
"#
    );
    let config = parse(&text).expect("valid");
    assert_eq!(config.names(), ["tracker", "everything"]);
    let tracker = &config.servers[0];
    assert_eq!(tracker.max_calls_per_run, 5);
    assert_eq!(tracker.timeout, Duration::from_millis(1500));
    assert!(tracker.allow[0].matches("search_issues"));
    let Transport::Http { url, headers } = &tracker.transport else {
        panic!("http");
    };
    assert_eq!(url.as_str(), "http://tracker.internal:8080/mcp");
    assert_eq!(headers.0[0].1.to_str().unwrap(), SECRET);
    assert!(headers.0[0].1.is_sensitive());
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cr3t"), "Debug shows a secret: {shown}");
    assert!(shown.contains("authorization"), "{shown}");
    let everything = &config.servers[1];
    assert_eq!(everything.max_calls_per_run, DEFAULT_MAX_CALLS_PER_RUN);
    assert_eq!(
        everything.timeout,
        Duration::from_millis(DEFAULT_TIMEOUT_MS)
    );
    let Transport::Stdio { command, dir } = &everything.transport else {
        panic!("stdio");
    };
    assert_eq!(command, &["node", "server.js"]);
    assert_eq!(dir, Path::new("/etc/sandbox-mcp"));
}

#[test]
fn bad_toml_and_unknown_keys_say_where() {
    let message = refusal(
        "[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nallow = [\"*\"]\nenv = { A = \"1\" }\n",
    );
    assert!(message.contains("unknown field `env`"), "{message}");
    assert!(message.contains("line 5"), "{message}");
    let message = refusal("[[servers]]\nname = \"a\"\n");
    assert!(message.contains("unknown field `servers`"), "{message}");
    let message = refusal("[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nallow = [\"*\"\n");
    assert!(message.contains("line"), "{message}");
    let message = refusal("[[server]]\nurl = \"http://x/mcp\"\nallow = [\"*\"]\n");
    assert!(message.contains("missing field `name`"), "{message}");
    // A parse error on the headers' line does not quote the line.
    let message = refusal(&format!(
        "[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nheaders = {{ Authorization = \"{SECRET}\" \"more\" }}\nallow = [\"*\"]\n"
    ));
    assert!(message.contains("line 4"), "{message}");
    assert!(matches!(
        parse("# nothing\n"),
        Err(UpstreamsError::NoServers { .. })
    ));
}

#[test]
fn names_must_be_identifiers_given_once() {
    let server = |name: &str| {
        format!("[[server]]\nname = \"{name}\"\nurl = \"http://x/mcp\"\nallow = [\"*\"]\n")
    };
    for bad in [
        "",
        "2x",
        "a-b",
        "class",
        "list",
        "import",
        "x.y",
        &"a".repeat(65),
    ] {
        assert_eq!(
            entry_error(&server(bad)),
            EntryError::NotIdentifier,
            "{bad:?}"
        );
    }
    let message = refusal(&server("my-docs"));
    assert!(message.contains("server #1 (\"my-docs\")"), "{message}");
    let twice = server("tracker") + &server("tracker");
    assert_eq!(entry_error(&twice), EntryError::Duplicate);
    assert!(refusal(&twice).contains("server #2 (\"tracker\")"));
}

#[test]
fn exactly_one_of_url_and_command() {
    assert_eq!(
        entry_error("[[server]]\nname = \"a\"\nallow = [\"*\"]\n"),
        EntryError::NoTransport
    );
    assert_eq!(
        entry_error("[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\ncommand = [\"node\"]\nallow = [\"*\"]\n"),
        EntryError::BothTransports
    );
    for url in [
        "ftp://x/mcp",
        "not a url",
        "http://user:pw@x/mcp",
        "https://x/mcp",
    ] {
        let text = format!("[[server]]\nname = \"a\"\nurl = \"{url}\"\nallow = [\"*\"]\n");
        assert!(matches!(entry_error(&text), EntryError::BadUrl(_)), "{url}");
    }
    for command in ["[]", "[\"\"]", "[\" \"]"] {
        let text = format!("[[server]]\nname = \"a\"\ncommand = {command}\nallow = [\"*\"]\n");
        assert!(
            matches!(entry_error(&text), EntryError::BadCommand(_)),
            "{command}"
        );
    }
    let text = format!(
        "[[server]]\nname = \"a\"\ncommand = [\"node\"]\nheaders = {{ Authorization = \"{SECRET}\" }}\nallow = [\"*\"]\n"
    );
    assert_eq!(entry_error(&text), EntryError::HeadersWithCommand);
}

#[test]
fn allow_must_list_something() {
    let base = "[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\n";
    assert_eq!(entry_error(base), EntryError::EmptyAllow);
    assert_eq!(
        entry_error(&format!("{base}allow = []\n")),
        EntryError::EmptyAllow
    );
    assert!(refusal(base).contains("allow lists no tool"));
    assert!(matches!(
        entry_error(&format!("{base}allow = [\"\"]\n")),
        EntryError::BadAllow(_)
    ));
    let many = vec!["\"x\""; MAX_GLOBS + 1].join(",");
    assert!(matches!(
        entry_error(&format!("{base}allow = [{many}]\n")),
        EntryError::BadAllow(_)
    ));
}

#[test]
fn numbers_and_headers_are_bounded() {
    let base = "[[server]]\nname = \"a\"\nurl = \"http://x/mcp\"\nallow = [\"*\"]\n";
    for (line, expected) in [
        ("max_calls_per_run = 0", EntryError::BadMaxCalls(0)),
        ("max_calls_per_run = 1025", EntryError::BadMaxCalls(1025)),
        ("timeout_ms = 0", EntryError::BadTimeout(0)),
        ("timeout_ms = 3600001", EntryError::BadTimeout(3_600_001)),
    ] {
        assert_eq!(entry_error(&format!("{base}{line}\n")), expected);
    }
    let negative = refusal(&format!("{base}max_calls_per_run = -1\n"));
    assert!(negative.contains("line 5"), "{negative}");
    let header = |name: &str, value: &str| {
        entry_error(&format!("{base}headers = {{ \"{name}\" = \"{value}\" }}\n"))
    };
    assert!(matches!(
        header("Bad Name", "x"),
        EntryError::BadHeader { .. }
    ));
    let long = "s3cr3t".repeat(2000);
    let error = header("Authorization", &long);
    assert!(matches!(error, EntryError::BadHeader { .. }));
    assert!(!error.to_string().contains("s3cr3t"));
    let error = header("Authorization", "s3cr3t\\u0001");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
    let many: Vec<String> = (0..=MAX_HEADERS).map(|i| format!("h{i} = \"v\"")).collect();
    let text = format!("{base}headers = {{ {} }}\n", many.join(", "));
    assert_eq!(entry_error(&text), EntryError::TooManyHeaders);
}

#[test]
fn too_many_servers_and_too_large_a_file() {
    let one = |i: usize| {
        format!("[[server]]\nname = \"s{i}\"\nurl = \"http://x/mcp\"\nallow = [\"*\"]\n")
    };
    let text: String = (0..=MAX_SERVERS).map(one).collect();
    assert!(matches!(
        parse(&text),
        Err(UpstreamsError::TooManyServers { count, .. }) if count == MAX_SERVERS + 1
    ));
    let dir = std::env::temp_dir().join(format!("upstreams-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.toml");
    std::fs::write(&big, "#".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
    assert!(matches!(
        UpstreamsConfig::load(&big),
        Err(UpstreamsError::TooLarge { .. })
    ));
    let missing = dir.join("missing.toml");
    let error = UpstreamsConfig::load(&missing).expect_err("missing");
    assert!(error.to_string().contains("missing.toml"), "{error}");
    let good = dir.join("good.toml");
    std::fs::write(&good, one(1)).unwrap();
    let loaded = UpstreamsConfig::load(&good).expect("loads");
    let Transport::Http { .. } = loaded.servers[0].transport else {
        panic!("http");
    };
    std::fs::remove_dir_all(&dir).unwrap();
}
