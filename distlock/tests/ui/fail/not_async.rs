use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:<user_id>")]
fn place_order(user_id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
