//! The transfer scenario: debit, an `.await`, credit, under `#[distributed_lock]` with an
//! auto-lease; the lease is lost between debit and credit, by a force-unlock or by the
//! redis-server restarting (a private one). With `on_lost = "cancel"` (the default) the
//! body is dropped at its `.await`: the debit stays done and the credit never happens,
//! which is why a body must be cancel-safe (a transaction, or fenced writes). With
//! `on_lost = "signal"` the body runs on, sees the loss through `distlock::lease_lost()`,
//! and undoes its debit before returning `LeaseLost`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use distlock::{distributed_lock, LockError, Registry};
use distlock_tests::RedisProcess;
use tokio::sync::Notify;

/// Two accounts, and the points where the test steps in.
struct Ledger {
    balances: [AtomicI64; 2],
    debited: Notify,
    proceed: Notify,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            balances: [AtomicI64::new(1000), AtomicI64::new(2000)],
            debited: Notify::new(),
            proceed: Notify::new(),
        }
    }

    fn total(&self) -> i64 {
        self.balances.iter().map(|b| b.load(Ordering::SeqCst)).sum()
    }

    fn add(&self, account: usize, amount: i64) {
        self.balances[account].fetch_add(amount, Ordering::SeqCst);
    }
}

/// Debit, wait (a slow call to another service), credit. Before the credit it checks the
/// lease; if it was lost, it undoes the debit (it only gets there with `on_lost = "signal"`).
async fn steps(ledger: &Ledger, from: usize, to: usize, amount: i64) -> Result<(), LockError> {
    ledger.add(from, -amount);
    ledger.debited.notify_one();
    ledger.proceed.notified().await;
    if let Err(lost) = distlock::lease_lost().check() {
        ledger.add(from, amount);
        return Err(lost);
    }
    ledger.add(to, amount);
    Ok(())
}

#[distributed_lock(key = "transfer:<from>", lease = "auto", wait = "5s")]
async fn transfer_cancel(
    ledger: &Ledger,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<(), LockError> {
    steps(ledger, from, to, amount).await
}

#[distributed_lock(
    key = "transfer:<from>",
    lease = "auto",
    wait = "5s",
    on_lost = "signal"
)]
async fn transfer_signal(
    ledger: &Ledger,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<(), LockError> {
    steps(ledger, from, to, amount).await
}

#[derive(Clone, Copy, Debug)]
enum Loss {
    ForceUnlock,
    Restart,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OnLost {
    Cancel,
    Signal,
}

/// Run one transfer of 5 from account 0 to 1, lose the lease after the debit, and return
/// the call's result and the ledger.
async fn scenario(on_lost: OnLost, loss: Loss) -> (Result<(), LockError>, Ledger) {
    let mut server = RedisProcess::start();
    let registry = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"300ms\"\nresponse_timeout = \"300ms\"\n",
        server.url()
    ))
    .await
    .expect("connect to the private server");
    let ledger = Ledger::new();
    let call = async {
        match on_lost {
            OnLost::Cancel => transfer_cancel(&ledger, 0, 1, 5).await,
            OnLost::Signal => transfer_signal(&ledger, 0, 1, 5).await,
        }
    };
    let test = async {
        ledger.debited.notified().await;
        assert_eq!(ledger.total(), 2995, "debited, not yet credited");
        match loss {
            Loss::ForceUnlock => {
                let existed = registry
                    .lock("transfer:0")
                    .force_unlock()
                    .await
                    .expect("force-unlock");
                assert!(existed);
            }
            Loss::Restart => server.restart(),
        }
        // The holder hears of it (at once since revocation messages and run-id checks; at
        // the latest at its next renewal) and lets go of the lease.
        let deadline = Instant::now() + Duration::from_secs(10);
        while registry.watched_leases("main") != Some(0) {
            assert!(
                Instant::now() < deadline,
                "the loss was not noticed within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ledger.proceed.notify_one();
    };
    let (result, ()) = tokio::join!(registry.scope(call), test);
    (result, ledger)
}

fn assert_lost(result: &Result<(), LockError>) {
    match result {
        Err(LockError::LeaseLost {
            key,
            backend,
            reason,
            ..
        }) => {
            assert_eq!(key, "transfer:0");
            assert_eq!(backend, "main");
            // Heard at once (a revocation message, a new server run id) or at a renewal.
            assert!(
                reason.contains("gone") || reason.contains("watchdog"),
                "{reason}"
            );
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

#[tokio::test]
async fn cancel_after_a_force_unlock_leaves_half_a_transfer() {
    let (result, ledger) = scenario(OnLost::Cancel, Loss::ForceUnlock).await;
    assert_lost(&result);
    // The body was dropped at its `.await`: the debit stays, the credit never ran.
    assert_eq!(
        ledger.total(),
        2995,
        "5 units vanished: the body was not cancel-safe"
    );
}

#[tokio::test]
async fn cancel_after_a_restart_leaves_half_a_transfer() {
    let (result, ledger) = scenario(OnLost::Cancel, Loss::Restart).await;
    assert_lost(&result);
    assert_eq!(
        ledger.total(),
        2995,
        "5 units vanished: the body was not cancel-safe"
    );
}

#[tokio::test]
async fn signal_after_a_force_unlock_lets_the_body_undo_its_debit() {
    let (result, ledger) = scenario(OnLost::Signal, Loss::ForceUnlock).await;
    assert_lost(&result);
    assert_eq!(ledger.total(), 3000);
    assert_eq!(ledger.balances[0].load(Ordering::SeqCst), 1000);
}

#[tokio::test]
async fn signal_after_a_restart_lets_the_body_undo_its_debit() {
    let (result, ledger) = scenario(OnLost::Signal, Loss::Restart).await;
    assert_lost(&result);
    assert_eq!(ledger.total(), 3000);
}

#[tokio::test]
async fn without_a_loss_both_complete() {
    for on_lost in [OnLost::Cancel, OnLost::Signal] {
        let server = RedisProcess::start();
        let registry = Registry::from_str(&format!(
            "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
            server.url()
        ))
        .await
        .expect("connect");
        let ledger = Ledger::new();
        ledger.proceed.notify_one();
        let result = registry
            .scope(async {
                match on_lost {
                    OnLost::Cancel => transfer_cancel(&ledger, 0, 1, 5).await,
                    OnLost::Signal => transfer_signal(&ledger, 0, 1, 5).await,
                }
            })
            .await;
        result.unwrap_or_else(|e| panic!("{on_lost:?}: {e}"));
        assert_eq!(ledger.balances[1].load(Ordering::SeqCst), 2005);
        assert_eq!(ledger.total(), 3000);
    }
}
