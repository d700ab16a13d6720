use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", lease = "forever")]
async fn words() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", lease = "30x")]
async fn unit() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
