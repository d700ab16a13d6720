//! The `#[distributed_lock]` attribute of [distlock](https://docs.rs/distlock); use it as
//! `distlock::distributed_lock`.
//!
//! The arguments are parsed in `attr`, the code is generated in `expand`.

mod attr;
mod expand;

use proc_macro::TokenStream;

/// Runs an `async fn`'s body only while this process holds a distributed lock.
///
/// **When the lease is lost while the body runs, the body is cancelled** (dropped at its
/// next `.await`) by default: what it did before stays done. Make the body cancel-safe —
/// its writes in one transaction, or fenced with `distlock::fencing_token()` — or choose
/// `on_lost = "signal"` and check `distlock::lease_lost()` before each irreversible step.
/// See [Behaviour](#behaviour).
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
/// #[distributed_lock(key = "transfer:<from>", on_lost = "signal")]
/// async fn transfer(from: u64, to: u64) -> Result<(), AppError> {
///     // debit `from` ...
///     distlock::lease_lost().check()?; // stop before crediting if the lease is gone
///     // credit `to` ...
///     Ok(())
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// distlock::init_from_str(r#"
///     [backends.main]
///     mode = "memory"
/// "#).await?;
/// assert_eq!(place_order(42, 7).await.unwrap(), 42_007);
/// transfer(1, 2).await.unwrap();
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
///
/// # Arguments
///
/// | argument  | required | meaning |
/// |-----------|----------|---------|
/// | `key`     | yes (or `keys`) | the lock's key, a template: `<name>` or `<name.field.sub>` is replaced by that parameter (or field of it; `self` too), rendered with `Display` when the function is called; at most 1024 bytes once rendered (else `LockError::InvalidKey`); each value escapes `%` and the first character of the text after it as `%XX` (`"pair:<a>:<b>"` with `a = "1:2"` renders `pair:1%3A2:…`), so different arguments never render the same key; two placeholders need text between them |
/// | `keys`    | instead of `key` | several key templates, e.g. `keys = ["account:<from>", "account:<to>"]`: all of them are locked together, all or nothing, within one `wait` (`distlock::Lock::all`: taken in sorted order, so no two callers deadlock; each key its own reentrant lock, so keys in different cluster slots work). Inside the body `distlock::fencing_token_of("account:1")` gives each rendered key's token, `lease_lost()` watches every lease. Not with `key`, nor with a `kind` other than `"reentrant"` |
/// | `wait`    | no  | longest wait to acquire, e.g. `"250ms"`, `"5s"`, `"1m30s"`; `"0s"` tries once. Default: `[defaults].wait` |
/// | `lease`   | no  | `"auto"`: a watchdog renews the lease while the body runs; `"30s"`: a fixed lease, never renewed. Default: `[defaults].lease` |
/// | `backend` | no  | a name from `[backends.NAME]`. Default: `[defaults].backend` |
/// | `kind`    | no  | `"reentrant"` (the default; `kind = reentrant` also works); `"fair"`: granted in the order callers asked; `"read"` / `"write"`: a read-write lock (many readers or one writer, writer-preferring) shared by every function naming the same key with either kind. Fair and read-write locks need a single, cluster, sentinel or memory backend (redlock/multi: `LockError::Unsupported`); `"semaphore"` (with `permits`): at most `permits` calls run at once across every process, see below; `"fair_semaphore"` (with `permits`): the same, waiters served first come, first served (`Semaphore::fair`) |
/// | `permits` | with `kind = "semaphore"` or `"fair_semaphore"` | the semaphore's number of permits, an integer literal ≥ 1: each call takes one permit of `distlock::Semaphore::new(key, permits)` (`.fair()` for `"fair_semaphore"`) for its body, with its own lease (`lease`), waiting at most `wait`. Only with a semaphore kind, which needs it |
/// | `on_lost` | no  | what happens to the body when its auto-lease is lost: `"cancel"` (the default): dropped at its next `.await`, the function returns `LeaseLost`; `"signal"`: it runs to its end and its result is returned, the loss visible through `distlock::lease_lost()` |
/// | `hold_at_least` | no | a run-once scheduled job (ShedLock's `lockAtLeastFor`), e.g. `"30s"`: the lock is kept at least this long after it was taken, measured on the Redis server's clock, even when the body ends sooner; instances whose schedules fire a few seconds apart then run the job once, and the others return `Err(LockError::Skipped { .. }.into())` (`is_skipped()`), not `Timeout`: not a failure, and not to be retried. Not longer than a fixed `lease`; reentrant locks on one `key` only ([`Lock::hold_at_least`](../distlock/struct.Lock.html#method.hold_at_least)) |
///
/// The key may also be written first without its name: `#[distributed_lock("order:<user_id>", wait = "5s")]`.
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
///     on_lost = "cancel",
/// )]
/// async fn build_report(req: &Request, day: u32) -> Result<(), distlock::LockError> {
///     Ok(())
/// }
/// ```
///
/// Several keys at once (a transfer that must hold both accounts):
///
/// ```
/// # use distlock::distributed_lock;
/// #[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "5s")]
/// async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), distlock::LockError> {
///     let from_token = distlock::fencing_token_of(&format!("account:{from}"));
///     assert!(from_token.is_some());
///     Ok(())
/// }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await?;
/// transfer(1, 2, 10).await?;
/// transfer(2, 1, 10).await?; // the other order: the same lock order, no deadlock
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
///
/// A job that runs once per schedule across instances (wait `"0s"`: skip when another
/// instance has it):
///
/// ```
/// # use distlock::distributed_lock;
/// #[distributed_lock(key = "nightly-report", wait = "0s", lease = "10m", hold_at_least = "30s")]
/// async fn nightly_report() -> Result<(), distlock::LockError> {
///     Ok(())
/// }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await?;
/// nightly_report().await?;
/// // Fired again within 30 s (here, or by another instance): skipped.
/// let again = nightly_report().await;
/// assert!(again.is_err_and(|e| e.is_skipped()));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
///
/// A semaphore: at most 4 exports per tenant at once, across every process (each call
/// takes one permit, with a lease of its own; a crashed caller's permit comes back when its
/// lease ends):
///
/// ```
/// # use distlock::distributed_lock;
/// #[distributed_lock(key = "export:<tenant>", kind = "semaphore", permits = 4, wait = "30s")]
/// async fn export(tenant: &str) -> Result<usize, distlock::LockError> {
///     Ok(tenant.len())
/// }
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await?;
/// let (a, b) = tokio::join!(export("acme"), export("acme"));
/// assert_eq!(a? + b?, 8);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
/// ```
///
/// A semaphore section is not reentrant (a nested call takes another permit), and
/// `distlock::fencing_token()` inside it does not see it; `on_lost = "signal"` is not
/// available with it.
///
/// # Behaviour
///
/// - The key is rendered first, then the lock is acquired (waiting at most `wait`), then
///   the body runs. Not acquired in time: the function returns
///   `Err(LockError::Timeout { .. }.into())` without running the body.
/// - The lock is released on every way out: `Ok`, `Err`, a panic, and the caller dropping
///   the future.
/// - With `lease = "auto"`, a lost lease (the watchdog found the lock gone, or could not
///   renew it before it expired: another owner may hold it now) drops the body at its next
///   `.await` and the function returns `Err(LockError::LeaseLost { .. }.into())`. **The
///   body must be cancel-safe**: a debit followed by an `.await` and a credit can stop
///   after the debit. Do the writes in one transaction, or fence them with the token.
///   With `on_lost = "signal"` the body is not dropped; it checks
///   `distlock::lease_lost()` (`is_lost()`, `check()?`, or awaits it) and decides, and its
///   result is returned. Either way a `LeaseLost` means the outcome is unknown: do not
///   retry it blindly.
/// - Reentrant: an annotated call nested in another one in the same task, on the same backend
///   and key, re-enters. A spawned task is a separate owner.
/// - Inside the body, `distlock::fencing_token()` is the lock's fencing token (with `keys`,
///   that of the last key taken: use `distlock::fencing_token_of(key)` for each).
/// - Before `distlock::init`, the function returns `Err(LockError::NotInitialized.into())`.
/// - Every annotated function is registered (`distlock::inspect::sites()`), and `init` fails when one
///   names a backend the configuration does not have.
///
/// # Requirements, checked at compile time
///
/// - An `async fn` (also a method: `self`, `&self`, `&mut self`; generic functions; under
///   `#[async_trait]` too), returning `Result<T, E>` with `E: From<distlock::LockError>`
///   (`distlock::error::LockResult`). Any `Result<..>` alias works (`anyhow::Result<T>`, ...) when
///   its error type converts. `String` does not, and cannot be made to in your crate (the
///   orphan rule): return an error type of your own that wraps it.
/// - `on_lost` is `"cancel"` or `"signal"`.
/// - Every placeholder names a parameter; `wait` and `lease` parse; `key` or `keys` is
///   given, not both; `keys` is a non-empty array of distinct string literals, with no
///   `kind` but `"reentrant"`; `hold_at_least` parses, is not 0, not longer than a fixed
///   `lease`, and comes with one `key` and no `kind` but `"reentrant"`; `permits` is an
///   integer literal ≥ 1, given exactly when `kind = "semaphore"` (or `"fair_semaphore"`) is; no argument is
///   unknown or given twice.
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
