//! Run-once jobs (`Lock::hold_at_least`, the attribute's `hold_at_least`) on real servers:
//! a lock released before its `hold_at_least` is kept, without a holder, until then, on
//! single, cluster, sentinel, redlock and memory; later callers are `Skipped` (not
//! `Timeout`); a body longer than the hold releases at once; the hold is the server's
//! clock (`hold:until` = `TIME` + hold); misuse is refused before anything is sent. The
//! three processes with skewed clocks are `examples/tests/scheduled_report.rs`.

mod common;

use std::time::{Duration, Instant};

use common::unique;
use distlock::{distributed_lock, Lease, LockError, LockKind, Registry};
use distlock_tests::{addr_of, lock_field, lock_fields, resp_command, single_url};

async fn registries() -> Vec<(&'static str, Registry)> {
    common::every_mode().await
}

const HOLD: Duration = Duration::from_millis(800);

/// The job ran and released at once; within `hold_at_least` of its acquisition a second
/// run is skipped (the body not run), `try_acquire` answers `None`, and a plain waiter gets
/// the lock only once the hold has passed (woken by the kept lock's expiry).
#[tokio::test]
async fn a_quick_job_keeps_its_lock_for_hold_at_least() {
    for (name, reg) in registries().await {
        let key = unique("run-once");
        let job = || {
            reg.lock(key.as_str())
                .wait(Duration::ZERO)
                .lease(Lease::Fixed(Duration::from_secs(10)))
                .hold_at_least(HOLD)
        };
        let start = Instant::now();
        let token = job()
            .run(async { distlock::fencing_token() })
            .await
            .unwrap_or_else(|e| panic!("{name}: the first run: {e}"));
        assert!(token.is_some(), "{name}: a token inside the job");

        let mut ran = false;
        let again = job().run(async { ran = true }).await;
        assert!(
            !ran,
            "{name}: a second run within the hold must not run the body"
        );
        match &again {
            Err(LockError::Skipped {
                key: k, backend, ..
            }) => {
                assert_eq!((k.as_str(), backend.as_str()), (key.as_str(), "main"));
            }
            other => panic!("{name}: expected Skipped, got {other:?}"),
        }
        assert!(again.unwrap_err().is_skipped());
        assert!(
            job().try_acquire().await.unwrap().is_none(),
            "{name}: try_acquire within the hold"
        );

        // A plain lock (no hold) on the key waits for the hold to pass.
        let guard = reg
            .lock(key.as_str())
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: after the hold: {e}"));
        let waited = start.elapsed();
        assert!(
            waited >= HOLD - Duration::from_millis(100),
            "{name}: free after {waited:?}, before the hold of {HOLD:?}"
        );
        assert!(
            waited < HOLD + Duration::from_millis(1500),
            "{name}: the kept lock ended {waited:?} after it was taken (hold {HOLD:?})"
        );
        assert!(
            guard.fencing_token() > token.unwrap(),
            "{name}: tokens grow"
        );
        guard.release().await.unwrap();
    }
}

/// A job that ran longer than its hold frees the lock on release, at once.
#[tokio::test]
async fn a_job_longer_than_its_hold_releases_at_once() {
    for (name, reg) in registries().await {
        let key = unique("run-once-long");
        let job = || {
            reg.lock(key.as_str())
                .wait(Duration::ZERO)
                .lease(Lease::Auto)
                .hold_at_least(Duration::from_millis(200))
        };
        job()
            .run(tokio::time::sleep(Duration::from_millis(400)))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            job().try_acquire().await.unwrap().is_some(),
            "{name}: free at once after a job longer than its hold"
        );
    }
}

