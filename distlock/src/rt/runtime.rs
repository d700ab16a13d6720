//! distlock's background runtime: a few dedicated threads (as many as the machine has
//! cores, at least 2 and at most 4), started once per process when the first
//! [`Registry`](crate::Registry) connects.
//!
//! Backends are connected on it, so their connections' driver tasks, the watchdog, the
//! subscribers and the background releases of dropped guards all live there, not on the
//! runtime that happened to call `init`. A lock can then be used from any Tokio runtime in
//! the process (every `#[tokio::test]` has its own), and keeps working after the runtime
//! that ran `init` has shut down.
//!
//! The commands themselves are sent from the caller's task (no hop to another thread on the
//! hot path), polled with the background runtime *entered*: whatever the client library
//! creates while sending (a reconnection, a timer, a task that drains the late answers of
//! a quorum) is created on the background runtime too.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;

use tokio::runtime::{Handle, Runtime};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

thread_local! {
    /// The runtime of the task [`on_background_runtime`] is polling, while it polls (the background
    /// runtime is the current one then).
    static CALLER: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// The runtime of the caller that [`on_background_runtime`] is polling now, if any: a direct connection
/// (`backend/direct.rs`) registered with it is driven by the caller's own thread.
pub(crate) fn caller() -> Option<Handle> {
    CALLER.with(|c| c.borrow().clone())
}

/// The background runtime, started on first use. Fails only when the OS refuses a thread.
pub(crate) fn handle() -> std::io::Result<&'static Handle> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt.handle());
    }
    // More than one, so that one busy connection (or subscriber) does not hold up the
    // others' replies and wake-ups; idle workers cost nothing.
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("distlock-background")
        .enable_all()
        .build()?;
    // Two threads may race to build one; the loser's runtime is dropped here. It has no
    // tasks, and a runtime may be dropped outside async code only, which is where we are
    // unless called from a runtime; `shutdown_background` is safe in both.
    if let Err(rt) = RUNTIME.set(rt) {
        rt.shutdown_background();
    }
    RUNTIME
        .get()
        .map(Runtime::handle)
        .ok_or_else(|| std::io::Error::other("the background runtime was not set"))
}

/// Run `fut` in the caller's task, polled with the background runtime entered: tasks,
/// timers and sockets it creates belong to the background runtime. Before any registry
/// connected (no background runtime yet) it is polled as is. While it polls, [`caller`]
/// names the caller's runtime (an enclosing `on_background_runtime`'s caller when nested).
pub(crate) async fn on_background_runtime<F: Future>(fut: F) -> F::Output {
    /// Puts the previous caller back, however the poll ends.
    struct Restore(Option<Option<Handle>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(previous) = self.0.take() {
                CALLER.with(|c| *c.borrow_mut() = previous);
            }
        }
    }
    let handle = RUNTIME.get().map(Runtime::handle);
    let mut fut = pin!(fut);
    std::future::poll_fn(|cx| {
        let _restore = CALLER.with(|c| {
            let mut c = c.borrow_mut();
            if c.is_some() {
                Restore(None)
            } else {
                let caller = Handle::try_current().ok();
                Restore(Some(std::mem::replace(&mut *c, caller)))
            }
        });
        let _entered = handle.map(Handle::enter);
        fut.as_mut().poll(cx)
    })
    .await
}

/// Run `fut` as a task of the background runtime and wait for it from the caller's
/// runtime. Dropping the returned future aborts the task.
pub(crate) async fn run<F>(fut: F) -> std::io::Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for AbortOnDrop<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = AbortOnDrop(handle()?.spawn(fut));
    match (&mut task.0).await {
        Ok(out) => Ok(out),
        Err(e) => Err(std::io::Error::other(format!(
            "a task of distlock's background runtime ended abnormally: {e}"
        ))),
    }
}
