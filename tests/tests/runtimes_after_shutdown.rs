//! The runtime that ran `init` shuts down; locks keep working from runtimes made after it
//! (current-thread and multi-thread), on every Redis mode: connections, the watchdog, the
//! subscribers and background releases live on distlock's own runtime.
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).

mod runtimes_common;

use runtimes_common::*;

#[test]
fn locks_outlive_the_runtime_that_ran_init() {
    let first = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    first.block_on(async {
        distlock::init_from_str(&all_modes_config())
            .await
            .expect("init with every Redis mode");
        for mode in MODES {
            exercise(mode, false).await;
        }
    });
    drop(first);

    let current_thread = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    current_thread.block_on(async {
        for mode in MODES {
            exercise(mode, true).await;
        }
    });
    drop(current_thread);

    let multi_thread = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    multi_thread.block_on(async {
        let all = MODES.map(|mode| tokio::spawn(exercise(mode, true)));
        for task in all {
            task.await.expect("every mode, concurrently");
        }
    });
}

/// A connection that reconnects while a test's runtime drives it (the server restarted)
/// reconnects onto distlock's runtime, not that test's: the next runtime still finds it.
#[test]
fn a_reconnection_outlives_the_runtime_that_triggered_it() {
    let mut server = distlock_tests::RedisProcess::start();
    let config = format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"500ms\"\nresponse_timeout = \"500ms\"\n",
        server.url()
    );
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let registry = runtime().block_on(async {
        let registry = distlock::Registry::from_str(&config)
            .await
            .expect("connect to the private server");
        let g = registry.lock("reconnect").acquire().await.expect("acquire");
        g.release().await.expect("release");
        registry
    });

    server.restart();
    // On a runtime of its own: the first commands find the old connection gone, and the
    // client reconnects; retried (bounded) until a lock is taken again.
    runtime().block_on(async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match registry.lock("reconnect").acquire().await {
                Ok(g) => {
                    g.release().await.expect("release after the reconnection");
                    break;
                }
                Err(e) if std::time::Instant::now() < deadline => {
                    println!("while the server restarts: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => panic!("no lock within 10 s of the restart: {e}"),
            }
        }
    });

    // That runtime is gone; the reconnected connection is not.
    runtime().block_on(async {
        let g = registry
            .lock("reconnect")
            .acquire()
            .await
            .expect("the connection made while the previous runtime ran still works");
        g.release().await.expect("release");
    });
}
