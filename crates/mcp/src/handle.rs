//! The `sandboxId` a client holds: an opaque, unguessable handle that carries everything
//! needed to reach its sandbox (which configured runner holds it, and the runner's session
//! id), authenticated with an HMAC that also binds it to the credential that made it. No
//! MCP server keeps any state about it, so any replica with the same configuration can
//! serve it.
//!
//! The text is `sbx_` and the unpadded base64url of:
//!
//! | bytes | what |
//! |---|---|
//! | 1 | the format's version, 1 |
//! | 8 | the runner: the first 8 bytes of SHA-256 of its URL without user name and password ([`RunnerId`]) |
//! | 1 | the length of the runner's session id, 1 to 64 |
//! | 1..=64 | the runner's session id (`[0-9A-Za-z_-]`) |
//! | 16 | the tag: HMAC-SHA256 under the [`HandleKey`] of the bytes above followed by the [`Holder`], cut to 128 bits |
//!
//! The holder (a hash of the bearer token, or a secret of the stdio process) is part of what
//! the tag covers but not of the handle: a handle presented with another credential fails
//! like a forged one. The tag is checked, in constant time, before anything in the handle
//! is read.

use std::fmt;
use std::io::Read;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What every sandbox id starts with.
pub const PREFIX: &str = "sbx_";
const VERSION: u8 = 1;
const RUNNER_ID_LEN: usize = 8;
const TAG_LEN: usize = 16;
/// The longest runner session id a handle carries.
pub const MAX_SESSION_ID_LEN: usize = 64;
const MIN_BYTES: usize = 1 + RUNNER_ID_LEN + 1 + 1 + TAG_LEN;
const MAX_BYTES: usize = 1 + RUNNER_ID_LEN + 1 + MAX_SESSION_ID_LEN + TAG_LEN;
/// Base64 of `MAX_BYTES` without padding, and the prefix: no longer text can be a handle.
const MAX_TEXT_LEN: usize = PREFIX.len() + MAX_BYTES.div_ceil(3) * 4;

/// The HKDF `info` of the key: keys for anything else drawn from the same secret differ.
const KEY_INFO: &[u8] = b"sandbox-mcp sandbox handle key v1";

/// Why a sandbox id cannot be used. Each says to make a new sandbox: a client cannot
/// repair an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Not the shape of a sandbox id at all (prefix, alphabet or length).
    #[error(
        "this sandboxId is not a sandbox id this server gives out (they start with {PREFIX:?}); \
         create a new sandbox with create_sandbox and use the sandboxId it returns"
    )]
    Malformed,
    /// The tag does not verify: altered or forged, made for another credential, or made
    /// under another key (another deployment, or a changed runner token or
    /// `SANDBOX_HANDLE_KEY`).
    #[error(
        "this sandboxId was not made by this server for your credentials (it may be altered, \
         from another client, or from before the server's key changed); create a new sandbox \
         with create_sandbox"
    )]
    NotValid,
    /// The tag verifies but the contents are not a handle of this version.
    #[error(
        "this sandboxId is of a format this server does not read; create a new sandbox with \
         create_sandbox"
    )]
    Unreadable,
    /// A runner gave a session id that does not fit in a handle (sealing only).
    #[error("the runner's session id does not fit in a sandbox id (1 to {MAX_SESSION_ID_LEN} of [0-9A-Za-z_-])")]
    BadSessionId,
}

/// The secret that authenticates handles.
#[derive(Clone)]
pub struct HandleKey([u8; 32]);

impl HandleKey {
    /// The key drawn from `secret` (the runner token, or `SANDBOX_HANDLE_KEY`) with
    /// HKDF-SHA256 and a label of its own: every replica given the same secret has the
    /// same key, and the key tells nothing of the secret.
    pub fn derive(secret: &[u8]) -> Self {
        let mut key = [0u8; 32];
        hkdf::Hkdf::<Sha256>::new(None, secret)
            .expand(KEY_INFO, &mut key)
            .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 output length"));
        HandleKey(key)
    }

    /// A key of this process alone (no secret configured): handles work in this process
    /// only.
    pub fn random() -> std::io::Result<Self> {
        random_bytes().map(HandleKey)
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"))
    }
}

impl fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandleKey(<redacted>)")
    }
}

/// Who may use a handle: a digest of the credential that made it. Never part of the
/// handle itself, only of what its tag covers.
#[derive(Clone, PartialEq, Eq)]
pub struct Holder([u8; 32]);

impl Holder {
    /// The holder of a bearer token (its SHA-256, under a label of its own).
    pub fn bearer(token: &[u8]) -> Self {
        let mut digest = Sha256::new();
        digest.update(b"sandbox-mcp bearer token\0");
        digest.update(token);
        Holder(digest.finalize().into())
    }

    /// A holder of this process alone: a stdio server's client is the process's, and
    /// another process's handles are not its.
    pub fn process() -> std::io::Result<Self> {
        let secret: [u8; 32] = random_bytes()?;
        let mut digest = Sha256::new();
        digest.update(b"sandbox-mcp stdio process\0");
        digest.update(secret);
        Ok(Holder(digest.finalize().into()))
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Holder(<redacted>)")
    }
}

/// A configured runner, named by a digest of its URL (the one without user name and
/// password, see [`crate::runner_target`]): stable across restarts, replicas and password
/// changes, and only ever compared with the runners configured here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunnerId([u8; RUNNER_ID_LEN]);

