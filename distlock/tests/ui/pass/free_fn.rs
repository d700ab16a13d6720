//! Free functions, every argument, and what they do at run time.
use distlock::{distributed_lock, LockError};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Invalid(&'static str),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

/// Docs are kept.
#[distributed_lock(key = "order:<user_id>", wait = "5s", lease = "auto")]
pub async fn place_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> {
    if voucher_id == 0 {
        // `return` and `?` in the body have the function's types.
        return Err(AppError::Invalid("no voucher"));
    }
    let token = distlock::fencing_token().ok_or(AppError::Invalid("not locked"))?;
    assert!(token >= 1);
    Ok(user_id * 1000 + voucher_id)
}

#[distributed_lock(
    key = "every:<a>:<b>",
    wait = "1m30s",
    lease = "30s",
    backend = "local",
    kind = "reentrant",
)]
async fn every_argument(a: u32, b: String) -> Result<String, LockError> {
    Ok(format!("{a}{b}"))
}

#[distributed_lock(key = "bare-kind", kind = reentrant, wait = "0s", lease = "250ms")]
async fn bare_kind() -> Result<(), LockError> {
    Ok(())
}

// Braces in a key are text.
#[distributed_lock(key = "{braces}:<n>:}{")]
#[must_use]
async fn braces(n: i64) -> Result<i64, LockError> {
    #![allow(unused_mut)]
    let mut m = n;
    Ok(m)
}

#[distributed_lock(key = "mut:<n>")]
async fn mut_param(mut n: u32, mut x: Vec<u8>) -> Result<usize, LockError> {
    n += 1;
    x.push(1);
    Ok(x.len() + n as usize)
}

#[distributed_lock(key = "tuple:<a>:<b>")]
async fn destructured((a, b): (u8, u8)) -> Result<u8, LockError> {
    Ok(a + b)
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        assert!(matches!(
            place_order(1, 2).await,
            Err(AppError::Lock(LockError::NotInitialized))
        ));
        distlock::init_from_str("[backends.local]\nmode = \"memory\"")
            .await
            .unwrap();
        assert_eq!(place_order(42, 7).await.unwrap(), 42_007);
        assert!(matches!(
            place_order(42, 0).await,
            Err(AppError::Invalid("no voucher"))
        ));
        assert_eq!(every_argument(1, "x".into()).await.unwrap(), "1x");
        bare_kind().await.unwrap();
        assert_eq!(braces(-3).await.unwrap(), -3);
        assert_eq!(mut_param(1, vec![0]).await.unwrap(), 4);
        assert_eq!(destructured((2, 3)).await.unwrap(), 5);
        // The futures are Send: they can be spawned.
        let handle = tokio::spawn(assert_send(place_order(5, 5)));
        assert_eq!(handle.await.unwrap().unwrap(), 5005);

        // Sites are registered.
        let site = distlock::inspect::sites()
            .find(|s| s.function.ends_with("::every_argument"))
            .expect("site of every_argument");
        assert_eq!(site.key, "every:<a>:<b>");
        assert_eq!(site.backend, Some("local"));
        assert!(site.file.ends_with("free_fn.rs"), "{}", site.file);
        assert_eq!(site.line, 28);
        assert_eq!(distlock::inspect::sites().count(), 6);
    });
}
