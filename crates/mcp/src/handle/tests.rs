use super::*;

const SANDBOX: HandleKind = HandleKind::Sandbox;

const SESSION: &str = "0123456789abcdef0123456789abcdef";

fn key() -> HandleKey {
    HandleKey::derive(b"the-runner-token")
}

fn handle() -> SandboxHandle {
    SandboxHandle {
        runner: RunnerId::of_url("http://127.0.0.1:8081"),
        session: SESSION.into(),
    }
}

fn alice() -> Holder {
    Holder::bearer(b"alice's token")
}

fn sealed() -> String {
    handle().seal(&key(), &alice()).unwrap()
}

#[test]
fn a_sealed_handle_opens_for_its_holder_under_its_key() {
    let text = sealed();
    assert!(text.starts_with(PREFIX), "{text}");
    assert!(text.len() <= SANDBOX.max_text_len(), "{text}");
    assert!(
        !text.contains(SESSION),
        "the id is encoded, not spelled out"
    );
    assert_eq!(SandboxHandle::open(&text, &key(), &alice()), Ok(handle()));
    // Blanks a model copies along do not matter.
    let padded = format!("  {text}\n");
    assert_eq!(SandboxHandle::open(&padded, &key(), &alice()), Ok(handle()));
}

#[test]
fn the_same_secret_makes_the_same_key_in_every_replica() {
    let other_replica = HandleKey::derive(b"the-runner-token");
    assert_eq!(
        SandboxHandle::open(&sealed(), &other_replica, &alice()),
        Ok(handle())
    );
    let other_deployment = HandleKey::derive(b"another-runner-token");
    assert_eq!(
        SandboxHandle::open(&sealed(), &other_deployment, &alice()),
        Err(HandleError::NotValid(SANDBOX))
    );
    let random = HandleKey::random().unwrap();
    assert_eq!(
        SandboxHandle::open(&sealed(), &random, &alice()),
        Err(HandleError::NotValid(SANDBOX))
    );
}

#[test]
fn another_credential_cannot_use_it() {
    let bob = Holder::bearer(b"bob's token");
    assert_eq!(
        SandboxHandle::open(&sealed(), &key(), &bob),
        Err(HandleError::NotValid(SANDBOX))
    );
    let process = Holder::process().unwrap();
    assert_ne!(process, Holder::process().unwrap());
    assert_eq!(
        SandboxHandle::open(&sealed(), &key(), &process),
        Err(HandleError::NotValid(SANDBOX))
    );
}

#[test]
fn every_altered_bit_is_refused() {
    let text = sealed();
    let bytes = URL_SAFE_NO_PAD.decode(&text[PREFIX.len()..]).unwrap();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut altered = bytes.clone();
            altered[i] ^= 1 << bit;
            let text = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&altered));
            assert_eq!(
                SandboxHandle::open(&text, &key(), &alice()),
                Err(HandleError::NotValid(SANDBOX)),
                "byte {i} bit {bit}"
            );
        }
    }
}

#[test]
fn a_forged_handle_for_another_runner_or_session_is_refused() {
    // Someone who knows the layout but not the key.
    let forged = SandboxHandle {
        runner: RunnerId::of_url("http://169.254.169.254"),
        session: SESSION.into(),
    }
    .seal(&HandleKey::derive(b"a guess"), &alice())
    .unwrap();
    assert_eq!(
        SandboxHandle::open(&forged, &key(), &alice()),
        Err(HandleError::NotValid(SANDBOX))
    );
    // The tag of a real handle on another body.
    let real = URL_SAFE_NO_PAD.decode(&sealed()[PREFIX.len()..]).unwrap();
    let mut spliced = URL_SAFE_NO_PAD.decode(&forged[PREFIX.len()..]).unwrap();
    let n = spliced.len();
    spliced[n - TAG_LEN..].copy_from_slice(&real[real.len() - TAG_LEN..]);
    let text = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&spliced));
    assert_eq!(
        SandboxHandle::open(&text, &key(), &alice()),
        Err(HandleError::NotValid(SANDBOX))
    );
}

#[test]
fn malformed_text_is_refused_without_panicking() {
    let text = sealed();
    let mut inputs: Vec<String> = vec![
        String::new(),
        PREFIX.into(),
        "sbx".into(),
        "SBX_".into(),
        format!("{PREFIX}="),
        format!("{PREFIX}!!!!"),
        format!("{PREFIX}{}", "A".repeat(10_000)),
        "\u{0}".repeat(64),
        "é".repeat(64),
        text.to_uppercase(),
        text.replace(PREFIX, "sbx-"),
        format!("{text}A"),
        format!("{text}=="),
        text[..text.len() - 1].to_owned(),
        SESSION.into(),
    ];
    // Every prefix of a real handle, and the real one cut anywhere with junk after.
    for end in 0..text.len() {
        inputs.push(text[..end].to_owned());
        inputs.push(format!("{}\u{1F600}", &text[..end]));
    }
    for input in &inputs {
        let result = SandboxHandle::open(input, &key(), &alice());
        assert!(
            matches!(
                result,
                Err(HandleError::Malformed(SANDBOX) | HandleError::NotValid(SANDBOX))
            ),
            "{input:?}: {result:?}"
        );
    }
}

#[test]
fn pseudo_random_bytes_never_open_nor_panic() {
    // A small xorshift: the same inputs every run, many shapes of bytes.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = (next() % (MAX_BYTES as u64 + 8)) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let as_handle = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&bytes));
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        for input in [as_handle, raw] {
            let result = SandboxHandle::open(&input, &key(), &alice());
            assert!(result.is_err(), "{input:?} opened: {result:?}");
        }
    }
}

