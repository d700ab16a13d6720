//! `distlock::tower::LockLayer` against the shared single test server: through an axum
//! `Router` (two concurrent requests on one key: one 409 with no wait; served one after the
//! other with a wait) and through a plain tower stack (`ServiceBuilder` + `service_fn`):
//! keys from a header, the path or a closure, no key = no lock, 400 for an unusable key,
//! 503 for a backend down, gRPC requests answered with `grpc-status`, the handler inside
//! the lock's context, the lock given back when the request's future is dropped.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use common::unique;
use distlock::tower::LockLayer;
use distlock::{LockError, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::single_url;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::{mpsc, Semaphore};
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

/// A handler that says it is in, then stays until told to go; answers its fencing token.
#[derive(Clone)]
struct Gate {
    entered: mpsc::UnboundedSender<u64>,
    /// A permit per handler allowed to finish.
    go: Arc<Semaphore>,
}

async fn gated(axum::extract::State(gate): axum::extract::State<Gate>) -> String {
    let token = distlock::fencing_token().expect("the handler runs holding the request's lock");
    gate.entered.send(token).expect("the test listens");
    gate.go.acquire().await.expect("open").forget();
    token.to_string()
}

fn post(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).expect("request")
}

#[tokio::test]
async fn axum_two_requests_on_one_key_one_gets_409_with_no_wait() {
    let reg = single().await;
    let base = unique("tower-axum");
    let prefix = base.clone();
    let (entered, mut entered_rx) = mpsc::unbounded_channel();
    let go = Arc::new(Semaphore::new(0));
    let app = axum::Router::new()
        .route("/docs/{id}", axum::routing::post(gated))
        .with_state(Gate {
            entered,
            go: go.clone(),
        })
        .layer(
            LockLayer::new(move |req: &Request<_>| Some(format!("{prefix}{}", req.uri().path())))
                .wait(Duration::ZERO)
                .registry(reg.clone()),
        );

    let first = tokio::spawn(app.clone().oneshot(post("/docs/1")));
    let token = entered_rx.recv().await.expect("the first request is in");

    // The same key, held by the first request: 409 at once, the handler not called.
    let busy = app
        .clone()
        .oneshot(post("/docs/1"))
        .await
        .expect("infallible");
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    let retry_after: u64 = busy.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(busy.headers()["content-type"], "application/json");
    assert!(busy.extensions().get::<LockError>().is_some());
    let body = body_text(busy.into_body()).await;
    assert!(body.contains("\"error\":\"lock_timeout\""), "{body}");
    assert!(!body.contains(&base) && !body.contains("/docs"), "{body}");
    assert!(entered_rx.try_recv().is_err(), "the handler was not called");

    // The first request's lock is the one in Redis under the path's key.
    assert!(reg
        .lock(format!("{base}/docs/1"))
        .try_acquire()
        .await
        .expect("try")
        .is_none());

    go.add_permits(1);
    let first = first.await.expect("task").expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(body_text(first.into_body()).await, token.to_string());

    // Released once the response future completed: the next request is served, with a
    // newer token.
    let next = tokio::spawn(app.clone().oneshot(post("/docs/1")));
    let next_token = entered_rx.recv().await.expect("in");
    assert!(next_token > token, "{token} then {next_token}");
    go.add_permits(1);
    assert_eq!(next.await.unwrap().unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn axum_requests_on_one_key_are_served_one_at_a_time_with_a_wait() {
    let reg = single().await;
    let prefix = unique("tower-serial");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (i, o) = (inside.clone(), overlaps.clone());
    let handler = move || {
        let (inside, overlaps) = (i.clone(), o.clone());
        async move {
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            // Some work across awaits, during which the others must wait.
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            distlock::fencing_token().expect("held").to_string()
        }
    };
    let app = axum::Router::new()
        .route("/jobs/{id}/run", axum::routing::post(handler))
        .layer(
            LockLayer::path(prefix)
                .wait(Duration::from_secs(30))
                .registry(reg.clone()),
        );
    let requests: Vec<_> = (0..6)
        .map(|_| tokio::spawn(app.clone().oneshot(post("/jobs/7/run"))))
        .collect();
    let mut tokens = Vec::new();
    for r in requests {
        let response = r.await.expect("task").expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
        tokens.push(body_text(response.into_body()).await);
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two handlers overlapped"
    );
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 6, "a new token per request: {tokens:?}");
}

/// The plain stack of the tests below: the lock keyed by the `x-account` header, the
/// handler gated as `Gate`, answering its token.
fn account_service(
    reg: &Registry,
    prefix: String,
    wait: Duration,
    gate: Gate,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<distlock::tower::LockBody<Full<Bytes>>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    ServiceBuilder::new()
        .layer(
            LockLayer::header(http::HeaderName::from_static("x-account"), prefix)
                .wait(wait)
                .registry(reg.clone()),
        )
        .service(service_fn(move |_req: Request<Full<Bytes>>| {
            let gate = gate.clone();
            async move {
                let token = distlock::fencing_token();
                if let Some(t) = token {
                    gate.entered.send(t).expect("the test listens");
                    gate.go.acquire().await.expect("open").forget();
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("{token:?}")))))
            }
        }))
}

