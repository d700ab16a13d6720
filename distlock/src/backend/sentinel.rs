//! `mode = "sentinel"`: the master of a group monitored by Redis Sentinel, followed across
//! failovers.
//!
//! The master is resolved with `SENTINEL get-master-addr-by-name`, asking each sentinel in
//! turn, and checked with `ROLE` before it is used. A monitor task then keeps it current:
//!
//! - it subscribes to `+switch-master` on a sentinel (moving to the next one when that
//!   connection drops, after a pause that doubles on every reconnect until a subscription
//!   stays up for [`subscriber::STABLE_AFTER`]) and switches as soon as a failover is
//!   announced;
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
//! too, and so is TLS: with `rediss://` sentinels the master is reached over TLS as well
//! (`tls-replication yes`), with the backend's CA bundle and client certificate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use distlock_config::RedisUrl;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{ConnectionInfo, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::capabilities::{Announce, Facts};
use super::conn::Settings;
use super::sentinel_resolve::{parse_switch, split_address, Resolver, Sentinel};
use super::server::Server;
use super::subscriber::{self, Connector};
use super::topology::{ScriptReplies, Topology};
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::{bounded, DriverError};
use crate::protocol::keys::{FenceScope, LockKeys};
use crate::protocol::{Attempt, Call, HandedOff, Publish, Released};
use crate::rt::backoff::Backoff;
use crate::rt::hub::Hub;
use crate::terms::owner::{Hold, OwnerId};

/// How often the master is resolved again without any other reason.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// After a failed switch, how soon to try again.
const RETRY_SWITCH: Duration = Duration::from_millis(200);
/// Resolutions asked for by failing commands are at least this far apart.
const SUSPECT_SPACING: Duration = Duration::from_millis(100);

/// `WAIT` for replicas after acquiring (`sync_replicas`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncReplicas {
    /// Replica acknowledgements needed.
    pub(crate) needed: u32,
    /// How long to wait for them.
    pub(crate) timeout: Duration,
}

/// The master in use now.
struct Current {
    /// Every command but acquire-with-WAIT goes here.
    server: Server,
    /// With `sync_replicas`: acquire + WAIT go here (WAIT blocks its connection).
    sync_conn: Option<ConnectionManager>,
    /// The run id the server at this address answered with when it was taken for the
    /// master (or last confirmed as it, after a restart): `None` when `INFO` failed or
    /// was refused. See [`SentinelMaster::believe_absent`].
    run_id: std::sync::Mutex<Option<String>>,
}

