//! Shared by `runtimes.rs` and `runtimes_after_shutdown.rs`: one configuration with every
//! Redis mode, and one exercise of a mode (annotated function, `Lock`, a waiter woken by a
//! release, an auto-lease renewed by the watchdog, a guard released in the background).

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, Lock, LockError};
use distlock_tests::{cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url};

/// The backends of [`all_modes_config`], named after their modes.
pub const MODES: [&str; 5] = ["single", "cluster", "sentinel", "redlock", "multi"];

/// `watchdog_timeout`: an auto-lease held longer than this was renewed.
pub const WATCHDOG_TIMEOUT: Duration = Duration::from_secs(1);

fn list(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One backend per Redis mode, on the shared test servers; `single` is the default.
pub fn all_modes_config() -> String {
    let redlock = list(&redlock_urls());
    format!(
        r#"
[defaults]
backend = "single"
watchdog_timeout = "1s"
key_prefix = "rt-test:"

[backends.single]
mode = "single"
url = "{single}"

[backends.cluster]
mode = "cluster"
nodes = [{cluster}]

[backends.sentinel]
mode = "sentinel"
master_name = "{master}"
sentinels = [{sentinels}]

[backends.redlock]
mode = "redlock"
nodes = [{redlock}]

[backends.multi]
mode = "multi"
nodes = [{redlock}]
"#,
        single = single_url(),
        cluster = list(&cluster_urls()),
        master = sentinel_master_name(),
        sentinels = list(&sentinel_urls()),
    )
}

async fn body() -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok(distlock::fencing_token().expect("inside the lock"))
}

#[distributed_lock(key = "<key>", backend = "single", wait = "10s")]
async fn on_single(key: &str) -> Result<u64, LockError> {
    body().await
}

#[distributed_lock(key = "<key>", backend = "cluster", wait = "10s")]
async fn on_cluster(key: &str) -> Result<u64, LockError> {
    body().await
}

#[distributed_lock(key = "<key>", backend = "sentinel", wait = "10s")]
async fn on_sentinel(key: &str) -> Result<u64, LockError> {
    body().await
}

#[distributed_lock(key = "<key>", backend = "redlock", wait = "10s")]
async fn on_redlock(key: &str) -> Result<u64, LockError> {
    body().await
}

#[distributed_lock(key = "<key>", backend = "multi", wait = "10s")]
async fn on_multi(key: &str) -> Result<u64, LockError> {
    body().await
}

/// The annotated function of `mode`.
pub async fn annotated(mode: &str, key: &str) -> Result<u64, LockError> {
    match mode {
        "single" => on_single(key).await,
        "cluster" => on_cluster(key).await,
        "sentinel" => on_sentinel(key).await,
        "redlock" => on_redlock(key).await,
        "multi" => on_multi(key).await,
        other => panic!("no backend {other}"),
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A key of its own for every call.
fn fresh_key(mode: &str) -> String {
    format!(
        "rt:{mode}:{}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Everything a test does with a lock, on the backend named `mode`, from the runtime this
/// runs on. `long`: hold an auto-lease past `watchdog_timeout` (the watchdog renews it).
pub async fn exercise(mode: &str, long: bool) {
    let key = fresh_key(mode);

    // The attribute.
    let token = annotated(mode, &key)
        .await
        .unwrap_or_else(|e| panic!("{mode}: the annotated function failed: {e}"));
    assert!(token >= 1, "{mode}: fencing token {token}");

    // The builder; another owner finds it held.
    let guard = Lock::new(key.as_str())
        .backend(mode)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{mode}: acquire: {e}"));
    let other = {
        let (k, m) = (key.clone(), mode.to_owned());
        tokio::spawn(async move { Lock::new(k).backend(m).try_acquire().await })
            .await
            .expect("the other task")
            .unwrap_or_else(|e| panic!("{mode}: try_acquire: {e}"))
    };
    assert!(other.is_none(), "{mode}: another owner got a held lock");

    // A waiter, woken when the lock is released.
    let waiter = {
        let (k, m) = (key.clone(), mode.to_owned());
        tokio::spawn(async move {
            Lock::new(k)
                .backend(m)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    if long {
        tokio::time::sleep(WATCHDOG_TIMEOUT + WATCHDOG_TIMEOUT / 2).await;
        assert!(
            guard.is_held(),
            "{mode}: the auto-lease was not renewed past watchdog_timeout"
        );
    }
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{mode}: release: {e}"));
    let next = waiter
        .await
        .expect("the waiter task")
        .unwrap_or_else(|e| panic!("{mode}: the waiter did not get the lock: {e}"));
    assert!(next.fencing_token() > token, "{mode}: tokens grow");

    // Dropped: released in the background (on distlock's runtime); then free again.
    drop(next);
    let again = Lock::new(key.as_str())
        .backend(mode)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{mode}: acquire after a dropped guard: {e}"));
    again
        .release()
        .await
        .unwrap_or_else(|e| panic!("{mode}: last release: {e}"));
}
