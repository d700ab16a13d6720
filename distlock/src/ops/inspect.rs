//! Who holds a lock: the holder information the acquire scripts record with the lock
//! itself (a reentrant or fair lock's record, `protocol/record.lua`, in the same `SET` as
//! its holder; a read-write lock's hash, `i:<owner id>`; read as
//! `host\tpid\tsite\tsince\ttoken`), gone with the holder's hold and with the lock's
//! expiry; on by default in distlock's format), and the read-only
//! inspection behind `distlock list`/`show`: [`Registry::inspect`] and [`Registry::list`].
//!
//! Semaphores are shown too ([`Kind::Semaphore`]): their holders (the acquire script
//! records the same information in the semaphore's counts hash), each one's permits and
//! lease left, and the semaphore's permits as the last acquisition carried them.
//!
//! On a cluster the master that holds the key is reported in [`LockInfo::address`] (the
//! node answers with its own address from `CLUSTER NODES`). On a redlock or multi backend
//! every node is asked and the first node (in configuration order) on which the lock is
//! held is reported — or, where no node holds it, the first on which anything of it is
//! (processes waiting); the nodes' views can differ while a quorum acquisition or release
//! is under way. A memory backend has no inspection (its locks live in one process).

use crate::check::report::ServerReport;
use std::collections::BTreeSet;
use std::time::Duration;

use redis::Value;

use crate::protocol::keys::LockKeys;
use crate::registry::Registry;
use crate::{LockError, LockKind};

/// Most Redis key names one [`Registry::list`] looks at.
const SCAN_LIMIT: usize = 100_000;

/// What an inspected entry is: a lock of one of the [`LockKind`]s, or a semaphore. It
/// compares equal to the matching `LockKind`.
///
/// ```
/// use distlock::inspect::Kind;
/// assert_eq!(Kind::from(distlock::LockKind::Read), distlock::LockKind::Read);
/// assert_eq!(Kind::Semaphore.name(), "semaphore");
/// assert_eq!(Kind::Semaphore.lock_kind(), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A reentrant lock.
    Reentrant,
    /// A fair lock.
    Fair,
    /// A read lock (readers hold it).
    Read,
    /// A write lock (a writer holds it).
    Write,
    /// A semaphore ([`crate::Semaphore`]): [`LockInfo::permits`], and each holder's permits
    /// in [`Holder::count`].
    Semaphore,
}

impl Kind {
    /// `reentrant`, `fair`, `read`, `write` (as the attribute's `kind`) or `semaphore`.
    pub fn name(&self) -> &'static str {
        match self.lock_kind() {
            Some(k) => k.name(),
            None => "semaphore",
        }
    }

    /// The lock kind; `None` for a semaphore.
    pub fn lock_kind(&self) -> Option<LockKind> {
        match self {
            Kind::Reentrant => Some(LockKind::Reentrant),
            Kind::Fair => Some(LockKind::Fair),
            Kind::Read => Some(LockKind::Read),
            Kind::Write => Some(LockKind::Write),
            Kind::Semaphore => None,
        }
    }
}

impl From<LockKind> for Kind {
    fn from(k: LockKind) -> Kind {
        match k {
            LockKind::Reentrant => Kind::Reentrant,
            LockKind::Fair => Kind::Fair,
            LockKind::Read => Kind::Read,
            LockKind::Write => Kind::Write,
        }
    }
}

impl PartialEq<LockKind> for Kind {
    fn eq(&self, other: &LockKind) -> bool {
        self.lock_kind() == Some(*other)
    }
}

