//! A release wakes the waiters of other registries (other processes) at once, whatever
//! either side's backend does about hand-off: a waiter of every kind of reentrant
//! acquisition (hand-off on or off, a run-once job's, on every Redis mode) leaves its
//! registry's tag in the lock when refused, and a release publishes when a tag is there.
//! A release nobody waited for publishes nothing (`server_cost.rs` counts it).
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod common;

use std::time::{Duration, Instant};

use common::unique;
use distlock::{Lease, Registry};
use distlock_tests::{cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls};
use distlock_tests::{single_url, RedisProcess};

/// The `[backends.main]` body of each Redis mode over the test servers.
fn modes() -> Vec<(&'static str, String)> {
    vec![
        (
            "single",
            format!("mode = \"single\"\nurl = \"{}\"\n", single_url()),
        ),
        (
            "cluster",
            format!(
                "mode = \"cluster\"\nnodes = [{}]\n",
                common::quoted(&cluster_urls())
            ),
        ),
        (
            "sentinel",
            format!(
                "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n",
                sentinel_master_name(),
                common::quoted(&sentinel_urls())
            ),
        ),
        (
            "redlock",
            common::backend::quorum_body("redlock", &redlock_urls(), "200ms"),
        ),
        (
            "multi",
            common::backend::quorum_body("multi", &redlock_urls()[..3], "200ms"),
        ),
    ]
}

async fn registry(body: &str, extra: &str) -> Registry {
    Registry::from_str(&format!("[backends.main]\n{body}{extra}"))
        .await
        .unwrap_or_else(|e| {
            panic!("connect ({body}{extra}; scripts/test.sh starts the servers): {e}")
        })
}

/// How the waiter's acquisition is made.
#[derive(Debug, Clone, Copy)]
enum Waiter {
    /// A plain acquisition on a backend that hands off (where the mode does).
    Plain,
    /// On a backend with `handoff = false`.
    Barging,
    /// A run-once job's (`hold_at_least`), which never takes a hand-off.
    RunOnce,
}

/// Held with a 20 s lease by one registry, the lock is released while a waiter of another
/// registry sleeps: the waiter holds it well before the lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_wakes_a_waiter_of_another_registry_at_once_on_every_mode() {
    for (mode, body) in modes() {
        let holder = registry(&body, "").await;
        for waiter in [Waiter::Plain, Waiter::Barging, Waiter::RunOnce] {
            let extra = match waiter {
                Waiter::Barging => "handoff = false\n",
                Waiter::Plain | Waiter::RunOnce => "",
            };
            let other = registry(&body, extra).await;
            let key = unique("wake-up");
            let held = holder
                .lock(key.as_str())
                .lease(Lease::Fixed(Duration::from_secs(20)))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{mode}: hold: {e}"));
            let task = tokio::spawn({
                let (other, key) = (other.clone(), key.clone());
                async move {
                    let lock = other
                        .lock(key.as_str())
                        .wait(Duration::from_secs(10))
                        .lease(Lease::Fixed(Duration::from_secs(5)));
                    let lock = match waiter {
                        Waiter::RunOnce => lock.hold_at_least(Duration::from_millis(1)),
                        Waiter::Plain | Waiter::Barging => lock,
                    };
                    let g = lock.acquire().await;
                    (Instant::now(), g.map(|g| g.fencing_token()))
                }
            });
            common::wait_for_waiter(&other, &key).await;
            // Refused at least once and asleep: its tag is in the lock by now.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let released = Instant::now();
            held.release()
                .await
                .unwrap_or_else(|e| panic!("{mode}: release: {e}"));
            let (at, got) = task.await.expect("join");
            assert!(got.is_ok(), "{mode} {waiter:?}: {got:?}");
            let after = at.saturating_duration_since(released);
            assert!(
                after < Duration::from_secs(2),
                "{mode} {waiter:?}: the waiter held it {after:?} after the release (lease 20 s)"
            );
        }
    }
}

/// Waiters of one registry, with hand-off and without: a release wakes one of them, whose
/// acquisition leaves no tag for the others asleep; the releases after it publish for them
/// all the same (the releasing backend sees its own waiters), and the waiter whose place
/// came too late for a hand-off hears a later release (the tags stay through hand-offs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_one_registry_take_the_lock_in_turn_without_a_lease_running_out() {
    let server = RedisProcess::start();
    let body = format!("mode = \"single\"\nurl = \"{}\"\n", server.url());
    for extra in ["", "handoff = false\n"] {
        let reg = registry(&body, extra).await;
        let key = unique("one-registry");
        let start = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (reg, key) = (reg.clone(), key.clone());
                tokio::spawn(async move {
                    for _ in 0..50 {
                        let g = reg
                            .lock(key.as_str())
                            .wait(Duration::from_secs(10))
                            .lease(Lease::Fixed(Duration::from_secs(20)))
                            .acquire()
                            .await
                            .expect("acquire within the wait");
                        tokio::task::yield_now().await;
                        g.release().await.expect("release");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("join");
        }
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "{extra:?}: 400 turns took {:?}: a waiter slept until a lease's end",
            start.elapsed()
        );
    }
}
