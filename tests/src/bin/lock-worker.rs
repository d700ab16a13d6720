//! A second OS process for the integration tests.
//!
//! `lock-worker count URL KEY COUNTER TASKS ITERATIONS`: TASKS tasks each do ITERATIONS
//! locked read-modify-write increments of the Redis string COUNTER under lock KEY, and
//! check that no other holder is inside at the same time (INCR/DECR of COUNTER:inside).
//! Prints `DONE <overlaps>`.
//!
//! `lock-worker multi MODE NODES COUNTER_URL KEY1,KEY2,.. TASKS ITERATIONS`: on a backend of
//! MODE (`single` or `cluster`) at NODES (comma-separated URLs), TASKS tasks each lock all
//! the keys together (`Lock::all`, asked in the order given) ITERATIONS times; inside, for
//! every key, a holder count (INCR/DECR of `KEY:inside` on the redis-server at COUNTER_URL)
//! must be 1, and `KEY:count` gets a non-atomic read-modify-write increment. Prints
//! `DONE <overlaps>`.
//!
//! `lock-worker leader MODE NODES NAME WATCHDOG ID`: on a backend of MODE (`single`,
//! `cluster`, or `sentinel` with NODES `MASTER_NAME,SENTINEL_URL,..`) at NODES, campaigns in the election NAME with info ID (watchdog_timeout
//! WATCHDOG), and prints one line per event with `CLOCK_MONOTONIC` nanoseconds (comparable
//! across the processes of the machine): `ELECTED ID EPOCH T` when the campaign returned,
//! `LOST ID EPOCH T` when `lost()` fired (then it campaigns again), `RESIGNING ID EPOCH T`
//! when it stops leading on a `resign` line on stdin, then `RESIGNED ID EPOCH T` and exits.
//! `exit` on stdin (or stdin closed) while campaigning drops the campaign and exits.
//!
//! `lock-worker sem MODE NODES COUNTER_URL KEY PERMITS TASKS ITERATIONS`: on a backend of
//! MODE (`single`, `cluster` or `sentinel`: NODES is then `MASTER_NAME|SENTINEL_URLS`) at NODES, TASKS tasks each take 1 permit of the semaphore
//! KEY of PERMITS permits ITERATIONS times; inside, the holder counts itself in (INCR of
//! `KEY:inside` on the redis-server at COUNTER_URL, recording the largest count seen in
//! `KEY:max`), yields, and counts itself out. Prints `DONE <times the count exceeded PERMITS>`.
//!
//! `lock-worker sem-hold MODE NODES KEY PERMITS WATCHDOG`: takes 1 permit of the semaphore
//! KEY (auto lease, watchdog_timeout WATCHDOG), prints `HELD <token>` and waits forever.
//!
//! `lock-worker hold URL KEY WATCHDOG`: acquires KEY with an auto lease (watchdog_timeout
//! WATCHDOG, e.g. `1s`), prints `HELD <token>` and waits forever (to be SIGKILLed).
//!
//! `lock-worker hold-graceful URL KEY`: with the defaults (`watchdog_timeout` 30 s) as the
//! global registry, a task acquires KEY with an auto lease and holds it until `lost()`
//! fires, then drops it (as a locked section does); prints `HELD <token>`. On SIGTERM it
//! calls `distlock::shutdown()`, prints `SHUTDOWN <ms it took>` and exits 0.
//!
//! `lock-worker explore-holder CONFIG_FILE KEY LEASE`: the explorer's holder in a process
//! of its own (tests/src/explore/holder.rs). With the registry of the TOML file, tries
//! once to take the reentrant lock KEY (LEASE: `auto`, or a fixed lease in ms); prints
//! `HELD <token>`, `BUSY`, or `ERR <error>` (the try's, or the registry's when it cannot
//! start; then exits). Holding, it waits for a line on
//! stdin (the explorer SIGSTOPs it meanwhile, and SIGCONTs it before writing the line);
//! then prints at once `RESUMED <is_held()>`, then `LOST <ms>` when `lost()` resolves
//! within 2 s of the line (else `NOT-LOST`), then releases: `RELEASED ok` or
//! `RELEASED <the error>`, and exits. With a fourth argument `trust-a-flag` (the
//! explorer's self-test plants it), `RESUMED` answers from a flag set when the lock was
//! taken instead of `is_held()`: a holder that does not ask its guard.
//!
//! `lock-worker pairs URL KEY N`: N acquisitions of KEY, each released at once, one after
//! the other (a fixed lease of 30 s); prints `DONE`. `scripts/acquire-path.sh` runs it under
//! callgrind to list the files one acquisition and release pass through.
//!
//! `lock-worker hold-redisson URL KEY WATCHDOG KIND`: the same with `protocol = "redisson"`
//! and a lock of KIND (`reentrant`, `fair`, `read`, `write`), waiting up to 60 s for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Lease, LockKind, Registry};
use redis::AsyncCommands;

