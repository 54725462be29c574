//! The handles a client holds: a `sandboxId` (a runner session) and a `snapshotId` (a
//! snapshot on a runner). Each is an opaque, unguessable text that carries everything
//! needed to reach what it names (which configured runner holds it, and the runner's id
//! of it), authenticated with an HMAC that also binds it to the credential that made it.
//! No MCP server keeps any state about them, so any replica with the same configuration
//! can serve them.
//!
//! The text is the kind's prefix (`sbx_` or `snap_`) and the unpadded base64url of:
//!
//! | bytes | what |
//! |---|---|
//! | 1 | the format's version, 1 |
//! | 8 | the runner: the first 8 bytes of SHA-256 of its URL without user name and password ([`RunnerId`]) |
//! | 1 | the length of the runner's id, 1 to 64 |
//! | 1..=64 | the runner's id of the session or snapshot (`[0-9A-Za-z_-]`) |
//! | 16 | the tag: HMAC-SHA256 under the kind's key of the [`HandleKey`] of the bytes above followed by the [`Holder`], cut to 128 bits |
//!
//! The holder (a hash of the bearer token, or a secret of the stdio process) is part of what
//! the tag covers but not of the handle: a handle presented with another credential fails
//! like a forged one. Each kind has its own key (drawn from the same secret under its own
//! label), so a sandbox id is never taken for a snapshot id nor the other way round. The
//! tag is checked, in constant time, before anything in the handle is read.

use std::fmt;
use std::io::Read;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What every sandbox id starts with.
pub const PREFIX: &str = "sbx_";
/// What every snapshot id starts with.
pub const SNAPSHOT_PREFIX: &str = "snap_";
const VERSION: u8 = 1;
const RUNNER_ID_LEN: usize = 8;
const TAG_LEN: usize = 16;
/// The longest runner id (of a session or a snapshot) a handle carries.
pub const MAX_SESSION_ID_LEN: usize = 64;
const MIN_BYTES: usize = 1 + RUNNER_ID_LEN + 1 + 1 + TAG_LEN;
const MAX_BYTES: usize = 1 + RUNNER_ID_LEN + 1 + MAX_SESSION_ID_LEN + TAG_LEN;

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    /// A sandbox: a runner session (`sandboxId`).
    Sandbox,
    /// A snapshot of a sandbox on a runner (`snapshotId`).
    Snapshot,
}

impl HandleKind {
    /// What its text starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            HandleKind::Sandbox => PREFIX,
            HandleKind::Snapshot => SNAPSHOT_PREFIX,
        }
    }

    /// The argument that carries it.
    pub fn field(self) -> &'static str {
        match self {
            HandleKind::Sandbox => "sandboxId",
            HandleKind::Snapshot => "snapshotId",
        }
    }

    /// What a client does when one cannot be used: it cannot repair a handle.
    pub fn remedy(self) -> &'static str {
        match self {
            HandleKind::Sandbox => "create a new sandbox with create_sandbox",
            HandleKind::Snapshot => {
                "take a new snapshot of a sandbox with snapshot_sandbox (or create_sandbox \
                 without snapshotId)"
            }
        }
    }

    /// "a sandbox id", "a snapshot id".
    fn a_thing(self) -> &'static str {
        match self {
            HandleKind::Sandbox => "a sandbox id",
            HandleKind::Snapshot => "a snapshot id",
        }
    }

    /// The HKDF `info` of its key: keys for anything else drawn from the same secret
    /// differ. (The sandbox key's label is the one handles had before snapshots.)
    fn key_info(self) -> &'static [u8] {
        match self {
            HandleKind::Sandbox => b"sandbox-mcp sandbox handle key v1",
            HandleKind::Snapshot => b"sandbox-mcp snapshot handle key v1",
        }
    }

    /// No longer text can be a handle of this kind: the prefix and base64 of `MAX_BYTES`
    /// without padding.
    fn max_text_len(self) -> usize {
        self.prefix().len() + MAX_BYTES.div_ceil(3) * 4
    }
}

/// Why a handle cannot be used. Each says to make a new one: a client cannot repair a
/// handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Not the shape of a handle of its kind at all (prefix, alphabet or length).
    #[error(
        "this {} is not {} this server gives out (they start with {:?}); {} and use the {} it \
         returns",
        .0.field(), .0.a_thing(), .0.prefix(), .0.remedy(), .0.field()
    )]
    Malformed(HandleKind),
    /// The tag does not verify: altered or forged, made for another credential, made
    /// under another key (another deployment, or a changed runner token or
    /// `SANDBOX_HANDLE_KEY`), or a handle of another kind.
    #[error(
        "this {} was not made by this server for your credentials (it may be altered, from \
         another client, or from before the server's key changed); {}",
        .0.field(), .0.remedy()
    )]
    NotValid(HandleKind),
    /// The tag verifies but the contents are not a handle of this version.
    #[error("this {} is of a format this server does not read; {}", .0.field(), .0.remedy())]
    Unreadable(HandleKind),
    /// A runner gave an id that does not fit in a handle (sealing only).
    #[error(
        "the runner's id does not fit in a handle (1 to {MAX_SESSION_ID_LEN} of [0-9A-Za-z_-])"
    )]
    BadSessionId,
}

impl HandleError {
    /// The kind of handle that was refused (none for a runner's id that does not fit).
    pub fn kind(&self) -> Option<HandleKind> {
        match self {
            HandleError::Malformed(kind)
            | HandleError::NotValid(kind)
            | HandleError::Unreadable(kind) => Some(*kind),
            HandleError::BadSessionId => None,
        }
    }
}

