use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "a", kind = "fair")]
async fn fair() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = "read")]
async fn read() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = write)]
async fn write() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
