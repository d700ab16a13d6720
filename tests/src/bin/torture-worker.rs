//! One worker process of the torture run (`torture`): takes a lock over and over and
//! records every critical section in a history file (`distlock_tests::history`).
//!
//! `torture-worker CONFIG KEY RESOURCE_URL HISTORY DURATION_MS HOLD_MS MAX_SECTIONS [KIND]`
//!
//! KIND names an entry of `distlock_tests::history::KINDS` (default `reentrant`): a lock
//! kind, the read-write mix (reader sections by turns: they only read the counter), a
//! one-permit semaphore, or a leader election (a section is one leadership, its epoch the
//! token). The format (`protocol = "redisson"`) is the configuration's.
//!
//! CONFIG is a distlock TOML file with two backends: `main`, the backend under test, and
//! `resource`, a separate redis-server standing for the resource the lock protects (no
//! faults are injected there). Each section:
//!
//! 1. acquire `KEY` on `main` (auto lease), record the token and the instant;
//! 2. read the unfenced counter on the resource (`GET`); claim the fenced balance with the
//!    token, then read it (`registry.fence(..).backend("resource")`: `claim`, `get`);
//! 3. sleep HOLD_MS (where the driver pauses holders);
//! 4. write the unfenced counter back + 1 (`SET v+1`), then the fenced balance + 1 (`set`
//!    with the token: refused once a newer holder has claimed it);
//! 5. record the instant, then send the release.
//!
//! The checker counts the updates lost on each: the unfenced counter loses some under
//! pauses; the fenced balance, claimed before it is read, must lose none.
//!
//! All the while `lost()` is watched and its instant recorded; the body does *not* stop on
//! it (as a careless application would not), so the checker sees what fencing prevents.
//!
//! "Free means available" (with `TORTURE_NODES`, every server of the backend as
//! `host:port,...`): in the driver's quiet windows (no fault active: `torture:KEY:quiet`
//! on the resource names one worker by its pid, for a few hundred ms) the other workers
//! take no new section, and the named one, once no server holds a key of the lock, tries
//! it with `try_acquire` (wait 0). Refused, it looks again at once: the lock still held by
//! nobody means a free lock was refused, recorded in `HISTORY.free` as `refused`; a
//! success is `ok`; a key found again (an acquisition sent before the window began) is
//! `raced`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{LeaderGuard, Lease, LockError, LockGuard, LockKind, Registry, SemaphoreGuard};
use distlock_tests::history::{now_ns, Primitive, Recorder};
use redis::AsyncCommands;
use std::io::Write as _;

fn kind(e: &LockError) -> &'static str {
    match e {
        LockError::Timeout { .. } => "timeout",
        LockError::QuorumNotReached { .. } => "quorum_not_reached",
        LockError::Backend { .. } => "backend",
        LockError::LeaseLost { .. } => "lease_lost",
        LockError::ReplicationFailed { .. } => "replication_failed",
        _ => "other",
    }
}

/// Every key of the lock `key` on the servers `nodes` (`host:port`): names containing
/// `key` (distlock's `PREFIX{KEY}...`, Redisson's `KEY`, `{KEY}:...`), less the fencing
/// counters (`...:fence`, `redisson_lock_token:...`), which outlive every hold, and
/// Redisson's unlock latches (`redisson_unlock_latch:...`, an unlock's answer). `None`
/// when a server could not be asked.
async fn lock_keys(nodes: &[redis::Client], key: &str) -> Option<Vec<String>> {
    let mut found = Vec::new();
    for client in nodes {
        let ask = async {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("KEYS")
                .arg(format!("*{key}*"))
                .query_async::<Vec<String>>(&mut c)
                .await
        };
        let keys = tokio::time::timeout(Duration::from_millis(500), ask)
            .await
            .ok()?
            .ok()?;
        found.extend(keys.into_iter().filter(|k| {
            !k.ends_with(":fence")
                && !k.starts_with("redisson_lock_token:")
                && !k.starts_with("redisson_unlock_latch:")
        }));
    }
    Some(found)
}

