//! `tower-layer`: the lock per request of `distlock::tower::LockLayer` in a real process,
//! over HTTP, against the shared single test server (`scripts/test.sh`): two rebuilds of one
//! report at once → the second gets 409 with `Retry-After`; the transfer service (a plain
//! tower service) is served with a fencing token per account, and 409 while its account is
//! held elsewhere; the route-keyed withdrawal locks `account:ID` from the path.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request (`Connection: close`): the status, the head and the body.
fn http(port: u16, method: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {out:?}"));
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (status, head.to_lowercase(), body.to_string())
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"))
}

#[test]
fn a_lock_per_request_through_the_layer() {
    let prefix = format!("tower-layer-{}:", std::process::id());
    let dir = std::env::temp_dir().join(format!("distlock-tower-layer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("distlock.toml");
    let toml = format!(
        "[defaults]\nkey_prefix = \"{prefix}\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        distlock_tests::single_url()
    );
    std::fs::write(&config, &toml).unwrap();
    let port = distlock_tests::allocate_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tower-layer"))
        .arg("--port")
        .arg(port.to_string())
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start tower-layer");
    let _process = Process(child);
    distlock_tests::wait_until(
        Duration::from_secs(20),
        &format!("tower-layer on port {port}"),
        || TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt
        .block_on(distlock::Registry::from_str(&toml))
        .expect("connect the single test server");

    // A long rebuild, and while it holds its lock, a second one of the same report.
    let first =
        std::thread::spawn(move || http(port, "POST", "/reports/weekly/rebuild?work_ms=3000", ""));
    let key = "report:/reports/weekly/rebuild";
    distlock_tests::wait_until(
        Duration::from_secs(20),
        "the first rebuild holds its lock",
        || {
            !rt.block_on(registry.inspect(key, None))
                .expect("inspect")
                .is_empty()
        },
    );
    let (status, head, body) = http(port, "POST", "/reports/weekly/rebuild", "");
    assert_eq!(status, 409, "{head}\n{body}");
    assert!(head.contains("\r\nretry-after: "), "{head}");
    assert_eq!(json(&body)["error"], "lock_timeout", "{body}");
    // Another report is another lock.
    let (status, _, body) = http(port, "POST", "/reports/daily/rebuild", "");
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = first.join().expect("first");
    assert_eq!(status, 200, "{body}");
    let first_token = json(&body)["token"].as_u64().expect("a token");
    // Released with the response: served again, with a newer token.
    let (status, _, body) = http(port, "POST", "/reports/weekly/rebuild", "");
    assert_eq!(status, 200, "{body}");
    assert!(json(&body)["token"].as_u64().expect("a token") > first_token);

    // The plain tower service: a lock per account.
    let (status, _, body) = http(port, "POST", "/accounts/transfer", "x-account: 7\r\n");
    assert_eq!(status, 200, "{body}");
    assert!(json(&body)["token"].as_u64().is_some(), "{body}");
    let held = rt
        .block_on(registry.lock("account:7").acquire())
        .expect("hold account 7");
    let (status, head, body) = http(port, "POST", "/accounts/transfer", "x-account: 7\r\n");
    assert_eq!(status, 409, "{head}\n{body}");
    assert!(head.contains("\r\nretry-after: "), "{head}");
    // The route-keyed withdrawal takes the same lock `account:7`: busy too, and the
    // answer says what holds it (another part of the service), not the key.
    let (status, _, body) = http(port, "POST", "/accounts/7/withdraw", "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("another part of the service"), "{body}");
    assert!(!body.contains("account:7"), "{body}");
    rt.block_on(held.release()).expect("release");
    let (status, _, body) = http(port, "POST", "/accounts/transfer", "x-account: 7\r\n");
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = http(port, "POST", "/accounts/7/withdraw", "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["account"], "7", "{body}");
    // No header: no key, no lock; the service answers its own 400.
    let (status, _, body) = http(port, "POST", "/accounts/transfer", "");
    assert_eq!(status, 400, "{body}");
    assert!(json(&body)["error"].as_str().unwrap().contains("x-account"));
    let _ = std::fs::remove_dir_all(&dir);
}
