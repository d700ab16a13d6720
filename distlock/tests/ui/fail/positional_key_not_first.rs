use distlock::distributed_lock;

#[distributed_lock(wait = "1s", "account:<id>")]
async fn debit(id: u64) -> Result<(), distlock::LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