/// Nested acquisitions re-enter; only the outermost release decides, after the hold.
#[tokio::test]
async fn a_nested_acquisition_keeps_the_outer_hold() {
    for (name, reg) in registries().await {
        let key = unique("run-once-nested");
        let job = || {
            reg.lock(key.as_str())
                .wait(Duration::ZERO)
                .lease(Lease::Fixed(Duration::from_secs(10)))
                .hold_at_least(HOLD)
        };
        let outer = job().acquire().await.unwrap();
        let inner = outer.scope(job().acquire()).await.unwrap();
        inner.release().await.unwrap();
        outer.release().await.unwrap();
        let other = reg.lock(key.as_str()).try_acquire().await.unwrap();
        assert!(other.is_none(), "{name}: kept after the outermost release");
    }
}

/// The hold is measured on the server: `hold:until` in the lock hash is the server's `TIME`
/// at the acquisition plus the hold, whatever the client's clock; once released early, the
/// hash has no holder left and expires at `hold:until`.
#[tokio::test]
async fn the_hold_is_the_servers_clock() {
    let reg = Registry::from_str(&format!(
        "[defaults]\nkey_prefix = \"run-once:\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .unwrap();
    let addr = addr_of(&single_url());
    let server_ms = || {
        let t = resp_command(&addr, &["TIME"]).unwrap();
        let t = t.as_array().unwrap();
        let s: i64 = t[0].as_str().unwrap().parse().unwrap();
        let us: i64 = t[1].as_str().unwrap().parse().unwrap();
        s * 1000 + us / 1000
    };
    let key = unique("run-once-clock");
    let hash = format!("run-once:{{{key}}}");
    let before = server_ms();
    let guard = reg
        .lock(key.as_str())
        .lease(Lease::Fixed(Duration::from_secs(60)))
        .hold_at_least(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let after = server_ms();
    let until: i64 = lock_field(&addr, &hash, "hold:until")
        .expect("hold:until is set")
        .parse()
        .unwrap();
    assert!(
        (before + 20_000..=after + 20_000).contains(&until),
        "hold:until {until} is not the server's TIME ({before}..{after}) + 20 s"
    );
    guard.release().await.unwrap();
    let fields = lock_fields(&addr, &hash);
    let fields: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["hold:until"], "no holder left after the release");
    let pttl = resp_command(&addr, &["PTTL", &hash])
        .unwrap()
        .as_int()
        .unwrap();
    let left = until - server_ms();
    assert!(
        (left - 1000..=left + 50).contains(&pttl),
        "kept until hold:until: PTTL {pttl} ms, {left} ms to go"
    );
    // An administrator's force-unlock ends the hold.
    assert!(reg.lock(key.as_str()).force_unlock().await.unwrap());
    assert!(reg
        .lock(key.as_str())
        .try_acquire()
        .await
        .unwrap()
        .is_some());
}

/// Refused before anything is sent: a hold longer than the fixed lease, and a kind other
/// than reentrant.
#[tokio::test]
async fn misuse_is_refused() {
    for (name, reg) in registries().await {
        let key = unique("run-once-misuse");
        let err = reg
            .lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_secs(1)))
            .hold_at_least(Duration::from_secs(2))
            .acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(err, LockError::InvalidDuration { what, .. } if what.starts_with("hold_at_least")),
            "{name}: {err:?}"
        );
        let err = reg
            .lock(key.as_str())
            .kind(LockKind::Write)
            .hold_at_least(Duration::from_secs(2))
            .acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(err, LockError::Unsupported { .. }),
            "{name}: {err:?}"
        );
    }
}

#[distributed_lock(
    key = "run-once-attr:<id>",
    wait = "0s",
    lease = "10s",
    hold_at_least = "1s"
)]
async fn attributed_job(id: String) -> Result<u32, LockError> {
    Ok(7)
}

/// The attribute: the first call runs, the next within the hold is `Skipped`.
#[tokio::test]
async fn the_attribute_runs_once_within_the_hold() {
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .unwrap();
    let id = unique("attr");
    let first = reg.scope(attributed_job(id.clone())).await;
    assert_eq!(first.unwrap(), 7);
    let second = reg.scope(attributed_job(id)).await;
    assert!(
        second.as_ref().is_err_and(LockError::is_skipped),
        "{second:?}"
    );
}
