//! What names resolve to, and IP literals: loopback, private, link-local and the host's own
//! addresses are refused unless a range opens them; the proxy resolves once and connects to
//! an address it checked.

mod support;

use support::{curl, host_address, limits, HttpOrigin, Proxy};

const MIB: u64 = 1 << 20;

fn connect(host: &str, port: u16) -> String {
    format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
}

#[tokio::test]
async fn names_resolving_to_refused_addresses_get_a_403_naming_the_address() {
    let proxy = Proxy::start("*.test", "", limits(MIB, 16), false).await;
    let cases = [
        ("loopback.test", "127.0.0.1", "a loopback address"),
        ("loopback6.test", "::1", "a loopback address"),
        ("private.test", "10.0.0.5", "a private address"),
        ("cgnat.test", "100.64.1.1", "a private address"),
        ("ula.test", "fd12::1", "a private address"),
        ("metadata.test", "169.254.169.254", "a link-local address"),
        ("multicast.test", "224.0.0.251", "a multicast address"),
        ("zero.test", "0.0.0.0", "an unspecified address"),
        ("mapped.test", "::ffff:10.0.0.5", "a private address"),
    ];
    for (name, ip, why) in cases {
        proxy.names.set(name, &[&[ip]]);
        let answer = proxy.raw(&connect(name, 443)).await;
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{name}: {answer}"
        );
        let expected = format!(
            "egress: {name} resolves to {}, {why}\n",
            ip.parse::<std::net::IpAddr>().unwrap()
        );
        assert!(answer.ends_with(&expected), "{name}: {answer}");
    }
    assert_eq!(proxy.sandbox.usage().refused, cases.len() as u64);
    assert_eq!(proxy.sandbox.usage().connections, 0);
}

#[tokio::test]
async fn the_hosts_own_address_is_refused() {
    let Some(own) = host_address().await else {
        eprintln!("no address but loopback on this host: nothing to check");
        return;
    };
    let proxy = Proxy::start("own.test", "", limits(MIB, 16), false).await;
    proxy.names.set("own.test", &[&[own.as_str()]]);
    let answer = proxy.raw(&connect("own.test", 443)).await;
    let expected = format!("egress: own.test resolves to {own}, an address of the runner's host\n");
    assert!(answer.ends_with(&expected), "{answer}");
}

#[tokio::test]
async fn a_range_opens_an_allowed_name_into_it() {
    let origin = HttpOrigin::start("127.0.0.1", b"internal\n".to_vec()).await;
    let proxy = Proxy::start(
        &format!("internal.test:{}", origin.port),
        "127.0.0.1/32",
        limits(MIB, 16),
        false,
    )
    .await;
    proxy.names.set("internal.test", &[&["127.0.0.1"]]);
    let outcome = curl(
        &proxy,
        &format!("http://internal.test:{}/", origin.port),
        &[],
    )
    .await;
    assert_eq!(outcome.stdout, "internal\n", "{outcome:?}");
    // A name the policy does not allow stays refused whatever it resolves to.
    proxy.names.set("elsewhere.test", &[&["127.0.0.1"]]);
    let answer = proxy.raw(&connect("elsewhere.test", origin.port)).await;
    assert!(answer.contains("is not allowed"), "{answer}");
}

#[tokio::test]
async fn ip_literals_only_inside_the_ranges() {
    let origin = HttpOrigin::start("127.0.0.1", b"by address\n".to_vec()).await;
    let proxy = Proxy::start(
        &format!("named.test:{}", origin.port),
        "",
        limits(MIB, 16),
        true,
    )
    .await;
    let answer = proxy.raw(&connect("127.0.0.1", origin.port)).await;
    let expected = format!(
        "egress: 127.0.0.1:{0} is not allowed (allowed: named.test:{0})\n",
        origin.port
    );
    assert!(
        answer.starts_with("HTTP/1.1 403 Forbidden\r\n") && answer.ends_with(&expected),
        "{answer}"
    );
    let answer = proxy
        .raw(&format!(
            "GET http://[::1]:{}/ HTTP/1.1\r\n\r\n",
            origin.port
        ))
        .await;
    assert!(
        answer.contains(&format!("egress: [::1]:{} is not allowed", origin.port)),
        "{answer}"
    );
    assert_eq!(origin.accepted(), 0);

    let opened = Proxy::start("", "127.0.0.0/8", limits(MIB, 16), false).await;
    let outcome = curl(&opened, &format!("http://127.0.0.1:{}/", origin.port), &[]).await;
    assert_eq!(outcome.stdout, "by address\n", "{outcome:?}");
}

