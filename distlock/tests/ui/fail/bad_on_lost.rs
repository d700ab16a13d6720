use distlock::distributed_lock;

#[distributed_lock(key = "transfer:<from>", on_lost = "retry")]
async fn transfer(from: u64) -> Result<(), distlock::LockError> {
    let _ = from;
    Ok(())
}

fn main() {}
