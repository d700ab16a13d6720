//! Generic functions, references, `impl Trait` and lifetimes.
use std::fmt::Display;

use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "generic:<id>")]
async fn generic<T: Display + Send, U>(id: T, extra: U) -> Result<U, LockError>
where
    U: Send,
{
    Ok(extra)
}

#[distributed_lock(key = "ref:<name>:<n>")]
async fn by_ref(name: &str, n: &u32) -> Result<usize, LockError> {
    Ok(name.len() + *n as usize)
}

#[distributed_lock(key = "impl:<shown>")]
async fn impl_trait(shown: impl Display, items: impl IntoIterator<Item = u8>) -> Result<u32, LockError> {
    let _ = shown;
    Ok(items.into_iter().map(u32::from).sum())
}

#[distributed_lock(key = "lifetime:<s>")]
async fn lifetime<'a>(s: &'a str, t: &'a str) -> Result<&'a str, LockError> {
    Ok(if s.len() >= t.len() { s } else { t })
}

#[distributed_lock(key = "elided:<s>")]
async fn elided(s: &str) -> Result<&str, LockError> {
    Ok(&s[1..])
}

#[distributed_lock(key = "returns-impl:<n>")]
async fn returns_impl(n: u8) -> Result<impl Display, LockError> {
    if n == 0 {
        return Ok(String::from("zero"));
    }
    Ok(n.to_string())
}

struct Wrapper<T>(T);

impl<T: Display + Sync> Wrapper<T> {
    #[distributed_lock(key = "wrapper:<self.0>")]
    async fn show(&self) -> Result<String, LockError> {
        Ok(self.0.to_string())
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        distlock::init_from_str("[backends.m]\nmode = \"memory\"")
            .await
            .unwrap();
        assert_eq!(generic(1u8, "x").await.unwrap(), "x");
        assert_eq!(generic("a", 2).await.unwrap(), 2);
        assert_eq!(by_ref("abc", &2).await.unwrap(), 5);
        assert_eq!(impl_trait('c', vec![1, 2]).await.unwrap(), 3);
        assert_eq!(lifetime("ab", "c").await.unwrap(), "ab");
        assert_eq!(elided("xyz").await.unwrap(), "yz");
        assert_eq!(returns_impl(0).await.unwrap().to_string(), "zero");
        assert_eq!(Wrapper(5).show().await.unwrap(), "5");
        let spawned = tokio::spawn(generic(3u64, vec![1]));
        assert_eq!(spawned.await.unwrap().unwrap(), vec![1]);
    });
}
