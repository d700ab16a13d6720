//! `#[distributed_lock]` against a real Redis (`DISTLOCK_TEST_SINGLE`; start the servers with
//! `scripts/servers.sh start`): mutual exclusion, reentrance, key rendering, timeouts, lost
//! leases, release on every way out, `#[async_trait]`, lock sites.
//!
//! The global registry is process-wide and its background work runs on the runtime `init`
//! ran on, so every test here runs on one shared multi-thread runtime ([`RT`]) and the
//! registry is set up once ([`init`]). Every test uses keys of its own.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use distlock::{distributed_lock, fencing_token, Lock, LockError};
use tokio::sync::{oneshot, OnceCell};

/// The lease length of `lease = "auto"`: short, so that lost leases show quickly.
const WATCHDOG_TIMEOUT: Duration = Duration::from_secs(1);

static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime")
});

static INIT: OnceCell<()> = OnceCell::const_new();

/// Set up the global registry once, on [`RT`]: `main` is the single test server, `mem` the
/// in-process backend.
async fn init() {
    INIT.get_or_init(|| async {
        let config = format!(
            r#"
            [defaults]
            backend = "main"
            wait = "10s"
            lease = "auto"
            watchdog_timeout = "1s"

            [backends.main]
            mode = "single"
            url = "{}"

            [backends.mem]
            mode = "memory"
            "#,
            distlock_tests::single_url()
        );
        distlock::init_from_str(&config)
            .await
            .unwrap_or_else(|e| panic!("distlock::init_from_str failed: {e}"));
    })
    .await;
}

/// Run `f` on the shared runtime, after `init`.
fn run<F: Future>(f: F) -> F::Output {
    RT.block_on(async {
        init().await;
        f.await
    })
}

/// A key part no other test (or earlier run) uses.
fn unique(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{test}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, SeqCst)
    )
}

/// The lock is free now: another owner gets it at once (and lets it go).
async fn assert_free(key: &str) {
    let guard = Lock::new(key)
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("try_acquire({key}): {e}"));
    let guard = guard.unwrap_or_else(|| panic!("lock {key} is still held"));
    guard.release().await.expect("release");
}

/// The lock is freed promptly (the release of a dropped or panicked body happens in the
/// background): another owner waiting for it gets it within `within`.
async fn assert_freed_within(key: &str, within: Duration) {
    let start = Instant::now();
    let guard = Lock::new(key)
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("lock {key} was not freed: {e}"));
    let took = start.elapsed();
    guard.release().await.expect("release");
    assert!(
        took < within,
        "lock {key} was freed only after {took:?} (expected < {within:?})"
    );
}

/// Another owner (a spawned task) cannot take the lock now.
async fn assert_held(key: &str) {
    let key = key.to_owned();
    let other = tokio::spawn(async move { Lock::new(key).try_acquire().await })
        .await
        .expect("task");
    assert!(
        other.expect("try_acquire").is_none(),
        "another owner got a lock that should be held"
    );
}

#[derive(Debug)]
enum TestError {
    Lock(LockError),
    Body(&'static str),
}

impl From<LockError> for TestError {
    fn from(e: LockError) -> Self {
        TestError::Lock(e)
    }
}

// ------------------------------------------------------------------ mutual exclusion

#[derive(Default)]
struct Exclusion {
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
}

#[distributed_lock(key = "attr:exclusive:<key>", wait = "30s", lease = "auto")]
async fn exclusive(key: String, seen: Arc<Exclusion>) -> Result<(), LockError> {
    let now = seen.inside.fetch_add(1, SeqCst) + 1;
    seen.most_inside.fetch_max(now, SeqCst);
    seen.tokens
        .lock()
        .unwrap()
        .push(fencing_token().expect("a token inside the body"));
    // Invite overlap: give every other task a chance to run while "inside".
    for _ in 0..3 {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seen.inside.fetch_sub(1, SeqCst);
    Ok(())
}

#[test]
fn twenty_concurrent_calls_never_overlap() {
    run(async {
        let key = unique("exclusive");
        let seen = Arc::new(Exclusion::default());
        let calls: Vec<_> = (0..20)
            .map(|_| tokio::spawn(exclusive(key.clone(), seen.clone())))
            .collect();
        for call in calls {
            call.await.expect("task").expect("call");
        }
        assert_eq!(seen.most_inside.load(SeqCst), 1, "two bodies ran at once");
        let tokens = seen.tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), 20);
        // Holders one after another: tokens grow strictly in the order the bodies ran.
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "fencing tokens not strictly increasing: {tokens:?}"
        );
        assert_free(&format!("attr:exclusive:{key}")).await;
    });
}

