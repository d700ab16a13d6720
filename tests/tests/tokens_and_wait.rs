//! `distlock::fencing_tokens()` (the innermost lock's tokens with their keys, without
//! re-building the keys) and `distlock::with_wait(..)` (a per-call wait for
//! `#[distributed_lock]` calls), against the shared single test server and the memory
//! backend, through `Registry::scope` so that the annotated functions use them.

mod common;

use std::time::{Duration, Instant};

use common::unique;
use distlock::{distributed_lock, fencing_tokens, with_wait, LockError, Registry};
use distlock_tests::single_url;

async fn registries() -> Vec<(&'static str, Registry)> {
    let single = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    );
    let memory = "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"memory\"\n";
    let mut out = Vec::new();
    for (name, config) in [("single", single.as_str()), ("memory", memory)] {
        let reg = Registry::from_str(config)
            .await
            .unwrap_or_else(|e| panic!("connect {name} (scripts/test.sh starts it): {e}"));
        out.push((name, reg));
    }
    out
}

/// What the body of a multi-key function sees: its tokens, a nested single lock's, a
/// re-entry's, and its tokens again after them.
#[derive(Debug)]
struct Seen {
    tokens: Vec<(String, u64)>,
    of_each: Vec<Option<u64>>,
    in_single: Option<Vec<(String, u64)>>,
    in_reentry: Option<Vec<(String, u64)>>,
    after: Option<Vec<(String, u64)>>,
}

#[distributed_lock(key = "<key>", wait = "5s")]
async fn single(key: &str) -> Result<Option<Vec<(String, u64)>>, LockError> {
    Ok(fencing_tokens())
}

#[distributed_lock(keys = ["<b>", "<a>", "<c>"], wait = "5s")]
async fn three(a: &str, b: &str, c: &str, other: &str) -> Result<Seen, LockError> {
    let tokens = fencing_tokens().expect("inside the multi-key lock");
    let of_each = [a, b, c]
        .iter()
        .map(|k| distlock::fencing_token_of(k))
        .collect();
    let in_single = single(other).await?;
    let in_reentry = single(b).await?;
    Ok(Seen {
        tokens,
        of_each,
        in_single,
        in_reentry,
        after: fencing_tokens(),
    })
}

#[tokio::test]
async fn fencing_tokens_of_the_attributes_keys_in_key_order() {
    for (name, reg) in registries().await {
        assert_eq!(fencing_tokens(), None, "{name}: outside any lock");
        let base = unique("tokens");
        let (a, b, c, other) = (
            format!("{base}:a"),
            format!("{base}:b"),
            format!("{base}:c"),
            format!("{base}:other"),
        );
        // Two calls: the tokens grow with each new holder.
        let first = reg
            .scope(three(&a, &b, &c, &other))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let seen = reg
            .scope(three(&a, &b, &c, &other))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let keys: Vec<&str> = seen.tokens.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, [a.as_str(), b.as_str(), c.as_str()], "{name}: sorted");
        // The same tokens as re-building each key gives.
        let tokens: Vec<Option<u64>> = seen.tokens.iter().map(|(_, t)| Some(*t)).collect();
        assert_eq!(tokens, seen.of_each, "{name}");
        for ((k, t1), (_, t2)) in first.tokens.iter().zip(&seen.tokens) {
            assert!(t2 > t1, "{name}: {k}: {t1} then {t2}");
        }
        // A single lock nested inside: its one key (the innermost lock).
        let in_single = seen.in_single.expect("inside the nested lock");
        assert_eq!(in_single.len(), 1, "{name}: {in_single:?}");
        assert_eq!(in_single[0].0, other, "{name}");
        // A re-entry of one of the keys: that key, with the multi-key lock's token for it.
        assert_eq!(
            seen.in_reentry,
            Some(vec![(b.clone(), seen.tokens[1].1)]),
            "{name}"
        );
        // Back in the multi-key body: all of its keys again.
        assert_eq!(seen.after.as_ref(), Some(&seen.tokens), "{name}");
        assert_eq!(fencing_tokens(), None, "{name}: released");
    }
}

#[tokio::test]
async fn fencing_tokens_in_a_multi_lock_scope_and_run() {
    for (name, reg) in registries().await {
        let base = unique("scope");
        let (x, y) = (format!("{base}:y"), format!("{base}:x"));
        let guard = reg
            .lock_all([x.as_str(), y.as_str()])
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<(String, u64)> = guard
            .fencing_tokens()
            .into_iter()
            .map(|(k, t)| (k.to_owned(), t))
            .collect();
        let seen = guard.scope(async { fencing_tokens() }).await;
        assert_eq!(seen.as_ref(), Some(&want), "{name}: the guard's tokens");
        assert_eq!(want[0].0, y, "{name}: sorted (`..:x` before `..:y`)");
        assert_eq!(fencing_tokens(), None, "{name}: outside the scope");
        guard.release().await.expect("release");

        let seen = reg
            .lock_all([y.as_str(), x.as_str()])
            .run(async { fencing_tokens() })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .expect("inside run");
        let keys: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, [y.as_str(), x.as_str()], "{name}");
        assert!(seen.iter().zip(&want).all(|(a, b)| a.1 > b.1), "{name}");
    }
}

