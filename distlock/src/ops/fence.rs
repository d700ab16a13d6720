//! Fencing at the resource: writes that a stale lock holder cannot make.
//!
//! A lease cannot stop a holder that was paused (GC, swap, `SIGSTOP`, a stopped VM) or cut
//! off from Redis from acting after its lease ran out: by the time it resumes, another
//! holder may be inside. Only the resource it writes to can refuse it, by checking the
//! lock's **fencing token** (`LockGuard::fencing_token()`, which grows strictly with every
//! new holder of a key) against the largest token it has already accepted.
//!
//! # A read-modify-write: claim, read, compute, write
//!
//! Fencing the *write* alone does not protect a value computed from what was *read*. An
//! old holder A (token 10) reads the balance, 100, and stalls; its lease ends (or the
//! lock's server restarted empty, a documented limit) and B (token 11) takes the lock and
//! reads 100 too. A, not told yet, writes 110 with token 10: accepted, since nobody wrote
//! with a larger token yet. B writes 105 with token 11: accepted, and A's deposit, which A
//! was told was made, is gone.
//!
//! So claim the value with your token **before reading it** ([`Fence::claim`], or
//! [`sql_claim`] in SQL): the claim raises the token the value accepts, so from then on
//! every older holder's write is refused. A write accepted before your claim is in what
//! you read; one after it is refused, and its holder knows. Then read, compute, and write
//! fenced with the same token:
//!
//! ```
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! distlock::init_from_str(r#"
//!     [backends.main]
//!     mode = "memory"   # or single, cluster, sentinel, redlock, multi
//! "#).await?;
//! let guard = distlock::Lock::new("account:42").acquire().await?;
//! let token = guard.fencing_token();
//! let balance = distlock::fence("balance:42");
//! if !balance.claim(token).await? {
//!     return Ok(()); // a newer holder has the account: stop, change nothing
//! }
//! let now: i64 = match balance.get().await? {
//!     Some(b) => std::str::from_utf8(&b.value)?.parse()?,
//!     None => 0,
//! };
//! if !balance.set((now + 10).to_string(), token).await? {
//!     // a newer holder claimed it after our read: our result is discarded, nothing lost
//! }
//! guard.release().await?;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
//! ```
//!
//! A write that is not computed from a read (it overwrites whatever was there) needs no
//! claim: the fenced write alone keeps an older holder from overwriting a newer one.
//!
//! A claim accepts its own token again (a retry after a lost reply must not look stale),
//! so it relies, as fencing does, on each holder having a token of its own: where a
//! mode's documented limits let a token be handed out twice (a Sentinel failover that
//! loses the counter's last increments), two holders with that token both pass.
//!
//! # On Redis (every mode, and the memory backend)
//!
//! ```
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! distlock::init_from_str(r#"
//!     [backends.main]
//!     mode = "memory"   # or single, cluster, sentinel, redlock, multi
//! "#).await?;
//! let guard = distlock::Lock::new("account:42").acquire().await?;
//! let accepted = distlock::fence("balance:42").set("100", guard.fencing_token()).await?;
//! assert!(accepted);
//! // A holder with an older token is refused, whatever it believes about its lease:
//! assert!(!distlock::fence("balance:42").set("7", guard.fencing_token() - 1).await?);
//! let stored = distlock::fence("balance:42").get().await?.unwrap();
//! assert_eq!((stored.value.as_slice(), stored.token), (&b"100"[..], guard.fencing_token()));
//! guard.release().await?;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
//! ```
//!
//! One script stores the value together with its token, in the Redis hash
//! `PREFIX{KEY}:fenced` (fields `v` and `t`; `PREFIX` is `[defaults].key_prefix`), only if
//! the token is **not below** the last token stored or claimed there. Equal tokens are
//! accepted: the same holder may write several times in one critical section, and a write
//! retried after a lost reply is accepted again instead of being reported stale. A token
//! below the last one means a newer holder has written or claimed: the write is refused
//! and `set` returns `false`. A claim keeps its token in the field `c` of the same hash
//! (the value and its token `t` stay as they were), under the same rule.
//!
//! - **Expiry.** A fenced value is the application's data, so it does not expire unless
//!   asked ([`Fence::ttl`]). The token lives with the value: once the value expires (or is
//!   deleted), any token is accepted again. A claim sets the expiry as a write does.
//! - **redlock / multi.** The write goes to every node; it is accepted when a quorum of
//!   nodes accepted it (a majority for redlock, all for multi) and no node that answered
//!   holds a newer token. A single node with a newer token makes it stale (`false`), even
//!   when a quorum would take it: that node may hold a newer holder's write. Any two
//!   quorums share a node, and that node refuses the smaller token, so a stale write cannot
//!   be accepted once a newer one was — as long as the nodes keep their data (see the
//!   quorum backends' notes on restarts without persistence). [`Fence::get`] reads every
//!   node and returns the value with the largest write token among a quorum of answers.
//!   A claim is accepted on a quorum of nodes and refused as soon as one node that
//!   answered holds a larger token. When too few nodes answer, `set`, `claim` and `get`
//!   fail with `LockError::QuorumNotReached`.
//!   A write that is not stored — stale, or failed — is **undone** on every node that took
//!   it or did not answer within `node_timeout` (after the write, on the same connection):
//!   each puts back what the write replaced if it still holds exactly that write, so a
//!   reported failure does not become what a read returns later. Left as for a lost reply
//!   on one server: a node that applies the write only after its undo (a request that
//!   outlived its connection). The nodes keep what a write replaced in the same hash
//!   (fields `u:v`, `u:t`, `u:p`) for that undo.
//! - The token of the lock and the fenced key are independent: fence whatever keys the
//!   critical section writes, each with the token of the lock that guards it.
//!
//! # In SQL
//!
//! Keep the last accepted token in a column of the row (`fence BIGINT NOT NULL DEFAULT
//! 0`) and make every write conditional on it; [`sql_update`] builds the statement:
//!
//! ```
//! let sql = distlock::fence::sql_update("accounts", "balance = $1", "id = $2", "$3");
//! assert_eq!(
//!     sql,
//!     "UPDATE accounts SET balance = $1, fence = $3 WHERE (id = $2) AND fence <= $3"
//! );
//! // sqlx: let done = sqlx::query(&sql).bind(balance).bind(id).bind(token as i64)
//! //     .execute(&pool).await?;
//! // if distlock::fence::is_stale(done.rows_affected()) { /* a newer holder wrote */ }
//! ```
//!
//! For a read-modify-write, claim the row first ([`sql_claim`]), then read, compute and
//! write fenced:
//!
//! ```text
//! UPDATE accounts SET fence = $2 WHERE (id = $1) AND fence <= $2      -- claim: 0 rows → stop
//! SELECT balance FROM accounts WHERE id = $1                          -- read
//! UPDATE accounts SET balance = $3, fence = $2 WHERE (id = $1) AND fence <= $2
//!                                                                     -- write: 0 rows → discarded
//! ```
//!
//! Either way is safe:
//!
//! - **Each statement on its own** (autocommit): the claim commits the raised token, so
//!   every older holder's fenced `UPDATE` after it affects no row; the read sees every
//!   write accepted before the claim. If you fail between the claim and the write, the row
//!   keeps its balance with a raised token: nothing is lost.
//! - **In one transaction** (PostgreSQL's default `READ COMMITTED`): the claim's `UPDATE`
//!   also locks the row until the commit, so an older holder's `UPDATE` waits for it and
//!   then affects no row; the claim and the write commit together, or neither does. Keep
//!   the transaction short: every other writer of the row waits for it. Under `REPEATABLE
//!   READ` or `SERIALIZABLE`, a concurrent write ends one of the two with a serialization
//!   error instead: roll back and stop (or retry with the same token).
//!
//! Not safe: a read before the claim. An older holder's write accepted between your read
//! and your claim is not in what you read, and your write erases it.
//!
//! Rows affected 0 means the token was stale (or no row matched the filter: check
//! existence apart when that matters). PostgreSQL and SQLite count a matched row even when
//! its values do not change; MySQL counts changed rows only unless the connection sets
//! `CLIENT_FOUND_ROWS` (without it, a claim repeated with the same token reads as stale).
//! Tokens fit a signed 64-bit column. Bind the token as a parameter, never format it into
//! the SQL; the table, assignments and filter are your own SQL text.

use std::time::Duration;

use redis::Value;

use crate::backend::Backend;
use crate::ops::target::Target;
use crate::protocol::keys::LockKeys;
use crate::protocol::{Call, Script};
use crate::registry::Registry;
use crate::LockError;

/// The fenced-write script (see the module documentation).
pub const FENCED_SET: &str = include_str!("../protocol/fence.lua");
/// The script that reads a fenced value.
pub const FENCED_GET: &str = include_str!("../protocol/fence_get.lua");
/// The script that claims a fenced value before it is read ([`Fence::claim`]).
pub const FENCED_CLAIM: &str = include_str!("../protocol/fence_claim.lua");

/// The name of the token column [`sql_update`] and [`sql_claim`] write.
pub const SQL_FENCE_COLUMN: &str = "fence";

/// A fenced value on the default backend of the global registry (set up by `init`).
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
/// let guard = distlock::Lock::new("stock:9").acquire().await?;
/// if !distlock::fence("stock:9").set("41", guard.fencing_token()).await? {
///     // a newer holder has written: this one must stop
/// }
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn fence(key: impl Into<String>) -> Fence {
    Fence {
        key: key.into(),
        target: Target::here(),
        ttl: None,
    }
}

impl Registry {
    /// A fenced value in this registry (see [`fence()`]).
    ///
    /// ```
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = distlock::Registry::from_str("[backends.local]\nmode = \"memory\"").await?;
    /// let guard = registry.lock("job:1").acquire().await?;
    /// assert!(registry.fence("job:1:result").set("done", guard.fencing_token()).await?);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn fence(&self, key: impl Into<String>) -> Fence {
        let mut fence = fence(key);
        fence.target.set_registry(self.clone());
        fence
    }
}

/// A value written only by holders whose fencing token is not below the last one stored
/// or claimed. Made by [`fence()`] or [`Registry::fence`].
#[derive(Debug, Clone)]
pub struct Fence {
    key: String,
    /// The registry and backend (a fence neither waits nor leases).
    target: Target,
    ttl: Option<Duration>,
}

/// A fenced value as stored, with the token of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The value.
    pub value: Vec<u8>,
    /// The fencing token it was written with.
    pub token: u64,
}