impl Current {
    fn run_id(&self) -> Option<String> {
        self.run_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn confirm_run_id(&self, id: String) {
        *self.run_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    }
}

/// The master of one Sentinel-monitored group, kept current by a monitor task.
pub(crate) struct SentinelMaster {
    backend: Arc<str>,
    master_name: String,
    sentinels: Vec<Sentinel>,
    /// Credentials and database for the master (from the first sentinel URL).
    master_info: ConnectionInfo,
    settings: Settings,
    /// `Some` when acquisitions WAIT for replicas.
    sync: Option<SyncReplicas>,
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

/// The credentials for the master (and the replicas it may be replaced by) where they
/// differ from the sentinels' (`master_username`, `master_password`); `None`: the first
/// sentinel URL's.
#[derive(Clone, Copy, Default)]
pub(crate) struct MasterAuth<'a> {
    pub(crate) username: Option<&'a str>,
    pub(crate) password: Option<&'a str>,
}

/// Resolve the master of `master_name` through `sentinels`, connect to it, start following
/// it, and start the wake-up subscriber on it.
pub(crate) async fn connect(
    backend: &Arc<str>,
    master_name: &str,
    sentinels: &[RedisUrl],
    auth: MasterAuth<'_>,
    sync: Option<SyncReplicas>,
    settings: &Settings,
) -> Result<(Arc<SentinelMaster>, Arc<Hub>), DriverError> {
    let master = SentinelMaster::connect(
        backend.clone(),
        master_name,
        sentinels,
        auth,
        sync,
        settings,
    )
    .await?;
    let (hub, requests) = Hub::subscribed(settings.revocation.clone());
    subscriber::spawn(
        backend.clone(),
        &hub,
        requests,
        master.pubsub_connector(),
        settings.connect_timeout,
        Some(master.changes()),
        Some(master.refresher().await),
    );
    Ok((master, hub))
}

impl SentinelMaster {
    async fn connect(
        backend: Arc<str>,
        master_name: &str,
        sentinels: &[RedisUrl],
        auth: MasterAuth<'_>,
        sync: Option<SyncReplicas>,
        settings: &Settings,
    ) -> Result<Arc<SentinelMaster>, DriverError> {
        let all = super::conn::addresses(sentinels);
        let mut list = Vec::with_capacity(sentinels.len());
        for url in sentinels {
            list.push(Sentinel {
                address: url.address.clone(),
                client: settings.client_for(url)?,
            });
        }
        let first = sentinels.first().ok_or_else(|| DriverError::NoMaster {
            addresses: all.clone(),
            detail: "the configuration lists no sentinels".into(),
        })?;
        let master_info = settings.info(first)?;
        let mut redis = master_info.redis_settings().clone();
        if let Some(user) = auth.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = auth.password {
            redis = redis.set_password(password);
        }
        let master_info = master_info.set_redis_settings(redis);
        let (epoch, _) = watch::channel(0);
        let mut resolver = Resolver {
            master_name,
            sentinels: &list,
            settings: settings.clone(),
            start: 0,
        };
        let (address, host, port) = resolver.resolve().await?;
        let current = open_master(settings, &master_info, &address, host, port, sync).await?;
        let master = Arc::new(SentinelMaster {
            backend,
            master_name: master_name.to_owned(),
            sentinels: list,
            master_info,
            settings: settings.clone(),
            sync,
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

    /// The current master's `host:port`.
    pub(crate) fn address(&self) -> String {
        self.current().server.address().to_owned()
    }

    /// A command failed: when a failover would explain it, resolve the master again soon.
    fn checked<T>(&self, r: Result<T, DriverError>) -> Result<T, DriverError> {
        if let Err(e) = &r {
            if e.suggests_failover() {
                self.suspect.notify_one();
            }
        }
        r
    }

    /// One acquire attempt on the current master; with `sync_replicas`, also WAIT for the
    /// replicas, and undo the acquisition when too few acknowledge it.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> Result<Attempt, DriverError> {
        let current = self.current();
        let (Some(sync), Some(conn)) = (self.sync, &current.sync_conn) else {
            return self.checked(current.server.acquire(keys, hold, lease, wait).await);
        };
        let call = crate::protocol::acquire(keys, hold, lease, wait, Publish::Plain);
        let (attempt, acked) = self.checked(
            current
                .server
                .acquire_replicated(conn, &call, sync.needed, sync.timeout)
                .await,
        )?;
        if !matches!(attempt, Attempt::Acquired { .. }) || acked >= sync.needed {
            return Ok(attempt);
        }
        // Held on the master alone: a failover now would lose it. Undo it.
        let released = match self.release(keys, hold).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(key = %keys.user, error = %e,
                    "distlock: could not release a lock the replicas did not acknowledge; it expires with its lease");
                false
            }
        };
        Err(DriverError::NotReplicated {
            address: current.server.address().to_owned(),
            acked,
            needed: sync.needed,
            timeout: sync.timeout,
            released,
        })
    }

    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        hold: Hold,
    ) -> Result<Released, DriverError> {
        let current = self.current();
        let released = self.checked(current.server.release(keys, hold).await)?;
        if released == Released::NotHeld {
            self.believe_absent(&current).await?;
        }
        Ok(released)
    }

    /// An answer of the current master that finds nothing held (a release, a hand-off, a
    /// cancel or a `force_unlock` with nothing to do) is believed unless the server
    /// restarted since it was taken for the master while the sentinels fail it over: a
    /// master killed and started again at its address comes back empty, and answers "not
    /// held" until the sentinels announce the replica they promoted, which still holds the
    /// lock. Then the answer is an error the caller treats as transient (a release or
    /// cancel is sent again, and reaches the new master once the switch is announced). A
    /// restarted server the sentinels keep as the master, no failover under way, is
    /// confirmed as it.
    ///
    /// One `INFO` on such an answer only (not on the fast path), and the sentinels asked
    /// only when the run id changed.
    async fn believe_absent(&self, current: &Current) -> Result<(), DriverError> {
        let Some(then) = current.run_id() else {
            return Ok(());
        };
        let Some(now) = self.checked(current.server.run_id().await)? else {
            return Ok(());
        };
        if now == then {
            return Ok(());
        }
        let address = current.server.address();
        if self.resolver().failover_under_way(address).await {
            self.suspect.notify_one();
            return Err(DriverError::NoMaster {
                addresses: super::sentinel_resolve::addresses(&self.sentinels),
                detail: format!(
                    "the master {address} restarted (run id {then} is now {now}) while the \
                     sentinels fail it over: its answer is not the new master's"
                ),
            });
        }
        tracing::info!(backend = %self.backend, master = %self.master_name, address,
            "distlock: the sentinel master restarted and stays the master");
        current.confirm_run_id(now);
        Ok(())
    }