/// One held (or waited-for) lock or semaphore, as [`Registry::inspect`] and
/// [`Registry::list`] see it.
///
/// ```
/// # fn show(info: &distlock::inspect::LockInfo) {
/// for h in &info.holders {
///     println!("{} ({}) held by {:?} pid {:?} at {:?}", info.key, info.kind.name(), h.host, h.pid, h.site);
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The key, as given to `Lock::new`.
    pub key: String,
    /// Reentrant, fair, read (readers hold it), write (a writer holds it) or a semaphore.
    pub kind: Kind,
    /// The backend's name.
    pub backend: String,
    /// The server that answered: on a cluster the master holding the key (the seed list
    /// when the node may not run `CLUSTER NODES`); on redlock/multi the node reported; on
    /// sentinel the master's name and the sentinels.
    pub address: String,
    /// A semaphore's number of permits, as its last acquisition carried it; `None` for a
    /// lock.
    pub permits: Option<u32>,
    /// What is left of the lease (the longest of the holders'); `None` when not held.
    pub ttl: Option<Duration>,
    /// The last fencing token handed out for this key, as far as the server knows it: the
    /// largest of the current holders' tokens and of the key's own counter
    /// (`PREFIX{KEY}:fence`, which redlock and multi draw from; single, sentinel and
    /// cluster draw from a counter shared by many keys, so a lock nobody holds there shows
    /// `None`). Under `protocol = "redisson"`, the fenced lock's counter.
    pub token: Option<u64>,
    /// Who holds it (several readers for a read lock, several holders for a semaphore).
    pub holders: Vec<Holder>,
    /// Who waits, in order (fair locks: the queue; write locks: waiting writers).
    pub waiters: Vec<Waiter>,
    /// How many processes have a task waiting for this lock, of any kind: reentrant,
    /// fair, read or write (each such process subscribes to the lock's release channel,
    /// and these are counted on the server; a read-write lock's count is on its write
    /// row, else its read row). A process that stopped waiting may still count for up to
    /// 10 s (its subscription is dropped by a periodic sweep). `None` when the ACL user
    /// may not run `PUBSUB NUMSUB`/`SHARDNUMSUB`.
    pub waiting_processes: Option<u64>,
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id (hex), as stored in Redis (for a semaphore, the holder id that
    /// [`Semaphore::force_unlock_holder`](crate::Semaphore::force_unlock_holder) takes).
    pub owner: String,
    /// Reentrancy count; for a semaphore, the permits this holder holds.
    pub count: u64,
    /// The holder's host name (`None`: holder information is off on its backend).
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The lock site: the `#[distributed_lock]` function, or `file:line` of `Lock::new`.
    pub site: Option<String>,
    /// When it was acquired: milliseconds since the Unix epoch, by the acquiring process's
    /// clock (a reentrant or fair lock: written with no call of its own) or by the server's
    /// (a read-write lock, a semaphore).
    pub since_ms: Option<u64>,
    /// How long it has held the lock: the server's clock now − `since_ms` (`None` when
    /// `since_ms` is ahead of it: a process whose clock runs ahead of the server's).
    pub held_for: Option<Duration>,
    /// The fencing token this holder got.
    pub token: Option<u64>,
    /// What is left of this holder's own lease, where each holder has one (a semaphore's
    /// holders, a read lock's readers); `None` for the others (see [`LockInfo::ttl`]).
    pub lease_left: Option<Duration>,
}

/// One waiter of a fair or write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The owner id (hex).
    pub owner: String,
    /// How much longer it waits at most.
    pub wait_left: Duration,
}

impl Registry {
    /// Run `init`'s self-check again on every server of `backend` (`None`: the default):
    /// its version, the rights the ACL user lacks, its eviction policy and, on a cluster,
    /// its state: one entry per server (cluster: per master; redlock/multi: per node), or
    /// the error that server gave. Empty on a memory backend. (`distlock check` uses
    /// [`Registry::check`], which also reports backends that cannot be connected.)
    ///
    /// ```no_run
    /// # async fn f(registry: distlock::Registry) -> Result<(), distlock::LockError> {
    /// for server in registry.probe(None).await? {
    ///     match server {
    ///         Ok(s) => println!("{} redis {:?} eviction {:?}", s.address, s.version, s.eviction),
    ///         Err(e) => println!("{e}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn probe(
        &self,
        backend: Option<&str>,
    ) -> Result<Vec<Result<ServerReport, LockError>>, LockError> {
        let backend = self.backend(backend)?;
        Ok(backend.probe().await.unwrap_or_default())
    }

    /// Everything about the locks on `key` (of every kind: a reentrant, a fair, a read or
    /// write lock) on `backend` (`None`: the default backend). Empty when nothing holds or
    /// waits for it. Read-only: one script call.
    ///
    /// ```no_run
    /// # async fn f(registry: distlock::Registry) -> Result<(), distlock::LockError> {
    /// for info in registry.inspect("order:42", None).await? {
    ///     println!("{:?} {} holders, ttl {:?}", info.kind, info.holders.len(), info.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(
        &self,
        key: &str,
        backend: Option<&str>,
    ) -> Result<Vec<LockInfo>, LockError> {
        let backend = self.backend(backend)?;
        redisson_uninspectable(&backend)?;
        inspect_on(&backend, key).await
    }

    /// The locks held or waited for on `backend` (`None`: the default) whose key matches
    /// `pattern` (a glob: `*` any run, `?` one character; `None`: all), sorted by key.
    /// Uses SCAN (never KEYS): on a cluster on every master, on redlock/multi on every
    /// node; looks at most 100 000 key names.
    ///
    /// ```no_run
    /// # async fn f(registry: distlock::Registry) -> Result<(), distlock::LockError> {
    /// for info in registry.list(Some("order:*"), None).await? {
    ///     println!("{} {}", info.key, info.kind.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        pattern: Option<&str>,
        backend: Option<&str>,
    ) -> Result<Vec<LockInfo>, LockError> {
        let backend = self.backend(backend)?;
        redisson_uninspectable(&backend)?;
        let glob = pattern.unwrap_or("*");
        let scan = format!("{}{{{}*", escape_glob(&backend.prefix), glob_for_scan(glob));
        let names = match backend.scan(&scan, SCAN_LIMIT).await {
            Some(r) => r?,
            None => return Err(no_inspection(&backend)),
        };
        let keys: BTreeSet<String> = names
            .iter()
            .filter_map(|n| user_key(&backend.prefix, n))
            .filter(|k| glob_match(glob.as_bytes(), k.as_bytes()))
            .collect();
        let mut out = Vec::new();
        for key in keys {
            out.extend(inspect_on(&backend, &key).await?);
        }
        Ok(out)
    }
}

