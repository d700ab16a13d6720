//! A graceful shutdown on SIGTERM (or Ctrl-C): the service gives its locks back instead of
//! making its peers wait out the leases.
//!
//! ```text
//! graceful-shutdown [--port 8080] [--bind 127.0.0.1] [--config distlock.toml] [--name ID]
//!
//!   POST /accounts/{id}/withdraw?work_ms=N
//!     An axum handler behind `LockLayer::route("/accounts/{id}/withdraw", "account:{id}")`:
//!     one withdrawal per account at a time (the lock `account:ID`, the key an attribute's
//!     `account:<id>` takes), wait 100 ms, then 409. Works N ms, answers {"account", "token"}.
//!   GET /leader   who leads the election `scheduler` ({"leader": INFO or null})
//!   GET /health   200 ok
//!
//!   A leader loop campaigns in the election `scheduler` (info ID, default host:pid) and,
//!   while it leads, "runs the schedule" (a tick a second, printed) until it loses the
//!   leadership; then it campaigns again, until the shutdown.
//! ```
//!
//! On SIGTERM, in this order:
//! 1. the HTTP server stops accepting and drains the requests in flight (axum's
//!    `with_graceful_shutdown`): each finishes holding its lock and releases it;
//! 2. the leader loop is told to stop;
//! 3. `distlock::shutdown()` gives back whatever is still held (the leadership: a waiting
//!    replica is elected at once instead of after `watchdog_timeout`), ends the waits
//!    (a campaign under way returns `LockError::ShuttingDown`), and flushes the releases
//!    still in flight, within `Registry::SHUTDOWN_BOUND` (5 s) even with Redis down;
//! 4. the process exits 0, printing `SHUTDOWN <ms>`.
//!
//! A SIGKILLed replica gives nothing back: its peers wait until its leases run out
//! (`watchdog_timeout`, 30 s by default). `examples/tests/graceful_shutdown.rs` runs two
//! replicas and measures both.

use std::time::{Duration, Instant};

use axum::extract::{Path, Query};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::tower::LockLayer;
use distlock::{Leader, LockError};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

#[derive(Deserialize)]
struct Work {
    work_ms: Option<u64>,
}

/// The withdrawal: runs holding `account:{id}`.
async fn withdraw(Path(id): Path<u64>, Query(work): Query<Work>) -> Json<Value> {
    tokio::time::sleep(Duration::from_millis(work.work_ms.unwrap_or(0))).await;
    Json(json!({ "account": id, "token": distlock::fencing_token() }))
}

async fn leader() -> Json<Value> {
    let now = Leader::observe_once("scheduler").await.ok().flatten();
    Json(json!({ "leader": now }))
}

fn router() -> Result<Router, distlock::tower::InvalidRoute> {
    Ok(Router::new()
        .route(
            "/accounts/{id}/withdraw",
            post(withdraw).layer(
                LockLayer::route("/accounts/{id}/withdraw", "account:{id}")?
                    .wait(Duration::from_millis(100)),
            ),
        )
        .route("/leader", get(leader))
        .route("/health", get(|| async { "ok" })))
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Campaign, lead until the leadership is lost, campaign again; until `stop` turns true
/// or the registry shuts down.
async fn lead(info: String, mut stop: watch::Receiver<bool>) {
    loop {
        let campaign = Leader::new("scheduler").info(info.clone()).campaign();
        let leader = tokio::select! {
            () = stopped(&mut stop) => return,
            elected = campaign => match elected {
                Ok(leader) => leader,
                // The shutdown ended the campaign: nothing is held.
                Err(LockError::ShuttingDown { .. }) => return,
                Err(e) => {
                    eprintln!("campaign failed: {e}; again in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        println!("LEADING epoch {}", leader.epoch());
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let lost = loop {
            tokio::select! {
                // Told a margin before anyone else can lead; a shutdown says so too.
                lost = leader.lost() => break Some(lost),
                () = stopped(&mut stop) => break None,
                _ = tick.tick() => println!("TICK epoch {}", leader.epoch()),
            }
        };
        match lost {
            Some(e) => println!("NOT LEADING: {e}"),
            None => {
                // Asked to stop: resign now (a waiting replica is elected at once).
                if let Err(e) = leader.resign().await {
                    eprintln!("resign: {e}");
                }
                return;
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = ctrl_c => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

struct Args {
    port: u16,
    bind: String,
    config: String,
    name: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        port: 8080,
        bind: "127.0.0.1".into(),
        config: std::env::var("DISTLOCK_CONFIG").unwrap_or_else(|_| "distlock.toml".into()),
        name: None,
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => parsed.port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--bind" => parsed.bind = value()?,
            "--config" => parsed.config = value()?,
            "--name" => parsed.name = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| {
        format!(
            "{e}\nusage: graceful-shutdown [--port P] [--bind ADDR] [--config FILE] [--name ID]"
        )
    })?;
    distlock::init_from_path(&args.config)
        .await
        .map_err(|e| format!("distlock init from {}: {e}", args.config))?;
    let info = args
        .name
        .unwrap_or_else(|| format!("graceful-shutdown:{}", std::process::id()));
    let (stop, stopped) = watch::channel(false);
    let leading = tokio::spawn(lead(info, stopped));

    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .map_err(|e| format!("binding {}:{}: {e}", args.bind, args.port))?;
    println!("graceful-shutdown listening on {}", listener.local_addr()?);
    // 1. Stop accepting on SIGTERM and drain the requests in flight.
    axum::serve(listener, router()?)
        .with_graceful_shutdown(terminated())
        .await?;
    let start = Instant::now();
    // 2. The leader loop stops (it resigns if it leads).
    let _ = stop.send(true);
    // 3. Give back whatever is still held, end the waits, flush the releases (bounded).
    distlock::shutdown().await;
    let _ = leading.await;
    println!("SHUTDOWN {}", start.elapsed().as_millis());
    Ok(())
}
