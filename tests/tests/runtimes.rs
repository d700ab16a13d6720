//! How users write tests: many `#[tokio::test]`s (each its own runtime) sharing ONE global
//! `init` (a `OnceCell`), with annotated functions and `Lock` on every Redis mode; and a
//! test running annotated code against its own `Registry` with `Registry::scope`.
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod runtimes_common;

use distlock::{distributed_lock, Lock, LockError, Registry};
use distlock_tests::single_url;
use runtimes_common::*;
use tokio::sync::OnceCell;

static INIT: OnceCell<()> = OnceCell::const_new();

/// The one global `init` of this binary, done by whichever test comes first (on its
/// runtime, which ends with that test).
async fn setup() {
    INIT.get_or_init(|| async {
        distlock::init_from_str(&all_modes_config())
            .await
            .expect("init with every Redis mode");
    })
    .await;
}

#[tokio::test]
async fn single_first_runtime() {
    setup().await;
    exercise("single", true).await;
}

#[tokio::test]
async fn single_second_runtime() {
    setup().await;
    exercise("single", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_runtime() {
    setup().await;
    exercise("cluster", true).await;
}

#[tokio::test]
async fn sentinel_runtime() {
    setup().await;
    exercise("sentinel", true).await;
}

#[tokio::test]
async fn redlock_runtime() {
    setup().await;
    exercise("redlock", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_runtime() {
    setup().await;
    exercise("multi", true).await;
}

/// Each of these is its own runtime too: one after the other, the earlier ones are gone.
#[test]
fn one_runtime_after_another() {
    for round in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            setup().await;
            for mode in MODES {
                exercise(mode, false).await;
            }
        });
        drop(rt);
        println!("round {round}: every mode worked; its runtime is gone");
    }
}

// ------------------------------------------------------------------ a scoped registry

#[distributed_lock(key = "rt:scoped:<n>", wait = "0s")]
async fn scoped_job(n: u32, probe: &Registry) -> Result<(bool, bool), LockError> {
    // A separate task, a separate owner: is the lock held where this function took it?
    let key = format!("rt:scoped:{n}");
    tokio::spawn({
        let probe = probe.clone();
        async move {
            // A lock the probe took is released before the answer (awaited: a dropped
            // guard's release lands in the background, after the next `wait = "0s"` call
            // may have looked).
            let mut held = Vec::new();
            for lock in [probe.lock(key.as_str()), Lock::new(key.as_str())] {
                let got = lock.try_acquire().await?;
                held.push(got.is_none());
                if let Some(g) = got {
                    g.release().await?;
                }
            }
            Ok::<_, LockError>((held[0], held[1]))
        }
    })
    .await
    .expect("the probe task")
}

#[tokio::test]
async fn annotated_function_in_a_scoped_registry() {
    setup().await;
    // The test's own registry: the same server, another key prefix, so its locks are not
    // the global registry's.
    let own = Registry::from_str(&format!(
        "[defaults]\nkey_prefix = \"scoped-test:\"\n[backends.mine]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .expect("the test's own registry");
    let (held_in_scoped, held_in_global) = own
        .scope(scoped_job(1, &own))
        .await
        .expect("the annotated function ran in the scope");
    assert!(
        held_in_scoped,
        "the annotated function held its lock in the scoped registry"
    );
    assert!(
        !held_in_global,
        "the global registry's lock of the same key stayed free"
    );

    // Outside the scope the same function uses the global registry.
    let (held_in_scoped, held_in_global) = scoped_job(1, &own).await.expect("global");
    assert!(!held_in_scoped);
    assert!(held_in_global);

    // `Lock::new` consults the scope too, and scopes nest (the innermost wins).
    let memory = Registry::from_str("[backends.mem]\nmode = \"memory\"")
        .await
        .expect("memory registry");
    let backend = own
        .scope(memory.scope(async {
            let g = Lock::new("rt:scoped:2").acquire().await?;
            let name = g.backend().to_owned();
            g.release().await?;
            Ok::<_, LockError>(name)
        }))
        .await
        .expect("lock in the inner scope");
    assert_eq!(backend, "mem");

    // A spawned task does not inherit the scope: it sees the global registry.
    let spawned = own
        .scope(async {
            tokio::spawn(async {
                let g = Lock::new("rt:scoped:3").acquire().await?;
                let name = g.backend().to_owned();
                g.release().await?;
                Ok::<_, LockError>(name)
            })
            .await
            .expect("spawned")
        })
        .await
        .expect("lock in the spawned task");
    assert_eq!(spawned, "single");
}
