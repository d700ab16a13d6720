//! Tokens and per-key state, against the suite's real redis-server:
//!
//! - an acquire script run again (its first reply lost) answers its OWN token, not
//!   the fencing counter's current value, which another kind's holder of the same key may
//!   have drawn meanwhile: reentrant, fair, read, write and semaphore scripts, sent raw;
//! - a run-once acquisition (`hold_at_least`) whose reply was lost is undone in the
//!   background, and the undo frees the slot (the job never ran) instead of keeping the
//!   lock until `hold:until`;
//! - per-key state is bounded: a token counter that is lost (deleted, evicted)
//!   still gives larger tokens, in both formats; the keys of holders and waiters that died
//!   without a word end with their leases and deadlines (a Redisson fair waiter's queue
//!   entries, a read-write lock's holder information of a dead reader).
//!
//! And the fencing counter shared by a server's keys: released locks leave no key of their
//! own; a counter of an earlier build (one per key) is drawn above and raised.

mod common;

use std::time::{Duration, Instant};

use common::unique;
use distlock::__private::scripts;
use distlock::{Lease, LockKind, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::{addr_of, lock_fields, resp_command, single_url, RespValue};

fn addr() -> String {
    addr_of(&single_url())
}

fn cmd(args: &[&str]) -> RespValue {
    resp_command(&addr(), args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn int(args: &[&str]) -> i64 {
    cmd(args)
        .as_int()
        .unwrap_or_else(|| panic!("{args:?}: not an integer"))
}

/// `EVAL script n keys... args...`, raw, on the shared single server.
fn eval(script: &str, keys: &[&str], args: &[&str]) -> RespValue {
    let n = keys.len().to_string();
    let mut c = vec!["EVAL", script, n.as_str()];
    c.extend_from_slice(keys);
    c.extend_from_slice(args);
    cmd(&c)
}

/// An acquire script's `{state, n}` reply.
fn pair(v: RespValue) -> (i64, i64) {
    let a = v.as_array().unwrap_or_else(|| panic!("not a pair: {v:?}"));
    (
        a[0].as_int().expect("state"),
        a[1].as_int().expect("token or ms"),
    )
}

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// The Redis names of every kind of lock on `key` under the prefix `lock:`.
struct Names {
    reentrant: String,
    fair: [String; 3],
    rw: [String; 3],
    sem: [String; 2],
    fence: String,
}

fn names(key: &str) -> Names {
    let h = format!("lock:{{{key}}}");
    Names {
        fair: [
            format!("{h}:fair"),
            format!("{h}:fair:queue"),
            format!("{h}:fair:waiters"),
        ],
        rw: [
            format!("{h}:rw"),
            format!("{h}:rw:readers"),
            format!("{h}:rw:writers"),
        ],
        sem: [format!("{h}:sem"), format!("{h}:sem:n")],
        fence: format!("{h}:fence"),
        reentrant: h,
    }
}

/// The reentrant lock's acquire, raw: owner, lease, level (a fresh acquisition).
fn reentrant(n: &Names, owner: &str, level: &str) -> (i64, i64) {
    pair(eval(
        scripts::ACQUIRE,
        &[&n.reentrant, &n.fence],
        &[owner, "10000", level],
    ))
}

fn fair(n: &Names, owner: &str, level: &str) -> (i64, i64) {
    pair(eval(
        scripts::FAIR_ACQUIRE,
        &[&n.fair[0], &n.fair[1], &n.fair[2], &n.fence],
        &[owner, "10000", "0", level, "0"],
    ))
}

fn rw(n: &Names, owner: &str, mode: &str, level: &str) -> (i64, i64) {
    pair(eval(
        scripts::RW_ACQUIRE,
        &[&n.rw[0], &n.rw[1], &n.rw[2], &n.fence],
        &[owner, "10000", mode, "0", level, "0"],
    ))
}

fn sem(n: &Names, id: &str) -> (i64, i64) {
    pair(eval(
        scripts::SEM_ACQUIRE,
        &[&n.sem[0], &n.sem[1], &n.fence],
        &[id, "1", "3", "10000"],
    ))
}

/// Every kind of distlock's format: the acquisition's first run takes the lock
/// (its reply lost), another kind's holder of the same key draws the next token from the
/// shared counter, then the acquisition's script runs again (the client's retry, with the
/// same level): it must answer the first run's token, not the other holder's.
#[test]
fn a_rerun_answers_its_own_token_on_every_kind() {
    // (kind, first run / re-run, another kind's acquisition in between)
    type Acq = Box<dyn Fn(&Names) -> (i64, i64)>;
    let cases: Vec<(&str, Acq, Acq)> = vec![
        (
            "reentrant",
            Box::new(|n| reentrant(n, A, "a1")),
            Box::new(|n| fair(n, B, "b1")),
        ),
        (
            "fair",
            Box::new(|n| fair(n, A, "a1")),
            Box::new(|n| reentrant(n, B, "b1")),
        ),
        (
            "write",
            Box::new(|n| rw(n, A, "write", "a1")),
            Box::new(|n| reentrant(n, B, "b1")),
        ),
        (
            "read",
            Box::new(|n| rw(n, A, "read", "a1")),
            Box::new(|n| fair(n, B, "b1")),
        ),
        (
            "semaphore",
            Box::new(|n| sem(n, A)),
            Box::new(|n| reentrant(n, B, "b1")),
        ),
    ];
    for (kind, mine, other) in cases {
        let n = names(&unique(&format!("rerun-{kind}")));
        let first = mine(&n);
        assert_eq!(first.0, 1, "{kind}: acquired");
        let theirs = other(&n);
        assert_eq!(theirs.0, 1, "{kind}: the other kind acquired");
        assert!(theirs.1 > first.1, "{kind}: tokens grow");
        let again = mine(&n);
        assert_eq!(
            again, first,
            "{kind}: a run again answers its own token {} (the other holder's is {})",
            first.1, theirs.1
        );
    }
}

/// Semaphore: a holder whose recorded token is gone (its counts hash deleted or
/// evicted apart from the holders' zset) run again must not answer the counter's value
/// (another holder's token): it gets a token of its own, larger than every token given
/// before, and keeps answering it.
#[test]
fn a_semaphore_rerun_whose_token_is_gone_gets_a_token_of_its_own() {
    let n = names(&unique("rerun-sem-gone"));
    let (state, mine) = sem(&n, A);
    assert_eq!(state, 1);
    assert_eq!(int(&["DEL", &n.sem[1]]), 1, "the counts hash lost");
    let (_, theirs) = reentrant(&n, B, "b1");
    assert!(theirs > mine);
    let (state, again) = sem(&n, A);
    assert_eq!(state, 1, "still its holder");
    assert_ne!(again, theirs, "not the other holder's token");
    assert!(
        again > theirs,
        "a token of its own, above every earlier one"
    );
    assert_eq!(sem(&n, A), (1, again), "and the same on a third run");
    // its permit counts as one again (a second holder of 2 of 3 fits)
    let two = pair(eval(
        scripts::SEM_ACQUIRE,
        &[&n.sem[0], &n.sem[1], &n.fence],
        &["cccccccccccccccccccccccccccccccc", "2", "3", "10000"],
    ));
    assert_eq!(
        two.0, 1,
        "the restored holder counts its own permit: {two:?}"
    );
}

/// A registry on the shared single server.
async fn single(extra: &str) -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n{extra}\n",
        single_url()
    ))
    .await
    .expect("connect to the test redis-server")
}