    /// A hand-off on the current master; `None` with `sync_replicas` (a grant must WAIT
    /// for the replicas there, which the hand-off does not).
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&str>,
    ) -> Result<Option<crate::protocol::HandedOff>, DriverError> {
        if self.sync.is_some() {
            return Ok(None);
        }
        let current = self.current();
        let handed = self.checked(current.server.handoff(keys, hold, to, lease, holder).await)?;
        if handed == Some(HandedOff::Released(Released::NotHeld)) {
            self.believe_absent(&current).await?;
        }
        Ok(handed)
    }

    /// Whether this master hands off (not with `sync_replicas`).
    pub(crate) fn hands_off(&self) -> bool {
        self.sync.is_none()
    }

    pub(crate) async fn cancel(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
    ) -> Result<bool, DriverError> {
        let current = self.current();
        let cancelled = self.checked(current.server.cancel(keys, owner).await)?;
        if !cancelled {
            self.believe_absent(&current).await?;
        }
        Ok(cancelled)
    }

    pub(crate) async fn force_release(
        &self,
        keys: &LockKeys,
        to: &str,
    ) -> Result<bool, DriverError> {
        let current = self.current();
        let released = self.checked(current.server.force_release(keys, to).await)?;
        if !released {
            self.believe_absent(&current).await?;
        }
        Ok(released)
    }

    pub(crate) async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, DriverError>> {
        let results = self.current().server.renew_each(items, lease).await;
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if e.suggests_failover()))
        {
            self.suspect.notify_one();
        }
        results
    }

    /// Run one call on the current master.
    pub(crate) async fn run(&self, call: &Call) -> Result<redis::Value, DriverError> {
        self.checked(self.current().server.run(call, "script timed out").await)
    }

    /// The self-check of the current master.
    pub(crate) async fn probe(
        &self,
        probe: &crate::check::probe::Probe,
    ) -> Result<crate::check::report::ServerReport, DriverError> {
        self.checked(self.current().server.probe(probe).await)
    }

    /// SCAN the current master.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>, DriverError> {
        self.checked(self.current().server.scan(pattern, limit).await)
    }

    pub(crate) async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, DriverError> {
        self.checked(self.current().server.next_sequence(key, ttl).await)
    }

    /// Changes (a counter) every time the master is switched.
    fn changes(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// The subscriber's reconnect hook: refresh the current master's command connection.
    /// It answers whether the master changed (a new run id: a failover, or a restart)
    /// since now (the run id the master has now is recorded).
    async fn refresher(self: &Arc<Self>) -> super::subscriber::Reconnected {
        let weak = Arc::downgrade(self);
        let server = self.current().server.clone();
        let seen = Arc::new(super::subscriber::RunId::of(&server).await);
        Arc::new(move || {
            let server = weak.upgrade().map(|m| m.current().server.clone());
            let seen = seen.clone();
            Box::pin(async move {
                let Some(server) = server else { return false };
                let _ = super::subscriber::refresh_now(&server).await;
                seen.changed(server.run_id().await.ok().flatten())
            })
        })
    }

    /// The subscriber's connector: a pub/sub connection to the current master.
    fn pubsub_connector(self: &Arc<Self>) -> Connector {
        let weak = Arc::downgrade(self);
        Arc::new(move || {
            let weak = weak.clone();
            Box::pin(async move {
                let Some(master) = weak.upgrade() else {
                    return Err(DriverError::NotConnected {
                        address: "sentinel master (backend dropped)".into(),
                    });
                };
                let address = master.address();
                let client = master.client_for(&address)?;
                drop(master);
                client
                    .get_async_pubsub()
                    .await
                    .map_err(|e| DriverError::redis(&address, e))
            })
        })
    }

    fn client_for(&self, address: &str) -> Result<redis::Client, DriverError> {
        let (host, port) = split_address(address)?;
        self.settings.client(
            address,
            self.master_info
                .clone()
                .set_addr(self.settings.addr(host, port)),
        )
    }

    fn resolver(&self) -> Resolver<'_> {
        Resolver {
            master_name: &self.master_name,
            sentinels: &self.sentinels,
            settings: self.settings.clone(),
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
            &self.settings,
            &self.master_info,
            &address,
            host,
            port,
            self.sync,
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
    async fn subscribe_switches(&self) -> Result<redis::aio::PubSubStream, DriverError> {
        let n = self.sentinels.len();
        let start = self.next_sentinel.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let s = &self.sentinels[(start + i) % n];
            let attempt = async {
                let mut p = s.client.get_async_pubsub().await?;
                p.subscribe("+switch-master").await?;
                Ok(p)
            };
            match bounded(
                &s.address,
                "connect timed out",
                self.settings.connect_timeout,
                attempt,
            )
            .await
            {
                Ok(p) => {
                    self.next_sentinel.store((start + i) % n, Ordering::Relaxed);
                    tracing::debug!(backend = %self.backend, sentinel = %s.address,
                        "distlock: listening for +switch-master");
                    return Ok(p.into_on_message());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| DriverError::NoMaster {
            addresses: String::new(),
            detail: "no sentinels".into(),
        }))
    }
}

/// Connect to the master at `address` (loading the scripts) and check that it is one.
async fn open_master(
    settings: &Settings,
    info: &ConnectionInfo,
    address: &str,
    host: String,
    port: u16,
    sync: Option<SyncReplicas>,
) -> Result<Current, DriverError> {
    let client = settings.client(address, info.clone().set_addr(settings.addr(host, port)))?;
    let server = Server::connect(settings, address, client.clone(), true).await?;
    let role: Value = bounded(
        address,
        "ROLE timed out",
        settings.response_timeout,
        redis::cmd("ROLE").query_async(&mut server.connection()),
    )
    .await?;
    let is_master = matches!(&role, Value::Array(items)
        if matches!(items.first(), Some(Value::BulkString(b)) if b == b"master"));
    if !is_master {
        return Err(DriverError::NotMaster {
            address: address.to_owned(),
            role: format!("{role:?}"),
        });
    }
    let sync_conn = match sync {
        Some(s) => Some(settings.manager(address, &client, s.timeout).await?),
        None => None,
    };
    let run_id = server.run_id().await.ok().flatten();
    Ok(Current {
        server,
        sync_conn,
        run_id: std::sync::Mutex::new(run_id),
    })
}

/// The monitor task: follows the master until the backend is dropped (`alive` closes).
async fn monitor(
    weak: Weak<SentinelMaster>,
    suspect: Arc<Notify>,
    mut alive: watch::Receiver<u64>,
) {
    let mut backoff = Backoff::reconnect();
    // The pause before the next subscription, after one that ended: every reconnect backs
    // off, a clean close by the sentinel (`CLIENT KILL TYPE pubsub`) as much as an error;
    // a subscription that stayed up for `STABLE_AFTER` starts the pauses from the first.
    let mut pause_first = Duration::ZERO;
    loop {
        if !pause_first.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(pause_first) => {}
                changed = alive.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
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
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(backend = %backend, error = %e,
                    "distlock: cannot subscribe to +switch-master on any sentinel; retrying");
                None
            }
        };
        let listening = stream.is_some();
        let since = Instant::now();
        // Not listening: the pause is waited below, answering checks meanwhile.
        let retry_sentinels = since
            + if listening {
                Duration::ZERO
            } else {
                backoff.pause()
            };
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
                _ = tokio::time::sleep_until(retry_sentinels), if !listening => break,
                changed = alive.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
        pause_first = if listening {
            if since.elapsed() >= subscriber::STABLE_AFTER {
                backoff.reset();
            }
            backoff.pause()
        } else {
            Duration::ZERO
        };
        // Next time, start with another sentinel.
        if let Some(master) = weak.upgrade() {
            let n = master.sentinels.len().max(1);
            let i = master.next_sentinel.load(Ordering::Relaxed);
            master.next_sentinel.store((i + 1) % n, Ordering::Relaxed);
        }
    }
}

