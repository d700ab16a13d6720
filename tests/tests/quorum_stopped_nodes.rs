//! A quorum backend whose every node hangs (SIGSTOP: connected, silent): every request to
//! the nodes (acquire, its undo, release, renewal) is bounded by `node_timeout`, never by
//! the connection's much longer `response_timeout`. Each test owns private servers (it
//! stops them) and continues them (SIGCONT) at its end, also when it fails.

mod common;
mod quorum_common;

use std::time::{Duration, Instant};

use distlock::{Lease, Registry};
use distlock_tests::RedisProcess;
use quorum_common::*;

/// `node_timeout` of the backends here, and the connections' `response_timeout`: far
/// apart, so that a request bounded by the latter is told from one bounded by the former.
const NODE_TIMEOUT_MS: u64 = 200;
const RESPONSE_TIMEOUT_S: u64 = 8;
/// A generous bound on a decision that `node_timeout` bounds: well above it (the two
/// rounds an attempt may make, scheduling on a shared machine), well below
/// `response_timeout`.
const DECIDED_WITHIN: Duration = Duration::from_secs(3);

async fn connect_over(mode: &str, servers: &[RedisProcess], watchdog: &str) -> Registry {
    let toml = format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\n[backends.main]\nmode = \"{mode}\"\nnodes = [{}]\n\
         node_timeout = \"{NODE_TIMEOUT_MS}ms\"\nretry_delay = \"20ms\"\n\
         response_timeout = \"{RESPONSE_TIMEOUT_S}s\"\nconnect_timeout = \"500ms\"\n",
        common::quoted(&urls_of(servers))
    );
    Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("connect {mode}: {e}"))
}

/// `release()` with every node stopped fails (nothing confirmed it) within `node_timeout`,
/// on redlock and on multi.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_with_every_node_stopped_is_decided_within_the_node_timeout() {
    for mode in ["redlock", "multi"] {
        let servers = private_servers(3);
        let reg = connect_over(mode, &servers, "30s").await;
        let key = common::unique("stopped-release");
        let guard = reg
            .lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_secs(30)))
            .acquire()
            .await
            .expect("acquire");
        let stopped = Stopped::all(&servers);
        let start = Instant::now();
        let result = guard.release().await;
        let took = start.elapsed();
        drop(stopped);
        println!("{mode}: release with every node stopped: {result:?} after {took:?}");
        assert!(result.is_err(), "{mode}: no node confirmed the release");
        assert!(
            took < DECIDED_WITHIN,
            "{mode}: the release waited {took:?} for stopped nodes (node_timeout {NODE_TIMEOUT_MS} ms)"
        );
    }
}

/// An acquisition with every node stopped: the attempt fails in `node_timeout`, and its
/// undo (of what the stopped nodes may have granted) does not keep the caller waiting
/// longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_with_every_node_stopped_is_decided_within_the_node_timeout() {
    for mode in ["redlock", "multi"] {
        let servers = private_servers(3);
        let reg = connect_over(mode, &servers, "30s").await;
        let key = common::unique("stopped-acquire");
        let stopped = Stopped::all(&servers);
        let start = Instant::now();
        let result = reg.lock(key.as_str()).try_acquire().await;
        let took = start.elapsed();
        drop(stopped);
        println!(
            "{mode}: try_acquire with every node stopped: {:?} after {took:?}",
            result.as_ref().map(|g| g.is_some())
        );
        assert!(
            !matches!(result, Ok(Some(_))),
            "{mode}: acquired with every node stopped"
        );
        assert!(
            took < DECIDED_WITHIN,
            "{mode}: the failed attempt took {took:?} (node_timeout {NODE_TIMEOUT_MS} ms)"
        );
    }
}

/// With every node stopped, the watchdog's renewals fail within `node_timeout` each, so
/// it signals the loss before the lease can end on the servers (3 s after the
/// acquisition), not after the connection's response time-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_signals_the_loss_before_the_lease_ends_with_every_node_stopped() {
    for mode in ["redlock", "multi"] {
        let servers = private_servers(3);
        let reg = connect_over(mode, &servers, "3s").await;
        let key = common::unique("stopped-renew");
        let acquired = Instant::now();
        let guard = reg.lock(key.as_str()).acquire().await.expect("acquire");
        let stopped = Stopped::all(&servers);
        let lost = tokio::time::timeout(Duration::from_secs(30), guard.lost()).await;
        let after = acquired.elapsed();
        drop(stopped);
        println!("{mode}: lease lost {after:?} after the acquisition");
        assert!(lost.is_ok(), "{mode}: the loss was never signalled");
        assert!(
            after < Duration::from_secs(3),
            "{mode}: the loss was signalled {after:?} after the acquisition, past the 3 s lease"
        );
        drop(guard);
    }
}
