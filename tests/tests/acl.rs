//! Least privilege: a Redis ACL user with exactly the rights the README lists runs every
//! lock kind; and no error, `Debug` output or log line shows a password.

mod common;
#[allow(dead_code)]
mod scenarios;

use std::time::Duration;

use common::*;
use distlock::{InitError, Lease, LockKind, Registry};
use distlock_tests::topology::{PrivateCluster, PrivateSentinel};
use distlock_tests::{resp_command, RedisProcess, RespValue};
use scenarios::*;

/// The README's `ACL SETUSER` rights (key prefix `lock:`), as arguments.
pub use distlock_tests::README_ACL_RIGHTS as RIGHTS;

const PASSWORD: &str = "Sup3r-s3cret-pw";

/// The `ACL SETUSER distlock …` line of docs/backends.md grants exactly the rights tested here (and
/// the CLI's tests), so the documented line and the tested one cannot drift apart.
#[test]
fn readme_acl_line_is_the_tested_one() {
    let readme = include_str!("../../docs/backends.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER distlock "))
        .expect("the ACL line of docs/backends.md");
    let documented: Vec<&str> = line
        .split_whitespace()
        .filter(|w| w.starts_with('~') || w.starts_with('&') || w.starts_with('+'))
        .collect();
    let mut a = documented.clone();
    let mut b = RIGHTS.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "docs/backends.md line: {line}");
}

/// The README's additions for `mode = "cluster"` (the client discovers the slots).
const CLUSTER_RIGHTS: &[&str] = &["+cluster|slots", "+asking"];

/// The README's addition for `mode = "sentinel"` (the master is checked with ROLE).
const SENTINEL_RIGHTS: &[&str] = &["+role"];

/// The README's rights on the sentinels themselves (the same user: the first sentinel URL's
/// credentials are used for the master too).
const ON_SENTINELS: &[&str] = &[
    "+sentinel|get-master-addr-by-name",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "&+switch-master",
];

fn setuser_at(addr: &str, rights: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", "distlock", "reset", "on"];
    let pw = format!(">{PASSWORD}");
    args.push(&pw);
    args.extend_from_slice(rights);
    let r = resp_command(addr, &args).expect("ACL SETUSER");
    assert!(r.is_ok(), "ACL SETUSER at {addr}: {r:?}");
}

fn setuser(server: &RedisProcess, rights: &[&str]) {
    setuser_at(&server.addr(), rights);
}

/// RIGHTS without `right`.
fn without(right: &str) -> Vec<&'static str> {
    let all: Vec<&str> = RIGHTS.to_vec();
    assert!(all.contains(&right), "{right} is not in RIGHTS");
    all.into_iter().filter(|r| *r != right).collect()
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

/// A wrong password fails `init` with the server's own answer (`WRONGPASS ...`) and the
/// user it tried, never the password: an ACL user, and the `default` user of a
/// `requirepass` server (no user in the URL).
#[tokio::test]
async fn a_wrong_password_says_the_servers_answer_and_the_user() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let text = config(&server).replace(PASSWORD, "Wr0ng-pw-Value");
    let err = Registry::from_str(&text).await.expect_err("wrong password");
    let shown = err.to_string();
    assert!(shown.contains("WRONGPASS"), "the server's answer: {shown}");
    assert!(shown.contains("user `distlock`"), "the user tried: {shown}");
    assert!(!shown.contains("Wr0ng-pw-Value"), "{shown}");

    let mut plain = RedisProcess::start();
    let set = resp_command(&plain.addr(), &["CONFIG", "SET", "requirepass", PASSWORD])
        .expect("CONFIG SET requirepass");
    assert!(set.is_ok(), "{set:?}");
    let url = format!("redis://:Wr0ng-pw-Value@127.0.0.1:{}", plain.port());
    let err = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\n"
    ))
    .await
    .expect_err("wrong password");
    let shown = err.to_string();
    assert!(shown.contains("WRONGPASS"), "the server's answer: {shown}");
    assert!(shown.contains("user `default`"), "the user tried: {shown}");
    assert!(!shown.contains("Wr0ng-pw-Value"), "{shown}");
    plain.kill(); // SHUTDOWN would need the password
}

