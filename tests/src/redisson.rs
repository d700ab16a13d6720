//! A Redisson client emulator: issues the commands a Redisson (Java) client issues for its
//! locks, so tests can check that distlock's `protocol = "redisson"` scripts and a Redisson
//! client exclude each other and wake each other's waiters.
//!
//! Written from Redisson's source at tag `redisson-4.7.0` + 62 commits (commit
//! `66863978b4a92093b97c1f8c96f182a77e81d50e`, pom version `4.7.1-SNAPSHOT`), see
//! `docs/redisson-protocol.md`. What is emulated, per object:
//!
//! | object            | Redisson class         | here                          |
//! |-------------------|------------------------|-------------------------------|
//! | reentrant lock    | `RedissonLock`         | [`LockKind::Plain`]           |
//! | fenced lock       | `RedissonFencedLock`   | [`LockKind::Fenced`]          |
//! | fair lock         | `RedissonFairLock`     | [`LockKind::Fair`]            |
//! | read lock         | `RedissonReadLock`     | [`LockKind::Read`]            |
//! | write lock        | `RedissonWriteLock`    | [`LockKind::Write`]           |
//!
//! Same keys, hash fields, script arguments, channels and subscriptions, same order of
//! steps in `tryLock(wait, lease)` / `lock()` / `unlock()`, the unlock latch, the watchdog
//! (a renewal every `lockWatchdogTimeout / 3` while a lock taken without a lease is held).
//! The Lua is a re-statement of what Redisson's scripts do, not their text, so the SHA1s
//! differ from Redisson's (which changes nothing on the wire but the script cache entry).
//! Left out: Redisson's WAIT for replicas after a lock script (`syncedEval`; the tests use
//! a server without replicas, where Redisson skips it too) and its local sharing of one
//! subscription between threads of one JVM (each waiter here subscribes on its own).
//! A Java thread is an explicit `thread: u64` argument.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Script};

/// Redisson's `LockPubSub.UNLOCK_MESSAGE`: wakes one waiter of a client.
pub const UNLOCK_MESSAGE: i64 = 0;
/// Redisson's `LockPubSub.READ_UNLOCK_MESSAGE`: wakes every waiter of a client.
pub const READ_UNLOCK_MESSAGE: i64 = 1;

