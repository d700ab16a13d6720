//! Passing the fencing token downstream: an axum service (`editor`) takes a lock per
//! document, then writes the document to another service (`storage`) over HTTP with the
//! lock's fencing token in a `Fencing-Token` header. The storage service refuses a token
//! below the last one it accepted for that document with 409 Conflict.
//!
//! A lease cannot stop a holder that was paused (GC, swap, a slow call) past its lease from
//! writing afterwards: by then another holder may have written. The storage service, which
//! sees every write, can: the stale holder's token is below the newer holder's, so its write
//! is refused, whatever the stale holder believes.
//!
//! ```text
//! fencing-downstream storage [--port 8081] [--bind 127.0.0.1]
//! fencing-downstream editor  [--port 8080] [--bind 127.0.0.1] --storage 127.0.0.1:8081
//!                            [--config distlock.toml]      (env DISTLOCK_CONFIG too)
//!
//! storage:
//!   PUT /documents/{id}   header Fencing-Token: N; body: the document
//!     200 {"id": .., "token": N}                                stored (N >= the last token)
//!     409 {"error": "stale_token", "token": N, "last": M}      N < M: a newer holder wrote
//!     400 {"error": "missing_token" | "bad_token"}
//!   GET /documents/{id}   200 {"id": .., "token": M, "body": ".."} | 404
//!
//! editor:
//!   PUT /documents/{id}?lease_ms=L&pause_ms=P   body: the document
//!     Takes the lock `document:{id}` (a fixed lease of L ms when given, else an auto
//!     lease), waits P ms when given (a stand-in for a GC pause, to show a stale holder),
//!     then writes to storage with the lock's token and passes its answer on:
//!     200 {"id": .., "token": N} | 409 {"error": "stale_token", ..} from storage |
//!     409 / 503 / 500 lock errors (see `distlock::web`) | 502 {"error": "storage_unavailable"}
//!   GET /health   200 ok (both)
//! ```
//!
//! The storage service keeps its documents in memory; a real one keeps the last token in
//! the same row as the data and makes the write conditional on it in one statement
//! (`distlock::fence::sql_update`), or stores through `distlock::fence`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use distlock::{Lease, Lock, LockError};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;

/// The header carrying the fencing token downstream.
const FENCING_TOKEN: &str = "fencing-token";
/// How long the editor waits for a lock, and for the storage service.
const WAIT: Duration = Duration::from_secs(5);

// ------------------------------------------------------------------------- storage

/// One stored document and the token it was written with.
#[derive(Clone)]
struct Stored {
    token: u64,
    body: String,
}

/// The storage service's documents.
#[derive(Clone, Default)]
struct Storage {
    documents: Arc<Mutex<HashMap<String, Stored>>>,
}

/// `PUT /documents/{id}` on storage: store if the token is not below the last one stored.
async fn storage_put(
    State(storage): State<Storage>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Some(raw) = headers.get(FENCING_TOKEN) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "missing_token"})),
        )
            .into_response();
    };
    let Some(token) = raw.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "bad_token"}))).into_response();
    };
    // Check and write under one lock: nothing can come between them.
    let mut documents = storage.documents.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(last) = documents.get(&id).map(|d| d.token) {
        if token < last {
            return (
                StatusCode::CONFLICT,
                Json(json!({"error": "stale_token", "token": token, "last": last})),
            )
                .into_response();
        }
    }
    documents.insert(id.clone(), Stored { token, body });
    Json(json!({"id": id, "token": token})).into_response()
}

/// `GET /documents/{id}` on storage.
async fn storage_get(State(storage): State<Storage>, Path(id): Path<String>) -> Response {
    let documents = storage.documents.lock().unwrap_or_else(|e| e.into_inner());
    match documents.get(&id) {
        Some(d) => Json(json!({"id": id, "token": d.token, "body": d.body})).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({"error": "not_found"}))).into_response(),
    }
}

fn storage_router() -> Router {
    Router::new()
        .route("/documents/{id}", get(storage_get).put(storage_put))
        .route("/health", get(|| async { "ok" }))
        .with_state(Storage::default())
}

// -------------------------------------------------------------------------- editor

/// The editor's state: where the storage service is.
#[derive(Clone)]
struct Editor {
    storage: Arc<str>,
}

/// What can go wrong writing through the editor.
enum EditError {
    /// The lock: 409 + Retry-After, 503 or 500 (see `distlock::web`).
    Lock(LockError),
    /// Storage refused the token: a newer holder has written.
    Stale(serde_json::Value),
    /// Storage answered something else, or could not be reached.
    Storage(String),
}

impl From<LockError> for EditError {
    fn from(e: LockError) -> Self {
        EditError::Lock(e)
    }
}