/// The secret that authenticates handles: a key per [`HandleKind`].
#[derive(Clone)]
pub struct HandleKey {
    sandbox: [u8; 32],
    snapshot: [u8; 32],
}

impl HandleKey {
    /// The keys drawn from `secret` (the runner token, or `SANDBOX_HANDLE_KEY`) with
    /// HKDF-SHA256 and a label of their own: every replica given the same secret has the
    /// same keys, and the keys tell nothing of the secret.
    pub fn derive(secret: &[u8]) -> Self {
        let expand = |kind: HandleKind| {
            let mut key = [0u8; 32];
            hkdf::Hkdf::<Sha256>::new(None, secret)
                .expand(kind.key_info(), &mut key)
                .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 output length"));
            key
        };
        HandleKey {
            sandbox: expand(HandleKind::Sandbox),
            snapshot: expand(HandleKind::Snapshot),
        }
    }

    /// Keys of this process alone (no secret configured): handles work in this process
    /// only.
    pub fn random() -> std::io::Result<Self> {
        random_bytes::<32>().map(|secret| Self::derive(&secret))
    }

    fn mac(&self, kind: HandleKind) -> Hmac<Sha256> {
        let key = match kind {
            HandleKind::Sandbox => &self.sandbox,
            HandleKind::Snapshot => &self.snapshot,
        };
        <Hmac<Sha256> as KeyInit>::new_from_slice(key)
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
        seal(HandleKind::Sandbox, self.runner, &self.session, key, holder)
    }

    /// The handle `text` stands for, if `key` made it for `holder`. The tag is checked
    /// before anything else in it is read.
    pub fn open(text: &str, key: &HandleKey, holder: &Holder) -> Result<Self, HandleError> {
        let (runner, session) = open(HandleKind::Sandbox, text, key, holder)?;
        Ok(SandboxHandle { runner, session })
    }
}

/// What a snapshot id stands for: a snapshot on a runner (it lives on that runner only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHandle {
    /// The runner that holds the snapshot.
    pub runner: RunnerId,
    /// The runner's id of the snapshot.
    pub snapshot: String,
}

impl SnapshotHandle {
    /// The snapshot id of this handle for `holder`, under `key`.
    pub fn seal(&self, key: &HandleKey, holder: &Holder) -> Result<String, HandleError> {
        seal(
            HandleKind::Snapshot,
            self.runner,
            &self.snapshot,
            key,
            holder,
        )
    }

    /// The handle `text` stands for, if `key` made it for `holder`, as
    /// [`SandboxHandle::open`] checks it.
    pub fn open(text: &str, key: &HandleKey, holder: &Holder) -> Result<Self, HandleError> {
        let (runner, snapshot) = open(HandleKind::Snapshot, text, key, holder)?;
        Ok(SnapshotHandle { runner, snapshot })
    }
}

/// The text of a `kind` handle naming `id` on `runner`, for `holder`.
fn seal(
    kind: HandleKind,
    runner: RunnerId,
    id: &str,
    key: &HandleKey,
    holder: &Holder,
) -> Result<String, HandleError> {
    let id = id.as_bytes();
    if !session_id_ok(id) {
        return Err(HandleError::BadSessionId);
    }
    let mut bytes = Vec::with_capacity(MAX_BYTES);
    bytes.push(VERSION);
    bytes.extend_from_slice(&runner.0);
    bytes.push(id.len() as u8); // at most MAX_SESSION_ID_LEN: checked above
    bytes.extend_from_slice(id);
    let tag = tag(key, kind, &bytes, holder);
    bytes.extend_from_slice(&tag[..TAG_LEN]);
    Ok(format!(
        "{}{}",
        kind.prefix(),
        URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// The runner and id a `kind` handle's `text` names, once its tag verifies.
fn open(
    kind: HandleKind,
    text: &str,
    key: &HandleKey,
    holder: &Holder,
) -> Result<(RunnerId, String), HandleError> {
    let text = text.trim();
    if text.len() > kind.max_text_len() {
        return Err(HandleError::Malformed(kind));
    }
    let encoded = text
        .strip_prefix(kind.prefix())
        .ok_or(HandleError::Malformed(kind))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| HandleError::Malformed(kind))?;
    if !(MIN_BYTES..=MAX_BYTES).contains(&bytes.len()) {
        return Err(HandleError::Malformed(kind));
    }
    let (body, presented) = bytes.split_at(bytes.len() - TAG_LEN);
    let mut mac = key.mac(kind);
    mac.update(body);
    mac.update(&holder.0);
    mac.verify_truncated_left(presented)
        .map_err(|_| HandleError::NotValid(kind))?;
    read_body(body).ok_or(HandleError::Unreadable(kind))
}

/// The fields of an authenticated body.
fn read_body(body: &[u8]) -> Option<(RunnerId, String)> {
    let (&version, rest) = body.split_first()?;
    if version != VERSION || rest.len() < RUNNER_ID_LEN + 1 {
        return None;
    }
    let (runner, rest) = rest.split_at(RUNNER_ID_LEN);
    let (&len, id) = rest.split_first()?;
    if usize::from(len) != id.len() || !session_id_ok(id) {
        return None;
    }
    let mut runner_id = [0u8; RUNNER_ID_LEN];
    runner_id.copy_from_slice(runner);
    // session_id_ok allows ASCII only.
    Some((
        RunnerId(runner_id),
        String::from_utf8_lossy(id).into_owned(),
    ))
}

fn tag(key: &HandleKey, kind: HandleKind, body: &[u8], holder: &Holder) -> [u8; 32] {
    let mut mac = key.mac(kind);
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
mod tests;
