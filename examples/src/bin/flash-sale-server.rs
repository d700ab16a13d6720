//! The flash sale: an axum service selling a limited stock of vouchers, one per user.
//!
//! Several processes of it share one SQLite database file and one Redis. Two invariants:
//! - **No oversell** (across users): stock is taken with the database's atomic conditional
//!   update, `UPDATE vouchers SET stock = stock - 1 WHERE id = ? AND stock > 0`, checking
//!   the rows affected. No lock needed or used for that.
//! - **One order per user**: "has this user ordered? if not, insert an order" is a
//!   check-then-act, which two requests of the same user (a double click, a retry, two
//!   tabs), on the same or different processes, would interleave. The
//!   `#[distributed_lock(key = "order:<user_id>")]` on `place_order` makes them take turns.
//!
//! ```text
//! flash-sale-server [--port 8080] [--bind 127.0.0.1] [--config distlock.toml]
//!                   [--db flash-sale.db] [--voucher 1] [--stock 100] [--unlocked]
//! env: PORT, DISTLOCK_CONFIG, FLASH_SALE_DB, FLASH_SALE_STOCK
//!
//! POST /orders {"user_id": 7, "voucher_id": 1}
//!   201 {"order_id": .., "user_id": 7, "voucher_id": 1, "server": ".."}
//!   409 {"error": "lock_timeout", ..} + Retry-After   another request of this user holds the lock
//!   409 {"error": "already_ordered", "order_id": ..}  this user has bought one
//!   410 {"error": "sold_out"}
//!   500 {"error": "lock_lease_lost", ..}              the lock was lost mid-request: outcome unknown
//!   404 {"error": "no_such_voucher"}
//! GET /vouchers/{id}  200 {"id": 1, "stock": .., "initial_stock": ..}
//! GET /health         200 ok
//! GET /metrics        200 distlock's metrics (acquisitions, wait and hold times, leases
//!                     lost, renewals, waiters) in the Prometheus text format
//! ```
//!
//! `--unlocked` runs the same steps without the lock, to see what it prevents (duplicate
//! orders under concurrent requests of one user).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::ids::IdGenerator;
use distlock::{distributed_lock, LockError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::sqlite::SqlitePool;
use sqlx::Row;

/// The service's state, shared by every request.
#[derive(Clone)]
struct Shop {
    db: SqlitePool,
    /// Order ids: unique across processes (Redis INCR), roughly time-ordered.
    ids: IdGenerator,
    /// This process's name, recorded on its orders (`127.0.0.1:PORT`).
    server: Arc<str>,
    unlocked: bool,
}

/// What can go wrong placing an order.
#[derive(Debug)]
enum AppError {
    /// The lock (or the id generator's Redis) failed: 409 + Retry-After on a lock timeout,
    /// 503 when Redis is unavailable (see `distlock::web`).
    Lock(LockError),
    AlreadyOrdered {
        order_id: i64,
    },
    SoldOut,
    NoSuchVoucher,
    BadRequest(String),
    Db(sqlx::Error),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        AppError::Db(e)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            AppError::Lock(e) => return e.into_response(),
            AppError::AlreadyOrdered { order_id } => (
                StatusCode::CONFLICT,
                json!({"error": "already_ordered", "order_id": order_id}),
            ),
            AppError::SoldOut => (StatusCode::GONE, json!({"error": "sold_out"})),
            AppError::NoSuchVoucher => (StatusCode::NOT_FOUND, json!({"error": "no_such_voucher"})),
            AppError::BadRequest(message) => (
                StatusCode::BAD_REQUEST,
                json!({"error": "bad_request", "message": message}),
            ),
            AppError::Db(e) => {
                eprintln!("flash-sale-server: database error: {e}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error": "database_error"}),
                )
            }
        };
        (status, Json(body)).into_response()
    }
}

#[derive(Debug, Deserialize)]
struct OrderRequest {
    user_id: u64,
    voucher_id: u64,
}

#[derive(Debug, Serialize)]
struct OrderCreated {
    order_id: i64,
    user_id: i64,
    voucher_id: i64,
    server: Arc<str>,
}

