//! Cluster commands by slot, on distlock's own connection to each master.
//!
//! redis-rs's cluster connection sends every command through a task of its own that picks
//! the node, then through that node's connection task: two hops more than a single server,
//! each a thread wake-up (measured: cluster at 1.6–1.8× a single server per lock+unlock).
//! [`Routed`] sends a command that names a key (the lock scripts, and the plain one-key
//! commands the protocol sends) straight to the multiplexed connection of the master that
//! serves the key's slot, as `mode = "single"` does; anything else, and anything this map
//! cannot place, goes through the cluster connection as before.
//!
//! The slot map comes from `CLUSTER SLOTS` (asked through the cluster connection) when the
//! backend connects, and again after a `MOVED`/`ASK` reply or a failed node connection —
//! at most once per [`REFRESH_AT_MOST`], in the background. A `MOVED` or `ASK` reply means
//! the node did not run the command: it is sent again through the cluster connection,
//! which follows the redirection. A failed connection is the caller's error, as on a
//! single server (the outcome is unknown: the acquire engine undoes and retries).
//! A master's connection is opened in the background the first time its slots are asked
//! for; until it is up, its commands take the cluster connection.
//!
//! Each master also has connections its callers drive (`direct.rs`), as a single server
//! has: a one-call operation alone on its master takes one when idle ([`DirectRoutes`]). A
//! `MOVED` or `ASK` there (the command did not run) asks the map again, and the call goes
//! on through the multiplexed connections as above.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Arg, Cmd, ConnectionInfo, Pipeline, RedisFuture, Value};

use super::conn::Settings;
use super::direct::Direct;
use super::link::DirectRoutes;
use crate::errors::backend::{connection_failed, redirected};
use crate::protocol::slot::{slot, SLOTS};
use crate::protocol::Call;

/// The slot map is asked again at most this often.
const REFRESH_AT_MOST: Duration = Duration::from_millis(100);

/// The cluster connection, and a connection of our own to each master for the commands
/// whose slot the map knows.
#[derive(Clone)]
pub(crate) struct Routed {
    /// Every command this map cannot place, and the redirected ones.
    pub(crate) fallback: ClusterConnection,
    map: Arc<Map>,
}

impl std::fmt::Debug for Routed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed").finish_non_exhaustive()
    }
}

struct Map {
    /// `owner[slot]`: the index in `masters` of the master serving it.
    owner: RwLock<Vec<Option<u16>>>,
    /// The masters (`None` while connecting), by address (`host:port`).
    masters: RwLock<Vec<(String, Option<Master>)>>,
    /// How to reach a master (credentials, TLS, timeouts: the first configured node's).
    settings: Settings,
    /// `None`: no configured node to copy (every command takes the cluster connection).
    template: Option<ConnectionInfo>,
    refreshing: AtomicBool,
    last_refresh: Mutex<Option<Instant>>,
}

/// A master's connections: the multiplexed one, and those its callers drive (`direct.rs`;
/// `None` where they do not apply).
#[derive(Clone)]
struct Master {
    conn: ConnectionManager,
    direct: Option<Arc<Direct>>,
}

impl Routed {
    /// The cluster connection `fallback`, with a slot map asked now (and the masters'
    /// connections opened, within the connect timeout). A map that cannot be had now is
    /// asked again at the first command.
    pub(crate) async fn new(
        fallback: ClusterConnection,
        settings: &Settings,
        template: Option<ConnectionInfo>,
    ) -> Routed {
        let routed = Routed {
            fallback,
            map: Arc::new(Map {
                owner: RwLock::new(vec![None; usize::from(SLOTS)]),
                masters: RwLock::new(Vec::new()),
                settings: settings.clone(),
                template,
                refreshing: AtomicBool::new(false),
                last_refresh: Mutex::new(None),
            }),
        };
        let _ = tokio::time::timeout(
            settings.connect_timeout,
            refresh(routed.fallback.clone(), routed.map.clone()),
        )
        .await;
        routed
    }

    /// The connection of the master serving the slot of `cmd`'s key, when known and open.
    fn route(&self, cmd: &Cmd) -> Option<ConnectionManager> {
        self.master(key_of(cmd)?, |m| m.conn.clone())
    }

