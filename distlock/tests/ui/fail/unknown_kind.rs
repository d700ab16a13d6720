use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", kind = "exclusive")]
async fn place_order() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
