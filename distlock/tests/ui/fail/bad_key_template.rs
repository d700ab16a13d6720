use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:<user_id")]
async fn unclosed(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:<>")]
async fn empty(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:<user id>")]
async fn space(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "")]
async fn empty_key(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
