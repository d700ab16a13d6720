//! Code shared by the flash-sale binaries: the SQLite database both server processes use
//! and the load driver reads back.
//!
//! The binaries are in `src/bin/`:
//! - `quickstart`: `Lock::new(..).acquire()` and `#[distributed_lock]` on the memory
//!   backend, no Redis needed.
//! - `flash-sale-server`: an axum service selling a limited stock of vouchers, one per user.
//! - `tower-layer`: `distlock::tower::LockLayer` in front of an axum route and of a plain
//!   tower service, a lock per request keyed by its path or a header.
//! - `flash-sale-load`: a bounded load driver for two server processes, which then checks the
//!   database for duplicate orders and oversell.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::SqliteSynchronous;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// How long a connection waits for another process's write lock on the database file.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Open (creating it if missing) the database at `path` for several processes at once:
/// WAL journal (readers never block the writer), a busy timeout (writers queue up instead
/// of failing), `synchronous = NORMAL` (the usual setting with WAL).
///
/// Switching a database to WAL takes an exclusive lock that SQLite does not wait for (it
/// answers "database is locked" at once when another process has the file open at that
/// moment), so two processes starting together retry the open for up to `BUSY_TIMEOUT`.
pub async fn open_db(path: &Path, max_connections: u32) -> Result<SqlitePool, sqlx::Error> {
    let options = SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    let deadline = tokio::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(BUSY_TIMEOUT + Duration::from_secs(5))
            .connect_with(options.clone())
            .await;
        match pool {
            Err(e) if is_busy(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            result => return result,
        }
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED (and their extended codes).
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6)),
        _ => false,
    }
}

/// Create the tables (if missing) and the voucher `voucher_id` with `stock` (if missing).
///
/// `orders` deliberately has NO unique index on `(user_id, voucher_id)`: "one order per
/// user" is enforced by the application's check-then-insert under the distributed lock,
/// which is what this example demonstrates (and what `--unlocked` shows failing).
pub async fn create_schema(
    db: &SqlitePool,
    voucher_id: i64,
    stock: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS vouchers (
             id            INTEGER PRIMARY KEY,
             stock         INTEGER NOT NULL,
             initial_stock INTEGER NOT NULL
         )",
    )
    .execute(db)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (
             id         INTEGER PRIMARY KEY,
             user_id    INTEGER NOT NULL,
             voucher_id INTEGER NOT NULL,
             server     TEXT NOT NULL,
             created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
         )",
    )
    .execute(db)
    .await?;
    sqlx::query("CREATE INDEX IF NOT EXISTS orders_by_user ON orders (user_id, voucher_id)")
        .execute(db)
        .await?;
    sqlx::query("INSERT OR IGNORE INTO vouchers (id, stock, initial_stock) VALUES (?1, ?2, ?2)")
        .bind(voucher_id)
        .bind(stock)
        .execute(db)
        .await?;
    Ok(())
}
