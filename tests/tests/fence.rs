//! `distlock::fence`: fenced writes on every backend mode (real servers), and the SQL
//! pattern on a real PostgreSQL (`DISTLOCK_TEST_POSTGRES`, started by `scripts/test.sh`
//! through `scripts/postgres.sh`) and on SQLite.

mod common;

use std::time::Duration;

use common::unique;
use distlock::fence::{is_stale, sql_update, Fenced};
use distlock::{LockError, Registry};
use distlock_tests::{
    addr_of, cluster_urls, postgres_url, redlock_urls, resp_command, sentinel_master_name,
    sentinel_urls, single_url, RedisProcess,
};

fn list(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn registry(backend: &str) -> Registry {
    let body = match backend {
        "memory" => "mode = \"memory\"".to_string(),
        "single" => format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        "cluster" => format!("mode = \"cluster\"\nnodes = [{}]", list(&cluster_urls())),
        "sentinel" => format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            sentinel_master_name(),
            list(&sentinel_urls())
        ),
        "redlock" | "multi" => format!(
            "mode = \"{backend}\"\nnodes = [{}]\nnode_timeout = \"300ms\"",
            list(&redlock_urls())
        ),
        other => panic!("unknown backend {other}"),
    };
    Registry::from_str(&format!(
        "[defaults]\nkey_prefix = \"fencetest:\"\n[backends.main]\n{body}\n"
    ))
    .await
    .unwrap_or_else(|e| panic!("{backend}: {e}"))
}

/// The contract on one backend: a newer token is accepted, the same token again is
/// accepted (retry-safe, several writes per section), an older one is refused and leaves
/// the value alone; tokens compare as 64-bit numbers, not as strings or doubles.
async fn contract(backend: &str) {
    let reg = registry(backend).await;
    let key = unique("fence");
    let f = reg.fence(key.as_str());
    assert_eq!(f.get().await.unwrap(), None, "{backend}");
    let g = reg.lock(key.as_str()).acquire().await.unwrap();
    let t = g.fencing_token();
    assert!(f.set("one", t).await.unwrap(), "{backend}: first write");
    assert!(f.set("two", t).await.unwrap(), "{backend}: same token");
    assert!(
        !f.set("stale", t - 1).await.unwrap(),
        "{backend}: older token"
    );
    assert_eq!(
        f.get().await.unwrap(),
        Some(Fenced {
            value: b"two".to_vec(),
            token: t
        }),
        "{backend}"
    );
    g.release().await.unwrap();
    let g2 = reg.lock(key.as_str()).acquire().await.unwrap();
    assert!(g2.fencing_token() > t);
    assert!(f.set("three", g2.fencing_token()).await.unwrap());
    assert!(
        !f.set("late", t).await.unwrap(),
        "{backend}: previous holder"
    );
    g2.release().await.unwrap();

    // 9 < 10 as numbers (a string compare says otherwise); 2^53 + 1 > 2^53 (a double does not).
    let big = reg.fence(unique("fence-big"));
    assert!(big.set("a", 10).await.unwrap());
    assert!(!big.set("b", 9).await.unwrap());
    let edge = 1u64 << 53;
    assert!(big.set("c", edge + 1).await.unwrap());
    assert!(
        !big.set("d", edge).await.unwrap(),
        "{backend}: 2^53 vs 2^53+1"
    );
    assert!(big.set("e", u64::MAX).await.unwrap());
    assert!(!big.set("f", u64::MAX - 1).await.unwrap());
    assert_eq!(big.get().await.unwrap().unwrap().token, u64::MAX);

    // ttl: validated, and the value goes away.
    let short = reg.fence(unique("fence-ttl"));
    assert!(matches!(
        short.clone().ttl(Duration::ZERO).set("x", 1).await,
        Err(LockError::InvalidDuration { .. })
    ));
    assert!(short
        .clone()
        .ttl(Duration::from_millis(200))
        .set("x", 5)
        .await
        .unwrap());
    assert!(short.get().await.unwrap().is_some());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while short.get().await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "{backend}: never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Once it expired the token is forgotten with the value (documented).
    assert!(short.set("y", 1).await.unwrap());

    // An unknown backend is named.
    assert!(matches!(
        reg.fence("k").backend("nope").set("v", 1).await,
        Err(LockError::NoSuchBackend { .. })
    ));

    claim_contract(&reg, backend).await;
}

