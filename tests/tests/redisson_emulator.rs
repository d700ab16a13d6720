//! The Redisson client emulator (`distlock_tests::redisson`) against a real redis-server,
//! and distlock's `protocol = "redisson"` scripts (`distlock/src/protocol/redisson/*.lua`,
//! run here directly with EVAL) alongside it on the same names: exclusion both ways,
//! wake-ups both ways, leases of crashed holders, fair order, read-write semantics.
//!
//! Needs the shared single server: `scripts/test.sh -p distlock-tests --test
//! redisson_emulator` (or `scripts/servers.sh start`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock_tests::redisson::*;
use distlock_tests::{
    addr_of, cluster_urls, encode_command, read_resp, resp_command, single_url, RespValue,
};
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::Script;

// The acquire scripts as distlock sends them: after `redisson/token_prologue.lua`.
const LOCK: &str = distlock::__private::scripts::REDISSON_LOCK;
const UNLOCK: &str = include_str!("../../distlock/src/protocol/redisson/unlock.lua");
const RENEW: &str = include_str!("../../distlock/src/protocol/redisson/renew.lua");
const FAIR_LOCK: &str = distlock::__private::scripts::REDISSON_FAIR_LOCK;
const FAIR_UNLOCK: &str = include_str!("../../distlock/src/protocol/redisson/fair_unlock.lua");
const FAIR_CANCEL: &str = include_str!("../../distlock/src/protocol/redisson/fair_cancel.lua");
const READ_LOCK: &str = distlock::__private::scripts::REDISSON_READ_LOCK;
const READ_UNLOCK: &str = include_str!("../../distlock/src/protocol/redisson/read_unlock.lua");
const READ_RENEW: &str = include_str!("../../distlock/src/protocol/redisson/read_renew.lua");
const WRITE_LOCK: &str = distlock::__private::scripts::REDISSON_WRITE_LOCK;
const WRITE_UNLOCK: &str = include_str!("../../distlock/src/protocol/redisson/write_unlock.lua");

/// Well past any wake-up by message, well short of the 30 s leases the holders use: a
/// waiter done within this was woken by a message, not by a lease running out.
const WOKEN: Duration = Duration::from_secs(3);
const LONG: Duration = Duration::from_secs(30);
const LATCH_MS: u64 = 20_000;

fn unique(what: &str) -> String {
    format!("rsx-{what}-{}", &generate_id()[..10])
}

async fn redisson() -> Redisson {
    redisson_with(RedissonConfig::default()).await
}

async fn redisson_with(config: RedissonConfig) -> Redisson {
    Redisson::connect(&single_url(), config)
        .await
        .expect("connect the emulator to the test redis-server")
}

fn cmd(args: &[&str]) -> RespValue {
    resp_command(&addr_of(&single_url()), args).expect("redis command")
}

fn int(args: &[&str]) -> i64 {
    let v = cmd(args);
    v.as_int()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{args:?}: not a number: {v:?}"))
}

