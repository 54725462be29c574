//! A package index served by a test itself (PEP 503's simple pages on loopback), with
//! files made for the test (`index_files.py`: wheels, and source archives whose build
//! backend leaves a marker when anything runs it). It records every path asked of it, so
//! a test can show what was (and was not) fetched; a project named `stall` answers only
//! after a minute, so a test can catch a resolution in flight.

use axum::extract::{Path as UrlPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The project whose page answers only after [`STALL`].
pub const STALLED: &str = "stall";
const STALL: Duration = Duration::from_secs(60);

/// A running index.
pub struct TestIndex {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The files' folder (one subfolder per project).
    pub files: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Served {
    files: PathBuf,
}

impl TestIndex {
    /// Makes the files of `specs` (see index_files.py) in `files` and serves them.
    pub async fn start(files: &Path, specs: &Value) -> TestIndex {
        make_files(files, specs);
        let log = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/simple/{project}/", get(page))
            .route("/files/{project}/{file}", get(file))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(Served {
                files: files.to_owned(),
            })
            .layer(middleware::from_fn_with_state(log.clone(), record));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the index");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestIndex {
            base,
            files: files.to_owned(),
            log,
            server,
        }
    }

    /// The variables that point a runner's pip at this index alone, quickly.
    pub fn pip_env(&self) -> Vec<(String, String)> {
        [
            ("PIP_INDEX_URL", format!("{}/simple/", self.base)),
            ("PIP_FIND_LINKS", String::new()),
            ("PIP_RETRIES", "0".into()),
            ("PIP_DEFAULT_TIMEOUT", "120".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Every path asked so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().expect("the index's log").clone()
    }

    /// The paths asked so far that contain `part`.
    pub fn asked_for(&self, part: &str) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|p| p.contains(part))
            .collect()
    }
}

impl Drop for TestIndex {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn record(
    State(log): State<Arc<Mutex<Vec<String>>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Ok(mut log) = log.lock() {
        log.push(request.uri().path().to_owned());
    }
    next.run(request).await
}

async fn page(State(served): State<Served>, UrlPath(project): UrlPath<String>) -> Response {
    if project == STALLED {
        tokio::time::sleep(STALL).await;
    }
    let Ok(entries) = std::fs::read_dir(served.files.join(&project)) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut links = String::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let digest = sha256_hex(&bytes);
        links.push_str(&format!(
            "<a href=\"/files/{project}/{name}#sha256={digest}\">{name}</a>\n"
        ));
    }
    Html(format!(
        "<!DOCTYPE html><html><body>\n{links}</body></html>\n"
    ))
    .into_response()
}

async fn file(
    State(served): State<Served>,
    UrlPath((project, name)): UrlPath<(String, String)>,
) -> Response {
    match std::fs::read(served.files.join(project).join(name)) {
        Ok(bytes) => bytes.into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

fn make_files(files: &Path, specs: &Value) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/index_files.py");
    let status = std::process::Command::new("/usr/bin/python3")
        .arg(script)
        .arg(files)
        .arg(specs.to_string())
        .status()
        .expect("python3 makes the index's files");
    assert!(status.success(), "index_files.py failed: {status}");
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
