//! The safety rules as a table: rule × kind × format × mode, and the tests generated from it.
//!
//! [`cell`] says, for every combination, whether the rule is run there or why not; the one
//! test below walks every combination and *runs* each cell against the real servers that
//! `scripts/test.sh` starts: a `Runs` cell runs the rule's scenario through one adapter over
//! every primitive ([`take`]), an `Unsupported` cell checks that the backend refuses the
//! kind (or the format) with `LockError::Unsupported` / an `InitError` naming it, so that
//! what the table claims is checked by the library's own answer, not by reading source text.
//! A `NotApplicable` cell says why the rule has no meaning there.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{quoted, unique};
use distlock::{
    LeaderGuard, Lease, LockError, LockGuard, LockKind, MultiLockGuard, Registry, SemaphoreGuard,
};
use distlock_tests::{cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Two owners are never inside at once (a semaphore of one permit, every key of a
    /// multi-key lock, one leader).
    Exclusion,
    /// A dropped guard frees the lock at once (in the background), not at its lease's end.
    ReleaseOnDrop,
    /// A fixed lease that runs out is signalled lost to its holder before anyone else gets
    /// in: the signal comes a margin before the server can expire it.
    LostBeforeOverlap,
    /// Every new holder gets a larger fencing token (a leader: a larger epoch).
    TokensGrow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reentrant,
    Fair,
    Read,
    Write,
    Semaphore,
    MultiKey,
    Leader,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Distlock,
    Redisson,
}

/// The backend modes, as the configuration names them.
use distlock::config::ModeKind as Mode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// The rule's scenario runs here.
    Runs,
    /// The library refuses this combination; checked by acquiring (or connecting).
    Unsupported(&'static str),
    /// The rule has no meaning here.
    NotApplicable(&'static str),
}

const RULES: [Rule; 4] = [
    Rule::Exclusion,
    Rule::ReleaseOnDrop,
    Rule::LostBeforeOverlap,
    Rule::TokensGrow,
];
const KINDS: [Kind; 7] = [
    Kind::Reentrant,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Semaphore,
    Kind::MultiKey,
    Kind::Leader,
];
const FORMATS: [Format; 2] = [Format::Distlock, Format::Redisson];
const MODES: [Mode; 6] = [
    Mode::Single,
    Mode::Cluster,
    Mode::Sentinel,
    Mode::Redlock,
    Mode::Multi,
    Mode::Memory,
];

/// THE table. Exhaustive matches: a new rule, kind, format or mode is a compile error here
/// until its cells are decided.
fn cell(rule: Rule, kind: Kind, format: Format, mode: Mode) -> Cell {
    use Cell::{NotApplicable as Na, Runs, Unsupported as No};
    // Formats and modes first: what cannot be configured or taken at all.
    match (format, mode) {
        (Format::Redisson, Mode::Redlock | Mode::Multi | Mode::Memory) => {
            return No("Redisson's format is for single, cluster and sentinel backends")
        }
        (Format::Redisson, Mode::Single | Mode::Cluster | Mode::Sentinel)
        | (Format::Distlock, _) => {}
    }
    match (kind, format, mode) {
        (Kind::Fair | Kind::Read | Kind::Write, _, Mode::Redlock | Mode::Multi) => {
            return No("fair and read-write locks need one server's atomic scripts")
        }
        (Kind::Semaphore, _, Mode::Redlock | Mode::Multi) => {
            return No("a semaphore needs one server's atomic scripts")
        }
        (Kind::Leader, _, Mode::Redlock | Mode::Multi) => {
            return No("observers read the leader from one place")
        }
        (Kind::Semaphore, Format::Redisson, _) => {
            return No("Redisson's format has no distlock semaphore")
        }
        (Kind::Leader, Format::Redisson, _) => {
            return No("leader election publishes its state in distlock's format")
        }
        _ => {}
    }
    match (rule, kind) {
        (Rule::Exclusion, Kind::Read) => Na("readers share the lock by design"),
        (Rule::LostBeforeOverlap, Kind::Leader) => {
            Na("a leader's lease is always auto (renewed); its loss is tested in leader.rs")
        }
        (Rule::Exclusion | Rule::ReleaseOnDrop | Rule::LostBeforeOverlap | Rule::TokensGrow, _) => {
            Runs
        }
    }
}

/// A registry on `mode` in `format`, with a 1 s watchdog; `Err` when the configuration is
/// refused (an `Unsupported` format cell).
async fn registry(format: Format, mode: Mode) -> Result<Registry, distlock::InitError> {
    let backend = match mode {
        Mode::Single => format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        Mode::Cluster => format!("mode = \"cluster\"\nnodes = [{}]", quoted(&cluster_urls())),
        Mode::Sentinel => format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            sentinel_master_name(),
            quoted(&sentinel_urls())
        ),
        Mode::Redlock | Mode::Multi => format!(
            "mode = \"{}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
            if mode == Mode::Redlock {
                "redlock"
            } else {
                "multi"
            },
            quoted(&redlock_urls())
        ),
        Mode::Memory => "mode = \"memory\"".to_owned(),
    };
    let protocol = match format {
        Format::Distlock => "",
        Format::Redisson => "protocol = \"redisson\"\n",
    };
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n{backend}\n{protocol}"
    ))
    .await
}

