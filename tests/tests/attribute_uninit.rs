//! `#[distributed_lock]` before `distlock::init`: the call returns `NotInitialized` without
//! running the body. A test binary of its own, since nothing in it may call `init`.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use distlock::{distributed_lock, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

static RAN: AtomicBool = AtomicBool::new(false);

#[distributed_lock(key = "attr:uninit:<id>", wait = "1s")]
async fn before_init(id: u64) -> Result<u64, AppError> {
    RAN.store(true, SeqCst);
    Ok(id)
}

#[test]
fn calling_before_init_returns_not_initialized() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        match before_init(1).await {
            Err(AppError::Lock(LockError::NotInitialized)) => {}
            other => panic!("expected NotInitialized, got {other:?}"),
        }
        assert!(!RAN.load(SeqCst), "the body ran without a lock");
        assert!(distlock::Registry::global().is_none());
    });
}