/// Inspection on the memory backend, whose locks live in one process.
fn no_inspection(backend: &crate::backend::Backend) -> LockError {
    backend.unsupported(crate::Feature::Inspect, "its locks live in one process")
}

pub(crate) async fn inspect_on(
    backend: &crate::backend::Backend,
    key: &str,
) -> Result<Vec<LockInfo>, LockError> {
    let call = crate::protocol::inspect(&backend.prefix, key, backend.is_cluster())?;
    let Some((replies, _)) = backend.run_script(key, &call).await else {
        return Err(no_inspection(backend));
    };
    let addresses = backend.script_addresses();
    let mut first_err = None;
    // The first node's answer, and the first one with something in it (a node where
    // only processes wait, say, on redlock or multi): reported when no node holds it.
    let mut answered = None;
    let mut something = None;
    for (i, reply) in replies.into_iter().enumerate() {
        let address = addresses
            .get(i)
            .cloned()
            .unwrap_or_else(|| backend.address.clone());
        match reply {
            Ok(v) => {
                let found = parse(key, &backend.name, &address, &v).ok_or_else(|| {
                    backend.unsupported(
                        crate::Feature::Inspect,
                        format!("{address}: unexpected reply to the inspect script: {v:?}"),
                    )
                })?;
                if found.iter().any(|f| !f.holders.is_empty()) {
                    return Ok(found);
                }
                if !found.is_empty() && something.is_none() {
                    something = Some(found);
                } else if answered.is_none() {
                    answered = Some(found);
                }
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match (something.or(answered), first_err) {
        (Some(found), _) => Ok(found),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(Vec::new()),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) => Some(a),
        Value::Nil => Some(&[]),
        _ => None,
    }
}

/// A flat `field, value, ...` reply as pairs.
fn pairs(v: &Value) -> Option<Vec<(String, String)>> {
    array(v)?
        .chunks(2)
        .map(|c| Some((text(c.first()?)?, text(c.get(1)?)?)))
        .collect()
}

/// `{pttl, hgetall}`.
fn hash(v: &Value) -> Option<(i64, Vec<(String, String)>)> {
    let a = array(v)?;
    Some((int(a.first()?)?, pairs(a.get(1)?)?))
}

fn positive_ms(ms: i64) -> Option<Duration> {
    u64::try_from(ms)
        .ok()
        .filter(|m| *m > 0)
        .map(Duration::from_millis)
}

/// A holder with what its info entry says (`host\tpid\tsite\tsince\ttoken`).
fn holder(owner: &str, count: u64, info: &[(String, String)], now: i64) -> Holder {
    let entry = info
        .iter()
        .find(|(o, _)| o == owner)
        .map(|(_, v)| v.as_str());
    let mut h = Holder {
        owner: owner.to_owned(),
        count,
        host: None,
        pid: None,
        site: None,
        since_ms: None,
        held_for: None,
        token: None,
        lease_left: None,
    };
    if let Some(entry) = entry {
        let mut head = entry.splitn(3, '\t');
        h.host = head.next().map(str::to_owned);
        h.pid = head.next().and_then(|p| p.parse().ok());
        if let Some(rest) = head.next() {
            let mut tail = rest.rsplitn(3, '\t');
            h.token = tail.next().and_then(|t| t.parse().ok());
            h.since_ms = tail.next().and_then(|t| t.parse().ok());
            h.site = tail.next().map(str::to_owned);
            h.held_for = h
                .since_ms
                .and_then(|s| u64::try_from(now).ok()?.checked_sub(s))
                .map(Duration::from_millis);
        }
    }
    h
}

/// The inspect script's reply as the locks it shows (`None`: not that script's reply).
/// A lock's fields (a reentrant or fair lock's record as `protocol/inspect.lua` answers it,
/// a read-write lock's hash): `l:<level id>` fields mark the levels held,
/// `i:<owner id>` the holders' information, `hold:until` a run-once job's
/// `hold_at_least`, and `w` the processes with a waiter refused it (`protocol/handoff.lua`);
/// owners are the other fields (so a lock kept after its job by `hold_at_least` shows no
/// holder).
fn is_owner(field: &str) -> bool {
    !(field.starts_with("l:") || field.starts_with("i:") || field == "hold:until" || field == "w")
}

/// The tokens of the holds of a reentrant or fair lock: its levels' marks
/// (`l:<level id>`: a new holder's token; a nested level's `1`, below every token).
fn level_tokens(fields: &[(String, String)]) -> Vec<u64> {
    fields
        .iter()
        .filter(|(f, _)| f.starts_with("l:"))
        .filter_map(|(_, v)| v.parse().ok())
        .collect()
}

/// The largest of the key's own counter (`counter`, where the server has one) and the
/// tokens held now.
fn last_token(counter: Option<u64>, held: impl IntoIterator<Item = u64>) -> Option<u64> {
    held.into_iter().chain(counter).max()
}

/// The holder information entries of a lock's fields (`i:<owner id>` -> entry), by owner.
fn info_of(fields: &[(String, String)]) -> Vec<(String, String)> {
    fields
        .iter()
        .filter_map(|(f, v)| Some((f.strip_prefix("i:")?.to_owned(), v.clone())))
        .collect()
}

/// The waiters of a queue (`queue`: the list, in the order they are served; `deadlines`:
/// the zset of their deadlines, server ms) still within their wait at `now`.
fn queued(queue: &Value, deadlines: &Value, now: i64) -> Option<Vec<Waiter>> {
    let queue: Vec<String> = array(queue)?.iter().filter_map(text).collect();
    let deadlines = pairs(deadlines)?;
    Some(
        queue
            .iter()
            .filter_map(|o| {
                let d: i64 = deadlines.iter().find(|(w, _)| w == o)?.1.parse().ok()?;
                Some(Waiter {
                    owner: o.clone(),
                    wait_left: positive_ms(d - now)?,
                })
            })
            .collect(),
    )
}

fn parse(key: &str, backend: &str, address: &str, v: &Value) -> Option<Vec<LockInfo>> {
    let a = array(v)?;
    if a.len() != 15 {
        return None;
    }
    // On a cluster, the node that answered (the master holding the key).
    let address = text(&a[12]).unwrap_or_else(|| address.to_owned());
    let address = address.as_str();
    let waiting_on: Vec<Option<u64>> = array(&a[9])?
        .iter()
        .map(|v| int(v).and_then(|n| u64::try_from(n).ok()))
        .collect();
    let waiting_on = |i: usize| waiting_on.get(i).copied().flatten();
    let now = int(&a[0])?;
    let token = int(&a[1]).and_then(|t| u64::try_from(t).ok());
    let info = |kind, ttl, holders, waiters| LockInfo {
        key: key.to_owned(),
        kind,
        backend: backend.to_owned(),
        address: address.to_owned(),
        permits: None,
        ttl,
        token,
        holders,
        waiters,
        waiting_processes: None,
    };
    let count = |s: &str| s.parse::<u64>().unwrap_or(0);
    let mut out = Vec::new();
    // Reentrant.
    let (pttl, fields) = hash(&a[2])?;
    let rinfo = info_of(&fields);
    if !fields.is_empty() || waiting_on(0).is_some_and(|n| n > 0) {
        let holders = fields
            .iter()
            .filter(|(o, _)| is_owner(o))
            .map(|(o, c)| holder(o, count(c), &rinfo, now))
            .collect();
        out.push(LockInfo {
            waiting_processes: waiting_on(0),
            token: last_token(token, level_tokens(&fields)),
            ..info(Kind::Reentrant, positive_ms(pttl), holders, Vec::new())
        });
    }
    // Fair.
    let (pttl, fields) = hash(&a[3])?;
    let finfo = info_of(&fields);
    let waiters = queued(&a[4], &a[5], now)?;
    if !fields.is_empty() || !waiters.is_empty() {
        let holders = fields
            .iter()
            .filter(|(o, _)| is_owner(o))
            .map(|(o, c)| holder(o, count(c), &finfo, now))
            .collect();
        out.push(LockInfo {
            waiting_processes: waiting_on(1),
            token: last_token(token, level_tokens(&fields)),
            ..info(Kind::Fair, positive_ms(pttl), holders, waiters)
        });
    }
    // Read-write: the state hash, the readers' lease ends, the waiting writers' deadlines.
    let (_, fields) = hash(&a[6])?;
    let readers = pairs(&a[7])?;
    let writers = pairs(&a[8])?;
    let wrinfo = info_of(&fields);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.as_str())
    };
    let mut waiting: Vec<(i64, Waiter)> = writers
        .iter()
        .filter_map(|(o, d)| {
            let d: i64 = d.parse().ok()?;
            Some((
                d,
                Waiter {
                    owner: o.clone(),
                    wait_left: positive_ms(d - now)?,
                },
            ))
        })
        .collect();
    waiting.sort_by_key(|(d, _)| *d);
    let mut waiting: Vec<Waiter> = waiting.into_iter().map(|(_, w)| w).collect();
    let wexp: i64 = field("wexp").and_then(|w| w.parse().ok()).unwrap_or(0);
    if let Some(writer) = field("writer").filter(|_| wexp > now) {
        let count = field("wcount").map_or(0, count);
        let holders = vec![holder(writer, count, &wrinfo, now)];
        out.push(LockInfo {
            waiting_processes: waiting_on(2),
            token: last_token(token, field("wt").and_then(|t| t.parse().ok())),
            ..info(
                Kind::Write,
                positive_ms(wexp - now),
                holders,
                std::mem::take(&mut waiting),
            )
        });
    }
    let rw_counted = out.iter().any(|l| l.kind == Kind::Write);
    let mut last = 0;
    let mut read_tokens = Vec::new();
    let live: Vec<Holder> = readers
        .iter()
        .filter_map(|(o, e)| {
            let e: i64 = e.parse().ok()?;
            if e <= now {
                return None;
            }
            // A place in the readers' set without its count in the hash holds nothing
            // (rw_prologue.lua's last_reader()).
            let c = count(field(&format!("r:{o}"))?);
            last = last.max(e);
            read_tokens.extend(field(&format!("rt:{o}")).and_then(|t| t.parse::<u64>().ok()));
            Some(Holder {
                lease_left: positive_ms(e - now),
                ..holder(o, c, &wrinfo, now)
            })
        })
        .collect();
    if !live.is_empty() || !waiting.is_empty() {
        out.push(LockInfo {
            waiting_processes: waiting_on(2).filter(|_| !rw_counted),
            token: last_token(token, read_tokens),
            ..info(Kind::Read, positive_ms(last - now), live, waiting)
        });
    }
    // Semaphore: the holders' lease ends, and their permits, tokens and information.
    let ends = pairs(&a[10])?;
    let counts = pairs(&a[11])?;
    let sinfo = info_of(&counts);
    let entry = |name: &str| {
        counts
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.as_str())
    };
    let mut last = 0;
    let mut tokens = Vec::new();
    let holders: Vec<Holder> = ends
        .iter()
        .filter_map(|(id, e)| {
            let e: i64 = e.parse().ok()?;
            if e <= now {
                return None;
            }
            last = last.max(e);
            let token = entry(&format!("t:{id}")).and_then(|t| t.parse::<u64>().ok());
            tokens.extend(token);
            let base = holder(id, entry(id).map_or(0, count), &sinfo, now);
            Some(Holder {
                token: base.token.or(token),
                lease_left: positive_ms(e - now),
                ..base
            })
        })
        .collect();
    // A fair semaphore's queue (empty for another semaphore).
    let waiters = queued(&a[13], &a[14], now)?;
    if !holders.is_empty() || !waiters.is_empty() || waiting_on(3).is_some_and(|n| n > 0) {
        out.push(LockInfo {
            waiting_processes: waiting_on(3),
            token: last_token(token, tokens),
            permits: entry("limit").and_then(|p| p.parse().ok()),
            ..info(Kind::Semaphore, positive_ms(last - now), holders, waiters)
        });
    }
    Some(out)
}

