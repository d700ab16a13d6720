//! Fencing a read-modify-write of a balance (real servers): the lock on a private
//! redis-server restarted empty (no persistence, a documented limit), so an old holder
//! goes on while a new holder is inside; the balance on Redis (`distlock::fence`, every
//! mode) and on PostgreSQL (`DISTLOCK_TEST_POSTGRES`, the documented SQL pattern).
//!
//! The interleaving is fixed by the test, not by timing: the old holder reads, the lock's
//! server restarts empty, the new holder takes the lock and reads, the old holder writes
//! its result, the new holder writes its result. An update is lost when a write was
//! accepted (its holder told the deposit was made) and the final balance does not
//! contain it. Fencing the write alone loses the old holder's deposit; claiming before
//! the read (`Fence::claim`, `fence::sql_claim`) loses nothing.

mod common;

use std::time::Duration;

use common::{quoted, unique};
use distlock::fence::{is_stale, sql_claim, sql_update};
use distlock::{Lease, Registry};
use distlock_tests::{
    cluster_urls, postgres_url, redlock_urls, sentinel_master_name, sentinel_urls, single_url,
    RedisProcess,
};

const START: i64 = 100;
const OLD_DEPOSIT: i64 = 10;
const NEW_DEPOSIT: i64 = 5;

/// How a holder updates the balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// Read, compute, fenced write (fencing the write alone).
    WriteOnly,
    /// Claim, read, compute, fenced write.
    Claim,
    /// PostgreSQL only: the new holder's claim, read and write in one transaction; the
    /// old holder's statements on their own.
    ClaimInTransaction,
}

/// Where the balance lives.
enum Balance {
    /// `distlock::fence(key)` on the registry's backend `res`.
    Redis { reg: Registry, key: String },
    /// A row of a table of its own on PostgreSQL, `fence BIGINT` beside the balance.
    Postgres { pool: sqlx::PgPool, table: String },
}

impl Balance {
    async fn create(&self) {
        match self {
            Balance::Redis { reg, key } => {
                let f = reg.fence(key.as_str()).backend("res");
                assert!(f.set(START.to_string(), 0).await.unwrap());
            }
            Balance::Postgres { pool, table } => {
                for stmt in [
                    format!("DROP TABLE IF EXISTS {table}"),
                    format!("CREATE TABLE {table} (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)"),
                    format!("INSERT INTO {table} (id, balance) VALUES (1, {START})"),
                ] {
                    sqlx::query(&stmt).execute(pool).await.unwrap();
                }
            }
        }
    }

    async fn read(&self) -> i64 {
        match self {
            Balance::Redis { reg, key } => {
                let got = reg
                    .fence(key.as_str())
                    .backend("res")
                    .get()
                    .await
                    .unwrap()
                    .expect("the balance exists");
                String::from_utf8(got.value).unwrap().parse().unwrap()
            }
            Balance::Postgres { pool, table } => {
                let row: (i64,) =
                    sqlx::query_as(&format!("SELECT balance FROM {table} WHERE id = 1"))
                        .fetch_one(pool)
                        .await
                        .unwrap();
                row.0
            }
        }
    }

    /// The claim with `token`: whether it was accepted.
    async fn claim(&self, token: u64) -> bool {
        match self {
            Balance::Redis { reg, key } => reg
                .fence(key.as_str())
                .backend("res")
                .claim(token)
                .await
                .unwrap(),
            Balance::Postgres { pool, table } => {
                let done = sqlx::query(&sql_claim(table, "id = $1", "$2"))
                    .bind(1i64)
                    .bind(i64::try_from(token).unwrap())
                    .execute(pool)
                    .await
                    .unwrap();
                !is_stale(done.rows_affected())
            }
        }
    }

    /// The fenced write of `balance` with `token`: whether it was accepted.
    async fn write(&self, balance: i64, token: u64) -> bool {
        match self {
            Balance::Redis { reg, key } => reg
                .fence(key.as_str())
                .backend("res")
                .set(balance.to_string(), token)
                .await
                .unwrap(),
            Balance::Postgres { pool, table } => {
                let sql = sql_update(table, "balance = $1", "id = $2", "$3");
                let done = sqlx::query(&sql)
                    .bind(balance)
                    .bind(1i64)
                    .bind(i64::try_from(token).unwrap())
                    .execute(pool)
                    .await
                    .unwrap();
                !is_stale(done.rows_affected())
            }
        }
    }

    async fn drop_table(&self) {
        if let Balance::Postgres { pool, table } = self {
            let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
                .execute(pool)
                .await;
        }
    }
}

/// A registry with `locks` on `server` (private, restarted by the test) and `res` on the
/// shared test topology of `mode`.
async fn registry(server: &RedisProcess, mode: &str) -> Registry {
    let res = match mode {
        "memory" => "mode = \"memory\"".to_string(),
        "single" => format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        "cluster" => format!("mode = \"cluster\"\nnodes = [{}]", quoted(&cluster_urls())),
        "sentinel" => format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            sentinel_master_name(),
            quoted(&sentinel_urls())
        ),
        "redlock" | "multi" => format!(
            "mode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"300ms\"",
            quoted(&redlock_urls())
        ),
        other => panic!("unknown mode {other}"),
    };
    Registry::from_str(&format!(
        "[defaults]\nbackend = \"locks\"\nkey_prefix = \"rmwtest:\"\nwatchdog_timeout = \"1s\"\n\
         [backends.locks]\nmode = \"single\"\nurl = \"{}\"\n[backends.res]\n{res}\n",
        server.url()
    ))
    .await
    .unwrap_or_else(|e| panic!("{mode}: {e}"))
}

