//! A graceful shutdown (`Registry::shutdown`) against the shared single server, with a
//! holder that is slow between letting go of its guard and the release being queued: the
//! log line a dropped guard writes in between takes 50 ms here (a slow log sink, or a
//! thread preempted on a loaded machine). The shutdown must still send that release
//! before it returns; otherwise a process that exits right after it leaves the lock
//! taken for its whole lease.

mod common;

use std::time::Duration;

use common::unique;
use distlock::{Lease, Registry};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// What the dropped guard logs between giving the lease up and queueing its release.
const SLOW_LINE: &str = "guard dropped; releasing in the background";

/// A subscriber that writes nothing and takes 50 ms over each event whose message
/// contains `SLOW_LINE`.
struct SlowAtLine;

struct Message(bool);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" && format!("{value:?}").contains(SLOW_LINE) {
            self.0 = true;
        }
    }
}

impl Subscriber for SlowAtLine {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && metadata.level() <= &tracing::Level::DEBUG
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(false);
        event.record(&mut message);
        if message.0 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn single() -> String {
    format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        distlock_tests::single_url()
    )
}

/// The holder drops its guard when `lost()` tells it of the shutdown (as a locked section
/// does); the shutdown returns only once that release was sent: a peer takes the lock at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_when_told_of_the_shutdown_is_released_before_it_returns() {
    tracing::subscriber::set_global_default(SlowAtLine).expect("the only subscriber");
    let peer = Registry::from_str(&single()).await.expect("peer");
    for round in 0..3 {
        let key = unique("shutdown-slow-holder");
        let registry = Registry::from_str(&single()).await.expect("registry");
        let guard = registry
            .lock(key.as_str())
            .lease(Lease::Auto)
            .acquire()
            .await
            .expect("acquired");
        let holder = tokio::spawn(async move {
            let lost = guard.lost().await;
            drop(guard);
            lost
        });
        registry.shutdown().await;
        let taken = peer.lock(key.as_str()).try_acquire().await.expect("asked");
        assert!(
            taken.is_some(),
            "round {round}: the shutdown returned with the dropped guard's release not sent; the lock stays taken for its lease"
        );
        holder.await.expect("the holder task");
    }
}
