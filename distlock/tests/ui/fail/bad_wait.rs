use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", wait = "5 seconds")]
async fn spaces() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", wait = "5")]
async fn no_unit() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", wait = 5)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
