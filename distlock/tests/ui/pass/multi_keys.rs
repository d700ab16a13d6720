use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "1s", lease = "auto")]
async fn transfer(from: u64, to: u64) -> Result<(Option<u64>, Option<u64>), LockError> {
    Ok((
        distlock::fencing_token_of(&format!("account:{from}")),
        distlock::fencing_token_of(&format!("account:{to}")),
    ))
}

#[distributed_lock(keys = ["a:<x>"], kind = "reentrant", backend = "main", on_lost = "signal")]
async fn one(x: u8) -> Result<u8, LockError> {
    distlock::lease_lost().check()?;
    Ok(x)
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        distlock::init_from_str("[backends.main]\nmode = \"memory\"")
            .await
            .unwrap();
        let (a, b) = transfer(1, 2).await.unwrap();
        assert!(a.is_some() && b.is_some());
        let (a, b) = transfer(2, 1).await.unwrap();
        assert!(a.is_some() && b.is_some());
        assert_eq!(one(3).await.unwrap(), 3);
        let site = distlock::inspect::sites().find(|s| s.function.ends_with("transfer")).unwrap();
        assert_eq!(site.key, "account:<from>, account:<to>");
    });
}
