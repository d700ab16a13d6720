//! A TCP fault proxy for one Redis node, controlled from tests: added latency, blackhole
//! (connections accepted, nothing answered), connection resets (also right after the server
//! answered, the reply never reaching the client), refused connections and slow closes.
//!
//! The proxy runs on a thread of its own with its own Tokio runtime, so it keeps working
//! while the test's runtime is busy, and it can be driven from sync and async code alike.
//! It listens on 127.0.0.1, on a port of the fault-testing range (17320..17389; the
//! torture run takes 17320..17339, tests 17340..17378), and forwards to `upstream`.
//!
//! ```no_run
//! use distlock_tests::proxy::Proxy;
//! use std::time::Duration;
//! let proxy = Proxy::start("127.0.0.1:17379");
//! let url = proxy.url();                            // give this to the client under test
//! proxy.set_latency(Duration::from_millis(200));    // each way
//! proxy.set_blackhole(true);                        // requests vanish; no reply, no close
//! proxy.set_blackhole(false);                       // connections that lost data are reset
//! proxy.reset_after_replies(1);                     // next reply: swallowed, then RST
//! proxy.reset_all();                                // RST every open connection now
//! proxy.clear();                                    // no faults
//! proxy.silence_flows_that_sent(b"SUBSCRIBE");       // those flows go half-open, for good
//! proxy.set_hold_on_send(Some(b"EVALSHA"));         // such flows' bytes wait here ...
//! proxy.release_held();                             // ... until now, in order
//! ```

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// First port of the proxies tests start.
pub const TEST_PORT_BASE: u16 = 17340;
/// Ports of the proxies tests start: 17340..17378 (17379 is the shared single server,
/// 17388 the test PostgreSQL).
pub const TEST_PORT_COUNT: u16 = 39;
/// First port of the proxies the torture run starts (17320..17339).
pub const TORTURE_PORT_BASE: u16 = 17320;
/// Ports of the torture run's proxies.
pub const TORTURE_PORT_COUNT: u16 = 20;

/// The faults in force, shared with every connection.
#[derive(Default)]
struct Faults {
    latency_us: AtomicU64,
    blackhole: AtomicBool,
    refuse: AtomicBool,
    /// Non-zero: connections from this accepted one on (1-based) are refused.
    refuse_from: AtomicU64,
    reset_replies: AtomicU64,
    slow_close_us: AtomicU64,
    /// Bumped to reset every open connection; a connection that sees it change closes with RST.
    reset_epoch: AtomicU64,
    /// While set: a connection whose client sends these bytes goes silent for good.
    silence_on_send: Mutex<Option<Vec<u8>>>,
    /// While set: a connection whose client sends these bytes holds them, and whatever it
    /// sends after, until [`Proxy::release_held`].
    hold_on_send: Mutex<Option<Vec<u8>>>,
    /// Woken by [`Proxy::release_held`].
    unhold: tokio::sync::Notify,
}

/// How much of what a client sent a connection remembers, for [`Proxy::silence_flows_that_sent`].
const SENT_LOG_LIMIT: usize = 64 * 1024;

/// One proxied connection, as the proxy's controls see it.
#[derive(Default)]
struct Flow {
    /// The first [`SENT_LOG_LIMIT`] bytes the client sent.
    sent: Mutex<Vec<u8>>,
    /// Half-open: every byte either way is dropped, no FIN, no RST.
    silent: AtomicBool,
    /// Held ([`Proxy::set_hold_on_send`]): nothing the client sends goes on, its close
    /// included, until released.
    held: AtomicBool,
}

impl Flow {
    fn has_sent(&self, needle: &[u8]) -> bool {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        !needle.is_empty() && sent.windows(needle.len()).any(|w| w == needle)
    }
}

/// The open connections of a proxy.
type Flows = Arc<Mutex<Vec<Weak<Flow>>>>;

/// One node's fault proxy. Dropping it stops it and closes every connection.
pub struct Proxy {
    port: u16,
    upstream: String,
    faults: Arc<Faults>,
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    flows: Flows,
    kick: watch::Sender<u64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("upstream", &self.upstream)
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish()
    }
}

static NEXT: AtomicU16 = AtomicU16::new(0);
static TAKEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());

