//! `mode = "sentinel"`: the master of a group monitored by Redis Sentinel, followed across
//! failovers.
//!
//! The master is resolved with `SENTINEL get-master-addr-by-name`, asking each sentinel in
//! turn, and checked with `ROLE` before it is used. A monitor task then keeps it current:
//!
//! - it subscribes to `+switch-master` on a sentinel (moving to the next one when that
//!   connection drops) and switches as soon as a failover is announced;
//! - a command that fails with a connection error, a timeout or `READONLY` asks it to
//!   resolve the master again (at most every [`SUSPECT_SPACING`]);
//! - it resolves again every [`CHECK_EVERY`] anyway, and after every reconnection to a
//!   sentinel (a switch may have been announced while it was not listening).
//!
//! Switching opens a connection to the new master and swaps it in; calls in flight on the
//! old one finish (or fail) there. Every switch bumps an epoch the wake-up subscriber
//! watches: it reconnects to the new master and wakes every waiter, since releases may have
//! been missed.
//!
//! The user name, password and database of the first sentinel URL are used for the master
//! too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use distlock_config::RedisUrl;
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::redis::{client, load_scripts, manager_config, open_manager, tcp_settings, timed_out};

/// How often the master is resolved again without any other reason.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// After a failed switch, how soon to try again.
const RETRY_SWITCH: Duration = Duration::from_millis(200);
/// Resolutions asked for by failing commands are at least this far apart.
const SUSPECT_SPACING: Duration = Duration::from_millis(100);
/// Longest pause between attempts to reach a sentinel.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The master in use now.
struct Current {
    /// `host:port`.
    address: String,
    /// Every command but acquire-with-WAIT goes here.
    conn: ConnectionManager,
    /// With `sync_replicas`: acquire + WAIT go here (WAIT blocks its connection).
    sync_conn: Option<ConnectionManager>,
}

/// One sentinel.
struct Sentinel {
    /// `host:port`.
    address: String,
    client: redis::Client,
}

/// The master of one Sentinel-monitored group, kept current by a monitor task.
pub(crate) struct SentinelMaster {
    backend: Arc<str>,
    master_name: String,
    sentinels: Vec<Sentinel>,
    /// Credentials and database for the master (from the first sentinel URL).
    master_info: ConnectionInfo,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// `Some(sync_timeout)` when acquisitions WAIT for replicas.
    sync_timeout: Option<Duration>,
    current: RwLock<Arc<Current>>,
    /// Bumped on every switch; the subscriber reconnects when it changes.
    epoch: watch::Sender<u64>,
    /// Failing commands ask the monitor to resolve the master again.
    suspect: Arc<Notify>,
    /// The sentinel to ask first next time.
    next_sentinel: AtomicUsize,
}

impl std::fmt::Debug for SentinelMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelMaster")
            .field("backend", &self.backend)
            .field("master_name", &self.master_name)
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

/// Why the master could not be found or reached at start-up: the address concerned and
/// the error.
pub(crate) type ConnectFailure = (String, RedisError);

fn error(what: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::Io, what, detail))
}

impl SentinelMaster {
    /// Resolve the master through `sentinels`, connect to it, and start following it.
    pub async fn connect(
        backend: Arc<str>,
        master_name: &str,
        sentinels: &[RedisUrl],
        connect_timeout: Duration,
        response_timeout: Duration,
        sync_timeout: Option<Duration>,
    ) -> Result<Arc<SentinelMaster>, ConnectFailure> {
        let all = sentinels
            .iter()
            .map(|u| u.address.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let mut list = Vec::with_capacity(sentinels.len());
        for url in sentinels {
            let client = client(&url.url).map_err(|e| (url.address.clone(), e))?;
            list.push(Sentinel {
                address: url.address.clone(),
                client,
            });
        }
        let first = sentinels.first().ok_or_else(|| {
            (
                all.clone(),
                error("no sentinels", "the configuration lists none".into()),
            )
        })?;
        let master_info = first
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| (first.address.clone(), e))?
            .set_tcp_settings(tcp_settings());
        let (epoch, _) = watch::channel(0);
        let mut resolver = Resolver {
            master_name,
            sentinels: &list,
            connect_timeout,
            response_timeout,
            start: 0,
        };
        let (address, host, port) = resolver.resolve().await.map_err(|e| (all.clone(), e))?;
        let current = open_master(
            &master_info,
            &address,
            host,
            port,
            connect_timeout,
            response_timeout,
            sync_timeout,
        )
        .await
        .map_err(|e| (address.clone(), e))?;
        let master = Arc::new(SentinelMaster {
            backend,
            master_name: master_name.to_owned(),
            sentinels: list,
            master_info,
            connect_timeout,
            response_timeout,
            sync_timeout,
            current: RwLock::new(Arc::new(current)),
            epoch,
            suspect: Arc::new(Notify::new()),
            next_sentinel: AtomicUsize::new(0),
        });
        tracing::info!(backend = %master.backend, master = %master.master_name, address = %address,
            "distlock: sentinel master resolved");
        tokio::spawn(monitor(
            Arc::downgrade(&master),
            master.suspect.clone(),
            master.epoch.subscribe(),
        ));
        Ok(master)
    }