fn config(url: &str, watchdog: &str) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\nwait = \"60s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\n"
    )
}

/// A registry whose backend `main` is MODE at NODES: `single` (a URL), `cluster` (URLs,
/// comma-separated) or `sentinel` (`MASTER_NAME|URL,URL,..` of the sentinels).
async fn registry_of(
    mode: &str,
    nodes: &str,
    watchdog: &str,
) -> Result<Registry, Box<dyn std::error::Error>> {
    let backend = match mode {
        "single" => format!("mode = \"single\"\nurl = \"{nodes}\""),
        "cluster" => {
            let list: Vec<String> = nodes.split(',').map(|n| format!("\"{n}\"")).collect();
            format!("mode = \"cluster\"\nnodes = [{}]", list.join(", "))
        }
        "sentinel" => {
            let (master, sentinels) = nodes
                .split_once('|')
                .ok_or("sentinel NODES: MASTER_NAME|URL,URL,..")?;
            let list: Vec<String> = sentinels.split(',').map(|n| format!("\"{n}\"")).collect();
            format!(
                "mode = \"sentinel\"\nmaster_name = \"{master}\"\nsentinels = [{}]",
                list.join(", ")
            )
        }
        other => return Err(format!("unknown mode {other}").into()),
    };
    Ok(Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\nwait = \"60s\"\n[backends.main]\n{backend}\n"
    ))
    .await?)
}

