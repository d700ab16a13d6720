//! `kind = "fair" | "read" | "write"` (quoted or bare) compile and run on the memory backend.
use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "doc:<id>", kind = "read", wait = "5s")]
async fn read_doc(id: u32) -> Result<u64, LockError> {
    // A read lock nested in another read lock of the same key re-enters.
    Ok(distlock::fencing_token().unwrap_or(0) + u64::from(id) * 0)
}

#[distributed_lock(key = "doc:<id>", kind = write, lease = "30s")]
async fn write_doc(id: u32) -> Result<u64, LockError> {
    // The writer may read (a downgrade): same task, same key.
    read_doc(id).await?;
    Ok(distlock::fencing_token().unwrap_or(0))
}

#[distributed_lock(key = "queue", kind = "fair", wait = "0s")]
async fn fair() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        distlock::init_from_str("[backends.local]\nmode = \"memory\"")
            .await
            .unwrap();
        let r = read_doc(1).await.unwrap();
        let w = write_doc(1).await.unwrap();
        assert!(w > r);
        fair().await.unwrap();
    });
}
