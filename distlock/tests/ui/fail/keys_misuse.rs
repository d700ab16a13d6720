use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", keys = ["b", "c"])]
async fn both(x: u8) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = [])]
async fn empty() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = "a")]
async fn not_an_array() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", 1])]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a:<x>", "a:<x>"])]
async fn repeated(x: u8) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], kind = "fair")]
async fn with_kind() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["a:<x>", "b:<y>"])]
async fn unknown_placeholder(x: u8) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
