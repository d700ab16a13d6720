//! A command connection that hangs — every byte dropped, no FIN, no RST, as when a NAT or a
//! load balancer forgets a flow — must be found dead and replaced within a bound, so the
//! locks come back while the server is perfectly reachable on a new connection. Private
//! server behind the fault proxy.

use std::time::{Duration, Instant};

use distlock::Registry;
use distlock_tests::proxy::Proxy;
use distlock_tests::RedisProcess;

/// The backend's response timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// How soon the locks must work again: a few response timeouts and a reconnect (generous).
const BOUND: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dropped_command_connection_is_replaced() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"{}ms\"\nconnect_timeout = \"300ms\"\n",
        proxy.url(),
        RESPONSE_TIMEOUT.as_millis()
    ))
    .await
    .unwrap();
    // Every connection that has sent a lock script (the command connections) goes silent
    // for good; new connections work.
    let g = reg.lock("hung").acquire().await.unwrap();
    g.release().await.unwrap();
    let silenced = proxy.silence_flows_that_sent(b"FCALL");
    assert!(silenced >= 1, "a command connection was silenced");
    let start = Instant::now();
    let mut errors = Vec::new();
    loop {
        match reg.lock("hung").try_acquire().await {
            Ok(Some(g)) => {
                let _ = g.release().await;
                break;
            }
            Ok(None) => errors.push("busy".to_string()),
            Err(e) => errors.push(e.to_string()),
        }
        assert!(
            start.elapsed() < BOUND,
            "no lock {BOUND:?} after the connection went silent ({} attempts; last: {:?})",
            errors.len(),
            errors.last()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "locks again {:?} after the connection went silent ({} failed attempts)",
        start.elapsed(),
        errors.len()
    );
}
