//! Safety properties: each test failed before its fix, on a real
//! redis-server (`scripts/test.sh`) and, where it applies, on the memory backend.

mod common;

use std::time::Duration;

use common::unique;
use distlock::{Lease, LockKind, Registry};
use distlock_tests::{addr_of, resp_command, single_url};

/// `watchdog_timeout` short, so a nested auto lease renews many times within a test.
const SHORT_WATCHDOG: &str = "300ms";

fn config(backend: &str) -> String {
    format!("[defaults]\nwatchdog_timeout = \"{SHORT_WATCHDOG}\"\n[backends.main]\n{backend}")
}

async fn single() -> Registry {
    let url = single_url();
    Registry::from_str(&config(&format!(
        "mode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    )))
    .await
    .expect("connect to the test redis-server")
}

async fn memory() -> Registry {
    Registry::from_str(&config("mode = \"memory\"\n"))
        .await
        .expect("memory backend")
}

fn pttl(hash: &str) -> i64 {
    resp_command(&addr_of(&single_url()), &["PTTL", hash])
        .expect("PTTL")
        .as_int()
        .expect("PTTL is an integer")
}

/// Another owner (a spawned task is one) tries to take `key` once.
async fn other_owner_gets(reg: &Registry, key: &str, kind: LockKind) -> bool {
    let (reg, key) = (reg.clone(), key.to_owned());
    tokio::spawn(async move {
        reg.lock(key.as_str())
            .kind(kind)
            .lease(Lease::Fixed(Duration::from_secs(5)))
            .try_acquire()
            .await
            .expect("try_acquire")
            .is_some()
    })
    .await
    .expect("task")
}

/// Outer `Fixed(10s)`, nested `Auto` (watchdog 300ms) renewed several times, then returned:
/// the outer lease must still be ~10s, and no other owner may take the lock while the
/// outer guard holds it (renewal only ever extends).
/// `on_server`: the lock lives on the single test server (its PTTL is checked there too).
async fn nested_auto_never_shortens(reg: &Registry, kind: LockKind, on_server: bool) {
    let key = unique("nested-auto");
    let hash = match kind {
        LockKind::Read | LockKind::Write => format!("lock:{{{key}}}:rw"),
        _ => format!("lock:{{{key}}}"),
    };
    let outer = reg
        .lock(key.as_str())
        .kind(kind)
        .lease(Lease::Fixed(Duration::from_secs(10)))
        .acquire()
        .await
        .expect("outer acquire");
    outer
        .scope(async {
            let inner = reg
                .lock(key.as_str())
                .kind(kind)
                .lease(Lease::Auto)
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("nested acquire re-enters");
            // Several renewals (every third of 300ms).
            tokio::time::sleep(Duration::from_millis(700)).await;
            assert!(inner.is_held(), "the nested auto lease is renewed");
            inner.release().await.expect("nested release");
        })
        .await;
    if on_server {
        let left = pttl(&hash);
        assert!(
            left > 5_000,
            "after nested auto renewals the outer Fixed(10s) lease has only {left} ms left on the server"
        );
    }
    // Past the nested watchdog lease: the outer Fixed(10s) must still exclude others.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(outer.is_held(), "the outer guard says held");
    // Readers share: a writer is the other owner a read lock must exclude.
    let probe = if matches!(kind, LockKind::Read) {
        LockKind::Write
    } else {
        kind
    };
    assert!(
        !other_owner_gets(reg, &key, probe).await,
        "another owner acquired {key} while the outer Fixed(10s) guard holds it"
    );
    outer.release().await.expect("outer release");
}

#[tokio::test]
async fn renewal_never_shortens_single() {
    nested_auto_never_shortens(&single().await, LockKind::Reentrant, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_single_write() {
    nested_auto_never_shortens(&single().await, LockKind::Write, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_single_read() {
    nested_auto_never_shortens(&single().await, LockKind::Read, true).await;
}

#[tokio::test]
async fn renewal_never_shortens_memory() {
    nested_auto_never_shortens(&memory().await, LockKind::Reentrant, false).await;
}

#[tokio::test]
async fn renewal_never_shortens_memory_write() {
    nested_auto_never_shortens(&memory().await, LockKind::Write, false).await;
}

// ------------------------------------------------------------------ durations

/// The largest valid lease is documented as 24 hours; this is far beyond.
const ABSURD: Duration = Duration::MAX;

/// `Lease::Fixed(Duration::MAX)` is refused up front with an error naming the value and the
/// limit, and leaves nothing behind on the server (before: INCR and HSET ran, PEXPIRE
/// failed, the hash stayed without expiry, forever).
async fn absurd_lease_refused(reg: &Registry, on_server: bool) {
    for kind in [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Write,
        LockKind::Read,
    ] {
        let key = unique("absurd-lease");
        let err = reg
            .lock(key.as_str())
            .kind(kind)
            .lease(Lease::Fixed(ABSURD))
            .wait(Duration::ZERO)
            .acquire()
            .await
            .expect_err("an absurd lease must be refused");
        let msg = err.to_string();
        assert!(
            msg.contains("lease") && msg.contains("24h") && msg.contains(&key),
            "{kind:?}: the error names the lease, its limit and the key: {msg}"
        );
        if on_server {
            let exists = resp_command(
                &addr_of(&single_url()),
                &[
                    "EXISTS",
                    &format!("lock:{{{key}}}"),
                    &format!("lock:{{{key}}}:fair"),
                    &format!("lock:{{{key}}}:rw"),
                    &format!("lock:{{{key}}}:fence"),
                ],
            )
            .expect("EXISTS");
            assert_eq!(
                exists.as_int(),
                Some(0),
                "{kind:?}: nothing written for {key}"
            );
        }
        // The key stays usable.
        let g = reg
            .lock(key.as_str())
            .kind(kind)
            .lease(Lease::Fixed(Duration::from_secs(5)))
            .wait(Duration::ZERO)
            .acquire()
            .await
            .expect("a normal lease on the same key");
        g.release().await.expect("release");
    }
}

/// `wait(Duration::MAX)` saturates instead of panicking on `Instant + wait`.
async fn unbounded_wait_saturates(reg: &Registry) {
    for kind in [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Write,
        LockKind::Read,
    ] {
        let key = unique("max-wait");
        let g = reg
            .lock(key.as_str())
            .kind(kind)
            .wait(Duration::MAX)
            .lease(Lease::Fixed(Duration::from_millis(300)))
            .acquire()
            .await
            .expect("a free lock with wait(MAX)");
        // A second owner waits (saturated wait) until the first lease runs out.
        let (reg2, key2) = (reg.clone(), key.clone());
        let waiter = tokio::spawn(async move {
            let w = if matches!(kind, LockKind::Read) {
                LockKind::Write
            } else {
                kind
            };
            reg2.lock(key2.as_str())
                .kind(w)
                .wait(Duration::MAX)
                .lease(Lease::Fixed(Duration::from_secs(5)))
                .acquire()
                .await
                .map(|g| g.fencing_token())
        });
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter gets the lock once the 300ms lease ends")
            .expect("the waiter task did not panic");
        got.expect("acquired");
        drop(g);
    }
}

#[tokio::test]
async fn absurd_lease_refused_single() {
    absurd_lease_refused(&single().await, true).await;
}

#[tokio::test]
async fn absurd_lease_refused_memory() {
    absurd_lease_refused(&memory().await, false).await;
}

#[tokio::test]
async fn unbounded_wait_saturates_single() {
    unbounded_wait_saturates(&single().await).await;
}

#[tokio::test]
async fn unbounded_wait_saturates_memory() {
    unbounded_wait_saturates(&memory().await).await;
}

/// Each script checks its numeric arguments before its first write: run directly with an
/// absurd lease or wait, it answers with an error and leaves no key behind.
#[test]
fn scripts_validate_arguments_before_writing() {
    let prologue = include_str!("../../distlock/src/protocol/rw_prologue.lua");
    let rw = |body: &str| format!("{prologue}{body}");
    let huge = "100000000000000000000";
    let owner = "00112233445566778899aabbccddeeff";
    let cases: Vec<(&str, String, usize, Vec<&str>)> = vec![
        (
            "acquire.lua",
            include_str!("../../distlock/src/protocol/acquire.lua").to_owned(),
            2,
            vec![owner, huge],
        ),
        (
            "fair_acquire.lua",
            include_str!("../../distlock/src/protocol/fair_acquire.lua").to_owned(),
            4,
            vec![owner, huge, "1000"],
        ),
        (
            "fair_acquire.lua (wait)",
            include_str!("../../distlock/src/protocol/fair_acquire.lua").to_owned(),
            4,
            vec![owner, "1000", huge],
        ),
        (
            "rw_acquire.lua",
            rw(include_str!("../../distlock/src/protocol/rw_acquire.lua")),
            4,
            vec![owner, huge, "write", "0"],
        ),
        (
            "rw_acquire.lua (read)",
            rw(include_str!("../../distlock/src/protocol/rw_acquire.lua")),
            4,
            vec![owner, huge, "read", "0"],
        ),
        (
            "rw_acquire.lua (wait)",
            rw(include_str!("../../distlock/src/protocol/rw_acquire.lua")),
            4,
            vec![owner, "1000", "write", "nonsense"],
        ),
    ];
    for (name, script, nkeys, args) in cases {
        let key = unique("script-argv");
        let keys: Vec<String> = ["", ":b", ":c", ":fence"]
            .iter()
            .take(nkeys)
            .map(|s| format!("lock:{{{key}}}{s}"))
            .collect();
        let n = nkeys.to_string();
        let mut cmd = vec!["EVAL", script.as_str(), n.as_str()];
        cmd.extend(keys.iter().map(String::as_str));
        cmd.extend(args.iter().copied());
        let reply = resp_command(&addr_of(&single_url()), &cmd).expect("EVAL");
        assert!(
            matches!(reply, distlock_tests::RespValue::Error(_)),
            "{name}: an absurd argument must be an error reply, got {reply:?}"
        );
        let mut exists = vec!["EXISTS"];
        exists.extend(keys.iter().map(String::as_str));
        let left = resp_command(&addr_of(&single_url()), &exists).expect("EXISTS");
        assert_eq!(
            left.as_int(),
            Some(0),
            "{name}: wrote keys before failing: {reply:?}"
        );
    }
}

/// A holder paused past its lease (here its runtime's only thread blocked, as a SIGSTOP or
/// a long GC pause would block the whole process) hears of the loss the moment it is
/// polled again: `lost()` reads the clock on every poll, not only when its timer has fired.
/// Before, a task woken by something else after the pause (a reply that arrived meanwhile)
/// found `lost()` still pending, and went on with its section: the torture run's `pause`
/// scenario once caught a holder writing 1.7 ms after its lease ended, unsignalled.
#[test]
fn a_holder_paused_past_its_lease_hears_of_it_when_next_polled() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let reg = single().await;
        let key = unique("paused");
        let guard = reg
            .lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_millis(300)))
            .acquire()
            .await
            .unwrap();
        let lost = guard.lost();
        tokio::pin!(lost);
        assert!(
            futures_util::poll!(lost.as_mut()).is_pending(),
            "held at first"
        );
        // Paused: the whole thread stops for longer than the lease.
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            futures_util::poll!(lost.as_mut()).is_ready(),
            "lost() is ready as soon as it is polled after the pause"
        );
    });
}
