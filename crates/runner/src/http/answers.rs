//! What the routes answer, for the OpenAPI document ([`super::openapi`]): each kind of
//! route's error answers, its codes ([`codes`]) by status, and the schema of a file's raw
//! bytes. The handlers' `#[utoipa::path]` attributes name them.

use super::codes::{self, ErrorCode};
use std::collections::BTreeMap;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::IntoResponses;

/// A file's raw bytes, as `PUT /sessions/{id}/files/{path}` takes them and `GET` answers
/// them (`application/octet-stream`).
pub(super) struct FileBytes;

impl utoipa::PartialSchema for FileBytes {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/octet-stream")
            .description(Some("A file's raw bytes"))
            .into()
    }
}

impl utoipa::ToSchema for FileBytes {}

/// The error answers of one kind of route: its codes, by status.
macro_rules! errors {
    ($(#[$doc:meta])* $name:ident = [$($codes:expr),* $(,)?]) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                error_responses(&[$($codes),*])
            }
        }
    };
}

/// What every operation behind the token can answer.
const PROTECTED: &[ErrorCode] = &[
    codes::UNAUTHORIZED,
    codes::STARTING,
    codes::TOO_MANY_CONNECTIONS,
];
/// What reading a body can answer.
const BODY: &[ErrorCode] = &[codes::BAD_REQUEST, codes::TOO_LARGE, codes::BODY_TIMEOUT];
/// What waiting for a sandbox of the pool can answer.
const POOL: &[ErrorCode] = &[
    codes::POOL_EXHAUSTED,
    codes::QUEUE_TIMEOUT,
    codes::SHUTTING_DOWN,
    codes::DRAINING,
];
/// What an operation on an open session can answer (waking it, if it is paused, too).
const SESSION: &[ErrorCode] = &[
    codes::SESSION_NOT_FOUND,
    codes::SESSION_BUSY,
    codes::SANDBOX_FAILED,
    codes::TOO_MANY_SESSIONS,
    codes::STORAGE_ERROR,
    codes::POOL_EXHAUSTED,
    codes::QUEUE_TIMEOUT,
    codes::SHUTTING_DOWN,
];
/// What storing a session's files can answer.
const STORING: &[ErrorCode] = &[
    codes::STORAGE_FULL,
    codes::STORAGE_ERROR,
    codes::FILE_TIMEOUT,
];
/// What a file operation can answer, beyond the session's.
const FILE: &[ErrorCode] = &[
    codes::BAD_PATH,
    codes::NOT_A_FILE,
    codes::FILE_ERROR,
    codes::FILE_TIMEOUT,
];

errors!(
    /// `POST /run`'s errors.
    RunErrors = [
        PROTECTED,
        BODY,
        POOL,
        codes::DEPENDENCIES,
        &[codes::SANDBOX_FAILED, codes::EGRESS_NOT_ALLOWED]
    ]
);
errors!(
    /// `POST /sessions`' errors.
    CreateErrors = [
        PROTECTED,
        BODY,
        POOL,
        &[
            codes::TOO_MANY_SESSIONS,
            codes::SANDBOX_FAILED,
            codes::SNAPSHOT_NOT_FOUND,
            codes::STORAGE_ERROR,
            codes::EGRESS_NOT_ALLOWED
        ]
    ]
);
errors!(
    /// `POST /sessions/{id}/pause` and `/snapshots`' errors.
    PauseErrors = [PROTECTED, SESSION, STORING]
);
errors!(
    /// `POST /sessions/{id}/resume`'s errors.
    WakeErrors = [PROTECTED, SESSION, &[codes::FILE_TIMEOUT]]
);
errors!(
    /// `POST /sessions/{id}/fork`'s errors.
    ForkErrors = [PROTECTED, BODY, SESSION, STORING]
);
errors!(
    /// `POST /runs/{runId}/tool-results/{id}`'s errors.
    ToolResultErrors = [
        PROTECTED,
        BODY,
        &[codes::RUN_NOT_FOUND, codes::TOOL_CALL_NOT_FOUND]
    ]
);
errors!(
    /// What an operation behind the token alone can answer.
    ProtectedErrors = [PROTECTED]
);
errors!(
    /// `DELETE /snapshots/{id}` and its export's errors.
    SnapshotErrors = [PROTECTED, &[codes::SNAPSHOT_NOT_FOUND]]
);
errors!(
    /// `POST /snapshots/import`'s errors.
    ImportErrors = [PROTECTED, BODY, &[codes::BAD_ARCHIVE], STORING]
);
errors!(
    /// `GET` and `DELETE /sessions/{id}`'s errors.
    SessionErrors = [PROTECTED, &[codes::SESSION_NOT_FOUND]]
);
errors!(
    /// `PATCH /sessions/{id}`'s errors.
    UpdateSessionErrors = [
        PROTECTED,
        BODY,
        &[
            codes::SESSION_NOT_FOUND,
            codes::EGRESS_NOT_ALLOWED,
            codes::STORAGE_ERROR
        ]
    ]
);
errors!(
    /// `POST /sessions/{id}/run`'s errors.
    SessionRunErrors = [PROTECTED, BODY, SESSION, codes::DEPENDENCIES]
);
errors!(
    /// `GET /sessions/{id}/files`' errors.
    ListErrors = [
        PROTECTED,
        SESSION,
        &[codes::FILE_ERROR, codes::FILE_TIMEOUT]
    ]
);
errors!(
    /// `GET /sessions/{id}/files/{path}`'s errors.
    DownloadErrors = [
        PROTECTED,
        SESSION,
        FILE,
        &[codes::FILE_NOT_FOUND, codes::TOO_LARGE]
    ]
);
errors!(
    /// `PUT /sessions/{id}/files/{path}`'s errors.
    UploadErrors = [PROTECTED, BODY, SESSION, FILE]
);