/// Any primitive's guard, as the rules see it.
enum Guard {
    Lock(LockGuard),
    Semaphore(SemaphoreGuard),
    Multi(MultiLockGuard),
    Leader(Box<LeaderGuard>),
}

impl Guard {
    fn token(&self) -> u64 {
        match self {
            Guard::Lock(g) => g.fencing_token(),
            Guard::Semaphore(g) => g.fencing_token(),
            Guard::Multi(g) => g
                .fencing_tokens()
                .iter()
                .map(|(_, t)| *t)
                .max()
                .unwrap_or(0),
            Guard::Leader(g) => g.epoch(),
        }
    }

    async fn lost(&self) -> LockError {
        match self {
            Guard::Lock(g) => g.lost().await,
            Guard::Semaphore(g) => g.lost().await,
            Guard::Multi(g) => g.lost().await,
            Guard::Leader(g) => g.lost().await,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Guard::Lock(g) => g.release().await,
            Guard::Semaphore(g) => g.release().await,
            Guard::Multi(g) => g.release().await,
            Guard::Leader(g) => g.resign().await,
        }
    }
}

/// Take `key` as `kind` (a multi-key lock: `key` and `key:2`; a semaphore: 1 permit of 1).
async fn take(
    reg: &Registry,
    kind: Kind,
    key: &str,
    wait: Duration,
    lease: Lease,
) -> Result<Guard, LockError> {
    let lock = |k| reg.lock(key).kind(k).wait(wait).lease(lease);
    Ok(match kind {
        Kind::Reentrant => Guard::Lock(lock(LockKind::Reentrant).acquire().await?),
        Kind::Fair => Guard::Lock(lock(LockKind::Fair).acquire().await?),
        Kind::Read => Guard::Lock(lock(LockKind::Read).acquire().await?),
        Kind::Write => Guard::Lock(lock(LockKind::Write).acquire().await?),
        Kind::Semaphore => Guard::Semaphore(
            reg.semaphore(key, 1)
                .wait(wait)
                .lease(lease)
                .acquire(1)
                .await?,
        ),
        Kind::MultiKey => Guard::Multi(
            reg.lock_all([key.to_owned(), format!("{key}:2")])
                .wait(wait)
                .lease(lease)
                .acquire()
                .await?,
        ),
        Kind::Leader => Guard::Leader(Box::new(reg.leader(key).wait(wait).campaign().await?)),
    })
}

/// The kind a second owner takes to be excluded by a holder of `kind`: a writer for a
/// reader (readers share), the same kind for the rest.
fn excluded_by(kind: Kind) -> Kind {
    match kind {
        Kind::Read => Kind::Write,
        Kind::Reentrant
        | Kind::Fair
        | Kind::Write
        | Kind::Semaphore
        | Kind::MultiKey
        | Kind::Leader => kind,
    }
}

async fn exclusion(reg: &Registry, kind: Kind, key: &str, at: &str) {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (reg, key, inside, most) =
                (reg.clone(), key.to_owned(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    let g = take(&reg, kind, &key, Duration::from_secs(10), Lease::Auto)
                        .await
                        .expect("take within the wait");
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await
            .unwrap_or_else(|e| panic!("{at}: a task failed: {e}"));
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "{at}: two owners inside at once"
    );
}

async fn release_on_drop(reg: &Registry, kind: Kind, key: &str, at: &str) {
    let long = Lease::Fixed(Duration::from_secs(30));
    let g = take(reg, kind, key, Duration::ZERO, long)
        .await
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    drop(g);
    let start = Instant::now();
    let again = take(reg, excluded_by(kind), key, Duration::from_secs(10), long)
        .await
        .unwrap_or_else(|e| panic!("{at}: not freed by the drop: {e}"));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{at}: freed only after {:?} (the lease is 30 s)",
        start.elapsed()
    );
    again.release().await.expect("release");
}

