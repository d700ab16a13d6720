//! Half-open subscriber connections: a NAT or load balancer that
//! forgets an idle flow leaves the client's socket open, and every byte sent on it
//! vanishes, with no FIN and no RST. The wake-up subscriber must find such a connection
//! dead by itself — it PINGs every 5 s and gives the answer `connect_timeout` — within the
//! documented bound `5 s + connect_timeout`, connect again, and wake its waiters, so a
//! waiter whose release message was lost is not left sleeping until the holder's lease ends.
//!
//! The waiting process reaches a private server through the fault proxy; only its
//! subscriber connections (those that sent `SUBSCRIBE`) are silenced, so its command
//! connection keeps working, as the idle subscriber flow is the one a NAT drops. The holder
//! talks to the server directly, with a 60 s fixed lease: a waiter woken only by the lease's
//! end would take a minute.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, LockGuard, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::RedisProcess;

/// The subscriber's PING period (`backend/subscriber.rs`).
const PING_EVERY: Duration = Duration::from_secs(5);
/// The waiter's `connect_timeout`: the time a PING (or a SUBSCRIBE) gets for its answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest pause between two reconnects of the subscriber.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Scheduling slack on a loaded 2-core machine (the assertions are protocol bounds).
const SLACK: Duration = Duration::from_secs(3);
/// What the subscriber connections send.
const SUB: &[u8] = b"SUBSCRIBE";
/// The holder's lease: the wait a waiter without wake-ups would fall back to.
const HOLDER_LEASE: Duration = Duration::from_secs(60);

struct Setup {
    _server: RedisProcess,
    proxy: Proxy,
    waiter: Arc<Registry>,
    holder: Registry,
}

async fn setup() -> Setup {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let waiter = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"{}ms\"\n",
        proxy.url(),
        CONNECT_TIMEOUT.as_millis()
    ))
    .await
    .unwrap();
    let holder = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        server.url()
    ))
    .await
    .unwrap();
    Setup {
        _server: server,
        proxy,
        waiter: Arc::new(waiter),
        holder,
    }
}