// ------------------------------------------------------------------ reentrance

#[distributed_lock(key = "attr:reenter:<key>", wait = "200ms")]
async fn reenter_inner(key: &str) -> Result<u64, LockError> {
    Ok(fencing_token().expect("a token inside the body"))
}

#[distributed_lock(key = "attr:reenter:<key>", wait = "200ms")]
async fn reenter_inner_owned(key: String) -> Result<u64, LockError> {
    Ok(fencing_token().expect("a token inside the body"))
}

struct Reentered {
    outer: u64,
    inner: u64,
    innermost: u64,
    spawned: Result<u64, LockError>,
    after_inner: u64,
}

#[distributed_lock(key = "attr:reenter:<key>", wait = "200ms")]
async fn reenter_outer(key: String) -> Result<Reentered, LockError> {
    let full = format!("attr:reenter:{key}");
    let outer = fencing_token().expect("a token inside the body");
    let inner = reenter_inner(&key).await?;
    // Two levels deep.
    let innermost = reenter_outer_twice(&key).await?;
    // The nested calls released their entries, not the lock.
    assert_held(&full).await;
    // A spawned task is another owner: it waits, and times out.
    let spawned = tokio::spawn(reenter_inner_owned(key.clone()))
        .await
        .expect("task");
    Ok(Reentered {
        outer,
        inner,
        innermost,
        spawned,
        after_inner: fencing_token().expect("still inside"),
    })
}

#[distributed_lock(key = "attr:reenter:<key>", wait = "200ms")]
async fn reenter_outer_twice(key: &str) -> Result<u64, LockError> {
    reenter_inner(key).await
}

#[test]
fn nested_calls_reenter_and_spawned_calls_do_not() {
    run(async {
        let key = unique("reenter");
        let start = Instant::now();
        let r = reenter_outer(key.clone()).await.expect("outer call");
        assert!(r.outer >= 1);
        assert_eq!(r.inner, r.outer, "inner token differs from the outer one");
        assert_eq!(r.innermost, r.outer);
        assert_eq!(r.after_inner, r.outer);
        match r.spawned {
            Err(LockError::Timeout { key: k, waited, .. }) => {
                assert_eq!(k, format!("attr:reenter:{key}"));
                assert!(waited >= Duration::from_millis(200), "{waited:?}");
            }
            other => panic!("a spawned call re-entered: {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(3), "no deadlock");
        assert_free(&format!("attr:reenter:{key}")).await;
    });
}

// ------------------------------------------------------------------ key rendering

struct User {
    id: u64,
}

struct Request {
    user: User,
}

#[distributed_lock(key = "attr:render:<scope>:<req.user.id>", wait = "0s")]
async fn render_try(scope: &str, req: &Request) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "attr:render:<scope>:<req.user.id>", wait = "5s")]
async fn render_hold(
    scope: &str,
    req: Request,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
) -> Result<u64, LockError> {
    entered.send(()).expect("test waits");
    leave.await.expect("test says leave");
    Ok(req.user.id)
}

#[test]
fn nested_field_placeholder_renders_the_builders_key() {
    run(async {
        let scope = unique("render");
        let req = Request {
            user: User { id: 42 },
        };
        let full = format!("attr:render:{scope}:42");

        // The builder holds "…:42": the annotated call (try once) times out on that key.
        let guard = Lock::new(full.clone()).acquire().await.expect("acquire");
        match render_try(&scope, &req).await {
            Err(LockError::Timeout { key, .. }) => assert_eq!(key, full),
            other => panic!("expected a timeout on {full}, got {other:?}"),
        }
        guard.release().await.expect("release");
        render_try(&scope, &req).await.expect("free now");

        // And the other way round: while the annotated body runs, the builder cannot take it.
        let (entered_tx, entered_rx) = oneshot::channel();
        let (leave_tx, leave_rx) = oneshot::channel();
        let scope2 = scope.clone();
        let call = tokio::spawn(async move {
            let req = Request {
                user: User { id: 42 },
            };
            render_hold(&scope2, req, entered_tx, leave_rx).await
        });
        entered_rx.await.expect("body entered");
        assert!(Lock::new(full.clone())
            .try_acquire()
            .await
            .expect("try_acquire")
            .is_none());
        // A different id is a different lock.
        assert_free(&format!("attr:render:{scope}:43")).await;
        leave_tx.send(()).expect("body waits");
        assert_eq!(call.await.expect("task").expect("call"), 42);
        assert_free(&full).await;
    });
}

