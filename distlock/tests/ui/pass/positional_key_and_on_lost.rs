use distlock::{distributed_lock, LockError};

// The key may come first without its name.
#[distributed_lock("account:<id>")]
async fn balance(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock("account:<id>", wait = "1s", on_lost = "signal")]
async fn debit(id: u64) -> Result<bool, LockError> {
    Ok(distlock::lease_lost().is_lost())
}

#[distributed_lock(key = "account:<id>", on_lost = "cancel")]
async fn credit(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        distlock::init_from_str("[backends.m]\nmode = \"memory\"")
            .await
            .unwrap();
        assert_eq!(balance(3).await.unwrap(), 3);
        assert!(!debit(3).await.unwrap());
        assert_eq!(credit(4).await.unwrap(), 4);
    });
}