/// What a process operation can answer, beyond the session's.
const PROCESS: &[ErrorCode] = &[codes::PROCESS_NOT_FOUND, codes::BAD_REQUEST];

errors!(
    /// `POST /sessions/{id}/processes`' errors.
    StartProcessErrors = [
        PROTECTED,
        BODY,
        SESSION,
        &[
            codes::BAD_PATH,
            codes::TOO_MANY_PROCESSES,
            codes::PROCESS_ERROR,
            codes::FILE_TIMEOUT
        ]
    ]
);
errors!(
    /// `GET /sessions/{id}/processes`' errors.
    ProcessErrors = [PROTECTED, SESSION, &[codes::FILE_TIMEOUT]]
);
errors!(
    /// `GET /sessions/{id}/processes/{pid}/output`'s errors.
    OutputErrors = [PROTECTED, SESSION, PROCESS, &[codes::FILE_TIMEOUT]]
);
errors!(
    /// `POST /sessions/{id}/processes/{pid}/stdin`'s errors.
    StdinErrors = [
        PROTECTED,
        BODY,
        SESSION,
        PROCESS,
        &[codes::PROCESS_ENDED, codes::STDIN_FULL, codes::FILE_TIMEOUT]
    ]
);
errors!(
    /// `POST /sessions/{id}/processes/{pid}/signal`'s errors.
    SignalErrors = [
        PROTECTED,
        BODY,
        SESSION,
        PROCESS,
        &[codes::PROCESS_ENDED, codes::FILE_TIMEOUT]
    ]
);

/// One response per status of `sets`' codes: `ErrorBody`, each code an example of it.
fn error_responses(sets: &[&[ErrorCode]]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in sets.iter().flat_map(|set| set.iter()) {
        let same = by_status.entry(code.status.as_u16()).or_default();
        if !same.iter().any(|c| c.code == code.code) {
            same.push(*code);
        }
    }
    by_status
        .into_iter()
        .map(|(status, codes)| (status.to_string(), error_response(status, &codes).into()))
        .collect()
}

/// The response of one status: its codes named in the description and as examples.
fn error_response(status: u16, codes: &[ErrorCode]) -> Response {
    let listed: Vec<String> = codes
        .iter()
        .map(|c| format!("`{}`: {}", c.code, c.when))
        .collect();
    let examples = codes.iter().map(|code| {
        let body = serde_json::json!({"error": {"code": code.code, "message": code.when}});
        let example = ExampleBuilder::new()
            .summary(code.when)
            .value(Some(body))
            .build();
        (code.code, example)
    });
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorBody")))
        .examples_from_iter(examples);
    let mut response = ResponseBuilder::new()
        .description(listed.join("\n\n"))
        .content("application/json", content.build());
    if status == 429 || status == 503 {
        response = response.header("Retry-After", seconds_header());
    }
    if status == 401 {
        let challenge = HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::String))
            .description(Some("`Bearer`"))
            .build();
        response = response.header("WWW-Authenticate", challenge);
    }
    response.build()
}

/// `Retry-After`, in seconds.
fn seconds_header() -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::Integer))
        .description(Some("Seconds to wait before asking again"))
        .build()
}
