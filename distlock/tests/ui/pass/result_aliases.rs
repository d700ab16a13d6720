//! Any `Result<..>` works: full paths and aliases with a default error type.
use distlock::{distributed_lock, LockError};

mod anyhow {
    //! Stands in for the `anyhow` crate: `anyhow::Result<T>` with a boxed error.
    #[derive(Debug)]
    pub struct Error(pub Box<dyn std::error::Error + Send + Sync>);

    impl<E: std::error::Error + Send + Sync + 'static> From<E> for Error {
        fn from(e: E) -> Self {
            Error(Box::new(e))
        }
    }

    pub type Result<T, E = Error> = std::result::Result<T, E>;
}

mod io {
    //! Like `std::io`: `io::Result<T>` with a fixed error type.
    #[derive(Debug)]
    pub struct Error(pub String);

    impl From<distlock::LockError> for Error {
        fn from(e: distlock::LockError) -> Self {
            Error(e.to_string())
        }
    }

    pub type Result<T> = std::result::Result<T, Error>;
}

#[distributed_lock(key = "anyhow:<n>")]
async fn with_anyhow(n: &str) -> anyhow::Result<u32> {
    // `?` converts with the function's error type.
    let parsed: u32 = n.parse()?;
    Ok(parsed)
}

#[distributed_lock(key = "std:<n>")]
async fn full_path(n: u8) -> std::result::Result<u8, LockError> {
    Ok(n)
}

#[distributed_lock(key = "core:<n>")]
async fn core_path(n: u8) -> ::core::result::Result<u8, LockError> {
    Ok(n)
}

#[distributed_lock(key = "io:<n>")]
async fn io_result(n: u8) -> io::Result<u8> {
    if n == 0 {
        return Err(io::Error("zero".into()));
    }
    Ok(n)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Before init, the lock error converts into each function's error type.
        let e = with_anyhow("1").await.unwrap_err();
        assert!(e.0.to_string().contains("not initialized"), "{e:?}");
        let e = io_result(1).await.unwrap_err();
        assert!(e.0.contains("not initialized"), "{e:?}");

        distlock::init_from_str("[backends.m]\nmode = \"memory\"")
            .await
            .unwrap();
        assert_eq!(with_anyhow("12").await.unwrap(), 12);
        assert!(with_anyhow("x").await.is_err());
        assert_eq!(full_path(3).await.unwrap(), 3);
        assert_eq!(core_path(4).await.unwrap(), 4);
        assert_eq!(io_result(5).await.unwrap(), 5);
        assert!(io_result(0).await.is_err());
    });
}