fn bind_in(base: u16, count: u16) -> StdListener {
    let offset = (std::process::id() % u32::from(count)) as u16;
    for _ in 0..count {
        let n = offset.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % count;
        let port = base + n;
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) {
            continue;
        }
        if let Ok(l) = StdListener::bind(("127.0.0.1", port)) {
            taken.push(port);
            return l;
        }
    }
    panic!("fault proxy: no free port in {base}..{}", base + count - 1);
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`) on a free port of 17340..17378 (for tests).
    ///
    /// # Panics
    /// If no port of the range is free.
    pub fn start(upstream: &str) -> Proxy {
        Proxy::start_on(bind_in(TEST_PORT_BASE, TEST_PORT_COUNT), upstream)
    }

    /// A proxy to `upstream` on a free port of 17320..17339 (for the torture run).
    pub fn start_torture(upstream: &str) -> Proxy {
        Proxy::start_on(bind_in(TORTURE_PORT_BASE, TORTURE_PORT_COUNT), upstream)
    }

    fn start_on(listener: StdListener, upstream: &str) -> Proxy {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        listener
            .set_nonblocking(true)
            .expect("fault proxy: set_nonblocking");
        let faults = Arc::new(Faults::default());
        let open = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let flows: Flows = Arc::default();
        let (kick, kicked) = watch::channel(0u64);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let upstream_addr: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(upstream)
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("fault proxy: bad upstream address {upstream}"));
        let thread = {
            let (faults, open, accepted) = (faults.clone(), open.clone(), accepted.clone());
            let flows = flows.clone();
            std::thread::Builder::new()
                .name(format!("fault-proxy-{port}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("fault proxy runtime");
                    rt.block_on(async move {
                        let listener =
                            TcpListener::from_std(listener).expect("fault proxy: listener");
                        tokio::select! {
                            _ = stopped => {}
                            _ = accept_loop(listener, upstream_addr, faults, open, accepted, flows, kicked) => {}
                        }
                    });
                    // Dropping the runtime drops every connection task (and its sockets).
                    rt.shutdown_timeout(Duration::from_secs(1));
                })
                .expect("fault proxy thread")
        };
        Proxy {
            port,
            upstream: upstream.to_string(),
            faults,
            open,
            accepted,
            flows,
            kick,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Delay every chunk by `d`, each way (order is kept; throughput is not limited).
    pub fn set_latency(&self, d: Duration) {
        self.faults
            .latency_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Blackhole: connections are accepted (and kept open) but every byte either way is
    /// dropped, so requests get no reply and no error. Turning it off resets every
    /// connection that lost data (its request/reply stream is out of step).
    pub fn set_blackhole(&self, on: bool) {
        let was = self.faults.blackhole.swap(on, Ordering::SeqCst);
        if was && !on {
            self.kick();
        }
    }

    /// Refuse: new connections are reset right after accept (a node that is down), and
    /// every open one is reset now.
    pub fn set_refuse(&self, on: bool) {
        self.faults.refuse.store(on, Ordering::SeqCst);
        if on {
            self.reset_all();
        }
    }

    /// Refuse (reset right after accept) every connection from the `n`-th accepted one on
    /// (counting from the proxy's start, from 1); the open ones go on. `None`: no such
    /// limit. E.g. `Some(2)` lets a client's first connection through and no other.
    pub fn set_refuse_from(&self, n: Option<u64>) {
        self.faults
            .refuse_from
            .store(n.unwrap_or(0), Ordering::SeqCst);
    }

    /// The next `n` replies from the server (chunks read from it) are swallowed and their
    /// connection reset: the command ran on the server, the client never hears of it.
    pub fn reset_after_replies(&self, n: u64) {
        self.faults.reset_replies.store(n, Ordering::SeqCst);
    }

    /// Replies still to be swallowed by [`Proxy::reset_after_replies`].
    pub fn pending_reply_resets(&self) -> u64 {
        self.faults.reset_replies.load(Ordering::SeqCst)
    }

    /// When one side closes, close the other only after `d`.
    pub fn set_slow_close(&self, d: Duration) {
        self.faults
            .slow_close_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Reset (RST) every open connection now.
    pub fn reset_all(&self) {
        self.kick();
    }

    fn kick(&self) {
        let epoch = self.faults.reset_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = self.kick.send(epoch);
    }

    /// Half-open flows, as after a NAT or a load balancer forgot them while idle: every
    /// open connection whose client has sent `needle` (in its first 64 KiB, e.g.
    /// `b"SUBSCRIBE"` for Redis subscribers) goes silent — every byte either way is dropped
    /// from now on, for good, with no FIN and no RST (only [`Proxy::reset_all`] or dropping
    /// the proxy ends it; a close from either side is not passed on, and the flow stays
    /// open, and counted, here). Other connections, and new ones, are untouched. Returns how
    /// many went silent.
    pub fn silence_flows_that_sent(&self, needle: &[u8]) -> usize {
        let mut n = 0;
        for flow in self.live_flows() {
            if flow.has_sent(needle) && !flow.silent.swap(true, Ordering::SeqCst) {
                n += 1;
            }
        }
        n
    }

    /// While `Some(needle)`: every connection, new ones included, goes silent (as
    /// [`Proxy::silence_flows_that_sent`]) as soon as its client has sent `needle`, the
    /// bytes that carried it included. `None` stops that; silenced flows stay silent.
    pub fn set_silence_on_send(&self, needle: Option<&[u8]>) {
        *self
            .faults
            .silence_on_send
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = needle.map(<[u8]>::to_vec);
    }

    /// While `Some(needle)`: every connection, new ones included, whose client sends
    /// `needle` holds what it sent from the bytes that carried it on — requests and the
    /// client's close alike reach the server only when [`Proxy::release_held`] lets them
    /// go, in order, as a server that reads a connection late (paused, or a slow network
    /// path) would see them. Replies and other connections are untouched.
    pub fn set_hold_on_send(&self, needle: Option<&[u8]>) {
        *self
            .faults
            .hold_on_send
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = needle.map(<[u8]>::to_vec);
    }

    /// Stop holding (as `set_hold_on_send(None)`) and let every held connection's bytes go
    /// on to the server, its close after them. Returns how many connections were held.
    pub fn release_held(&self) -> usize {
        self.set_hold_on_send(None);
        let mut n = 0;
        for flow in self.live_flows() {
            if flow.held.swap(false, Ordering::SeqCst) {
                n += 1;
            }
        }
        self.faults.unhold.notify_waiters();
        n
    }

    /// Connections holding what their client sent ([`Proxy::set_hold_on_send`]).
    pub fn held_flows(&self) -> usize {
        self.live_flows()
            .iter()
            .filter(|f| f.held.load(Ordering::SeqCst))
            .count()
    }

    /// Open connections whose client has sent `needle`: how many, and how many of them are
    /// silent.
    pub fn flows_that_sent(&self, needle: &[u8]) -> (usize, usize) {
        let (mut all, mut silent) = (0, 0);
        for flow in self.live_flows() {
            if flow.has_sent(needle) {
                all += 1;
                silent += usize::from(flow.silent.load(Ordering::SeqCst));
            }
        }
        (all, silent)
    }

    fn live_flows(&self) -> Vec<Arc<Flow>> {
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        flows.retain(|f| f.strong_count() > 0);
        flows.iter().filter_map(Weak::upgrade).collect()
    }

    /// No faults (connections that lost data to a blackhole are reset).
    pub fn clear(&self) {
        self.set_latency(Duration::ZERO);
        self.set_slow_close(Duration::ZERO);
        self.reset_after_replies(0);
        self.faults.refuse.store(false, Ordering::SeqCst);
        self.set_refuse_from(None);
        self.set_blackhole(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        TAKEN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != self.port);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: Arc<Faults>,
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    flows: Flows,
    kicked: watch::Receiver<u64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let number = accepted.fetch_add(1, Ordering::Relaxed) + 1;
        let from = faults.refuse_from.load(Ordering::SeqCst);
        if faults.refuse.load(Ordering::SeqCst) || (from != 0 && number >= from) {
            rst(client);
            continue;
        }
        let (faults, open, kicked) = (faults.clone(), open.clone(), kicked.clone());
        let flow = Arc::new(Flow::default());
        {
            let mut flows = flows.lock().unwrap_or_else(|e| e.into_inner());
            flows.retain(|f| f.strong_count() > 0);
            flows.push(Arc::downgrade(&flow));
        }
        tokio::spawn(async move {
            open.fetch_add(1, Ordering::Relaxed);
            connection(client, upstream, faults, flow, kicked).await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Close with RST (SO_LINGER 0).
fn rst(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

/// How one connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// A side closed (EOF or error): close the other, maybe slowly.
    Closed,
    /// Reset both sides now.
    Reset,
}

/// A read half that closes its socket with RST (SO_LINGER 0) when dropped after `reset`
/// was set. (The socket closes when both halves are gone; the option set on one half is
/// the socket's.)
struct ResetOnDrop {
    half: tokio::net::tcp::OwnedReadHalf,
    reset: Arc<AtomicBool>,
}

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            let _ = self.half.as_ref().set_zero_linger();
        }
    }
}

/// A write half that does not send FIN when dropped (tokio's does): the socket closes
/// when its read half goes, with RST when that one says so.
struct NoFin(Option<tokio::net::tcp::OwnedWriteHalf>);

impl Drop for NoFin {
    fn drop(&mut self) {
        if let Some(w) = self.0.take() {
            w.forget();
        }
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    faults: Arc<Faults>,
    flow: Arc<Flow>,
    mut kicked: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    kicked.mark_unchanged();
    // A connection made during a blackhole never reaches the server.
    if faults.blackhole.load(Ordering::SeqCst) {
        let mut client = client;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                r = client.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                _ = kicked.changed() => { rst(client); return }
            }
        }
    }
    let server =
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(upstream)).await {
            Ok(Ok(s)) => s,
            _ => {
                rst(client);
                return;
            }
        };
    let _ = server.set_nodelay(true);
    let reset = Arc::new(AtomicBool::new(false));
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let (end_tx, mut end_rx) = mpsc::unbounded_channel::<End>();
    let cr = ResetOnDrop {
        half: cr,
        reset: reset.clone(),
    };
    let sr = ResetOnDrop {
        half: sr,
        reset: reset.clone(),
    };
    let up = AbortOnDrop(tokio::spawn(pump(
        cr,
        sw,
        faults.clone(),
        flow.clone(),
        false,
        end_tx.clone(),
    )));
    let down = AbortOnDrop(tokio::spawn(pump(
        sr,
        cw,
        faults.clone(),
        flow,
        true,
        end_tx,
    )));
    let end = tokio::select! {
        e = end_rx.recv() => e.unwrap_or(End::Closed),
        // reset_all, refuse, or the blackhole lifted (its connections lost data).
        _ = kicked.changed() => End::Reset,
    };
    match end {
        End::Closed => {
            let slow = faults.slow_close_us.load(Ordering::SeqCst);
            if slow > 0 {
                tokio::time::sleep(Duration::from_micros(slow)).await;
            }
        }
        End::Reset => reset.store(true, Ordering::SeqCst),
    }
    drop((up, down));
}

/// Copy `from` to `to` with the faults applied. `reply`: this direction carries the
/// server's replies. Holds its halves until aborted, so the connection closes as the
/// connection task decides (FIN, slowly, or RST).
async fn pump(
    mut from: ResetOnDrop,
    to: tokio::net::tcp::OwnedWriteHalf,
    faults: Arc<Faults>,
    flow: Arc<Flow>,
    reply: bool,
    end: mpsc::UnboundedSender<End>,
) {
    // Chunks go through a queue to a writer that sends each at its due time, so latency
    // delays without limiting throughput.
    let (q_tx, mut q_rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let queued = Arc::new(AtomicUsize::new(0));
    let writer_end = end.clone();
    let writer_queued = queued.clone();
    let mut writer = AbortOnDrop(tokio::spawn(async move {
        let mut to = NoFin(Some(to));
        let Some(w) = to.0.as_mut() else { return };
        while let Some((due, chunk)) = q_rx.recv().await {
            precise::sleep_until(due).await;
            if w.write_all(&chunk).await.is_err() {
                let _ = writer_end.send(End::Closed);
                break;
            }
            writer_queued.fetch_sub(1, Ordering::SeqCst);
        }
        // Keep the write half (no FIN) until the connection task ends this one.
        std::future::pending::<()>().await;
        drop(to);
    }));
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.half.read(&mut buf) => match r {
                // A silent flow's close never reaches the other side either: it stays open
                // there (the proxy holds it) until the proxy is dropped or reset.
                Ok(0) | Err(_) if flow.silent.load(Ordering::SeqCst) => {
                    std::future::pending::<()>().await;
                    break;
                }
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = &mut writer.0 => break,
        };
        if !reply {
            {
                let mut sent = flow.sent.lock().unwrap_or_else(|e| e.into_inner());
                let room = SENT_LOG_LIMIT.saturating_sub(sent.len());
                sent.extend_from_slice(&buf[..n.min(room)]);
            }
            let needle = faults
                .silence_on_send
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if needle.is_some_and(|needle| flow.has_sent(&needle)) {
                flow.silent.store(true, Ordering::SeqCst);
            }
            let hold = faults
                .hold_on_send
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            // The chunk itself too: the log keeps only a connection's first bytes.
            let in_chunk = |needle: &[u8]| buf[..n].windows(needle.len()).any(|w| w == needle);
            if hold.is_some_and(|needle| flow.has_sent(&needle) || in_chunk(&needle)) {
                flow.held.store(true, Ordering::SeqCst);
            }
            // Held: this chunk, and every read after it (the client's close too), waits.
            while flow.held.load(Ordering::SeqCst) {
                let released = faults.unhold.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                if !flow.held.load(Ordering::SeqCst) {
                    break;
                }
                released.await;
            }
        }
        if flow.silent.load(Ordering::SeqCst) {
            // Half-open for good: dropped, no FIN, no RST.
            continue;
        }
        if faults.blackhole.load(Ordering::SeqCst) {
            // Dropped; lifting the blackhole resets the connection.
            continue;
        }
        if reply
            && faults
                .reset_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            // The server answered; the client never sees it.
            let _ = end.send(End::Reset);
            std::future::pending::<()>().await;
        }
        let latency = Duration::from_micros(faults.latency_us.load(Ordering::SeqCst));
        queued.fetch_add(1, Ordering::SeqCst);
        if q_tx
            .send((Instant::now() + latency, buf[..n].to_vec()))
            .is_err()
        {
            break;
        }
    }
    // EOF: let queued chunks go out (bounded by the latency), then report the close.
    drop(q_tx);
    let flush = Duration::from_micros(faults.latency_us.load(Ordering::SeqCst))
        + Duration::from_millis(100);
    let _ = tokio::time::timeout(flush, async {
        while queued.load(Ordering::SeqCst) > 0 && !writer.0.is_finished() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let _ = end.send(End::Closed);
    std::future::pending::<()>().await;
}

/// Sleeps that end within about a tenth of a millisecond of their due time, for added
/// latency. Tokio's timers end on the first millisecond tick after it (up to 1 ms late,
/// 0.5 ms on average), which made `set_latency(1 ms)` add 1 to 2 ms each way, varying from
/// chunk to chunk: a quorum of 5 nodes, waiting for the slowest of several, paid for that
/// spread more than one node did. One thread of the process keeps the due times and wakes
/// each sleeper when its time comes (a condition-variable wait with a timeout: the
/// kernel's high-resolution timers).
mod precise {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::sync::{Mutex, OnceLock};

    use tokio::sync::oneshot;
    use tokio::time::Instant;

    type Request = (std::time::Instant, oneshot::Sender<()>);

    fn timer() -> &'static Mutex<mpsc::Sender<Request>> {
        static TIMER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
        TIMER.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("proxy-timer".into())
                .spawn(move || run(rx))
                .expect("spawn the proxy timer thread");
            Mutex::new(tx)
        })
    }

    fn run(rx: mpsc::Receiver<Request>) {
        let mut due: BinaryHeap<Reverse<(std::time::Instant, u64)>> = BinaryHeap::new();
        let mut waiting: HashMap<u64, oneshot::Sender<()>> = HashMap::new();
        let mut next_id = 0u64;
        loop {
            let now = std::time::Instant::now();
            while let Some(Reverse((at, id))) = due.peek().copied() {
                if at > now {
                    break;
                }
                due.pop();
                if let Some(tx) = waiting.remove(&id) {
                    let _ = tx.send(());
                }
            }
            let request = match due.peek() {
                Some(Reverse((at, _))) => rx.recv_timeout(at.saturating_duration_since(now)),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match request {
                Ok((at, tx)) => {
                    due.push(Reverse((at, next_id)));
                    waiting.insert(next_id, tx);
                    next_id += 1;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Sleep until `at`, within about 0.1 ms.
    pub(super) async fn sleep_until(at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (tx, rx) = oneshot::channel();
        let sent = timer()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((at.into_std(), tx));
        match sent {
            Ok(()) => {
                let _ = rx.await;
            }
            Err(_) => tokio::time::sleep_until(at).await,
        }
    }
}

/// Many proxies by name, for a topology (`upstream address -> proxy`).
#[derive(Debug, Default)]
pub struct Proxies {
    by_upstream: HashMap<String, Proxy>,
}

impl Proxies {
    /// One proxy per upstream address (test port range).
    pub fn start(upstreams: &[String]) -> Proxies {
        Proxies {
            by_upstream: upstreams
                .iter()
                .map(|u| (u.clone(), Proxy::start(u)))
                .collect(),
        }
    }

    /// The proxy in front of `upstream`.
    pub fn of(&self, upstream: &str) -> &Proxy {
        self.by_upstream
            .get(upstream)
            .unwrap_or_else(|| panic!("no proxy for {upstream}"))
    }

    /// Every proxy.
    pub fn all(&self) -> impl Iterator<Item = &Proxy> {
        self.by_upstream.values()
    }
}
