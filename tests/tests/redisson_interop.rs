//! distlock's library with `protocol = "redisson"` against the Redisson client emulator
//! (`distlock_tests::redisson`, the commands a Redisson client issues) on the same names,
//! on real servers: mutual exclusion both ways, wake-ups both ways (PUBLISH on a single
//! server, SPUBLISH on a cluster), crashed holders freed after their lease, one fencing
//! token sequence, the lost-lease signal, and the combinations that must be refused.
//!
//! Every test starts its own servers (`RedisProcess`, `PrivateCluster`: ports 17400..17499)
//! and stops them when it ends: `scripts/test.sh -p distlock-tests --test redisson_interop`.

use std::io::BufRead;
use std::time::{Duration, Instant};

use distlock::{InitError, Lease, LockError, LockKind as Kind, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::redisson::{
    fair_queue_name, fair_timeout_name, generate_id, lock_channel, rwlock_channel, token_name,
    LockKind, Redisson, RedissonConfig,
};
use distlock_tests::topology::{keyslot, master_of_slot, PrivateCluster, PrivateSentinel};
use distlock_tests::{addr_of, encode_command, read_resp, resp_command, RedisProcess, RespValue};

/// Well past a wake-up by message, well short of the 30 s leases the holders use: a waiter
/// done within this was woken by a message, not by a lease running out.
const WOKEN: Duration = Duration::from_secs(3);
const LONG: Duration = Duration::from_secs(30);

fn unique(what: &str) -> String {
    format!("rsi-{what}-{}", &generate_id()[..12])
}

fn single_config(url: &str, watchdog: &str) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\nwait = \"0s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nprotocol = \"redisson\"\n"
    )
}

fn cluster_config(urls: &[String]) -> String {
    let nodes = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[defaults]\nwait = \"0s\"\n[backends.main]\nmode = \"cluster\"\nnodes = [{nodes}]\nprotocol = \"redisson\"\n"
    )
}

async fn single_registry(url: &str, watchdog: &str) -> Registry {
    Registry::from_str(&single_config(url, watchdog))
        .await
        .expect("connect to the private redis-server")
}

async fn emulator(url: &str, config: RedissonConfig) -> Redisson {
    Redisson::connect(url, config)
        .await
        .expect("connect the Redisson emulator")
}

fn cmd(addr: &str, args: &[&str]) -> RespValue {
    resp_command(addr, args).unwrap_or_else(|e| panic!("{args:?} on {addr}: {e}"))
}

fn int(addr: &str, args: &[&str]) -> i64 {
    let v = cmd(addr, args);
    v.as_int()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{args:?}: not a number: {v:?}"))
}

/// The fields of the lock hash `name` with their hold counts.
fn fields(addr: &str, name: &str) -> Vec<(String, i64)> {
    let v = cmd(addr, &["HGETALL", name]);
    let items = v.as_array().expect("HGETALL answers an array").to_vec();
    items
        .chunks(2)
        .map(|p| {
            (
                p[0].as_str().expect("field").to_string(),
                p[1].as_str().and_then(|s| s.parse().ok()).expect("count"),
            )
        })
        .collect()
}

