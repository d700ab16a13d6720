//! Every bound a script enforces is checked before any backend, so the memory backend and
//! a real redis-server answer the same calls alike: the same error variant, naming the
//! key and the backend, with nothing taken on either.

mod common;

use std::time::Duration;

use distlock::{Lease, LockError, Registry};

/// The variant's name (`InvalidPermits`, ...), or `Ok`.
fn variant<T>(r: &Result<T, LockError>) -> String {
    let name = match r {
        Ok(_) => "Ok",
        Err(LockError::InvalidPermits { .. }) => "InvalidPermits",
        Err(LockError::InvalidDuration { .. }) => "InvalidDuration",
        Err(LockError::InvalidKey { .. }) => "InvalidKey",
        Err(LockError::Backend { .. }) => "Backend",
        Err(LockError::Unsupported { .. }) => "Unsupported",
        Err(LockError::Timeout { .. }) => "Timeout",
        Err(e) => return format!("another error: {e}"),
    };
    name.to_owned()
}

/// One call with arguments out of some bound, on `reg`: its outcome, and whether the error
/// names the key and the backend `main`.
async fn call(reg: &Registry, case: &str, key: &str) -> (String, bool) {
    let named = |r: &Result<(), LockError>| match r {
        Err(e) => {
            e.backend() == Some("main") && (e.key() == Some(key) || e.to_string().contains(key))
        }
        Ok(()) => true,
    };
    let r: Result<(), LockError> = match case {
        "semaphore of 3000000000 permits" => {
            reg.semaphore(key, 3_000_000_000).acquire(1).await.map(drop)
        }
        "semaphore of 2147483648 permits, taking all" => reg
            .semaphore(key, 2_147_483_648)
            .acquire(2_147_483_648)
            .await
            .map(drop),
        "semaphore of u32::MAX permits, try-once" => {
            reg.semaphore(key, u32::MAX).try_acquire(1).await.map(drop)
        }
        "semaphore of 0 permits" => reg.semaphore(key, 0).acquire(1).await.map(drop),
        "semaphore: 0 permits taken" => reg.semaphore(key, 3).acquire(0).await.map(drop),
        "semaphore: more permits than it has" => reg.semaphore(key, 3).acquire(4).await.map(drop),
        "semaphore lease over a day" => reg
            .semaphore(key, 3)
            .lease(Lease::Fixed(Duration::from_secs(86_401)))
            .acquire(1)
            .await
            .map(drop),
        "lock lease of 0" => reg
            .lock(key)
            .lease(Lease::Fixed(Duration::ZERO))
            .acquire()
            .await
            .map(drop),
        "lock lease over a day" => reg
            .lock(key)
            .lease(Lease::Fixed(Duration::from_secs(86_401)))
            .acquire()
            .await
            .map(drop),
        "hold_at_least over the lease" => reg
            .lock(key)
            .lease(Lease::Fixed(Duration::from_secs(1)))
            .hold_at_least(Duration::from_secs(2))
            .acquire()
            .await
            .map(drop),
        "fence ttl of 0" => reg
            .fence(key)
            .ttl(Duration::ZERO)
            .set("v", 1)
            .await
            .map(drop),
        "fence ttl over 365 days" => reg
            .fence(key)
            .ttl(Duration::from_secs(366 * 86_400))
            .set("v", 1)
            .await
            .map(drop),
        other => panic!("no case {other}"),
    };
    let n = named(&r);
    (variant(&r), n)
}

const CASES: [&str; 12] = [
    "semaphore of 3000000000 permits",
    "semaphore of 2147483648 permits, taking all",
    "semaphore of u32::MAX permits, try-once",
    "semaphore of 0 permits",
    "semaphore: 0 permits taken",
    "semaphore: more permits than it has",
    "semaphore lease over a day",
    "lock lease of 0",
    "lock lease over a day",
    "hold_at_least over the lease",
    "fence ttl of 0",
    "fence ttl over 365 days",
];

/// The same calls out of bounds on memory and on a real redis-server: the same error
/// variant on both (never `Ok` on one), naming the key and the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_refuse_the_same_calls_alike() {
    let memory = common::backend::memory().await;
    let single = common::backend::single().await;
    let mut differ = Vec::new();
    for case in CASES {
        let key = common::unique("bounds");
        let (on_memory, memory_named) = call(&memory, case, &key).await;
        let (on_single, single_named) = call(&single, case, &key).await;
        println!("{case}: memory {on_memory}, single {on_single}");
        if on_memory != on_single || on_memory == "Ok" {
            differ.push(format!("{case}: memory {on_memory}, single {on_single}"));
        }
        if !memory_named || !single_named {
            differ.push(format!(
                "{case}: the error does not name the key and the backend (memory {memory_named}, single {single_named})"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
