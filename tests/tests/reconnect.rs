//! Reconnect loops back off even when the server closes an established connection
//! cleanly (`CLIENT KILL TYPE pubsub`, an output-buffer limit, a proxy's idle FIN): the
//! wake-up subscriber of a backend and the sentinel monitor's `+switch-master`
//! subscription. Private servers (the kills would disturb the shared ones' users).

use std::time::{Duration, Instant};

use distlock::Registry;
use distlock_tests::topology::SentinelProcess;
use distlock_tests::{resp_command, RedisProcess, RespValue};

/// How long the kills go on.
const KILLING: Duration = Duration::from_secs(3);
/// A generous bound on the reconnects within [`KILLING`] (at once every time: hundreds).
const AT_MOST: u64 = 50;

/// `total_connections_received` of `INFO stats` at `addr`.
fn connections_received(addr: &str) -> u64 {
    let info = match resp_command(addr, &["INFO", "stats"]) {
        Ok(RespValue::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO stats at {addr}: {other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {info}"))
}

/// The number of pub/sub clients at `addr` (`CLIENT LIST TYPE pubsub`).
fn pubsub_clients(addr: &str) -> usize {
    match resp_command(addr, &["CLIENT", "LIST", "TYPE", "pubsub"]) {
        Ok(RespValue::Bulk(b)) => String::from_utf8_lossy(&b).lines().count(),
        other => panic!("CLIENT LIST at {addr}: {other:?}"),
    }
}

/// How many connections at `addr` subscribe `channel` (`PUBSUB NUMSUB`).
fn channel_subscribers(addr: &str, channel: &str) -> i64 {
    match resp_command(addr, &["PUBSUB", "NUMSUB", channel]) {
        Ok(RespValue::Array(a)) => a.get(1).and_then(RespValue::as_int).unwrap_or(0),
        other => panic!("PUBSUB NUMSUB at {addr}: {other:?}"),
    }
}

/// `CLIENT KILL TYPE pubsub` at `addr` in a loop for `KILLING` on a thread; how many
/// connections it killed, and how many it made itself (one a command).
fn kill_pubsub_clients(addr: String) -> std::thread::JoinHandle<(u64, u64)> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let (mut killed, mut sent) = (0, 0);
        while start.elapsed() < KILLING {
            sent += 1;
            if let Ok(RespValue::Integer(n)) =
                resp_command(&addr, &["CLIENT", "KILL", "TYPE", "pubsub"])
            {
                killed += u64::try_from(n).unwrap_or(0);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        (killed, sent)
    })
}

async fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_backs_off_when_its_connection_is_closed_cleanly() {
    let redis = RedisProcess::start();
    let addr = redis.addr();
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"500ms\"\nresponse_timeout = \"500ms\"\n",
        redis.url()
    ))
    .await
    .unwrap();
    let holder = reg.lock("busy").acquire().await.unwrap();
    // A waiter, subscribed to the lock's channel.
    let waiter = {
        let reg = reg.clone();
        tokio::spawn(async move {
            reg.lock("busy")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    // (The subscriber listens on the revocation channel from the start: wait for the
    // waiter's own channel.)
    eventually(Duration::from_secs(10), "the waiter subscribes", || {
        pubsub_clients(&addr) == 1 && channel_subscribers(&addr, "lock:{busy}:released") == 1
    })
    .await;

    let before = reg.subscriber_connections("main").unwrap();
    let received = connections_received(&addr);
    let (killed, sent) = kill_pubsub_clients(addr.clone()).join().unwrap();
    let reconnects = reg.subscriber_connections("main").unwrap() - before;
    // Not counting the killer's connections and this INFO's.
    let connections = connections_received(&addr) - received - sent - 1;
    eprintln!("{killed} killed, {reconnects} reconnects, {connections} connections in {KILLING:?}");
    assert!(killed >= 1, "the subscriber was connected");
    assert!(
        reconnects < AT_MOST,
        "{reconnects} reconnects in {KILLING:?} (at most {AT_MOST})"
    );
    assert!(
        connections < 2 * AT_MOST,
        "{connections} connections in {KILLING:?}"
    );

    // It still works: the waiter hears the release.
    eventually(Duration::from_secs(10), "the subscriber is back", || {
        pubsub_clients(&addr) == 1 && channel_subscribers(&addr, "lock:{busy}:released") == 1
    })
    .await;
    holder.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_monitor_backs_off_when_its_connection_is_closed_cleanly() {
    let master = RedisProcess::start();
    let sentinel = SentinelProcess::start("edges", master.port(), 1);
    let addr = sentinel.addr();
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"sentinel\"\nmaster_name = \"edges\"\nsentinels = [\"{}\"]\nconnect_timeout = \"500ms\"\nresponse_timeout = \"500ms\"\n",
        sentinel.url()
    ))
    .await
    .unwrap();
    eventually(Duration::from_secs(10), "the monitor subscribes", || {
        pubsub_clients(&addr) == 1
    })
    .await;

    let received = connections_received(&addr);
    let (killed, sent) = kill_pubsub_clients(addr.clone()).join().unwrap();
    let connections = connections_received(&addr) - received - sent - 1;
    eprintln!("{killed} killed, {connections} connections to the sentinel in {KILLING:?}");
    assert!(killed >= 1, "the monitor was connected");
    assert!(
        connections < AT_MOST,
        "{connections} connections to the sentinel in {KILLING:?} (at most {AT_MOST})"
    );

    // It comes back, and the backend works.
    eventually(Duration::from_secs(10), "the monitor is back", || {
        pubsub_clients(&addr) == 1
    })
    .await;
    reg.lock("after")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