    /// `pick` of the connections of the master serving the slot of `key`, when known and
    /// open.
    fn master<T>(&self, key: &[u8], pick: impl FnOnce(&Master) -> T) -> Option<T> {
        let index = self.map.owner.read().ok()?[usize::from(slot(key))]?;
        let masters = self.map.masters.read().ok()?;
        masters.get(usize::from(index))?.1.as_ref().map(pick)
    }

    /// Ask the slot map again (in the background, at most once per `REFRESH_AT_MOST`).
    fn stale(&self) {
        let now = Instant::now();
        {
            let Ok(mut last) = self.map.last_refresh.lock() else {
                return;
            };
            if last.is_some_and(|t| now.duration_since(t) < REFRESH_AT_MOST) {
                return;
            }
            *last = Some(now);
        }
        if self.map.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (fallback, map) = (self.fallback.clone(), self.map.clone());
        let task = async move {
            refresh(fallback, map.clone()).await;
            map.refreshing.store(false, Ordering::Release);
        };
        match crate::rt::runtime::handle() {
            Ok(h) => {
                h.spawn(task);
            }
            Err(_) => self.map.refreshing.store(false, Ordering::Release),
        }
    }

    /// The outcome of a command on a master's own connection: a failed connection asks
    /// the map again (a failover may be under way).
    fn after<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &r {
            if connection_failed(e) {
                self.stale();
            }
        }
        r
    }
}

// A lock call's first key names its slot, so its master.
impl DirectRoutes for Routed {
    fn direct_for(&self, call: &Call) -> Option<Arc<Direct>> {
        self.master(call.keys.first()?.as_bytes(), |m| m.direct.clone())?
    }

    fn stale(&self) {
        Routed::stale(self);
    }
}