/// INCR `KEYS[1]`, keeping the largest value seen in `KEYS[2]`; returns the new value.
const COUNT_IN: &str = "local v = redis.call('incr', KEYS[1]) \
    if v > tonumber(redis.call('get', KEYS[2]) or 0) then redis.call('set', KEYS[2], v) end \
    return v";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("count") if args.len() == 7 => {
            let (url, key, counter) = (&args[2], &args[3], &args[4]);
            let tasks: usize = args[5].parse()?;
            let iterations: usize = args[6].parse()?;
            let registry = Registry::from_str(&config(url, "5s")).await?;
            let client = redis::Client::open(url.as_str())?;
            let conn = client.get_multiplexed_async_connection().await?;
            let overlaps = Arc::new(AtomicU64::new(0));
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let (registry, mut conn, key, counter, overlaps) =
                    (registry.clone(), conn.clone(), key.clone(), counter.clone(), overlaps.clone());
                handles.push(tokio::spawn(async move {
                    for _ in 0..iterations {
                        let guard = registry.lock(key.as_str()).acquire().await.expect("acquire");
                        let inside: i64 = conn.incr(format!("{counter}:inside"), 1).await.expect("incr");
                        if inside != 1 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        let v: Option<i64> = conn.get(&counter).await.expect("get");
                        tokio::task::yield_now().await;
                        let () = conn.set(&counter, v.unwrap_or(0) + 1).await.expect("set");
                        let _: i64 = conn.decr(format!("{counter}:inside"), 1).await.expect("decr");
                        guard.release().await.expect("release");
                    }
                }));
            }
            for h in handles {
                h.await?;
            }
            println!("DONE {}", overlaps.load(Ordering::SeqCst));
            Ok(())
        }
        Some("multi") if args.len() == 8 => {
            let (mode, nodes, counter_url) = (&args[2], &args[3], &args[4]);
            let keys: Vec<String> = args[5].split(',').map(str::to_owned).collect();
            let tasks: usize = args[6].parse()?;
            let iterations: usize = args[7].parse()?;
            let backend = match mode.as_str() {
                "single" => format!("mode = \"single\"\nurl = \"{nodes}\""),
                "cluster" => {
                    let list: Vec<String> = nodes.split(',').map(|n| format!("\"{n}\"")).collect();
                    format!("mode = \"cluster\"\nnodes = [{}]", list.join(", "))
                }
                other => return Err(format!("unknown mode {other}").into()),
            };
            let registry = Registry::from_str(&format!(
                "[defaults]\nwatchdog_timeout = \"5s\"\nwait = \"60s\"\n[backends.main]\n{backend}\n"
            ))
            .await?;
            let client = redis::Client::open(counter_url.as_str())?;
            let conn = client.get_multiplexed_async_connection().await?;
            let overlaps = Arc::new(AtomicU64::new(0));
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let (registry, mut conn, keys, overlaps) =
                    (registry.clone(), conn.clone(), keys.clone(), overlaps.clone());
                handles.push(tokio::spawn(async move {
                    for _ in 0..iterations {
                        let guard = registry.lock_all(keys.clone()).acquire().await.expect("acquire all");
                        for key in &keys {
                            let inside: i64 = conn.incr(format!("{key}:inside"), 1).await.expect("incr");
                            if inside != 1 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        for key in &keys {
                            let v: Option<i64> = conn.get(format!("{key}:count")).await.expect("get");
                            tokio::task::yield_now().await;
                            let () = conn.set(format!("{key}:count"), v.unwrap_or(0) + 1).await.expect("set");
                        }
                        for key in &keys {
                            let _: i64 = conn.decr(format!("{key}:inside"), 1).await.expect("decr");
                        }
                        guard.release().await.expect("release");
                    }
                }));
            }
            for h in handles {
                h.await?;
            }
            println!("DONE {}", overlaps.load(Ordering::SeqCst));
            Ok(())
        }
        Some("leader") if args.len() == 7 => {
            let (mode, nodes, name, watchdog, id) = (&args[2], &args[3], &args[4], &args[5], &args[6]);
            let backend = match mode.as_str() {
                "single" => format!("mode = \"single\"\nurl = \"{nodes}\""),
                "cluster" => {
                    let list: Vec<String> = nodes.split(',').map(|n| format!("\"{n}\"")).collect();
                    format!("mode = \"cluster\"\nnodes = [{}]", list.join(", "))
                }
                "sentinel" => {
                    // NODES: MASTER_NAME,SENTINEL_URL,...
                    let mut parts = nodes.split(',');
                    let master = parts.next().unwrap_or_default();
                    let list: Vec<String> = parts.map(|n| format!("\"{n}\"")).collect();
                    format!(
                        "mode = \"sentinel\"\nmaster_name = \"{master}\"\nsentinels = [{}]",
                        list.join(", ")
                    )
                }
                other => return Err(format!("unknown mode {other}").into()),
            };
            let registry = Registry::from_str(&format!(
                "[defaults]\nwatchdog_timeout = \"{watchdog}\"\n[backends.main]\n{backend}\n"
            ))
            .await?;
            let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
            std::thread::spawn(move || {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            let now = distlock_tests::history::now_ns;
            loop {
                let campaign = registry.leader(name.as_str()).info(id.as_str()).campaign();
                let leader = tokio::select! {
                    g = campaign => g?,
                    // Dropping the campaign future leaves nothing held.
                    _ = lines.recv() => return Ok(()),
                };
                let epoch = leader.epoch();
                println!("ELECTED {id} {epoch} {}", now());
                tokio::select! {
                    _ = leader.lost() => {
                        println!("LOST {id} {epoch} {}", now());
                        drop(leader);
                    }
                    line = lines.recv() => {
                        if line.as_deref() != Some("resign") {
                            return Err(format!("{id}: expected `resign`, got {line:?}").into());
                        }
                        println!("RESIGNING {id} {epoch} {}", now());
                        leader.resign().await?;
                        println!("RESIGNED {id} {epoch} {}", now());
                        return Ok(());
                    }
                }
            }
        }
        Some("sem") if args.len() == 9 => {
            let (mode, nodes, counter_url, key) = (&args[2], &args[3], &args[4], &args[5]);
            let permits: u32 = args[6].parse()?;
            let tasks: usize = args[7].parse()?;
            let iterations: usize = args[8].parse()?;
            let registry = registry_of(mode, nodes, "5s").await?;
            let client = redis::Client::open(counter_url.as_str())?;
            let conn = client.get_multiplexed_async_connection().await?;
            let over = Arc::new(AtomicU64::new(0));
            let mut handles = Vec::new();
            for _ in 0..tasks {
                let (sem, mut conn, key, over) = (
                    registry.semaphore(key.as_str(), permits),
                    conn.clone(),
                    key.clone(),
                    over.clone(),
                );
                handles.push(tokio::spawn(async move {
                    let count_in = redis::Script::new(COUNT_IN);
                    for _ in 0..iterations {
                        let guard = sem.acquire(1).await.expect("acquire a permit");
                        let inside: i64 = count_in
                            .key(format!("{key}:inside"))
                            .key(format!("{key}:max"))
                            .invoke_async(&mut conn)
                            .await
                            .expect("count in");
                        if inside > i64::from(permits) {
                            over.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        let _: i64 = conn.decr(format!("{key}:inside"), 1).await.expect("decr");
                        guard.release().await.expect("release");
                    }
                }));
            }
            for h in handles {
                h.await?;
            }
            println!("DONE {}", over.load(Ordering::SeqCst));
            Ok(())
        }
        Some("sem-hold") if args.len() == 7 => {
            let registry = registry_of(&args[2], &args[3], &args[6]).await?;
            let permits: u32 = args[5].parse()?;
            let guard = registry
                .semaphore(args[4].as_str(), permits)
                .lease(Lease::Auto)
                .acquire(1)
                .await?;
            println!("HELD {}", guard.fencing_token());
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        Some("hold") if args.len() == 5 => {
            let registry = Registry::from_str(&config(&args[2], &args[4])).await?;
            let guard = registry.lock(args[3].as_str()).lease(Lease::Auto).acquire().await?;
            println!("HELD {}", guard.fencing_token());
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        Some("explore-holder") if args.len() == 5 || args.len() == 6 => {
            let trust_a_flag = args.get(5).map(String::as_str) == Some("trust-a-flag");
            explore_holder(&args[2], &args[3], &args[4], trust_a_flag).await
        }
        Some("pairs") if args.len() == 5 => {
            let registry = Registry::from_str(&config(&args[2], "30s")).await?;
            let n: u64 = args[4].parse()?;
            for _ in 0..n {
                let guard = registry
                    .lock(args[3].as_str())
                    .lease(Lease::Fixed(Duration::from_secs(30)))
                    .acquire()
                    .await?;
                guard.release().await?;
            }
            println!("DONE");
            Ok(())
        }
        Some("hold-graceful") if args.len() == 4 => {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let text = format!("[backends.main]\nmode = \"single\"\nurl = \"{}\"\n", args[2]);
            distlock::init_with(Registry::from_str(&text).await?)?;
            let guard = distlock::Lock::new(args[3].as_str())
                .lease(Lease::Auto)
                .acquire()
                .await?;
            println!("HELD {}", guard.fencing_token());
            let holder = tokio::spawn(async move {
                let lost = guard.lost().await;
                drop(guard);
                lost
            });
            term.recv().await;
            let start = std::time::Instant::now();
            distlock::shutdown().await;
            println!("SHUTDOWN {}", start.elapsed().as_millis());
            let lost = holder.await?;
            eprintln!("holder told: {lost}");
            Ok(())
        }
        Some("hold-redisson") if args.len() == 6 => {
            let text = format!(
                "{}protocol = \"redisson\"\n",
                config(&args[2], &args[4])
            );
            let registry = Registry::from_str(&text).await?;
            let kind = match args[5].as_str() {
                "fair" => LockKind::Fair,
                "read" => LockKind::Read,
                "write" => LockKind::Write,
                _ => LockKind::Reentrant,
            };
            let guard = registry
                .lock(args[3].as_str())
                .kind(kind)
                .lease(Lease::Auto)
                .acquire()
                .await?;
            println!("HELD {}", guard.fencing_token());
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
        Some("fair") if args.len() == 5 => {
            let (url, key) = (args[2].clone(), args[3].clone());
            let wait = Duration::from_millis(args[4].parse()?);
            let registry = Registry::from_str(&config(&url, "5s")).await?;
            let client = redis::Client::open(url.as_str())?;
            let conn = client.get_multiplexed_async_connection().await?;
            let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
            std::thread::spawn(move || {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            let mut handles = Vec::new();
            while let Some(label) = lines.recv().await {
                let (registry, mut conn, key) = (registry.clone(), conn.clone(), key.clone());
                handles.push(tokio::spawn(async move {
                    let guard = registry
                        .lock(key.as_str())
                        .kind(LockKind::Fair)
                        .wait(wait)
                        .acquire()
                        .await
                        .expect("fair acquire");
                    let _: i64 = conn.rpush(format!("{key}:order"), &label).await.expect("rpush");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    guard.release().await.expect("release");
                }));
            }
            for h in handles {
                h.await?;
            }
            println!("DONE");
            Ok(())
        }
        _ => Err("usage: lock-worker count URL KEY COUNTER TASKS ITERATIONS | lock-worker hold URL KEY WATCHDOG | lock-worker fair URL KEY WAIT_MS | lock-worker multi MODE NODES COUNTER_URL KEYS TASKS ITERATIONS | lock-worker leader MODE NODES NAME WATCHDOG ID | lock-worker sem MODE NODES COUNTER_URL KEY PERMITS TASKS ITERATIONS | lock-worker sem-hold MODE NODES KEY PERMITS WATCHDOG | lock-worker hold-redisson URL KEY WATCHDOG KIND".into()),
    }
}

/// `explore-holder`: see the head of this file.
async fn explore_holder(
    config_file: &str,
    key: &str,
    lease: &str,
    trust_a_flag: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let lease = match lease {
        "auto" => Lease::Auto,
        ms => Lease::Fixed(Duration::from_millis(ms.parse()?)),
    };
    // A registry that cannot start (a multi backend with a node slow or loading after a
    // fault) holds nothing: said like a failed try.
    let registry = match Registry::from_str(&std::fs::read_to_string(config_file)?).await {
        Ok(r) => r,
        Err(e) => {
            println!("ERR {e}");
            return Ok(());
        }
    };
    let guard = match registry.lock(key).lease(lease).try_acquire().await {
        Ok(Some(g)) => g,
        Ok(None) => {
            println!("BUSY");
            return Ok(());
        }
        Err(e) => {
            println!("ERR {e}");
            return Ok(());
        }
    };
    println!("HELD {}", guard.fencing_token());
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| ())
    })
    .await??;
    let resumed = std::time::Instant::now();
    println!("RESUMED {}", trust_a_flag || guard.is_held());
    match tokio::time::timeout(Duration::from_secs(2), guard.lost()).await {
        Ok(_) => println!("LOST {}", resumed.elapsed().as_millis()),
        Err(_) => println!("NOT-LOST"),
    }
    match guard.release().await {
        Ok(()) => println!("RELEASED ok"),
        Err(e) => println!("RELEASED {e}"),
    }
    Ok(())
}
