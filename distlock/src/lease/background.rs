//! The background work of one backend (releases of dropped guards, undos of acquisitions
//! cut short, queue cancels, hand-offs), counted while it runs so that a graceful shutdown
//! (`crate::upkeep::shutdown`) can wait for it.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Background work of one backend still running (see `crate::upkeep::shutdown`): counted from
/// when it is handed to the runtime until it ends or is dropped.
#[derive(Debug, Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// One piece of background work counted in a [`Background`] while it lives.
#[derive(Debug)]
pub(crate) struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Count one piece of work until the returned token is dropped (for work that is not
    /// a task of its own, e.g. a release kept in a queue to be sent again).
    pub(crate) fn start(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::AcqRel);
        Running(self.clone())
    }

    /// Spawn `fut` on `runtime`, counted until it ends (or is dropped: a runtime shutting
    /// down drops it).
    pub(crate) fn spawn<F>(self: &Arc<Self>, runtime: &tokio::runtime::Handle, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let running = self.start();
        drop(runtime.spawn(async move {
            let _running = running;
            fut.await;
        }));
    }

    /// How many pieces of work run now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Resolves when no work runs (at once if none does).
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            notified.await;
        }
    }
}
