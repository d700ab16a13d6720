//! A lost reply: the acquire script ran on the server, the connection was reset before the
//! reply reached the client (the fault proxy), and the request was retried.
//!
//! Found by `scripts/torture.sh reset` (token regressions). The acquire's first attempt
//! fails with a connection error although the server granted it; its next attempt within
//! `wait` (same owner id) re-enters the lock the first attempt was granted: the guard gets
//! fencing token 0 and the reentrancy count is left at 2, so the release does not free
//! the lock (it stays held until its lease runs out). (With `wait = 0` the acquire fails,
//! and the lock granted to nobody stays held until its lease runs out.) Fixed: every acquisition carries a level id
//! that a second run of its script finds.

use std::time::Duration;

use distlock::Registry;
use distlock_tests::proxy::Proxy;
use distlock_tests::RedisProcess;

#[tokio::test]
async fn acquire_retried_after_a_lost_reply_gets_a_real_token_and_frees_on_release() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"5s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"500ms\"\n",
        proxy.url()
    ))
    .await
    .unwrap();
    let first = reg.lock("k").acquire().await.unwrap();
    let t1 = first.fencing_token();
    first.release().await.unwrap();
    // Another owner (straight to the server) holds it for 500 ms; our acquire waits
    // through the proxy, and the reply to its attempt once the lease ran out is lost.
    let direct = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        server.url()
    ))
    .await
    .unwrap();
    let _held = direct
        .lock("k")
        .lease(distlock::Lease::Fixed(Duration::from_millis(500)))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let reg = reg.clone();
        tokio::spawn(async move { reg.lock("k").wait(Duration::from_secs(5)).acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.reset_after_replies(1);
    let g = waiter.await.unwrap().expect("acquire after a lost reply");
    let token = g.fencing_token();
    g.release().await.unwrap();
    // Freed: another owner gets it at once.
    let other = reg.lock("k").try_acquire().await.unwrap();
    let freed = other.is_some();
    assert!(
        token > t1 && freed,
        "token {token} after {t1}; freed on release: {freed}"
    );
}