async fn lost_before_overlap(reg: &Registry, kind: Kind, key: &str, at: &str) {
    let lease = Lease::Fixed(Duration::from_millis(800));
    let holder = take(reg, kind, key, Duration::ZERO, lease)
        .await
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    let lost_at = {
        let holder = &holder;
        async move {
            holder.lost().await;
            Instant::now()
        }
    };
    let waiter = async {
        let g = take(
            reg,
            excluded_by(kind),
            key,
            Duration::from_secs(10),
            Lease::Fixed(Duration::from_secs(5)),
        )
        .await
        .unwrap_or_else(|e| panic!("{at}: the waiter: {e}"));
        (Instant::now(), g)
    };
    let (lost_at, (got_at, g)) = tokio::join!(lost_at, waiter);
    assert!(
        lost_at <= got_at,
        "{at}: the waiter got in {:?} before the holder heard of its loss",
        lost_at - got_at
    );
    g.release().await.expect("release");
    drop(holder);
}

async fn tokens_grow(reg: &Registry, kind: Kind, key: &str, at: &str) {
    let first = take(reg, kind, key, Duration::from_secs(5), Lease::Auto)
        .await
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    let t1 = first.token();
    first.release().await.expect("release");
    let second = take(reg, kind, key, Duration::from_secs(5), Lease::Auto)
        .await
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    let t2 = second.token();
    second.release().await.expect("release");
    assert!(t2 > t1, "{at}: token {t2} after {t1}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_rule_on_every_kind_format_and_mode() {
    let mut ran = 0;
    let mut refused = 0;
    let mut not_applicable = 0;
    for format in FORMATS {
        for mode in MODES {
            let reg = registry(format, mode).await;
            for kind in KINDS {
                for rule in RULES {
                    let at = format!("{rule:?} × {kind:?} × {format:?} × {mode:?}");
                    match (cell(rule, kind, format, mode), &reg) {
                        (Cell::NotApplicable(_), _) => not_applicable += 1,
                        (Cell::Unsupported(why), Err(e)) => {
                            refused += 1;
                            assert!(
                                e.to_string().contains("protocol"),
                                "{at}: refused for another reason than the table's ({why}): {e}"
                            );
                        }
                        (Cell::Unsupported(why), Ok(reg)) => {
                            refused += 1;
                            let key = unique("rules");
                            match take(reg, kind, &key, Duration::ZERO, Lease::Auto).await {
                                Err(LockError::Unsupported {
                                    format: f, mode: m, ..
                                }) => {
                                    // Typed: the caller can match on the format and mode.
                                    assert_eq!(
                                        (f.name(), m.name()),
                                        (
                                            format!("{format:?}").to_lowercase().as_str(),
                                            format!("{mode:?}").to_lowercase().as_str()
                                        ),
                                        "{at}: refused naming another format or mode"
                                    );
                                }
                                Err(e) => panic!("{at}: expected Unsupported ({why}), got {e}"),
                                Ok(_) => panic!(
                                    "{at}: the table says Unsupported ({why}), but it was taken"
                                ),
                            }
                        }
                        (Cell::Runs, Err(e)) => {
                            panic!("{at}: the table says Runs, but the registry was refused: {e}")
                        }
                        (Cell::Runs, Ok(reg)) => {
                            ran += 1;
                            let key = unique("rules");
                            match rule {
                                Rule::Exclusion => exclusion(reg, kind, &key, &at).await,
                                Rule::ReleaseOnDrop => release_on_drop(reg, kind, &key, &at).await,
                                Rule::LostBeforeOverlap => {
                                    lost_before_overlap(reg, kind, &key, &at).await
                                }
                                Rule::TokensGrow => tokens_grow(reg, kind, &key, &at).await,
                            }
                        }
                    }
                }
            }
        }
    }
    println!("rules: {ran} cells ran, {refused} refused as the table says, {not_applicable} not applicable");
    assert_eq!(
        ran + refused + not_applicable,
        RULES.len() * KINDS.len() * FORMATS.len() * MODES.len()
    );
}