/// A user missing one right fails `init` (not the first lock), naming the right in
/// `ACL SETUSER` terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_right_fails_init_naming_it() {
    let server = RedisProcess::start();
    let cases: &[(&str, &str)] = &[
        ("+hincrby", "missing +hincrby"),
        ("+time", "missing +time"),
        ("+subscribe", "missing +subscribe"),
        ("+script|load", "missing +script|load"),
        (
            "&lock:*",
            "missing channel permission &lock:* (PUBLISH lock:{distlock-check}:released",
        ),
        ("~lock:*", "missing key permission ~lock:*"),
        ("+eval", "missing +eval"),
    ];
    for (right, expected) in cases {
        setuser(&server, &without(right));
        let err = Registry::from_str(&config(&server))
            .await
            .expect_err(&format!("init without {right}"));
        let text = err.to_string();
        println!("without {right}: {text}");
        assert!(matches!(err, InitError::MissingRights { .. }), "{text}");
        assert!(text.contains(expected), "without {right}: {text}");
        assert!(text.contains("backend `main`"), "{text}");
        assert!(text.contains(&server.addr()), "{text}");
        assert!(text.contains("`distlock`"), "names the user: {text}");
        assert!(
            text.contains(&format!("ACL SETUSER distlock {right}"))
                || *right == "~lock:*"
                || *right == "&lock:*",
            "{text}"
        );
        assert!(!text.contains(PASSWORD), "{text}");
        if let InitError::MissingRights { missing, .. } = &err {
            assert_eq!(missing.len(), 1, "only the one right: {missing:?}");
        }
    }
    // A right the README's line has but a lock does not need is not demanded: without
    // SPUBLISH (a cluster's verb) a single server is fine.
    setuser(&server, &without("+spublish"));
    Registry::from_str(&config(&server))
        .await
        .unwrap_or_else(|e| panic!("init without +spublish on single: {e}"));
}

/// The self-check reports what it found: version, user, TLS, rights, eviction policy
/// (unknown: INFO is not among the least rights).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_self_check_reports_each_server() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let reg = Registry::from_str(&config(&server)).await.expect("init");
    let start = std::time::Instant::now();
    let reports = reg.probe(None).await.expect("probe");
    println!("self-check of one server: {:?}", start.elapsed());
    let r = reports[0].as_ref().expect("report");
    assert_eq!(r.address, server.addr());
    // The version the server itself reports (Redis 7.0 or 8.x; Valkey's redis_version is
    // the Redis version it is compatible with, 7.2.4 on Valkey 8), asked as the admin.
    let info = match resp_command(&server.addr(), &["INFO", "server"]) {
        Ok(distlock_tests::RespValue::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO server: {other:?}"),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
    };
    let redis_version = field("redis_version").expect("redis_version in INFO server");
    assert_eq!(r.version.as_deref(), Some(redis_version.as_str()), "{r:?}");
    assert!(r.too_old.is_none(), "{r:?}");
    // INFO is refused to this user: the flavour is not known, the version is.
    assert_eq!(r.flavour, None, "{r:?}");
    assert_eq!(r.server().as_deref(), Some(redis_version.as_str()), "{r:?}");
    assert_eq!(r.user.as_deref(), Some("distlock"));
    assert!(!r.tls);
    assert_eq!(r.missing_rights.as_deref(), Some(&[][..]), "{r:?}");
    assert_eq!(
        r.eviction, None,
        "INFO is refused to the least-privilege user"
    );
    assert!(r.is_ok(), "{r:?}");
    // With INFO permitted, the policy is read; allkeys-lru warns but does not fail.
    let mut more = RIGHTS.to_vec();
    more.push("+info");
    setuser(&server, &more);
    let set = resp_command(
        &server.addr(),
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .unwrap();
    assert!(set.is_ok(), "{set:?}");
    let reg = Registry::from_str(&config(&server))
        .await
        .expect("init with allkeys-lru");
    let reports = reg.probe(None).await.expect("probe");
    let r = reports[0].as_ref().expect("report");
    assert_eq!(r.eviction.as_deref(), Some("allkeys-lru"));
    assert!(r.evicts_locks());
    // With INFO, the flavour and its own version too.
    let (flavour, version) = match field("valkey_version") {
        Some(v) => ("Valkey", v),
        None => ("Redis", redis_version.clone()),
    };
    assert_eq!(r.flavour.as_deref(), Some(flavour), "{r:?}");
    assert_eq!(
        r.flavour_version.as_deref(),
        Some(version.as_str()),
        "{r:?}"
    );
    assert_eq!(r.version.as_deref(), Some(redis_version.as_str()), "{r:?}");
}

/// ACL SETUSER distlock resetchannels, from an admin connection (the user keeps its
/// connections: the release script's PUBLISH is then refused).
fn revoke_channels(server: &RedisProcess) {
    let r = resp_command(
        &server.addr(),
        &["ACL", "SETUSER", "distlock", "resetchannels"],
    )
    .unwrap();
    assert!(r.is_ok(), "{r:?}");
}

/// A release that freed the lock but whose PUBLISH was refused (an ACL user without the
/// channel right) is a success, for every kind, and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_publish_does_not_fail_a_release_that_freed_the_lock() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let reg = Registry::from_str(&config(&server)).await.expect("init");
    let kinds = [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Write,
        LockKind::Read,
    ];
    let mut guards = Vec::new();
    for kind in kinds {
        let key = unique(&format!("acl-publish-{}", kind.name()));
        let guard = reg
            .lock(key.clone())
            .kind(kind)
            .lease(Lease::Fixed(Duration::from_secs(30)))
            .acquire()
            .await
            .expect("acquire");
        guards.push((guard, kind, key));
    }
    revoke_channels(&server);
    for (guard, kind, key) in guards {
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: a release that freed the lock failed: {e}"));
        let again = reg
            .lock(key.clone())
            .kind(kind)
            .try_acquire()
            .await
            .expect("try again");
        assert!(again.is_some(), "{kind:?}: the lock is free");
        drop(again);
    }
}

