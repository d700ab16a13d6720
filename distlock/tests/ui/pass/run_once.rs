use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "nightly-report", wait = "0s", lease = "10m", hold_at_least = "30s")]
async fn nightly_report() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "cleanup:<shard>", wait = "0s", lease = "auto", hold_at_least = "1h")]
async fn cleanup(shard: u32) -> Result<u32, LockError> {
    Ok(shard)
}

#[distributed_lock(key = "exact", lease = "30s", hold_at_least = "30s", kind = "reentrant")]
async fn as_long_as_the_lease() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = nightly_report();
    let _ = cleanup(1);
    let _ = as_long_as_the_lease();
}