#[tokio::test]
async fn a_name_is_resolved_once_and_reached_at_a_checked_address() {
    // 127.0.0.1 is opened by a range; 127.0.0.2 is a refused loopback address where a trap
    // listens on the same port.
    let origin = HttpOrigin::start("127.0.0.1", b"checked\n".to_vec()).await;
    let trap = HttpOrigin::start_on("127.0.0.2", origin.port, b"trap\n".to_vec()).await;
    let proxy = Proxy::start(
        &format!("rebind.test:{}", origin.port),
        "127.0.0.1/32",
        limits(MIB, 16),
        false,
    )
    .await;
    proxy.names.set(
        "rebind.test",
        &[&["127.0.0.2", "127.0.0.1"], &["127.0.0.2"]],
    );
    let url = format!("http://rebind.test:{}/", origin.port);
    let outcome = curl(&proxy, &url, &[]).await;
    assert_eq!(outcome.stdout, "checked\n", "{outcome:?}");
    assert_eq!(proxy.names.lookups(), 1);
    // The name's next answer is the refused address only: refused, the trap never reached.
    let outcome = curl(&proxy, &url, &["-i"]).await;
    assert!(
        outcome
            .stdout
            .contains("rebind.test resolves to 127.0.0.2, a loopback address"),
        "{outcome:?}"
    );
    assert_eq!(proxy.names.lookups(), 2);
    assert_eq!(trap.accepted(), 0);
    assert_eq!(origin.accepted(), 1);
}

#[tokio::test]
async fn a_name_that_does_not_resolve_gets_a_502() {
    let proxy = Proxy::start("missing.test", "", limits(MIB, 16), true).await;
    let answer = proxy.raw(&connect("missing.test", 443)).await;
    assert!(
        answer.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("egress: missing.test does not resolve"),
        "{answer}"
    );
    assert_eq!(proxy.sandbox.usage().refused, 0);
}

#[tokio::test]
async fn the_default_proxy_resolves_as_the_host_and_refuses_loopback() {
    // Egress::new: getaddrinfo (localhost from /etc/hosts), no loopback let through.
    let policy = sandbox_egress::Policy::parse("localhost", "").unwrap();
    let egress = sandbox_egress::Egress::new(policy.clone(), limits(MIB, 16));
    let sandbox = egress.sandbox();
    sandbox.set_grant(policy.grant_all());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let _task = egress.serve(listener, sandbox.clone());
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = connect("localhost", 443);
    tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    let reading = tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer);
    tokio::time::timeout(support::CLIENT_TIME, reading)
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("egress: localhost resolves to "),
        "{answer}"
    );
    assert!(answer.ends_with(", a loopback address\n"), "{answer}");
    assert_eq!(sandbox.usage().refused, 1);
}

#[tokio::test]
async fn an_ipv6_literal_inside_a_range_is_reached() {
    let origin = HttpOrigin::start("::1", b"over ipv6\n".to_vec()).await;
    let proxy = Proxy::start("", "::1/128", limits(MIB, 16), false).await;
    let url = format!("http://[::1]:{}/", origin.port);
    let outcome = curl(&proxy, &url, &[]).await;
    assert_eq!(outcome.stdout, "over ipv6\n", "{outcome:?}");
    let answer = proxy.raw(&connect("[::2]", origin.port)).await;
    let expected = format!(
        "egress: [::2]:{} is not allowed (allowed: ::1/128)\n",
        origin.port
    );
    assert!(answer.ends_with(&expected), "{answer}");
}