// ------------------------------------------------------------------ timeout

#[distributed_lock(key = "attr:timeout:<key>", wait = "300ms")]
async fn wait_300ms(key: &str, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, SeqCst);
    Ok(())
}

#[test]
fn held_by_another_owner_times_out_after_wait() {
    run(async {
        let key = unique("timeout");
        let full = format!("attr:timeout:{key}");
        let guard = Lock::new(full.clone()).acquire().await.expect("acquire");
        let ran = AtomicBool::new(false);
        let start = Instant::now();
        let result = wait_300ms(&key, &ran).await;
        let took = start.elapsed();
        match result {
            Err(LockError::Timeout {
                key: k,
                backend,
                waited,
                ..
            }) => {
                assert_eq!(k, full);
                assert_eq!(backend, "main");
                assert!(waited >= Duration::from_millis(300), "{waited:?}");
            }
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "returned after {took:?}"
        );
        assert!(!ran.load(SeqCst), "the body ran without the lock");
        guard.release().await.expect("release");
        wait_300ms(&key, &ran).await.expect("free now");
        assert!(ran.load(SeqCst));
    });
}

// ------------------------------------------------------------------ lost lease

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

#[distributed_lock(key = "attr:lost:<key>", lease = "auto")]
async fn long_body(
    key: String,
    entered: oneshot::Sender<()>,
    finished: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
) -> Result<(), LockError> {
    let _dropped = SetOnDrop(dropped);
    entered.send(()).expect("test waits");
    tokio::time::sleep(Duration::from_secs(10)).await;
    finished.store(true, SeqCst);
    Ok(())
}

/// Start `long_body`, delete its lock with `delete` once the body runs, and check that the
/// call returns `LeaseLost` within the watchdog timeout and that the body was dropped.
async fn lease_lost_when<F, Fut>(test: &str, delete: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let key = unique(test);
    let full = format!("attr:lost:{key}");
    let finished = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered_rx) = oneshot::channel();
    let call = tokio::spawn(long_body(
        key.clone(),
        entered_tx,
        finished.clone(),
        dropped.clone(),
    ));
    entered_rx.await.expect("body entered");
    // Let the watchdog renew at least once first.
    tokio::time::sleep(Duration::from_millis(400)).await;

    let deleted_at = Instant::now();
    delete(full.clone()).await;
    let result = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call did not return after its lock was deleted")
        .expect("task");
    let took = deleted_at.elapsed();
    match result {
        Err(LockError::LeaseLost { key: k, .. }) => assert_eq!(k, full),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(
        took < WATCHDOG_TIMEOUT * 5 / 2,
        "LeaseLost only after {took:?}"
    );
    assert!(dropped.load(SeqCst), "the body was not dropped");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!finished.load(SeqCst), "the body went on without its lock");
    assert_free(&full).await;
}

#[test]
fn force_unlock_during_the_body_returns_lease_lost() {
    run(lease_lost_when("lost-force", |full| async move {
        assert!(Lock::new(full).force_unlock().await.expect("force_unlock"));
    }));
}

#[test]
fn raw_del_during_the_body_returns_lease_lost() {
    run(lease_lost_when("lost-del", |full| async move {
        let addr = distlock_tests::addr_of(&distlock_tests::single_url());
        let redis_key = format!("lock:{{{full}}}");
        let reply = tokio::task::spawn_blocking(move || {
            distlock_tests::resp_command(&addr, &["DEL", &redis_key])
        })
        .await
        .expect("task")
        .expect("DEL");
        assert_eq!(reply.as_int(), Some(1), "the lock's hash was not there");
    }));
}