/// Sum of the ACL LOG entries' counts for channel refusals of the user.
fn channel_refusals(server: &RedisProcess) -> i64 {
    let log = resp_command(&server.addr(), &["ACL", "LOG", "128"]).unwrap();
    let mut total = 0;
    for entry in log.as_array().unwrap_or_default() {
        let fields = entry.as_array().unwrap_or_default();
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|p| p[0].as_str() == Some(name))
                .map(|p| p[1].clone())
        };
        let reason = field("reason").and_then(|v| v.as_str().map(str::to_owned));
        let user = field("username").and_then(|v| v.as_str().map(str::to_owned));
        if reason.as_deref() == Some("channel") && user.as_deref() == Some("distlock") {
            total += field("count")
                .and_then(|v: RespValue| v.as_int())
                .unwrap_or(1);
        }
    }
    total
}

/// The subscriber whose SUBSCRIBE is refused (NOPERM) backs off instead of reconnecting in
/// a hot loop, and a waiter still gets the lock when the holder's lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscribe_backs_off() {
    let server = RedisProcess::start();
    setuser(&server, RIGHTS);
    let reg = Registry::from_str(&config(&server)).await.expect("init");
    let key = unique("acl-subscribe");
    let holder = reg
        .lock(key.clone())
        .lease(Lease::Fixed(Duration::from_secs(3)))
        .acquire()
        .await
        .expect("acquire");
    revoke_channels(&server);
    let before = channel_refusals(&server);
    let start = std::time::Instant::now();
    let waiter = reg
        .lock(key.clone())
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the waiter gets the lock when the lease ends");
    let waited = start.elapsed();
    let refusals = channel_refusals(&server) - before;
    println!("waited {waited:?}; {refusals} refused subscriptions");
    assert!(refusals >= 1, "the waiter tried to subscribe");
    // 20 ms doubling to 1 s: about 8 attempts in 3 s; a hot loop makes thousands.
    assert!(
        refusals <= 40,
        "{refusals} refused subscriptions in {waited:?}: no backoff"
    );
    drop(waiter);
    std::mem::forget(holder);
}

/// The least-privilege user (README rights + the cluster additions) runs every lock kind
/// on a cluster (private, so the users can be set on every node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_on_a_cluster() {
    let cluster = PrivateCluster::start();
    let mut rights = RIGHTS.to_vec();
    rights.extend_from_slice(CLUSTER_RIGHTS);
    for node in &cluster.nodes {
        setuser(node, &rights);
    }
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| format!("\"redis://distlock:{PASSWORD}@{}\"", n.addr()))
        .collect::<Vec<_>>()
        .join(", ");
    let toml = format!("[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"cluster\"\nnodes = [{nodes}]\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n");
    let reg = Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("init as the least-privilege user on a cluster: {e}"));
    let reports = reg.probe(None).await.expect("probe");
    assert_eq!(reports.len(), 3, "one report per master: {reports:?}");
    for r in &reports {
        let r = r.as_ref().expect("report");
        assert!(r.is_ok(), "{r:?}");
    }
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    hand_off(&reg, 5).await;
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    reentrancy(&reg).await;
    readers_overlap(&reg).await;
    writers_exclude(&reg).await;
    fair_in_order(&reg).await;
    fair_timeout_leaves_queue(&reg).await;
    // Without SSUBSCRIBE on one master, init names it.
    let without_ssub: Vec<&str> = rights
        .iter()
        .copied()
        .filter(|r| *r != "+ssubscribe")
        .collect();
    setuser(&cluster.nodes[1], &without_ssub);
    let err = Registry::from_str(&toml)
        .await
        .expect_err("init without +ssubscribe");
    assert!(err.to_string().contains("missing +ssubscribe"), "{err}");
}