/// `POST /orders`
async fn create_order(
    State(shop): State<Shop>,
    Json(request): Json<OrderRequest>,
) -> Result<(StatusCode, Json<OrderCreated>), AppError> {
    let user_id = to_i64(request.user_id, "user_id")?;
    let voucher_id = to_i64(request.voucher_id, "voucher_id")?;
    let order_id = if shop.unlocked {
        place_order_unlocked(&shop, user_id, voucher_id).await?
    } else {
        place_order(&shop, user_id, voucher_id).await?
    };
    Ok((
        StatusCode::CREATED,
        Json(OrderCreated {
            order_id,
            user_id,
            voucher_id,
            server: shop.server.clone(),
        }),
    ))
}

/// One order per user, under the user's lock (every process of the service, one Redis).
///
/// `wait = "100ms"`: a second request of the same user waits briefly for the first (and
/// then finds its order: 409 already_ordered) rather than queueing; if the first takes
/// longer, the second gets 409 lock_timeout with a Retry-After. `lease = "auto"`: the
/// watchdog keeps the lock however long the database takes, and if the lease is lost the
/// body is dropped at its next `.await` (the open transaction rolls back: the body is
/// cancel-safe) and the request gets 500 lock_lease_lost, "check its outcome before
/// repeating it" (a transaction that committed just before the loss stays committed).
#[distributed_lock(key = "order:<user_id>", wait = "100ms", lease = "auto")]
async fn place_order(shop: &Shop, user_id: i64, voucher_id: i64) -> Result<i64, AppError> {
    // Check, then act: without the lock two requests of this user could both pass the check.
    if let Some(order_id) = shop.order_of(user_id, voucher_id).await? {
        return Err(AppError::AlreadyOrdered { order_id });
    }
    let order_id = next_order_id(shop).await?;
    shop.buy(user_id, voucher_id, order_id).await?;
    Ok(order_id)
}

/// The same steps as `place_order` without the lock (`--unlocked`): concurrent requests of
/// one user can each pass the check and each buy a voucher.
async fn place_order_unlocked(shop: &Shop, user_id: i64, voucher_id: i64) -> Result<i64, AppError> {
    if let Some(order_id) = shop.order_of(user_id, voucher_id).await? {
        return Err(AppError::AlreadyOrdered { order_id });
    }
    let order_id = next_order_id(shop).await?;
    shop.buy(user_id, voucher_id, order_id).await?;
    Ok(order_id)
}

async fn next_order_id(shop: &Shop) -> Result<i64, AppError> {
    let id = shop.ids.next().await?;
    // Ids are seconds since 2024 in the high 32 bits: positive as i64 until 2092.
    i64::try_from(id).map_err(|_| AppError::BadRequest(format!("order id {id} out of range")))
}

impl Shop {
    /// This user's order of this voucher, if any. Deliberately a plain read outside the
    /// write transaction (as a snapshot read would be in most databases): the lock, not
    /// the database, makes check-then-insert atomic per user.
    async fn order_of(&self, user_id: i64, voucher_id: i64) -> Result<Option<i64>, sqlx::Error> {
        let row =
            sqlx::query("SELECT id FROM orders WHERE user_id = ?1 AND voucher_id = ?2 LIMIT 1")
                .bind(user_id)
                .bind(voucher_id)
                .fetch_optional(&self.db)
                .await?;
        row.map(|r| r.try_get::<i64, _>(0)).transpose()
    }

