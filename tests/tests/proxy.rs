//! The fault proxy of the test harness (`distlock_tests::proxy`), against a real
//! redis-server: each fault does what it says on the wire.

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use distlock_tests::proxy::Proxy;
use distlock_tests::{encode_command, read_resp, resp_command, RedisProcess};

fn connect(addr: &str, read_timeout: Duration) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(read_timeout)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Send a command and read its reply on an open connection.
fn call(s: &mut TcpStream, args: &[&str]) -> Result<String, String> {
    s.write_all(&encode_command(args))
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s.try_clone().unwrap());
    read_resp(&mut r).map(|v| format!("{v:?}"))
}

fn is_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

#[test]
fn passes_traffic_through() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let mut s = connect(&proxy.addr(), Duration::from_secs(2));
    for i in 0..100 {
        let v = i.to_string();
        call(&mut s, &["SET", "k", &v]).unwrap();
        assert!(call(&mut s, &["GET", "k"]).unwrap().contains(&v));
    }
    // A big value, in many chunks.
    let big = "x".repeat(1 << 20);
    call(&mut s, &["SET", "big", &big]).unwrap();
    let strlen = call(&mut s, &["STRLEN", "big"]).unwrap();
    assert!(strlen.contains(&(1 << 20).to_string()), "{strlen}");
    assert_eq!(proxy.open_connections(), 1);
}

#[test]
fn latency_each_way() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let mut s = connect(&proxy.addr(), Duration::from_secs(5));
    call(&mut s, &["PING"]).unwrap();
    proxy.set_latency(Duration::from_millis(150));
    let t = Instant::now();
    call(&mut s, &["PING"]).unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(300), "round trip {took:?}");
    assert!(took < Duration::from_secs(3), "round trip {took:?}");
    // Latency, not throughput: 20 pipelined commands take about one round trip.
    let mut batch = Vec::new();
    for _ in 0..20 {
        batch.extend(encode_command(&["PING"]));
    }
    let t = Instant::now();
    s.write_all(&batch).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..20 {
        read_resp(&mut r).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    proxy.clear();
    let t = Instant::now();
    call(&mut s, &["PING"]).unwrap();
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[test]
fn blackhole_accepts_and_never_answers() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let mut before = connect(&proxy.addr(), Duration::from_millis(400));
    call(&mut before, &["PING"]).unwrap();
    proxy.set_blackhole(true);
    // Open connection: the request vanishes; no reply, no close.
    let err = call(&mut before, &["SET", "bh", "1"]).unwrap_err();
    assert!(
        err.contains("timed out")
            || err.contains("WouldBlock")
            || err.contains("Resource temporarily unavailable"),
        "{err}"
    );
    // New connection: accepted, never answered.
    let mut during = connect(&proxy.addr(), Duration::from_millis(400));
    assert!(call(&mut during, &["PING"]).is_err());
    // Nothing reached the server.
    assert!(resp_command(&server.addr(), &["GET", "bh"])
        .unwrap()
        .is_null());
    // Lifted: the connections that lost data are reset; new ones work.
    proxy.set_blackhole(false);
    let mut buf = [0u8; 16];
    before
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    match before.read(&mut buf) {
        Ok(0) => {}
        Err(e) if is_reset(&e) => {}
        other => panic!("expected a reset, got {other:?}"),
    }
    assert!(resp_command(&proxy.addr(), &["PING"]).is_ok());
}

#[test]
fn reset_right_after_the_server_replied() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let mut s = connect(&proxy.addr(), Duration::from_secs(2));
    call(&mut s, &["PING"]).unwrap();
    proxy.reset_after_replies(1);
    let err = call(&mut s, &["INCR", "ran"]).unwrap_err();
    assert!(
        err.contains("reset") || err.contains("closed"),
        "the client must not see the reply: {err}"
    );
    // The command ran on the server.
    assert_eq!(
        resp_command(&server.addr(), &["GET", "ran"])
            .unwrap()
            .as_str(),
        Some("1")
    );
    assert_eq!(proxy.pending_reply_resets(), 0);
    // The next connection is untouched.
    assert!(resp_command(&proxy.addr(), &["PING"]).is_ok());
}

#[test]
fn reset_all_and_refuse() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let mut s = connect(&proxy.addr(), Duration::from_secs(2));
    call(&mut s, &["PING"]).unwrap();
    proxy.reset_all();
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Err(e) if is_reset(&e) => {}
        other => panic!("expected RST, got {other:?}"),
    }
    proxy.set_refuse(true);
    let r = resp_command(&proxy.addr(), &["PING"]);
    assert!(r.is_err(), "{r:?}");
    proxy.set_refuse(false);
    assert!(resp_command(&proxy.addr(), &["PING"]).is_ok());
}

#[test]
fn slow_close() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    proxy.set_slow_close(Duration::from_millis(500));
    let mut s = connect(&proxy.addr(), Duration::from_secs(3));
    // The server closes after QUIT; the client sees the close only 500 ms later.
    let t = Instant::now();
    assert!(call(&mut s, &["QUIT"]).unwrap().contains("OK"));
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(450), "closed after {took:?}");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
}
