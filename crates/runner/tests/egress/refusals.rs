//! What stays closed: another name, an IP literal, a run granted nothing, UDP and raw DNS;
//! and with egress off, a sandbox as it always was.

use crate::common::{exit_code, stdout, Runner};
use crate::{run_bash, ALLOWED, OTHER, PAGE};
use serde_json::json;

/// Another name, an IP literal, a run granted nothing, UDP and raw DNS: all refused;
/// the sandbox has loopback only and no route.
pub(crate) async fn everything_else_is_refused(runner: &Runner, web_ip: &str) {
    let other = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{OTHER}/"),
        json!([ALLOWED]),
    )
    .await;
    assert!(stdout(&other).ends_with("\n403"), "{other}");
    assert!(
        stdout(&other).contains(OTHER),
        "the 403 names the host: {other}"
    );
    assert!(!stdout(&other).contains(PAGE), "{other}");
    assert_eq!(other["egress"]["refused"], 1, "{other}");
    let literal = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{web_ip}/"),
        json!([ALLOWED]),
    )
    .await;
    assert!(stdout(&literal).ends_with("\n403"), "{literal}");
    let ungranted = run_bash(
        runner,
        &format!("curl -s -m 10 -w '\\n%{{http_code}}' http://{ALLOWED}/"),
        json!([]),
    )
    .await;
    assert!(stdout(&ungranted).ends_with("\n403"), "{ungranted}");
    let direct = format!(
        "import socket\n\
         for kind, port in [(socket.SOCK_DGRAM, 53), (socket.SOCK_DGRAM, 9), (socket.SOCK_STREAM, 80)]:\n\
         \x20   s = socket.socket(socket.AF_INET, kind); s.settimeout(3)\n\
         \x20   try:\n\
         \x20       s.connect(('{web_ip}', port)); s.send(b'x'); print('SENT', kind, port)\n\
         \x20   except OSError as e:\n\
         \x20       print('refused', kind, port, e.errno)\n"
    );
    let (status, out) = runner
        .post(&json!({"lang": "python", "code": direct, "egress": [ALLOWED]}))
        .await;
    assert_eq!(status, 200, "{out}");
    assert!(!stdout(&out).contains("SENT"), "{out}");
    assert_eq!(stdout(&out).matches("refused").count(), 3, "{out}");
    let ifaces = run_bash(
        runner,
        "tail -n +3 /proc/net/dev | cut -d: -f1; tail -n +2 /proc/net/route | wc -l",
        json!([ALLOWED]),
    )
    .await;
    assert_eq!(
        stdout(&ifaces).split_whitespace().collect::<Vec<_>>(),
        ["lo", "0"],
        "{ifaces}"
    );
}

#[tokio::test]
async fn with_egress_off_a_sandbox_has_no_proxy() {
    let runner = Runner::start();
    let health = runner.health().await;
    assert_eq!(health["limits"]["network"], false, "{health}");
    assert!(health["limits"].get("networkHosts").is_none(), "{health}");
    let code = "env | grep -ci proxy; grep -c ':0C38 ' /proc/net/tcp; true";
    let out = runner.run("bash", code).await;
    assert_eq!(exit_code(&out), 0, "{out}");
    assert_eq!(
        stdout(&out).split_whitespace().collect::<Vec<_>>(),
        ["0", "0"],
        "proxy variables or a listener on 3128: {out}"
    );
    assert!(out.get("egress").is_none(), "{out}");
    let (status, refused) = runner
        .post(&json!({"lang": "bash", "code": "true", "egress": ["example.com"]}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "egress_not_allowed", "{refused}");
    let (status, session) = runner.request("POST", "/sessions", Some(&json!({}))).await;
    assert_eq!(status, 201, "{session}");
    assert!(session.get("egress").is_none(), "{session}");
}