/// The user key a Redis key name of a lock's main state belongs to (`PREFIX{KEY}`,
/// `PREFIX{KEY}:fair`, `PREFIX{KEY}:fair:queue`, `PREFIX{KEY}:rw`, `PREFIX{KEY}:rw:writers`,
/// a semaphore's `PREFIX{KEY}:sem`; the `PREFIX{#HASH}KEY` form of keys with braces too),
/// checked by computing the names back.
fn user_key(prefix: &str, name: &str) -> Option<String> {
    const SUFFIXES: [&str; 7] = [
        ":fair:queue",
        ":rw:writers",
        ":sem:queue",
        ":fair",
        ":rw",
        ":sem",
        "",
    ];
    let rest = name.strip_prefix(prefix)?.strip_prefix('{')?;
    for suffix in SUFFIXES {
        let Some(base) = name.strip_suffix(suffix) else {
            continue;
        };
        let candidate = if rest.starts_with('#') {
            base.split_once('}')?.1.to_owned()
        } else {
            match base
                .strip_prefix(prefix)?
                .strip_prefix('{')?
                .strip_suffix('}')
            {
                Some(k) if !k.contains(['{', '}']) => k.to_owned(),
                _ => continue,
            }
        };
        if candidate.is_empty() {
            continue;
        }
        if let Ok(keys) = LockKeys::new(prefix, candidate.clone()) {
            if keys.hash == base {
                return Some(candidate);
            }
        }
    }
    None
}

