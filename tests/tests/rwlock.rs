//! Read-write locks (`LockKind::Read` / `LockKind::Write`) on one real redis-server and on
//! the memory backend. Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod common;

use common::*;
use distlock::{LockError, LockKind, Registry};
use distlock_tests::single_url;

async fn single() -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n",
        single_url()
    ))
    .await
    .expect("connect to the test redis-server")
}

async fn memory() -> Registry {
    Registry::from_str(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"memory\"\n",
    )
    .await
    .expect("memory backend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_readers_overlap() {
    readers_overlap(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_readers_overlap() {
    readers_overlap(&memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_writers_exclude() {
    writers_exclude(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_writers_exclude() {
    writers_exclude(&memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_writer_not_starved() {
    writer_not_starved(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_writer_not_starved() {
    writer_not_starved(&memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_crashed_reader_expires() {
    crashed_reader_expires(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_crashed_reader_expires() {
    crashed_reader_expires(&memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_downgrade() {
    downgrade_and_tokens(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_downgrade() {
    downgrade_and_tokens(&memory().await).await;
}

/// redlock/multi refuse fair and read-write locks with `Unsupported`, naming kind and mode.
#[tokio::test]
async fn quorum_modes_are_unsupported() {
    let urls = distlock_tests::redlock_urls();
    let nodes = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"redlock\"\nnodes = [{nodes}]\n"
    ))
    .await
    .expect("connect to the redlock test servers");
    for kind in [LockKind::Fair, LockKind::Read, LockKind::Write] {
        let err = reg
            .lock(unique("quorum").as_str())
            .kind(kind)
            .try_acquire()
            .await
            .expect_err("unsupported");
        assert!(matches!(err, LockError::Unsupported { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(kind.name()) && text.contains("redlock"),
            "{text}"
        );
    }
}

/// On a Redis Cluster every key of a read-write lock is in one slot: the same scripts run
/// there, releases are announced with SPUBLISH.
async fn cluster() -> Registry {
    let nodes = distlock_tests::cluster_urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"cluster\"\nnodes = [{nodes}]\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    ))
    .await
    .expect("connect to the test cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_writers_exclude() {
    writers_exclude(&cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_writer_not_starved() {
    writer_not_starved(&cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_crashed_reader_expires() {
    crashed_reader_expires(&cluster().await).await;
}

/// Through Sentinel, with `sync_replicas = 1`: every acquisition (of either kind) is sent
/// with WAIT, as for the reentrant lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_with_sync_replicas() {
    let list = distlock_tests::sentinel_urls()
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let reg = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{list}]\nsync_replicas = 1\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n",
        distlock_tests::sentinel_master_name()
    ))
    .await
    .expect("connect to the test sentinels' master");
    readers_overlap(&reg).await;
    writers_exclude(&reg).await;
}