/// Poll `f` (a Redis read, without blocking the runtime's background tasks) until it
/// holds, within `bound`; returns whether it did.
async fn eventually(bound: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > bound {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A run-once job (`hold_at_least`) with `wait = 0` whose acquire reply is lost
/// (the proxy resets the connection right after the server answered) fails, and its
/// acquisition is undone in the background. The job never ran, so the undo must free the
/// slot: the lock is gone (not kept until `hold:until`), and the next run runs the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undone_run_once_acquisition_frees_its_slot() {
    let proxy = Proxy::start(&addr());
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n",
        proxy.url()
    ))
    .await
    .expect("connect through the proxy");
    let key = unique("undo-run-once");
    let hash = format!("lock:{{{key}}}");
    let job = |key: &str| {
        reg.lock(key)
            .wait(Duration::ZERO)
            .lease(Lease::Fixed(Duration::from_secs(20)))
            .hold_at_least(Duration::from_secs(15))
    };
    // The subscriber connected first: its first connection checks the leases held then
    // (a renewal round on the command connection), whose reply the proxy would otherwise
    // swallow instead of the acquire's if it connected while the first job held its lock
    // (a full run failed so: the job ran).
    assert!(
        eventually(Duration::from_secs(5), || reg
            .subscriber_connections("main")
            .unwrap_or(0)
            > 0)
        .await,
        "the subscriber connects"
    );
    // The scripts loaded and the connection up, so the next reply is the acquire's.
    let warm = unique("undo-warm");
    job(&warm).run(async {}).await.expect("a first job");

    proxy.reset_after_replies(1);
    let mut ran = false;
    let lost = job(&key).run(async { ran = true }).await;
    assert!(!ran, "the job must not run without a reply: {lost:?}");
    assert!(lost.is_err(), "the acquire failed: {lost:?}");
    assert_eq!(
        proxy.pending_reply_resets(),
        0,
        "the acquire's reply was the one lost"
    );

    // The undo lands in the background: the level's owner leaves the record.
    let landed = eventually(Duration::from_secs(10), || {
        lock_fields(&addr(), &hash).len() <= 1
    })
    .await;
    assert!(landed, "the undo ran within 10 s");
    let fields = lock_fields(&addr(), &hash);
    assert_eq!(
        int(&["EXISTS", &hash]),
        0,
        "the undo of an acquisition whose reply was lost frees the slot; left: {fields:?}"
    );
    let mut ran = false;
    job(&key)
        .run(async { ran = true })
        .await
        .expect("the next run is not Skipped");
    assert!(ran, "the job runs once, here");
}