impl Fence {
    /// Use the backend named `name` instead of the default one.
    ///
    /// ```
    /// let f = distlock::fence("balance:42").backend("orders");
    /// ```
    pub fn backend(mut self, name: impl Into<String>) -> Fence {
        self.target.set_backend(name.into());
        self
    }

    /// Let every accepted write expire after `ttl` (default: never; see the module
    /// documentation). From 1 ms to 365 days ([`MAX_FENCE_TTL`](crate::config::MAX_FENCE_TTL)):
    /// [`set`](Fence::set) refuses another with `LockError::InvalidDuration`, before
    /// anything is written.
    ///
    /// ```
    /// let f = distlock::fence("session:7").ttl(std::time::Duration::from_secs(3600));
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Fence {
        self.ttl = Some(ttl);
        self
    }

    fn resolve(&self) -> Result<(std::sync::Arc<Backend>, String), LockError> {
        let backend = self.target.backend()?;
        let name = format!(
            "{}:fenced",
            LockKeys::new(&backend.prefix, self.key.clone())?.hash
        );
        Ok((backend, name))
    }

    /// The ttl in milliseconds (0: none), checked against its range (1 ms to 365 days)
    /// before anything is sent.
    fn ttl_ms(&self, backend: &str) -> Result<u64, LockError> {
        match self.ttl {
            None => Ok(0),
            Some(t) => {
                let t = crate::lease::policy::check_duration(
                    distlock_config::DurationUse::FenceTtl,
                    "fence ttl",
                    t,
                    &self.key,
                    backend,
                )?;
                Ok(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
            }
        }
    }

    /// Store `value` if `token` is not below the last token stored or claimed
    /// ([`claim`](Fence::claim)) for this key. Returns `Ok(true)` when stored, `Ok(false)`
    /// when the token was stale (a newer holder wrote or claimed). For a value computed
    /// from a read, claim before the read (see the module documentation).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
    /// assert!(distlock::fence("k").set("a", 5).await?);
    /// assert!(distlock::fence("k").set("b", 5).await?);    // same token: accepted
    /// assert!(!distlock::fence("k").set("c", 4).await?);   // older token: refused
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn set(&self, value: impl AsRef<[u8]>, token: u64) -> Result<bool, LockError> {
        let (backend, name) = self.resolve()?;
        let ttl_ms = self.ttl_ms(&backend.name)?;
        if let Some(stored) = backend.local_fenced_set(&name, value.as_ref(), token, self.ttl) {
            return Ok(stored);
        }
        if let Some(r) = backend
            .quorum_fenced_set(&self.key, &name, value.as_ref(), token, ttl_ms)
            .await
        {
            return r;
        }
        let token_arg = token.to_string();
        let ttl_arg = ttl_ms.to_string();
        let call = Call::raw(
            Script::Fence,
            vec![name],
            vec![
                value.as_ref().to_vec(),
                token_arg.into_bytes(),
                ttl_arg.into_bytes(),
            ],
        );
        let Some((replies, needed)) = backend.run_script(&self.key, &call).await else {
            return Err(unsupported(&backend));
        };
        let nodes = replies.len();
        let (mut accepted, mut stale, mut first_error) = (0, 0, None);
        for r in replies {
            match r.and_then(|v| parse_set(&backend, &self.key, &v)) {
                Ok(true) => accepted += 1,
                Ok(false) => stale += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if accepted >= needed {
            return Ok(true);
        }
        if stale > 0 {
            return Ok(false);
        }
        Err(match first_error {
            Some(e) if nodes == 1 => e,
            _ => LockError::QuorumNotReached {
                key: self.key.clone(),
                backend: backend.name.to_string(),
                granted: accepted,
                needed,
                nodes,
            },
        })
    }

    /// Claim the value for `token` before reading it: raise the token it accepts to
    /// `token`, leaving the value as it is, so that every holder with an older token is
    /// refused from then on (its [`set`](Fence::set) and its `claim`). Returns `Ok(true)`
    /// when claimed, `Ok(false)` when a newer holder has claimed or written it (this
    /// holder must stop: its lock was lost).
    ///
    /// This is what makes a read-modify-write safe: claim, read ([`get`](Fence::get)),
    /// compute, fenced [`set`](Fence::set) with the same token. A write accepted before
    /// the claim is in what the claimer reads; a write from an older holder after it is
    /// refused, so none is erased (see the module documentation). Idempotent: the same
    /// claim again is accepted again. A claim that fails writes nothing on that server.
    /// The claim counts as a write for [`ttl`](Fence::ttl): the key's expiry is set anew.
    ///
    /// On redlock and multi it goes to every node and is accepted when a quorum of nodes
    /// (a majority; every node on multi) accepted it and no node that answered refused
    /// it: a refusal anywhere means a newer holder exists, and gives `Ok(false)`. Too few
    /// answers give `LockError::QuorumNotReached`.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
    /// let guard = distlock::Lock::new("account:42").acquire().await?;
    /// let token = guard.fencing_token();
    /// let balance = distlock::fence("balance:42");
    /// assert!(balance.claim(token).await?);            // first: claim
    /// let now: i64 = match balance.get().await? {      // then read
    ///     Some(b) => String::from_utf8_lossy(&b.value).parse().unwrap_or(0),
    ///     None => 0,
    /// };
    /// assert!(balance.set((now + 10).to_string(), token).await?);  // compute, write fenced
    /// // An older holder can neither claim nor write any more:
    /// assert!(!balance.claim(token - 1).await?);
    /// assert!(!balance.set("0", token - 1).await?);
    /// assert!(balance.claim(token).await?);            // the same claim again: accepted
    /// guard.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn claim(&self, token: u64) -> Result<bool, LockError> {
        let (backend, name) = self.resolve()?;
        let ttl_ms = self.ttl_ms(&backend.name)?;
        if let Some(claimed) = backend.local_fenced_claim(&name, token, self.ttl) {
            return Ok(claimed);
        }
        let call = Call::raw(
            Script::FenceClaim,
            vec![name],
            vec![
                token.to_string().into_bytes(),
                ttl_ms.to_string().into_bytes(),
            ],
        );
        let Some((replies, needed)) = backend.run_script(&self.key, &call).await else {
            return Err(unsupported(&backend));
        };
        let nodes = replies.len();
        let (mut accepted, mut stale, mut first_error) = (0, 0, None);
        for r in replies {
            match r.and_then(|v| parse_set(&backend, &self.key, &v)) {
                Ok(true) => accepted += 1,
                Ok(false) => stale += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // Any node that holds a larger token refuses the claim: a newer holder exists,
        // whatever the other nodes say.
        if stale > 0 {
            return Ok(false);
        }
        if accepted >= needed {
            return Ok(true);
        }
        Err(match first_error {
            Some(e) if nodes == 1 => e,
            _ => LockError::QuorumNotReached {
                key: self.key.clone(),
                backend: backend.name.to_string(),
                granted: accepted,
                needed,
                nodes,
            },
        })
    }

    /// The value stored and the token it was written with (`None`: nothing stored, only
    /// claimed, or expired). On redlock and multi: the value with the largest write token
    /// among a quorum of nodes' answers.
    pub async fn get(&self) -> Result<Option<Fenced>, LockError> {
        let (backend, name) = self.resolve()?;
        if let Some(found) = backend.local_fenced_get(&name) {
            return Ok(found.map(|(value, token)| Fenced { value, token }));
        }
        let call = Call::raw(Script::FenceGet, vec![name], Vec::new());
        let Some((replies, needed)) = backend.run_script(&self.key, &call).await else {
            return Err(unsupported(&backend));
        };
        let nodes = replies.len();
        let (mut answered, mut best, mut first_error): (usize, Option<Fenced>, _) = (0, None, None);
        for r in replies {
            match r.and_then(|v| parse_get(&backend, &self.key, &v)) {
                Ok(found) => {
                    answered += 1;
                    if let Some(f) = found {
                        if best.as_ref().is_none_or(|b| f.token > b.token) {
                            best = Some(f);
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answered >= needed {
            return Ok(best);
        }
        Err(match first_error {
            Some(e) if nodes == 1 => e,
            _ => LockError::QuorumNotReached {
                key: self.key.clone(),
                backend: backend.name.to_string(),
                granted: answered,
                needed,
                nodes,
            },
        })
    }
}

/// Build the fenced `UPDATE` for SQL: `UPDATE {table} SET {set}, fence = {token} WHERE
/// ({filter}) AND fence <= {token}`, where `token` is the placeholder the token is bound
/// to (`$3` on PostgreSQL, `?3` or `$3` on SQLite). Run it with the token of the lock
/// held; [`is_stale`] on the rows affected tells whether a newer holder had written.
///
/// ```
/// let sql = distlock::fence::sql_update("stock", "qty = qty - ?1", "sku = ?2", "?3");
/// assert_eq!(sql, "UPDATE stock SET qty = qty - ?1, fence = ?3 WHERE (sku = ?2) AND fence <= ?3");
/// ```
pub fn sql_update(table: &str, set: &str, filter: &str, token: &str) -> String {
    format!(
        "UPDATE {table} SET {set}, {SQL_FENCE_COLUMN} = {token} WHERE ({filter}) AND {SQL_FENCE_COLUMN} <= {token}"
    )
}

/// Build the SQL claim of a row before it is read: `UPDATE {table} SET fence = {token}
/// WHERE ({filter}) AND fence <= {token}` (see [`Fence::claim`] and the module
/// documentation for the whole pattern: claim, read, compute, fenced UPDATE). Rows
/// affected 0 ([`is_stale`]) means a newer holder has claimed or written the row (or no
/// row matched the filter): stop.
///
/// ```
/// let sql = distlock::fence::sql_claim("accounts", "id = $1", "$2");
/// assert_eq!(sql, "UPDATE accounts SET fence = $2 WHERE (id = $1) AND fence <= $2");
/// // sqlx: let done = sqlx::query(&sql).bind(id).bind(token as i64).execute(&pool).await?;
/// // if distlock::fence::is_stale(done.rows_affected()) { /* a newer holder claimed it */ }
/// ```
pub fn sql_claim(table: &str, filter: &str, token: &str) -> String {
    format!(
        "UPDATE {table} SET {SQL_FENCE_COLUMN} = {token} WHERE ({filter}) AND {SQL_FENCE_COLUMN} <= {token}"
    )
}

/// Whether a fenced `UPDATE` (see [`sql_update`]) was refused: no row was affected, so the
/// token was below the row's (or the filter matched no row).
///
/// ```
/// assert!(distlock::fence::is_stale(0));
/// assert!(!distlock::fence::is_stale(1));
/// ```
pub fn is_stale(rows_affected: u64) -> bool {
    rows_affected == 0
}

fn unsupported(backend: &Backend) -> LockError {
    backend.unsupported(crate::Feature::Fence, "this backend runs no scripts")
}

fn unexpected(backend: &Backend, key: &str, v: &Value) -> LockError {
    crate::errors::backend::DriverError::Unexpected {
        address: backend.address.clone(),
        reply: crate::errors::reply::UnexpectedReply {
            script: Script::Fence.name(),
            reply: format!("{v:?}"),
        },
    }
    .into_lock_error(&backend.name, Some(key))
}

fn parse_set(backend: &Backend, key: &str, v: &Value) -> Result<bool, LockError> {
    match v {
        Value::Array(items) if items.len() == 2 => match items[0] {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            _ => Err(unexpected(backend, key, v)),
        },
        _ => Err(unexpected(backend, key, v)),
    }
}

fn parse_get(backend: &Backend, key: &str, v: &Value) -> Result<Option<Fenced>, LockError> {
    let bytes = |x: &Value| match x {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    };
    match v {
        Value::Array(items) if items.len() == 2 => match (&items[0], &items[1]) {
            (Value::Nil, _) | (_, Value::Nil) => Ok(None),
            (value, token) => {
                let value = bytes(value).ok_or_else(|| unexpected(backend, key, v))?;
                let token = bytes(token)
                    .and_then(|t| String::from_utf8(t).ok())
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| unexpected(backend, key, v))?;
                Ok(Some(Fenced { value, token }))
            }
        },
        _ => Err(unexpected(backend, key, v)),
    }
}
