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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_backend_may_be_down_at_start_and_is_connected_later() {
    let port = distlock_tests::allocate_port();
    let url = format!("redis://127.0.0.1:{port}");
    let toml = format!(
        "[defaults]\nbackend = \"main\"\n[backends.main]\nmode = \"memory\"\n{}",
        single("reports", &url, "required = false")
    );

    // Strict by default: the same configuration without `required = false` fails init,
    // naming the backend and the address.
    let strict = toml.replace("required = false", "");
    let e = Registry::from_str(&strict)
        .await
        .expect_err("a required backend is down");
    let text = e.to_string();
    assert!(
        text.contains("reports") && text.contains(&format!("127.0.0.1:{port}")),
        "{text}"
    );

    let started = Instant::now();
    let reg = Registry::from_str(&toml)
        .await
        .expect("an optional backend may be down");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "init waited {:?}",
        started.elapsed()
    );
    // The other backend works; the optional one fails at once, saying why.
    reg.lock("a")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let e = reg
        .lock("b")
        .backend("reports")
        .acquire()
        .await
        .expect_err("not connected yet");
    match &e {
        LockError::Backend {
            backend,
            address,
            source,
            ..
        } => {
            assert_eq!(backend, "reports");
            assert_eq!(address, &format!("127.0.0.1:{port}"));
            assert!(source.is_transient(), "{source:?}");
        }
        other => panic!("expected a Backend error, got {other:?}"),
    }
    assert!(e.to_string().contains("reports"), "{e}");

    // The server comes up: the backend is connected in the background and works.
    let _redis = RedisProcess::start_on_port(port, &[]);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        match reg
            .lock("b")
            .backend("reports")
            .wait(Duration::ZERO)
            .acquire()
            .await
        {
            Ok(g) => {
                assert!(g.fencing_token() >= 1);
                g.release().await.unwrap();
                break;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "never connected: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn optional_backend_still_checks_the_configuration() {
    // `required = false` forgives an unreachable server, not a bad configuration.
    let e = Registry::from_str("[backends.m]\nmode = \"memory\"\nrequired = false\n")
        .await
        .expect_err("memory takes no `required`");
    assert!(e.to_string().contains("required"), "{e}");
}
