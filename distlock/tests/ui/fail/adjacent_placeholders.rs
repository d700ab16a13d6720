use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "pair:<a><b>")]
async fn pair(a: u32, b: u32) -> Result<(), LockError> {
    let _ = (a, b);
    Ok(())
}

fn main() {}