/// `*` and `?` glob match (no classes).
fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == s[i]) {
            p += 1;
            i += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// The key prefix as a literal in a SCAN MATCH pattern.
fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The user's glob inside the SCAN pattern: `[` and `\` escaped (only `*` and `?` are
/// offered), braces widened to `*` (keys with braces are stored under another tag).
fn glob_for_scan(glob: &str) -> String {
    if glob.contains(['{', '}']) {
        return "*".to_owned();
    }
    glob.replace('\\', "\\\\")
        .replace('[', "\\[")
        .replace(']', "\\]")
}

/// Inspection reads distlock's own layout: a `protocol = "redisson"` backend's locks (bare
/// names, Redisson's hash fields) are not found by it, so it says so instead of answering
/// "nothing held".
fn redisson_uninspectable(backend: &crate::backend::Backend) -> Result<(), LockError> {
    if backend.is_redisson() {
        return Err(backend.unsupported(
            crate::Feature::Inspect,
            "inspection reads distlock's layout; inspect Redisson's hashes with redis-cli (HGETALL <name>, PTTL <name>)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_keys_round_trip() {
        for key in ["order:42", "a{b}c", "x"] {
            for kind in [LockKind::Reentrant, LockKind::Fair, LockKind::Read] {
                let k = LockKeys::for_kind("lock:", key.into(), kind).unwrap();
                assert_eq!(
                    user_key("lock:", &k.hash).as_deref(),
                    Some(key),
                    "{}",
                    k.hash
                );
                assert_eq!(user_key("lock:", &k.fence()), None);
            }
            let sem = LockKeys::semaphore("lock:", key.into(), 1, 1, false).unwrap();
            assert_eq!(user_key("lock:", &sem.hash).as_deref(), Some(key));
            assert_eq!(user_key("lock:", &format!("{}:n", sem.hash)), None);
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"order:*", b"order:42"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"o?der*2", b"order:42"));
        assert!(!glob_match(b"order:?", b"order:42"));
    }

    #[test]
    fn holder_entries_parse() {
        let info = vec![(
            "o1".to_string(),
            "h\t12\tsrc/a.rs:3\t1700000000000\t7".to_string(),
        )];
        let h = holder("o1", 2, &info, 1_700_000_000_500);
        assert_eq!(h.host.as_deref(), Some("h"));
        assert_eq!(h.pid, Some(12));
        assert_eq!(h.site.as_deref(), Some("src/a.rs:3"));
        assert_eq!(h.since_ms, Some(1_700_000_000_000));
        assert_eq!(h.token, Some(7));
        assert_eq!(h.held_for, Some(Duration::from_millis(500)));
        assert_eq!(holder("o2", 1, &info, 0).host, None);
    }
}