// ------------------------------------------------------------------ every way out

#[derive(Debug, Clone, Copy)]
enum Exit {
    Ok,
    Err,
    Panic,
    Hang,
}

/// A fixed 30 s lease: a lock freed within a second was released, not expired.
#[distributed_lock(key = "attr:exit:<key>", lease = "30s", wait = "5s")]
async fn exit_fixed(key: String, how: Exit) -> Result<(), TestError> {
    exit_body(how).await
}

#[distributed_lock(key = "attr:exit:<key>", lease = "auto", wait = "5s")]
async fn exit_auto(key: String, how: Exit) -> Result<(), TestError> {
    exit_body(how).await
}

async fn exit_body(how: Exit) -> Result<(), TestError> {
    tokio::task::yield_now().await;
    match how {
        Exit::Ok => Ok(()),
        Exit::Err => Err(TestError::Body("the body failed")),
        Exit::Panic => panic!("the body panicked"),
        Exit::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(())
        }
    }
}

/// Every way out of `exit_fixed` / `exit_auto` frees the lock; runs on whatever runtime
/// calls it.
async fn every_way_out(test: &str) {
    for auto in [false, true] {
        let call = |key: String, how: Exit| async move {
            if auto {
                exit_auto(key, how).await
            } else {
                exit_fixed(key, how).await
            }
        };
        let key = unique(test);
        let full = format!("attr:exit:{key}");

        match call(key.clone(), Exit::Ok).await {
            Ok(()) => {}
            Err(TestError::Lock(e)) => panic!("lock error: {e}"),
            Err(TestError::Body(b)) => panic!("body error: {b}"),
        }
        assert_free(&full).await;

        match call(key.clone(), Exit::Err).await {
            Err(TestError::Body(b)) => assert_eq!(b, "the body failed"),
            other => panic!("expected the body's error, got {other:?}"),
        }
        // `Err` releases before returning.
        assert_free(&full).await;

        let panicked = tokio::spawn(call(key.clone(), Exit::Panic)).await;
        assert!(panicked.expect_err("the body panics").is_panic());
        assert_freed_within(&full, Duration::from_millis(500)).await;

        // The caller drops the future while the body runs (and holds the lock).
        let dropped = tokio::time::timeout(Duration::from_secs(1), async {
            let hang = call(key.clone(), Exit::Hang);
            tokio::pin!(hang);
            tokio::select! {
                _ = &mut hang => panic!("the hanging body returned"),
                _ = tokio::time::sleep(Duration::from_millis(150)) => {}
            }
            assert_held(&full).await;
            hang.await
        })
        .await;
        assert!(dropped.is_err(), "the hanging body returned");
        assert_freed_within(&full, Duration::from_millis(500)).await;
    }
}

#[test]
fn released_on_ok_err_panic_and_drop_multi_thread() {
    run(every_way_out("exit-mt"));
}

#[test]
fn released_on_ok_err_panic_and_drop_current_thread() {
    // The registry (and its background releases) lives on the shared runtime; the calls run
    // on a current-thread runtime of their own.
    RT.block_on(init());
    let local = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    local.block_on(every_way_out("exit-ct"));
}

// ------------------------------------------------------------------ #[async_trait]

#[async_trait]
trait Accounts {
    async fn deposit(&self, id: u64, amount: i64) -> Result<i64, LockError>;
    async fn nested(&self, id: u64) -> Result<(u64, u64), LockError>;
}

struct Bank {
    name: String,
    balance: AtomicU64,
}

const DEPOSIT_LINE: u32 = line!() + 4;

#[async_trait]
impl Accounts for Bank {
    #[distributed_lock(key = "attr:bank:<self.name>:<id>", wait = "0s")]
    async fn deposit(&self, id: u64, amount: i64) -> Result<i64, LockError> {
        let full = format!("attr:bank:{}:{id}", self.name);
        assert!(fencing_token().is_some());
        assert_held(&full).await;
        if amount < 0 {
            // `return` in the body works as in the function.
            return Ok(-1);
        }
        let total = self.balance.fetch_add(amount as u64, SeqCst) + amount as u64;
        Ok(total as i64)
    }

