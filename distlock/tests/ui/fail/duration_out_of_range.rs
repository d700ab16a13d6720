use distlock::{distributed_lock, LockError};

// Durations the builders refuse (one table for every entry point) are refused at the
// token: a lease over 24 h, a hold_at_least over 24 h.
#[distributed_lock(key = "a", lease = "25h")]
async fn day_and_more() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", hold_at_least = "24h1ms")]
async fn run_once_too_long() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
