use distlock::{distributed_lock, LockError};

#[distributed_lock(wait = "1s")]
async fn place_order(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
async fn no_arguments() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
