//! `kind = "fair_semaphore", permits = N` compiles and runs on the memory backend: at most
//! N bodies at once, waiters served in turn.
use std::sync::atomic::{AtomicUsize, Ordering};

use distlock::{distributed_lock, LockError};

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static MAX: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "api:<tenant>", kind = "fair_semaphore", permits = 2, wait = "10s")]
async fn call_api(tenant: &str) -> Result<(), LockError> {
    let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
    MAX.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    let _ = tenant;
    Ok(())
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        distlock::init_from_str("[backends.local]\nmode = \"memory\"")
            .await
            .unwrap();
        let calls: Vec<_> = (0..6).map(|_| tokio::spawn(call_api("acme"))).collect();
        for c in calls {
            c.await.unwrap().unwrap();
        }
        assert_eq!(MAX.load(Ordering::SeqCst), 2);
    });
}
