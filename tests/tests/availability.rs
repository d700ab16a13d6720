//! A service and a Redis that comes and goes: the first request after the server is back
//! succeeds (the command connection is refreshed as soon as the subscriber sees the server
//! again), and a backend marked `required = false` may be down at start-up.

use std::time::{Duration, Instant};

use distlock::{LockError, Registry};
use distlock_tests::RedisProcess;

fn single(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[backends.{name}]\nmode = \"single\"\nurl = \"{url}\"\nconnect_timeout = \"300ms\"\nresponse_timeout = \"300ms\"\n{extra}\n"
    )
}

/// Poll `f` until it holds, at most `limit`.
async fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_request_after_the_server_is_back_succeeds() {
    let mut redis = RedisProcess::start();
    let reg = Registry::from_str(&single("main", &redis.url(), ""))
        .await
        .unwrap();
    let key = format!("back:{}", std::process::id());
    reg.lock(key.as_str())
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    redis.kill();
    let e = reg
        .lock(key.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("the server is down");
    assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
    // The fault: the server stays down a while, so the command connection's own
    // reconnect attempts (started by that failure) give up before it comes back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = reg.subscriber_connections("main").unwrap();
    redis.restart();
    eventually(Duration::from_secs(10), "the subscriber reconnects", || {
        reg.subscriber_connections("main").unwrap() > seen
    })
    .await;

    // No wait: the very first attempt must succeed.
    let guard = reg
        .lock(key.as_str())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("the first request after the server is back");
    guard.release().await.unwrap();
}