/// The claim on one backend: it raises the token the value accepts and leaves the value;
/// from then on an older token's write and claim are refused; the same claim again and a
/// write with the claimed token are accepted; a claim below a stored write is refused.
async fn claim_contract(reg: &Registry, backend: &str) {
    let f = reg.fence(unique("claim"));
    // Nothing stored yet: a claim is accepted and stores no value.
    assert!(f.claim(20).await.unwrap(), "{backend}: first claim");
    assert_eq!(
        f.get().await.unwrap(),
        None,
        "{backend}: a claim stores no value"
    );
    assert!(
        !f.set("old", 19).await.unwrap(),
        "{backend}: write below the claim"
    );
    assert!(
        f.set("a", 20).await.unwrap(),
        "{backend}: write with the claim"
    );
    assert!(f.claim(30).await.unwrap(), "{backend}: a newer claim");
    assert!(
        f.claim(30).await.unwrap(),
        "{backend}: the same claim again"
    );
    assert_eq!(
        f.get().await.unwrap(),
        Some(Fenced {
            value: b"a".to_vec(),
            token: 20
        }),
        "{backend}: a claim leaves the value and its token"
    );
    assert!(!f.set("stale", 29).await.unwrap(), "{backend}: older write");
    assert!(!f.claim(29).await.unwrap(), "{backend}: older claim");
    assert!(f.set("b", 31).await.unwrap(), "{backend}: newer write");
    assert!(
        !f.claim(30).await.unwrap(),
        "{backend}: claim below a write"
    );
    // Compared as 64-bit numbers.
    assert!(f.claim(u64::MAX).await.unwrap());
    assert!(!f.set("c", u64::MAX - 1).await.unwrap());
    assert!(f.set("d", u64::MAX).await.unwrap());
    // The ttl is validated before anything is claimed, and a claim with one expires.
    assert!(matches!(
        f.clone().ttl(Duration::ZERO).claim(u64::MAX).await,
        Err(LockError::InvalidDuration { .. })
    ));
    let short = reg
        .fence(unique("claim-ttl"))
        .ttl(Duration::from_millis(200));
    assert!(short.claim(50).await.unwrap());
    assert!(!short.set("x", 49).await.unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !short.set("y", 1).await.unwrap() {
        assert!(
            std::time::Instant::now() < deadline,
            "{backend}: the claim never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn memory() {
    contract("memory").await;
}

#[tokio::test]
async fn single() {
    contract("single").await;
}

#[tokio::test]
async fn cluster() {
    contract("cluster").await;
}

#[tokio::test]
async fn sentinel() {
    contract("sentinel").await;
}

#[tokio::test]
async fn redlock() {
    contract("redlock").await;
}

#[tokio::test]
async fn multi() {
    contract("multi").await;
}

/// The value lives where the documentation says, under the key prefix, as a hash.
#[tokio::test]
async fn layout_on_redis() {
    let reg = registry("single").await;
    let key = unique("layout");
    assert!(reg.fence(key.as_str()).set("v", 42).await.unwrap());
    let name = format!("fencetest:{{{key}}}:fenced");
    let got = resp_command(&addr_of(&single_url()), &["HGET", &name, "t"]).unwrap();
    assert_eq!(got.as_str(), Some("42"));
    let ttl = resp_command(&addr_of(&single_url()), &["PTTL", &name]).unwrap();
    assert_eq!(ttl.as_int(), Some(-1), "no expiry unless asked");
    // A key of another type is an error naming the key, and nothing is written.
    let other = unique("wrongtype");
    let other_name = format!("fencetest:{{{other}}}:fenced");
    resp_command(&addr_of(&single_url()), &["SET", &other_name, "x"]).unwrap();
    let err = reg.fence(other.as_str()).set("v", 1).await.unwrap_err();
    assert!(err.to_string().contains(&other), "{err}");
    let still = resp_command(&addr_of(&single_url()), &["GET", &other_name]).unwrap();
    assert_eq!(still.as_str(), Some("x"));
}

/// A claim lives in the value's hash (field `c`), leaves `v` and `t` alone, and a key of
/// another type is an error with nothing written.
#[tokio::test]
async fn claim_layout_on_redis() {
    let reg = registry("single").await;
    let key = unique("claim-layout");
    let name = format!("fencetest:{{{key}}}:fenced");
    let addr = addr_of(&single_url());
    assert!(reg.fence(key.as_str()).set("v", 42).await.unwrap());
    assert!(reg.fence(key.as_str()).claim(43).await.unwrap());
    let got = resp_command(&addr, &["HMGET", &name, "v", "t", "c"]).unwrap();
    let got: Vec<Option<&str>> = got.as_array().unwrap().iter().map(|v| v.as_str()).collect();
    assert_eq!(got, vec![Some("v"), Some("42"), Some("43")]);
    assert_eq!(
        resp_command(&addr, &["PTTL", &name]).unwrap().as_int(),
        Some(-1)
    );
    let other = unique("claim-wrongtype");
    let other_name = format!("fencetest:{{{other}}}:fenced");
    resp_command(&addr, &["SET", &other_name, "x"]).unwrap();
    let err = reg.fence(other.as_str()).claim(1).await.unwrap_err();
    assert!(err.to_string().contains(&other), "{err}");
    let still = resp_command(&addr, &["GET", &other_name]).unwrap();
    assert_eq!(still.as_str(), Some("x"));
}

/// redlock and multi: a claim needs a quorum of nodes, and is refused as soon as one node
/// that answered holds a larger token, even when a majority accepted it.
#[tokio::test]
async fn claim_on_quorum_modes() {
    let mut servers: Vec<RedisProcess> = (0..3).map(|_| RedisProcess::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisProcess::url).collect();
    for mode in ["redlock", "multi"] {
        let reg = Registry::from_str(&format!(
            "[defaults]\nkey_prefix = \"q:\"\n[backends.main]\nmode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\n",
            list(&urls)
        ))
        .await
        .unwrap();
        let key = unique("claim-q");
        let name = format!("q:{{{key}}}:fenced");
        let f = reg.fence(key.as_str());
        assert!(f.claim(10).await.unwrap(), "{mode}");
        for s in &servers {
            let c = resp_command(&s.addr(), &["HGET", &name, "c"]).unwrap();
            assert_eq!(c.as_str(), Some("10"), "{mode}: claimed on every node");
        }
        // One node holds a larger token (a newer holder's write that reached it alone).
        resp_command(&servers[0].addr(), &["HSET", &name, "v", "new", "t", "100"]).unwrap();
        assert!(!f.claim(60).await.unwrap(), "{mode}: one node is ahead");
        assert!(f.claim(100).await.unwrap(), "{mode}");
    }
    // Registries made while every node is up; then nodes go down.
    let quorum = |mode: &str| {
        format!(
            "[backends.main]\nmode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\n",
            list(&urls)
        )
    };
    let redlock = Registry::from_str(&quorum("redlock")).await.unwrap();
    let multi = Registry::from_str(&quorum("multi")).await.unwrap();
    // redlock: one node of three down, a claim still gets a majority; with two down, not.
    servers[2].kill();
    let f = redlock.fence(unique("claim-down"));
    assert!(f.claim(5).await.unwrap());
    assert!(!f.set("stale", 4).await.unwrap());
    // multi needs every node.
    assert!(matches!(
        multi.fence(unique("claim-multi")).claim(1).await,
        Err(LockError::QuorumNotReached {
            granted: 2,
            needed: 3,
            ..
        })
    ));
    servers[1].kill();
    assert!(matches!(
        f.claim(6).await,
        Err(LockError::QuorumNotReached {
            granted: 1,
            needed: 2,
            ..
        })
    ));
}

/// redlock with 2 of 5 nodes down: still accepted by the 3; a stale token refused; with 3
/// down: `QuorumNotReached`. A read takes the largest token among the answers.
#[tokio::test]
async fn redlock_minority_down() {
    let mut servers: Vec<RedisProcess> = (0..5).map(|_| RedisProcess::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisProcess::url).collect();
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"200ms\"\n",
        list(&urls)
    ))
    .await
    .unwrap();
    let f = reg.fence("acct");
    assert!(f.set("a", 5).await.unwrap());
    servers[0].kill();
    servers[1].kill();
    assert!(f.set("b", 6).await.unwrap());
    assert!(!f.set("stale", 5).await.unwrap());
    assert_eq!(f.get().await.unwrap().unwrap().token, 6);
    servers[2].kill();
    assert!(matches!(
        f.set("c", 7).await,
        Err(LockError::QuorumNotReached {
            granted: 2,
            needed: 3,
            ..
        })
    ));
    assert!(matches!(
        f.get().await,
        Err(LockError::QuorumNotReached { .. })
    ));
}

/// The SQL pattern, the same on PostgreSQL and SQLite: a fenced UPDATE with a newer or
/// equal token changes the row; an older one affects no row and changes nothing.
/// (A macro: the two drivers' result types share no trait for `rows_affected`.)
macro_rules! sql_contract {
    ($pool:expr, $token:expr, $p_balance:expr, $p_id:expr) => {{
        use sqlx::Row;
        let pool = $pool;
        for stmt in [
            "DROP TABLE IF EXISTS fenced_accounts",
            "CREATE TABLE fenced_accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
            "INSERT INTO fenced_accounts (id, balance) VALUES (1, 100)",
        ] {
            sqlx::query(stmt).execute(pool).await.unwrap();
        }
        let sql = sql_update(
            "fenced_accounts",
            &format!("balance = {}", $p_balance),
            &format!("id = {}", $p_id),
            $token,
        );
        let write = |balance: i64, token: i64| {
            let sql = sql.clone();
            async move {
                let done = sqlx::query(&sql)
                    .bind(balance)
                    .bind(1i64)
                    .bind(token)
                    .execute(pool)
                    .await
                    .unwrap();
                !is_stale(done.rows_affected())
            }
        };
        let read = || async {
            let row = sqlx::query("SELECT balance, fence FROM fenced_accounts WHERE id = 1")
                .fetch_one(pool)
                .await
                .unwrap();
            (row.get::<i64, _>(0), row.get::<i64, _>(1))
        };
        assert!(write(90, 7).await, "newer token");
        assert_eq!(read().await, (90, 7));
        assert!(write(80, 7).await, "same token again");
        assert!(!write(1, 6).await, "older token refused");
        assert_eq!(read().await, (80, 7), "a refused write changes nothing");
        assert!(write(70, 8).await);
        assert_eq!(read().await, (70, 8));
        // Many writers with interleaved tokens: the row ends with the largest token's value,
        // and every write with a token below one already applied was refused.
        let mut tokens: Vec<i64> = (10..60).collect();
        tokens.reverse();
        tokens.rotate_left(17);
        let mut applied_max = 8;
        for t in tokens {
            let ok = write(t * 10, t).await;
            assert_eq!(ok, t >= applied_max, "token {t} after {applied_max}");
            applied_max = applied_max.max(t);
        }
        assert_eq!(read().await, (590, 59));
    }};
}

#[tokio::test]
async fn sql_on_postgres() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&postgres_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e}", postgres_url()));
    sql_contract!(&pool, "$3", "$1", "$2");
}

#[tokio::test]
async fn sql_on_sqlite() {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .unwrap();
    sql_contract!(&pool, "?3", "?1", "?2");
}
