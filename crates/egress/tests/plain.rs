//! Plain HTTP through the proxy: curl and Python's urllib with HTTP_PROXY, the request
//! forwarded as sent in origin form with `Connection: close`.

mod support;

use support::{curl, limits, urllib, HttpOrigin, Proxy};

const MIB: u64 = 1 << 20;

async fn setup() -> (HttpOrigin, Proxy) {
    let origin = HttpOrigin::start("127.0.0.1", b"hello over http\n".to_vec()).await;
    let proxy = Proxy::start(
        &format!("plain.test:{}", origin.port),
        "",
        limits(MIB, 16),
        true,
    )
    .await;
    proxy.names.set("plain.test", &[&["127.0.0.1"]]);
    (origin, proxy)
}

#[tokio::test]
async fn an_allowed_name_works_from_curl() {
    let (origin, proxy) = setup().await;
    let url = format!("http://plain.test:{}/path?q=1", origin.port);
    let outcome = curl(&proxy, &url, &["-H", "X-Test: yes"]).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.stdout, "hello over http\n");
    let heads = origin.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let head = &heads[0];
    assert!(head.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("Host: plain.test:{}\r\n", origin.port)),
        "{head}"
    );
    assert!(head.contains("X-Test: yes\r\n"), "{head}");
    assert!(head.ends_with("Connection: close\r\n\r\n"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("proxy-connection"),
        "{head}"
    );
    let usage = proxy.sandbox.usage();
    assert_eq!(usage.connections, 1);
    assert_eq!(usage.bytes_out as usize, head.len());
}

#[tokio::test]
async fn an_allowed_name_works_from_python_urllib() {
    let (origin, proxy) = setup().await;
    let outcome = urllib(&proxy, &format!("http://plain.test:{}/", origin.port), None).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.stdout, "hello over http\n");
}

#[tokio::test]
async fn a_name_not_granted_gets_a_403_naming_the_host_and_the_rule() {
    let (origin, proxy) = setup().await;
    proxy.names.set("other.test", &[&["127.0.0.1"]]);
    let url = format!("http://other.test:{}/", origin.port);
    let outcome = urllib(&proxy, &url, None).await;
    let expected = format!(
        "403\negress: other.test:{0} is not allowed (allowed: plain.test:{0})\n",
        origin.port
    );
    assert_eq!(outcome.stdout, expected, "{outcome:?}");
    let outcome = curl(&proxy, &url, &["-i"]).await;
    assert!(
        outcome.stdout.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{outcome:?}"
    );
    assert_eq!(origin.accepted(), 0);
    assert_eq!(
        proxy.names.lookups(),
        0,
        "a name not granted is never resolved"
    );
    assert_eq!(proxy.sandbox.usage().refused, 2);
    let metrics = proxy.egress.metrics();
    assert!(
        metrics.contains("sandbox_runner_egress_refused_total{host=\"_other\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_host_header_naming_another_host_is_refused() {
    let (origin, proxy) = setup().await;
    let request = format!(
        "GET http://plain.test:{}/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
        origin.port
    );
    let answer = proxy.raw(&request).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("the Host header (other.test) names another host"),
        "{answer}"
    );
    assert_eq!(origin.accepted(), 0);
}

#[tokio::test]
async fn https_without_connect_and_other_schemes_get_400() {
    let (_origin, proxy) = setup().await;
    let answer = proxy.raw("GET https://plain.test/ HTTP/1.1\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(answer.contains("CONNECT"), "{answer}");
    let answer = proxy
        .raw("GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
        .await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
}

/// A connection handed over as a stream (a VM's tunnel) is served as a listener's is,
/// under the same caps, and the task ends once no more can come and the last has ended.
#[tokio::test]
async fn streams_handed_over_are_served_as_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (origin, proxy) = setup().await;
    let sandbox = proxy.egress.sandbox();
    sandbox.set_grant(proxy.egress.policy().grant_all());
    let (streams, handed) = tokio::sync::mpsc::channel(4);
    let serving = proxy.egress.serve_streams(handed, sandbox.clone());
    let ask = |host: &str| {
        format!(
            "GET http://{host}:{0}/ HTTP/1.1\r\nHost: {host}:{0}\r\n\r\n",
            origin.port
        )
    };
    let mut answers = Vec::new();
    for host in ["plain.test", "other.test"] {
        let (mut ours, theirs) = tokio::io::duplex(64 * 1024);
        streams.send(theirs).await.unwrap();
        ours.write_all(ask(host).as_bytes()).await.unwrap();
        let mut answer = String::new();
        ours.read_to_string(&mut answer).await.unwrap();
        answers.push(answer);
    }
    assert!(answers[0].ends_with("hello over http\n"), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 403"), "{}", answers[1]);
    assert!(answers[1].contains("other.test"), "{}", answers[1]);
    let usage = sandbox.usage();
    assert_eq!((usage.connections, usage.refused), (1, 1), "{usage:?}");
    drop(streams);
    tokio::time::timeout(std::time::Duration::from_secs(5), serving)
        .await
        .expect("the task ends with its streams")
        .unwrap();
}
