//! `mode = "multi"`: a lock on every one of 3 independent masters (all or nothing).
//!
//! Non-destructive tests use 3 of the shared masters (`DISTLOCK_TEST_REDLOCK`, started by
//! `scripts/test.sh`); tests that kill nodes own private servers ([`RedisProcess`]).
//!
//! The shared scenarios (exclusion, timeouts, leases, tokens, reentrancy, ...) run on this
//! backend from the table in `matrix.rs`; this file has the tests of this backend only.

mod common;
mod quorum_common;

use std::time::{Duration, Instant};

use common::*;
use distlock::{InitError, LockError, Registry};
use distlock_tests::{addr_of, redlock_urls};
use quorum_common::*;

fn three() -> Vec<String> {
    redlock_urls()[..3].to_vec()
}

async fn registry() -> Registry {
    backend::multi().await
}

/// Held on every node while held; on none after. The token is the largest counter of the
/// nodes (the others are not raised to it: `multi_tokens.rs`).
#[tokio::test]
async fn held_on_every_node() {
    let reg = registry().await;
    let key = unique("every");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let mut counters = Vec::new();
    for url in three() {
        assert!(holds(&url, &key), "held on {url}");
        counters.push(fence_on(&url, &key));
    }
    assert_eq!(
        counters.iter().copied().max(),
        Some(g.fencing_token()),
        "the token is the largest counter: {counters:?}"
    );
    g.release().await.expect("release");
    for url in three() {
        assert!(!holds(&url, &key), "released on {url}");
    }
}

/// Another owner on 1 of 3 nodes: not acquired (all or nothing), and the 2 grants are
/// released again; the error is a `Timeout`, since every node answered.
#[tokio::test]
async fn all_or_nothing() {
    let reg = registry().await;
    let urls = three();
    let key = unique("all-or-nothing");
    hold_as_other(&urls[2], &key, 10_000);
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("a busy lock is no error")
            .is_none(),
        "held by another owner on one node"
    );
    for url in &urls[..2] {
        assert!(!holds(url, &key), "the grant on {url} was released");
    }
    let err = reg
        .lock(key.as_str())
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .expect_err("held on one node");
    assert!(matches!(err, LockError::Timeout { .. }), "{err}");
    for url in &urls[..2] {
        assert!(!holds(url, &key), "the grant on {url} was released");
    }
    on(&urls[2], &["DEL", &hash_of(&key)]);
    let g = reg.lock(key.as_str()).try_acquire().await.expect("try");
    assert!(g.is_some(), "free on every node again");
}

/// Init needs every node.
#[tokio::test]
async fn init_fails_with_one_node_down() {
    let dead = dead_url();
    let mut urls = redlock_urls()[..2].to_vec();
    urls.push(dead.clone());
    let err = Registry::from_str(&config("multi", &urls, "50ms"))
        .await
        .expect_err("1 of 3 down");
    assert!(matches!(err, InitError::Connect { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("backend `main`"), "{msg}");
    assert!(msg.contains(&addr_of(&dead)), "{msg}");
    assert!(msg.contains("3 of 3 needed"), "{msg}");
}

/// DESTRUCTIVE (private servers): one node down, acquiring fails with `QuorumNotReached`
/// within the wait and leaves no key on the two others; back up, it works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_down_fails_and_leaves_nothing() {
    let mut servers = private_servers(3);
    let urls = urls_of(&servers);
    let reg = connect("multi", &urls, "50ms").await;
    let g = reg
        .lock(unique("up").as_str())
        .acquire()
        .await
        .expect("all up");
    g.release().await.expect("release");

    servers[2].kill();
    let key = unique("one-down");
    let start = Instant::now();
    let err = reg
        .lock(key.as_str())
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .expect_err("a node is down");
    let took = start.elapsed();
    println!("multi: 1 of 3 down: {err} after {took:?}");
    match &err {
        LockError::QuorumNotReached {
            granted,
            needed,
            nodes,
            ..
        } => assert_eq!((*granted, *needed, *nodes), (2, 3, 3)),
        other => panic!("expected QuorumNotReached, got {other}"),
    }
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_millis(700), "{took:?}");
    for url in &urls[..2] {
        assert!(!holds(url, &key), "nothing left on {url}");
    }

    servers[2].restart();
    let took = until_granted(&reg, Duration::from_secs(10)).await;
    println!("multi: granted again {took:?} after the node came back");
}
