use distlock::{distributed_lock, LockError};

// `kind` is a name: "fair", "read", "write" or "reentrant" (quoted or bare).
#[distributed_lock(key = "a", kind = 2)]
async fn numbered() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "a", kind = Read)]
async fn capitalised() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
