//! What the HTTP answers of `distlock::web` and `distlock::tower` say and log, against the
//! shared single test server: a busy semaphore's 409 says its permits are taken, a lock
//! held by `distlock run` says so, an expected 503 (Redis down) is logged at WARN (not
//! ERROR), and a layer keyed by a route parameter takes the attribute's key.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::IntoResponse;
use bytes::Bytes;
use common::unique;
use distlock::tower::LockLayer;
use distlock::Registry;
use distlock_tests::proxy::Proxy;
use distlock_tests::single_url;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{service_fn, ServiceBuilder, ServiceExt};

async fn single() -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .expect("connect the single test server (scripts/test.sh starts it)")
}

async fn body_text<B>(body: B) -> String
where
    B: axum::body::HttpBody,
    B::Error: std::fmt::Debug,
{
    let bytes = body.collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

fn done() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from_static(b"done")))
}

#[tokio::test]
async fn a_busy_semaphores_409_says_its_permits_are_taken() {
    let reg = single().await;
    let key = unique("http-sem");
    let permit = reg
        .semaphore(key.as_str(), 1)
        .acquire(1)
        .await
        .expect("free");
    let busy = reg
        .semaphore(key.as_str(), 1)
        .wait(Duration::ZERO)
        .acquire(1)
        .await
        .expect_err("all permits taken");
    let response = busy.into_response();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body = body_text(response.into_body()).await;
    assert!(
        body.contains("all permits of the semaphore are taken"),
        "{body}"
    );
    assert!(!body.contains("another request"), "{body}");
    assert!(!body.contains(&key), "{body}");
    permit.release().await.expect("released");
}

#[tokio::test]
async fn a_layer_request_on_a_lock_held_by_distlock_run_says_so() {
    let reg = single().await;
    let key = unique("http-run");
    let held = reg
        .lock(key.as_str())
        .site("distlock run")
        .acquire()
        .await
        .expect("free");
    let k = key.clone();
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::new(move |_req: &Request<Full<Bytes>>| Some(k.clone()))
                .wait(Duration::ZERO)
                .registry(reg.clone()),
        )
        .service(service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(done())
        }));
    let busy = svc
        .clone()
        .oneshot(Request::new(Full::new(Bytes::new())))
        .await
        .unwrap();
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    let body = body_text(busy.into_body()).await;
    assert!(body.contains("held by a `distlock run` command"), "{body}");
    assert!(!body.contains(&key), "{body}");
    held.release().await.expect("released");
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn an_expected_503_is_logged_at_warn_not_error() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let proxy = Proxy::start(&distlock_tests::addr_of(&single_url()));
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"300ms\"\nresponse_timeout = \"300ms\"\n",
        proxy.url()
    ))
    .await
    .expect("connect through the proxy");
    let key = unique("http-503");
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::new(move |_req: &Request<Full<Bytes>>| Some(key.clone()))
                .wait(Duration::from_millis(300))
                .registry(reg),
        )
        .service(service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(done())
        }));
    proxy.set_refuse(true);
    proxy.reset_all();
    let down = svc
        .oneshot(Request::new(Full::new(Bytes::new())))
        .await
        .unwrap();
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    proxy.set_refuse(false);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let answered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("lock error answered with 503"))
        .collect();
    assert_eq!(answered.len(), 1, "{log}");
    assert!(answered[0].contains(" WARN "), "{}", answered[0]);
    assert!(!log.lines().any(|l| l.contains(" ERROR ")), "{log}");
}

/// The attribute's lock on the same account: `<prefix>account:<id>`.
#[distlock::distributed_lock(key = "<prefix>account:<id>", wait = "0s")]
async fn debit(prefix: String, id: u64) -> Result<Option<u64>, distlock::LockError> {
    Ok(distlock::fencing_token())
}

async fn withdraw(
    axum::extract::State(prefix): axum::extract::State<String>,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> String {
    let layer = distlock::fencing_token().expect("inside the route's lock");
    // The attribute re-enters the route's lock (the same key): the same token.
    let inner = debit(prefix, id)
        .await
        .expect("re-entered")
        .expect("a token");
    format!("{layer} {inner}")
}

#[tokio::test]
async fn a_route_layer_locks_on_the_key_the_attribute_takes() {
    let reg = single().await;
    let prefix = format!("{}:", unique("http-route"));
    let app = axum::Router::new()
        .route(
            "/accounts/{id}/withdraw",
            axum::routing::post(withdraw).layer(
                LockLayer::route(
                    "/accounts/{id}/withdraw",
                    &format!("{prefix}account:{{id}}"),
                )
                .expect("a valid route")
                .wait(Duration::ZERO),
            ),
        )
        .with_state(prefix.clone());
    let post = |path: &str| {
        Request::post(path)
            .body(axum::body::Body::empty())
            .expect("request")
    };
    let ok = reg
        .scope(app.clone().oneshot(post("/accounts/5/withdraw")))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let body = body_text(ok.into_body()).await;
    let tokens: Vec<&str> = body.split(' ').collect();
    assert_eq!(tokens.len(), 2, "{body}");
    assert_eq!(
        tokens[0], tokens[1],
        "the attribute took another lock: {body}"
    );

    // Held elsewhere in the service under the attribute's key: the route's request is busy.
    let held = reg
        .lock(format!("{prefix}account:5"))
        .acquire()
        .await
        .expect("free");
    let busy = reg
        .scope(app.clone().oneshot(post("/accounts/5/withdraw")))
        .await
        .unwrap();
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    let body = body_text(busy.into_body()).await;
    assert!(
        body.contains("held by another part of the service"),
        "{body}"
    );
    // Another account is another key.
    let other = reg
        .scope(app.oneshot(post("/accounts/6/withdraw")))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    held.release().await.expect("released");
}
