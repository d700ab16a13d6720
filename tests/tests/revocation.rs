//! Revocation heard at once: a holder whose lock is force-released from another process (a
//! second registry stands in for it), or whose server restarted empty, finds its lease lost
//! within a generous bound (1 s), not at its next renewal, which is 10 s away (an auto lease
//! with `watchdog_timeout = "30s"` is renewed every 10 s). On single, cluster, sentinel,
//! redlock (reentrant: the only kind it offers) and memory, for every kind: reentrant,
//! fair, read, write, semaphore and leader; in Redisson's format on a single server, also
//! when Redisson itself force-unlocks (it publishes only on the lock's channel). A private
//! server (ports 17450-17499) is shut down with `SHUTDOWN NOSAVE` and started again: the
//! holder hears of it within about a second of the reconnect.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{quoted, unique};
use distlock::{Lease, LockError, LockKind, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::{
    cluster_urls, redlock_urls, resp_command, sentinel_master_name, sentinel_urls, single_url,
    RedisProcess, RespValue,
};

/// The holders' `watchdog_timeout`: renewals every 10 s, far beyond [`HEARD_WITHIN`].
const WATCHDOG: &str = "30s";
/// How soon the holder must hear of a forced release (a generous protocol bound: a message
/// and one renewal round trip).
const HEARD_WITHIN: Duration = Duration::from_secs(1);

fn backend(mode: &str) -> String {
    match mode {
        "single" => format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        "cluster" => format!("mode = \"cluster\"\nnodes = [{}]", quoted(&cluster_urls())),
        "sentinel" => format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            sentinel_master_name(),
            quoted(&sentinel_urls())
        ),
        "redlock" => format!(
            "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
            quoted(&redlock_urls())
        ),
        "memory" => "mode = \"memory\"".to_owned(),
        "redisson" => format!(
            "mode = \"single\"\nurl = \"{}\"\nprotocol = \"redisson\"",
            single_url()
        ),
        other => panic!("no mode {other}"),
    }
}

async fn registry_for(backend: &str) -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"{WATCHDOG}\"\nwait = \"5s\"\n[backends.main]\n{backend}\n"
    ))
    .await
    .unwrap_or_else(|e| panic!("connect {backend:?} (scripts/test.sh starts it): {e}"))
}

/// The holder's registry and the administrator's (another one: another process; on the
/// memory backend the same one, since its locks live in one process).
async fn registries(mode: &str) -> (Registry, Registry) {
    let holder = registry_for(&backend(mode)).await;
    let admin = if mode == "memory" {
        holder.clone()
    } else {
        registry_for(&backend(mode)).await
    };
    (holder, admin)
}

/// Awaits `force` (which must find the lock), then `lost` (the holder's `lost()`), which
/// must resolve with `LeaseLost` within [`HEARD_WITHIN`]; returns how long it took.
async fn heard<L, F>(what: &str, lost: L, force: F) -> Duration
where
    L: Future<Output = LockError>,
    F: Future<Output = Result<bool, LockError>>,
{
    let lost = std::pin::pin!(lost);
    let freed = force
        .await
        .unwrap_or_else(|e| panic!("{what}: force_unlock: {e}"));
    assert!(freed, "{what}: force_unlock found no lock");
    let start = Instant::now();
    let e = tokio::time::timeout(HEARD_WITHIN, lost)
        .await
        .unwrap_or_else(|_| {
            panic!("{what}: the holder did not hear of the forced release within {HEARD_WITHIN:?} (its next renewal is 10 s away)")
        });
    assert!(matches!(e, LockError::LeaseLost { .. }), "{what}: {e:?}");
    start.elapsed()
}

/// The kinds a mode offers here.
fn kinds(mode: &str) -> &'static [&'static str] {
    match mode {
        "redlock" => &["reentrant"],
        "redisson" => &["reentrant", "fair", "read", "write"],
        _ => &["reentrant", "fair", "read", "write", "semaphore", "leader"],
    }
}