// A `MOVED` or `ASK` reply: the master did not run it; the cluster connection follows the
// redirection.
impl ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let node = self.route(cmd);
        Box::pin(async move {
            if let Some(mut conn) = node {
                match conn.req_packed_command(cmd).await {
                    Err(e) if e.redirect_node().is_some() => self.stale(),
                    Ok(v) if redirected(&v) => self.stale(),
                    other => return self.after(other),
                }
            }
            self.fallback.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // One slot for the whole pipeline, or the cluster connection.
        let slots: Option<Vec<u16>> = pipe
            .cmd_iter()
            .map(|c| key_of(c).map(slot))
            .collect::<Option<Vec<u16>>>();
        let node = match slots.as_deref() {
            Some([first, rest @ ..]) if rest.iter().all(|s| s == first) => {
                pipe.cmd_iter().next().and_then(|c| self.route(c))
            }
            _ => None,
        };
        Box::pin(async move {
            if let Some(mut conn) = node {
                match conn.req_packed_commands(pipe, offset, count).await {
                    Err(e) if e.redirect_node().is_some() => self.stale(),
                    Ok(v) if v.iter().any(redirected) => self.stale(),
                    other => return self.after(other),
                }
            }
            self.fallback.req_packed_commands(pipe, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Ask `CLUSTER SLOTS` and open a connection to each master not connected yet (in
/// parallel); masters that left the map are dropped.
async fn refresh(mut fallback: ClusterConnection, map: Arc<Map>) {
    let reply = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Value>(&mut fallback)
        .await;
    let ranges = match reply {
        Ok(v) => parse_slots(&v),
        Err(e) => {
            tracing::debug!(error = %e, "distlock: CLUSTER SLOTS failed; commands take the cluster connection");
            return;
        }
    };
    // The masters: kept connections for addresses still in the map, new ones to open.
    let mut addresses: Vec<String> = ranges.iter().map(|(_, _, a)| a.clone()).collect();
    addresses.sort();
    addresses.dedup();
    let kept: HashMap<String, Option<Master>> = match map.masters.read() {
        Ok(m) => m.iter().cloned().collect(),
        Err(_) => return,
    };
    let opened = futures_util::future::join_all(addresses.iter().map(|address| {
        let existing = kept.get(address).cloned().flatten();
        let map = map.clone();
        async move {
            match existing {
                Some(c) => Some(c),
                None => open(&map, address).await,
            }
        }
    }))
    .await;
    let mut owner = vec![None; usize::from(SLOTS)];
    for (start, end, address) in &ranges {
        let Ok(i) = addresses.binary_search(address) else {
            continue;
        };
        let Ok(i) = u16::try_from(i) else { continue };
        for s in *start..=(*end).min(SLOTS - 1) {
            owner[usize::from(s)] = Some(i);
        }
    }
    // Written in this order under both locks, so a reader never sees an index of the new
    // map against the old list.
    if let (Ok(mut o), Ok(mut m)) = (map.owner.write(), map.masters.write()) {
        *m = addresses.into_iter().zip(opened).collect();
        *o = owner;
    }
}

/// Connections to the master at `address` (`host:port`), or `None` (logged).
async fn open(map: &Map, address: &str) -> Option<Master> {
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let info = map
        .template
        .clone()?
        .set_addr(map.settings.addr(host.to_owned(), port));
    let direct = Direct::of(
        &info,
        map.settings.connect_timeout,
        map.settings.response_timeout,
    );
    let client = map.settings.client(address, info).ok()?;
    match map.settings.manager(address, &client, Duration::ZERO).await {
        Ok(conn) => Some(Master { conn, direct }),
        Err(e) => {
            tracing::debug!(address, error = %e, "distlock: cannot open a connection to a cluster master; its commands take the cluster connection");
            None
        }
    }
}

/// `(first slot, last slot, "host:port" of the master)` of a `CLUSTER SLOTS` reply.
fn parse_slots(v: &Value) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = v else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|r| {
            let Value::Array(r) = r else { return None };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (r.first(), r.get(1), r.get(2))
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Value::Int(port) = master.get(1)? else {
                return None;
            };
            if host.is_empty() {
                return None;
            }
            Some((
                u16::try_from(*start).ok()?,
                u16::try_from(*end).ok()?,
                format!("{host}:{port}"),
            ))
        })
        .collect()
}

/// The key a command is routed by: the first key of `EVAL`/`EVALSHA`/`FCALL` (every key of a lock
/// call shares one hash tag), the key of the one-key commands the protocol sends; `None`
/// for anything else (it takes the cluster connection).
fn key_of(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(b) => Some(b),
        // A cursor, or an argument kind of a later redis-rs: not routed here.
        _ => None,
    });
    let name = args.next()??;
    let at = if [&b"EVALSHA"[..], b"EVAL", b"FCALL"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
    {
        // EVALSHA sha numkeys key ... (FCALL: the function's name): routed only when it
        // has a key.
        let _script = args.next()??;
        let numkeys = args.next()??;
        if numkeys == b"0" {
            return None;
        }
        0
    } else if [
        &b"DEL"[..],
        b"INCR",
        b"INCRBY",
        b"EXPIRE",
        b"PEXPIRE",
        b"GET",
        b"SET",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
    {
        0
    } else {
        return None;
    };
    args.nth(at)?
}

#[cfg(test)]
mod tests {
    use super::key_of;

    #[test]
    fn routed_by_the_first_key() {
        let mut c = redis::cmd("EVALSHA");
        c.arg("abc")
            .arg(2)
            .arg("lock:{k}")
            .arg("lock:{k}:fence")
            .arg("x");
        assert_eq!(key_of(&c), Some(&b"lock:{k}"[..]));
        let mut c = redis::cmd("EVALSHA");
        c.arg("abc").arg(0).arg("x");
        assert_eq!(key_of(&c), None, "no key: the cluster connection");
        let mut c = redis::cmd("DEL");
        c.arg("latch:{k}");
        assert_eq!(key_of(&c), Some(&b"latch:{k}"[..]));
        assert_eq!(key_of(redis::cmd("SCRIPT").arg("LOAD").arg("x")), None);
        let mut c = redis::cmd("FCALL");
        c.arg("f").arg(1).arg("lock:{k}").arg("x");
        assert_eq!(key_of(&c), Some(&b"lock:{k}"[..]));
        assert_eq!(
            key_of(redis::cmd("FUNCTION").arg("LOAD").arg("x")),
            None,
            "the cluster connection: every master"
        );
    }
}