/// On redlock: a run-once attempt that wins only a minority of the nodes (another
/// owner holds the others) is undone on the nodes it won before `Skipped` is returned; the
/// job never ran, so those nodes must be freed, not kept until `hold:until` (which would
/// keep the next quorum from forming once the other owner is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_redlock_run_once_attempt_frees_the_nodes_it_won() {
    let urls = distlock_tests::redlock_urls();
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"500ms\"\n",
        common::quoted(&urls)
    ))
    .await
    .expect("redlock");
    let key = unique("undo-redlock");
    let hash = format!("lock:{{{key}}}");
    let fence = format!("{hash}:fence");
    let on = |url: &String, args: &[&str]| {
        resp_command(&addr_of(url), args).unwrap_or_else(|e| panic!("{url}: {e}"))
    };
    // Another owner holds it on three of the five nodes.
    for url in &urls[..3] {
        let r = on(
            url,
            &[
                "EVAL",
                scripts::ACQUIRE,
                "2",
                &hash,
                &fence,
                A,
                "20000",
                "x1",
            ],
        );
        assert_eq!(pair(r).0, 1, "{url}: held by the other owner");
    }
    let mut ran = false;
    let r = reg
        .lock(key.as_str())
        .wait(Duration::ZERO)
        .lease(Lease::Fixed(Duration::from_secs(20)))
        .hold_at_least(Duration::from_secs(15))
        .run(async { ran = true })
        .await;
    assert!(!ran && r.as_ref().is_err_and(|e| e.is_skipped()), "{r:?}");
    for url in &urls[3..] {
        let undone = eventually(Duration::from_secs(5), || {
            lock_fields(&addr_of(url), &hash).len() <= 1
        })
        .await;
        assert!(undone, "{url}: the undo ran");
        let left = lock_fields(&addr_of(url), &hash);
        assert_eq!(
            on(url, &["EXISTS", &hash]).as_int(),
            Some(0),
            "{url}: the node the failed attempt won is freed; left: {left:?}"
        );
    }
    for url in &urls {
        on(url, &["DEL", &hash]);
    }
}

