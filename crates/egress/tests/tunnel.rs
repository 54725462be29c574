//! CONNECT tunnels to a real TLS server, with curl, Python's urllib and openssl as clients:
//! the allowed name works, the TLS server name must be the CONNECT host.

mod support;

use support::{client, curl, limits, urllib, Proxy, TlsOrigin};

const MIB: u64 = 1 << 20;

async fn setup() -> (TlsOrigin, Proxy) {
    let origin = TlsOrigin::start(&["allowed.test", "other.test"]).await;
    let allow = format!("allowed.test:{0},other.test:{0}", origin.port);
    let proxy = Proxy::start(&allow, "", limits(MIB, 16), true).await;
    proxy.names.set("allowed.test", &[&["127.0.0.1"]]);
    proxy.names.set("other.test", &[&["127.0.0.1"]]);
    (origin, proxy)
}

#[tokio::test]
async fn an_allowed_name_works_from_curl_over_https_proxy() {
    let (origin, proxy) = setup().await;
    let url = format!("https://allowed.test:{}/", origin.port);
    let cacert = origin.certificate.cert().display().to_string();
    let outcome = curl(&proxy, &url, &["--cacert", &cacert]).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.stdout, "hello over tls\n");
    let usage = proxy.sandbox.usage();
    assert_eq!((usage.connections, usage.refused), (1, 0), "{usage:?}");
    assert!(usage.bytes_in > 500 && usage.bytes_out > 200, "{usage:?}");
    let metrics = proxy.egress.metrics();
    let label = format!(
        "sandbox_runner_egress_connections_total{{host=\"allowed.test:{}\"}} 1",
        origin.port
    );
    assert!(metrics.contains(&label), "{metrics}");
}

#[tokio::test]
async fn an_allowed_name_works_from_python_urllib() {
    let (origin, proxy) = setup().await;
    let url = format!("https://allowed.test:{}/", origin.port);
    let outcome = urllib(&proxy, &url, Some(&origin.certificate.cert())).await;
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.stdout, "hello over tls\n");
}

#[tokio::test]
async fn a_server_name_other_than_the_connect_host_is_closed() {
    let (origin, proxy) = setup().await;
    // The tunnel is asked for allowed.test; the TLS server name says other.test.
    let url = format!("https://other.test:{}/", origin.port);
    let connect_to = format!("other.test:{0}:allowed.test:{0}", origin.port);
    let cacert = origin.certificate.cert().display().to_string();
    let proxy_only_allowed = Proxy::start(
        &format!("allowed.test:{}", origin.port),
        "",
        limits(MIB, 16),
        true,
    )
    .await;
    proxy_only_allowed
        .names
        .set("allowed.test", &[&["127.0.0.1"]]);
    let outcome = curl(
        &proxy_only_allowed,
        &url,
        &["--cacert", &cacert, "--connect-to", &connect_to],
    )
    .await;
    assert!(!outcome.success, "{outcome:?}");
    assert!(!outcome.stdout.contains("hello"), "{outcome:?}");
    let usage = proxy_only_allowed.sandbox.usage();
    assert_eq!(usage.refused, 1, "{usage:?}");
    // Both names allowed: still refused, the server name must be the CONNECT host.
    let outcome = curl(
        &proxy,
        &url,
        &["--cacert", &cacert, "--connect-to", &connect_to],
    )
    .await;
    assert!(!outcome.success, "{outcome:?}");
    assert_eq!(proxy.sandbox.usage().refused, 1);
}

/// openssl s_client through the proxy to allowed.test, with `extra` arguments.
async fn s_client(proxy: &Proxy, origin: &TlsOrigin, extra: &[&str]) -> support::Outcome {
    let proxy_address = proxy.address.to_string();
    let target = format!("allowed.test:{}", origin.port);
    let ca = origin.certificate.cert().display().to_string();
    let mut args = vec![
        "s_client",
        "-proxy",
        &proxy_address,
        "-connect",
        &target,
        "-CAfile",
        &ca,
    ];
    args.extend(extra);
    client("openssl", &args, &[]).await
}

#[tokio::test]
async fn a_client_hello_without_a_server_name_is_closed() {
    let (origin, proxy) = setup().await;
    let outcome = s_client(&proxy, &origin, &["-noservername"]).await;
    assert!(
        outcome.stdout.contains("no peer certificate available"),
        "{outcome:?}"
    );
    assert_eq!(proxy.sandbox.usage().refused, 1, "{outcome:?}");
    // The same client with the server name gets through.
    let outcome = s_client(&proxy, &origin, &["-servername", "allowed.test"]).await;
    assert!(
        outcome.stdout.contains("-----BEGIN CERTIFICATE-----"),
        "{outcome:?}"
    );
    assert_eq!(proxy.sandbox.usage().refused, 1);
}

#[tokio::test]
async fn a_tunnel_that_is_not_tls_is_closed() {
    let (origin, proxy) = setup().await;
    let request = format!(
        "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\nGET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        origin.port
    );
    let answer = proxy.raw(&request).await;
    assert_eq!(answer, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_eq!(proxy.sandbox.usage().refused, 1);
}

#[tokio::test]
async fn a_refused_tunnel_as_curl_and_python_see_it() {
    let (origin, proxy) = setup().await;
    proxy.names.set("elsewhere.test", &[&["127.0.0.1"]]);
    let url = format!("https://elsewhere.test:{}/", origin.port);
    let cacert = origin.certificate.cert().display().to_string();
    let outcome = curl(&proxy, &url, &["--cacert", &cacert]).await;
    assert!(!outcome.success, "{outcome:?}");
    assert!(
        outcome
            .stderr
            .contains("CONNECT tunnel failed, response 403"),
        "{outcome:?}"
    );
    let outcome = urllib(&proxy, &url, Some(&origin.certificate.cert())).await;
    assert!(!outcome.success, "{outcome:?}");
    assert!(
        outcome
            .stderr
            .contains("Tunnel connection failed: 403 Forbidden"),
        "{outcome:?}"
    );
    assert_eq!(proxy.sandbox.usage().refused, 2);
}
