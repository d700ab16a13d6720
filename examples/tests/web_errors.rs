//! What an axum service answers when a lock fails, over HTTP, against real servers: the
//! response body never carries the rendered lock key (it is made from the request, and may
//! carry personal data such as an e-mail address) nor the backend's name or address; the
//! tracing log keeps them. A 409 (the lock is busy: another holder on the shared single test
//! server) and a 503 (the backend refuses connections: a fault proxy in front of it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use distlock::{LockError, Registry};
use distlock_tests::proxy::Proxy;

/// The e-mail address the lock key is made of, and the backends' names: none may appear in
/// a response body.
const EMAIL: &str = "alice.private@example.com";
const BACKEND: &str = "customers-eu";
const QUORUM: &str = "payments-quorum";

async fn order(
    State(registry): State<Arc<Registry>>,
    Path((backend, email)): Path<(String, String)>,
) -> Result<&'static str, LockError> {
    let guard = registry
        .lock(format!("order:{email}"))
        .backend(backend)
        .wait(Duration::from_millis(300))
        .acquire()
        .await?;
    guard.release().await?;
    Ok("ordered")
}

/// `POST path` to the service on `port`: the status line, the headers and the body.
fn post(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[test]
fn lock_error_responses_keep_the_key_and_the_backend_private() {
    let single = distlock_tests::single_url();
    // A backend nobody can reach: the proxy refuses (resets) every connection once init is
    // done.
    let proxy = Proxy::start(&distlock_tests::addr_of(&single));
    let prefix = format!("web-{}:", std::process::id());
    let toml = format!(
        "[defaults]\nbackend = \"{BACKEND}\"\nkey_prefix = \"{prefix}\"\n\
         [backends.{BACKEND}]\nmode = \"single\"\nurl = \"{single}\"\n\
         [backends.{QUORUM}]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"300ms\"\nresponse_timeout = \"300ms\"\n",
        proxy.url()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = Arc::new(rt.block_on(Registry::from_str(&toml)).unwrap());
    let port = distlock_tests::allocate_port();
    let app = axum::Router::new()
        .route("/orders/{backend}/{email}", axum::routing::post(order))
        .with_state(registry.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
        .unwrap();
    rt.spawn(async move { axum::serve(listener, app).await });

    // Free: the order goes through.
    let reply = post(port, &format!("/orders/{BACKEND}/{EMAIL}"));
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");

    // Busy: another holder of the same key → 409.
    let holder = rt
        .block_on(registry.lock(format!("order:{EMAIL}")).acquire())
        .unwrap();
    let reply = post(port, &format!("/orders/{BACKEND}/{EMAIL}"));
    assert!(reply.starts_with("HTTP/1.1 409"), "{reply}");
    let b = body(&reply);
    assert!(b.contains("\"error\":\"lock_timeout\""), "{b}");
    assert!(b.contains("\"retry_after_secs\":"), "{b}");
    for private in [EMAIL, "alice", "order:", BACKEND, prefix.as_str()] {
        assert!(!b.contains(private), "409 body shows {private:?}: {b}");
    }
    rt.block_on(holder.release()).unwrap();

    // The backend refuses connections → 503.
    proxy.set_refuse(true);
    let reply = post(port, &format!("/orders/{QUORUM}/{EMAIL}"));
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    let b = body(&reply);
    assert!(b.contains("\"error\":\"lock_backend_unavailable\""), "{b}");
    for private in [
        EMAIL,
        "alice",
        "order:",
        QUORUM,
        proxy.addr().as_str(),
        &proxy.port().to_string(),
    ] {
        assert!(!b.contains(private), "503 body shows {private:?}: {b}");
    }
}
