//! The same behaviours on the in-process `memory` backend.

mod common;

use std::time::Duration;

use common::*;
use distlock::Registry;

async fn registry() -> Registry {
    Registry::from_str(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"memory\"\n",
    )
    .await
    .expect("memory backend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion() {
    exclusion_16_tasks(&registry().await).await;
}

#[tokio::test]
async fn try_acquire_and_timeout() {
    try_and_timeout(&registry().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_handed_the_lock_promptly() {
    let mut times = hand_off(&registry().await, 50).await;
    let p50 = percentile(&mut times, 0.5);
    let max = percentile(&mut times, 1.0);
    println!("memory: hand-off over 50 rounds: p50 {p50:?}, max {max:?}");
    assert!(p50 < Duration::from_millis(5), "p50 {p50:?}");
    assert!(max < Duration::from_millis(100), "max {max:?}");
}

#[tokio::test]
async fn auto_lease_is_renewed() {
    auto_lease_outlives_watchdog(&registry().await).await;
}

#[tokio::test]
async fn fixed_lease_runs_out() {
    fixed_lease_expires(&registry().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing() {
    fencing_tokens_grow(&registry().await).await;
}

#[tokio::test]
async fn lost_when_deleted_behind_its_back() {
    deleted_lock_is_lost(&registry().await).await;
}

#[tokio::test]
async fn dropped_guard_is_released() {
    dropped_guard_frees(&registry().await).await;
}

#[tokio::test]
async fn reentrant_in_task_scope() {
    reentrancy(&registry().await).await;
}

#[tokio::test]
async fn run_holds_and_releases() {
    run_releases(&registry().await).await;
}

#[tokio::test]
async fn error_messages() {
    errors_name_things(&registry().await).await;
}
