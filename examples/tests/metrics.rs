//! The flash-sale server's `/metrics` (Prometheus text): the lock counters move as orders
//! come in. Against the shared single test server (`scripts/test.sh`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn http(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn order(port: u16, user: u32) -> String {
    let body = format!("{{\"user_id\": {user}, \"voucher_id\": 1}}");
    http(
        port,
        &format!(
            "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The value of the acquisitions counter with outcome `acquired` (0 when absent).
fn acquired(port: u16) -> u64 {
    let page = http(
        port,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    page.lines()
        .find(|l| {
            l.starts_with("distlock_acquisitions_total{")
                && l.contains("outcome=\"acquired\"")
                && l.contains("place_order")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn metrics_move_with_orders() {
    let dir = std::env::temp_dir().join(format!("distlock-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("distlock.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nkey_prefix = \"metrics-{}:\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
            std::process::id(),
            distlock_tests::single_url()
        ),
    )
    .unwrap();
    let port = distlock_tests::allocate_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_flash-sale-server"))
        .args(["--port", &port.to_string(), "--stock", "10"])
        .arg("--config")
        .arg(&config)
        .arg("--db")
        .arg(dir.join("shop.db"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start flash-sale-server");
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = acquired(port);
    for user in 1..=3 {
        let reply = order(port, user);
        assert!(reply.starts_with("HTTP/1.1 201"), "{reply}");
    }
    let after = acquired(port);
    assert_eq!(
        after,
        before + 3,
        "the acquisitions counter moved by the three orders"
    );
    let page = http(
        port,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(page.contains("distlock_hold_seconds_count{"), "{page}");
    assert!(page.contains("distlock_wait_seconds_count{"), "{page}");
    assert!(!page.contains("order:"), "no key in any label: {page}");
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
