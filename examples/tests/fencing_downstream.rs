//! `fencing-downstream`: the editor passes the lock's fencing token to the storage service
//! in a header, and storage refuses a stale token with 409. A holder paused past its
//! (fixed) lease writes after a newer holder did: refused. Two real processes, against the
//! shared single test server (`scripts/test.sh`).

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

/// One HTTP/1.1 request (`Connection: close`); the status code and the body.
fn http(port: u16, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
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
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"))
}

fn start(args: &[&str], port: u16) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_fencing-downstream"))
        .args(args)
        .arg("--port")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start fencing-downstream");
    let process = Process(child);
    distlock_tests::wait_until(
        Duration::from_secs(20),
        &format!("fencing-downstream {} on port {port}", args[0]),
        || TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    process
}

#[test]
fn a_stale_token_is_refused_downstream() {
    let prefix = format!("fencing-downstream-{}:", std::process::id());
    let dir = std::env::temp_dir().join(format!("distlock-fencing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("distlock.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nkey_prefix = \"{prefix}\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
            distlock_tests::single_url()
        ),
    )
    .unwrap();
    let storage_port = distlock_tests::allocate_port();
    let editor_port = distlock_tests::allocate_port();
    let _storage = start(&["storage"], storage_port);
    let storage_addr = format!("127.0.0.1:{storage_port}");
    let _editor = start(
        &[
            "editor",
            "--storage",
            &storage_addr,
            "--config",
            config.to_str().unwrap(),
        ],
        editor_port,
    );

    // Storage alone: a write needs a token, and an older one is refused.
    let (status, body) = http(storage_port, "PUT", "/documents/x", "", "v");
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["error"], "missing_token");
    let (status, _) = http(
        storage_port,
        "PUT",
        "/documents/x",
        "Fencing-Token: 7\r\n",
        "a",
    );
    assert_eq!(status, 200);
    let (status, body) = http(
        storage_port,
        "PUT",
        "/documents/x",
        "Fencing-Token: 6\r\n",
        "b",
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["last"], 7);

    // Holder A: a 300 ms lease, then a 1.5 s "pause" before its write.
    let a = std::thread::spawn(move || {
        http(
            editor_port,
            "PUT",
            "/documents/report?lease_ms=300&pause_ms=1500",
            "",
            "from A",
        )
    });
    // Once A holds the lock, B asks for it: it gets it when A's lease has run out, and
    // writes first (A is still paused).
    let lock_key = format!("{prefix}{{document:report}}");
    let single = distlock_tests::addr_of(&distlock_tests::single_url());
    distlock_tests::wait_until(Duration::from_secs(10), "A to hold the lock", || {
        distlock_tests::resp_command(&single, &["EXISTS", &lock_key])
            .is_ok_and(|v| v.as_int() == Some(1))
    });
    let (b_status, b_body) = http(editor_port, "PUT", "/documents/report", "", "from B");
    assert_eq!(b_status, 200, "B: {b_body}");
    let b_token = json(&b_body)["token"].as_u64().expect("B's token");

    // A wakes up believing it holds the lock, and writes with its (older) token: refused.
    let (a_status, a_body) = a.join().unwrap();
    assert_eq!(a_status, 409, "A: {a_body}");
    let a = json(&a_body);
    assert_eq!(a["error"], "stale_token");
    assert_eq!(a["last"].as_u64(), Some(b_token));
    assert!(a["token"].as_u64().unwrap() < b_token, "{a_body}");

    // Storage kept B's write.
    let (status, body) = http(storage_port, "GET", "/documents/report", "", "");
    assert_eq!(status, 200);
    let stored = json(&body);
    assert_eq!(stored["body"], "from B");
    assert_eq!(stored["token"].as_u64(), Some(b_token));
    let _ = std::fs::remove_dir_all(&dir);
}