impl IntoResponse for EditError {
    fn into_response(self) -> Response {
        match self {
            EditError::Lock(e) => e.into_response(),
            EditError::Stale(detail) => (StatusCode::CONFLICT, Json(detail)).into_response(),
            EditError::Storage(message) => {
                eprintln!("fencing-downstream editor: storage: {message}");
                (
                    StatusCode::BAD_GATEWAY,
                    Json(json!({"error": "storage_unavailable"})),
                )
                    .into_response()
            }
        }
    }
}

#[derive(Debug, Deserialize)]
struct EditParams {
    /// A fixed lease in ms (default: an auto lease, renewed while held).
    lease_ms: Option<u64>,
    /// Wait this long between acquiring and writing (a stand-in for a pause).
    pause_ms: Option<u64>,
}

/// `PUT /documents/{id}` on the editor: lock, (pause,) write downstream with the token.
async fn editor_put(
    State(editor): State<Editor>,
    Path(id): Path<String>,
    Query(params): Query<EditParams>,
    body: String,
) -> Result<Response, EditError> {
    let lease = match params.lease_ms {
        Some(ms) => Lease::Fixed(Duration::from_millis(ms)),
        None => Lease::Auto,
    };
    let guard = Lock::new(format!("document:{id}"))
        .lease(lease)
        .wait(WAIT)
        .acquire()
        .await?;
    if let Some(ms) = params.pause_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    // The token goes with the write; storage decides whether it is still current.
    let (status, answer) =
        put_downstream(&editor.storage, &id, guard.fencing_token(), body).await?;
    // Released whatever storage said; a lease lost meanwhile makes this an error we
    // ignore: storage's answer is what counts.
    let _ = guard.release().await;
    match status {
        StatusCode::OK => Ok(Json(answer).into_response()),
        StatusCode::CONFLICT => Err(EditError::Stale(answer)),
        other => Err(EditError::Storage(format!("answered {other}: {answer}"))),
    }
}

/// `PUT http://{storage}/documents/{id}` with the `Fencing-Token` header; the status and
/// the JSON body of the answer.
async fn put_downstream(
    storage: &str,
    id: &str,
    token: u64,
    body: String,
) -> Result<(StatusCode, serde_json::Value), EditError> {
    let call = async {
        let stream = tokio::net::TcpStream::connect(storage)
            .await
            .map_err(|e| format!("connect {storage}: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake with {storage}: {e}"))?;
        tokio::spawn(connection);
        let request = Request::put(format!("/documents/{id}"))
            .header("host", storage)
            .header(FENCING_TOKEN, token.to_string())
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("PUT to {storage}: {e}"))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {storage}: {e}"))?
            .to_bytes();
        let answer = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
        Ok::<_, String>((status, answer))
    };
    match tokio::time::timeout(WAIT, call).await {
        Ok(result) => result.map_err(EditError::Storage),
        Err(_) => Err(EditError::Storage(format!(
            "{storage} did not answer within {WAIT:?}"
        ))),
    }
}

fn editor_router(storage: String) -> Router {
    Router::new()
        .route("/documents/{id}", axum::routing::put(editor_put))
        .route("/health", get(|| async { "ok" }))
        .with_state(Editor {
            storage: storage.into(),
        })
}

// ---------------------------------------------------------------------------- main

struct Args {
    role: String,
    port: u16,
    bind: String,
    storage: Option<String>,
    config: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let role = args
        .next()
        .filter(|r| r == "storage" || r == "editor")
        .ok_or("the first argument is the role: storage or editor")?;
    let mut parsed = Args {
        port: if role == "storage" { 8081 } else { 8080 },
        role,
        bind: "127.0.0.1".into(),
        storage: None,
        config: std::env::var("DISTLOCK_CONFIG").unwrap_or_else(|_| "distlock.toml".into()),
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => parsed.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--bind" => parsed.bind = value()?,
            "--storage" => parsed.storage = Some(value()?),
            "--config" => parsed.config = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| {
        format!(
            "{e}\nusage: fencing-downstream storage|editor [--port P] [--bind ADDR] [--storage HOST:PORT] [--config FILE]"
        )
    })?;
    let app = if args.role == "storage" {
        storage_router()
    } else {
        let storage = args.storage.ok_or("the editor needs --storage HOST:PORT")?;
        distlock::init_from_path(&args.config)
            .await
            .map_err(|e| format!("distlock init from {}: {e}", args.config))?;
        editor_router(storage)
    };
    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .map_err(|e| format!("binding {}:{}: {e}", args.bind, args.port))?;
    println!(
        "fencing-downstream {} listening on {}",
        args.role,
        listener.local_addr()?
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