/// `RedissonObject.prefixName`: `prefix:{name}`, or `prefix:name` when the name already
/// holds a `{` (it then picks its own hash tag).
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `RedissonObject.suffixName`: `{name}:suffix`, or `name:suffix` when the name holds a `{`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The channel of the reentrant, fenced and fair locks: `redisson_lock__channel:{name}`.
pub fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// The channel of both halves of a read-write lock: `redisson_rwlock:{name}`.
pub fn rwlock_channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// The fenced lock's token counter: `redisson_lock_token:{name}`.
pub fn token_name(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// The fair lock's queue (a list of owner fields): `redisson_lock_queue:{name}`.
pub fn fair_queue_name(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The fair lock's waiter deadlines (a zset): `redisson_lock_timeout:{name}`.
pub fn fair_timeout_name(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// The unlock latch of one unlock request: `redisson_unlock_latch:{name}:<request id>`.
pub fn unlock_latch_name(name: &str, request_id: &str) -> String {
    format!(
        "{}:{request_id}",
        prefix_name("redisson_unlock_latch", name)
    )
}

/// A reader's timeout key prefix: `{name}:<owner>:rwlock_timeout` (`RedissonReadLock.
/// getReadWriteTimeoutNamePrefix`).
pub fn rw_timeout_prefix(name: &str, owner: &str) -> String {
    format!("{}:rwlock_timeout", suffix_name(name, owner))
}

/// The part of [`rw_timeout_prefix`] before `:<owner>`: `{name}` (or the bare name when it
/// holds a `{`), as `RedissonReadLock.getKeyPrefix` cuts it.
pub fn rw_key_prefix(name: &str, owner: &str) -> String {
    let prefix = rw_timeout_prefix(name, owner);
    let cut = format!(":{owner}");
    match prefix.find(&cut) {
        Some(at) => prefix[..at].to_string(),
        None => prefix,
    }
}

/// 16 random bytes as 32 lowercase hex digits (`ServiceManager.generateId`, the unlock
/// request id).
pub fn generate_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A random UUID in its canonical text form (`ServiceManager`'s client id,
/// `UUID.randomUUID().toString()`).
pub fn random_uuid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Settings of the emulated client (Redisson's `Config` and server config defaults).
#[derive(Debug, Clone)]
pub struct RedissonConfig {
    /// `lockWatchdogTimeout` (30 s): the lease of a lock taken without one, renewed every
    /// third of it.
    pub watchdog_timeout: Duration,
    /// `fairLockWaitTimeout` (5 min): a fair waiter's allowance when it has no wait time.
    pub fair_wait_timeout: Duration,
    /// How long an unlock latch lives: Redisson computes `(timeout + retryDelay(attempts))
    /// * retryAttempts`, with the defaults (3 s + 1–2 s) * 4 = 16–20 s.
    pub latch_ttl: Duration,
    /// `PUBLISH` (false) or `SPUBLISH` (true). Redisson uses SPUBLISH/SSUBSCRIBE only on a
    /// cluster whose servers know `PUBSUB SHARDNUMSUB` (shardedSubscriptionMode AUTO).
    pub sharded: bool,
}

impl Default for RedissonConfig {
    fn default() -> Self {
        RedissonConfig {
            watchdog_timeout: Duration::from_secs(30),
            fair_wait_timeout: Duration::from_secs(300),
            latch_ttl: Duration::from_secs(20),
            sharded: false,
        }
    }
}

/// Which Redisson lock object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `RedissonLock` (`getLock`).
    Plain,
    /// `RedissonFencedLock` (`getFencedLock`).
    Fenced,
    /// `RedissonFairLock` (`getFairLock`).
    Fair,
    /// `RedissonReadLock` (`getReadWriteLock(name).readLock()`).
    Read,
    /// `RedissonWriteLock` (`getReadWriteLock(name).writeLock()`).
    Write,
}

/// The running watchdog tasks, by lock name, kind and thread.
type Renewals = HashMap<(String, LockKind, u64), tokio::task::JoinHandle<()>>;

/// One emulated Redisson client: one id (a UUID), one command connection, renewals.
#[derive(Clone)]
pub struct Redisson {
    client: redis::Client,
    conn: MultiplexedConnection,
    id: String,
    config: RedissonConfig,
    renewals: Arc<Mutex<Renewals>>,
}

impl Redisson {
    /// Connect a client with a fresh id.
    pub async fn connect(url: &str, config: RedissonConfig) -> RedisResult<Redisson> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Redisson {
            client,
            conn,
            id: random_uuid(),
            config,
            renewals: Arc::default(),
        })
    }

    /// The client id (`ServiceManager.getId`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The settings.
    pub fn config(&self) -> &RedissonConfig {
        &self.config
    }

    /// A lock object on `name`.
    pub fn lock(&self, name: &str, kind: LockKind) -> RLock {
        RLock {
            r: self.clone(),
            name: name.to_string(),
            kind,
        }
    }

    /// The process dies: renewals stop, nothing is released.
    pub fn crash(&self) {
        let mut renewals = self.renewals.lock().expect("renewals");
        for (_, task) in renewals.drain() {
            task.abort();
        }
    }

    fn publish_command(&self) -> &'static str {
        if self.config.sharded {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }
}

/// Redisson's `getLockName(threadId)` is `"<client id>:<thread id>"`; the write lock
/// appends `":write"`.
fn field(id: &str, kind: LockKind, thread: u64) -> String {
    match kind {
        LockKind::Write => format!("{id}:{thread}:write"),
        LockKind::Plain | LockKind::Fenced | LockKind::Fair | LockKind::Read => {
            format!("{id}:{thread}")
        }
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().max(1).min(u128::from(u64::MAX)) as u64
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A Redisson lock object of one name and kind.
pub struct RLock {
    r: Redisson,
    name: String,
    kind: LockKind,
}

/// One acquisition attempt's answer: `None` acquired, `Some(ttl)` refused with the ttl the
/// script reported (Redisson's `tryAcquire` result). The fenced lock also has a token.
struct Attempt {
    ttl: Option<i64>,
    token: Option<i64>,
}

impl RLock {
    /// The owner field of `thread` (`getLockName`).
    pub fn owner(&self, thread: u64) -> String {
        field(&self.r.id, self.kind, thread)
    }

    /// The channel this lock's waiters subscribe to: per waiter for the fair lock.
    pub fn channel(&self, thread: u64) -> String {
        match self.kind {
            LockKind::Plain | LockKind::Fenced => lock_channel(&self.name),
            LockKind::Fair => format!("{}:{}", lock_channel(&self.name), self.owner(thread)),
            LockKind::Read | LockKind::Write => rwlock_channel(&self.name),
        }
    }

    /// `tryLock()`: one attempt, no wait; the watchdog renews what it takes.
    pub async fn try_lock_now(&self, thread: u64) -> RedisResult<bool> {
        let lease = self.r.config.watchdog_timeout;
        let acquired = match self.kind {
            LockKind::Fair => {
                let mut conn = self.r.conn.clone();
                let res: Option<i64> = Script::new(FAIR_TRY)
                    .key(&self.name)
                    .key(fair_queue_name(&self.name))
                    .key(fair_timeout_name(&self.name))
                    .arg(ms(lease))
                    .arg(self.owner(thread))
                    .arg(now_ms())
                    .arg(ms(self.r.config.fair_wait_timeout))
                    .invoke_async(&mut conn)
                    .await?;
                res.is_none()
            }
            LockKind::Plain | LockKind::Fenced | LockKind::Read | LockKind::Write => {
                self.attempt(thread, None, lease).await?.ttl.is_none()
            }
        };
        if acquired {
            self.schedule_renewal(thread);
        }
        Ok(acquired)
    }

    /// `tryLock(wait, lease, MILLISECONDS)`; `lease = None` is Redisson's `-1`: the
    /// watchdog lease, renewed while held.
    pub async fn try_lock(
        &self,
        thread: u64,
        wait: Duration,
        lease: Option<Duration>,
    ) -> RedisResult<bool> {
        Ok(self.acquire(thread, Some(wait), lease).await?.is_some())
    }

    /// `lock(lease)` / `lock()`: waits until acquired. Bounded here at 60 s (then an
    /// error), where Redisson waits forever.
    pub async fn lock(&self, thread: u64, lease: Option<Duration>) -> RedisResult<()> {
        match self.acquire(thread, None, lease).await? {
            Some(_) => Ok(()),
            None => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "emulated lock() gave up after 60 s",
            ))),
        }
    }

    /// `RFencedLock.tryLockAndGetToken(wait, lease)`: the token, or `None` when not
    /// acquired within `wait`.
    pub async fn try_lock_and_get_token(
        &self,
        thread: u64,
        wait: Duration,
        lease: Option<Duration>,
    ) -> RedisResult<Option<i64>> {
        assert_eq!(
            self.kind,
            LockKind::Fenced,
            "tokens exist on the fenced lock"
        );
        Ok(self.acquire(thread, Some(wait), lease).await?.flatten())
    }

    /// The loop of `RedissonLock.tryLock(wait, lease)` (and of `lock()`, `wait = None`):
    /// one attempt; when refused, subscribe to the channel, then attempt again and wait
    /// for a message at most the reported ttl, until acquired or out of time. Answers
    /// `Some(token)` when acquired (`token` only for the fenced lock), `None` when not.
    async fn acquire(
        &self,
        thread: u64,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> RedisResult<Option<Option<i64>>> {
        let start = Instant::now();
        let budget = wait.unwrap_or(Duration::from_secs(60));
        let lease_ms = lease.unwrap_or(self.r.config.watchdog_timeout);
        let first = self.attempt(thread, wait, lease_ms).await?;
        if first.ttl.is_none() {
            self.acquired(thread, lease);
            return Ok(Some(first.token));
        }
        if start.elapsed() >= budget {
            self.acquire_failed(thread, wait).await?;
            return Ok(None);
        }
        let mut pubsub = self.r.client.get_async_pubsub().await?;
        let channel = self.channel(thread);
        if self.r.config.sharded {
            // Redisson issues SSUBSCRIBE; the redis crate's PubSub has no sharded variant,
            // and the tests run the sharded case only through distlock's own subscriber.
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the emulator subscribes with SUBSCRIBE only",
            )));
        }
        pubsub.subscribe(&channel).await?;
        let outcome = async {
            let mut messages = pubsub.on_message();
            loop {
                let left = budget.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Ok(None);
                }
                let attempt = self.attempt(thread, wait, lease_ms).await?;
                let ttl = match attempt.ttl {
                    None => return Ok(Some(attempt.token)),
                    Some(ttl) => ttl,
                };
                let left = budget.saturating_sub(start.elapsed());
                if left.is_zero() {
                    return Ok(None);
                }
                // Redisson waits ttl when 0 <= ttl < time left, else the time left; a
                // floor of 1 ms keeps the fair lock's ttl = 0 answers from spinning hot.
                let pause = if ttl >= 0 && (ttl as u128) < left.as_millis() {
                    Duration::from_millis((ttl as u64).max(1))
                } else {
                    left
                };
                if let Ok(None) = tokio::time::timeout(pause, messages.next()).await {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "the subscription connection closed",
                    )));
                }
            }
        }
        .await;
        // Redisson's finally: unsubscribe (it shares the subscription; here it is ours).
        let _ = pubsub.unsubscribe(&channel).await;
        match outcome {
            Ok(Some(token)) => {
                self.acquired(thread, lease);
                Ok(Some(token))
            }
            Ok(None) => {
                self.acquire_failed(thread, wait).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn acquired(&self, thread: u64, lease: Option<Duration>) {
        if lease.is_none() {
            self.schedule_renewal(thread);
        }
    }

    /// `acquireFailed`: only the fair lock does something (leaves the queue).
    async fn acquire_failed(&self, thread: u64, wait: Option<Duration>) -> RedisResult<()> {
        if self.kind != LockKind::Fair {
            return Ok(());
        }
        let allowance = match wait {
            Some(w) if !w.is_zero() => w,
            _ => self.r.config.fair_wait_timeout,
        };
        let mut conn = self.r.conn.clone();
        let _: () = Script::new(FAIR_FAILED)
            .key(fair_queue_name(&self.name))
            .key(fair_timeout_name(&self.name))
            .arg(self.owner(thread))
            .arg(ms(allowance))
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    /// `tryLockInnerAsync` (`tryAcquire`): one run of the kind's acquire script.
    async fn attempt(
        &self,
        thread: u64,
        wait: Option<Duration>,
        lease: Duration,
    ) -> RedisResult<Attempt> {
        let mut conn = self.r.conn.clone();
        let owner = self.owner(thread);
        let name = &self.name;
        match self.kind {
            LockKind::Plain => {
                let ttl: Option<i64> = Script::new(LOCK)
                    .key(name)
                    .arg(ms(lease))
                    .arg(&owner)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(Attempt { ttl, token: None })
            }
            LockKind::Fenced => {
                let res: Vec<i64> = Script::new(FENCED_LOCK)
                    .key(name)
                    .key(token_name(name))
                    .arg(ms(lease))
                    .arg(&owner)
                    .invoke_async(&mut conn)
                    .await?;
                if res.first() == Some(&-1) {
                    Ok(Attempt {
                        ttl: None,
                        token: res.get(1).copied(),
                    })
                } else {
                    Ok(Attempt {
                        ttl: Some(res.first().copied().unwrap_or(-2)),
                        token: None,
                    })
                }
            }
            LockKind::Fair => {
                let allowance = match wait {
                    Some(w) if !w.is_zero() => w,
                    _ => self.r.config.fair_wait_timeout,
                };
                let ttl: Option<i64> = Script::new(FAIR_LOCK)
                    .key(name)
                    .key(fair_queue_name(name))
                    .key(fair_timeout_name(name))
                    .arg(ms(lease))
                    .arg(&owner)
                    .arg(ms(allowance))
                    .arg(now_ms())
                    .invoke_async(&mut conn)
                    .await?;
                Ok(Attempt { ttl, token: None })
            }
            LockKind::Read => {
                let ttl: Option<i64> = Script::new(READ_LOCK)
                    .key(name)
                    .key(rw_timeout_prefix(name, &owner))
                    .arg(ms(lease))
                    .arg(&owner)
                    .arg(field(&self.r.id, LockKind::Write, thread))
                    .invoke_async(&mut conn)
                    .await?;
                Ok(Attempt { ttl, token: None })
            }
            LockKind::Write => {
                let ttl: Option<i64> = Script::new(WRITE_LOCK)
                    .key(name)
                    .arg(ms(lease))
                    .arg(&owner)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(Attempt { ttl, token: None })
            }
        }
    }

    /// `unlock()`: a fresh request id, the unlock script, the renewal cancelled, the latch
    /// deleted. `Err` with "not locked by current thread" when the thread held nothing.
    pub async fn unlock(&self, thread: u64) -> RedisResult<()> {
        let request = generate_id();
        let res = self.unlock_inner(thread, &request).await;
        self.cancel_renewal(thread);
        let res = res?;
        let mut conn = self.r.conn.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(unlock_latch_name(&self.name, &request))
            .query_async(&mut conn)
            .await?;
        match res {
            Some(_) => Ok(()),
            None => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "attempt to unlock lock, not locked by current thread",
            ))),
        }
    }

    /// One run of the kind's unlock script with a given request id (what a retried
    /// `unlockInnerAsync` sends): `None` not held, `Some(false)` holds left, `Some(true)`
    /// freed. The latch is left in place.
    pub async fn unlock_inner(&self, thread: u64, request: &str) -> RedisResult<Option<bool>> {
        let mut conn = self.r.conn.clone();
        let owner = self.owner(thread);
        let name = &self.name;
        let latch = unlock_latch_name(name, request);
        let latch_ttl = ms(self.r.config.latch_ttl);
        let lease = ms(self.r.config.watchdog_timeout);
        let publish = self.r.publish_command();
        let res: Option<i64> = match self.kind {
            LockKind::Plain | LockKind::Fenced => {
                Script::new(UNLOCK)
                    .key(name)
                    .key(lock_channel(name))
                    .key(&latch)
                    .arg(UNLOCK_MESSAGE)
                    .arg(lease)
                    .arg(&owner)
                    .arg(publish)
                    .arg(latch_ttl)
                    .invoke_async(&mut conn)
                    .await?
            }
            LockKind::Fair => {
                Script::new(FAIR_UNLOCK)
                    .key(name)
                    .key(fair_queue_name(name))
                    .key(fair_timeout_name(name))
                    .key(lock_channel(name))
                    .key(&latch)
                    .arg(UNLOCK_MESSAGE)
                    .arg(lease)
                    .arg(&owner)
                    .arg(now_ms())
                    .arg(publish)
                    .arg(latch_ttl)
                    .invoke_async(&mut conn)
                    .await?
            }
            LockKind::Read => {
                let prefix = rw_timeout_prefix(name, &owner);
                Script::new(READ_UNLOCK)
                    .key(name)
                    .key(rwlock_channel(name))
                    .key(&prefix)
                    .key(rw_key_prefix(name, &owner))
                    .key(&latch)
                    .arg(UNLOCK_MESSAGE)
                    .arg(&owner)
                    .arg(publish)
                    .arg(latch_ttl)
                    .invoke_async(&mut conn)
                    .await?
            }
            LockKind::Write => {
                Script::new(WRITE_UNLOCK)
                    .key(name)
                    .key(rwlock_channel(name))
                    .key(&latch)
                    .arg(READ_UNLOCK_MESSAGE)
                    .arg(lease)
                    .arg(&owner)
                    .arg(publish)
                    .arg(latch_ttl)
                    .invoke_async(&mut conn)
                    .await?
            }
        };
        Ok(res.map(|v| v == 1))
    }

    /// `getHoldCount` for `thread` (HGET of its field; 0 when absent).
    pub async fn hold_count(&self, thread: u64) -> RedisResult<i64> {
        let mut conn = self.r.conn.clone();
        let n: Option<i64> = redis::cmd("HGET")
            .arg(&self.name)
            .arg(self.owner(thread))
            .query_async(&mut conn)
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// `RFencedLock.getToken`: the counter's value.
    pub async fn token(&self) -> RedisResult<Option<i64>> {
        let mut conn = self.r.conn.clone();
        redis::cmd("GET")
            .arg(token_name(&self.name))
            .query_async(&mut conn)
            .await
    }

    /// `scheduleExpirationRenewal`: every `watchdog_timeout / 3`, the renewal script, until
    /// it reports the lock gone or `unlock` / `crash` cancels it.
    fn schedule_renewal(&self, thread: u64) {
        let key = (self.name.clone(), self.kind, thread);
        let mut renewals = self.r.renewals.lock().expect("renewals");
        if renewals.get(&key).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let mut conn = self.r.conn.clone();
        let name = self.name.clone();
        let kind = self.kind;
        let owner = self.owner(thread);
        let lease = self.r.config.watchdog_timeout;
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval_at(
                tokio::time::Instant::now() + lease / 3,
                (lease / 3).max(Duration::from_millis(1)),
            );
            loop {
                every.tick().await;
                let alive: RedisResult<Vec<i64>> = if kind == LockKind::Read {
                    Script::new(READ_RENEW)
                        .key(&name)
                        .key(rw_key_prefix(&name, &owner))
                        .arg(ms(lease))
                        .arg(1)
                        .arg(&owner)
                        .invoke_async(&mut conn)
                        .await
                } else {
                    Script::new(RENEW)
                        .key(&name)
                        .arg(ms(lease))
                        .arg(&owner)
                        .invoke_async(&mut conn)
                        .await
                };
                match alive {
                    Ok(v) if v.first() == Some(&1) => {}
                    Ok(_) => return,
                    // Redisson logs the error and tries again at the next period.
                    Err(_) => {}
                }
            }
        });
        renewals.insert(key, task);
    }

    /// `cancelExpirationRenewal`.
    fn cancel_renewal(&self, thread: u64) {
        let key = (self.name.clone(), self.kind, thread);
        if let Some(task) = self.r.renewals.lock().expect("renewals").remove(&key) {
            task.abort();
        }
    }
}

