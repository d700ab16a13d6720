use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", permits = 4)]
async fn permits_without_kind() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "fair", permits = 4)]
async fn permits_with_another_kind() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "semaphore")]
async fn semaphore_without_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "semaphore", permits = 0)]
async fn zero_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "semaphore", permits = "4")]
async fn permits_not_an_integer() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "semaphore", permits = 2.5)]
async fn permits_a_float() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "semaphore", permits = 4, on_lost = "signal")]
async fn semaphore_with_signal() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], kind = "semaphore", permits = 4)]
async fn semaphore_with_keys() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
