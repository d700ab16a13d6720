//! distlock in one screen, on the in-process memory backend (no Redis needed):
//! `cargo run -p distlock-examples --bin quickstart`.
//!
//! For Redis, change the configuration to `mode = "single"`, `url = "redis://127.0.0.1:6379/0"`
//! (or keep it in a `distlock.toml` and call `distlock::init().await?`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, Lease, Lock, LockError};

const CONFIG: &str = r#"
[defaults]
wait = "5s"
lease = "auto"

[backends.main]
mode = "memory"
"#;

/// A counter updated with a deliberately racy read-modify-write: only correct if the
/// calls are mutually exclusive.
static BALANCE: AtomicU64 = AtomicU64::new(0);

/// The attribute: the body runs only while this task holds the lock `account:<id>`, and the
/// lock is released on every way out. `Err(LockError::Timeout)` if not acquired in `wait`.
#[distributed_lock(key = "account:<id>", wait = "5s", lease = "auto")]
async fn deposit(id: u64, amount: u64) -> Result<u64, LockError> {
    let before = BALANCE.load(Ordering::SeqCst);
    tokio::task::yield_now().await; // let others interleave, if the lock let them
    BALANCE.store(before + amount, Ordering::SeqCst);
    let _ = id;
    Ok(before + amount)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    distlock::init_from_str(CONFIG).await?;
    println!("distlock quickstart (memory backend: locks are per process)");

    // 1. The builder: acquire, use, release.
    let guard = Lock::new("report:daily")
        .wait(Duration::from_secs(1))
        .lease(Lease::Auto)
        .acquire()
        .await?;
    println!(
        "1. acquired `report:daily`, fencing token {}",
        guard.fencing_token()
    );

    // While it is held, another owner (a spawned task is a separate owner) times out.
    let other = tokio::spawn(async {
        Lock::new("report:daily")
            .wait(Duration::from_millis(100))
            .acquire()
            .await
    })
    .await?;
    match other {
        Err(LockError::Timeout { waited, .. }) => {
            println!("2. a second owner timed out after {waited:?}, as it should")
        }
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("a second owner acquired a held lock".into()),
    }
    guard.release().await?;
    let again = Lock::new("report:daily")
        .try_acquire()
        .await?
        .ok_or("the released lock could not be taken again")?;
    println!(
        "3. released; taken again with fencing token {} (tokens only grow)",
        again.fencing_token()
    );
    drop(again); // dropping a guard releases in the background

    // 2. The attribute: 200 concurrent deposits with a racy read-modify-write.
    let tasks: Vec<_> = (0..200).map(|_| tokio::spawn(deposit(7, 1))).collect();
    for task in tasks {
        task.await??;
    }
    let balance = BALANCE.load(Ordering::SeqCst);
    println!("4. 200 concurrent #[distributed_lock] deposits of 1: balance {balance}");
    if balance != 200 {
        return Err(format!("lost updates: balance {balance}, expected 200").into());
    }
    println!("ok");
    Ok(())
}
