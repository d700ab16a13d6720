//! A bounded load driver for the flash sale: thousands of concurrent orders from hundreds of
//! users, each user sending several requests at once, spread over two (or more)
//! `flash-sale-server` processes; then it reads the database and checks the invariants.
//!
//! ```text
//! flash-sale-load --servers 127.0.0.1:18081,127.0.0.1:18082 --db flash-sale.db
//!                 [--users 400] [--per-user 10] [--voucher 1] [--concurrency 800]
//!                 [--timeout-secs 30]
//! ```
//!
//! Loopback only: every server address must resolve to 127.0.0.0/8 or ::1. The run is
//! bounded: `users * per-user` requests, at most `concurrency` in flight, each with a
//! timeout. Plain HTTP/1.1 over `tokio::net::TcpStream` (one connection per request).
//!
//! Exit status: 0 when no user has more than one order, nothing was oversold, the stock
//! accounting adds up, at least one order was placed and no request failed; 1 otherwise;
//! 2 on bad arguments.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

struct Args {
    servers: Vec<SocketAddr>,
    db: PathBuf,
    users: u64,
    per_user: u32,
    voucher: i64,
    concurrency: u32,
    timeout: Duration,
}

const USAGE: &str = "usage: flash-sale-load --servers HOST:PORT,HOST:PORT --db PATH [--users 400] \
[--per-user 10] [--voucher 1] [--concurrency 800] [--timeout-secs 30]";

async fn parse_args() -> Result<Args, String> {
    let mut servers = String::new();
    let mut db = None;
    let (mut users, mut per_user, mut voucher, mut concurrency, mut timeout) =
        (400u64, 10u32, 1i64, 800u32, 30u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag}: `{v}` is not a number"))
        };
        match flag.as_str() {
            "--servers" => servers = value,
            "--db" => db = Some(PathBuf::from(value)),
            "--users" => users = number(&value)?,
            "--per-user" => per_user = u32::try_from(number(&value)?).map_err(|e| e.to_string())?,
            "--voucher" => voucher = i64::try_from(number(&value)?).map_err(|e| e.to_string())?,
            "--concurrency" => {
                concurrency = u32::try_from(number(&value)?).map_err(|e| e.to_string())?
            }
            "--timeout-secs" => timeout = number(&value)?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let db = db.ok_or("--db is required")?;
    if !(1..=100_000).contains(&users) || !(1..=100).contains(&per_user) {
        return Err("--users must be 1..=100000 and --per-user 1..=100".into());
    }
    if !(1..=4000).contains(&concurrency) {
        return Err("--concurrency must be 1..=4000".into());
    }
    // A user's requests are sent together, so at least one user's worth must fit.
    let concurrency = concurrency.max(per_user);
    let mut addrs = Vec::new();
    for s in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host(s)
            .await
            .map_err(|e| format!("server `{s}`: {e}"))?
            .collect();
        let addr = *resolved
            .first()
            .ok_or(format!("server `{s}` resolves to nothing"))?;
        if !resolved.iter().all(|a| a.ip().is_loopback()) {
            return Err(format!(
                "server `{s}` is not a loopback address: this driver only loads servers on this machine"
            ));
        }
        addrs.push(addr);
    }
    if addrs.is_empty() {
        return Err("--servers is required (comma-separated HOST:PORT)".into());
    }
    Ok(Args {
        servers: addrs,
        db,
        users,
        per_user,
        voucher,
        concurrency,
        timeout: Duration::from_secs(timeout),
    })
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ordered,
    LockBusy,
    AlreadyOrdered,
    SoldOut,
    /// Any other status, with the body's error code.
    Status(u16, String),
    /// Connect, I/O, timeout or a malformed response.
    Transport(String),
}

