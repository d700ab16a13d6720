//! Helpers of the quorum backends' tests (`redlock.rs`, `multi.rs`).
#![allow(dead_code)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use distlock::Registry;
use distlock_tests::{addr_of, resp_command, RedisProcess, RespValue};

/// A `[backends.main]` of `mode` over `urls`, with `watchdog_timeout = "1s"` (the shared
/// scenarios expect it) and short timeouts.
pub use crate::common::backend::quorum_config as config;

/// Connect a registry whose backend `main` is `mode` over `urls`.
pub async fn connect(mode: &str, urls: &[String], node_timeout: &str) -> Registry {
    Registry::from_str(&config(mode, urls, node_timeout))
        .await
        .unwrap_or_else(|e| panic!("connect {mode} over {urls:?}: {e}"))
}

/// The Redis hash of lock `key` (default prefix).
pub fn hash_of(key: &str) -> String {
    format!("lock:{{{key}}}")
}

/// One command on the node of `url`, panicking on a transport error.
pub fn on(url: &str, args: &[&str]) -> RespValue {
    resp_command(&addr_of(url), args).unwrap_or_else(|e| panic!("{args:?} on {url}: {e}"))
}

/// Whether the node of `url` has the hash of lock `key`.
pub fn holds(url: &str, key: &str) -> bool {
    on(url, &["EXISTS", &hash_of(key)]).as_int() == Some(1)
}

/// The fencing counter of lock `key` on the node of `url` (0 when absent).
pub fn fence_on(url: &str, key: &str) -> u64 {
    on(url, &["GET", &format!("{}:fence", hash_of(key))])
        .as_str()
        .map_or(0, |s| s.parse().expect("a counter"))
}

/// Make another owner hold lock `key` on the node of `url` for `ttl_ms`, as the acquire
/// script would.
pub fn hold_as_other(url: &str, key: &str, ttl_ms: u64) {
    let hash = hash_of(key);
    let record = distlock_tests::lock_record("someone-else", 1, &["0000000000000001"], "");
    assert!(on(url, &["SET", &hash, &record, "PX", &ttl_ms.to_string()]).is_ok());
}

/// `n` private servers (killed and removed on drop).
pub fn private_servers(n: usize) -> Vec<RedisProcess> {
    (0..n).map(|_| RedisProcess::start()).collect()
}

pub fn urls_of(servers: &[RedisProcess]) -> Vec<String> {
    servers.iter().map(RedisProcess::url).collect()
}

/// A URL where nothing listens (a port the OS just handed out and took back).
pub fn dead_url() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    format!("redis://127.0.0.1:{port}")
}

/// Acquire-and-release `key`'s siblings until one succeeds (after servers came back),
/// bounded by `within`. Returns how long it took.
pub async fn until_granted(reg: &Registry, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        match reg
            .lock(crate::common::unique("back").as_str())
            .wait(Duration::from_millis(200))
            .acquire()
            .await
        {
            Ok(g) => {
                g.release().await.expect("release");
                return start.elapsed();
            }
            Err(e) => assert!(
                start.elapsed() < within,
                "still not granted {within:?} after the nodes came back: {e}"
            ),
        }
    }
}

/// Stops the servers (SIGSTOP) while it lives; continues them (SIGCONT) when dropped.
pub struct Stopped(Vec<u32>);

impl Stopped {
    pub fn all(servers: &[RedisProcess]) -> Stopped {
        let pids: Vec<u32> = servers
            .iter()
            .map(|s| s.pid().expect("a running server"))
            .collect();
        for &pid in &pids {
            // SAFETY: a plain kill(2) of a child process this test started.
            let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
            assert_eq!(rc, 0, "SIGSTOP {pid}");
        }
        Stopped(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: as above.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        }
    }
}