/// Waits (bounded) until `n` connections subscribe to `channel` (`NUMSUB`, or with
/// `sharded` `SHARDNUMSUB` on the node serving it).
async fn wait_subscribers(addr: &str, channel: &str, n: i64, sharded: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    loop {
        let v = cmd(addr, &["PUBSUB", sub, channel]);
        let count = v
            .as_array()
            .and_then(|a| a.get(1))
            .and_then(RespValue::as_int)
            .unwrap_or(0);
        if count >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nobody subscribed to {channel} ({sub}) within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A sharded subscriber (what Redisson's SSUBSCRIBE is) on the node at `addr`.
fn ssubscribe(addr: &str, channel: &str) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::Write;
    let stream = std::net::TcpStream::connect(addr).expect("connect to the cluster node");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut w = stream.try_clone().expect("clone");
    w.write_all(&encode_command(&["SSUBSCRIBE", channel]))
        .expect("send SSUBSCRIBE");
    let mut r = std::io::BufReader::new(stream);
    match read_resp(&mut r).expect("SSUBSCRIBE reply") {
        RespValue::Array(_) => r,
        other => panic!("SSUBSCRIBE {channel} on {addr}: {other:?}"),
    }
}

/// The next message of a sharded subscriber: `(kind, channel, payload)`.
async fn next_message(
    mut sub: std::io::BufReader<std::net::TcpStream>,
) -> (String, String, String) {
    tokio::task::spawn_blocking(move || {
        let _ = sub.fill_buf();
        let msg = read_resp(&mut sub).expect("a message within 10 s");
        let parts = msg.as_array().expect("a push").to_vec();
        let text = |i: usize| parts[i].as_str().unwrap_or_default().to_string();
        (text(0), text(1), text(2))
    })
    .await
    .expect("reader")
}

// ------------------------------------------------------------------ single server

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_exclusion_wake_ups_and_reentrancy_both_ways() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    let r = emulator(&url, RedissonConfig::default()).await;
    let name = unique("x");
    let rl = r.lock(&name, LockKind::Plain);

    // distlock holds, in Redisson's format: the lock key is the name, one field
    // "<uuid>:<n>" with its count, the watchdog's lease.
    let guard = reg.lock(&name).lease(Lease::Auto).acquire().await.unwrap();
    let held = fields(&addr, &name);
    assert_eq!(held.len(), 1, "{held:?}");
    let (field, count) = &held[0];
    assert_eq!(*count, 1);
    let (uuid, n) = field.rsplit_once(':').expect("<uuid>:<n>");
    assert_eq!(uuid.len(), 36, "{field}");
    assert_ne!(uuid, r.id());
    assert!(n.parse::<i64>().unwrap() >= 0, "{field}");
    let pttl = int(&addr, &["PTTL", &name]);
    assert!(pttl > 25_000 && pttl <= 30_000, "{pttl}");

    // re-entry in the task counts on the same field; Redisson is refused throughout
    let nested = guard
        .scope(reg.lock(&name).acquire())
        .await
        .expect("re-entered");
    assert_eq!(nested.fencing_token(), guard.fencing_token());
    assert_eq!(fields(&addr, &name), vec![(field.clone(), 2)]);
    assert!(!rl.try_lock_now(1).await.unwrap());
    nested.release().await.unwrap();
    assert_eq!(fields(&addr, &name), vec![(field.clone(), 1)]);
    assert!(!rl.try_lock_now(1).await.unwrap());
    // another task of this process is another owner: refused too
    assert!(reg.lock(&name).try_acquire().await.unwrap().is_none());

    // a Redisson waiter is woken by distlock's release (PUBLISH 0 on its channel)
    let rl2 = r.lock(&name, LockKind::Plain);
    let waiter = tokio::spawn(async move { rl2.try_lock(1, Duration::from_secs(20), None).await });
    wait_subscribers(&addr, &lock_channel(&name), 1, false).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap(), "Redisson acquired");
    eprintln!(
        "single: Redisson waiter woken by distlock's release after {:?}",
        released.elapsed()
    );
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());

    // Redisson holds: distlock is refused, then woken by Redisson's unlock message
    assert!(reg.lock(&name).try_acquire().await.unwrap().is_none());
    let reg2 = reg.clone();
    let name2 = name.clone();
    let waiter = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    wait_subscribers(&addr, &lock_channel(&name), 1, false).await;
    let released = Instant::now();
    r.lock(&name, LockKind::Plain).unlock(1).await.unwrap();
    let (g, at) = waiter.await.unwrap();
    let g = g.expect("distlock acquired after Redisson's unlock");
    eprintln!(
        "single: distlock waiter woken by Redisson's unlock after {:?}",
        at - released
    );
    assert!(at.duration_since(released) < WOKEN, "{:?}", at - released);
    g.release().await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    // a second release finds nothing and says so
    let g = reg.lock(&name).acquire().await.unwrap();
    // force_unlock is Redisson's forceUnlock: DEL, and UNLOCK_MESSAGE to the waiters
    assert!(reg.lock(&name).force_unlock().await.unwrap());
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    match g.release().await {
        Err(LockError::NotHeld { .. }) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }

    // a nested acquisition only re-enters: with the outer hold gone it fails, LeaseLost,
    // and re-creates nothing
    let g = reg.lock(&name).acquire().await.unwrap();
    int(&addr, &["DEL", &name]);
    match g.scope(reg.lock(&name).acquire()).await {
        Err(LockError::LeaseLost { .. }) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(int(&addr, &["EXISTS", &name]), 0, "nothing re-created");
    assert!(!g.is_held(), "the outer guard heard of it");
    drop(g);
    r.crash();
    int(&addr, &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_fencing_tokens_are_one_sequence() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    let r = emulator(&url, RedissonConfig::default()).await;
    let name = unique("fence");
    let fr = r.lock(&name, LockKind::Fenced);
    let t1 = fr
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap()
        .expect("Redisson acquired");
    assert!(reg.lock(&name).try_acquire().await.unwrap().is_none());
    fr.unlock(1).await.unwrap();
    let g = reg.lock(&name).acquire().await.unwrap();
    assert_eq!(
        g.fencing_token() as i64,
        t1 + 1,
        "the next token of the one counter"
    );
    assert_eq!(int(&addr, &["GET", &token_name(&name)]), t1 + 1);
    assert_eq!(
        fr.try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
            .await
            .unwrap(),
        None
    );
    g.release().await.unwrap();
    let t3 = fr
        .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
        .await
        .unwrap()
        .expect("Redisson acquired");
    assert_eq!(t3, t1 + 2);
    fr.unlock(1).await.unwrap();
    let g = reg.lock(&name).acquire().await.unwrap();
    assert!(g.fencing_token() as i64 > t3);
    g.release().await.unwrap();
    r.crash();
    int(&addr, &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_crashed_holders_free_after_their_lease() {
    let server = RedisProcess::start();
    let url = server.url();
    let reg = single_registry(&url, "30s").await;
    let name = unique("crash");

    // a crashed Redisson holder (watchdog lease 600 ms, renewals stopped)
    let r = emulator(
        &url,
        RedissonConfig {
            watchdog_timeout: Duration::from_millis(600),
            ..RedissonConfig::default()
        },
    )
    .await;
    assert!(r
        .lock(&name, LockKind::Plain)
        .try_lock_now(1)
        .await
        .unwrap());
    r.crash();
    let crashed = Instant::now();
    let g = reg
        .lock(&name)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquired after the crashed holder's lease");
    assert!(crashed.elapsed() < WOKEN, "{:?}", crashed.elapsed());

    // a crashed distlock holder: a fixed lease of 600 ms, never released nor renewed
    g.release().await.unwrap();
    let g = reg
        .lock(&name)
        .lease(Lease::Fixed(Duration::from_millis(600)))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(g);
    let taken = Instant::now();
    let r2 = emulator(&url, RedissonConfig::default()).await;
    let rl = r2.lock(&name, LockKind::Plain);
    assert!(rl
        .try_lock(1, Duration::from_secs(10), Some(LONG))
        .await
        .unwrap());
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "not before the lease ends: {waited:?}"
    );
    assert!(waited < WOKEN, "{waited:?}");
    rl.unlock(1).await.unwrap();
    int(&server.addr(), &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_watchdog_renews_and_signals_a_lost_lease() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    // auto leases of 900 ms, renewed every 300 ms
    let reg = single_registry(&url, "900ms").await;
    let name = unique("lost");
    let g = reg.lock(&name).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(g.is_held(), "renewed past its lease");
    let pttl = int(&addr, &["PTTL", &name]);
    assert!(pttl > 0 && pttl <= 900, "{pttl}");
    // an operator deletes it (Redisson's forceUnlock): the holder hears of it
    let r = emulator(&url, RedissonConfig::default()).await;
    int(&addr, &["DEL", &name]);
    let deleted = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost() within 5 s");
    assert!(matches!(lost, LockError::LeaseLost { .. }), "{lost:?}");
    eprintln!(
        "single: lost() {:?} after the lock was deleted (renewal every 300 ms)",
        deleted.elapsed()
    );
    assert!(deleted.elapsed() < Duration::from_secs(2));
    assert!(!g.is_held());
    // the renewal never re-created it, and Redisson can take it
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    let rl = r.lock(&name, LockKind::Plain);
    assert!(rl.try_lock_now(1).await.unwrap());
    rl.unlock(1).await.unwrap();
    drop(g);
    r.crash();
    int(&addr, &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsupported_combinations_are_refused_by_name() {
    let server = RedisProcess::start();
    let url = server.url();
    let reg = single_registry(&url, "30s").await;
    match reg.inspect("x", None).await {
        Err(LockError::Unsupported {
            kind: distlock::Feature::Inspect,
            format: distlock::config::Protocol::Redisson,
            ..
        }) => {}
        other => panic!("inspect: expected Unsupported, got {other:?}"),
    }
    match reg.lock("a{b").acquire().await {
        Err(LockError::InvalidKey { reason, .. }) => assert!(reason.contains("tag"), "{reason}"),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    for (mode, extra) in [
        ("redlock", format!("nodes = [\"{}\"]", url)),
        ("multi", format!("nodes = [\"{}\"]", url)),
        ("single", format!("url = \"{}\"\nholder_info = true", url)),
    ] {
        let text = format!("[backends.q]\nmode = \"{mode}\"\n{extra}\nprotocol = \"redisson\"\n");
        match Registry::from_str(&text).await {
            Err(e @ InitError::Unsupported { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("`q`") && msg.contains("redisson"), "{msg}");
            }
            Err(other) => panic!("{mode}: expected Unsupported, got {other}"),
            Ok(_) => panic!("{mode}: accepted"),
        }
    }
}

// ------------------------------------------------------------------ cluster

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_exclusion_and_sharded_wake_ups_both_ways_in_every_slot() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let urls = cluster.urls();
    let addrs: Vec<String> = urls.iter().map(|u| addr_of(u)).collect();
    let reg = Registry::from_str(&cluster_config(&urls))
        .await
        .expect("connect to the private cluster");
    // names whose slots are on different masters
    let mut names: Vec<(String, String)> = Vec::new();
    for i in 0..200 {
        let name = unique(&format!("c{i}"));
        let master = master_of_slot(&addrs, keyslot(&addrs, &name)).expect("slot owner");
        if names.iter().all(|(_, m)| *m != master) {
            names.push((name, master));
        }
        if names.len() == 3 {
            break;
        }
    }
    assert!(names.len() >= 2, "names on different masters: {names:?}");
    for (name, master) in &names {
        let channel = lock_channel(name);
        let r = emulator(
            &format!("redis://{master}"),
            RedissonConfig {
                sharded: true,
                ..RedissonConfig::default()
            },
        )
        .await;
        let rl = r.lock(name, LockKind::Plain);
        let fr = r.lock(name, LockKind::Fenced);

        // distlock holds: Redisson is refused; a sharded subscriber (Redisson's SSUBSCRIBE)
        // receives distlock's release as SPUBLISH 0, and Redisson then takes the lock
        let g = reg.lock(name).acquire().await.unwrap();
        assert_eq!(fields(master, name).len(), 1);
        assert!(!rl.try_lock_now(1).await.unwrap());
        let sub = ssubscribe(master, &channel);
        let released = Instant::now();
        let t_distlock = g.fencing_token();
        g.release().await.unwrap();
        let (kind, on, payload) = next_message(sub).await;
        assert_eq!(
            (kind.as_str(), on.as_str(), payload.as_str()),
            ("smessage", channel.as_str(), "0")
        );
        eprintln!(
            "cluster {master}: Redisson's SSUBSCRIBE got smessage 0 {:?} after distlock's release",
            released.elapsed()
        );
        assert!(released.elapsed() < WOKEN);
        let t = fr
            .try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
            .await
            .unwrap()
            .expect("Redisson acquired");
        assert_eq!(t as u64, t_distlock + 1, "one token sequence");

        // Redisson holds: distlock waits (SSUBSCRIBEd) and is woken by Redisson's SPUBLISH
        let reg2 = reg.clone();
        let name2 = name.clone();
        let waiter = tokio::spawn(async move {
            let g = reg2
                .lock(&name2)
                .wait(Duration::from_secs(20))
                .acquire()
                .await;
            (g, Instant::now())
        });
        wait_subscribers(master, &channel, 1, true).await;
        let released = Instant::now();
        fr.unlock(1).await.unwrap();
        let (g, at) = waiter.await.unwrap();
        let g = g.expect("distlock acquired after Redisson's unlock");
        eprintln!(
            "cluster {master}: distlock waiter woken by Redisson's SPUBLISH after {:?}",
            at - released
        );
        assert!(at.duration_since(released) < WOKEN, "{:?}", at - released);
        assert_eq!(g.fencing_token(), t as u64 + 1);
        g.release().await.unwrap();
        assert_eq!(int(master, &["EXISTS", name]), 0);
        int(master, &["DEL", &token_name(name)]);
        r.crash();
    }
}

/// The latch key names of `name` still on the server.
fn latches(addr: &str, name: &str) -> usize {
    let pattern = format!("redisson_unlock_latch:{{{name}}}:*");
    match cmd(addr, &["KEYS", &pattern]) {
        RespValue::Array(a) => a.len(),
        other => panic!("KEYS: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_lost_replies_neither_double_count_nor_leak() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let proxy = distlock_tests::proxy::Proxy::start(&addr);
    let reg = single_registry(&proxy.url(), "30s").await;
    let name = unique("lost-reply");
    // the registry's own traffic first (it subscribes the revocation channel when it
    // connects), so that the one reply lost below is the test's, not the subscriber's
    wait_subscribers(&addr, "lock:__revoked", 1, false).await;

    // an acquire whose reply is lost: its field is released, the retry takes a new one,
    // and exactly one field with one hold is left
    proxy.reset_after_replies(1);
    let g = reg
        .lock(&name)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquired on the retry");
    assert_eq!(proxy.pending_reply_resets(), 0, "the fault happened");
    let held = fields(&addr, &name);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].1, 1, "{held:?}");

    // a nested release whose reply is lost is sent again; the unlock latch answers it,
    // so the outer hold's count is not taken twice
    let nested = g.scope(reg.lock(&name).acquire()).await.unwrap();
    assert_eq!(fields(&addr, &name)[0].1, 2);
    proxy.reset_after_replies(1);
    let _ = nested.release().await;
    assert_eq!(proxy.pending_reply_resets(), 0, "the fault happened");
    let deadline = Instant::now() + Duration::from_secs(10);
    while latches(&addr, &name) > 0 {
        assert!(Instant::now() < deadline, "the latch was never deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        fields(&addr, &name),
        vec![(held[0].0.clone(), 1)],
        "one hold left"
    );
    assert!(g.is_held());
    g.release().await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    assert_eq!(latches(&addr, &name), 0);
}

// ------------------------------------------------------------------ sentinel

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_master_speaks_the_same_format() {
    let group = tokio::task::spawn_blocking(|| PrivateSentinel::start(3))
        .await
        .expect("start the private sentinel group");
    let sentinels = group
        .sentinel_urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let reg = Registry::from_str(&format!(
        "[defaults]\nwait = \"0s\"\n[backends.main]\nmode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{sentinels}]\nprotocol = \"redisson\"\n",
        PrivateSentinel::MASTER_NAME
    ))
    .await
    .expect("connect through the private sentinels");
    let addr = group.master.addr();
    let r = emulator(&group.master.url(), RedissonConfig::default()).await;
    let name = unique("sentinel");
    let fr = r.lock(&name, LockKind::Fenced);

    let g = reg.lock(&name).acquire().await.unwrap();
    assert_eq!(
        fields(&addr, &name).len(),
        1,
        "on the master, under the name"
    );
    assert_eq!(
        fr.try_lock_and_get_token(1, Duration::ZERO, Some(LONG))
            .await
            .unwrap(),
        None
    );
    let fr2 = r.lock(&name, LockKind::Fenced);
    let waiter = tokio::spawn(async move {
        fr2.try_lock_and_get_token(1, Duration::from_secs(20), Some(LONG))
            .await
    });
    wait_subscribers(&addr, &lock_channel(&name), 1, false).await;
    let released = Instant::now();
    let token = g.fencing_token();
    g.release().await.unwrap();
    let t = waiter.await.unwrap().unwrap().expect("Redisson acquired");
    assert!(released.elapsed() < WOKEN, "{:?}", released.elapsed());
    assert_eq!(t as u64, token + 1);
    fr.unlock(1).await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);

    // fair: Redisson holds, a distlock fair waiter is woken on its own channel
    let rf = r.lock(&name, LockKind::Fair);
    assert!(rf.try_lock_now(2).await.unwrap());
    let reg2 = reg.clone();
    let name2 = name.clone();
    let w = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Fair)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    queue_len(&addr, &name, 1).await;
    let field = queue(&addr, &name)[0].clone();
    wait_subscribers(&addr, &format!("{}:{field}", lock_channel(&name)), 1, false).await;
    let released = Instant::now();
    rf.unlock(2).await.unwrap();
    let (g, at) = w.await.unwrap();
    let g = g.expect("distlock's fair waiter acquired");
    assert!(at - released < FAST, "{:?}", at - released);
    g.release().await.unwrap();

    // read-write: distlock writes, a Redisson reader waits and is woken by its release
    let gw = reg.lock(&name).kind(Kind::Write).acquire().await.unwrap();
    let rr = r.lock(&name, LockKind::Read);
    let w = tokio::spawn(async move {
        let ok = rr.try_lock(3, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    wait_subscribers(&addr, &rwlock_channel(&name), 1, false).await;
    let released = Instant::now();
    gw.release().await.unwrap();
    let (ok, at) = w.await.unwrap();
    assert!(ok.unwrap(), "Redisson's reader acquired");
    assert!(at - released < FAST, "{:?}", at - released);
    let gr = reg
        .lock(&name)
        .kind(Kind::Read)
        .try_acquire()
        .await
        .unwrap()
        .expect("readers share");
    gr.release().await.unwrap();
    r.lock(&name, LockKind::Read).unlock(3).await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    int(&addr, &["DEL", &token_name(&name)]);
    r.crash();
}

// ------------------------------------------------------------------ fair and read-write

/// A release by one side wakes the other's waiter within this: far below the 30 s leases
/// (and the waiters' ttl hints), so only a message can explain it.
const FAST: Duration = Duration::from_millis(500);

fn llen(addr: &str, key: &str) -> i64 {
    int(addr, &["LLEN", key])
}

/// The queue of the fair lock `name`, head first.
fn queue(addr: &str, name: &str) -> Vec<String> {
    match cmd(addr, &["LRANGE", &fair_queue_name(name), "0", "-1"]) {
        RespValue::Array(a) => a
            .iter()
            .map(|v| v.as_str().expect("field").to_string())
            .collect(),
        other => panic!("LRANGE: {other:?}"),
    }
}

/// Waits (bounded) until the fair queue of `name` is `n` long.
async fn queue_len(addr: &str, name: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while llen(addr, &fair_queue_name(name)) != n {
        assert!(
            Instant::now() < deadline,
            "queue of {name} never {n} long: {:?}",
            queue(addr, name)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn hget(addr: &str, key: &str, field: &str) -> Option<String> {
    cmd(addr, &["HGET", key, field])
        .as_str()
        .map(str::to_string)
}

fn subscribers(addr: &str, channel: &str, sharded: bool) -> i64 {
    let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    cmd(addr, &["PUBSUB", sub, channel])
        .as_array()
        .and_then(|a| a.get(1))
        .and_then(RespValue::as_int)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_fair_lock_fifo_wake_ups_and_cancellation_across_the_two() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    let r = emulator(&url, RedissonConfig::default()).await;
    let name = unique("fair");
    let fair = |reg: &Registry| reg.lock(&name).kind(Kind::Fair);

    // distlock holds the fair lock in Redisson's format: the hash under the name
    let g = fair(&reg).acquire().await.unwrap();
    let held = fields(&addr, &name);
    assert_eq!(held.len(), 1, "{held:?}");
    let rl = r.lock(&name, LockKind::Fair);
    assert!(!rl.try_lock_now(1).await.unwrap(), "Redisson refused");
    assert!(fair(&reg).try_acquire().await.unwrap().is_none());
    assert_eq!(
        llen(&addr, &fair_queue_name(&name)),
        0,
        "try-once never queues"
    );

    // queue: Redisson thread 1, then a distlock task, then Redisson thread 2
    let a = r.lock(&name, LockKind::Fair);
    let wa = tokio::spawn(async move {
        let ok = a.try_lock(1, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    queue_len(&addr, &name, 1).await;
    wait_subscribers(&addr, &rl.channel(1), 1, false).await;
    let reg2 = reg.clone();
    let name2 = name.clone();
    let wb = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Fair)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    queue_len(&addr, &name, 2).await;
    let b_field = queue(&addr, &name)[1].clone();
    assert!(!b_field.starts_with(r.id()), "{b_field}");
    let b_channel = format!("{}:{b_field}", lock_channel(&name));
    wait_subscribers(&addr, &b_channel, 1, false).await;
    let c = r.lock(&name, LockKind::Fair);
    let wc = tokio::spawn(async move {
        let ok = c.try_lock(2, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    queue_len(&addr, &name, 3).await;
    wait_subscribers(&addr, &rl.channel(2), 1, false).await;
    assert_eq!(queue(&addr, &name)[0], rl.owner(1));
    assert_eq!(queue(&addr, &name)[2], rl.owner(2));

    // distlock releases: Redisson's head (thread 1) wakes on its own channel
    let released = Instant::now();
    g.release().await.unwrap();
    let (ok, at) = wa.await.unwrap();
    assert!(ok.unwrap(), "Redisson's head acquired");
    eprintln!(
        "single fair: Redisson head woken by distlock's release after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    // Redisson releases: the distlock task, next in line, wakes (not thread 2)
    let released = Instant::now();
    r.lock(&name, LockKind::Fair).unlock(1).await.unwrap();
    let (gb, at) = wb.await.unwrap();
    let gb = gb.expect("distlock, second in line, acquired");
    eprintln!(
        "single fair: distlock waiter woken by Redisson's unlock after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    assert_eq!(fields(&addr, &name), vec![(b_field.clone(), 1)]);
    assert_eq!(
        queue(&addr, &name),
        vec![rl.owner(2)],
        "thread 2 still waits"
    );
    // re-entry in the task counts on the same field
    let nested = gb.scope(fair(&reg).acquire()).await.expect("re-entered");
    assert_eq!(fields(&addr, &name), vec![(b_field.clone(), 2)]);
    nested.release().await.unwrap();
    let released = Instant::now();
    gb.release().await.unwrap();
    let (ok, at) = wc.await.unwrap();
    assert!(ok.unwrap(), "Redisson thread 2 acquired last");
    assert!(at - released < FAST, "{:?}", at - released);

    // a distlock waiter that gives up leaves the queue, and so does a dropped one
    let t = fair(&reg).wait(Duration::from_millis(300)).acquire().await;
    assert!(matches!(t, Err(LockError::Timeout { .. })), "{t:?}");
    queue_len(&addr, &name, 0).await;
    let dropped = tokio::spawn({
        let reg = reg.clone();
        let name = name.clone();
        async move {
            reg.lock(&name)
                .kind(Kind::Fair)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    queue_len(&addr, &name, 1).await;
    dropped.abort();
    queue_len(&addr, &name, 0).await;
    assert_eq!(
        int(&addr, &["ZCARD", &fair_timeout_name(&name)]),
        0,
        "no deadline left behind"
    );
    r.lock(&name, LockKind::Fair).unlock(2).await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);

    // force_unlock of a fair lock (RedissonFairLock.forceUnlock): deleted, the queue's
    // head (a Redisson waiter) woken on its own channel
    let g = fair(&reg).acquire().await.unwrap();
    let d = r.lock(&name, LockKind::Fair);
    let wd = tokio::spawn(async move {
        let ok = d.try_lock(7, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    queue_len(&addr, &name, 1).await;
    wait_subscribers(&addr, &rl.channel(7), 1, false).await;
    let forced = Instant::now();
    assert!(fair(&reg).force_unlock().await.unwrap());
    let (ok, at) = wd.await.unwrap();
    assert!(ok.unwrap(), "the head acquired after the forced unlock");
    assert!(at - forced < FAST, "{:?}", at - forced);
    match g.release().await {
        Err(LockError::NotHeld { .. }) => {}
        other => panic!("the old holder's release: expected NotHeld, got {other:?}"),
    }
    r.lock(&name, LockKind::Fair).unlock(7).await.unwrap();
    r.crash();
    int(&addr, &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_read_write_sharing_exclusion_and_wake_ups_across_the_two() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    let r = emulator(&url, RedissonConfig::default()).await;
    let name = unique("rw");
    let channel = rwlock_channel(&name);
    let lock = |kind| reg.lock(&name).kind(kind);

    // read-read sharing across the two, in one hash with mode = read
    let er = r.lock(&name, LockKind::Read);
    assert!(er.try_lock_now(1).await.unwrap());
    let dr = lock(Kind::Read).acquire().await.expect("readers share");
    assert_eq!(hget(&addr, &name, "mode").as_deref(), Some("read"));
    let reader_fields: Vec<String> = match cmd(&addr, &["HKEYS", &name]) {
        RespValue::Array(a) => a.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reader_fields.len(),
        3,
        "mode and two readers: {reader_fields:?}"
    );
    let mine = reader_fields
        .iter()
        .find(|f| *f != "mode" && !f.starts_with(r.id()))
        .expect("distlock's reader field")
        .clone();
    let timeout_key = format!("{{{name}}}:{mine}:rwlock_timeout:1");
    let pttl = int(&addr, &["PTTL", &timeout_key]);
    assert!(
        pttl > 25_000,
        "the per-hold timeout key {timeout_key}: {pttl}"
    );

    // read-write exclusion: neither side's writer gets in
    assert!(lock(Kind::Write).try_acquire().await.unwrap().is_none());
    assert!(!r
        .lock(&name, LockKind::Write)
        .try_lock_now(2)
        .await
        .unwrap());

    // a distlock writer waits; the last reader's release (Redisson's) wakes it. distlock's
    // subscriber already listens on the channel (its reader holds the lock, and a holder
    // listens there for Redisson's forceUnlock), so the waiter adds no subscription.
    let reg2 = reg.clone();
    let name2 = name.clone();
    let ww = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Write)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    wait_subscribers(&addr, &channel, 1, false).await;
    dr.release().await.unwrap();
    let released = Instant::now();
    er.unlock(1).await.unwrap();
    let (gw, at) = ww.await.unwrap();
    let gw = gw.expect("distlock's writer acquired");
    eprintln!(
        "single rw: distlock writer woken by Redisson's read unlock after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    assert_eq!(hget(&addr, &name, "mode").as_deref(), Some("write"));

    // distlock writes: Redisson readers and writers refused; a Redisson reader waits and
    // is woken by distlock's write release (message 1)
    assert!(!r.lock(&name, LockKind::Read).try_lock_now(3).await.unwrap());
    assert!(!r
        .lock(&name, LockKind::Write)
        .try_lock_now(3)
        .await
        .unwrap());
    assert!(lock(Kind::Read).try_acquire().await.unwrap().is_none());
    let before = subscribers(&addr, &channel, false);
    let er2 = r.lock(&name, LockKind::Read);
    let wr = tokio::spawn(async move {
        let ok = er2.try_lock(4, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    wait_subscribers(&addr, &channel, before + 1, false).await;
    let released = Instant::now();
    gw.release().await.unwrap();
    let (ok, at) = wr.await.unwrap();
    assert!(ok.unwrap(), "Redisson's reader acquired");
    eprintln!(
        "single rw: Redisson reader woken by distlock's write release after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);

    // Redisson writes: a distlock reader waits, woken by Redisson's write unlock (on a
    // fresh name: distlock's subscriber keeps an idle channel a while, and the test needs
    // to see the waiter's subscription arrive)
    r.lock(&name, LockKind::Read).unlock(4).await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    int(&addr, &["DEL", &token_name(&name)]);
    let name = unique("rw-b");
    let channel = rwlock_channel(&name);
    let ew = r.lock(&name, LockKind::Write);
    assert!(ew.try_lock_now(5).await.unwrap());
    let before = subscribers(&addr, &channel, false);
    let reg2 = reg.clone();
    let name2 = name.clone();
    let wr = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Read)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    wait_subscribers(&addr, &channel, before + 1, false).await;
    let released = Instant::now();
    ew.unlock(5).await.unwrap();
    let (g, at) = wr.await.unwrap();
    let g = g.expect("distlock's reader acquired");
    eprintln!(
        "single rw: distlock reader woken by Redisson's write unlock after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    g.release().await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0);
    r.crash();
    int(&addr, &["DEL", &token_name(&name)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_crashed_fair_and_rw_holders_free_after_their_lease() {
    let server = RedisProcess::start();
    let url = server.url();
    let reg = single_registry(&url, "30s").await;
    let short = RedissonConfig {
        watchdog_timeout: Duration::from_millis(600),
        ..RedissonConfig::default()
    };
    for (kind, theirs) in [
        (Kind::Fair, LockKind::Fair),
        (Kind::Write, LockKind::Write),
        (Kind::Read, LockKind::Write),
        (Kind::Write, LockKind::Read),
    ] {
        let name = unique("crash-kinds");
        // a crashed Redisson holder (watchdog lease 600 ms, renewals stopped)
        let r = emulator(&url, short.clone()).await;
        assert!(r.lock(&name, theirs).try_lock_now(1).await.unwrap());
        r.crash();
        let crashed = Instant::now();
        let g = reg
            .lock(&name)
            .kind(kind)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{kind:?} after a crashed {theirs:?}: {e}"));
        assert!(
            crashed.elapsed() < WOKEN,
            "{kind:?} after a crashed {theirs:?}: {:?}",
            crashed.elapsed()
        );
        g.release().await.unwrap();

        // a crashed distlock holder: a fixed lease of 600 ms, never released nor renewed
        let g = reg
            .lock(&name)
            .kind(kind)
            .lease(Lease::Fixed(Duration::from_millis(600)))
            .acquire()
            .await
            .unwrap();
        std::mem::forget(g);
        let taken = Instant::now();
        let r2 = emulator(&url, RedissonConfig::default()).await;
        let rl = r2.lock(&name, theirs);
        assert!(rl
            .try_lock(1, Duration::from_secs(10), Some(LONG))
            .await
            .unwrap());
        let waited = taken.elapsed();
        assert!(
            waited >= Duration::from_millis(300),
            "{kind:?}/{theirs:?}: not before the lease ends: {waited:?}"
        );
        assert!(waited < WOKEN, "{waited:?}");
        rl.unlock(1).await.unwrap();
        int(&server.addr(), &["DEL", &token_name(&name)]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_fair_and_rw_wake_ups_both_ways() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let urls = cluster.urls();
    let addrs: Vec<String> = urls.iter().map(|u| addr_of(u)).collect();
    let reg = Registry::from_str(&cluster_config(&urls))
        .await
        .expect("connect to the private cluster");
    let name = unique("cfair");
    let master = master_of_slot(&addrs, keyslot(&addrs, &name)).expect("slot owner");
    let r = emulator(
        &format!("redis://{master}"),
        RedissonConfig {
            sharded: true,
            ..RedissonConfig::default()
        },
    )
    .await;

    // fair: distlock holds; a Redisson waiter queues (its first attempt) and its own
    // channel gets distlock's release as SPUBLISH 0; it then takes the lock at the head
    let g = reg.lock(&name).kind(Kind::Fair).acquire().await.unwrap();
    let rl = r.lock(&name, LockKind::Fair);
    let _ = rl.try_lock(1, Duration::from_secs(20), Some(LONG)).await;
    assert_eq!(queue(&master, &name), vec![rl.owner(1)], "queued");
    let sub = ssubscribe(&master, &rl.channel(1));
    let released = Instant::now();
    g.release().await.unwrap();
    let (kind, on, payload) = next_message(sub).await;
    assert_eq!(
        (kind.as_str(), on.as_str(), payload.as_str()),
        ("smessage", rl.channel(1).as_str(), "0")
    );
    eprintln!(
        "cluster fair: the Redisson head's SSUBSCRIBE got smessage 0 {:?} after distlock's release",
        released.elapsed()
    );
    assert!(rl.try_lock_now(1).await.unwrap(), "the head takes it");
    // Redisson holds: a distlock fair waiter queues and is woken on its own channel
    let reg2 = reg.clone();
    let name2 = name.clone();
    let w = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Fair)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    queue_len(&master, &name, 1).await;
    let field = queue(&master, &name)[0].clone();
    wait_subscribers(
        &master,
        &format!("{}:{field}", lock_channel(&name)),
        1,
        true,
    )
    .await;
    let released = Instant::now();
    rl.unlock(1).await.unwrap();
    let (g, at) = w.await.unwrap();
    let g = g.expect("distlock's fair waiter acquired");
    eprintln!(
        "cluster fair: distlock waiter woken by Redisson's SPUBLISH after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    g.release().await.unwrap();
    assert_eq!(int(&master, &["EXISTS", &name]), 0);

    // rw: distlock writes; Redisson's SSUBSCRIBE gets its release as smessage 1
    let channel = rwlock_channel(&name);
    let gw = reg.lock(&name).kind(Kind::Write).acquire().await.unwrap();
    assert!(!r.lock(&name, LockKind::Read).try_lock_now(2).await.unwrap());
    let sub = ssubscribe(&master, &channel);
    gw.release().await.unwrap();
    let (kind, on, payload) = next_message(sub).await;
    assert_eq!(
        (kind.as_str(), on.as_str(), payload.as_str()),
        ("smessage", channel.as_str(), "1")
    );
    // Redisson writes: a distlock reader waits and is woken by Redisson's SPUBLISH
    let ew = r.lock(&name, LockKind::Write);
    assert!(ew.try_lock_now(3).await.unwrap());
    let reg2 = reg.clone();
    let name2 = name.clone();
    // (the test's own sharded subscriber above is gone first)
    let deadline = Instant::now() + Duration::from_secs(10);
    while subscribers(&master, &channel, true) > 0 {
        assert!(
            Instant::now() < deadline,
            "the test's subscriber never left"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = 0;
    let w = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .kind(Kind::Read)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    wait_subscribers(&master, &channel, before + 1, true).await;
    let released = Instant::now();
    ew.unlock(3).await.unwrap();
    let (g, at) = w.await.unwrap();
    let g = g.expect("distlock's reader acquired");
    eprintln!(
        "cluster rw: distlock reader woken by Redisson's SPUBLISH after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    assert!(
        r.lock(&name, LockKind::Read).try_lock_now(4).await.unwrap(),
        "readers share"
    );
    assert!(!r
        .lock(&name, LockKind::Write)
        .try_lock_now(5)
        .await
        .unwrap());
    g.release().await.unwrap();
    r.lock(&name, LockKind::Read).unlock(4).await.unwrap();
    assert_eq!(int(&master, &["EXISTS", &name]), 0);
    int(&master, &["DEL", &token_name(&name)]);
    r.crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_sharded_subscription_mode_off_uses_plain_pub_sub_both_ways() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let urls = cluster.urls();
    let addrs: Vec<String> = urls.iter().map(|u| addr_of(u)).collect();
    let text = format!(
        "{}sharded_subscription_mode = \"off\"\n",
        cluster_config(&urls)
    );
    let reg = Registry::from_str(&text)
        .await
        .expect("connect to the private cluster");
    let name = unique("plain");
    let channel = lock_channel(&name);
    let master = master_of_slot(&addrs, keyslot(&addrs, &name)).expect("slot owner");
    // a Redisson client with shardedSubscriptionMode = OFF: PUBLISH / SUBSCRIBE
    let r = emulator(&format!("redis://{master}"), RedissonConfig::default()).await;
    let rl = r.lock(&name, LockKind::Plain);

    // distlock releases with PUBLISH: the Redisson waiter (plain SUBSCRIBE) wakes
    let g = reg.lock(&name).acquire().await.unwrap();
    let rl2 = r.lock(&name, LockKind::Plain);
    let waiter = tokio::spawn(async move {
        let ok = rl2.try_lock(1, Duration::from_secs(20), Some(LONG)).await;
        (ok, Instant::now())
    });
    wait_subscribers(&master, &channel, 1, false).await;
    let released = Instant::now();
    g.release().await.unwrap();
    let (ok, at) = waiter.await.unwrap();
    assert!(ok.unwrap(), "Redisson acquired");
    eprintln!(
        "cluster off: Redisson's SUBSCRIBE woken by distlock's PUBLISH after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);

    // Redisson releases with PUBLISH: distlock's plain subscriber wakes its waiter
    let reg2 = reg.clone();
    let name2 = name.clone();
    let w = tokio::spawn(async move {
        let g = reg2
            .lock(&name2)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (g, Instant::now())
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while addrs
        .iter()
        .map(|a| subscribers(a, &channel, false))
        .sum::<i64>()
        < 1
    {
        assert!(Instant::now() < deadline, "distlock never SUBSCRIBEd");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        subscribers(&master, &channel, true),
        0,
        "no sharded subscription with off"
    );
    let released = Instant::now();
    rl.unlock(1).await.unwrap();
    let (g, at) = w.await.unwrap();
    let g = g.expect("distlock acquired");
    eprintln!(
        "cluster off: distlock woken by Redisson's PUBLISH after {:?}",
        at - released
    );
    assert!(at - released < FAST, "{:?}", at - released);
    g.release().await.unwrap();
    assert_eq!(int(&master, &["EXISTS", &name]), 0);
    int(&master, &["DEL", &token_name(&name)]);
    r.crash();
}

/// A distlock holder in another process, `lock-worker hold-redisson`: started now, its
/// stdout read until `HELD` (bounded by the worker's own 60 s wait).
fn spawn_holder(url: &str, name: &str, kind: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_lock-worker"))
        .args(["hold-redisson", url, name, "1s", kind])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn lock-worker")
}

/// Waits for the worker's `HELD` line; the instant it was read.
async fn held(child: &mut std::process::Child) -> Instant {
    let out = child.stdout.take().expect("stdout");
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("read the worker's stdout");
        assert!(line.starts_with("HELD"), "worker said {line:?}");
        Instant::now()
    })
    .await
    .expect("reader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_across_processes_exclusion_wake_ups_and_a_killed_holder() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    for (kind, theirs) in [
        ("reentrant", LockKind::Plain),
        ("fair", LockKind::Fair),
        ("write", LockKind::Read),
        ("read", LockKind::Write),
    ] {
        let name = unique("proc");
        let r = emulator(&url, RedissonConfig::default()).await;
        let rl = r.lock(&name, theirs);
        // Redisson (this process) holds; distlock in another process waits, and is woken
        // by Redisson's unlock
        assert!(rl.try_lock_now(1).await.unwrap());
        let mut child = spawn_holder(&url, &name, kind);
        let channel = match theirs {
            LockKind::Read | LockKind::Write => rwlock_channel(&name),
            LockKind::Plain | LockKind::Fenced => lock_channel(&name),
            LockKind::Fair => {
                queue_len(&addr, &name, 1).await;
                format!("{}:{}", lock_channel(&name), queue(&addr, &name)[0])
            }
        };
        wait_subscribers(&addr, &channel, 1, false).await;
        let released = Instant::now();
        rl.unlock(1).await.unwrap();
        let at = held(&mut child).await;
        eprintln!(
            "single {kind}: distlock in another process woken by Redisson's unlock after {:?}",
            at - released
        );
        assert!(at - released < FAST, "{kind}: {:?}", at - released);
        // the other process holds: Redisson is refused; killed, its lease (1 s) frees it
        assert!(
            !r.lock(&name, theirs).try_lock_now(2).await.unwrap(),
            "{kind}"
        );
        child.kill().expect("SIGKILL the worker");
        let killed = Instant::now();
        let _ = child.wait();
        assert!(r
            .lock(&name, theirs)
            .try_lock(3, Duration::from_secs(10), Some(LONG))
            .await
            .unwrap());
        let waited = killed.elapsed();
        eprintln!(
            "single {kind}: Redisson acquired {waited:?} after the distlock process was killed"
        );
        assert!(waited < WOKEN, "{kind}: {waited:?}");
        r.lock(&name, theirs).unlock(3).await.unwrap();
        int(&addr, &["DEL", &token_name(&name)]);
        r.crash();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_fair_and_rw_watchdog_renews_and_signals_a_lost_lease() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    // auto leases of 900 ms, renewed every 300 ms
    let reg = single_registry(&url, "900ms").await;
    let r = emulator(&url, RedissonConfig::default()).await;
    for (kind, theirs) in [
        (Kind::Fair, LockKind::Fair),
        (Kind::Read, LockKind::Write),
        (Kind::Write, LockKind::Write),
    ] {
        let name = unique("lost-kinds");
        let g = reg.lock(&name).kind(kind).acquire().await.unwrap();
        // outlive the lease twice over: renewed (for a reader, its hold key too)
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert!(g.is_held(), "{kind:?} renewed past its lease");
        let pttl = int(&addr, &["PTTL", &name]);
        assert!(pttl > 0 && pttl <= 900, "{kind:?}: {pttl}");
        if kind == Kind::Read {
            let mine = match cmd(&addr, &["HKEYS", &name]) {
                RespValue::Array(a) => a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .find(|f| f != "mode")
                    .expect("the reader's field"),
                other => panic!("{other:?}"),
            };
            let hold = format!("{{{name}}}:{mine}:rwlock_timeout:1");
            let pttl = int(&addr, &["PTTL", &hold]);
            assert!(pttl > 0 && pttl <= 900, "{hold}: {pttl}");
        }
        // deleted behind its back: the holder hears of it, nothing is re-created
        int(&addr, &["DEL", &name]);
        let deleted = Instant::now();
        let lost = tokio::time::timeout(Duration::from_secs(5), g.lost())
            .await
            .expect("lost() within 5 s");
        assert!(matches!(lost, LockError::LeaseLost { .. }), "{lost:?}");
        assert!(deleted.elapsed() < Duration::from_secs(2), "{kind:?}");
        assert_eq!(
            int(&addr, &["EXISTS", &name]),
            0,
            "{kind:?}: not re-created"
        );
        let rl = r.lock(&name, theirs);
        assert!(rl.try_lock_now(1).await.unwrap(), "{kind:?}");
        rl.unlock(1).await.unwrap();
        drop(g);
        int(&addr, &["DEL", &token_name(&name)]);
    }
    r.crash();
}

/// In Redisson's format: a nested `Write` or `Read` in the task of an
/// outer `Write` whose hash was deleted fails with `LeaseLost`, tells the outer guard and
/// re-creates nothing; sibling futures under one outer `Write` take the nested write lock
/// in turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_rw_nested_rules() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    for (outer_kind, inner) in [
        (Kind::Write, Kind::Write),
        (Kind::Write, Kind::Read),
        (Kind::Read, Kind::Read),
        (Kind::Read, Kind::Write),
    ] {
        let name = unique("rw-nested");
        let outer = reg
            .lock(&name)
            .kind(outer_kind)
            .lease(Lease::Fixed(Duration::from_secs(10)))
            .acquire()
            .await
            .unwrap();
        let again = outer.scope(reg.lock(&name).kind(inner).try_acquire()).await;
        // re-entered while held; a write inside a read is refused at once (no upgrade)
        let upgrade = outer_kind == Kind::Read && inner == Kind::Write;
        match again {
            Ok(Some(again)) if !upgrade => again.release().await.unwrap(),
            Err(LockError::NestedKind {
                held: Kind::Read,
                asked: Kind::Write,
                ..
            }) if upgrade => {}
            other => panic!(
                "{outer_kind:?} > {inner:?}: {:?}",
                other.map(|g| g.map(|g| g.fencing_token()))
            ),
        }
        assert!(outer.is_held(), "{inner:?}");
        int(&addr, &["DEL", &name]);
        match outer.scope(reg.lock(&name).kind(inner).acquire()).await {
            Err(LockError::LeaseLost { .. }) => {}
            other => panic!(
                "{outer_kind:?} > {inner:?}: expected LeaseLost, got {:?}",
                other.map(|g| g.fencing_token())
            ),
        }
        assert!(!outer.is_held(), "{inner:?}: the outer guard heard of it");
        assert_eq!(
            int(&addr, &["EXISTS", &name]),
            0,
            "{inner:?}: nothing re-created"
        );
        drop(outer);
        int(&addr, &["DEL", &token_name(&name)]);
    }
    let name = unique("rw-siblings");
    let outer = reg.lock(&name).kind(Kind::Write).acquire().await.unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let section = || {
        let (reg, name, inside, most) = (reg.clone(), name.clone(), inside.clone(), most.clone());
        async move {
            let g = reg
                .lock(&name)
                .kind(Kind::Write)
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .expect("nested write");
            most.fetch_max(inside.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            // the section's work (not a synchronisation)
            tokio::time::sleep(Duration::from_millis(50)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            g.release().await.unwrap();
        }
    };
    outer
        .scope(async { tokio::join!(section(), section()) })
        .await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two siblings inside at once"
    );
    outer.release().await.unwrap();
    assert_eq!(int(&addr, &["EXISTS", &name]), 0, "freed");
    int(&addr, &["DEL", &token_name(&name)]);
}

/// On a cluster, a Redisson-format acquisition whose reply is lost (the
/// connection reset after the script ran) is never re-sent by the cluster client (Redisson's
/// scripts would count it twice: a token-0 "re-entry" and a lock that stays held after its
/// release). The proxied master's replica is stopped, so only clients go through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_acquire_whose_reply_is_lost_is_not_sent_again() {
    use distlock_tests::proxy::Proxy;
    use distlock_tests::topology::info_field;
    let mut cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let addrs: Vec<String> = cluster.urls().iter().map(|u| addr_of(u)).collect();
    let name = unique("cluster-once");
    let slot = keyslot(&addrs, &name);
    let master = master_of_slot(&addrs, slot).expect("slot owner");
    let port = master.rsplit(':').next().expect("port").to_string();
    // stop the master's replica (it would follow the master through the proxy)
    let replica = addrs
        .iter()
        .position(|a| {
            info_field(a, "replication", "role").as_deref() == Some("slave")
                && info_field(a, "replication", "master_port").as_deref() == Some(&port)
        })
        .expect("the master's replica");
    cluster.nodes[replica].kill();
    let live: Vec<String> = addrs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != replica)
        .map(|(_, a)| a.clone())
        .collect();
    // clients reach the master through the proxy: it announces the proxy's port (the
    // cluster bus keeps its own port)
    let proxy = Proxy::start(&master);
    let bus = (port.parse::<u16>().expect("port") + 10000).to_string();
    cmd(
        &master,
        &["CONFIG", "SET", "cluster-announce-bus-port", &bus],
    );
    let proxied = proxy.port().to_string();
    cmd(
        &master,
        &["CONFIG", "SET", "cluster-announce-port", &proxied],
    );
    let seen = live.clone();
    let want = proxy.addr();
    tokio::task::spawn_blocking(move || {
        distlock_tests::wait_until(
            Duration::from_secs(20),
            "the proxy's port announced",
            || {
                seen.iter().all(|a| {
                    master_of_slot(std::slice::from_ref(a), slot).as_deref() == Some(&want)
                })
            },
        )
    })
    .await
    .expect("announced");
    let urls: Vec<String> = live.iter().map(|a| format!("redis://{a}")).collect();
    let config = cluster_config(&urls).replace("wait = \"0s\"", "wait = \"10s\"");
    let reg = Registry::from_str(&config)
        .await
        .expect("connect to the private cluster");
    // warm up: the client's connections to the master exist
    reg.lock(&name)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(int(&master, &["EXISTS", &name]), 0);

    proxy.reset_after_replies(1);
    let g = reg
        .lock(&name)
        .acquire()
        .await
        .expect("acquired after a lost reply");
    assert_eq!(proxy.pending_reply_resets(), 0, "a reply was lost");
    assert_ne!(
        g.fencing_token(),
        0,
        "a token of its own, not a re-entry's 0"
    );
    let held = fields(&master, &name);
    let owners: Vec<&(String, i64)> = held.iter().filter(|(f, _)| f != "mode").collect();
    assert_eq!(owners.len(), 1, "one holder: {held:?}");
    assert_eq!(owners[0].1, 1, "counted once: {held:?}");
    g.release().await.expect("release");
    let deadline = Instant::now() + Duration::from_secs(5);
    while int(&master, &["EXISTS", &name]) != 0 {
        assert!(
            Instant::now() < deadline,
            "the lock stays held after its release: {:?}",
            fields(&master, &name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(proxy);
}

/// A Redisson-format read lock refuses a lease over Redisson's
/// `lockWatchdogTimeout` (30 s), fixed or auto, before anything is sent: a Java reader's
/// watchdog sets the shared hash's expiry to its own 30 s and could cut a longer lease
/// short. Other kinds (one holder per hash) keep longer leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_read_lease_over_redissons_watchdog_is_refused() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let reg = single_registry(&url, "30s").await;
    let name = unique("read-lease");
    let long = reg
        .lock(&name)
        .kind(Kind::Read)
        .lease(Lease::Fixed(Duration::from_secs(31)))
        .try_acquire()
        .await;
    match long {
        Err(LockError::InvalidDuration { limit, .. }) => {
            assert_eq!(limit, Duration::from_secs(30))
        }
        other => panic!(
            "a 31 s reader lease: expected InvalidDuration, got {:?}",
            other.map(|g| g.is_some())
        ),
    }
    assert_eq!(int(&addr, &["EXISTS", &name]), 0, "nothing sent");
    let auto = single_registry(&url, "45s").await;
    match auto.lock(&name).kind(Kind::Read).try_acquire().await {
        Err(LockError::InvalidDuration { .. }) => {}
        other => panic!(
            "watchdog_timeout 45 s: expected InvalidDuration, got {:?}",
            other.map(|g| g.is_some())
        ),
    }
    assert_eq!(int(&addr, &["EXISTS", &name]), 0, "nothing sent");
    let r = reg
        .lock(&name)
        .kind(Kind::Read)
        .lease(Lease::Fixed(Duration::from_secs(30)))
        .try_acquire()
        .await
        .unwrap()
        .expect("30 s is Redisson's own lease");
    r.release().await.unwrap();
    let w = auto
        .lock(&name)
        .kind(Kind::Write)
        .try_acquire()
        .await
        .unwrap()
        .expect("a write lock keeps its 45 s lease");
    w.release().await.unwrap();
    int(&addr, &["DEL", &token_name(&name)]);
}

/// The documented bound: with distlock's reader lease at most the Java
/// side's `lockWatchdogTimeout`, a Java reader's renewal (which sets the shared hash's
/// expiry to its own lease) never cuts the distlock reader short: when that Java reader
/// dies, a writer gets in only after the distlock reader was told its lease ended. Scaled
/// down: the emulated Java client's `lockWatchdogTimeout` is 3 s, distlock's reader has a
/// fixed lease of 3 s (an auto lease whose renewals fail ends likewise).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_java_reader_watchdog_never_cuts_a_distlock_reader_short() {
    let server = RedisProcess::start();
    let url = server.url();
    let addr = server.addr();
    let watchdog = Duration::from_secs(3);
    let reg = single_registry(&url, "3s").await;
    // (within the bound) a 3 s reader; (past it, the documented hazard) a 10 s reader,
    // which a writer overlaps once the Java reader died
    for (lease, within) in [
        (Lease::Fixed(watchdog), true),
        (Lease::Fixed(Duration::from_secs(10)), false),
    ] {
        let name = unique("java-reader");
        let r = emulator(
            &url,
            RedissonConfig {
                watchdog_timeout: watchdog,
                ..RedissonConfig::default()
            },
        )
        .await;
        // the Java reader, renewed every second by its watchdog
        r.lock(&name, LockKind::Read).lock(1, None).await.unwrap();
        let reader = reg
            .lock(&name)
            .kind(Kind::Read)
            .lease(lease)
            .try_acquire()
            .await
            .unwrap()
            .expect("readers share");
        // a Java renewal after the distlock reader's acquisition sets the shared expiry to 3 s
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let pttl = int(&addr, &["PTTL", &name]);
        assert!(pttl > 0 && pttl <= 3_000, "{lease:?}: {pttl}");
        // the Java reader dies
        r.crash();
        let crashed = Instant::now();
        let deadline = crashed + Duration::from_secs(15);
        let writer = loop {
            let w = tokio::spawn({
                let (reg, name) = (reg.clone(), name.clone());
                async move { reg.lock(&name).kind(Kind::Write).try_acquire().await }
            })
            .await
            .unwrap()
            .unwrap();
            if let Some(w) = w {
                break w;
            }
            assert!(Instant::now() < deadline, "{lease:?}: no writer got in");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprintln!(
            "{lease:?}: the writer got in {:?} after the Java reader died",
            crashed.elapsed()
        );
        assert_eq!(
            reader.is_held(),
            !within,
            "{lease:?}: within the bound a writer gets in only after the distlock reader's \
             lease ended; past it, while the reader still holds"
        );
        writer.release().await.unwrap();
        drop(reader);
        int(&addr, &["DEL", &token_name(&name)]);
    }
}

/// A Redisson-format fair waiter whose attempt fails with a transient error retries under a
/// new owner field (its format cannot tell a retry from a re-entry). Its place under the old
/// field must be gone before the retry queues: else the retry sits behind its own old
/// place, whose deadline is its whole allowance (20 s here) after it queued, and is served
/// only then. Here the old place's cancel cannot get through either: the waiter's
/// connection to the server is blackholed from before the crashed Redisson holder's lease
/// ends until its attempts and that cancel have timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_fair_retry_after_a_transient_error_is_not_queued_behind_its_old_place() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let proxy = Proxy::start(&addr);
    let reg = Registry::from_str(&format!(
        "{}response_timeout = \"300ms\"\nconnect_timeout = \"300ms\"\n",
        single_config(&proxy.url(), "30s")
    ))
    .await
    .expect("connect through the proxy");
    let name = unique("fair-retry");
    // A crashed Redisson holder (watchdog lease 1.5 s, renewals stopped), on the server
    // directly.
    let r = emulator(
        &server.url(),
        RedissonConfig {
            watchdog_timeout: Duration::from_millis(1500),
            ..RedissonConfig::default()
        },
    )
    .await;
    assert!(r.lock(&name, LockKind::Fair).try_lock_now(1).await.unwrap());
    r.crash();
    let waiter = {
        let (reg, name) = (reg.clone(), name.clone());
        tokio::spawn(async move {
            reg.lock(&name)
                .kind(Kind::Fair)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    queue_len(&addr, &name, 1).await;
    let first = queue(&addr, &name);
    let start = Instant::now();
    while reg.waiting("main").unwrap_or(0) == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "never asleep");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Blackholed until the lease has ended and the waiter's attempt at its end, and the
    // cancel of its old place after it, have timed out (300 ms each).
    proxy.set_blackhole(true);
    while int(&addr, &["EXISTS", &name]) == 1 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the lease never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!waiter.is_finished(), "nothing reaches the server");
    proxy.set_blackhole(false);
    let healed = Instant::now();
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "not served within 5 s of the path healing; the queue is {:?} (first {first:?})",
                queue(&addr, &name)
            )
        })
        .expect("waiter task")
        .expect("the waiter acquires");
    let took = healed.elapsed();
    println!("fair retry after a transient error: served {took:?} after the path healed");
    assert!(took < WOKEN, "{took:?}");
    assert!(
        queue(&addr, &name).is_empty(),
        "nothing left queued: {:?}",
        queue(&addr, &name)
    );
    g.release().await.unwrap();
    int(&addr, &["DEL", &token_name(&name)]);
}

/// A fair waiter at the head of Redisson's queue, refused while the lock has under a
/// millisecond left (the server still has the key, and `PTTL` says 0), is told to ask again
/// at once, not to wait until its own place's deadline (the whole wait). Sent raw, as
/// distlock sends it, against a lock whose expiry is 2 ms away, until granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_at_the_head_retries_at_once_when_the_lock_expires_within_the_ms() {
    const TRIALS: usize = 200;
    const WAIT_MS: u64 = 10_000;
    let server = RedisProcess::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new(distlock::__private::scripts::REDISSON_FAIR_LOCK);
    let name = unique("fair-expiring");
    let (queue, deadlines, token) = (
        fair_queue_name(&name),
        fair_timeout_name(&name),
        token_name(&name),
    );
    let (holder, waiter) = ("holder-id:1", "waiter-id:1");
    let (mut refused, mut under_a_ms) = (0, 0);
    for _ in 0..TRIALS {
        let (now_s, now_us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let now_ms = now_s * 1000 + now_us / 1000;
        redis::pipe()
            .del(&[&name, &queue, &deadlines])
            .hset(&name, holder, 1)
            .pexpire(&name, 2)
            .zadd(&deadlines, waiter, now_ms + WAIT_MS)
            .rpush(&queue, waiter)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
        let started = Instant::now();
        loop {
            let reply: Vec<i64> = script
                .key(&name)
                .key(&queue)
                .key(&deadlines)
                .key(&token)
                .arg(30_000)
                .arg(waiter)
                .arg(WAIT_MS)
                .arg("wait")
                .invoke_async(&mut conn)
                .await
                .unwrap();
            match reply[..] {
                [1, _] => break,
                [0, hint] => {
                    refused += 1;
                    under_a_ms += usize::from(hint <= 1);
                    assert!(
                        hint < 1_000,
                        "refused with a hint of {hint} ms while the lock had at most 2 ms left"
                    );
                }
                _ => panic!("unexpected reply {reply:?}"),
            }
            assert!(
                started.elapsed() < WOKEN,
                "not granted after the lock expired"
            );
        }
        redis::cmd("DEL")
            .arg(&[&name, &queue, &deadlines])
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
    // The window the test aims at was reached: refusals with the lock about to go.
    assert!(
        refused > 0 && under_a_ms > 0,
        "{refused} refusals, {under_a_ms} of them with under a millisecond left"
    );
    eprintln!("{TRIALS} trials: {refused} refusals, {under_a_ms} with a hint of 1 ms at most");
}
