//! TLS (`rediss://`) against real redis-servers listening on a TLS port only, with
//! certificates generated at test time by the `openssl` CLI (see `distlock_tests::tls`).

mod common;
#[allow(dead_code)]
mod scenarios;

use std::time::{Duration, Instant};

use common::*;
use distlock::{InitError, Registry};
use distlock_tests::tls::{Certs, ClientAuth, TlsRedis};
use scenarios::*;

/// A single backend at `url` with `tls` lines added.
fn single(url: &str, tls: &str) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n{tls}"
    )
}

fn ca(certs: &Certs, name: &str) -> String {
    format!("tls_ca = \"{}\"\n", certs.file(name))
}

fn client_cert(certs: &Certs) -> String {
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        certs.file("client.pem"),
        certs.file("client.key")
    )
}

/// `init` of `config` fails within `connect_timeout` (1 s) plus slack; the error's text.
async fn init_fails(config: &str) -> String {
    let start = Instant::now();
    let err = match Registry::from_str(config).await {
        Ok(_) => panic!("init succeeded with {config}"),
        Err(e) => e,
    };
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "init took {took:?} to fail: {err}"
    );
    assert!(
        matches!(err, InitError::Connect { .. }),
        "not a connect error: {err:?}"
    );
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_over_tls_locks_wakes_renews_fences() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "server", ClientAuth::No, &[]);
    let reg = Registry::from_str(&single(&server.url(), &ca(&certs, "ca.pem")))
        .await
        .unwrap_or_else(|e| panic!("init over TLS: {e}\n{}", server.log_tail()));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    let mut times = hand_off(&reg, 20).await;
    let p50 = percentile(&mut times, 0.5);
    assert!(p50 < Duration::from_millis(50), "wake-up p50 {p50:?}");
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    reentrancy(&reg).await;
    readers_overlap(&reg).await;
    fair_in_order(&reg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_and_without_client_certificate() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "server", ClientAuth::Yes, &[]);
    let with = format!("{}{}", ca(&certs, "ca.pem"), client_cert(&certs));
    let reg = Registry::from_str(&single(&server.url(), &with))
        .await
        .unwrap_or_else(|e| panic!("init with a client certificate: {e}\n{}", server.log_tail()));
    exclusion_16_tasks(&reg).await;
    drop(reg);

    let msg = init_fails(&single(&server.url(), &ca(&certs, "ca.pem"))).await;
    println!("without a client certificate: {msg}");
    assert!(msg.contains("backend `main`"), "{msg}");
    assert!(msg.contains(&server.addr()), "{msg}");
    assert!(msg.contains("set `tls_cert` and `tls_key`"), "{msg}");
}

#[tokio::test]
async fn a_client_certificate_rustls_refuses_is_named_as_the_client_certificate() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "server", ClientAuth::Yes, &[]);
    let v1 = format!(
        "{}tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        ca(&certs, "ca.pem"),
        certs.file("client-v1.pem"),
        certs.file("client-v1.key")
    );
    let err = match Registry::from_str(&single(&server.url(), &v1)).await {
        Ok(_) => panic!("init succeeded with an X.509 v1 client certificate"),
        Err(e) => e.to_string(),
    };
    println!("v1 client certificate: {err}");
    assert!(err.contains("backend `main`"), "{err}");
    assert!(err.contains("tls_cert"), "names the field: {err}");
    assert!(err.contains("client-v1.pem"), "names the file: {err}");
    assert!(
        !err.contains("server's certificate"),
        "not the server's certificate: {err}"
    );
}

#[tokio::test]
async fn wrong_ca_fails_init_naming_the_certificate_problem() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "server", ClientAuth::No, &[]);
    let msg = init_fails(&single(&server.url(), &ca(&certs, "other-ca.pem"))).await;
    println!("wrong CA: {msg}");
    assert!(msg.contains("backend `main`"), "{msg}");
    assert!(msg.contains(&server.addr()), "{msg}");
    assert!(msg.contains("UnknownIssuer"), "{msg}");
    assert!(msg.contains("not signed by a CA of `tls_ca`"), "{msg}");
}

#[tokio::test]
async fn platform_roots_do_not_trust_a_private_ca() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "server", ClientAuth::No, &[]);
    let msg = init_fails(&single(&server.url(), "")).await;
    println!("platform roots: {msg}");
    assert!(msg.contains("UnknownIssuer"), "{msg}");
}