impl RunnerId {
    /// The id of the runner at `url` (a trailing `/` makes no difference).
    pub fn of_url(url: &str) -> Self {
        let mut digest = Sha256::new();
        digest.update(b"sandbox-mcp runner\0");
        digest.update(url.trim_end_matches('/').as_bytes());
        let full: [u8; 32] = digest.finalize().into();
        let mut id = [0u8; RUNNER_ID_LEN];
        id.copy_from_slice(&full[..RUNNER_ID_LEN]);
        RunnerId(id)
    }
}

/// What a sandbox id stands for: a session on a runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxHandle {
    /// The runner that holds the session.
    pub runner: RunnerId,
    /// The runner's id of the session.
    pub session: String,
}

impl SandboxHandle {
    /// The sandbox id of this handle for `holder`, under `key`.
    pub fn seal(&self, key: &HandleKey, holder: &Holder) -> Result<String, HandleError> {
        let session = self.session.as_bytes();
        if !session_id_ok(session) {
            return Err(HandleError::BadSessionId);
        }
        let mut bytes = Vec::with_capacity(MAX_BYTES);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.runner.0);
        bytes.push(session.len() as u8); // at most MAX_SESSION_ID_LEN: checked above
        bytes.extend_from_slice(session);
        let tag = tag(key, &bytes, holder);
        bytes.extend_from_slice(&tag[..TAG_LEN]);
        Ok(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The handle `text` stands for, if `key` made it for `holder`. The tag is checked
    /// before anything else in it is read.
    pub fn open(text: &str, key: &HandleKey, holder: &Holder) -> Result<Self, HandleError> {
        let text = text.trim();
        if text.len() > MAX_TEXT_LEN {
            return Err(HandleError::Malformed);
        }
        let encoded = text.strip_prefix(PREFIX).ok_or(HandleError::Malformed)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| HandleError::Malformed)?;
        if !(MIN_BYTES..=MAX_BYTES).contains(&bytes.len()) {
            return Err(HandleError::Malformed);
        }
        let (body, presented) = bytes.split_at(bytes.len() - TAG_LEN);
        let mut mac = key.mac();
        mac.update(body);
        mac.update(&holder.0);
        mac.verify_truncated_left(presented)
            .map_err(|_| HandleError::NotValid)?;
        Self::read_body(body)
    }

    /// The fields of an authenticated body.
    fn read_body(body: &[u8]) -> Result<Self, HandleError> {
        let (&version, rest) = body.split_first().ok_or(HandleError::Unreadable)?;
        if version != VERSION || rest.len() < RUNNER_ID_LEN + 1 {
            return Err(HandleError::Unreadable);
        }
        let (runner, rest) = rest.split_at(RUNNER_ID_LEN);
        let (&len, session) = rest.split_first().ok_or(HandleError::Unreadable)?;
        if usize::from(len) != session.len() || !session_id_ok(session) {
            return Err(HandleError::Unreadable);
        }
        let mut id = [0u8; RUNNER_ID_LEN];
        id.copy_from_slice(runner);
        Ok(SandboxHandle {
            runner: RunnerId(id),
            // session_id_ok allows ASCII only.
            session: String::from_utf8_lossy(session).into_owned(),
        })
    }
}

fn tag(key: &HandleKey, body: &[u8], holder: &Holder) -> [u8; 32] {
    let mut mac = key.mac();
    mac.update(body);
    mac.update(&holder.0);
    mac.finalize().into_bytes().into()
}

/// 1 to 64 characters that need no escaping anywhere (a URL path segment, JSON, logs).
fn session_id_ok(id: &[u8]) -> bool {
    (1..=MAX_SESSION_ID_LEN).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(text.len() <= MAX_TEXT_LEN, "{text}");
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
            Err(HandleError::NotValid)
        );
        let random = HandleKey::random().unwrap();
        assert_eq!(
            SandboxHandle::open(&sealed(), &random, &alice()),
            Err(HandleError::NotValid)
        );
    }

    #[test]
    fn another_credential_cannot_use_it() {
        let bob = Holder::bearer(b"bob's token");
        assert_eq!(
            SandboxHandle::open(&sealed(), &key(), &bob),
            Err(HandleError::NotValid)
        );
        let process = Holder::process().unwrap();
        assert_ne!(process, Holder::process().unwrap());
        assert_eq!(
            SandboxHandle::open(&sealed(), &key(), &process),
            Err(HandleError::NotValid)
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
                    Err(HandleError::NotValid),
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
            Err(HandleError::NotValid)
        );
        // The tag of a real handle on another body.
        let real = URL_SAFE_NO_PAD.decode(&sealed()[PREFIX.len()..]).unwrap();
        let mut spliced = URL_SAFE_NO_PAD.decode(&forged[PREFIX.len()..]).unwrap();
        let n = spliced.len();
        spliced[n - TAG_LEN..].copy_from_slice(&real[real.len() - TAG_LEN..]);
        let text = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&spliced));
        assert_eq!(
            SandboxHandle::open(&text, &key(), &alice()),
            Err(HandleError::NotValid)
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
                matches!(result, Err(HandleError::Malformed | HandleError::NotValid)),
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
            bytes.extend_from_slice(&tag(&key(), &body, &alice())[..TAG_LEN]);
            let text = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&bytes));
            let result = SandboxHandle::open(&text, &key(), &alice());
            assert!(
                matches!(
                    result,
                    Err(HandleError::Unreadable | HandleError::Malformed)
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
        assert!(text.len() <= MAX_TEXT_LEN);
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
}
