//! Fair locks (`LockKind::Fair`) across processes on one real redis-server. The shared fair
//! scenarios run on every backend from the table in `matrix.rs`.
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::backend::single;
use common::*;
use distlock::LockKind;
use distlock_tests::{addr_of, resp_command, single_url, wait_until};

fn worker(key: &str, wait_ms: u64) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_lock-worker"))
        .args(["fair", &single_url(), key, &wait_ms.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lock-worker")
}

/// The length of the fair lock's wait queue in Redis.
fn queued(key: &str) -> i64 {
    let queue = format!("lock:{{{key}}}:fair:queue");
    resp_command(&addr_of(&single_url()), &["LLEN", &queue])
        .ok()
        .and_then(|v| v.as_int())
        .unwrap_or(-1)
}

fn wait_queued(key: &str, n: i64) {
    wait_until(Duration::from_secs(10), "the waiter to be queued", || {
        queued(key) == n
    });
}

/// 8 waiters in 2 processes, queued alternately, get the lock in the order they asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_in_order() {
    let reg = single().await;
    let key = unique("fair-procs");
    let holder = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .acquire()
        .await
        .expect("fair");
    let mut children = [worker(&key, 30_000), worker(&key, 30_000)];
    let mut labels = Vec::new();
    for i in 0..8 {
        let label = format!("{}{i}", if i % 2 == 0 { "a" } else { "b" });
        let stdin = children[i % 2].stdin.as_mut().expect("stdin");
        writeln!(stdin, "{label}").expect("write");
        stdin.flush().expect("flush");
        let key = key.clone();
        tokio::task::spawn_blocking(move || wait_queued(&key, i as i64 + 1))
            .await
            .expect("queued");
        labels.push(label);
    }
    holder.release().await.expect("release");
    for child in &mut children {
        drop(child.stdin.take());
    }
    for child in children {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("lock-worker");
        assert!(out.status.success(), "lock-worker failed: {:?}", out.status);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "DONE");
    }
    let order = resp_command(
        &addr_of(&single_url()),
        &["LRANGE", &format!("{key}:order"), "0", "-1"],
    )
    .expect("LRANGE");
    let order: Vec<String> = order
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert_eq!(order, labels);
}

/// A waiter killed while queued (at the head) holds up the next one only until its own
/// deadline (its wait, 1.5 s), not for the next one's whole wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_waiter_is_dropped_at_its_deadline() {
    let reg = single().await;
    let key = unique("fair-killed");
    let holder = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .acquire()
        .await
        .expect("fair");
    let mut doomed = worker(&key, 1_500);
    {
        let stdin = doomed.stdin.as_mut().expect("stdin");
        writeln!(stdin, "doomed").expect("write");
        stdin.flush().expect("flush");
    }
    let k = key.clone();
    tokio::task::spawn_blocking(move || wait_queued(&k, 1))
        .await
        .expect("queued");
    // From when its queue entry is seen (its deadline runs from just before): the worker
    // process's start-up and connection are no part of the bound.
    let queued_at = Instant::now();
    let (r, k) = (reg.clone(), key.clone());
    let next = tokio::spawn(async move {
        r.lock(k.as_str())
            .kind(LockKind::Fair)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .map(|g| (g, Instant::now()))
    });
    let k = key.clone();
    tokio::task::spawn_blocking(move || wait_queued(&k, 2))
        .await
        .expect("queued");
    doomed.kill().expect("kill");
    let _ = doomed.wait();
    holder.release().await.expect("release");
    let (g, at) = next.await.expect("task").expect("the next waiter");
    let after = at.duration_since(queued_at);
    println!("fair: next waiter got the lock {after:?} after the killed one queued (its deadline: 1.5 s)");
    assert!(after < Duration::from_millis(3_000), "{after:?}");
    g.release().await.expect("release");
}