/// Poll `f` every 20 ms until it holds; panic naming `what` after `limit`.
async fn poll(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// The holder takes `key` (fixed 60 s lease); a waiter of the proxied registry starts
/// waiting for it, and its subscriber subscribes (through the proxy).
async fn held_and_waited_for(
    s: &Setup,
    key: &'static str,
) -> (
    LockGuard,
    tokio::task::JoinHandle<Result<LockGuard, distlock::LockError>>,
) {
    let held = s
        .holder
        .lock(key)
        .lease(Lease::Fixed(HOLDER_LEASE))
        .acquire()
        .await
        .unwrap();
    let waiter = s.waiter.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .lock(key)
            .wait(Duration::from_secs(90))
            .acquire()
            .await
    });
    poll(Duration::from_secs(10), "the waiter's subscription", || {
        s.proxy.flows_that_sent(SUB).0 == 1
    })
    .await;
    assert!(!waiting.is_finished());
    (held, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_subscriber_connection_is_replaced_and_the_waiter_woken() {
    let s = setup().await;
    let (held, waiting) = held_and_waited_for(&s, "k").await;

    // The NAT forgets the subscriber's flow; the holder's release message is lost on it.
    assert_eq!(s.proxy.silence_flows_that_sent(SUB), 1);
    let silenced = Instant::now();
    held.release().await.unwrap();

    // Detected dead and replaced within the documented bound: a new subscriber connection.
    let bound = PING_EVERY + CONNECT_TIMEOUT;
    let replaced = poll(bound + SLACK, "a new subscriber connection", || {
        s.proxy.flows_that_sent(SUB) == (2, 1)
    })
    .await;
    // ... and the waiter, woken by the reconnect, has the lock: not after the 60 s lease.
    let guard = tokio::time::timeout(bound + SLACK, waiting)
        .await
        .expect("the waiter was not woken within the bound (it sleeps until the lease ends)")
        .unwrap()
        .expect("the waiter acquires");
    let woken = silenced.elapsed();
    eprintln!(
        "silent subscriber flow: replaced after {replaced:?}, waiter holds the lock after {woken:?} (bound {bound:?})"
    );
    assert!(woken < bound + SLACK, "{woken:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_keeps_reconnecting_while_the_path_is_dead_and_serves_waiters_once_it_heals() {
    let s = setup().await;
    let (held, waiting) = held_and_waited_for(&s, "k2").await;

    // Every subscriber flow dies, the new ones too (their SUBSCRIBE is never answered). The
    // open one first: with the rule for new flows set first, anything the open flow sent
    // in between (a subscription asked again under load) silenced it already, and the count
    // below was 0 (a full run failed so).
    assert_eq!(s.proxy.silence_flows_that_sent(SUB), 1);
    s.proxy.set_silence_on_send(Some(SUB));

    let bound = PING_EVERY + CONNECT_TIMEOUT;
    let first = poll(bound + SLACK, "a first reconnect", || {
        s.proxy.flows_that_sent(SUB).1 >= 2
    })
    .await;
    // A SUBSCRIBE without an answer is given up after connect_timeout, and the subscriber
    // tries again (after its backoff) instead of waiting for that answer forever (which
    // left every later waiter of the process to sleep until its holder's lease ended).
    let again = poll(
        CONNECT_TIMEOUT + MAX_BACKOFF + CONNECT_TIMEOUT + SLACK,
        "a second reconnect",
        || s.proxy.flows_that_sent(SUB).1 >= 3,
    )
    .await;
    assert!(!waiting.is_finished(), "the lock is still held");

    // The path heals (new flows work again): the next reconnect subscribes again.
    s.proxy.set_silence_on_send(None);
    let heal_bound = CONNECT_TIMEOUT + MAX_BACKOFF + CONNECT_TIMEOUT;
    let healed = poll(heal_bound + SLACK, "a live subscriber connection", || {
        let (flows, silent) = s.proxy.flows_that_sent(SUB);
        flows > silent
    })
    .await;

    // The release reaches the waiter as a message: it has the lock at once, not after the
    // holder's 60 s lease.
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(SLACK, waiting)
        .await
        .expect("the waiter was not woken by the release after the path healed")
        .unwrap()
        .expect("the waiter acquires");
    let woken = released.elapsed();
    eprintln!(
        "dead subscriber path: first reconnect after {first:?}, the next {again:?} later; live again {healed:?} after the heal; the waiter holds the lock {woken:?} after the release"
    );
    guard.release().await.unwrap();
}

/// A waiter whose subscription is never confirmed (every subscriber flow dies at its
/// `SUBSCRIBE`, from before the waiter came) counts as a waiter, and hears the release
/// promptly by polling with a bounded backoff while it asks for the subscription again,
/// instead of waiting for the subscription (or the holder's 60 s lease) without a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_subscription_is_never_confirmed_is_counted_and_polls() {
    let s = setup().await;
    s.proxy.set_silence_on_send(Some(SUB));
    s.proxy.silence_flows_that_sent(SUB);
    let held = s
        .holder
        .lock("k3")
        .lease(Lease::Fixed(HOLDER_LEASE))
        .acquire()
        .await
        .unwrap();
    let waiter = s.waiter.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("k3")
            .wait(Duration::from_secs(90))
            .acquire()
            .await
    });
    poll(SLACK, "the waiter counted as waiting", || {
        s.waiter.waiting("main").unwrap_or(0) > 0
    })
    .await;
    poll(SLACK, "the waiter's SUBSCRIBE sent, and silenced", || {
        s.proxy.flows_that_sent(SUB).1 >= 1
    })
    .await;
    assert!(!waiting.is_finished(), "the lock is still held");
    // Time is what is tested here: its polling pauses grow to their 1 s ceiling meanwhile
    // (10 + 20 + ... + 640 ms at most), and stay bounded there.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    poll(SLACK, "the waiter still counted as waiting", || {
        s.waiter.waiting("main").unwrap_or(0) > 0
    })
    .await;

    let released = Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(SLACK, waiting)
        .await
        .expect("the waiter did not hear the release (it waits for the lease's end)")
        .unwrap()
        .expect("the waiter acquires");
    let woken = released.elapsed();
    eprintln!(
        "subscription never confirmed: the waiter holds the lock {woken:?} after the release"
    );
    guard.release().await.unwrap();
}