// ---------------------------------------------------------------------------- scripts
//
// Each restates, step for step, what the Redisson script named in its comment does, with
// the same KEYS and ARGV in the same order.

/// `RedissonLock.tryLockInnerAsync`. KEYS: lock. ARGV: lease ms, owner. nil when taken
/// (fresh or re-entered; expiry set to the lease), else the lock's pttl.
const LOCK: &str = r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// `RedissonFencedLock.tryLockInnerAsync(lease, unit, threadId)`. KEYS: lock, token
/// counter. ARGV: lease ms, owner. `{-1, token}` when taken, `{pttl, -1}` when not.
const FENCED_LOCK: &str = r#"
if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {redis.call('pttl', KEYS[1]), -1}
end
local token = redis.call('incr', KEYS[2])
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}
"#;

/// `RedissonLock.unlockInnerAsync`. KEYS: lock, channel, latch. ARGV: message, lease ms,
/// owner, publish command, latch ttl ms. The latch's value if present; nil not held; 0
/// holds left (expiry reset to the lease); 1 freed and published.
const UNLOCK: &str = r#"
local seen = redis.call('get', KEYS[3])
if seen ~= false then return tonumber(seen) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"#;

/// `renewal.LockTask` (batch form, here one key). KEYS: locks. ARGV: lease ms, then one
/// owner per key. Per key 1 when renewed (PEXPIRE lease), 0 when not held.
const RENEW: &str = r#"
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"#;

