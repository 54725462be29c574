//! The policy's forms, grants and refusals.
use super::*;

fn policy(allow: &str) -> Policy {
    Policy::parse(allow, "").unwrap()
}

fn grant(policy: &Policy, names: &[&str]) -> Result<Vec<String>, Vec<String>> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    policy.grant(&names).map(|g| g.names()).map_err(|e| e.0)
}

fn name(text: &str) -> Host {
    Host::parse(text).unwrap()
}

#[test]
fn empty_lists_are_off() {
    assert!(Policy::parse("", "").unwrap().is_off());
    assert!(Policy::parse(" , ", " ").unwrap().is_off());
    assert!(!Policy::parse("", "10.0.0.0/8").unwrap().is_off());
    assert!(!policy("pypi.org").is_off());
}

#[test]
fn names_are_normalized() {
    let policy = policy(" PyPI.org. , *.PythonHosted.org,internal.example:8443, pypi.org");
    assert_eq!(
        policy.names(),
        vec!["pypi.org", "*.pythonhosted.org", "internal.example:8443"]
    );
    let policy = Policy::parse("", "10.1.2.3/16, 2001:db8::1, 192.0.2.7").unwrap();
    assert_eq!(
        policy.ranges(),
        vec!["10.1.0.0/16", "2001:db8::1/128", "192.0.2.7/32"]
    );
}

#[test]
fn bad_entries_are_named() {
    let cases = [
        ("pypi.org:0", "pypi.org:0"),
        ("pypi.org:65536", "pypi.org:65536"),
        ("pypi.org:+443", "pypi.org:+443"),
        ("pypi.org:", "pypi.org:"),
        ("bücher.example", "bücher.example"),
        ("*", "*"),
        ("a.*.org", "a.*.org"),
        ("*example.org", "*example.org"),
        ("a..org", "a..org"),
        ("-a.org", "-a.org"),
        ("a b.org", "a b.org"),
        ("10.0.0.1", "10.0.0.1"),
        ("10.0.0.1:443", "10.0.0.1:443"),
        ("[::1]:443", "[::1]:443"),
        ("10.0.0.0/8", "10.0.0.0/8"),
    ];
    for (entry, named) in cases {
        let error = Policy::parse(&format!("pypi.org,{entry}"), "").unwrap_err();
        assert!(
            error.to_string().contains(&format!("`{named}`")),
            "{entry}: {error}"
        );
    }
    let error = Policy::parse("", "10.0.0.0/33").unwrap_err();
    assert_eq!(
        error,
        PolicyError::BadRange {
            entry: "10.0.0.0/33".into()
        }
    );
    assert!(Policy::parse("", "example.org").is_err());
    let label = format!("{}.org", "a".repeat(64));
    assert!(Policy::parse(&label, "").is_err());
    let error = Policy::parse("bücher.example", "").unwrap_err();
    assert!(error.to_string().contains("xn--"), "{error}");
}

#[test]
fn lists_are_bounded() {
    let long = vec!["a.org"; MAX_ENTRIES + 1].join(",");
    assert!(matches!(
        Policy::parse(&long, ""),
        Err(PolicyError::TooMany { .. })
    ));
    let policy = policy("a.org");
    let names = vec!["a.org".to_string(); MAX_ENTRIES + 1];
    assert!(policy.grant(&names).is_err());
}

#[test]
fn a_host_rule_covers_the_host_on_80_and_443() {
    let grant = policy("pypi.org").grant_all();
    assert!(grant.allows(&name("pypi.org"), 443));
    assert!(grant.allows(&name("pypi.org"), 80));
    assert!(grant.allows(&name("PYPI.ORG."), 443));
    assert!(!grant.allows(&name("pypi.org"), 8443));
    assert!(!grant.allows(&name("www.pypi.org"), 443));
    assert!(!grant.allows(&name("evilpypi.org"), 443));
}

#[test]
fn a_wildcard_covers_subdomains_not_the_domain() {
    let grant = policy("*.pythonhosted.org").grant_all();
    assert!(grant.allows(&name("files.pythonhosted.org"), 443));
    assert!(grant.allows(&name("a.b.pythonhosted.org"), 443));
    assert!(!grant.allows(&name("pythonhosted.org"), 443));
    assert!(!grant.allows(&name("evilpythonhosted.org"), 443));
}

#[test]
fn a_port_rule_covers_that_port_only() {
    let grant = policy("internal.example:8443").grant_all();
    assert!(grant.allows(&name("internal.example"), 8443));
    assert!(!grant.allows(&name("internal.example"), 443));
    assert!(!grant.allows(&name("internal.example"), 80));
}

