//! The protocol as a Redis Functions library: a server that takes it runs every lock call
//! as `FCALL`; a library that is gone (`FUNCTION FLUSH`, a restart without data, a
//! cluster master that lost it) is loaded again by the call that finds it gone, which
//! then runs once; a server out of memory still lets locks go and refuses new ones, as
//! it does for scripts sent by EVAL (an ACL user without the function rights).

mod common;

use std::time::{Duration, Instant};

use distlock::Registry;
use distlock_tests::{addr_of, cluster_urls, resp_command, RedisProcess, README_ACL_RIGHTS};

fn single(url: &str) -> String {
    format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n"
    )
}

/// `command`'s calls on `addr` so far (`INFO commandstats`).
fn calls(addr: &str, command: &str) -> u64 {
    let info = resp_command(addr, &["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
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
    let g = reg.lock("flushed").acquire().await.expect("acquire");
    assert!(resp_command(&addr, &["FUNCTION", "FLUSH"]).unwrap().is_ok());
    assert!(!has_library(&addr));
    let before = calls(&addr, "fcall");
    let scripts = calls(&addr, "evalsha") + calls(&addr, "eval");
    g.release()
        .await
        .expect("the release runs once the library is back");
    assert!(
        !exists(&addr, "lock:{flushed}"),
        "the release freed the lock"
    );
    assert!(has_library(&addr), "the release's call loaded it again");
    // Its FCALL, refused, and again after the load: functions serve on.
    assert_eq!(calls(&addr, "fcall"), before + 2);
    pair(&reg, "flushed").await;
    assert_eq!(calls(&addr, "fcall"), before + 4);
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
    let mut args = vec!["ACL", "SETUSER", "distlock", "reset", "on", ">pw"];
    args.extend_from_slice(README_ACL_RIGHTS);
    assert!(resp_command(&server.addr(), &args).unwrap().is_ok());
    full_server(&server, &format!("redis://distlock:pw@{}", server.addr())).await;
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
