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
//! The process dies with its parent (`PR_SET_PDEATHSIG`), so no worker outlives a run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{LeaderGuard, Lease, LockError, LockGuard, LockKind, Registry, SemaphoreGuard};
use distlock_tests::history::{now_ns, Primitive, Recorder};
use redis::AsyncCommands;

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
    let registry = Registry::from_path(config).await?;
    let client = redis::Client::open(resource.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let counter = format!("torture:{key}:counter");
    let fenced = format!("torture:{key}:fenced");
    let start = Instant::now();
    let mut sections = 0u64;
    // The first few acquire errors in full, on stderr (the run keeps it next to the
    // history when a run fails or with --keep).
    let mut shown = 0u32;
    let pid = u64::from(std::process::id());
    while start.elapsed() < duration && sections < max_sections {
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