    /// Take one voucher from stock and record the order, in one transaction. The
    /// conditional update is what prevents oversell, across users and processes.
    async fn buy(&self, user_id: i64, voucher_id: i64, order_id: i64) -> Result<(), AppError> {
        let mut tx = self.db.begin().await?;
        let taken =
            sqlx::query("UPDATE vouchers SET stock = stock - 1 WHERE id = ?1 AND stock > 0")
                .bind(voucher_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        if taken == 0 {
            drop(tx); // rolls back
            let exists = sqlx::query("SELECT 1 FROM vouchers WHERE id = ?1")
                .bind(voucher_id)
                .fetch_optional(&self.db)
                .await?
                .is_some();
            return Err(if exists {
                AppError::SoldOut
            } else {
                AppError::NoSuchVoucher
            });
        }
        sqlx::query("INSERT INTO orders (id, user_id, voucher_id, server) VALUES (?1, ?2, ?3, ?4)")
            .bind(order_id)
            .bind(user_id)
            .bind(voucher_id)
            .bind(&*self.server)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// `GET /vouchers/{id}`
async fn voucher(
    State(shop): State<Shop>,
    Path(id): Path<i64>,
) -> Result<Json<serde_json::Value>, AppError> {
    let row = sqlx::query("SELECT stock, initial_stock FROM vouchers WHERE id = ?1")
        .bind(id)
        .fetch_optional(&shop.db)
        .await?
        .ok_or(AppError::NoSuchVoucher)?;
    let stock: i64 = row.try_get(0)?;
    let initial_stock: i64 = row.try_get(1)?;
    Ok(Json(
        json!({"id": id, "stock": stock, "initial_stock": initial_stock}),
    ))
}

fn to_i64(value: u64, name: &str) -> Result<i64, AppError> {
    i64::try_from(value).map_err(|_| AppError::BadRequest(format!("{name} is too large")))
}

/// Command line, with environment fallbacks.
struct Args {
    bind: String,
    port: u16,
    config: PathBuf,
    db: PathBuf,
    voucher: i64,
    stock: i64,
    unlocked: bool,
}

const USAGE: &str = "usage: flash-sale-server [--port N] [--bind ADDR] [--config distlock.toml] \
[--db flash-sale.db] [--voucher ID] [--stock N] [--unlocked]
env: PORT, DISTLOCK_CONFIG, FLASH_SALE_DB, FLASH_SALE_STOCK";

fn parse_args() -> Result<Args, String> {
    let env = |name: &str| std::env::var(name).ok();
    let mut port = env("PORT").unwrap_or_else(|| "8080".into());
    let mut stock = env("FLASH_SALE_STOCK").unwrap_or_else(|| "100".into());
    let mut args = Args {
        bind: "127.0.0.1".into(),
        port: 0,
        config: env("DISTLOCK_CONFIG")
            .unwrap_or_else(|| "distlock.toml".into())
            .into(),
        db: env("FLASH_SALE_DB")
            .unwrap_or_else(|| "flash-sale.db".into())
            .into(),
        voucher: 1,
        stock: 0,
        unlocked: false,
    };
    let mut voucher = "1".to_owned();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => port = value()?,
            "--bind" => args.bind = value()?,
            "--config" => args.config = value()?.into(),
            "--db" => args.db = value()?.into(),
            "--voucher" => voucher = value()?,
            "--stock" => stock = value()?,
            "--unlocked" => args.unlocked = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    args.port = port.parse().map_err(|_| format!("bad port `{port}`"))?;
    args.stock = stock.parse().map_err(|_| format!("bad stock `{stock}`"))?;
    args.voucher = voucher
        .parse()
        .map_err(|_| format!("bad voucher id `{voucher}`"))?;
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("flash-sale-server: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    // distlock reports through the `metrics` facade; this process exports Prometheus text.
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("installing the metrics recorder: {e}"))?;
    distlock::init_from_path(&args.config)
        .await
        .map_err(|e| format!("distlock init from {}: {e}", args.config.display()))?;
    let db = distlock_examples::open_db(&args.db, 16)
        .await
        .map_err(|e| format!("opening {}: {e}", args.db.display()))?;
    distlock_examples::create_schema(&db, args.voucher, args.stock)
        .await
        .map_err(|e| format!("creating the schema in {}: {e}", args.db.display()))?;

    let listener = tokio::net::TcpListener::bind((args.bind.as_str(), args.port))
        .await
        .map_err(|e| format!("binding {}:{}: {e}", args.bind, args.port))?;
    let addr = listener.local_addr()?;
    let shop = Shop {
        db: db.clone(),
        ids: IdGenerator::new("order"),
        server: addr.to_string().into(),
        unlocked: args.unlocked,
    };
    let app = Router::new()
        .route("/orders", post(create_order))
        .route("/vouchers/{id}", get(voucher))
        .route("/health", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(move || {
                let prometheus = prometheus.clone();
                async move { prometheus.render() }
            }),
        )
        .with_state(shop);
    eprintln!(
        "flash-sale-server: listening on http://{addr} (db {}, config {}{})",
        args.db.display(),
        args.config.display(),
        if args.unlocked { ", UNLOCKED" } else { "" }
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    // The requests in flight are drained: give back whatever is still held (bounded).
    distlock::shutdown().await;
    db.close().await;
    eprintln!("flash-sale-server: {addr} stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
