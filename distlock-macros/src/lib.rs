//! The `#[distributed_lock]` attribute of [distlock](https://docs.rs/distlock); use it as
//! `distlock::distributed_lock`.
//!
//! The arguments are parsed in `attr`, the code is generated in `expand`.

mod attr;
mod expand;

use proc_macro::TokenStream;

/// Runs an `async fn`'s body only while this process holds a distributed lock.
///
/// ```
/// use distlock::distributed_lock;
///
/// #[derive(Debug)]
/// enum AppError {
///     Lock(distlock::LockError),
/// }
///
/// impl From<distlock::LockError> for AppError {
///     fn from(e: distlock::LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// #[distributed_lock(key = "order:<user_id>", wait = "5s", lease = "auto")]
/// async fn place_order(user_id: u64, voucher_id: u64) -> Result<u64, AppError> {
///     // Runs only while this process holds the lock "order:<user_id>".
///     Ok(user_id * 1000 + voucher_id)
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// distlock::init_from_str(r#"
///     [backends.main]
///     mode = "memory"
/// "#).await?;
/// assert_eq!(place_order(42, 7).await.unwrap(), 42_007);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
///
/// # Arguments
///
/// | argument  | required | meaning |
/// |-----------|----------|---------|
/// | `key`     | yes | the lock's key, a template: `<name>` or `<name.field.sub>` is replaced by that parameter (or field of it; `self` too), rendered with `Display` when the function is called |
/// | `wait`    | no  | longest wait to acquire, e.g. `"250ms"`, `"5s"`, `"1m30s"`; `"0s"` tries once. Default: `[defaults].wait` |
/// | `lease`   | no  | `"auto"`: a watchdog renews the lease while the body runs; `"30s"`: a fixed lease, never renewed. Default: `[defaults].lease` |
/// | `backend` | no  | a name from `[backends.NAME]`. Default: `[defaults].backend` |
/// | `kind`    | no  | `"reentrant"` (the default; `kind = reentrant` also works); `"fair"`: granted in the order callers asked; `"read"` / `"write"`: a read-write lock (many readers or one writer, writer-preferring) shared by every function naming the same key with either kind. Fair and read-write locks need a single, cluster, sentinel or memory backend (redlock/multi: `LockError::Unsupported`) |
///
/// Every argument:
///
/// ```
/// # use distlock::distributed_lock;
/// struct Request { user: User }
/// struct User { id: u64 }
///
/// #[distributed_lock(
///     key = "report:<req.user.id>:<day>",
///     wait = "1m30s",
///     lease = "30s",
///     backend = "main",
///     kind = "reentrant",
/// )]
/// async fn build_report(req: &Request, day: u32) -> Result<(), distlock::LockError> {
///     Ok(())
/// }
/// ```
///
/// # Behaviour
///
/// - The key is rendered first, then the lock is acquired (waiting at most `wait`), then
///   the body runs. Not acquired in time: the function returns
///   `Err(LockError::Timeout { .. }.into())` without running the body.
/// - The lock is released on every way out: `Ok`, `Err`, a panic, and the caller dropping
///   the future.
/// - With `lease = "auto"`, a lost lease drops the body at its next `.await` and the function
///   returns `Err(LockError::LeaseLost { .. }.into())`.
/// - Reentrant: an annotated call nested in another one in the same task, on the same backend
///   and key, re-enters. A spawned task is a separate owner.
/// - Inside the body, `distlock::fencing_token()` is the lock's fencing token.
/// - Before `distlock::init`, the function returns `Err(LockError::NotInitialized.into())`.
/// - Every annotated function is registered (`distlock::sites()`), and `init` fails when one
///   names a backend the configuration does not have.
///
/// # Requirements, checked at compile time
///
/// - An `async fn` (also a method: `self`, `&self`, `&mut self`; generic functions; under
///   `#[async_trait]` too), returning `Result<T, E>` with `E: From<distlock::LockError>`.
///   Any `Result<..>` alias works (`anyhow::Result<T>`, ...) when its error type converts.
/// - Every placeholder names a parameter; `wait` and `lease` parse; `key` is given; no
///   argument is unknown or given twice.
///
/// ```compile_fail
/// # use distlock::distributed_lock;
/// #[distributed_lock(key = "order:<order_id>")] // error: no parameter `order_id`
/// async fn place_order(user_id: u64) -> Result<(), distlock::LockError> {
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