/// A try_acquire (wait 0) of `primitive` on `key`, released at once: whether it got it.
async fn try_take(registry: &Registry, primitive: Primitive, key: &str) -> Result<bool, LockError> {
    let lock = |kind: LockKind| registry.lock(key).kind(kind).try_acquire();
    match primitive {
        Primitive::Lock(kind) => Ok(match lock(kind).await? {
            Some(g) => {
                let _ = g.release().await;
                true
            }
            None => false,
        }),
        // The strictest: a writer needs no reader and no writer in.
        Primitive::ReadWriteMix => Ok(match lock(LockKind::Write).await? {
            Some(g) => {
                let _ = g.release().await;
                true
            }
            None => false,
        }),
        Primitive::Semaphore => Ok(match registry.semaphore(key, 1).try_acquire(1).await? {
            Some(g) => {
                let _ = g.release().await;
                true
            }
            None => false,
        }),
        Primitive::Leader => match registry.leader(key).wait(Duration::ZERO).campaign().await {
            Ok(g) => {
                let _ = g.resign().await;
                Ok(true)
            }
            Err(LockError::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        },
    }
}

/// The driver's quiet window (see the module docs): until it ends, this worker takes no
/// new section; the worker it names checks that the free lock is available. What to
/// record, if anything.
async fn quiet_window(
    registry: &Registry,
    primitive: Primitive,
    key: &str,
    nodes: &[redis::Client],
    resource: &mut redis::aio::MultiplexedConnection,
) -> Option<String> {
    let quiet = format!("torture:{key}:quiet");
    let me = std::process::id().to_string();
    let mut outcome = None;
    loop {
        let named: Option<String> = resource.get(&quiet).await.ok().flatten();
        let Some(named) = named else {
            return outcome;
        };
        if named != me || outcome.is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        // Until the holder, if any, has finished its section.
        match lock_keys(nodes, key).await {
            Some(k) if k.is_empty() => {}
            _ => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        }
        outcome = match try_take(registry, primitive, key).await {
            Ok(true) => Some("ok".to_string()),
            Ok(false) => match lock_keys(nodes, key).await {
                Some(k) if k.is_empty() => Some(format!(
                    "refused {} ns: no key of the lock on any server before and after a try_acquire that was refused",
                    now_ns()
                )),
                _ => Some("raced".to_string()),
            },
            Err(e) => Some(format!("refused {} ns: try_acquire failed: {e}", now_ns())),
        };
    }
}

/// What one section holds.
enum Held {
    Lock(LockGuard),
    Semaphore(SemaphoreGuard),
    Leader(Box<LeaderGuard>),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token(),
            Held::Semaphore(g) => g.fencing_token(),
            Held::Leader(g) => g.epoch(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::Lock(g) => drop(g.lost().await),
            Held::Semaphore(g) => drop(g.lost().await),
            Held::Leader(g) => drop(g.lost().await),
        }
    }

    async fn release(self) {
        let _ = match self {
            Held::Lock(g) => g.release().await,
            Held::Semaphore(g) => g.release().await,
            Held::Leader(g) => g.resign().await,
        };
    }
}

