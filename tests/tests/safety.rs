//! Safety properties (issue "safety hardening"): each test failed before its fix, on a real
//! redis-server (`scripts/test.sh`) and, where it applies, on the memory backend.

mod common;

use std::time::Duration;

use common::unique;
use distlock::{Lease, LockKind, Registry};
use distlock_tests::{addr_of, resp_command, single_url};

/// `watchdog_timeout` short, so a nested auto lease renews many times within a test.
const SHORT_WATCHDOG: &str = "300ms";

fn config(backend: &str) -> String {
    format!("[defaults]\nwatchdog_timeout = \"{SHORT_WATCHDOG}\"\n[backends.main]\n{backend}")
}

async fn single() -> Registry {
    let url = single_url();
    Registry::from_str(&config(&format!(
        "mode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    )))
    .await
    .expect("connect to the test redis-server")
}

async fn memory() -> Registry {
    Registry::from_str(&config("mode = \"memory\"\n"))
        .await
        .expect("memory backend")
}

fn pttl(hash: &str) -> i64 {
    resp_command(&addr_of(&single_url()), &["PTTL", hash])
        .expect("PTTL")
        .as_int()
        .expect("PTTL is an integer")
}

/// Another owner (a spawned task is one) tries to take `key` once.
async fn other_owner_gets(reg: &Registry, key: &str, kind: LockKind) -> bool {
    let (reg, key) = (reg.clone(), key.to_owned());
    tokio::spawn(async move {
        reg.lock(key.as_str())
            .kind(kind)
            .lease(Lease::Fixed(Duration::from_secs(5)))
            .try_acquire()
            .await
            .expect("try_acquire")
            .is_some()
    })
    .await
    .expect("task")
}

/// Outer `Fixed(10s)`, nested `Auto` (watchdog 300ms) renewed several times, then returned:
/// the outer lease must still be ~10s, and no other owner may take the lock while the
/// outer guard holds it (item 1: renewal only ever extends).
/// `on_server`: the lock lives on the single test server (its PTTL is checked there too).
async fn nested_auto_never_shortens(reg: &Registry, kind: LockKind, on_server: bool) {
    let key = unique("nested-auto");
    let hash = match kind {
        LockKind::Read | LockKind::Write => format!("lock:{{{key}}}:rw"),
        _ => format!("lock:{{{key}}}"),
    };
    let outer = reg
        .lock(key.as_str())
        .kind(kind)
        .lease(Lease::Fixed(Duration::from_secs(10)))
        .acquire()
        .await
        .expect("outer acquire");
    outer
        .scope(async {
            let inner = reg
                .lock(key.as_str())
                .kind(kind)
                .lease(Lease::Auto)
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("nested acquire re-enters");
            // Several renewals (every third of 300ms).
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert!(inner.is_held(), "the nested auto lease is renewed");
            inner.release().await.expect("nested release");
        })
        .await;
    if on_server {
        let left = pttl(&hash);
        assert!(
            left > 5_000,
            "after nested auto renewals the outer Fixed(10s) lease has only {left} ms left on the server"
        );
    }
    // Past the nested watchdog lease: the outer Fixed(10s) must still exclude others.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(outer.is_held(), "the outer guard says held");
    // Readers share: a writer is the other owner a read lock must exclude.
    let probe = if matches!(kind, LockKind::Read) {
        LockKind::Write
    } else {
        kind
    };
    assert!(
        !other_owner_gets(reg, &key, probe).await,
        "another owner acquired {key} while the outer Fixed(10s) guard holds it"
    );
    outer.release().await.expect("outer release");
}

#[tokio::test]
async fn renewal_never_shortens_single() {
    nested_auto_never_shortens(&single().await, LockKind::Reentrant, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_single_write() {
    nested_auto_never_shortens(&single().await, LockKind::Write, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_single_read() {
    nested_auto_never_shortens(&single().await, LockKind::Read, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_memory() {
    nested_auto_never_shortens(&memory().await, LockKind::Reentrant, false).await;
}

#[tokio::test]
async fn renewal_never_shortens_memory_write() {
    nested_auto_never_shortens(&memory().await, LockKind::Write, false).await;
}
