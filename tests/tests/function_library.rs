//! The protocol as a Redis Functions library: a server that takes it runs every lock call
//! as `FCALL`; a library that is gone (`FUNCTION FLUSH`, a restart without data, a
//! cluster master that lost it) is loaded again by the call that finds it gone, which
//! then runs once; a server out of memory still lets locks go and refuses new ones, as
//! it does for scripts sent by EVAL (an ACL user without the function rights).

mod common;

use std::time::{Duration, Instant};

use distlock::{Lease, Registry};
use distlock_tests::{addr_of, cluster_urls, readme_acl_user, resp_command, RedisProcess};

fn single(url: &str) -> String {
    format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n"
    )
}

/// `command`'s calls on `addr` so far (`INFO commandstats`).
fn calls(addr: &str, command: &str) -> u64 {
    stat(addr, command, "calls")
}

/// The counter `field` (`calls`, `failed_calls`) of `command` on `addr` so far.
fn stat(addr: &str, command: &str, field: &str) -> u64 {
    let info = resp_command(addr, &["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{command}:");
    let field = format!("{field}=");
    info.as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .flat_map(|l| l.split(','))
        .find_map(|kv| kv.strip_prefix(&field)?.parse().ok())
        .unwrap_or(0)
}

/// Whether `addr` has a library loaded (`FUNCTION LIST`).
fn has_library(addr: &str) -> bool {
    let list = resp_command(addr, &["FUNCTION", "LIST"]).expect("FUNCTION LIST");
    list.as_array().is_some_and(|libs| !libs.is_empty())
}

fn exists(addr: &str, key: &str) -> bool {
    let n = resp_command(addr, &["EXISTS", key]).expect("EXISTS");
    n.as_int() == Some(1)
}

async fn pair(reg: &Registry, key: &str) {
    let g = reg.lock(key).acquire().await.expect("acquire");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_flushed_behind_a_holder_is_loaded_again_by_its_release() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let reg = Registry::from_str(&single(&server.url())).await.unwrap();
    pair(&reg, "flushed").await;
    assert!(has_library(&addr), "loaded when the backend connected");
    // A fixed lease: no renewal of the watchdog's loads the library before the release.
    let g = reg
        .lock("flushed")
        .lease(Lease::Fixed(Duration::from_secs(30)))
        .acquire()
        .await
        .expect("acquire");
    assert!(resp_command(&addr, &["FUNCTION", "FLUSH"]).unwrap().is_ok());
    assert!(!has_library(&addr));
    let before = calls(&addr, "fcall");
    let refused = stat(&addr, "fcall", "failed_calls");
    let scripts = calls(&addr, "evalsha") + calls(&addr, "eval");
    g.release()
        .await
        .expect("the release runs once the library is back");
    assert!(
        !exists(&addr, "lock:{flushed}"),
        "the release freed the lock"
    );
    assert!(has_library(&addr), "the release's call loaded it again");
    // Its FCALL, refused, and again after the load: functions serve on. At least: an
    // attempt that went unanswered under load is released once more later (`Hold::late`).
    let after = calls(&addr, "fcall");
    assert!(after >= before + 2, "{before} FCALLs before, {after} after");
    assert!(
        stat(&addr, "fcall", "failed_calls") > refused,
        "an FCALL found the library gone"
    );
    pair(&reg, "flushed").await;
    assert!(calls(&addr, "fcall") >= after + 2);
    assert_eq!(
        calls(&addr, "evalsha") + calls(&addr, "eval"),
        scripts,
        "no lock call went as a script"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_without_data_gets_the_library_again() {
    let mut server = RedisProcess::start();
    let addr = server.addr();
    let reg = Registry::from_str(&single(&server.url())).await.unwrap();
    pair(&reg, "restarted").await;
    server.restart();
    assert!(!has_library(&addr), "no data: no library");
    let start = Instant::now();
    loop {
        match reg.lock("restarted").try_acquire().await {
            Ok(Some(g)) => {
                g.release().await.expect("release");
                break;
            }
            outcome => assert!(
                start.elapsed() < Duration::from_secs(10),
                "no lock 10 s after the restart: {outcome:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(has_library(&addr));
    assert!(calls(&addr, "fcall") >= 2);
}

/// A user that may load the library but not call it (`+function|load` without `+fcall`):
/// the first `FCALL` is refused before it runs, is sent again by EVALSHA, and scripts serve
/// from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_fcall_is_served_by_scripts() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let url = readme_acl_user(&addr, "distlock", &["+function|load"]);
    let reg = Registry::from_str(&single(&url)).await.unwrap();
    assert!(has_library(&addr), "it could load the library");
    for _ in 0..3 {
        pair(&reg, "refused").await;
    }
    assert!(!exists(&addr, "lock:{refused}"));
    // The one refused call is counted as rejected, not run.
    assert_eq!(calls(&addr, "fcall"), 0);
    assert!(calls(&addr, "evalsha") >= 6);
}

/// The library is flushed while leases are renewed in pipelines (the watchdog): the
/// renewal that finds it gone loads it again, and the leases stay held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_flushed_under_the_watchdog_is_loaded_again_by_its_renewal() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let config = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n{}",
        single(&server.url())
    );
    let reg = Registry::from_str(&config).await.unwrap();
    let guards = [
        reg.lock("renewed-a").acquire().await.expect("acquire"),
        reg.lock("renewed-b").acquire().await.expect("acquire"),
    ];
    assert!(resp_command(&addr, &["FUNCTION", "FLUSH"]).unwrap().is_ok());
    let start = Instant::now();
    while !has_library(&addr) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no renewal loaded the library within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two renewal rounds later (a third of the watchdog timeout apart) both are held.
    let renewed = calls(&addr, "fcall");
    while calls(&addr, "fcall") < renewed + 4 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the renewals stopped after the library was loaded again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for g in guards {
        assert!(g.is_held(), "{}: lost after the flush", g.key());
        g.release().await.expect("release");
    }
}

/// Holds a lock on a server out of memory (`maxmemory` below what it uses, `noeviction`):
/// its release still runs, and frees it; a new lock is refused with an error; with memory
/// again, it is taken.
async fn full_server(server: &RedisProcess, url: &str) {
    let addr = server.addr();
    let reg = Registry::from_str(&single(url)).await.unwrap();
    pair(&reg, "full").await;
    let g = reg.lock("full").acquire().await.expect("acquire");
    for (k, v) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        assert!(resp_command(&addr, &["CONFIG", "SET", k, v])
            .unwrap()
            .is_ok());
    }
    g.release().await.expect("a release runs on a full server");
    assert!(!exists(&addr, "lock:{full}"), "and frees the lock");
    let refused = reg.lock("full").try_acquire().await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("OOM")),
        "a new lock on a full server: {refused:?}"
    );
    assert!(resp_command(&addr, &["CONFIG", "SET", "maxmemory", "0"])
        .unwrap()
        .is_ok());
    pair(&reg, "full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_lets_a_lock_go_and_refuses_a_new_one() {
    let server = RedisProcess::start();
    full_server(&server, &server.url()).await;
    assert!(calls(&server.addr(), "fcall") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_does_the_same_for_scripts_sent_by_evalsha() {
    let server = RedisProcess::start();
    full_server(&server, &readme_acl_user(&server.addr(), "distlock", &[])).await;
    assert_eq!(calls(&server.addr(), "fcall"), 0);
    assert!(calls(&server.addr(), "evalsha") > 0);
}

/// The shared cluster's masters lose the library (`FUNCTION FLUSH` on each): the first
/// call on each loads it again on every master, and locks on keys of every master work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_masters_lost_the_library_loads_it_again() {
    let reg = common::backend::cluster().await;
    let keys: Vec<String> = (0..24).map(|i| format!("fn-cluster-{i}")).collect();
    for k in &keys {
        pair(&reg, k).await;
    }
    let nodes: Vec<String> = cluster_urls().iter().map(|u| addr_of(u)).collect();
    let masters: Vec<&String> = nodes
        .iter()
        .filter(|a| {
            resp_command(a, &["ROLE"])
                .ok()
                .and_then(|r| r.as_array()?.first()?.as_str().map(|s| s == "master"))
                .unwrap_or(false)
        })
        .collect();
    assert!(!masters.is_empty(), "the cluster's masters among {nodes:?}");
    for m in &masters {
        assert!(has_library(m), "{m}: loaded when the backend connected");
        assert!(resp_command(m, &["FUNCTION", "FLUSH"]).unwrap().is_ok());
    }
    for k in &keys {
        pair(&reg, k).await;
    }
    for m in &masters {
        assert!(has_library(m), "{m}: loaded again");
    }
}