fn lock_kind(kind: &str) -> LockKind {
    match kind {
        "reentrant" => LockKind::Reentrant,
        "fair" => LockKind::Fair,
        "read" => LockKind::Read,
        "write" => LockKind::Write,
        other => panic!("not a lock kind: {other}"),
    }
}

/// Hold a lock of `kind` in `holder`, force-release it from `admin`; the holder hears it.
async fn force_and_hear(mode: &str, kind: &str, holder: &Registry, admin: &Registry) -> Duration {
    let key = unique(&format!("revoke-{mode}-{kind}"));
    let what = format!("{mode}/{kind}");
    match kind {
        "semaphore" => {
            let g = holder
                .semaphore(key.as_str(), 2)
                .lease(Lease::Auto)
                .acquire(1)
                .await
                .unwrap_or_else(|e| panic!("{what}: acquire: {e}"));
            let took = heard(
                &what,
                g.lost(),
                admin.semaphore(key.as_str(), 2).force_unlock(),
            )
            .await;
            assert!(!g.is_held(), "{what}");
            took
        }
        "leader" => {
            let g = holder
                .leader(key.as_str())
                .campaign()
                .await
                .unwrap_or_else(|e| panic!("{what}: campaign: {e}"));
            let took = heard(
                &what,
                g.lost(),
                admin.lock(format!("leader:{key}")).force_unlock(),
            )
            .await;
            assert!(!g.is_leader(), "{what}");
            took
        }
        lock => {
            let k = lock_kind(lock);
            let g = holder
                .lock(key.as_str())
                .kind(k)
                .lease(Lease::Auto)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{what}: acquire: {e}"));
            let took = heard(
                &what,
                g.lost(),
                admin.lock(key.as_str()).kind(k).force_unlock(),
            )
            .await;
            assert!(!g.is_held(), "{what}");
            took
        }
    }
}

