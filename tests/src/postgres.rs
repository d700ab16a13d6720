//! Where the private PostgreSQL of the fencing tests is (`scripts/postgres.sh`, started by
//! `scripts/test.sh`).

use std::net::TcpStream;
use std::time::Duration;

const POSTGRES_VAR: &str = "DISTLOCK_TEST_POSTGRES";
const DEFAULT_POSTGRES: &str = "postgres://distlock@127.0.0.1:17388/postgres";

/// URL of the test PostgreSQL, `DISTLOCK_TEST_POSTGRES` (default
/// `postgres://distlock@127.0.0.1:17388/postgres`).
///
/// # Panics
/// If nothing accepts connections at its address within 2 s.
pub fn postgres_url() -> String {
    let url = match std::env::var(POSTGRES_VAR) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => DEFAULT_POSTGRES.to_string(),
    };
    let addr = url
        .rsplit_once('@')
        .map(|(_, rest)| rest)
        .unwrap_or(&url)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let reachable = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    assert!(
        reachable,
        "PostgreSQL is not running at {addr} ({POSTGRES_VAR}={url}): start it with `scripts/postgres.sh start` and `eval \"$(scripts/postgres.sh env)\"`, or run the whole suite with `scripts/test.sh`"
    );
    url
}