fn account(id: &str) -> Request<Full<Bytes>> {
    Request::post("/transfer")
        .header("x-account", id)
        .body(Full::new(Bytes::new()))
        .expect("request")
}

#[tokio::test]
async fn plain_tower_service_busy_free_no_key_bad_key_and_grpc() {
    let reg = single().await;
    let prefix = unique("tower-plain");
    let (entered, mut entered_rx) = mpsc::unbounded_channel();
    let go = Arc::new(Semaphore::new(0));
    let gate = Gate {
        entered,
        go: go.clone(),
    };
    let svc = account_service(&reg, format!("{prefix}:"), Duration::ZERO, gate);

    let first = tokio::spawn(svc.clone().oneshot(account("1")));
    let token = entered_rx.recv().await.expect("in");

    let busy = svc.clone().oneshot(account("1")).await.unwrap();
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    assert!(busy.headers().contains_key("retry-after"));
    let body = body_text(busy.into_body()).await;
    assert!(body.starts_with("{\"error\":\"lock_timeout\""), "{body}");

    // gRPC: the same refusal as a gRPC status (ABORTED) in a trailers-only response.
    let mut grpc = account("1");
    grpc.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/grpc+proto"),
    );
    let busy = svc.clone().oneshot(grpc).await.unwrap();
    assert_eq!(busy.status(), StatusCode::OK);
    assert_eq!(busy.headers()["grpc-status"], "10");
    assert_eq!(busy.headers()["content-type"], "application/grpc");
    assert!(busy.headers()["grpc-message"]
        .to_str()
        .unwrap()
        .contains("held by another request"));
    assert!(busy.headers().contains_key("retry-after"));
    assert_eq!(body_text(busy.into_body()).await, "");

    // Another account is another key: served while account 1 is held.
    let other = tokio::spawn(svc.clone().oneshot(account("2")));
    let other_token = entered_rx.recv().await.expect("in");
    go.add_permits(2);
    for (r, t) in [(first, token), (other, other_token)] {
        let r = r.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body_text(r.into_body()).await, format!("Some({t})"));
    }

    // No header: no key, no lock (the handler sees none).
    let free = svc
        .clone()
        .oneshot(Request::new(Full::new(Bytes::new())))
        .await
        .unwrap();
    assert_eq!(free.status(), StatusCode::OK);
    assert_eq!(body_text(free.into_body()).await, "None");

    // A key over 1024 bytes: the client's 400, without the key.
    let long = "x".repeat(2000);
    let bad = svc.clone().oneshot(account(&long)).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body = body_text(bad.into_body()).await;
    assert!(
        body.contains("lock_invalid_key") && !body.contains(&long),
        "{body}"
    );
}

#[tokio::test]
async fn a_dropped_request_gives_its_lock_back() {
    let reg = single().await;
    let prefix = unique("tower-drop");
    let (entered, mut entered_rx) = mpsc::unbounded_channel();
    let gate = Gate {
        entered,
        go: Arc::new(Semaphore::new(0)),
    };
    let svc = account_service(&reg, format!("{prefix}:"), Duration::from_secs(30), gate);
    // In the handler, holding the lock; then the client goes away (the future dropped).
    let first = tokio::spawn(svc.clone().oneshot(account("9")));
    entered_rx.recv().await.expect("in");
    first.abort();
    assert!(first.await.expect_err("aborted").is_cancelled());
    // The lock is given back (in the background): a waiting request gets it.
    let next = tokio::spawn(svc.clone().oneshot(account("9")));
    let token = tokio::time::timeout(Duration::from_secs(10), entered_rx.recv())
        .await
        .expect("the dropped request's lock was released")
        .expect("in");
    assert!(token > 0);
    next.abort();
}

#[tokio::test]
async fn a_backend_down_is_503() {
    let single = single_url();
    let proxy = Proxy::start(&distlock_tests::addr_of(&single));
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"300ms\"\nresponse_timeout = \"300ms\"\n",
        proxy.url()
    ))
    .await
    .expect("connect through the proxy");
    let prefix = unique("tower-503");
    let svc = ServiceBuilder::new()
        .layer(
            LockLayer::new(move |req: &Request<Full<Bytes>>| {
                Some(format!("{prefix}{}", req.uri().path()))
            })
            .wait(Duration::from_millis(500))
            .registry(reg),
        )
        .service(service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }));
    let req = || Request::new(Full::new(Bytes::new()));
    assert_eq!(
        svc.clone().oneshot(req()).await.unwrap().status(),
        StatusCode::OK
    );
    proxy.set_refuse(true);
    proxy.reset_all();
    let down = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(down.headers()["retry-after"], "1");
    let body = body_text(down.into_body()).await;
    assert!(
        body.contains("lock_backend_unavailable") && !body.contains("main"),
        "{body}"
    );
}
