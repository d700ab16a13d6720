//! distlock's metrics through the exporter the docs name (`metrics-exporter-prometheus`
//! 0.17, on `metrics` 0.24 as distlock): its recorder installed, distlock's counters appear
//! in the rendered text. A multi-key acquisition counts once; a leader's `site` label is
//! the election's name. On a real redis-server.

mod common;

use std::sync::OnceLock;

use common::unique;
use distlock::Registry;
use distlock_tests::single_url;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The one recorder of this test process (a recorder is global).
fn exporter() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this process")
    })
}

async fn registry(backend: &str) -> Registry {
    exporter();
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.{backend}]\nmode = \"single\"\nurl = \"{}\"",
        single_url()
    ))
    .await
    .expect("registry")
}

/// The value of `distlock_acquisitions_total{backend, site, outcome}` in the rendered text
/// (0 when absent), and the text.
fn acquisitions(backend: &str, site: &str, outcome: &str) -> (u64, String) {
    let text = exporter().render();
    let want = [
        format!("backend=\"{backend}\""),
        format!("site=\"{site}\""),
        format!("outcome=\"{outcome}\""),
    ];
    let value = text
        .lines()
        .filter(|l| l.starts_with("distlock_acquisitions_total{"))
        .filter(|l| want.iter().all(|w| l.contains(w.as_str())))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("a value on {l:?}")) as u64
        })
        .sum();
    (value, text)
}

#[tokio::test]
async fn the_documented_exporter_renders_distlocks_counters() {
    let reg = registry("exported").await;
    let key = unique("metrics-exported");
    for _ in 0..3 {
        let g = reg
            .lock(key.as_str())
            .site("metrics-test-site")
            .acquire()
            .await
            .expect("acquire");
        g.release().await.expect("release");
    }
    let (n, text) = acquisitions("exported", "metrics-test-site", "acquired");
    assert_eq!(n, 3, "three acquisitions rendered; the text:\n{text}");
    assert!(
        text.contains("distlock_hold_seconds"),
        "the hold histogram is rendered too:\n{text}"
    );
}

#[tokio::test]
async fn a_multi_key_acquisition_counts_once() {
    let reg = registry("multi").await;
    let keys = [
        unique("metrics-a"),
        unique("metrics-b"),
        unique("metrics-c"),
    ];
    let guard = reg
        .lock_all(keys.iter().map(String::as_str))
        .site("metrics-multi-site")
        .acquire()
        .await
        .expect("acquire three keys");
    guard.release().await.expect("release");
    let (n, text) = acquisitions("multi", "metrics-multi-site", "acquired");
    assert_eq!(
        n, 1,
        "one acquisition of three keys counts once; the text:\n{text}"
    );

    // A timed-out multi-key acquisition counts once too, as a timeout.
    let other = reg.lock(keys[1].as_str()).acquire().await.expect("hold b");
    reg.lock_all(keys.iter().map(String::as_str))
        .site("metrics-multi-site")
        .wait(std::time::Duration::from_millis(100))
        .acquire()
        .await
        .expect_err("b is held");
    other.release().await.expect("release b");
    let (acquired, _) = acquisitions("multi", "metrics-multi-site", "acquired");
    let (timeouts, text) = acquisitions("multi", "metrics-multi-site", "timeout");
    assert_eq!((acquired, timeouts), (1, 1), "the text:\n{text}");
}

#[tokio::test]
async fn a_leaders_site_label_is_the_elections_name() {
    let reg = registry("elections").await;
    let name = unique("metrics-election");
    let leader = reg.leader(name.as_str()).campaign().await.expect("elected");
    leader.resign().await.expect("resign");
    let (n, text) = acquisitions("elections", &name, "acquired");
    assert_eq!(
        n, 1,
        "the election's acquisition is labelled with its name; the text:\n{text}"
    );
}