    fn current(&self) -> Arc<Current> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The connection to the current master.
    pub fn connection(&self) -> ConnectionManager {
        self.current().conn.clone()
    }

    /// The connection acquisitions that WAIT for replicas use (the main one without
    /// `sync_replicas`).
    pub fn sync_connection(&self) -> ConnectionManager {
        let c = self.current();
        c.sync_conn.clone().unwrap_or_else(|| c.conn.clone())
    }

    /// The current master's `host:port`.
    pub fn address(&self) -> String {
        self.current().address.clone()
    }

    /// A command failed in a way a failover would explain: resolve the master again soon.
    pub fn suspect(&self) {
        self.suspect.notify_one();
    }

    /// Changes (a counter) every time the master is switched.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// The subscriber's connector: a pub/sub connection to the current master.
    pub fn pubsub_connector(self: &Arc<Self>) -> crate::subscriber::Connector {
        let weak = Arc::downgrade(self);
        Arc::new(move || {
            let weak = weak.clone();
            Box::pin(async move {
                let Some(master) = weak.upgrade() else {
                    return Err(error("backend dropped", String::new()));
                };
                let address = master.address();
                let client = master.client_for(&address)?;
                drop(master);
                client.get_async_pubsub().await
            })
        })
    }

    fn client_for(&self, address: &str) -> redis::RedisResult<redis::Client> {
        let (host, port) = split_address(address)?;
        redis::Client::open(
            self.master_info
                .clone()
                .set_addr(ConnectionAddr::Tcp(host, port)),
        )
    }

    fn resolver(&self) -> Resolver<'_> {
        Resolver {
            master_name: &self.master_name,
            sentinels: &self.sentinels,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            start: self.next_sentinel.load(Ordering::Relaxed),
        }
    }

    /// Ask the sentinels where the master is; switch to it when it moved. Returns false
    /// when that could not be done (to be tried again soon).
    async fn refresh(&self, why: &str) -> bool {
        match self.resolver().resolve().await {
            Ok((address, host, port)) => {
                if address == self.address() {
                    return true;
                }
                self.switch_to(address, host, port, why).await
            }
            Err(e) => {
                tracing::warn!(backend = %self.backend, master = %self.master_name, error = %e,
                    "distlock: cannot resolve the sentinel master");
                false
            }
        }
    }

    /// Connect to the master at `address` and use it from now on. Returns false when it
    /// could not be reached or is not a master.
    async fn switch_to(&self, address: String, host: String, port: u16, why: &str) -> bool {
        let old = self.address();
        if address == old {
            return true;
        }
        match open_master(
            &self.master_info,
            &address,
            host,
            port,
            self.connect_timeout,
            self.response_timeout,
            self.sync_timeout,
        )
        .await
        {
            Ok(current) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(current);
                self.epoch.send_modify(|n| *n += 1);
                tracing::warn!(backend = %self.backend, master = %self.master_name, from = %old,
                    to = %address, reason = why, "distlock: sentinel master switched");
                true
            }
            Err(e) => {
                tracing::warn!(backend = %self.backend, master = %self.master_name, address = %address,
                    error = %e, "distlock: cannot switch to the new sentinel master yet");
                false
            }
        }
    }

    /// A pub/sub connection to some sentinel, subscribed to `+switch-master`.
    async fn subscribe_switches(&self) -> redis::RedisResult<redis::aio::PubSubStream> {
        let n = self.sentinels.len();
        let start = self.next_sentinel.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let s = &self.sentinels[(start + i) % n];
            let attempt = async {
                let mut p = s.client.get_async_pubsub().await?;
                p.subscribe("+switch-master").await?;
                Ok::<_, RedisError>(p)
            };
            match tokio::time::timeout(self.connect_timeout, attempt).await {
                Ok(Ok(p)) => {
                    self.next_sentinel.store((start + i) % n, Ordering::Relaxed);
                    tracing::debug!(backend = %self.backend, sentinel = %s.address,
                        "distlock: listening for +switch-master");
                    return Ok(p.into_on_message());
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(timed_out("connect timed out", self.connect_timeout)),
            }
        }
        Err(last.unwrap_or_else(|| error("no sentinels", String::new())))
    }
}

