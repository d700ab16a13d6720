//! `graceful-shutdown`: two replicas against the shared single test server
//! (`scripts/test.sh`); the leader is SIGTERMed, exits 0 after `distlock::shutdown()`, and
//! the other replica leads within moments (not after the 30 s lease); a withdrawal is
//! served under the route's lock `account:{id}`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request (`Connection: close`): the status and the body.
fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.write_all(
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Some((status, body))
}

fn leader_at(port: u16) -> Option<String> {
    let (status, body) = http(port, "GET", "/leader")?;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["leader"].as_str().map(str::to_owned)
}

fn replica(config: &std::path::Path, port: u16, name: &str) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_graceful-shutdown"))
        .args(["--port", &port.to_string(), "--name", name])
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start graceful-shutdown");
    let process = Process(child);
    distlock_tests::wait_until(
        Duration::from_secs(20),
        &format!("graceful-shutdown on port {port}"),
        || TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    process
}

#[test]
fn a_sigtermed_leader_hands_over_at_once_and_exits_cleanly() {
    let prefix = format!("graceful-shutdown-{}:", std::process::id());
    let dir = std::env::temp_dir().join(format!("distlock-graceful-{}", std::process::id()));
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
    let (pa, pb) = (
        distlock_tests::allocate_port(),
        distlock_tests::allocate_port(),
    );
    let a = replica(&config, pa, "replica-a");
    let b = replica(&config, pb, "replica-b");

    // One of them leads.
    let mut leading = None;
    distlock_tests::wait_until(Duration::from_secs(20), "a leader", || {
        leading = leader_at(pa);
        leading.is_some()
    });
    let (mut leader, other, other_port, other_name) = match leading.as_deref() {
        Some("replica-a") => (a, b, pb, "replica-b"),
        Some("replica-b") => (b, a, pa, "replica-a"),
        l => panic!("unexpected leader {l:?}"),
    };

    // A withdrawal runs under the route's lock.
    let (status, body) = http(other_port, "POST", "/accounts/5/withdraw").expect("served");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["token"].as_u64().is_some(), "{body}");

    // SIGTERM the leader: the other replica leads at once.
    let start = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &leader.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let mut now = None;
    distlock_tests::wait_until(Duration::from_secs(20), "the other replica leads", || {
        now = leader_at(other_port);
        now.as_deref() == Some(other_name)
    });
    let took = start.elapsed();
    println!("{other_name} leads {took:?} after the leader's SIGTERM");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let status = leader.0.wait().expect("wait");
    assert!(status.success(), "the leader exited with {status}");
    let out = BufReader::new(leader.0.stdout.take().expect("stdout"));
    assert!(
        out.lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("SHUTDOWN ")),
        "no SHUTDOWN line"
    );
    drop(other);
}
