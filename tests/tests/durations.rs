//! Every duration is validated alike in every entry point, before anything is sent: a lease
//! (fixed: 1 ms to 24 h), a fence ttl (1 ms to 365 days), `hold_at_least`; on a real single
//! server and on the memory backend. (The attribute's cases are the macros' UI tests, the
//! TOML's the configuration tests, the command's the CLI tests.)

mod common;

use std::time::Duration;

use common::unique;
use distlock::{Lease, LockError, Registry};
use distlock_tests::{addr_of, resp_command, single_url, RespValue};

async fn registries() -> Vec<(&'static str, Registry)> {
    let single = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .unwrap();
    let memory = Registry::from_str(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"memory\"\n",
    )
    .await
    .unwrap();
    vec![("single", single), ("memory", memory)]
}

/// `InvalidDuration` naming `key`, backend `main`, and `what`.
fn assert_invalid<T: std::fmt::Debug>(mode: &str, r: Result<T, LockError>, key: &str, what: &str) {
    match r {
        Err(e @ LockError::InvalidDuration { .. }) => {
            let text = e.to_string();
            assert!(text.contains(key), "{mode}: names the key: {text}");
            assert!(text.contains("`main`"), "{mode}: names the backend: {text}");
            assert!(text.contains(what), "{mode}: names the {what}: {text}");
        }
        other => panic!("{mode}: expected InvalidDuration for {what}, got {other:?}"),
    }
}

#[tokio::test]
async fn leases_shorter_than_a_millisecond_are_refused_by_every_builder() {
    for (mode, reg) in registries().await {
        for lease in [Duration::ZERO, Duration::from_micros(500)] {
            let key = unique("zero-lease");
            let r = reg
                .lock(key.as_str())
                .lease(Lease::Fixed(lease))
                .acquire()
                .await;
            assert_invalid(mode, r, &key, "lease");
            let r = reg
                .lock(key.as_str())
                .lease(Lease::Fixed(lease))
                .try_acquire()
                .await;
            assert_invalid(mode, r, &key, "lease");
            let r = reg
                .semaphore(key.as_str(), 2)
                .lease(Lease::Fixed(lease))
                .acquire(1)
                .await;
            assert_invalid(mode, r, &key, "lease");
            let r = reg
                .lock_all([key.as_str(), "other"])
                .lease(Lease::Fixed(lease))
                .acquire()
                .await;
            assert_invalid(mode, r, "", "lease");
            // Nothing was taken: the key is free for a valid lease.
            let g = reg
                .lock(key.as_str())
                .lease(Lease::Fixed(Duration::from_secs(5)))
                .try_acquire()
                .await
                .unwrap()
                .expect("free");
            g.release().await.unwrap();
        }
        // Too long: refused as before, with the same kind of error.
        let key = unique("day-lease");
        let r = reg
            .lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_secs(25 * 3600)))
            .acquire()
            .await;
        assert_invalid(mode, r, &key, "lease");
    }
}

#[tokio::test]
async fn a_hold_at_least_below_a_millisecond_is_refused() {
    for (mode, reg) in registries().await {
        let key = unique("hold");
        let r = reg
            .lock(key.as_str())
            .hold_at_least(Duration::from_micros(300))
            .acquire()
            .await;
        assert_invalid(mode, r, &key, "hold_at_least");
    }
}

#[tokio::test]
async fn a_fence_ttl_out_of_range_is_refused_and_nothing_is_written() {
    for (mode, reg) in registries().await {
        for ttl in [
            Duration::MAX,
            Duration::from_secs(400 * 86_400),
            Duration::ZERO,
        ] {
            let key = unique("fence-max");
            let fence = reg.fence(key.as_str());
            // The memory backend panicked (`Instant + Duration::MAX`); Redis wrote the
            // value, then failed to set its expiry (a value that never expires).
            let r = fence.clone().ttl(ttl).set("v", 7).await;
            assert_invalid(mode, r, &key, "fence ttl");
            assert_eq!(fence.get().await.unwrap(), None, "{mode}: nothing written");
        }
        // The longest ttl is accepted.
        let key = unique("fence-year");
        let fence = reg.fence(key.as_str());
        assert!(fence
            .clone()
            .ttl(distlock::config::MAX_FENCE_TTL)
            .set("v", 7)
            .await
            .unwrap());
        assert_eq!(fence.get().await.unwrap().unwrap().token, 7);
    }
}

/// The fence script itself checks the ttl before its first write (a caller that skipped
/// the client's check, or another client of the script, cannot make a value immortal).
#[test]
fn the_fence_script_checks_its_ttl_before_writing() {
    let addr = addr_of(&single_url());
    let script = include_str!("../../distlock/src/protocol/fence.lua");
    let key = unique("fence-script");
    for ttl in ["18446744073709551615", "99999999999999999", "-5", "1.5"] {
        let r = resp_command(&addr, &["EVAL", script, "1", &key, "v", "5", ttl]);
        assert!(matches!(r, Ok(RespValue::Error(_))), "ttl {ttl}: {r:?}");
        let exists = resp_command(&addr, &["EXISTS", &key]);
        assert!(
            matches!(exists, Ok(RespValue::Integer(0))),
            "ttl {ttl}: nothing written: {exists:?}"
        );
    }
    // A valid one writes value and expiry together.
    let r = resp_command(&addr, &["EVAL", script, "1", &key, "v", "5", "60000"]);
    assert!(matches!(r, Ok(RespValue::Array(_))), "{r:?}");
    let ttl = resp_command(&addr, &["PTTL", &key]);
    assert!(
        matches!(ttl, Ok(RespValue::Integer(t)) if t > 0 && t <= 60_000),
        "{ttl:?}"
    );
    let _ = resp_command(&addr, &["DEL", &key]);
}

/// On redlock and multi a lease is valid for `lease − elapsed − (lease × drift_factor +
/// 2 ms)`: a fixed lease of 2 ms or less can never be granted. It is refused as a bad
/// duration naming the shortest one that leaves anything (3 ms), before anything is sent,
/// rather than failing every attempt with `QuorumNotReached`.
#[tokio::test]
async fn a_lease_shorter_than_the_quorum_drift_allowance_is_refused() {
    let nodes: Vec<String> = distlock_tests::redlock_urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect();
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"redlock\"\nnodes = [{}]\n",
        nodes.join(", ")
    ))
    .await
    .unwrap();
    let key = unique("drift-short");
    let attempt = |ms| {
        reg.lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_millis(ms)))
            .wait(Duration::from_secs(1))
            .acquire()
    };
    for ms in [1, 2] {
        let r = attempt(ms).await;
        if let Err(LockError::InvalidDuration { min, .. }) = &r {
            assert_eq!(
                *min,
                Duration::from_millis(3),
                "the shortest lease that leaves any"
            );
        }
        assert_invalid("redlock", r, &key, "drift");
    }
    let g = attempt(50).await;
    assert!(g.is_ok(), "a 50 ms lease is taken: {g:?}");
}
