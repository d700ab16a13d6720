//! One worker process of the torture run (`torture`): takes a lock over and over and
//! records every critical section in a history file (`distlock_tests::history`).
//!
//! `torture-worker CONFIG KEY RESOURCE_URL HISTORY DURATION_MS HOLD_MS MAX_SECTIONS`
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

use distlock::{Lease, LockError, Registry};
use distlock_tests::history::{now_ns, Recorder};
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 8 {
        return Err("usage: torture-worker CONFIG KEY RESOURCE_URL HISTORY DURATION_MS HOLD_MS MAX_SECTIONS".into());
    }
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
    while start.elapsed() < duration && sections < max_sections {
        let guard = match registry
            .lock(key.as_str())
            .lease(Lease::Auto)
            .acquire()
            .await
        {
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
        let token = guard.fencing_token();
        rec.lock().unwrap().acquired(token, now_ns());
        sections += 1;
        let body = async {
            let v: Option<i64> = conn.get(&counter).await.ok().flatten();
            tokio::time::sleep(hold).await;
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
        let _ = guard.release().await;
    }
    println!("DONE {sections}");
    Ok(())
}
