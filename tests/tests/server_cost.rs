//! What one lock costs the server: the commands Redis runs (scripts' inner calls counted)
//! for an uncontended acquire + release of a reentrant lock, with every guarantee on
//! (fencing token, holder information, reentrancy marks, wake-up by pub/sub: a release
//! nobody waited for publishes nothing, `wake_ups.rs`). A private server, its statistics
//! reset before the pairs.

use std::collections::BTreeMap;

use distlock::Registry;
use distlock_tests::RedisProcess;
use distlock_tests::{readme_acl_user, resp_command};

/// Pairs measured.
const PAIRS: u64 = 50;

/// Every command's calls since `CONFIG RESETSTAT` (`INFO commandstats`), but the
/// statistics' own.
fn calls(addr: &str) -> BTreeMap<String, u64> {
    let info = resp_command(addr, &["INFO", "commandstats"]).expect("INFO");
    let text = info.as_str().unwrap_or_default().to_owned();
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let n = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), n))
        })
        .filter(|(name, _)| name != "info" && !name.starts_with("config"))
        .collect()
}

/// Runs [`PAIRS`] uncontended lock+unlock pairs on `server` through `url` (after a warm-up)
/// and checks what they cost: 7 commands a pair, of which two are the scripts, sent as
/// `verb`.
async fn seven_commands_a_pair(server: &RedisProcess, url: &str, verb: &str) {
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\n"
    ))
    .await
    .unwrap();
    // Warm: the scripts loaded, the connections up, the subscriber's channel joined.
    for i in 0..5 {
        let g = reg.lock(format!("warm-{i}")).acquire().await.unwrap();
        g.release().await.unwrap();
    }
    resp_command(&server.addr(), &["CONFIG", "RESETSTAT"]).expect("CONFIG RESETSTAT");
    for i in 0..PAIRS {
        let g = reg.lock(format!("pair-{i}")).acquire().await.unwrap();
        assert!(g.fencing_token() > 0);
        g.release().await.unwrap();
    }
    let calls = calls(&server.addr());
    let total: u64 = calls.values().sum();
    let per_pair = total as f64 / PAIRS as f64;
    eprintln!("{per_pair:.2} commands per pair: {calls:?}");
    // Background work (a renewal, a subscriber's PING) may add a few over the run.
    assert!(
        per_pair <= 7.2,
        "{per_pair:.2} commands per uncontended lock+unlock (at most 7): {calls:?}"
    );
    assert_eq!(
        calls.get("publish"),
        None,
        "nobody waited: no release published"
    );
    // The two scripts, and in them: EXISTS, INCR (the token), SET ... PX (the lock's
    // record, holder information and expiry in one write); GET, DEL.
    for command in [verb, "exists", "incr", "set", "get", "del"] {
        let n = calls.get(command).copied().unwrap_or(0);
        let want = if command == verb { 2 * PAIRS } else { PAIRS };
        assert!(n >= want, "{command}: {n} calls, {want} wanted: {calls:?}");
    }
}

/// A server that takes distlock's function library runs each script as a function
/// (`FCALL`), which defines its helpers once, when loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lock_and_unlock_runs_seven_commands_on_the_server() {
    let server = RedisProcess::start();
    seven_commands_a_pair(&server, &server.url(), "fcall").await;
}

/// An ACL user with the README's rights, which leave out `+function|load` and `+fcall`:
/// the same commands, the scripts sent by EVALSHA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_function_rights_runs_the_same_commands_by_evalsha() {
    let server = RedisProcess::start();
    let url = readme_acl_user(&server.addr(), "distlock", &[]);
    seven_commands_a_pair(&server, &url, "evalsha").await;
}
