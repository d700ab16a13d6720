//! The errors as a user prints them: `Display`, and `Debug` (what `main` returning
//! `Result<(), Box<dyn Error>>` prints) reads the same. One test per message.
//! Needs the test servers for the Redis ones: `scripts/test.sh`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use distlock::{distributed_lock, InitError, LockError, Registry};

const SITE_LINE: u32 = line!() + 1;
#[distributed_lock(key = "msg:<id>")]
async fn on_the_default_backend(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// Display and Debug print the same text: exactly `expected`.
fn assert_reads(err: &(impl std::fmt::Display + std::fmt::Debug), expected: &str) {
    assert_eq!(err.to_string(), expected);
    assert_eq!(format!("{err:?}"), expected, "Debug reads as Display");
}

#[tokio::test]
async fn a_config_error() {
    let err = Registry::from_str("[backends.main]\nmode = \"single\"\nurl = \"http://h\"\n")
        .await
        .expect_err("http:// is refused");
    assert_reads(
        &err,
        "<string>:3: backends.main.url: unsupported scheme \"http\" in \"http://h\": use redis:// or rediss:// (or valkey:// or valkeys://)",
    );
    assert!(matches!(err, InitError::Config(_)));
}

#[tokio::test]
async fn two_backends_and_no_default() {
    let registry =
        Registry::from_str("[backends.a]\nmode = \"memory\"\n[backends.b]\nmode = \"memory\"\n")
            .await
            .expect("two memory backends");
    let err = registry
        .lock("x")
        .acquire()
        .await
        .expect_err("no default backend");
    assert_reads(
        &err,
        "no default backend: set `defaults.backend` to one of the configured backends (a, b), or name one with `backend = \"...\"`",
    );
    // At init, the site without `backend` says the same, naming the function and line.
    let err = registry
        .check_sites()
        .expect_err("a site needs the default backend");
    assert_reads(
        &err,
        &format!(
            "1 lock site(s) do not match the configuration:\n  messages::on_the_default_backend (tests/tests/messages.rs:{SITE_LINE}): no default backend: set `defaults.backend` to one of the configured backends (a, b), or name one with `backend = \"...\"`"
        ),
    );
    // The function itself, called in that registry's scope.
    let err = registry
        .scope(on_the_default_backend(1))
        .await
        .expect_err("no default backend");
    assert!(matches!(err, LockError::NoDefaultBackend { .. }), "{err}");
}

#[tokio::test]
async fn not_initialized() {
    // This binary never calls init.
    let err = on_the_default_backend(1).await.expect_err("no init");
    assert_reads(
        &err,
        "distlock is not initialized: call distlock::init() (or init_from_path / init_from_str) first",
    );
}

#[tokio::test]
async fn a_key_too_long() {
    let registry = Registry::from_str("[backends.a]\nmode = \"memory\"\n")
        .await
        .expect("memory");
    let err = registry
        .lock("k".repeat(1025))
        .acquire()
        .await
        .expect_err("over 1024 bytes");
    let expected = format!(
        "invalid lock key {:?}: the key is 1025 bytes long; at most 1024 are allowed",
        "k".repeat(1025)
    );
    assert_reads(&err, &expected);
}

#[tokio::test]
async fn nothing_listens() {
    let port = distlock_tests::allocate_port();
    let err = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"redis://127.0.0.1:{port}\"\nconnect_timeout = \"300ms\"\n"
    ))
    .await
    .expect_err("nothing listens there");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "backend `main`: cannot connect to 127.0.0.1:{port}: "
        )),
        "{text}"
    );
    assert_eq!(format!("{err:?}"), text);
}

/// A server on a free port that answers every connection with `answer` (then closes it,
/// when `close`).
fn impostor(answer: &'static [u8], close: bool) -> u16 {
    let port = distlock_tests::allocate_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind a free port");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                if stream.read(&mut buf).unwrap_or(0) > 0 {
                    let _ = stream.write_all(answer);
                }
                if !close {
                    // Keep it open, answering the same to anything more.
                    while stream.read(&mut buf).unwrap_or(0) > 0 {
                        let _ = stream.write_all(answer);
                    }
                }
            });
        }
    });
    port
}

async fn connect_to(port: u16) -> InitError {
    Registry::from_str(&format!(
        "[backends.web]\nmode = \"single\"\nurl = \"redis://127.0.0.1:{port}\"\nconnect_timeout = \"1s\"\nresponse_timeout = \"1s\"\n"
    ))
    .await
    .expect_err("not a Redis server")
}

#[tokio::test]
async fn an_http_server_at_the_url() {
    let port = impostor(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        true,
    );
    let err = connect_to(port).await;
    let text = err.to_string();
    assert!(matches!(err, InitError::NotRedis { .. }), "{text}");
    assert!(
        text.starts_with(&format!(
            "backend `web`: the server at 127.0.0.1:{port} does not speak Redis (its answer is not a Redis reply: "
        )),
        "{text}"
    );
    assert!(text.ends_with("); check the port in the URL"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
    assert_eq!(format!("{err:?}"), text);
}

#[tokio::test]
async fn a_listener_answering_garbage() {
    let port = impostor(b"hello there\n", false);
    let err = connect_to(port).await;
    let text = err.to_string();
    assert!(matches!(err, InitError::NotRedis { .. }), "{text}");
    assert!(text.contains("does not speak Redis"), "{text}");
    assert_eq!(format!("{err:?}"), text);
}