/// Both formats: the token counter lost (deleted, evicted, a failover to a replica
/// that never got it) must not make tokens go back: the next token is still larger.
#[tokio::test]
async fn tokens_grow_after_the_counter_is_lost_in_every_format() {
    let distlock = single("").await;
    let redisson = single("protocol = \"redisson\"").await;
    for (format, reg) in [("distlock", &distlock), ("redisson", &redisson)] {
        for kind in [
            LockKind::Reentrant,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
        ] {
            let key = unique(&format!("lost-counter-{format}-{kind:?}"));
            let take = || reg.lock(key.as_str()).kind(kind).acquire();
            let g = take()
                .await
                .unwrap_or_else(|e| panic!("{format} {kind:?}: {e}"));
            let t1 = g.fencing_token();
            g.release().await.expect("release");
            // distlock's format on a single server draws from the server's counter.
            let counter = match format {
                "distlock" => "lock:{{fence}".to_owned(),
                _ => format!("redisson_lock_token:{{{key}}}"),
            };
            assert_eq!(int(&["DEL", &counter]), 1, "{format} {kind:?}: {counter}");
            let g = take().await.expect("acquire again");
            let t2 = g.fencing_token();
            g.release().await.expect("release");
            assert!(
                t2 > t1,
                "{format} {kind:?}: token {t2} after {t1}, the counter {counter} lost"
            );
        }
    }
    // A semaphore (distlock's format only) shares the locks' counter.
    let key = unique("lost-counter-sem");
    let s = distlock.semaphore(key.as_str(), 2);
    let g = s.acquire(1).await.expect("permit");
    let t1 = g.fencing_token();
    g.release().await.expect("release");
    assert_eq!(int(&["DEL", "lock:{{fence}"]), 1);
    let g = s.acquire(1).await.expect("permit");
    assert!(g.fencing_token() > t1, "semaphore: tokens grow");
    g.release().await.expect("release");
}