#[distributed_lock(key = "<key>", wait = "30s")]
async fn patient(key: &str) -> Result<u64, LockError> {
    Ok(distlock::fencing_token().expect("held"))
}

#[distributed_lock(keys = ["<a>", "<b>"], wait = "30s")]
async fn patient_pair(a: &str, b: &str) -> Result<(), LockError> {
    Ok(())
}

/// Holds `outer` and, inside, calls `patient(inner)` (whose attribute says 30 s): the
/// override of the call to this function does not reach it.
#[distributed_lock(key = "<outer>", wait = "30s")]
async fn calls_patient(outer: &str, inner: &str) -> Result<u64, LockError> {
    patient(inner).await
}

#[tokio::test]
async fn with_wait_zero_fails_fast_on_a_held_key() {
    for (name, reg) in registries().await {
        let key = unique("with-wait");
        let held = reg.lock(key.as_str()).acquire().await.expect("hold");
        let start = Instant::now();
        let err = reg
            .scope(with_wait(Duration::ZERO, patient(&key)))
            .await
            .expect_err("held elsewhere");
        assert!(
            matches!(&err, LockError::Timeout { key: k, .. } if *k == key),
            "{name}: {err:?}"
        );
        // The attribute says 30 s; the override said none.
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name}: {:?}",
            start.elapsed()
        );

        // Multi-key too: one held key of two.
        let other = unique("with-wait-other");
        let start = Instant::now();
        let err = reg
            .scope(with_wait(Duration::ZERO, patient_pair(&other, &key)))
            .await
            .expect_err("one key held");
        assert!(matches!(err, LockError::Timeout { .. }), "{name}: {err:?}");
        assert!(start.elapsed() < Duration::from_secs(5), "{name}");

        // A short wait that the holder's release ends: the call is served.
        let release = async {
            // The call waits (the override's 10 s, not zero) until the holder lets go.
            common::wait_for_waiter(&reg, &key).await;
            held.release().await.expect("release");
        };
        let (served, ()) = tokio::join!(
            reg.scope(with_wait(Duration::from_secs(10), patient(&key))),
            release
        );
        served.unwrap_or_else(|e| panic!("{name}: served after the release: {e}"));
    }
}

#[tokio::test]
async fn with_wait_does_not_reach_the_calls_inside_the_annotated_body() {
    for (name, reg) in registries().await {
        let (outer, inner) = (unique("outer"), unique("inner"));
        let held = reg
            .lock(inner.as_str())
            .acquire()
            .await
            .expect("hold inner");
        // `calls_patient` takes `outer` at once; its body's `patient(inner)` waits as its
        // own attribute says (30 s), so it is served when `inner` is released, not failed.
        let release = async {
            // `calls_patient` holds `outer` and is asleep waiting for `inner`.
            common::wait_for_waiter(&reg, &inner).await;
            held.release().await.expect("release inner");
        };
        let (out, ()) = tokio::join!(
            reg.scope(with_wait(Duration::ZERO, calls_patient(&outer, &inner))),
            release
        );
        out.unwrap_or_else(|e| panic!("{name}: the inner call must wait: {e}"));
    }
}

#[async_trait::async_trait]
trait Orders {
    async fn place(&self, key: &str) -> Result<u64, LockError>;
}

struct Shop;

#[async_trait::async_trait]
impl Orders for Shop {
    #[distributed_lock(key = "<key>", wait = "30s")]
    async fn place(&self, key: &str) -> Result<u64, LockError> {
        Ok(distlock::fencing_token().expect("held"))
    }
}

/// The override reaches an annotated method under `#[async_trait]` too (its boxed shape).
#[tokio::test]
async fn with_wait_under_async_trait() {
    for (name, reg) in registries().await {
        let key = unique("with-wait-trait");
        let held = reg.lock(key.as_str()).acquire().await.expect("hold");
        let start = Instant::now();
        let err = reg
            .scope(with_wait(Duration::ZERO, Shop.place(&key)))
            .await
            .expect_err("held elsewhere");
        assert!(matches!(err, LockError::Timeout { .. }), "{name}: {err:?}");
        assert!(start.elapsed() < Duration::from_secs(5), "{name}");
        held.release().await.expect("release");
        reg.scope(with_wait(Duration::ZERO, Shop.place(&key)))
            .await
            .unwrap_or_else(|e| panic!("{name}: free: {e}"));
    }
}