/// The least-privilege user (README rights + ROLE; on the sentinels the README's sentinel
/// rights) runs every lock kind through sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_on_sentinel() {
    let group = PrivateSentinel::start(1);
    let mut rights = RIGHTS.to_vec();
    rights.extend_from_slice(SENTINEL_RIGHTS);
    setuser(&group.master, &rights);
    setuser(&group.replica, &rights);
    for s in &group.sentinels {
        setuser_at(&s.addr(), ON_SENTINELS);
    }
    let sentinels = group
        .sentinels
        .iter()
        .map(|s| format!("\"redis://distlock:{PASSWORD}@{}\"", s.addr()))
        .collect::<Vec<_>>()
        .join(", ");
    let toml = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{sentinels}]\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n",
        PrivateSentinel::MASTER_NAME
    );
    let reg = Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("init as the least-privilege user through sentinels: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    hand_off(&reg, 5).await;
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    reentrancy(&reg).await;
    readers_overlap(&reg).await;
    writers_exclude(&reg).await;
    fair_in_order(&reg).await;
    fair_timeout_leaves_queue(&reg).await;
    // Without ROLE on the master, init names it.
    setuser(&group.master, RIGHTS);
    let err = Registry::from_str(&toml)
        .await
        .expect_err("init without +role");
    assert!(err.to_string().contains("+role"), "{err}");
}

/// redlock: every node is checked; one node whose user lacks a right fails init, naming
/// that node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_checks_every_node() {
    let nodes: Vec<RedisProcess> = (0..3).map(|_| RedisProcess::start()).collect();
    for n in &nodes {
        setuser(n, RIGHTS);
    }
    let urls = nodes
        .iter()
        .map(|n| format!("\"redis://distlock:{PASSWORD}@{}\"", n.addr()))
        .collect::<Vec<_>>()
        .join(", ");
    let toml = format!("[backends.main]\nmode = \"redlock\"\nnodes = [{urls}]\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n");
    let reg = Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("init on redlock as the least-privilege user: {e}"));
    let reports = reg.probe(None).await.expect("probe");
    assert_eq!(reports.len(), 3);
    assert!(
        reports.iter().all(|r| r.as_ref().is_ok_and(|r| r.is_ok())),
        "{reports:?}"
    );
    let g = reg
        .lock(unique("acl-redlock"))
        .acquire()
        .await
        .expect("acquire");
    g.release().await.expect("release");
    setuser(&nodes[2], &without("+incrby"));
    let err = Registry::from_str(&toml)
        .await
        .expect_err("init without +incrby on one node");
    let text = err.to_string();
    assert!(
        text.contains("missing +incrby") && text.contains(&nodes[2].addr()),
        "{text}"
    );
}

/// Under `protocol = "redisson"` the self-check asks for Redisson's names: a user with
/// `~*`, `&redisson_*` and the commands runs every lock kind; without the channel
/// pattern, or without a command only Redisson's scripts call, `init` names the right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_with_redisson_protocol() {
    let server = RedisProcess::start();
    let mut rights: Vec<&str> = RIGHTS
        .iter()
        .copied()
        .filter(|r| !r.starts_with('~') && !r.starts_with('&'))
        .collect();
    rights.extend_from_slice(&[
        "~*",
        "&redisson_*",
        "+hkeys",
        "+hlen",
        "+lrange",
        "+zincrby",
    ]);
    setuser(&server, &rights);
    let toml = format!("{}protocol = \"redisson\"\n", config(&server));
    let reg = Registry::from_str(&toml)
        .await
        .unwrap_or_else(|e| panic!("init as the Redisson least-privilege user: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    hand_off(&reg, 5).await;
    reentrancy(&reg).await;
    readers_overlap(&reg).await;
    writers_exclude(&reg).await;
    fair_in_order(&reg).await;
    fair_timeout_leaves_queue(&reg).await;
    // distlock's own patterns are not what this protocol needs
    let cases: &[(&str, &str)] = &[
        (
            "&redisson_*",
            "missing channel permission &redisson_* (PUBLISH redisson_lock__channel:{distlock-check} x)",
        ),
        ("~*", "missing key permission ~*"),
        ("+zincrby", "missing +zincrby"),
        ("+hkeys", "missing +hkeys"),
    ];
    for (right, expected) in cases {
        let fewer: Vec<&str> = rights.iter().copied().filter(|r| r != right).collect();
        setuser(&server, &fewer);
        let err = Registry::from_str(&toml)
            .await
            .expect_err(&format!("init without {right}"));
        let text = err.to_string();
        println!("redisson, without {right}: {text}");
        assert!(matches!(err, InitError::MissingRights { .. }), "{text}");
        assert!(text.contains(expected), "without {right}: {text}");
    }
    // the README's distlock rights (lock:* patterns) do not cover Redisson's names
    setuser(&server, RIGHTS);
    let err = Registry::from_str(&toml)
        .await
        .expect_err("distlock's rights for a redisson backend");
    assert!(err.to_string().contains("&redisson_*"), "{err}");
}