#[test]
fn an_authenticated_body_of_another_shape_is_unreadable_not_a_panic() {
    // What a future version (or a bug) sharing the key could make: a valid tag on a
    // body this version cannot read.
    for body in [
        vec![2u8; 1 + RUNNER_ID_LEN + 1 + 1],
        [&[VERSION][..], &[0; RUNNER_ID_LEN], &[5], b"ab"].concat(),
        [&[VERSION][..], &[0; RUNNER_ID_LEN], &[2], b"a/"].concat(),
        [&[VERSION][..], &[0; RUNNER_ID_LEN], &[0]].concat(),
    ] {
        let mut bytes = body.clone();
        bytes.extend_from_slice(&tag(&key(), SANDBOX, &body, &alice())[..TAG_LEN]);
        let text = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&bytes));
        let result = SandboxHandle::open(&text, &key(), &alice());
        assert!(
            matches!(
                result,
                Err(HandleError::Unreadable(SANDBOX) | HandleError::Malformed(SANDBOX))
            ),
            "{body:?}: {result:?}"
        );
    }
}

#[test]
fn session_ids_that_would_need_escaping_are_not_sealed() {
    for session in ["", "../x", "a/b", "a b", "é", &"a".repeat(65)] {
        let handle = SandboxHandle {
            session: session.into(),
            ..handle()
        };
        assert_eq!(
            handle.seal(&key(), &alice()),
            Err(HandleError::BadSessionId),
            "{session:?}"
        );
    }
    let longest = SandboxHandle {
        session: "z".repeat(MAX_SESSION_ID_LEN),
        ..handle()
    };
    let text = longest.seal(&key(), &alice()).unwrap();
    assert!(text.len() <= SANDBOX.max_text_len());
    assert_eq!(SandboxHandle::open(&text, &key(), &alice()), Ok(longest));
}

#[test]
fn runners_are_named_by_their_url() {
    assert_eq!(
        RunnerId::of_url("http://runner:8081/"),
        RunnerId::of_url("http://runner:8081")
    );
    assert_ne!(
        RunnerId::of_url("http://runner:8081"),
        RunnerId::of_url("http://runner:8082")
    );
}

#[test]
fn secrets_are_not_printed() {
    assert_eq!(format!("{:?}", key()), "HandleKey(<redacted>)");
    assert_eq!(format!("{:?}", alice()), "Holder(<redacted>)");
}

fn snapshot() -> SnapshotHandle {
    SnapshotHandle {
        runner: RunnerId::of_url("http://127.0.0.1:8081"),
        snapshot: "fedcba9876543210fedcba9876543210".into(),
    }
}

#[test]
fn a_snapshot_id_opens_for_its_holder_and_names_its_runner() {
    let text = snapshot().seal(&key(), &alice()).unwrap();
    assert!(text.starts_with(SNAPSHOT_PREFIX), "{text}");
    assert!(text.len() <= HandleKind::Snapshot.max_text_len(), "{text}");
    assert!(
        !text.contains(&snapshot().snapshot),
        "encoded, not spelled out"
    );
    assert_eq!(
        SnapshotHandle::open(&text, &key(), &alice()),
        Ok(snapshot())
    );
    let other_replica = HandleKey::derive(b"the-runner-token");
    assert_eq!(
        SnapshotHandle::open(&text, &other_replica, &alice()),
        Ok(snapshot())
    );
    let bob = Holder::bearer(b"bob's token");
    assert_eq!(
        SnapshotHandle::open(&text, &key(), &bob),
        Err(HandleError::NotValid(HandleKind::Snapshot))
    );
    let bytes = URL_SAFE_NO_PAD
        .decode(&text[SNAPSHOT_PREFIX.len()..])
        .unwrap();
    for i in 0..bytes.len() {
        let mut altered = bytes.clone();
        altered[i] ^= 0x10;
        let text = format!("{SNAPSHOT_PREFIX}{}", URL_SAFE_NO_PAD.encode(&altered));
        assert_eq!(
            SnapshotHandle::open(&text, &key(), &alice()),
            Err(HandleError::NotValid(HandleKind::Snapshot)),
            "byte {i}"
        );
    }
}

#[test]
fn a_sandbox_id_is_never_a_snapshot_id_nor_the_other_way_round() {
    let sandbox = sealed();
    let snap = snapshot().seal(&key(), &alice()).unwrap();
    assert_eq!(
        SnapshotHandle::open(&sandbox, &key(), &alice()),
        Err(HandleError::Malformed(HandleKind::Snapshot))
    );
    assert_eq!(
        SandboxHandle::open(&snap, &key(), &alice()),
        Err(HandleError::Malformed(SANDBOX))
    );
    // The same bytes under the other prefix: the kinds' keys differ, so the tag fails.
    let swapped = format!("{SNAPSHOT_PREFIX}{}", &sandbox[PREFIX.len()..]);
    assert_eq!(
        SnapshotHandle::open(&swapped, &key(), &alice()),
        Err(HandleError::NotValid(HandleKind::Snapshot))
    );
    let swapped = format!("{PREFIX}{}", &snap[SNAPSHOT_PREFIX.len()..]);
    assert_eq!(
        SandboxHandle::open(&swapped, &key(), &alice()),
        Err(HandleError::NotValid(SANDBOX))
    );
}

#[test]
fn errors_name_the_handle_and_what_to_do() {
    let sandbox = HandleError::NotValid(SANDBOX).to_string();
    assert!(
        sandbox.contains("sandboxId") && sandbox.contains("create_sandbox"),
        "{sandbox}"
    );
    let snap = HandleError::Malformed(HandleKind::Snapshot).to_string();
    assert!(
        snap.contains("snapshotId") && snap.contains("snap_") && snap.contains("snapshot_sandbox"),
        "{snap}"
    );
}