#[test]
fn a_wildcard_with_a_port_and_subsets_of_ports() {
    let policy = policy("*.internal.example:8443,pypi.org:443");
    let all = policy.grant_all();
    assert!(all.allows(&name("a.internal.example"), 8443));
    assert!(!all.allows(&name("a.internal.example"), 443));
    assert!(!all.allows(&name("pypi.org"), 80));
    assert_eq!(
        grant(&policy, &["a.internal.example:8443"]),
        Ok(vec!["a.internal.example:8443".into()])
    );
    assert_eq!(
        grant(&policy, &["pypi.org:443"]),
        Ok(vec!["pypi.org:443".into()])
    );
    // `pypi.org` alone means 80 and 443, more than the rule covers.
    assert_eq!(grant(&policy, &["pypi.org"]), Err(vec!["pypi.org".into()]));
    assert_eq!(
        grant(&policy, &["a.internal.example"]),
        Err(vec!["a.internal.example".into()])
    );
}

#[test]
fn addresses_are_allowed_only_inside_the_ranges() {
    let grant = Policy::parse("pypi.org", "10.1.0.0/16")
        .unwrap()
        .grant_all();
    assert!(grant.allows(&Host::parse("10.1.2.3").unwrap(), 5000));
    assert!(!grant.allows(&Host::parse("10.2.0.1").unwrap(), 443));
    let grant = policy("pypi.org").grant_all();
    assert!(!grant.allows(&Host::parse("151.101.0.223").unwrap(), 443));
}

#[test]
fn a_grant_is_a_subset_of_the_policy() {
    let policy = Policy::parse(
        "pypi.org,*.pythonhosted.org,internal.example:8443",
        "10.1.0.0/16",
    )
    .unwrap();
    assert_eq!(grant(&policy, &[]), Ok(vec![]));
    assert_eq!(grant(&policy, &["PyPI.org."]), Ok(vec!["pypi.org".into()]));
    assert_eq!(
        grant(&policy, &["pypi.org:443"]),
        Ok(vec!["pypi.org:443".into()])
    );
    assert_eq!(
        grant(&policy, &["files.pythonhosted.org"]),
        Ok(vec!["files.pythonhosted.org".into()])
    );
    assert_eq!(
        grant(&policy, &["*.pythonhosted.org"]),
        Ok(vec!["*.pythonhosted.org".into()])
    );
    assert_eq!(
        grant(&policy, &["*.a.pythonhosted.org"]),
        Ok(vec!["*.a.pythonhosted.org".into()])
    );
    assert_eq!(
        grant(&policy, &["internal.example:8443"]),
        Ok(vec!["internal.example:8443".into()])
    );
    assert_eq!(
        grant(&policy, &["10.1.2.0/24", "10.1.0.9"]),
        Ok(vec!["10.1.2.0/24".into(), "10.1.0.9/32".into()])
    );
    let outside = [
        "pypi.org:8080",
        "pythonhosted.org",
        "internal.example",
        "example.com",
        "*.org",
        "10.2.0.0/16",
        "bad name",
    ];
    for entry in outside {
        assert_eq!(
            grant(&policy, &["pypi.org", entry]),
            Err(vec![entry.to_string()]),
            "{entry}"
        );
    }
    let error = policy.grant(&["a.com".into(), "b.com".into()]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "egress: not within the operator's policy: a.com, b.com"
    );
}

#[test]
fn grant_all_and_none() {
    let policy = Policy::parse("pypi.org,*.pythonhosted.org", "10.1.0.0/16").unwrap();
    assert_eq!(
        policy.grant_all().names(),
        vec!["pypi.org", "*.pythonhosted.org", "10.1.0.0/16"]
    );
    assert!(Grant::none().is_none());
    assert_eq!(Grant::none().names(), Vec::<String>::new());
    assert!(!Grant::none().allows(&name("pypi.org"), 443));
}

#[test]
fn labels_are_the_covering_entry() {
    let policy = Policy::parse("pypi.org,*.pythonhosted.org", "10.1.0.0/16").unwrap();
    assert_eq!(
        policy
            .label(&name("files.pythonhosted.org"), 443)
            .as_deref(),
        Some("*.pythonhosted.org")
    );
    assert_eq!(
        policy
            .label(&Host::parse("10.1.0.1").unwrap(), 80)
            .as_deref(),
        Some("10.1.0.0/16")
    );
    assert_eq!(policy.label(&name("example.com"), 443), None);
}