async fn every_kind_on(mode: &str) {
    let (holder, admin) = registries(mode).await;
    // A holder of another lock is not disturbed by the forced releases.
    let other = holder
        .lock(unique("revoke-bystander").as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("bystander");
    for kind in kinds(mode) {
        let took = force_and_hear(mode, kind, &holder, &admin).await;
        eprintln!("{mode}/{kind}: lost() resolved {took:?} after force_unlock returned");
    }
    assert!(other.is_held(), "{mode}: an unrelated lease stays held");
    other.release().await.expect("release the bystander");
}

#[tokio::test]
async fn forced_release_is_heard_at_once_on_single() {
    every_kind_on("single").await;
}

#[tokio::test]
async fn forced_release_is_heard_at_once_on_cluster() {
    every_kind_on("cluster").await;
}

#[tokio::test]
async fn forced_release_is_heard_at_once_on_sentinel() {
    every_kind_on("sentinel").await;
}

#[tokio::test]
async fn forced_release_is_heard_at_once_on_redlock() {
    every_kind_on("redlock").await;
}

#[tokio::test]
async fn forced_release_is_heard_at_once_on_memory() {
    every_kind_on("memory").await;
}

#[tokio::test]
async fn forced_release_is_heard_at_once_in_redissons_format() {
    every_kind_on("redisson").await;
}

/// A fixed lease is heard of at once too, and the check does not lengthen it.
#[tokio::test]
async fn a_fixed_lease_is_heard_of_at_once_and_not_extended() {
    let (holder, admin) = registries("single").await;
    let key = unique("revoke-fixed");
    let g = holder
        .lock(key.as_str())
        .lease(Lease::Fixed(Duration::from_secs(20)))
        .acquire()
        .await
        .expect("acquire");
    heard(
        "single/fixed",
        g.lost(),
        admin.lock(key.as_str()).force_unlock(),
    )
    .await;
    // A new holder of the same name is not disturbed by the revocation of the old one.
    let again = holder
        .lock(key.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire again");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(again.is_held());
    again.release().await.expect("release");
}

/// Redisson's own `forceUnlock` (`RedissonLock.forceUnlockAsync`: DEL, then PUBLISH of
/// UNLOCK_MESSAGE on the lock's channel) is heard by a distlock holder in Redisson's format.
#[tokio::test]
async fn redissons_own_force_unlock_is_heard_at_once() {
    let holder = registry_for(&backend("redisson")).await;
    let name = unique("revoke-redisson-java");
    let g = holder
        .lock(name.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire");
    let addr = distlock_tests::addr_of(&single_url());
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let force = async {
        // The channel is subscribed in the background just after the acquisition.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let script = "if redis.call('del', KEYS[1]) == 1 then redis.call('publish', KEYS[2], ARGV[1]); return 1 end return 0";
        match resp_command(&addr, &["EVAL", script, "2", &name, &channel, "0"]) {
            Ok(RespValue::Integer(n)) => Ok(n == 1),
            other => panic!("EVAL: {other:?}"),
        }
    };
    heard("redisson/forceUnlock by Redisson", g.lost(), force).await;
}

/// `n` ports of 17450..17499 nothing listens on (nor on +10000).
fn private_ports(n: usize) -> Vec<u16> {
    // Handed out to a test of this process already (a port is free until its server
    // binds it: two tests running at once must not both be given it).
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let ports: Vec<u16> = (17450..17500)
        .filter(|p| {
            !given.contains(p)
                && std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok()
                && std::net::TcpListener::bind(("127.0.0.1", *p + 10000)).is_ok()
        })
        .take(n)
        .collect();
    assert_eq!(ports.len(), n, "{n} free ports in 17450..17499");
    given.extend(&ports);
    ports
}

fn private_port() -> u16 {
    private_ports(1)[0]
}

/// A sentinel failover to a replica that lacks the lock (deleted on the replica alone,
/// made writable for it) is heard at once: `+switch-master` moves the subscriber to the new
/// master, whose new run id makes every lease be checked, seconds before the next renewal.
#[tokio::test]
async fn a_sentinel_failover_to_a_master_without_the_lock_is_heard_of_at_once() {
    let ports = private_ports(5);
    let mut group =
        distlock_tests::topology::PrivateSentinel::start_on_ports(ports[0], ports[1], &ports[2..]);
    let reg = registry_for(&format!(
        "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
        distlock_tests::topology::PrivateSentinel::MASTER_NAME,
        quoted(&group.sentinel_urls())
    ))
    .await;
    let key = unique("revoke-failover");
    let acquired = Instant::now();
    let g = reg
        .lock(key.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire");
    let replica = group.replica.addr();
    let hash = format!("lock:{{{key}}}");
    distlock_tests::wait_until(
        Duration::from_secs(5),
        "the lock to reach the replica",
        || {
            matches!(
                resp_command(&replica, &["EXISTS", &hash]),
                Ok(RespValue::Integer(1))
            )
        },
    );
    let local = |args: &[&str]| resp_command(&replica, args).expect("replica command");
    assert!(local(&["CONFIG", "SET", "replica-read-only", "no"]).is_ok());
    assert_eq!(local(&["DEL", &hash]), RespValue::Integer(1));
    let old = group.master.addr();
    group.master.stop();
    let lost = std::pin::pin!(g.lost());
    // The renewal is 10 s after the acquisition; the failover takes about 3 s.
    let e = tokio::time::timeout(Duration::from_secs(8), lost)
        .await
        .unwrap_or_else(|_| {
            panic!("the holder did not hear of the failover to a master without its lock within 8 s (master now {:?})", group.master_addr())
        });
    let took = acquired.elapsed();
    assert!(matches!(e, LockError::LeaseLost { .. }), "{e:?}");
    assert_ne!(group.master_addr().as_deref(), Some(old.as_str()));
    assert!(
        took < Duration::from_secs(9),
        "heard {took:?} after the acquisition: that is the renewal, not the failover"
    );
    eprintln!("sentinel failover: lost() resolved {took:?} after the acquisition (the renewal is at 10 s)");
}

/// A server shut down without saving and started again (empty) is noticed on the
/// subscriber's reconnect (a new run id): the holder hears of it within about a second of
/// the server answering again, not at its next renewal.
#[tokio::test]
async fn a_restarted_server_is_heard_of_on_the_reconnect() {
    restart_is_heard("restart", false).await;
}

/// The same when the subscriber's first connection comes only after the restart (on a busy
/// machine it may not have connected when the lock was taken and the server went down):
/// the run id to compare with is the one the server had when the backend connected, not
/// the one the subscriber first saw.
#[tokio::test]
async fn a_restart_before_the_subscriber_first_connected_is_heard_of() {
    restart_is_heard("restart before the first subscription", true).await;
}

/// Hold a lock on a private server, restart it empty: the holder hears within 3 s of the
/// server answering again. `early`: a proxy between them lets the command connection (the
/// first) through and refuses every other until the server is back.
async fn restart_is_heard(what: &str, early: bool) {
    let mut server = RedisProcess::start_on_port(private_port(), &[]);
    let proxy = early.then(|| {
        let p = Proxy::start(&server.addr());
        p.set_refuse_from(Some(2));
        p
    });
    let url = proxy.as_ref().map_or_else(|| server.url(), Proxy::url);
    let reg = registry_for(&format!("mode = \"single\"\nurl = \"{url}\"")).await;
    let g = reg
        .lock(unique("revoke-restart").as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire");
    if let Some(p) = &proxy {
        assert_eq!(
            p.open_connections(),
            1,
            "only the command connection is open: the subscriber has not connected"
        );
    }
    let lost = std::pin::pin!(g.lost());
    server.stop();
    server.restart();
    if let Some(p) = &proxy {
        p.set_refuse_from(None);
    }
    let back = Instant::now();
    // The subscriber reconnects after its backoff (at most 1 s), then asks the run id.
    let bound = Duration::from_secs(3);
    let e = tokio::time::timeout(bound, lost).await.unwrap_or_else(|_| {
        panic!("{what}: the holder did not hear of the restart within {bound:?} of the server answering again (its next renewal is 10 s away)")
    });
    assert!(matches!(e, LockError::LeaseLost { .. }), "{what}: {e:?}");
    eprintln!(
        "{what}: lost() resolved {:?} after the server answered again",
        back.elapsed()
    );
    assert!(!g.is_held(), "{what}");
}

/// A forced release published while the holder's subscriber is not listening is heard on
/// its connection, not at the next renewal: before its first connection (a proxy lets the
/// command connection through and refuses every other), and while it reconnects (the proxy
/// resets every connection and refuses new ones meanwhile). The administrator reaches the
/// server directly.
#[tokio::test]
async fn a_forced_release_sent_while_the_subscriber_was_not_listening_is_heard_on_its_connection() {
    let proxy = Proxy::start(&distlock_tests::addr_of(&single_url()));
    proxy.set_refuse_from(Some(2));
    let holder = registry_for(&format!("mode = \"single\"\nurl = \"{}\"", proxy.url())).await;
    let admin = registry_for(&backend("single")).await;
    let bound = Duration::from_secs(3);
    for round in ["before the first connection", "while reconnecting"] {
        let key = unique("revoke-unheard");
        let g = holder
            .lock(key.as_str())
            .lease(Lease::Auto)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{round}: acquire: {e}"));
        if round == "while reconnecting" {
            // Every connection is reset and every new one refused until the release is
            // published: the subscriber cannot be listening then, whichever of the
            // holder's connections tries first.
            proxy.set_refuse_from(Some(proxy.accepted() + 1));
            proxy.reset_all();
        }
        assert!(
            admin
                .lock(key.as_str())
                .force_unlock()
                .await
                .expect("force_unlock"),
            "{round}: force_unlock found the lock"
        );
        let lost = std::pin::pin!(g.lost());
        proxy.set_refuse_from(None);
        let allowed = Instant::now();
        let e = tokio::time::timeout(bound, lost).await.unwrap_or_else(|_| {
            panic!("{round}: the holder did not hear of the forced release within {bound:?} of its subscriber being let through (its next renewal is 10 s away)")
        });
        assert!(matches!(e, LockError::LeaseLost { .. }), "{round}: {e:?}");
        eprintln!(
            "{round}: lost() resolved {:?} after the subscriber was let through",
            allowed.elapsed()
        );
        assert!(!g.is_held(), "{round}");
    }
}