    #[distributed_lock(key = "attr:bank:<self.name>:<id>", wait = "0s")]
    async fn nested(&self, id: u64) -> Result<(u64, u64), LockError> {
        let outer = fencing_token().expect("outer token");
        self.deposit(id, 0).await?;
        Ok((outer, fencing_token().expect("still inside")))
    }
}

#[test]
fn works_under_async_trait() {
    run(async {
        let bank: Arc<dyn Accounts + Send + Sync> = Arc::new(Bank {
            name: unique("bank"),
            balance: AtomicU64::new(0),
        });
        assert_eq!(bank.deposit(1, 5).await.expect("deposit"), 5);
        assert_eq!(bank.deposit(1, -5).await.expect("deposit"), -1);
        let (outer, after) = bank.nested(1).await.expect("nested re-enters");
        assert_eq!(outer, after);

        // Held by another owner: times out at once (wait = "0s").
        let name = {
            let site = distlock::inspect::sites()
                .find(|s| s.function.ends_with("::deposit"))
                .expect("the deposit site");
            assert_eq!(site.key, "attr:bank:<self.name>:<id>");
            assert_eq!(site.line, DEPOSIT_LINE, "{site:?}");
            assert!(site.file.ends_with("attribute.rs"), "{site:?}");
            site.function
        };
        assert!(name.starts_with("attribute::"), "{name}");

        let bank2 = Bank {
            name: unique("bank"),
            balance: AtomicU64::new(0),
        };
        let full = format!("attr:bank:{}:7", bank2.name);
        let guard = Lock::new(full.clone()).acquire().await.expect("acquire");
        match bank2.deposit(7, 1).await {
            Err(LockError::Timeout { key, .. }) => assert_eq!(key, full),
            other => panic!("expected Timeout, got {other:?}"),
        }
        // A spawned call is Send (async_trait requires it) and works once the lock is free.
        guard.release().await.expect("release");
        let bank2 = Arc::new(bank2);
        let b = bank2.clone();
        let spawned = tokio::spawn(async move { b.deposit(7, 3).await });
        assert_eq!(spawned.await.expect("task").expect("deposit"), 3);
    });
}

// ------------------------------------------------------------------ backends and sites

const ON_MEMORY_LINE: u32 = line!() + 1;
#[distributed_lock(key = "attr:backend:<key>", backend = "mem", wait = "0s")]
async fn on_memory(key: &str) -> Result<(), LockError> {
    Ok(())
}

#[test]
fn backend_argument_picks_the_backend() {
    run(async {
        let key = unique("backend");
        // Holding the key on `main` does not block the same key on `mem`.
        let guard = Lock::new(format!("attr:backend:{key}"))
            .acquire()
            .await
            .expect("acquire on main");
        on_memory(&key).await.expect("mem is another backend");
        guard.release().await.expect("release");

        let held = Lock::new(format!("attr:backend:{key}"))
            .backend("mem")
            .acquire()
            .await
            .expect("acquire on mem");
        match on_memory(&key).await {
            Err(LockError::Timeout { backend, .. }) => assert_eq!(backend, "mem"),
            other => panic!("expected a timeout on mem, got {other:?}"),
        }
        held.release().await.expect("release");

        let site = distlock::inspect::sites()
            .find(|s| s.function == "attribute::on_memory")
            .expect("the on_memory site");
        assert_eq!(site.backend, Some("mem"));
        assert_eq!(site.key, "attr:backend:<key>");
        assert_eq!(site.line, ON_MEMORY_LINE);
    });
}

// ------------------------------------------------------------------ fair and read-write

/// What the read and write functions saw inside.
#[derive(Default)]
struct RwSeen {
    readers: AtomicUsize,
    writers: AtomicUsize,
    max_readers: AtomicUsize,
    violations: AtomicUsize,
    writes: AtomicUsize,
}

