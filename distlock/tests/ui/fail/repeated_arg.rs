use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", wait = "1s", wait = "2s")]
async fn place_order() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", key = "b")]
async fn two_keys() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
