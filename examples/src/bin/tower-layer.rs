//! `distlock::tower::LockLayer`: a distributed lock per request, keyed from the request,
//! in front of an axum route and of a plain tower service, with no lock code in the
//! handlers. A busy key answers 409 with `Retry-After`, Redis down 503, as `distlock::web`.
//!
//! ```text
//! tower-layer [--port 8080] [--bind 127.0.0.1] [--config distlock.toml]   (env DISTLOCK_CONFIG too)
//!
//!   POST /reports/{name}/rebuild?work_ms=N
//!     An axum handler behind `LockLayer::path("report:")`: one rebuild per report at a
//!     time (the lock `report:/reports/{name}/rebuild`); a second one waits up to 100 ms,
//!     then gets 409. Works N ms (default 0), then answers {"report": .., "token": T}.
//!   POST /accounts/{id}/withdraw
//!     An axum handler behind `LockLayer::route("/accounts/{id}/withdraw", "account:{id}")`:
//!     the lock `account:ID`, the one the transfer service below and an attribute's
//!     `account:<id>` take; wait 0. Answers {"account": .., "token": T}.
//!   POST /accounts/transfer   header x-account: ID
//!     A plain tower service (`ServiceBuilder` + `service_fn`) behind a layer keyed by a
//!     closure on the `x-account` header (`account:ID`; no header: 400 from the service,
//!     without a lock), wait 0: busy → 409 at once. Answers {"account": .., "token": T}.
//!   GET /health   200 ok
//! ```
//!
//! On SIGTERM or Ctrl-C it drains the requests in flight, then calls `distlock::shutdown()`
//! (the locks still held are given back, not left to run out).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{Request, Response, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::tower::LockLayer;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::{service_fn, ServiceBuilder};

#[derive(Deserialize)]
struct Work {
    work_ms: Option<u64>,
}

/// The rebuild: runs holding `report:<path>`, so it sees the lock's fencing token.
async fn rebuild(Path(name): Path<String>, Query(work): Query<Work>) -> Json<Value> {
    tokio::time::sleep(Duration::from_millis(work.work_ms.unwrap_or(0))).await;
    let token = distlock::fencing_token();
    Json(json!({ "report": name, "token": token }))
}

/// The withdrawal: runs holding `account:{id}` (the route's parameter).
async fn withdraw(Path(id): Path<String>) -> Json<Value> {
    Json(json!({ "account": id, "token": distlock::fencing_token() }))
}

/// The transfer service: a plain `tower::Service`, nothing axum-specific.
async fn transfer(req: Request<Body>) -> Result<Response<Body>, Infallible> {
    let account = req
        .headers()
        .get("x-account")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (status, body) = match account {
        Some(account) => (
            StatusCode::OK,
            json!({ "account": account, "token": distlock::fencing_token() }),
        ),
        None => (
            StatusCode::BAD_REQUEST,
            json!({ "error": "the x-account header is missing" }),
        ),
    };
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    Ok(response)
}

fn router() -> Result<Router, distlock::tower::InvalidRoute> {
    let reports = Router::new()
        .route("/reports/{name}/rebuild", post(rebuild))
        .route_layer(LockLayer::path("report:").wait(Duration::from_millis(100)));
    let withdrawals = Router::new().route(
        "/accounts/{id}/withdraw",
        post(withdraw).layer(
            LockLayer::route("/accounts/{id}/withdraw", "account:{id}")?.wait(Duration::ZERO),
        ),
    );
    let transfers = ServiceBuilder::new()
        .layer(
            LockLayer::new(|req: &Request<Body>| {
                let account = req.headers().get("x-account")?.to_str().ok()?;
                Some(format!("account:{account}"))
            })
            .wait(Duration::ZERO),
        )
        .service(service_fn(transfer));
    Ok(Router::new()
        .merge(reports)
        .merge(withdrawals)
        .route_service("/accounts/transfer", transfers)
        .route("/health", get(|| async { "ok" })))
}

struct Args {
    port: u16,
    bind: String,
    config: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        port: 8080,
        bind: "127.0.0.1".into(),
        config: std::env::var("DISTLOCK_CONFIG").unwrap_or_else(|_| "distlock.toml".into()),
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => parsed.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--bind" => parsed.bind = value()?,
            "--config" => parsed.config = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()
        .map_err(|e| format!("{e}\nusage: tower-layer [--port P] [--bind ADDR] [--config FILE]"))?;
    distlock::init_from_path(&args.config)
        .await
        .map_err(|e| format!("distlock init from {}: {e}", args.config))?;
    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .map_err(|e| format!("binding {}:{}: {e}", args.bind, args.port))?;
    println!("tower-layer listening on {}", listener.local_addr()?);
    // On SIGTERM (or Ctrl-C): stop accepting, drain the requests in flight (each releases
    // its lock as it ends), then give back whatever is still held and flush the releases
    // in flight (bounded: Registry::SHUTDOWN_BOUND). See graceful-shutdown.rs.
    axum::serve(listener, router()?)
        .with_graceful_shutdown(terminated())
        .await?;
    distlock::shutdown().await;
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