/// The interleaving on `balance` with `pattern`: returns (expected, final), where
/// expected is the start plus every deposit whose write was accepted.
async fn interleave(
    server: &mut RedisProcess,
    reg: &Registry,
    balance: &Balance,
    pattern: Pattern,
) -> (i64, i64) {
    balance.create().await;
    let name = unique("account");
    let lock = || {
        reg.lock(name.as_str())
            .lease(Lease::Auto)
            .wait(Duration::from_secs(10))
    };

    // The old holder takes the lock and reads.
    let old = lock().acquire().await.unwrap();
    let t_old = old.fencing_token();
    let old_read = match pattern {
        Pattern::WriteOnly => balance.read().await,
        Pattern::Claim | Pattern::ClaimInTransaction => {
            assert!(balance.claim(t_old).await, "the old holder's claim");
            balance.read().await
        }
    };

    // The lock's server restarts empty: the old holder's lock is gone, a new holder gets in.
    server.restart();
    let new = lock().acquire().await.unwrap();
    let t_new = new.fencing_token();
    assert!(
        t_new > t_old,
        "tokens grow across the restart: {t_old} then {t_new}"
    );
    let mut expected = START;
    if pattern == Pattern::ClaimInTransaction {
        let Balance::Postgres { pool, table } = balance else {
            panic!("a transaction is PostgreSQL's");
        };
        let mut tx = pool.begin().await.unwrap();
        let claimed = sqlx::query(&sql_claim(table, "id = $1", "$2"))
            .bind(1i64)
            .bind(i64::try_from(t_new).unwrap())
            .execute(&mut *tx)
            .await
            .unwrap();
        assert!(!is_stale(claimed.rows_affected()), "the new holder's claim");
        let (new_read,): (i64,) =
            sqlx::query_as(&format!("SELECT balance FROM {table} WHERE id = 1"))
                .fetch_one(&mut *tx)
                .await
                .unwrap();
        // The old holder's write, on its own connection, waits for the row the claim
        // locked; the new holder writes and commits meanwhile.
        let old_write = {
            let (pool, table) = (pool.clone(), table.clone());
            tokio::spawn(async move {
                let b = Balance::Postgres { pool, table };
                b.write(old_read + OLD_DEPOSIT, t_old).await
            })
        };
        let written = sqlx::query(&sql_update(table, "balance = $1", "id = $2", "$3"))
            .bind(new_read + NEW_DEPOSIT)
            .bind(1i64)
            .bind(i64::try_from(t_new).unwrap())
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        if !is_stale(written.rows_affected()) {
            expected += NEW_DEPOSIT;
        }
        if old_write.await.unwrap() {
            expected += OLD_DEPOSIT;
        }
    } else {
        let new_read = match pattern {
            Pattern::WriteOnly => balance.read().await,
            Pattern::Claim | Pattern::ClaimInTransaction => {
                assert!(balance.claim(t_new).await, "the new holder's claim");
                balance.read().await
            }
        };
        // The old holder, not yet told, writes its result; then the new holder its own.
        if balance.write(old_read + OLD_DEPOSIT, t_old).await {
            expected += OLD_DEPOSIT;
        }
        if balance.write(new_read + NEW_DEPOSIT, t_new).await {
            expected += NEW_DEPOSIT;
        }
        if pattern == Pattern::Claim {
            // The old holder can no longer claim either.
            assert!(!balance.claim(t_old).await, "a stale claim is refused");
        }
    }
    let fin = balance.read().await;
    drop(old);
    new.release().await.unwrap();
    (expected, fin)
}

async fn on_redis(mode: &str, pattern: Pattern) -> (i64, i64) {
    let mut server = RedisProcess::start();
    let reg = registry(&server, mode).await;
    let balance = Balance::Redis {
        reg: reg.clone(),
        key: unique("balance"),
    };
    interleave(&mut server, &reg, &balance, pattern).await
}

async fn on_postgres(pattern: Pattern) -> (i64, i64) {
    let mut server = RedisProcess::start();
    let reg = registry(&server, "memory").await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&postgres_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e}", postgres_url()));
    let table = format!(
        "rmw_accounts_{}_{}",
        std::process::id(),
        unique("t").rsplit(':').next().unwrap()
    );
    let balance = Balance::Postgres { pool, table };
    let r = interleave(&mut server, &reg, &balance, pattern).await;
    balance.drop_table().await;
    r
}

fn assert_no_lost_update(what: &str, (expected, fin): (i64, i64)) {
    assert_eq!(
        fin,
        expected,
        "{what}: {} units lost (every accepted deposit must be in the final balance)",
        expected - fin
    );
}

/// Fencing the write alone is not enough: the old holder's deposit is accepted, then
/// erased by the new holder's write (what the claim step exists for).
fn assert_loses_the_old_deposit(what: &str, (expected, fin): (i64, i64)) {
    assert_eq!(
        (expected, fin),
        (START + OLD_DEPOSIT + NEW_DEPOSIT, START + NEW_DEPOSIT),
        "{what}: the write-only pattern"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_before_read_keeps_every_update_on_redis_every_mode() {
    for mode in [
        "memory", "single", "cluster", "sentinel", "redlock", "multi",
    ] {
        assert_no_lost_update(mode, on_redis(mode, Pattern::Claim).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_before_read_keeps_every_update_on_postgres() {
    assert_no_lost_update("postgres", on_postgres(Pattern::Claim).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_before_read_in_one_transaction_keeps_every_update_on_postgres() {
    assert_no_lost_update(
        "postgres, one transaction",
        on_postgres(Pattern::ClaimInTransaction).await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_the_write_alone_loses_an_update_on_redis() {
    assert_loses_the_old_deposit("single", on_redis("single", Pattern::WriteOnly).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_the_write_alone_loses_an_update_on_postgres() {
    assert_loses_the_old_deposit("postgres", on_postgres(Pattern::WriteOnly).await);
}
