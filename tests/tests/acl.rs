//! Least privilege: a Redis ACL user with exactly the rights the README lists runs every
//! lock kind; and no error, `Debug` output or log line shows a password.

mod common;

use common::*;
use distlock::Registry;
use distlock_tests::{resp_command, RedisProcess};

/// The README's `ACL SETUSER` rights (key prefix `lock:`), as arguments.
pub const RIGHTS: &[&str] = &[
    "~lock:*",
    "&lock:*",
    "+evalsha",
    "+eval",
    "+script|load",
    "+ping",
    "+incr",
    "+incrby",
    "+expire",
    "+publish",
    "+spublish",
    "+subscribe",
    "+unsubscribe",
    "+ssubscribe",
    "+sunsubscribe",
    "+del",
    "+exists",
    "+hdel",
    "+hexists",
    "+hget",
    "+hincrby",
    "+hmget",
    "+hset",
    "+get",
    "+set",
    "+lindex",
    "+lpop",
    "+lrem",
    "+persist",
    "+pexpire",
    "+pttl",
    "+rpush",
    "+time",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];

const PASSWORD: &str = "Sup3r-s3cret-pw";

fn setuser(server: &RedisProcess, rights: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", "distlock", "reset", "on"];
    let pw = format!(">{PASSWORD}");
    args.push(&pw);
    args.extend_from_slice(rights);
    let r = resp_command(&server.addr(), &args).expect("ACL SETUSER");
    assert!(r.is_ok(), "ACL SETUSER: {r:?}");
}

fn config(server: &RedisProcess) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"redis://distlock:{PASSWORD}@127.0.0.1:{}\"\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n",
        server.port()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_runs_every_lock_kind() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let reg = Registry::from_str(&config(&server))
        .await
        .unwrap_or_else(|e| panic!("init as the least-privilege user: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    let mut times = hand_off(&reg, 10).await;
    let p50 = percentile(&mut times, 0.5);
    assert!(
        p50 < std::time::Duration::from_millis(50),
        "wake-up p50 {p50:?}"
    );
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    reentrancy(&reg).await;
    readers_overlap(&reg).await;
    writers_exclude(&reg).await;
    fair_in_order(&reg).await;
    fair_timeout_leaves_queue(&reg).await;
    // The user cannot touch keys outside the prefix: the rights are what they say.
    let denied = resp_command(
        &server.addr(),
        &["ACL", "DRYRUN", "distlock", "SET", "other", "x"],
    )
    .expect("ACL DRYRUN");
    assert!(
        denied
            .as_str()
            .is_some_and(|s| s.contains("no permissions")),
        "{denied:?}"
    );
}

#[tokio::test]
async fn wrong_password_is_never_shown() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let text = config(&server).replace(PASSWORD, "Wr0ng-pw-Value");
    let err = Registry::from_str(&text).await.expect_err("wrong password");
    let shown = format!("{err} / {err:?}");
    println!("{shown}");
    assert!(!shown.contains("Wr0ng-pw-Value"), "{shown}");
    // Debug of a parsed configuration does not show it either.
    let parsed = distlock::config::Config::from_str(&config(&server)).expect("config");
    let debug = format!("{parsed:?}");
    assert!(!debug.contains(PASSWORD), "{debug}");
}
