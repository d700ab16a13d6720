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
//! 2. unfenced read-modify-write of a counter on the resource: `GET`, sleep HOLD_MS, `SET v+1`;
//! 3. fenced write of the token to the resource (`registry.fence(..).backend("resource")`);
//! 4. record the instant, then send the release.
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
            let t0 = now_ns();
            let accepted = registry
                .fence(fenced.as_str())
                .backend("resource")
                .set(token.to_string(), token)
                .await;
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