/// The stale-head purge every fair-lock script starts with: ARGV index of "now" in `NOW`.
macro_rules! purge_stale {
    ($now:literal) => {
        concat!(
            "while true do\n",
            "  local head = redis.call('lindex', KEYS[2], 0)\n",
            "  if head == false then break end\n",
            "  local dl = redis.call('zscore', KEYS[3], head)\n",
            "  if dl ~= false and tonumber(dl) <= tonumber(ARGV[",
            $now,
            "]) then\n",
            "    redis.call('zrem', KEYS[3], head)\n",
            "    redis.call('lpop', KEYS[2])\n",
            "  else break end\n",
            "end\n"
        )
    };
}

/// `RedissonFairLock.tryLockInnerAsync`, EVAL_NULL_BOOLEAN variant (`tryLock()`). KEYS:
/// lock, queue, deadlines. ARGV: lease ms, owner, now ms, allowance ms. nil taken, 1 not.
const FAIR_TRY: &str = concat!(
    purge_stale!("3"),
    r#"
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0 or head == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  for _, w in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), w)
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return 1
"#
);

/// `RedissonFairLock.tryLockInnerAsync`, EVAL_LONG variant (`tryLock(wait)`, `lock()`).
/// KEYS: lock, queue, deadlines. ARGV: lease ms, owner, allowance ms, now ms. nil taken;
/// else the ttl to wait, after queueing the owner (deadline: the one ahead's, or the
/// lock's pttl, plus the allowance).
const FAIR_LOCK: &str = concat!(
    purge_stale!("4"),
    r#"
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0 or head == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  for _, w in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), w)
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]))
end
local tail = redis.call('lindex', KEYS[2], -1)
local ttl
if tail ~= false and tail ~= ARGV[2] and redis.call('zscore', KEYS[3], tail) ~= false then
  ttl = tonumber(redis.call('zscore', KEYS[3], tail)) - tonumber(ARGV[4])
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"#
);