/// Asks the sentinels, in turn, where the master is.
struct Resolver<'a> {
    master_name: &'a str,
    sentinels: &'a [Sentinel],
    connect_timeout: Duration,
    response_timeout: Duration,
    start: usize,
}

impl Resolver<'_> {
    /// `(host:port, host, port)` of the master, from the first sentinel that knows it.
    async fn resolve(&mut self) -> redis::RedisResult<(String, String, u16)> {
        let n = self.sentinels.len();
        let mut failures = Vec::new();
        for i in 0..n {
            let s = &self.sentinels[(self.start + i) % n];
            match self.ask(s).await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => failures.push(format!(
                    "{}: knows no master named {:?}",
                    s.address, self.master_name
                )),
                Err(e) => failures.push(format!("{}: {e}", s.address)),
            }
        }
        Err(error("no sentinel named the master", failures.join("; ")))
    }

    async fn ask(&self, s: &Sentinel) -> redis::RedisResult<Option<(String, String, u16)>> {
        let mut conn = tokio::time::timeout(
            self.connect_timeout,
            s.client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| timed_out("connect timed out", self.connect_timeout))??;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(self.master_name);
        let reply: Option<(String, u16)> =
            tokio::time::timeout(self.response_timeout, cmd.query_async(&mut conn))
                .await
                .map_err(|_| timed_out("SENTINEL timed out", self.response_timeout))??;
        Ok(reply.map(|(host, port)| (join_address(&host, port), host, port)))
    }
}

fn join_address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn split_address(address: &str) -> redis::RedisResult<(String, u16)> {
    let bad = || error("bad master address", address.to_owned());
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_owned(), port))
}

/// Connect to the master at `address`, check that it is one, and load the scripts.
async fn open_master(
    info: &ConnectionInfo,
    address: &str,
    host: String,
    port: u16,
    connect_timeout: Duration,
    response_timeout: Duration,
    sync_timeout: Option<Duration>,
) -> redis::RedisResult<Current> {
    let client = redis::Client::open(info.clone().set_addr(ConnectionAddr::Tcp(host, port)))?;
    let conn = open_manager(
        client.clone(),
        connect_timeout,
        manager_config(connect_timeout, response_timeout),
    )
    .await?;
    let role: Value = tokio::time::timeout(
        response_timeout,
        redis::cmd("ROLE").query_async(&mut conn.clone()),
    )
    .await
    .map_err(|_| timed_out("ROLE timed out", response_timeout))??;
    let is_master = matches!(&role, Value::Array(items)
        if matches!(items.first(), Some(Value::BulkString(b)) if b == b"master"));
    if !is_master {
        return Err(error(
            "not a master",
            format!("the sentinels name {address}, but it answers ROLE with {role:?}"),
        ));
    }
    load_scripts(&conn, response_timeout).await?;
    let sync_conn = match sync_timeout {
        Some(t) => Some(
            open_manager(
                client,
                connect_timeout,
                manager_config(connect_timeout, response_timeout + t),
            )
            .await?,
        ),
        None => None,
    };
    Ok(Current {
        address: address.to_owned(),
        conn,
        sync_conn,
    })
}