impl Topology for SentinelMaster {
    fn facts(&self) -> Facts {
        Facts {
            fence_scope: FenceScope::Server,
            hand_off: self.hands_off(),
            quorum: None,
            announce: Announce::Publish(Publish::Plain),
            cluster: false,
            reply_addresses: None,
        }
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>> {
        Box::pin(SentinelMaster::acquire(self, keys, hold, lease, wait))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>> {
        Box::pin(SentinelMaster::release(self, keys, hold))
    }

    fn hand_off<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>> {
        Box::pin(self.handoff(keys, hold, to, lease, holder))
    }

    fn cancel<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(SentinelMaster::cancel(self, keys, owner))
    }

    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>> {
        Box::pin(SentinelMaster::renew_each(self, items, lease))
    }

    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(SentinelMaster::force_release(self, keys, revocation))
    }

    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>> {
        Box::pin(SentinelMaster::next_sequence(self, key, ttl))
    }

    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>> {
        Some(Box::pin(SentinelMaster::scan(self, pattern, limit)))
    }

    fn probe<'a>(
        &'a self,
        probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>> {
        Some(Box::pin(async move {
            vec![SentinelMaster::probe(self, probe).await]
        }))
    }

    fn run_script<'a>(&'a self, call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>> {
        Some(Box::pin(async move { (vec![self.run(call).await], 1) }))
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