/// `RedissonFairLock.acquireFailedAsync`. KEYS: queue, deadlines. ARGV: owner, allowance
/// ms. Everyone behind the owner gets its deadline moved earlier; the owner leaves.
const FAIR_FAILED: &str = r#"
local items = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #items and items[i] ~= ARGV[1] do i = i + 1 end
for j = i + 1, #items do
  redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), items[j])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
"#;

/// `RedissonFairLock.unlockInnerAsync`. KEYS: lock, queue, deadlines, channel stem, latch.
/// ARGV: message, lease ms, owner, now ms, publish command, latch ttl ms. As UNLOCK, but
/// a lock already gone answers 1, and the freed lock wakes only the queue's head, on
/// `<stem>:<head owner>`.
const FAIR_UNLOCK: &str = concat!(
    r#"
local seen = redis.call('get', KEYS[5])
if seen ~= false then return tonumber(seen) end
"#,
    purge_stale!("4"),
    r#"
local function wake()
  local nxt = redis.call('lindex', KEYS[2], 0)
  if nxt ~= false then redis.call(ARGV[5], KEYS[4] .. ':' .. nxt, ARGV[1]) end
end
if redis.call('exists', KEYS[1]) == 0 then
  wake()
  redis.call('set', KEYS[5], 1, 'px', ARGV[6])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], 0, 'px', ARGV[6])
  return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
