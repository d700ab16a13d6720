//! Fenced values on redlock and multi: a write is refused as stale when any node that
//! answered holds a newer token, and a write that was not stored (stale, or failed) never
//! becomes what a read returns, later either: it is undone on every node that took it.

mod common;
mod quorum_common;

use std::time::{Duration, Instant};

use distlock::{LockError, Registry};
use distlock_tests::redlock_urls;
use quorum_common::*;

/// The fenced hash of `key` (default prefix).
fn fenced_of(key: &str) -> String {
    format!("lock:{{{key}}}:fenced")
}

/// `(value, token)` stored under the fenced hash of `key` on the node of `url`.
fn stored_on(url: &str, key: &str) -> Option<(String, String)> {
    let reply = on(url, &["HMGET", &fenced_of(key), "v", "t"]);
    let items = reply.as_array()?;
    Some((items[0].as_str()?.to_owned(), items[1].as_str()?.to_owned()))
}

/// A holder with token 100 wrote, and the write reached one node of three (as a write
/// that failed with `QuorumNotReached` and whose node kept it). A stale holder with
/// token 60 is then refused (`Ok(false)`), though two nodes would take its write; those
/// two do not keep it, and a read returns the token-100 value. Redlock and multi, on 3 of
/// the shared masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_is_stale_when_any_node_that_answered_holds_a_newer_token() {
    let urls = redlock_urls()[..3].to_vec();
    for mode in ["redlock", "multi"] {
        let reg = connect(mode, &urls, "200ms").await;
        let key = common::unique("fence-stale-minority");
        on(
            &urls[0],
            &["HSET", &fenced_of(&key), "v", "newer", "t", "100"],
        );
        let stale = reg.fence(key.as_str()).set("stale", 60).await;
        println!("{mode}: token 60 after token 100 on one node of three: {stale:?}");
        assert!(
            matches!(stale, Ok(false)),
            "{mode}: the stale write was not refused: {stale:?}"
        );
        for url in &urls[1..] {
            assert_ne!(
                stored_on(url, &key),
                Some(("stale".into(), "60".into())),
                "{mode}: the refused write stayed on {url}"
            );
        }
        let read = reg.fence(key.as_str()).get().await.expect("get");
        let read = read.map(|f| (String::from_utf8_lossy(&f.value).into_owned(), f.token));
        assert_eq!(read, Some(("newer".into(), 100)), "{mode}");
        for url in &urls {
            on(url, &["DEL", &fenced_of(&key)]);
        }
    }
}

async fn connect_with_long_responses(mode: &str, urls: &[String]) -> Registry {
    let toml = format!(
        "[backends.main]\nmode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\n\
         retry_delay = \"20ms\"\nresponse_timeout = \"8s\"\nconnect_timeout = \"500ms\"\n",
        common::quoted(urls)
    );
    Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("connect {mode}: {e}"))
}

/// A fenced write that fails (two of three nodes hang: `QuorumNotReached`) does not
/// become visible once the nodes answer again: the nodes that took it, or took it late,
/// put back what it replaced; a read returns nothing, and an older token's write is then
/// stored. Private nodes (stopped with SIGSTOP, continued at the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_that_failed_never_becomes_visible_later() {
    for mode in ["redlock", "multi"] {
        let servers = private_servers(3);
        let urls = urls_of(&servers);
        let reg = connect_with_long_responses(mode, &urls).await;
        let key = common::unique("fence-failed");
        let stopped = Stopped::all(&servers[1..]);
        let failed = reg.fence(key.as_str()).set("new", 100).await;
        println!("{mode}: token 100 with two nodes of three stopped: {failed:?}");
        assert!(
            matches!(failed, Err(LockError::QuorumNotReached { .. })),
            "{mode}: {failed:?}"
        );
        drop(stopped);
        // The stopped nodes run what was sent to them meanwhile once continued.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen: Vec<_> = urls.iter().map(|u| stored_on(u, &key)).collect();
            if seen.iter().all(Option::is_none) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{mode}: the failed write is still stored 5 s after the nodes came back: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            reg.fence(key.as_str()).get().await.expect("get"),
            None,
            "{mode}: a read returns the failed write"
        );
        assert!(
            matches!(reg.fence(key.as_str()).set("older", 60).await, Ok(true)),
            "{mode}: an older token's write after the failed one"
        );
        let read = reg.fence(key.as_str()).get().await.expect("get");
        assert_eq!(read.map(|f| f.token), Some(60), "{mode}");
    }
}