#[tokio::test]
async fn expired_certificate_fails_init() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "expired", ClientAuth::No, &[]);
    let msg = init_fails(&single(&server.url(), &ca(&certs, "ca.pem"))).await;
    println!("expired: {msg}");
    assert!(msg.contains("backend `main`"), "{msg}");
    assert!(msg.contains(&server.addr()), "{msg}");
    assert!(msg.contains("certificate expired"), "{msg}");
    assert!(msg.contains("outside its validity period"), "{msg}");
}

#[tokio::test]
async fn wrong_host_name_fails_init() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "wrongname", ClientAuth::No, &[]);
    let msg = init_fails(&single(&server.url(), &ca(&certs, "ca.pem"))).await;
    println!("wrong name: {msg}");
    assert!(msg.contains("backend `main`"), "{msg}");
    assert!(msg.contains(&server.addr()), "{msg}");
    assert!(msg.contains("not valid for name"), "{msg}");
    assert!(msg.contains("does not name the host"), "{msg}");
}

#[tokio::test]
async fn insecure_skip_verify_accepts_any_certificate() {
    let certs = Certs::generate();
    let server = TlsRedis::start(&certs, "wrongname", ClientAuth::No, &[]);
    let reg = Registry::from_str(&single(&server.url(), "tls_insecure_skip_verify = true\n"))
        .await
        .unwrap_or_else(|e| panic!("init with tls_insecure_skip_verify: {e}"));
    try_and_timeout(&reg).await;
}

/// `["rediss://a", "rediss://b"]`
fn toml_list(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_tls_with_client_certificates() {
    let certs = Certs::generate();
    let nodes: Vec<TlsRedis> = (0..3)
        .map(|_| TlsRedis::start(&certs, "server", ClientAuth::Yes, &[]))
        .collect();
    let urls: Vec<String> = nodes.iter().map(TlsRedis::url).collect();
    let config = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"redlock\"\nnodes = {}\nnode_timeout = \"200ms\"\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n{}{}",
        toml_list(&urls),
        ca(&certs, "ca.pem"),
        client_cert(&certs)
    );
    let reg = Registry::from_str(&config)
        .await
        .unwrap_or_else(|e| panic!("redlock over TLS: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    let mut times = hand_off(&reg, 10).await;
    let p50 = percentile(&mut times, 0.5);
    assert!(p50 < Duration::from_millis(100), "wake-up p50 {p50:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls() {
    let certs = Certs::generate();
    let cluster = distlock_tests::tls::TlsCluster::start(&certs);
    let config = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"cluster\"\nnodes = {}\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n{}",
        toml_list(&cluster.urls()),
        ca(&certs, "ca.pem"),
    );
    let reg = Registry::from_str(&config)
        .await
        .unwrap_or_else(|e| panic!("cluster over TLS: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    let mut times = hand_off(&reg, 20).await;
    let p50 = percentile(&mut times, 0.5);
    assert!(p50 < Duration::from_millis(50), "wake-up p50 {p50:?}");
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    readers_overlap(&reg).await;
    fair_in_order(&reg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_over_tls_follows_a_failover() {
    let certs = Certs::generate();
    let group = distlock_tests::tls::TlsSentinel::start(&certs);
    let config = format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [\"{}\"]\nresponse_timeout = \"1s\"\nconnect_timeout = \"1s\"\n{}",
        distlock_tests::tls::TlsSentinel::MASTER_NAME,
        group.sentinel_url(),
        ca(&certs, "ca.pem"),
    );
    let reg = Registry::from_str(&config)
        .await
        .unwrap_or_else(|e| panic!("sentinel over TLS: {e}"));
    exclusion_16_tasks(&reg).await;
    try_and_timeout(&reg).await;
    let mut times = hand_off(&reg, 20).await;
    let p50 = percentile(&mut times, 0.5);
    assert!(p50 < Duration::from_millis(50), "wake-up p50 {p50:?}");
    auto_lease_outlives_watchdog(&reg).await;
    fencing_tokens_grow(&reg).await;
    readers_overlap(&reg).await;

    // Fail over (the replica becomes the master, over TLS): locks go on there.
    let out = distlock_tests::tls::tls_cli(
        &certs,
        group.sentinel_port,
        &[
            "SENTINEL",
            "FAILOVER",
            distlock_tests::tls::TlsSentinel::MASTER_NAME,
        ],
    );
    assert!(out.contains("OK"), "SENTINEL FAILOVER: {out}");
    let replica = group.replica.addr();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reports = reg.probe(None).await.expect("probe");
        if reports
            .iter()
            .any(|r| matches!(r, Ok(r) if r.address == replica))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "distlock did not follow the failover to {replica} within 20 s: {reports:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let guard = reg
        .lock("tls:failover")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("after the failover: {e}"));
    assert!(guard.fencing_token() >= 1);
    guard.release().await.unwrap();
}
