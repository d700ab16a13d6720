use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", timeout = "5s")]
async fn place_order() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", reentrant)]
async fn flag() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", wait)]
async fn no_value() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