wake()
return 1
"#
);

/// `RedissonReadLock.tryLockInnerAsync`. KEYS: lock, this reader's timeout prefix. ARGV:
/// lease ms, owner, the owner's write field. nil taken (a timeout key per hold), else pttl.
const READ_LOCK: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local key = KEYS[2] .. ':' .. n
  redis.call('set', key, 1)
  redis.call('pexpire', key, ARGV[1])
  local left = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(left, ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// `RedissonReadLock.unlockInnerAsync`. KEYS: lock, channel, this reader's timeout prefix,
/// key prefix, latch. ARGV: message, owner, publish command, latch ttl ms.
const READ_UNLOCK: &str = r#"
local seen = redis.call('get', KEYS[5])
if seen ~= false then return tonumber(seen) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], 1, 'px', ARGV[4])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
    local c = tonumber(redis.call('hget', KEYS[1], f))
    if type(c) == 'number' then
      for i = c, 1, -1 do
        longest = math.max(redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. i), longest)
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
"#;

/// `renewal.ReadLockTask` (batch form, here one lock). KEYS: lock, key prefix (pairs).
/// ARGV: lease ms, then per lock: a count and that many owners. Per lock 1 when any owner
/// still holds (its hold timeout keys and the hash get PEXPIRE lease), else 0.
const READ_RENEW: &str = r#"
local out = {}
local a = 2
for i = 1, #KEYS, 2 do
  local alive = false
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    local c = redis.call('hget', KEYS[i], ARGV[a])
    if c ~= false then
      alive = true
      for j = tonumber(c), 1, -1 do
        redis.call('pexpire', KEYS[i + 1] .. ':' .. ARGV[a] .. ':rwlock_timeout:' .. j, ARGV[1])
      end
    end
    a = a + 1
  end
  if alive then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"#;

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS: lock. ARGV: lease ms, write field. nil
/// taken (a re-entry adds the lease to the time left), else pttl.
const WRITE_LOCK: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// `RedissonWriteLock.unlockInnerAsync`. KEYS: lock, channel, latch. ARGV: message (1),
/// lease ms, write field, publish command, latch ttl ms.
const WRITE_UNLOCK: &str = r#"
local seen = redis.call('get', KEYS[3])
if seen ~= false then return tonumber(seen) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], KEYS[2], ARGV[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_redissons_rules() {
        assert_eq!(lock_channel("a"), "redisson_lock__channel:{a}");
        assert_eq!(lock_channel("x{t}"), "redisson_lock__channel:x{t}");
        assert_eq!(rwlock_channel("a"), "redisson_rwlock:{a}");
        assert_eq!(token_name("a"), "redisson_lock_token:{a}");
        assert_eq!(fair_queue_name("a"), "redisson_lock_queue:{a}");
        assert_eq!(fair_timeout_name("a"), "redisson_lock_timeout:{a}");
        assert_eq!(unlock_latch_name("a", "ff"), "redisson_unlock_latch:{a}:ff");
        assert_eq!(rw_timeout_prefix("a", "u:1"), "{a}:u:1:rwlock_timeout");
        assert_eq!(rw_key_prefix("a", "u:1"), "{a}");
        assert_eq!(rw_key_prefix("x{t}", "u:1"), "x{t}");
        let id = random_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_eq!(generate_id().len(), 32);
    }
}
