//! TLS through the proxy's CONNECT, and a tunnel whose ClientHello names another host.

use crate::common::stdout;
use crate::{in_test_net, run_bash, runner_in, ALLOWED, PAGE};
use serde_json::json;

/// Over CONNECT, a sandbox's TLS client verifies the host's certificate (the test's own
/// CA: given, it works; the host's CAs alone do not know it), and the proxy closes a
/// tunnel whose ClientHello names another host than the CONNECT's.
#[test]
fn tls_goes_through_connect_and_another_server_name_is_refused() {
    in_test_net(
        "t",
        |net| runner_in(net, ALLOWED),
        |runner, site| async move {
            let cert = site.cert;
            let code = format!(
                "cat > /tmp/ca.pem <<'END'\n{cert}END\n\
                 curl -sS -m 10 --cacert /tmp/ca.pem https://{ALLOWED}/"
            );
            let verified = run_bash(&runner, &code, json!([ALLOWED])).await;
            assert_eq!(stdout(&verified), PAGE, "{verified}");
            let code = format!("curl -s -m 10 https://{ALLOWED}/; echo $?");
            let unknown = run_bash(&runner, &code, json!([ALLOWED])).await;
            assert_eq!(stdout(&unknown).trim(), "60", "not verified: {unknown}");
            let (status, fronted) = runner
                .post(&json!({"lang": "python", "code": FRONTING, "egress": [ALLOWED]}))
                .await;
            assert_eq!(status, 200, "{fronted}");
            let lines: Vec<&str> = stdout(&fronted).lines().collect();
            assert!(
                lines[0].contains(" 200"),
                "the CONNECT is answered: {fronted}"
            );
            assert!(
                lines[1].starts_with("closed"),
                "the tunnel is closed: {fronted}"
            );
        },
    );
}

/// A CONNECT to the granted host whose ClientHello names the other: prints the proxy's
/// status line, then `closed ...` or `ANSWERED ...`.
const FRONTING: &str = r#"
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n")
print(s.recv(4096).decode().split("\r\n")[0])
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    tls = context.wrap_socket(s, server_hostname="other.test")
    tls.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
    print("ANSWERED", tls.recv(4096)[:40])
except (OSError, ssl.SSLError) as e:
    print("closed", type(e).__name__)
"#;