#[distributed_lock(key = "attr:rw:<key>", kind = "read", wait = "20s")]
async fn attr_read(key: &str, seen: &RwSeen) -> Result<(), LockError> {
    let n = seen.readers.fetch_add(1, SeqCst) + 1;
    seen.max_readers.fetch_max(n, SeqCst);
    if seen.writers.load(SeqCst) != 0 {
        seen.violations.fetch_add(1, SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(3)).await;
    if seen.writers.load(SeqCst) != 0 {
        seen.violations.fetch_add(1, SeqCst);
    }
    seen.readers.fetch_sub(1, SeqCst);
    Ok(())
}

#[distributed_lock(key = "attr:rw:<key>", kind = "write", wait = "20s")]
async fn attr_write(key: &str, seen: &RwSeen) -> Result<(), LockError> {
    if seen.writers.fetch_add(1, SeqCst) != 0 || seen.readers.load(SeqCst) != 0 {
        seen.violations.fetch_add(1, SeqCst);
    }
    // A writer may read the key it writes (a downgrade): no deadlock.
    attr_read_nested(key).await?;
    tokio::time::sleep(Duration::from_millis(3)).await;
    if seen.readers.load(SeqCst) != 0 {
        seen.violations.fetch_add(1, SeqCst);
    }
    seen.writes.fetch_add(1, SeqCst);
    seen.writers.fetch_sub(1, SeqCst);
    Ok(())
}

#[distributed_lock(key = "attr:rw:<key>", kind = "read", wait = "0s")]
async fn attr_read_nested(key: &str) -> Result<(), LockError> {
    Ok(())
}

#[test]
fn read_and_write_kinds_share_a_key() {
    run(async {
        let key = unique("rw");
        let seen = Arc::new(RwSeen::default());
        let mut tasks = Vec::new();
        for t in 0..8usize {
            let (key, seen) = (key.clone(), seen.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..25usize {
                    if (i + t) % 5 == 0 {
                        attr_write(&key, &seen).await.expect("write");
                    } else {
                        attr_read(&key, &seen).await.expect("read");
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(seen.violations.load(SeqCst), 0, "a writer overlapped");
        assert_eq!(seen.writes.load(SeqCst), 8 * 25 / 5);
        assert!(
            seen.max_readers.load(SeqCst) > 1,
            "readers never overlapped"
        );
    });
}

#[distributed_lock(key = "attr:fair:<key>", kind = "fair", wait = "20s")]
async fn attr_fair(key: &str, i: usize, order: &Mutex<Vec<usize>>) -> Result<(), LockError> {
    order.lock().unwrap().push(i);
    Ok(())
}

#[test]
fn fair_kind_serves_callers_in_order() {
    run(async {
        let key = unique("fair");
        let holder = Lock::new(format!("attr:fair:{key}"))
            .kind(distlock::LockKind::Fair)
            .acquire()
            .await
            .expect("fair");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..6 {
            let (key, order) = (key.clone(), order.clone());
            tasks.push(tokio::spawn(
                async move { attr_fair(&key, i, &order).await },
            ));
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        holder.release().await.expect("release");
        for t in tasks {
            t.await.expect("task").expect("fair caller");
        }
        assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    });
}

#[distributed_lock(key = "attr:pair:<scope>:<a>:<b>", wait = "0s")]
async fn pair(
    scope: &str,
    a: &str,
    b: &str,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
) -> Result<(), LockError> {
    let _ = (scope, a, b);
    let _ = entered.send(());
    let _ = leave.await;
    Ok(())
}

/// Keys from templates are injective: `("1:2", "3")` and `("1", "2:3")` used to render the
/// same key, so one caller blocked the other. Placeholder values escape `%` and the text
/// character that follows them.
#[test]
fn different_arguments_never_render_the_same_key() {
    run(async {
        let scope = unique("pair");
        let (entered_tx, entered_rx) = oneshot::channel();
        let (leave_tx, leave_rx) = oneshot::channel();
        let s = scope.clone();
        let first = tokio::spawn(async move { pair(&s, "1:2", "3", entered_tx, leave_rx).await });
        entered_rx.await.expect("first body entered");
        // The second call leaves its body at once.
        let (tx, _rx) = oneshot::channel();
        let (leave_now_tx, leave_now) = oneshot::channel::<()>();
        let _ = leave_now_tx.send(());
        let second = pair(&scope, "1", "2:3", tx, leave_now).await;
        assert!(second.is_ok(), "another key, not a timeout: {second:?}");
        let _ = leave_tx.send(());
        first.await.expect("task").expect("first call");
        // The rendered key, as the builder sees it.
        let g = Lock::new(format!("attr:pair:{scope}:1%3A2:3"))
            .try_acquire()
            .await
            .expect("try");
        assert!(g.is_some());
    });
}
