//! Read-write locks (`LockKind::Read` / `LockKind::Write`): the nested and sibling rules on
//! one real redis-server and on the memory backend, and `sync_replicas` through Sentinel.
//! The shared read-write scenarios run on every backend from the table in `matrix.rs`.
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod common;
#[allow(dead_code)]
mod scenarios;

use common::backend::{memory, single};
use common::*;
use distlock::{LockError, LockKind, Registry};
use distlock_tests::single_url;
use scenarios::{readers_overlap, writers_exclude};

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

/// A nested `Write` or `Read` in the task of an outer `Write` whose hold
/// vanished (force unlock) fails with `LeaseLost`, tells the outer guard, and re-creates
/// nothing: another owner can take the write lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_nested_rw_of_a_vanished_write_is_lost() {
    let reg = single().await;
    let rw_hash = |key: &str| format!("lock:{{{key}}}:rw");
    nested_rw_of_a_vanished_write_is_lost(&reg, |key| {
        distlock_tests::resp_command(
            &distlock_tests::addr_of(&single_url()),
            &["EXISTS", &rw_hash(key)],
        )
        .expect("EXISTS")
        .as_int()
        .expect("an integer")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_nested_rw_of_a_vanished_write_is_lost() {
    nested_rw_of_a_vanished_write_is_lost(&memory().await, |_| 0).await;
}

/// A reader's place in the readers' set left without its count in the record (the record
/// deleted behind the holder, or the two keys deleted one at a time around a read) holds
/// nothing: the holder hears its lease lost at the next renewal, and a writer gets in at
/// once, not at the end of the reader's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_a_reader_left_out_of_the_record_keeps_no_writer_out() {
    use distlock::Lease;
    use std::time::Duration;
    let (holder, other) = (single().await, single().await);
    let addr = distlock_tests::addr_of(&single_url());
    for lease in [Lease::Fixed(Duration::from_secs(20)), Lease::Auto] {
        let key = unique("reader-out-of-record");
        let read = holder
            .lock(key.as_str())
            .kind(LockKind::Read)
            .lease(lease)
            .acquire()
            .await
            .expect("read");
        distlock_tests::resp_command(&addr, &["DEL", &format!("lock:{{{key}}}:rw")])
            .expect("DEL the record");
        if lease == Lease::Auto {
            let lost = tokio::time::timeout(Duration::from_secs(3), read.lost()).await;
            assert!(lost.is_ok(), "{lease:?}: the holder hears its read lost");
        }
        let write = other
            .lock(key.as_str())
            .kind(LockKind::Write)
            .try_acquire()
            .await
            .expect("try write");
        assert!(write.is_some(), "{lease:?}: a writer gets in at once");
        drop(write);
        drop(read);
    }
}

/// Sibling futures (`join!`) under one outer `Write` take the nested
/// write (or read) lock in turns: never two inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_rw_siblings_take_turns() {
    rw_siblings_take_turns(&single().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_rw_siblings_take_turns() {
    rw_siblings_take_turns(&memory().await).await;
}

async fn nested_rw_of_a_vanished_write_is_lost(reg: &Registry, exists: impl Fn(&str) -> i64) {
    use std::time::Duration;
    for (outer_kind, inner) in [
        (LockKind::Write, LockKind::Write),
        (LockKind::Write, LockKind::Read),
        (LockKind::Read, LockKind::Read),
        (LockKind::Read, LockKind::Write),
    ] {
        let key = unique("nested-rw-vanished");
        let outer = reg
            .lock(key.as_str())
            .kind(outer_kind)
            .lease(distlock::Lease::Fixed(Duration::from_secs(10)))
            .acquire()
            .await
            .expect("outer");
        // a nested acquisition while the hold is there re-enters it (a write inside a
        // read is refused at once: there is no upgrade)
        let again = outer
            .scope(reg.lock(key.as_str()).kind(inner).try_acquire())
            .await;
        let upgrade = outer_kind == LockKind::Read && inner == LockKind::Write;
        match again {
            Ok(Some(again)) if !upgrade => again.release().await.expect("release nested"),
            Err(LockError::NestedKind {
                held: LockKind::Read,
                asked: LockKind::Write,
                ..
            }) if upgrade => {}
            other => panic!(
                "{outer_kind:?} > {inner:?}: {:?}",
                other.map(|g| g.map(|g| g.fencing_token()))
            ),
        }
        assert!(outer.is_held(), "{inner:?}: the outer hold stays");
        assert!(reg
            .lock(key.as_str())
            .kind(LockKind::Write)
            .force_unlock()
            .await
            .expect("force"));
        let nested = outer
            .scope(reg.lock(key.as_str()).kind(inner).acquire())
            .await;
        assert!(
            matches!(nested, Err(LockError::LeaseLost { .. })),
            "{outer_kind:?} > {inner:?}: {:?}",
            nested.as_ref().map(|g| g.fencing_token())
        );
        assert!(!outer.is_held(), "{inner:?}: the outer guard heard of it");
        let lost = tokio::time::timeout(Duration::from_secs(1), outer.lost()).await;
        assert!(lost.is_ok(), "{inner:?}: lost() resolved");
        assert_eq!(exists(&key), 0, "{inner:?}: not re-created");
        let other = tokio::spawn({
            let (reg, key) = (reg.clone(), key.clone());
            async move {
                reg.lock(key.as_str())
                    .kind(LockKind::Write)
                    .try_acquire()
                    .await
                    .expect("try")
                    .is_some()
            }
        })
        .await
        .expect("join");
        assert!(other, "{inner:?}: another owner takes the write lock");
        drop(outer);
    }
}

async fn rw_siblings_take_turns(reg: &Registry) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    for second in [LockKind::Write, LockKind::Read] {
        let key = unique("rw-siblings");
        let outer = reg
            .lock(key.as_str())
            .kind(LockKind::Write)
            .acquire()
            .await
            .expect("outer write");
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let entered = Arc::new(AtomicUsize::new(0));
        let section = |kind: LockKind| {
            let (reg, key, inside, most, entered) = (
                reg.clone(),
                key.clone(),
                inside.clone(),
                most.clone(),
                entered.clone(),
            );
            async move {
                let g = reg
                    .lock(key.as_str())
                    .kind(kind)
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
                    .expect("nested");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                entered.fetch_add(1, Ordering::SeqCst);
                // the work of the section (not a synchronisation): siblings must not
                // come in meanwhile
                tokio::time::sleep(Duration::from_millis(50)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release nested");
            }
        };
        outer
            .scope(async { tokio::join!(section(LockKind::Write), section(second)) })
            .await;
        assert_eq!(
            entered.load(Ordering::SeqCst),
            2,
            "{second:?}: both entered"
        );
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "{second:?}: two siblings inside at once"
        );
        assert!(outer.is_held(), "{second:?}");
        outer.release().await.expect("release outer");
    }
}