/// `POST /orders` over a fresh connection (`Connection: close`), read to the end.
async fn order(server: SocketAddr, user_id: u64, voucher_id: i64) -> Outcome {
    let body = format!("{{\"user_id\":{user_id},\"voucher_id\":{voucher_id}}}");
    let request = format!(
        "POST /orders HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = TcpStream::connect(server).await?;
        stream.set_nodelay(true)?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::with_capacity(512);
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = match exchange.await {
        Ok(r) => r,
        Err(e) => return Outcome::Transport(e.kind().to_string()),
    };
    let text = String::from_utf8_lossy(&response);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok());
    let Some(status) = status else {
        return Outcome::Transport("malformed response".into());
    };
    let error = text
        .split_once("\"error\":\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("", |(code, _)| code);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let retry_after = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("retry-after:"));
    match (status, error) {
        (201, _) => Outcome::Ordered,
        // distlock's `IntoResponse for LockError`: 409 with a Retry-After.
        (409, "lock_timeout") if retry_after => Outcome::LockBusy,
        (409, "lock_timeout") => Outcome::Status(409, "lock_timeout without Retry-After".into()),
        (409, "already_ordered") => Outcome::AlreadyOrdered,
        (410, "sold_out") => Outcome::SoldOut,
        (s, e) => Outcome::Status(s, e.to_owned()),
    }
}

struct Sample {
    server: usize,
    outcome: Outcome,
    latency: Duration,
}

#[tokio::main]
async fn main() {
    let args = match parse_args().await {
        Ok(a) => a,
        Err(e) => {
            eprintln!("flash-sale-load: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match run(args).await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("flash-sale-load: {e}");
            std::process::exit(1);
        }
    }
}

/// Fire the load, print the table; `Ok(passed)`.
async fn run(args: Args) -> Result<bool, Box<dyn std::error::Error>> {
    let total = args.users * u64::from(args.per_user);
    let servers: Vec<String> = args.servers.iter().map(|s| s.to_string()).collect();
    println!(
        "flash-sale-load: {total} requests from {} users ({} concurrent each, at most {} in flight) against {}",
        args.users,
        args.per_user,
        args.concurrency,
        servers.join(", ")
    );

    let in_flight = Arc::new(Semaphore::new(args.concurrency as usize));
    let started = Instant::now();
    let mut users = tokio::task::JoinSet::new();
    for user_id in 1..=args.users {
        // All of a user's requests start together (a double click, times per_user), on
        // alternating servers, so the lock is contended within and across processes.
        let permits = in_flight.clone().acquire_many_owned(args.per_user).await?;
        let (servers, timeout, voucher) = (args.servers.clone(), args.timeout, args.voucher);
        users.spawn(async move {
            let mut requests = tokio::task::JoinSet::new();
            for j in 0..args.per_user {
                let index = (user_id as usize + j as usize) % servers.len();
                let server = servers[index];
                requests.spawn(async move {
                    let t0 = Instant::now();
                    let outcome = tokio::time::timeout(timeout, order(server, user_id, voucher))
                        .await
                        .unwrap_or_else(|_| Outcome::Transport("timed out".into()));
                    Sample {
                        server: index,
                        outcome,
                        latency: t0.elapsed(),
                    }
                });
            }
            let mut samples = Vec::new();
            while let Some(s) = requests.join_next().await {
                samples.push(s.unwrap_or_else(|e| Sample {
                    server: 0,
                    outcome: Outcome::Transport(format!("task failed: {e}")),
                    latency: Duration::ZERO,
                }));
            }
            drop(permits);
            samples
        });
    }
    let mut samples = Vec::with_capacity(total as usize);
    while let Some(user_samples) = users.join_next().await {
        samples.extend(user_samples?);
    }
    let elapsed = started.elapsed();

    // Responses.
    let mut counts: BTreeMap<Outcome, u64> = BTreeMap::new();
    let mut per_server = vec![0u64; args.servers.len()];
    let mut latencies: Vec<Duration> = Vec::with_capacity(samples.len());
    for s in &samples {
        *counts.entry(s.outcome.clone()).or_default() += 1;
        per_server[s.server] += 1;
        latencies.push(s.latency);
    }
    latencies.sort_unstable();
    let count = |o: &Outcome| counts.get(o).copied().unwrap_or(0);
    let ordered = count(&Outcome::Ordered);
    let lock_busy = count(&Outcome::LockBusy);
    let already = count(&Outcome::AlreadyOrdered);
    let sold_out = count(&Outcome::SoldOut);
    let other: Vec<(&Outcome, &u64)> = counts
        .iter()
        .filter(|(o, _)| matches!(o, Outcome::Status(..) | Outcome::Transport(_)))
        .collect();
    let other_errors: u64 = other.iter().map(|(_, n)| **n).sum();

    // The database, after the fact.
    let db = distlock_examples::open_db(&args.db, 1).await?;
    let voucher = sqlx::query("SELECT stock, initial_stock FROM vouchers WHERE id = ?1")
        .bind(args.voucher)
        .fetch_optional(&db)
        .await?
        .ok_or(format!(
            "voucher {} is not in {}",
            args.voucher,
            args.db.display()
        ))?;
    let stock_left: i64 = voucher.try_get(0)?;
    let initial: i64 = voucher.try_get(1)?;
    let sold: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE voucher_id = ?1")
        .bind(args.voucher)
        .fetch_one(&db)
        .await?;
    let duplicate_users: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT user_id FROM orders WHERE voucher_id = ?1
                               GROUP BY user_id HAVING COUNT(*) > 1)",
    )
    .bind(args.voucher)
    .fetch_one(&db)
    .await?;
    let by_server: Vec<(String, i64)> = sqlx::query_as(
        "SELECT server, COUNT(*) FROM orders WHERE voucher_id = ?1 GROUP BY server ORDER BY server",
    )
    .bind(args.voucher)
    .fetch_all(&db)
    .await?;
    db.close().await;
    let oversold = (sold - initial).max(-stock_left).max(0);
    let accounted = stock_left + sold == initial;

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    };
    let line = "-".repeat(56);
    let verdict = |ok: bool| if ok { "ok" } else { "FAIL" };
    println!("{line}");
    println!("{:<30}{:>10}", "requests", samples.len());
    for (i, s) in servers.iter().enumerate() {
        println!("{:<30}{:>10}", format!("  to {s}"), per_server[i]);
    }
    println!("{:<30}{:>10}", "201 ordered", ordered);
    println!("{:<30}{:>10}", "409 lock busy (Retry-After)", lock_busy);
    println!("{:<30}{:>10}", "409 already ordered", already);
    println!("{:<30}{:>10}", "410 sold out", sold_out);
    println!("{:<30}{:>10}", "other errors", other_errors);
    for (o, n) in &other {
        println!("{:<30}{:>10}", format!("  {o:?}"), n);
    }
    println!(
        "{:<30}{:>10.1} ms / {:.1} ms / {:.1} ms",
        "latency p50 / p99 / max",
        ms(pct(0.50)),
        ms(pct(0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "{:<30}{:>10.2} s ({:.0} requests/s)",
        "elapsed",
        elapsed.as_secs_f64(),
        samples.len() as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    println!("{line}  database {}", args.db.display());
    println!("{:<30}{:>10}", "initial stock", initial);
    println!("{:<30}{:>10}", "sold (orders)", sold);
    for (server, n) in &by_server {
        println!("{:<30}{:>10}", format!("  by {server}"), n);
    }
    println!("{:<30}{:>10}", "stock left", stock_left);
    println!(
        "{:<30}{:>10}   must be 0: {}",
        "users with more than 1 order",
        duplicate_users,
        verdict(duplicate_users == 0)
    );
    println!(
        "{:<30}{:>10}   must be 0: {}",
        "oversold",
        oversold,
        verdict(oversold == 0)
    );
    println!(
        "{:<30}{:>10}   {}",
        "stock left + sold = initial",
        if accounted { "yes" } else { "no" },
        verdict(accounted)
    );
    println!(
        "{:<30}{:>10}   {}",
        "201 responses = orders in db",
        if ordered as i64 == sold { "yes" } else { "no" },
        verdict(ordered as i64 == sold)
    );
    println!("{line}");

    let mut failures = Vec::new();
    if duplicate_users != 0 {
        failures.push(format!("{duplicate_users} users have more than one order"));
    }
    if oversold != 0 {
        failures.push(format!("oversold by {oversold}"));
    }
    if !accounted {
        failures.push("stock left + sold != initial stock".to_owned());
    }
    if ordered as i64 != sold {
        failures.push(format!(
            "{ordered} orders answered 201 but {sold} are in the database"
        ));
    }
    if sold == 0 {
        failures.push("no order was placed".to_owned());
    }
    if other_errors != 0 {
        failures.push(format!("{other_errors} requests failed"));
    }
    if failures.is_empty() {
        println!("RESULT: PASS (no user ordered twice, nothing oversold)");
        Ok(true)
    } else {
        println!("RESULT: FAIL: {}", failures.join("; "));
        Ok(false)
    }
}
