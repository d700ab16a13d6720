use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", hold_at_least = "soon")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", hold_at_least = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", hold_at_least = 30)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "10s", hold_at_least = "30s")]
async fn longer_than_the_lease() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "fair", hold_at_least = "30s")]
async fn fair() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], hold_at_least = "30s")]
async fn several_keys() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