/// Waits (bounded) until `n` connections subscribe to `channel`: the waiter is parked.
async fn wait_subscribers(channel: &str, n: i64) {
    let client = redis::Client::open(single_url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the test redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async::<Vec<(String, i64)>>(&mut conn)
            .await
            .expect("PUBSUB NUMSUB")
            .remove(0);
        if count >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nobody subscribed to {channel} within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// distlock's side, running the protocol/redisson scripts as distlock will: a process
/// UUID, one owner field `<uuid>:<n>` per acquisition.
struct Distlock {
    client: redis::Client,
    conn: MultiplexedConnection,
    uuid: String,
    next: AtomicU64,
}

/// `(state, value)` as the acquire scripts answer: 1 new, 2 re-entered, 0 refused.
type Acquired = (i64, i64);

impl Distlock {
    async fn new() -> Distlock {
        let client = redis::Client::open(single_url()).expect("url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis-server");
        Distlock {
            client,
            conn,
            uuid: random_uuid(),
            next: AtomicU64::new(1),
        }
    }

    fn owner(&self) -> String {
        format!(
            "{}:{}",
            self.uuid,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    async fn lock(&self, name: &str, owner: &str, lease_ms: u64, fenced: bool) -> Acquired {
        let script = Script::new(LOCK);
        let mut inv = script.key(name);
        if fenced {
            inv.key(token_name(name));
        }
        let v: Vec<i64> = inv
            .arg(lease_ms)
            .arg(owner)
            .invoke_async(&mut self.conn())
            .await
            .expect("lock.lua");
        (v[0], v[1])
    }

    async fn unlock_req(&self, name: &str, owner: &str, request: &str) -> i64 {
        Script::new(UNLOCK)
            .key(name)
            .key(lock_channel(name))
            .key(unlock_latch_name(name, request))
            .arg(UNLOCK_MESSAGE)
            .arg(30_000)
            .arg(owner)
            .arg("publish")
            .arg(LATCH_MS)
            .invoke_async(&mut self.conn())
            .await
            .expect("unlock.lua")
    }

    /// A release as distlock does it: a fresh request id, then the latch deleted.
    async fn unlock(&self, name: &str, owner: &str) -> i64 {
        let request = generate_id();
        let r = self.unlock_req(name, owner, &request).await;
        int(&["DEL", &unlock_latch_name(name, &request)]);
        r
    }

    async fn renew(&self, name: &str, owner: &str, lease_ms: u64) -> i64 {
        Script::new(RENEW)
            .key(name)
            .arg(lease_ms)
            .arg(owner)
            .invoke_async(&mut self.conn())
            .await
            .expect("renew.lua")
    }

    async fn fair_lock(&self, name: &str, owner: &str, allowance_ms: u64, mode: &str) -> Acquired {
        let v: Vec<i64> = Script::new(FAIR_LOCK)
            .key(name)
            .key(fair_queue_name(name))
            .key(fair_timeout_name(name))
            .arg(30_000)
            .arg(owner)
            .arg(allowance_ms)
            .arg(mode)
            .invoke_async(&mut self.conn())
            .await
            .expect("fair_lock.lua");
        (v[0], v[1])
    }

    async fn fair_unlock(&self, name: &str, owner: &str) -> i64 {
        let request = generate_id();
        let r: i64 = Script::new(FAIR_UNLOCK)
            .key(name)
            .key(fair_queue_name(name))
            .key(fair_timeout_name(name))
            .key(lock_channel(name))
            .key(unlock_latch_name(name, &request))
            .arg(UNLOCK_MESSAGE)
            .arg(30_000)
            .arg(owner)
            .arg("publish")
            .arg(LATCH_MS)
            .invoke_async(&mut self.conn())
            .await
            .expect("fair_unlock.lua");
        int(&["DEL", &unlock_latch_name(name, &request)]);
        r
    }

    async fn fair_cancel(&self, name: &str, owner: &str, allowance_ms: u64) -> i64 {
        Script::new(FAIR_CANCEL)
            .key(fair_queue_name(name))
            .key(fair_timeout_name(name))
            .key(name)
            .key(lock_channel(name))
            .arg(owner)
            .arg(allowance_ms)
            .arg(UNLOCK_MESSAGE)
            .arg("publish")
            .invoke_async(&mut self.conn())
            .await
            .expect("fair_cancel.lua")
    }

    async fn read_lock(&self, name: &str, owner: &str, lease_ms: u64) -> Acquired {
        let v: Vec<i64> = Script::new(READ_LOCK)
            .key(name)
            .key(rw_timeout_prefix(name, owner))
            .arg(lease_ms)
            .arg(owner)
            .arg(format!("{owner}:write"))
            .invoke_async(&mut self.conn())
            .await
            .expect("read_lock.lua");
        (v[0], v[1])
    }

    async fn read_unlock(&self, name: &str, owner: &str) -> i64 {
        let request = generate_id();
        let r: i64 = Script::new(READ_UNLOCK)
            .key(name)
            .key(rwlock_channel(name))
            .key(rw_timeout_prefix(name, owner))
            .key(rw_key_prefix(name, owner))
            .key(unlock_latch_name(name, &request))
            .arg(UNLOCK_MESSAGE)
            .arg(owner)
            .arg("publish")
            .arg(LATCH_MS)
            .invoke_async(&mut self.conn())
            .await
            .expect("read_unlock.lua");
        int(&["DEL", &unlock_latch_name(name, &request)]);
        r
    }

    async fn read_renew(&self, name: &str, owner: &str, lease_ms: u64) -> i64 {
        Script::new(READ_RENEW)
            .key(name)
            .key(rw_key_prefix(name, owner))
            .arg(lease_ms)
            .arg(owner)
            .invoke_async(&mut self.conn())
            .await
            .expect("read_renew.lua")
    }

    async fn write_lock(&self, name: &str, owner: &str, lease_ms: u64) -> Acquired {
        let v: Vec<i64> = Script::new(WRITE_LOCK)
            .key(name)
            .arg(lease_ms)
            .arg(format!("{owner}:write"))
            .invoke_async(&mut self.conn())
            .await
            .expect("write_lock.lua");
        (v[0], v[1])
    }

    async fn write_unlock(&self, name: &str, owner: &str) -> i64 {
        let request = generate_id();
        let r: i64 = Script::new(WRITE_UNLOCK)
            .key(name)
            .key(rwlock_channel(name))
            .key(unlock_latch_name(name, &request))
            .arg(READ_UNLOCK_MESSAGE)
            .arg(30_000)
            .arg(format!("{owner}:write"))
            .arg("publish")
            .arg(LATCH_MS)
            .invoke_async(&mut self.conn())
            .await
            .expect("write_unlock.lua");
        int(&["DEL", &unlock_latch_name(name, &request)]);
        r
    }

    /// Wait as distlock will: subscribe to `channel`, then attempt; when refused, wait for
    /// a message on the channel, at most the hint the script gave, and attempt again.
    /// True when acquired within `budget`.
    async fn wait_for<F, Fut>(&self, channel: &str, budget: Duration, mut attempt: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Acquired>,
    {
        let start = Instant::now();
        let mut pubsub = self.client.get_async_pubsub().await.expect("pubsub");
        pubsub.subscribe(channel).await.expect("subscribe");
        let mut messages = pubsub.on_message();
        loop {
            let (state, hint) = attempt().await;
            if state != 0 {
                return true;
            }
            let left = budget.saturating_sub(start.elapsed());
            if left.is_zero() {
                return false;
            }
            let pause = Duration::from_millis(hint.max(1) as u64).min(left);
            let _ = tokio::time::timeout(pause, messages.next()).await;
        }
    }
}

// ------------------------------------------------------------------ emulator alone

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_excludes_and_wakes_by_message() {
    let name = unique("excl");
    let (a, b) = (redisson().await, redisson().await);
    let (la, lb) = (
        a.lock(&name, LockKind::Plain),
        b.lock(&name, LockKind::Plain),
    );
    assert!(la.try_lock(1, Duration::ZERO, None).await.unwrap());
    assert!(!lb.try_lock_now(1).await.unwrap());
    assert!(
        !la.try_lock_now(2).await.unwrap(),
        "another thread of A is excluded too"
    );
    // the hash is the name itself, the field "<uuid>:<thread>", the watchdog's 30 s lease
    assert_eq!(int(&["HGET", &name, &format!("{}:1", a.id())]), 1);
    assert!(int(&["PTTL", &name]) > 20_000);

    let waiter = tokio::spawn(async move {
        let t = Instant::now();
        let ok = lb.try_lock(7, Duration::from_secs(20), None).await.unwrap();
        (ok, t)
    });
    wait_subscribers(&lock_channel(&name), 1).await;
    let released = Instant::now();
    la.unlock(1).await.unwrap();
    let (ok, _) = waiter.await.unwrap();
    assert!(ok);
    assert!(released.elapsed() < WOKEN, "woken by the unlock message");
    assert_eq!(int(&["HGET", &name, &format!("{}:7", b.id())]), 1);
    assert!(la.unlock(1).await.is_err(), "A holds nothing any more");
    b.lock(&name, LockKind::Plain).unlock(7).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);
    a.crash();
    b.crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_reentrancy_and_unlock_latch() {
    let name = unique("reent");
    let (a, b) = (redisson().await, redisson().await);
    let la = a.lock(&name, LockKind::Plain);
    let lb = b.lock(&name, LockKind::Plain);
    assert!(la.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    assert!(la.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    assert_eq!(la.hold_count(1).await.unwrap(), 2);

    // a retried unlock (same request id) counts once: the latch answers the retry
    let req = generate_id();
    assert_eq!(la.unlock_inner(1, &req).await.unwrap(), Some(false));
    assert_eq!(la.unlock_inner(1, &req).await.unwrap(), Some(false));
    assert_eq!(la.hold_count(1).await.unwrap(), 1);
    let latch = unlock_latch_name(&name, &req);
    let ttl = int(&["PTTL", &latch]);
    assert!(ttl > 0 && ttl <= 20_000, "latch ttl {ttl}");
    assert!(!lb.try_lock_now(1).await.unwrap());

    let req2 = generate_id();
    assert_eq!(la.unlock_inner(1, &req2).await.unwrap(), Some(true));
    assert_eq!(la.unlock_inner(1, &req2).await.unwrap(), Some(true));
    assert_eq!(int(&["EXISTS", &name]), 0);
    assert_eq!(la.unlock_inner(1, &generate_id()).await.unwrap(), None);
    int(&["DEL", &latch, &unlock_latch_name(&name, &req2)]);
    assert!(lb.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    lb.unlock(1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_watchdog_renews_and_a_crash_frees_after_the_lease() {
    let name = unique("wd");
    let config = RedissonConfig {
        watchdog_timeout: Duration::from_millis(900),
        ..RedissonConfig::default()
    };
    let a = redisson_with(config).await;
    let b = redisson().await;
    let la = a.lock(&name, LockKind::Plain);
    assert!(la.try_lock_now(1).await.unwrap());
    // three leases later the watchdog has kept it
    tokio::time::sleep(Duration::from_millis(2700)).await;
    assert_eq!(la.hold_count(1).await.unwrap(), 1);
    a.crash();
    let crashed = Instant::now();
    let lb = b.lock(&name, LockKind::Plain);
    assert!(lb
        .try_lock(1, Duration::from_secs(10), Some(LONG))
        .await
        .unwrap());
    assert!(
        crashed.elapsed() < Duration::from_secs(3),
        "freed after the 900 ms lease"
    );
    lb.unlock(1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_fenced_tokens_grow() {
    let name = unique("fence");
    let (a, b) = (redisson().await, redisson().await);
    let fa = a.lock(&name, LockKind::Fenced);
    let fb = b.lock(&name, LockKind::Fenced);
    let t1 = fa
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap();
    let t1 = t1.expect("acquired");
    assert_eq!(
        fb.try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
            .await
            .unwrap(),
        None
    );
    fa.unlock(1).await.unwrap();
    let t2 = fb
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap();
    assert_eq!(t2, Some(t1 + 1));
    assert_eq!(fb.token().await.unwrap(), Some(t1 + 1));
    fb.unlock(1).await.unwrap();
    int(&["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_fair_lock_grants_in_order() {
    let name = unique("fair");
    let (a, b, c) = (redisson().await, redisson().await, redisson().await);
    let la = a.lock(&name, LockKind::Fair);
    assert!(la.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    let lb = b.lock(&name, LockKind::Fair);
    let lc = c.lock(&name, LockKind::Fair);
    let b_channel = lb.channel(1);
    let c_channel = lc.channel(1);
    assert_eq!(b_channel, format!("{}:{}:1", lock_channel(&name), b.id()));
    let wb = tokio::spawn(async move { lb.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&b_channel, 1).await;
    let wc = tokio::spawn(async move { lc.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&c_channel, 1).await;
    assert_eq!(int(&["LLEN", &fair_queue_name(&name)]), 2);
    assert_eq!(int(&["ZCARD", &fair_timeout_name(&name)]), 2);

    let released = Instant::now();
    la.unlock(1).await.unwrap();
    assert!(
        wb.await.unwrap().unwrap(),
        "B, first in the queue, goes first"
    );
    assert!(released.elapsed() < WOKEN);
    assert!(!wc.is_finished(), "C still waits behind B");
    let lb = b.lock(&name, LockKind::Fair);
    assert_eq!(lb.hold_count(1).await.unwrap(), 1);
    lb.unlock(1).await.unwrap();
    assert!(wc.await.unwrap().unwrap());
    c.lock(&name, LockKind::Fair).unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &fair_queue_name(&name)]), 0);
    assert_eq!(int(&["EXISTS", &fair_timeout_name(&name)]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emulator_read_write_semantics() {
    let name = unique("rw");
    let (a, b, c) = (redisson().await, redisson().await, redisson().await);
    let ra = a.lock(&name, LockKind::Read);
    let rb = b.lock(&name, LockKind::Read);
    let wc = c.lock(&name, LockKind::Write);
    assert!(ra.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    assert!(rb.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    assert_eq!(cmd(&["HGET", &name, "mode"]).as_str(), Some("read"));
    let timeout_key = format!("{{{name}}}:{}:1:rwlock_timeout:1", a.id());
    assert!(
        int(&["PTTL", &timeout_key]) > 0,
        "per-hold timeout key {timeout_key}"
    );
    assert!(!wc.try_lock_now(1).await.unwrap());

    let writer =
        tokio::spawn(async move { wc.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&rwlock_channel(&name), 1).await;
    ra.unlock(1).await.unwrap();
    assert!(!writer.is_finished(), "B still reads");
    let released = Instant::now();
    rb.unlock(1).await.unwrap();
    assert!(writer.await.unwrap().unwrap());
    assert!(released.elapsed() < WOKEN);
    assert_eq!(cmd(&["HGET", &name, "mode"]).as_str(), Some("write"));
    assert_eq!(int(&["HGET", &name, &format!("{}:1:write", c.id())]), 1);

    // a reader waits for the writer; the writer's READ_UNLOCK_MESSAGE wakes it
    let reader =
        tokio::spawn(async move { ra.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&rwlock_channel(&name), 1).await;
    let wc = c.lock(&name, LockKind::Write);
    let released = Instant::now();
    wc.unlock(1).await.unwrap();
    assert!(reader.await.unwrap().unwrap());
    assert!(released.elapsed() < WOKEN);
    a.lock(&name, LockKind::Read).unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);

    // the writer's own thread may also read (a downgrade): the lock stays in read mode
    // and other readers may join (Redisson publishes nothing on a downgrade: a waiting
    // reader would only find out at its timed retry)
    assert!(wc.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    let rc = c.lock(&name, LockKind::Read);
    assert!(rc.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    assert!(!b.lock(&name, LockKind::Read).try_lock_now(1).await.unwrap());
    wc.unlock(1).await.unwrap();
    assert_eq!(cmd(&["HGET", &name, "mode"]).as_str(), Some("read"));
    let rb = b.lock(&name, LockKind::Read);
    assert!(rb.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    rb.unlock(1).await.unwrap();
    rc.unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);
}

// ------------------------------------------------------------- distlock <-> emulator

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_reentrant_lock_excludes_and_wakes_both_ways() {
    let name = unique("ix");
    let d = Distlock::new().await;
    let r = redisson().await;
    let lr = r.lock(&name, LockKind::Plain);

    // distlock holds (re-entrantly): Redisson is refused, then woken by distlock's release
    let owner = d.owner();
    assert_eq!(d.lock(&name, &owner, 30_000, false).await, (1, 0));
    assert_eq!(d.lock(&name, &owner, 30_000, false).await, (2, 0));
    assert!(!lr.try_lock_now(1).await.unwrap());
    let waiter = tokio::spawn(async move { lr.try_lock(1, Duration::from_secs(20), None).await });
    wait_subscribers(&lock_channel(&name), 1).await;
    assert_eq!(d.unlock(&name, &owner).await, 0, "one hold left");
    assert!(!waiter.is_finished());
    let released = Instant::now();
    assert_eq!(d.unlock(&name, &owner).await, 1);
    assert!(waiter.await.unwrap().unwrap());
    assert!(released.elapsed() < WOKEN);

    // Redisson holds: distlock is refused, then woken by Redisson's unlock message
    let other = d.owner();
    let (state, pttl) = d.lock(&name, &other, 30_000, false).await;
    assert_eq!(state, 0);
    assert!(pttl > 20_000, "the watchdog lease, {pttl}");
    let lr = r.lock(&name, LockKind::Plain);
    let channel = lock_channel(&name);
    let unlocker = tokio::spawn(async move {
        wait_subscribers(&channel, 1).await;
        let t = Instant::now();
        lr.unlock(1).await.unwrap();
        t
    });
    let ok = d
        .wait_for(&lock_channel(&name), Duration::from_secs(20), || {
            d.lock(&name, &other, 30_000, false)
        })
        .await;
    assert!(ok);
    let released = unlocker.await.unwrap();
    assert!(released.elapsed() < WOKEN);
    assert_eq!(d.unlock(&name, &other).await, 1);
    assert_eq!(
        d.unlock(&name, &other).await,
        -1,
        "a second release finds nothing"
    );
    r.crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_crashed_holders_free_after_their_lease() {
    let name = unique("crash");
    let d = Distlock::new().await;
    let r = redisson_with(RedissonConfig {
        watchdog_timeout: Duration::from_millis(600),
        ..RedissonConfig::default()
    })
    .await;
    let lr = r.lock(&name, LockKind::Plain);

    // a crashed Redisson holder (watchdog lease 600 ms): distlock gets the lock after it
    assert!(lr.try_lock_now(1).await.unwrap());
    r.crash();
    let crashed = Instant::now();
    let owner = d.owner();
    let ok = d
        .wait_for(&lock_channel(&name), Duration::from_secs(10), || {
            d.lock(&name, &owner, 600, false)
        })
        .await;
    assert!(ok);
    assert!(crashed.elapsed() < Duration::from_secs(3));

    // a crashed distlock holder (lease 600 ms, never renewed): Redisson gets it after
    let taken = Instant::now();
    assert!(lr
        .try_lock(2, Duration::from_secs(10), Some(LONG))
        .await
        .unwrap());
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "not before the lease ends: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    lr.unlock(2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_fenced_tokens_are_one_sequence() {
    let name = unique("ifence");
    let d = Distlock::new().await;
    let r = redisson().await;
    let fr = r.lock(&name, LockKind::Fenced);
    let t1 = fr
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap()
        .expect("acquired");
    let owner = d.owner();
    assert_eq!(d.lock(&name, &owner, 30_000, true).await.0, 0);
    fr.unlock(1).await.unwrap();
    assert_eq!(d.lock(&name, &owner, 30_000, true).await, (1, t1 + 1));
    assert_eq!(
        fr.try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
            .await
            .unwrap(),
        None
    );
    assert_eq!(d.unlock(&name, &owner).await, 1);
    let t3 = fr
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap();
    assert_eq!(t3, Some(t1 + 2));
    fr.unlock(1).await.unwrap();
    int(&["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_fair_lock_keeps_one_queue() {
    let name = unique("ifair");
    let d = Distlock::new().await;
    let (a, c) = (redisson().await, redisson().await);
    let la = a.lock(&name, LockKind::Fair);
    assert!(la.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());

    // distlock queues first (its own channel: the stem plus its owner field) ...
    let owner = d.owner();
    assert_eq!(d.fair_lock(&name, &owner, 20_000, "try").await.0, 0);
    assert_eq!(
        int(&["LLEN", &fair_queue_name(&name)]),
        0,
        "try mode does not queue"
    );
    assert_eq!(d.fair_lock(&name, &owner, 20_000, "wait").await.0, 0);
    let my_channel = format!("{}:{owner}", lock_channel(&name));
    // ... then a Redisson client
    let lc = c.lock(&name, LockKind::Fair);
    let c_channel = lc.channel(1);
    let wc = tokio::spawn(async move { lc.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&c_channel, 1).await;
    assert_eq!(int(&["LLEN", &fair_queue_name(&name)]), 2);

    let unlocker = tokio::spawn(async move {
        wait_subscribers(&my_channel, 1).await;
        let t = Instant::now();
        la.unlock(1).await.unwrap();
        t
    });
    let ok = d
        .wait_for(
            &format!("{}:{owner}", lock_channel(&name)),
            Duration::from_secs(20),
            || d.fair_lock(&name, &owner, 20_000, "wait"),
        )
        .await;
    assert!(ok, "distlock, first in the queue, goes first");
    assert!(unlocker.await.unwrap().elapsed() < WOKEN);
    assert!(!wc.is_finished(), "the Redisson waiter is still behind");
    assert_eq!(d.fair_unlock(&name, &owner).await, 1);
    assert!(wc.await.unwrap().unwrap(), "woken on its own channel");
    c.lock(&name, LockKind::Fair).unlock(1).await.unwrap();

    // a distlock waiter that gives up leaves the queue
    let lc = c.lock(&name, LockKind::Fair);
    assert!(lc.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    let quitter = d.owner();
    assert_eq!(d.fair_lock(&name, &quitter, 20_000, "wait").await.0, 0);
    assert_eq!(d.fair_cancel(&name, &quitter, 20_000).await, 1);
    assert_eq!(d.fair_cancel(&name, &quitter, 20_000).await, 0);
    assert_eq!(int(&["LLEN", &fair_queue_name(&name)]), 0);
    assert_eq!(d.fair_unlock(&name, &quitter).await, -1);
    lc.unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_read_write_lock() {
    let name = unique("irw");
    let d = Distlock::new().await;
    let r = redisson().await;

    // readers of both share; a Redisson writer waits for both
    let reader = d.owner();
    assert_eq!(d.read_lock(&name, &reader, 30_000).await, (1, 0));
    let rr = r.lock(&name, LockKind::Read);
    assert!(rr.try_lock(1, Duration::ZERO, Some(LONG)).await.unwrap());
    let w = redisson().await;
    let ww = w.lock(&name, LockKind::Write);
    let writer =
        tokio::spawn(async move { ww.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&rwlock_channel(&name), 1).await;
    let dw = d.owner();
    assert_eq!(
        d.write_lock(&name, &dw, 30_000).await.0,
        0,
        "no writer among readers"
    );
    rr.unlock(1).await.unwrap();
    assert!(!writer.is_finished());
    assert_eq!(d.read_renew(&name, &reader, 30_000).await, 1);
    let released = Instant::now();
    assert_eq!(d.read_unlock(&name, &reader).await, 1);
    assert!(
        writer.await.unwrap().unwrap(),
        "woken by distlock's read release"
    );
    assert!(released.elapsed() < WOKEN);

    // distlock's writer waits for Redisson's writer (READ_UNLOCK_MESSAGE wakes it)
    let ww = w.lock(&name, LockKind::Write);
    let unlocker = tokio::spawn({
        let channel = rwlock_channel(&name);
        async move {
            wait_subscribers(&channel, 1).await;
            ww.unlock(1).await.unwrap();
            Instant::now()
        }
    });
    let ok = d
        .wait_for(&rwlock_channel(&name), Duration::from_secs(20), || {
            d.write_lock(&name, &dw, 30_000)
        })
        .await;
    assert!(ok);
    assert!(unlocker.await.unwrap().elapsed() < WOKEN);
    assert_eq!(int(&["HGET", &name, &format!("{dw}:write")]), 1);

    // a Redisson reader waits for distlock's writer
    let rr = r.lock(&name, LockKind::Read);
    assert!(!rr.try_lock_now(1).await.unwrap());
    let waiting =
        tokio::spawn(async move { rr.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&rwlock_channel(&name), 1).await;
    let released = Instant::now();
    assert_eq!(d.write_unlock(&name, &dw).await, 1);
    assert!(waiting.await.unwrap().unwrap());
    assert!(released.elapsed() < WOKEN);
    assert_eq!(d.write_unlock(&name, &dw).await, -1);
    r.lock(&name, LockKind::Read).unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);
    r.crash();
    w.crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distlock_scripts_are_safe_to_repeat_and_only_extend() {
    let name = unique("rep");
    let d = Distlock::new().await;
    let owner = d.owner();
    assert_eq!(d.lock(&name, &owner, 60_000, false).await, (1, 0));
    assert_eq!(d.lock(&name, &owner, 1_000, false).await, (2, 0));
    assert!(int(&["PTTL", &name]) > 50_000, "a re-entry never shortens");
    assert_eq!(d.renew(&name, &owner, 1_000).await, 1);
    assert!(int(&["PTTL", &name]) > 50_000, "a renewal never shortens");
    let req = generate_id();
    assert_eq!(d.unlock_req(&name, &owner, &req).await, 0);
    assert_eq!(
        d.unlock_req(&name, &owner, &req).await,
        0,
        "the retry is answered by the latch"
    );
    assert_eq!(int(&["HGET", &name, &owner]), 1);
    int(&["DEL", &unlock_latch_name(&name, &req)]);
    assert_eq!(d.unlock(&name, &owner).await, 1);
    assert_eq!(d.renew(&name, &owner, 1_000).await, 0, "never re-creates");
    assert_eq!(int(&["EXISTS", &name]), 0);

    // the write lock: re-entry and renewal never shorten either
    let w = d.owner();
    assert_eq!(d.write_lock(&name, &w, 60_000).await, (1, 0));
    assert_eq!(d.write_lock(&name, &w, 1_000).await, (2, 0));
    let pttl = int(&["PTTL", &name]);
    assert!(
        pttl > 50_000 && pttl <= 60_000,
        "not beyond the lease either: {pttl}"
    );
    assert_eq!(d.write_unlock(&name, &w).await, 0);
    assert_eq!(d.write_unlock(&name, &w).await, 1);
    assert_eq!(int(&["EXISTS", &name]), 0);
}

/// A sharded subscriber over plain RESP: SSUBSCRIBE `channel` on whichever cluster node
/// accepts it (the one serving the channel's slot answers; others answer MOVED).
fn ssubscribe(urls: &[String], channel: &str) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::Write;
    for url in urls {
        let stream = std::net::TcpStream::connect(addr_of(url)).expect("connect to a cluster node");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut w = stream.try_clone().expect("clone");
        w.write_all(&encode_command(&["SSUBSCRIBE", channel]))
            .expect("send SSUBSCRIBE");
        let mut r = std::io::BufReader::new(stream);
        match read_resp(&mut r).expect("SSUBSCRIBE reply") {
            RespValue::Array(_) => return r,
            RespValue::Error(_) => continue,
            other => panic!("unexpected SSUBSCRIBE reply {other:?}"),
        }
    }
    panic!("no cluster node accepted SSUBSCRIBE {channel}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distlock_scripts_spublish_on_a_cluster() {
    let urls = cluster_urls();
    let name = unique("shard");
    let client = redis::cluster::ClusterClient::new(urls.clone()).expect("cluster client");
    let mut conn = client
        .get_async_connection()
        .await
        .expect("connect to the test cluster");
    let channel = lock_channel(&name);
    let mut sub = ssubscribe(&urls, &channel);

    let owner = format!("{}:1", random_uuid());
    let v: Vec<i64> = Script::new(LOCK)
        .key(&name)
        .key(token_name(&name))
        .arg(30_000)
        .arg(&owner)
        .invoke_async(&mut conn)
        .await
        .expect("lock.lua on the cluster: all keys in one slot");
    assert_eq!(v[0], 1, "acquired");
    assert!(
        v[1] > 1,
        "a new counter starts from the server's clock: {v:?}"
    );
    let request = generate_id();
    let freed: i64 = Script::new(UNLOCK)
        .key(&name)
        .key(&channel)
        .key(unlock_latch_name(&name, &request))
        .arg(UNLOCK_MESSAGE)
        .arg(30_000)
        .arg(&owner)
        .arg("spublish")
        .arg(LATCH_MS)
        .invoke_async(&mut conn)
        .await
        .expect("unlock.lua with spublish on the cluster");
    assert_eq!(freed, 1);
    let msg = tokio::task::spawn_blocking(move || read_resp(&mut sub).expect("smessage"))
        .await
        .unwrap();
    let parts = msg.as_array().expect("a push").to_vec();
    assert_eq!(parts[0].as_str(), Some("smessage"));
    assert_eq!(parts[1].as_str(), Some(channel.as_str()));
    assert_eq!(parts[2].as_str(), Some("0"), "UNLOCK_MESSAGE");

    // the fair lock's per-waiter channel is in the same slot, so the head is woken too
    let head = format!("{}:2", random_uuid());
    let holder = format!("{}:3", random_uuid());
    let fair_conn = conn.clone();
    let fair = |owner: String| {
        let mut conn = fair_conn.clone();
        let name = name.clone();
        async move {
            let v: Vec<i64> = Script::new(FAIR_LOCK)
                .key(&name)
                .key(fair_queue_name(&name))
                .key(fair_timeout_name(&name))
                .arg(30_000)
                .arg(&owner)
                .arg(20_000)
                .arg("wait")
                .invoke_async(&mut conn)
                .await
                .expect("fair_lock.lua on the cluster");
            v[0]
        }
    };
    assert_eq!(fair(holder.clone()).await, 1);
    assert_eq!(fair(head.clone()).await, 0);
    let head_channel = format!("{channel}:{head}");
    let mut sub = ssubscribe(&urls, &head_channel);
    let request = generate_id();
    let freed: i64 = Script::new(FAIR_UNLOCK)
        .key(&name)
        .key(fair_queue_name(&name))
        .key(fair_timeout_name(&name))
        .key(&channel)
        .key(unlock_latch_name(&name, &request))
        .arg(UNLOCK_MESSAGE)
        .arg(30_000)
        .arg(&holder)
        .arg("spublish")
        .arg(LATCH_MS)
        .invoke_async(&mut conn)
        .await
        .expect("fair_unlock.lua with spublish on the cluster");
    assert_eq!(freed, 1);
    let msg = tokio::task::spawn_blocking(move || read_resp(&mut sub).expect("smessage"))
        .await
        .unwrap();
    let parts = msg.as_array().expect("a push").to_vec();
    assert_eq!(parts[1].as_str(), Some(head_channel.as_str()));
    assert_eq!(fair(head.clone()).await, 1);
    let _: () = redis::cmd("DEL")
        .arg(&name)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let _: () = redis::cmd("DEL")
        .arg(token_name(&name))
        .arg(unlock_latch_name(&name, &request))
        .query_async(&mut conn)
        .await
        .expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interop_distlock_write_downgrade_wakes_redisson_readers() {
    let name = unique("down");
    let d = Distlock::new().await;
    let r = redisson().await;
    let w = d.owner();
    assert_eq!(d.write_lock(&name, &w, 30_000).await, (1, 0));
    assert_eq!(
        d.read_lock(&name, &w, 30_000).await,
        (1, 0),
        "the writer may read"
    );
    let rr = r.lock(&name, LockKind::Read);
    let reader =
        tokio::spawn(async move { rr.try_lock(1, Duration::from_secs(20), Some(LONG)).await });
    wait_subscribers(&rwlock_channel(&name), 1).await;
    let released = Instant::now();
    assert_eq!(d.write_unlock(&name, &w).await, 1);
    assert_eq!(cmd(&["HGET", &name, "mode"]).as_str(), Some("read"));
    assert!(reader.await.unwrap().unwrap(), "joined the downgraded lock");
    assert!(
        released.elapsed() < WOKEN,
        "woken by the downgrade's message"
    );
    assert_eq!(
        d.read_unlock(&name, &w).await,
        0,
        "the Redisson reader still holds"
    );
    r.lock(&name, LockKind::Read).unlock(1).await.unwrap();
    assert_eq!(int(&["EXISTS", &name]), 0);
}