/// Take one section of `primitive` on `key`; `read`: a reader's turn of the mix.
async fn take(
    registry: &Registry,
    primitive: Primitive,
    key: &str,
    read: bool,
) -> Result<Held, LockError> {
    let lock = |kind: LockKind| registry.lock(key).kind(kind).lease(Lease::Auto).acquire();
    Ok(match primitive {
        Primitive::Lock(kind) => Held::Lock(lock(kind).await?),
        Primitive::ReadWriteMix if read => Held::Lock(lock(LockKind::Read).await?),
        Primitive::ReadWriteMix => Held::Lock(lock(LockKind::Write).await?),
        Primitive::Semaphore => Held::Semaphore(
            registry
                .semaphore(key, 1)
                .lease(Lease::Auto)
                .acquire(1)
                .await?,
        ),
        Primitive::Leader => Held::Leader(Box::new(
            registry
                .leader(key)
                .wait(Duration::from_secs(5))
                .campaign()
                .await?,
        )),
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 8 && args.len() != 9 {
        return Err("usage: torture-worker CONFIG KEY RESOURCE_URL HISTORY DURATION_MS HOLD_MS MAX_SECTIONS [KIND]".into());
    }
    let spec = match args.get(8) {
        None => &distlock_tests::history::KINDS[0],
        Some(name) => distlock_tests::history::kind(name)
            .ok_or_else(|| format!("torture-worker: unknown kind {name}"))?,
    };
    let (config, key, resource) = (&args[1], args[2].clone(), &args[3]);
    let duration = Duration::from_millis(args[5].parse()?);
    let hold = Duration::from_millis(args[6].parse()?);
    let max_sections: u64 = args[7].parse()?;
    let rec = Arc::new(Mutex::new(Recorder::create(std::path::Path::new(
        &args[4],
    ))?));
    // The backend may be under a fault while this process starts (a blackhole, a server
    // restarting): init fails then, and is tried again (backing off, within the run),
    // rather than ending the worker.
    let start = Instant::now();
    let mut pause = Duration::from_millis(50);
    let registry = loop {
        match Registry::from_path(config).await {
            Ok(r) => break r,
            Err(e) if start.elapsed() + pause < duration => {
                eprintln!("init failed at {} ns (trying again): {e}", now_ns());
                rec.lock().unwrap().failed("init");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let client = redis::Client::open(resource.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let counter = format!("torture:{key}:counter");
    let fenced = format!("torture:{key}:fenced");
    let mut sections = 0u64;
    // The first few acquire errors in full, on stderr (the run keeps it next to the
    // history when a run fails or with --keep).
    let mut shown = 0u32;
    let pid = u64::from(std::process::id());
    let nodes: Vec<redis::Client> = std::env::var("TORTURE_NODES")
        .unwrap_or_default()
        .split(',')
        .filter(|a| !a.is_empty())
        .map(|a| redis::Client::open(format!("redis://{a}")))
        .collect::<Result<_, _>>()?;
    let mut free_log =
        std::fs::File::create(std::path::Path::new(&args[4]).with_extension("free"))?;
    while start.elapsed() < duration && sections < max_sections {
        if !nodes.is_empty() {
            if let Some(line) =
                quiet_window(&registry, spec.primitive, &key, &nodes, &mut conn).await
            {
                writeln!(free_log, "{line}")?;
            }
        }
        // The mix: readers and writers by turns (offset by the pid, so both are inside
        // together).
        let read = spec.primitive == Primitive::ReadWriteMix && (sections + pid).is_multiple_of(2);
        let guard = match take(&registry, spec.primitive, &key, read).await {
            Ok(g) => g,
            Err(e) => {
                if shown < 5 {
                    shown += 1;
                    eprintln!("acquire failed at {} ns: {e}", now_ns());
                }
                rec.lock().unwrap().failed(kind(&e));
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let token = guard.token();
        if read {
            rec.lock().unwrap().acquired_shared(token, now_ns());
        } else {
            rec.lock().unwrap().acquired(token, now_ns());
        }
        sections += 1;
        let body = async {
            let v: Option<i64> = conn.get(&counter).await.ok().flatten();
            let balance = registry.fence(fenced.as_str()).backend("resource");
            // The fenced balance: claim, then read (a reader only reads the counter).
            let base =
                if read {
                    None
                } else {
                    let t0 = now_ns();
                    match balance.claim(token).await {
                        Ok(true) => match balance.get().await {
                            Ok(b) => Some(b.map_or(Ok(0), |b| {
                                String::from_utf8_lossy(&b.value).parse::<u64>()
                            })),
                            Err(_) => None,
                        },
                        Ok(false) => {
                            rec.lock().unwrap().fenced(token, t0, now_ns(), false);
                            None
                        }
                        Err(_) => None,
                    }
                };
            tokio::time::sleep(hold).await;
            if read {
                // A reader only reads.
                return;
            }
            let sent = now_ns();
            if conn
                .set::<_, _, ()>(&counter, v.unwrap_or(0) + 1)
                .await
                .is_ok()
            {
                rec.lock().unwrap().unfenced(token, sent);
            }
            let Some(Ok(base)) = base else {
                // Claim refused (recorded), failed, or not a number: no fenced write.
                return;
            };
            let t0 = now_ns();
            let accepted = balance.set((base + 1).to_string(), token).await;
            let t1 = now_ns();
            if let Ok(accepted) = accepted {
                rec.lock().unwrap().fenced(token, t0, t1, accepted);
            }
        };
        tokio::pin!(body);
        let mut told = false;
        loop {
            tokio::select! {
                biased;
                _ = guard.lost(), if !told => {
                    told = true;
                    rec.lock().unwrap().lost(token, now_ns());
                }
                () = &mut body => break,
            }
        }
        rec.lock().unwrap().releasing(token, now_ns());
        guard.release().await;
    }
    println!("DONE {sections}");
    Ok(())
}