/// The fencing counter shared by the keys of a server: locks of
/// every kind and semaphores taken and released on 50 keys each leave no key behind, not
/// even a counter of their own; and the tokens of one key still grow from holder to holder.
#[tokio::test]
async fn released_locks_leave_no_key_not_even_a_counter() {
    let reg = single("").await;
    let base = unique("no-counter-each");
    let mut last = 0;
    for i in 0..50 {
        for kind in [
            LockKind::Reentrant,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
        ] {
            let g = reg
                .lock(format!("{base}:{i}"))
                .kind(kind)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            g.release().await.expect("release");
        }
        let g = reg
            .semaphore(format!("{base}:{i}"), 2)
            .acquire(1)
            .await
            .expect("permit");
        g.release().await.expect("release");
        let g = reg
            .lock(base.as_str())
            .acquire()
            .await
            .expect("the one key");
        assert!(g.fencing_token() > last, "tokens of one key grow");
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    let left = keys_with_ttl(&base);
    assert!(left.is_empty(), "keys left behind: {left:?}");
    // (The server's counter lives at most 24 h: overlap.rs; a test here deletes it.)
}

/// The key's own counter of an earlier build of distlock (`lock:{KEY}:fence`, one per key)
/// while processes of both builds take one key, as in a rolling upgrade: this build draws
/// above it and raises it to its token, so the earlier build's next token (an INCR of it)
/// is above this build's, and this build's next above that; on every kind.
#[tokio::test]
async fn a_counter_of_an_earlier_build_is_drawn_above_and_raised() {
    let reg = single("").await;
    for kind in [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ] {
        let key = unique(&format!("earlier-build-{kind:?}"));
        let legacy = format!("lock:{{{key}}}:fence");
        // The earlier build's counter, started now: at the server's clock in µs, above
        // the server's shared counter (started earlier, and drawn from fewer than once a
        // microsecond since).
        let time = cmd(&["TIME"]);
        let time = time.as_array().expect("TIME");
        let now_us = |i: usize| {
            time[i]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("TIME")
        };
        let above = (now_us(0) * 1_000_000 + now_us(1)).to_string();
        let shared: Option<u64> = cmd(&["GET", "lock:{{fence}"])
            .as_str()
            .and_then(|v| v.parse().ok());
        assert!(shared < above.parse().ok(), "{shared:?} below {above}");
        cmd(&["SET", &legacy, &above, "PX", "60000"]);
        let take = || reg.lock(key.as_str()).kind(kind).acquire();
        let g = take().await.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let t1 = g.fencing_token();
        g.release().await.expect("release");
        assert!(
            t1 > above.parse::<u64>().unwrap(),
            "{kind:?}: {t1} above {above}"
        );
        let raised = cmd(&["GET", &legacy]);
        assert_eq!(
            raised.as_str(),
            Some(t1.to_string().as_str()),
            "{kind:?}: raised to the token"
        );
        assert!(int(&["PTTL", &legacy]) > 0, "{kind:?}: its expiry kept");
        // The earlier build's next acquisition: an INCR of its counter.
        let theirs = int(&["INCR", &legacy]) as u64;
        assert!(theirs > t1);
        let g = take().await.expect("acquire again");
        assert!(
            g.fencing_token() > theirs,
            "{kind:?}: {} after {theirs}",
            g.fencing_token()
        );
        g.release().await.expect("release");
        cmd(&["DEL", &legacy]);
    }
}

/// A reentrant or fair lock is a string record (`protocol/record.lua`); an earlier build of
/// distlock wrote a hash there. While processes of both builds take one key (a rolling
/// upgrade), a hash held by the earlier build is held for this one: refused, left as it
/// is (no write, no error), and free once it expires.
#[tokio::test]
async fn a_lock_hash_of_an_earlier_build_is_held_and_left_as_it_is() {
    let reg = single("").await;
    for (kind, suffix) in [(LockKind::Reentrant, ""), (LockKind::Fair, ":fair")] {
        let key = unique(&format!("earlier-hash-{kind:?}"));
        let hash = format!("lock:{{{key}}}{suffix}");
        cmd(&[
            "HSET",
            &hash,
            "earlier-owner",
            "1",
            "l:0000000000000001",
            "7",
        ]);
        cmd(&["PEXPIRE", &hash, "1500"]);
        let before = cmd(&["HGETALL", &hash]);
        let take = || reg.lock(key.as_str()).kind(kind).try_acquire();
        let refused = take().await.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert!(refused.is_none(), "{kind:?}: held by the earlier build");
        assert_eq!(cmd(&["HGETALL", &hash]), before, "{kind:?}: left as it is");
        assert!(int(&["PTTL", &hash]) > 0, "{kind:?}: its expiry kept");
        let waited = reg
            .lock(key.as_str())
            .kind(kind)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: free once it expired: {e}"));
        assert!(waited.fencing_token() > 0);
        waited.release().await.expect("release");
        assert_eq!(int(&["EXISTS", &hash]), 0, "{kind:?}: freed");
    }
}

/// Every key whose name holds `needle`, with its PTTL.
fn keys_with_ttl(needle: &str) -> Vec<(String, i64)> {
    let pattern = format!("*{needle}*");
    let mut cursor = "0".to_owned();
    let mut out = Vec::new();
    loop {
        let r = cmd(&["SCAN", &cursor, "MATCH", &pattern, "COUNT", "1000"]);
        let a = r.as_array().expect("SCAN reply");
        cursor = a[0].as_str().expect("cursor").to_owned();
        for k in a[1].as_array().expect("keys") {
            let k = k.as_str().expect("key name").to_owned();
            let ttl = int(&["PTTL", &k]);
            out.push((k, ttl));
        }
        if cursor == "0" {
            return out;
        }
    }
}

/// Redisson's fair lock: a waiter that queued and died (never came back, never
/// cancelled) leaves its queue entry and deadline in `redisson_lock_queue:{name}` and
/// `redisson_lock_timeout:{name}`; with nobody acquiring again they must still end, with
/// the latest deadline in them, not live forever.
#[test]
fn a_dead_redisson_fair_waiter_leaves_nothing_forever() {
    let name = unique("redisson-dead-waiter");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let timeout = format!("redisson_lock_timeout:{{{name}}}");
    let token = format!("redisson_lock_token:{{{name}}}");
    let keys = [
        name.as_str(),
        queue.as_str(),
        timeout.as_str(),
        token.as_str(),
    ];
    let held = pair(eval(
        scripts::REDISSON_FAIR_LOCK,
        &keys,
        &["1000", "holder:1", "500", "try"],
    ));
    assert_eq!(held.0, 1);
    let queued = pair(eval(
        scripts::REDISSON_FAIR_LOCK,
        &keys,
        &["1000", "waiter:1", "500", "wait"],
    ));
    assert_eq!(queued.0, 0, "queued behind the holder");
    for key in [&queue, &timeout] {
        let ttl = int(&["PTTL", key]);
        assert!(
            ttl > 0 && ttl <= 2000,
            "{key} must end with its last deadline (about 1.5 s), not live forever: PTTL {ttl}"
        );
    }
    // The holder and the waiter died: after the deadline only the token counter is left
    // (kept as Redisson keeps it).
    std::thread::sleep(Duration::from_millis(1700)); // the deadline passing, not a sync
    let left: Vec<String> = keys_with_ttl(&name)
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k != &token)
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Read-write lock with holder information: a reader that died (its lease ran
/// out, no release) while another reader keeps renewing must not leave its entry in the
/// holder information hash for as long as the other holds (a dead reader each time would
/// grow it without bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_readers_holder_information_goes_with_its_lease() {
    let reg = single("holder_info = true").await;
    let key = unique("dead-reader-info");
    // The holders' information is in the rw hash (`i:<owner id>`).
    let rw = format!("lock:{{{key}}}:rw");
    let entries = || {
        cmd(&["HKEYS", &rw])
            .as_array()
            .unwrap_or_default()
            .iter()
            .filter(|f| f.as_str().is_some_and(|f| f.starts_with("i:")))
            .count()
    };
    let dead = reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .lease(Lease::Fixed(Duration::from_millis(600)))
        .acquire()
        .await
        .expect("reader 1");
    std::mem::forget(dead); // dies: no release, no renewal
    let live = reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .acquire()
        .await
        .expect("reader 2 (auto lease, renewed)");
    assert_eq!(entries(), 2, "two readers recorded");
    let gone = eventually(Duration::from_secs(4), || entries() == 1).await;
    let fields = cmd(&["HGETALL", &rw]);
    assert!(
        gone,
        "the dead reader's entry must go with its lease, while the other renews: {fields:?}"
    );
    assert!(live.is_held());
    live.release().await.expect("release");
    assert_eq!(int(&["EXISTS", &rw]), 0, "gone with the last holder");
}

/// Every kind of both formats: holders that died (their guards forgotten: no
/// release, no renewal) and waiters that died (queued, never back) leave only keys that
/// end: every key named after the lock has an expiry, within the longest lease or wait
/// (the token counters: distlock's within its documented retention, 24 h; Redisson's is
/// kept as Redisson keeps it, without one); once those passed, only the counters remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_holders_and_waiters_leave_only_bounded_keys() {
    let distlock = single("holder_info = true").await;
    let redisson = single("protocol = \"redisson\"").await;
    let lease = Lease::Fixed(Duration::from_millis(1500));
    let key = unique("bounded");
    // One lock per kind and format (a read and a write lock of one key would wait).
    let of = |format: &str, kind: LockKind| format!("{key}-{format}-{kind:?}");
    for kind in [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ] {
        for (format, reg) in [("distlock", &distlock), ("redisson", &redisson)] {
            let g = reg
                .lock(of(format, kind))
                .kind(kind)
                .lease(lease)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{format} {kind:?}: {e}"));
            std::mem::forget(g);
        }
    }
    let s = distlock.semaphore(key.as_str(), 2).lease(lease);
    std::mem::forget(s.acquire(1).await.expect("a permit"));
    // Dead waiters, queued for 1 s behind the dead holders and never back: a fair waiter
    // and a waiting writer of distlock's format, a fair waiter of Redisson's.
    let n = names(&of("distlock", LockKind::Fair));
    let queued = pair(eval(
        scripts::FAIR_ACQUIRE,
        &[&n.fair[0], &n.fair[1], &n.fair[2], &n.fence],
        &[B, "10000", "1000", "w1", "0"],
    ));
    assert_eq!(queued.0, 0, "queued: {queued:?}");
    let n = names(&of("distlock", LockKind::Write));
    let waiting = pair(eval(
        scripts::RW_ACQUIRE,
        &[&n.rw[0], &n.rw[1], &n.rw[2], &n.fence],
        &[B, "10000", "write", "1000", "w1", "0"],
    ));
    assert_eq!(waiting.0, 0, "waiting: {waiting:?}");
    let fair = of("redisson", LockKind::Fair);
    let rq = [
        fair.clone(),
        format!("redisson_lock_queue:{{{fair}}}"),
        format!("redisson_lock_timeout:{{{fair}}}"),
        format!("redisson_lock_token:{{{fair}}}"),
    ];
    let rq: Vec<&str> = rq.iter().map(String::as_str).collect();
    let q = pair(eval(
        scripts::REDISSON_FAIR_LOCK,
        &rq,
        &["1500", "dead:1", "1000", "wait"],
    ));
    assert_eq!(q.0, 0, "queued: {q:?}");

    let counter = |k: &str| k.ends_with(":fence") || k.starts_with("redisson_lock_token:");
    let found = keys_with_ttl(&key);
    // 11: distlock's format draws from the server's counter (`lock:{{fence}`), none of its own.
    assert!(found.len() >= 11, "the locks' keys: {found:?}");
    for (k, ttl) in &found {
        if k.ends_with(":fence") {
            assert!(
                *ttl > 0 && *ttl <= 86_400_000,
                "{k}: the counter's retention is 24 h: PTTL {ttl}"
            );
        } else if !counter(k) {
            assert!(
                *ttl > 0 && *ttl <= 3_000,
                "{k}: must end with the longest lease or wait: PTTL {ttl}"
            );
        }
    }
    let gone = eventually(Duration::from_secs(6), || {
        keys_with_ttl(&key).iter().all(|(k, _)| counter(k))
    })
    .await;
    let left = keys_with_ttl(&key);
    assert!(gone, "left after every lease and wait: {left:?}");
}

/// An acquire run again, Redisson's format: its scripts count a re-entry on the owner's field
/// and have no per-acquisition mark, so a run again cannot be told from a re-entry (so those
/// calls are never re-sent). A re-entry never hands out the counter's value:
/// a nested acquisition's guard carries its outer hold's token.
#[tokio::test]
async fn a_redisson_reentry_carries_the_outer_token() {
    let reg = single("protocol = \"redisson\"").await;
    for kind in [LockKind::Reentrant, LockKind::Fair, LockKind::Write] {
        let key = unique(&format!("redisson-reentry-{kind:?}"));
        let outer = reg
            .lock(key.as_str())
            .kind(kind)
            .acquire()
            .await
            .expect("outer");
        let other = reg
            .lock(format!("{key}-other"))
            .acquire()
            .await
            .expect("another lock");
        let inner = outer
            .scope(reg.lock(key.as_str()).kind(kind).acquire())
            .await
            .expect("inner");
        assert_eq!(
            inner.fencing_token(),
            outer.fencing_token(),
            "{kind:?}: the outer's token"
        );
        inner.release().await.expect("inner release");
        outer.release().await.expect("outer release");
        other.release().await.expect("other release");
    }
}