/// `<name> <old-ip> <old-port> <new-ip> <new-port>` for our master: the new address.
fn parse_switch(payload: &str, master_name: &str) -> Option<(String, String, u16)> {
    let parts: Vec<&str> = payload.split_whitespace().collect();
    match parts.as_slice() {
        [name, _, _, host, port] if *name == master_name => {
            let port: u16 = port.parse().ok()?;
            Some((join_address(host, port), (*host).to_owned(), port))
        }
        _ => None,
    }
}

/// The monitor task: follows the master until the backend is dropped (`alive` closes).
async fn monitor(
    weak: Weak<SentinelMaster>,
    suspect: Arc<Notify>,
    mut alive: watch::Receiver<u64>,
) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let Some(master) = weak.upgrade() else { return };
        let subscribed = master.subscribe_switches().await;
        // A switch may have been announced while nobody listened.
        let ok = master
            .refresh("checking after (re)connecting to a sentinel")
            .await;
        let mut last_refresh = Instant::now();
        let mut next_check = last_refresh + if ok { CHECK_EVERY } else { RETRY_SWITCH };
        let name = master.master_name.clone();
        let backend = master.backend.clone();
        drop(master);
        let mut stream = match subscribed {
            Ok(s) => {
                backoff = Duration::from_millis(20);
                Some(s)
            }
            Err(e) => {
                tracing::warn!(backend = %backend, error = %e,
                    "distlock: cannot subscribe to +switch-master on any sentinel; retrying");
                None
            }
        };
        let retry_sentinels = Instant::now() + backoff;
        let listening = stream.is_some();
        loop {
            let next_message = async {
                match stream.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = next_message => {
                    let Some(msg) = msg else {
                        tracing::warn!(backend = %backend, "distlock: sentinel connection lost; moving to the next one");
                        break;
                    };
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if let Some((address, host, port)) = parse_switch(&payload, &name) {
                        let Some(master) = weak.upgrade() else { return };
                        let ok = master.switch_to(address, host, port, "+switch-master").await;
                        last_refresh = Instant::now();
                        next_check = last_refresh + if ok { CHECK_EVERY } else { RETRY_SWITCH };
                    }
                }
                _ = suspect.notified() => {
                    tokio::time::sleep_until(last_refresh + SUSPECT_SPACING).await;
                    let Some(master) = weak.upgrade() else { return };
                    let ok = master.refresh("a command failed").await;
                    last_refresh = Instant::now();
                    next_check = last_refresh + if ok { CHECK_EVERY } else { RETRY_SWITCH };
                }
                _ = tokio::time::sleep_until(next_check) => {
                    let Some(master) = weak.upgrade() else { return };
                    let ok = master.refresh("periodic check").await;
                    last_refresh = Instant::now();
                    next_check = last_refresh + if ok { CHECK_EVERY } else { RETRY_SWITCH };
                }
                _ = tokio::time::sleep_until(retry_sentinels), if !listening => {
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    break;
                }
                changed = alive.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
        // Next time, start with another sentinel.
        if let Some(master) = weak.upgrade() {
            let n = master.sentinels.len().max(1);
            let i = master.next_sentinel.load(Ordering::Relaxed);
            master.next_sentinel.store((i + 1) % n, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_switch_master() {
        assert_eq!(
            parse_switch("mymaster 127.0.0.1 6379 127.0.0.1 6380", "mymaster"),
            Some(("127.0.0.1:6380".into(), "127.0.0.1".into(), 6380))
        );
        assert_eq!(
            parse_switch("other 127.0.0.1 6379 127.0.0.1 6380", "mymaster"),
            None
        );
        assert_eq!(parse_switch("mymaster 1 2 3", "mymaster"), None);
        assert_eq!(
            parse_switch("m ::1 6379 ::1 6380", "m"),
            Some(("[::1]:6380".into(), "::1".into(), 6380))
        );
    }

    #[test]
    fn addresses_round_trip() {
        assert_eq!(
            split_address("127.0.0.1:17100").unwrap(),
            ("127.0.0.1".into(), 17100)
        );
        assert_eq!(split_address("[::1]:6380").unwrap(), ("::1".into(), 6380));
        assert!(split_address("nope").is_err());
        assert!(split_address("h:99999").is_err());
    }
}
