//! A connection the calling task drives itself, for the one-call operations (acquire,
//! release, hand-off, cancel, forced release) of a plain-TCP `single` server, sentinel
//! master or cluster master (`cluster_slots.rs`, by the slot of the call's key).
//!
//! The multiplexed connection ([`redis::aio::ConnectionManager`]) has a driver task on
//! distlock's background runtime: every request wakes that task's thread to write, and
//! its reply wakes the caller's thread again, two thread wake-ups per round trip on top of
//! the server's. A [`Direct`] keeps, per caller runtime (at most [`SLOTS`]), one more TCP
//! connection registered with *that* runtime's reactor; a caller that finds it idle writes
//! its request and reads its reply in its own task, so the only wake-up is the reply's.
//!
//! It is only ever a faster way to send the same command:
//! - a caller that finds it busy (another task's request in flight), not yet connected,
//!   or outside any Tokio runtime uses the multiplexed connection instead, so concurrent
//!   callers still share the multiplexer's batched writes;
//! - a request dropped after it was written whole (the caller's future dropped, the
//!   response timeout) has its reply read and discarded by a drain task on the caller's
//!   runtime, bounded by the response timeout; until every drain has ended, calls on the
//!   multiplexed connection wait ([`Direct::drained`]). The caller handles the unknown
//!   outcome as on the multiplexed connection (the acquire engine's pending release, the
//!   guard's undo), and that release, sent on the other connection, can so never run
//!   before the request it undoes. A request cut while being written never runs (Redis
//!   drops an incomplete command with its connection), and an I/O error or a drain that
//!   times out closes the connection: a reply is never read by the wrong request;
//! - it is connected again in the background, on the caller's runtime, no sooner than a
//!   backoff after a failure (100 ms doubling to 5 s; a clean exchange resets it).
//!
//! TLS, Unix sockets and RESP3 connections get none (`Direct::of` answers `None`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, ProtocolVersion, RedisFuture, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::{Handle, Id};
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

/// Caller runtimes with a connection of their own, at most: the least recently used one
/// gives its place up (a runtime that shut down is never asked for again).
const SLOTS: usize = 4;
/// The first pause before connecting again after a failure; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(100);
/// The longest pause between connection attempts.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The direct connections of one server, one per caller runtime.
pub(crate) struct Direct {
    host: String,
    port: u16,
    /// `AUTH` arguments (user name, password), when the URL has a password.
    auth: Option<(Option<String>, String)>,
    db: i64,
    connect_timeout: Duration,
    response_timeout: Duration,
    slots: Mutex<Vec<Arc<RuntimeConn>>>,
    /// Drains under way (see [`Direct::drained`]), and their ends.
    draining: AtomicUsize,
    drained: Notify,
    /// One-call operations of this server under way, on either connection.
    calls: AtomicUsize,
}

/// A one-call operation under way ([`Direct::call`]); counts until dropped.
pub(crate) struct Call<'a>(&'a AtomicUsize);

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Direct")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// One caller runtime's connection.
struct RuntimeConn {
    runtime: Id,
    /// `None`: not connected (never yet, or closed after an unfinished request).
    conn: Arc<tokio::sync::Mutex<Option<Stream>>>,
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    /// A connection attempt is under way.
    connecting: bool,
    /// Failures since the last clean exchange (the backoff's exponent).
    failures: u32,
    /// No attempt before this.
    not_before: Option<Instant>,
}

impl ConnState {
    fn failed(&mut self) {
        let pause = RETRY_MIN
            .saturating_mul(1 << self.failures.min(16))
            .min(RETRY_MAX);
        self.failures = self.failures.saturating_add(1);
        self.not_before = Some(Instant::now() + pause);
    }
}

/// A connected socket and its read buffer.
struct Stream {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Direct {
    /// The direct connections of the server `info` names, or `None` where they do not
    /// apply (TLS, a Unix socket, RESP3).
    pub(crate) fn of(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Option<Arc<Direct>> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let redis = info.redis_settings();
        if redis.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        Some(Arc::new(Direct {
            host: host.clone(),
            port: *port,
            auth: redis
                .password()
                .map(|p| (redis.username().map(str::to_owned), p.to_owned())),
            db: redis.db(),
            connect_timeout,
            response_timeout,
            slots: Mutex::new(Vec::new()),
            draining: AtomicUsize::new(0),
            drained: Notify::new(),
            calls: AtomicUsize::new(0),
        }))
    }

    /// Count a one-call operation while the returned value lives; `true` when it is the
    /// only one under way. Only such a call takes a direct connection: while calls overlap,
    /// the multiplexed connection sends them in one write and the server reads them in
    /// one, where each direct connection would cost the server a read and a write of its
    /// own (64 tasks: 0.89 and 0.99 of the best peer with every idle direct connection
    /// taken, against 1.2 before).
    pub(crate) fn call(&self) -> (Call<'_>, bool) {
        let before = self.calls.fetch_add(1, Ordering::AcqRel);
        (Call(&self.calls), before == 0)
    }

    /// The calling runtime's connection when it is idle and connected; else `None` (and,
    /// when it is not connected and the backoff allows, a connection is started in the
    /// background). The caller's runtime is the one [`crate::rt::runtime::on_background_runtime`] saw.
    pub(crate) fn lease(self: &Arc<Self>) -> Option<Lease> {
        let handle = crate::rt::runtime::caller()?;
        let slot = self.slot(handle.id())?;
        let guard = slot.conn.clone().try_lock_owned().ok()?;
        if guard.is_some() {
            return Some(Lease {
                guard: Some(guard),
                slot,
                direct: self.clone(),
                handle,
                state: Flight::Idle,
            });
        }
        drop(guard);
        self.connect_later(&slot, &handle);
        None
    }

    /// The slot of `runtime`, made (in the least recently used one's place) when new.
    fn slot(&self, runtime: Id) -> Option<Arc<RuntimeConn>> {
        let mut slots = self.slots.lock().ok()?;
        if let Some(i) = slots.iter().position(|s| s.runtime == runtime) {
            if i != 0 {
                let s = slots.remove(i);
                slots.insert(0, s);
            }
            return slots.first().cloned();
        }
        if slots.len() >= SLOTS {
            slots.pop();
        }
        let slot = Arc::new(RuntimeConn {
            runtime,
            conn: Arc::new(tokio::sync::Mutex::new(None)),
            state: Mutex::new(ConnState::default()),
        });
        slots.insert(0, slot.clone());
        Some(slot)
    }

    /// Start connecting `slot` on `handle`'s runtime, unless an attempt is under way or
    /// the backoff says not yet.
    fn connect_later(self: &Arc<Self>, slot: &Arc<RuntimeConn>, handle: &Handle) {
        {
            let Ok(mut state) = slot.state.lock() else {
                return;
            };
            if state.connecting || state.not_before.is_some_and(|t| Instant::now() < t) {
                return;
            }
            state.connecting = true;
        }
        /// Clears `connecting` however the attempt ends (its runtime shutting down too).
        struct Attempt(Arc<RuntimeConn>);
        impl Drop for Attempt {
            fn drop(&mut self) {
                if let Ok(mut state) = self.0.state.lock() {
                    state.connecting = false;
                }
            }
        }
        let attempt = Attempt(slot.clone());
        let this = self.clone();
        handle.spawn(async move {
            let failed = |why: &dyn std::fmt::Display| {
                tracing::debug!(host = %this.host, port = this.port, error = %why,
                    "distlock: the direct connection could not be made; the multiplexed one serves");
                if let Ok(mut state) = attempt.0.state.lock() {
                    state.failed();
                }
            };
            match tokio::time::timeout(this.connect_timeout, this.open()).await {
                Ok(Ok(stream)) => *attempt.0.conn.lock().await = Some(stream),
                Ok(Err(e)) => failed(&e),
                Err(_) => failed(&"connect timed out"),
            }
        });
    }

    /// Wait until no drain is under way (at most the response timeout): a call on the
    /// multiplexed connection then runs after every request a dropped caller had written
    /// on a direct one. One atomic load when none is.
    pub(crate) async fn drained(&self) {
        if self.draining.load(Ordering::Acquire) == 0 {
            return;
        }
        let _ = tokio::time::timeout(self.response_timeout, async {
            loop {
                let notified = self.drained.notified();
                if self.draining.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }

    /// Connect, `AUTH` and `SELECT` as the URL says.
    async fn open(&self) -> std::io::Result<Stream> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        redis::io::tcp::socket2::SockRef::from(&tcp).set_tcp_keepalive(&super::conn::keepalive())?;
        let mut stream = Stream {
            tcp,
            buf: Vec::with_capacity(256),
        };
        let mut setup = Vec::new();
        if let Some((user, password)) = &self.auth {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = user {
                auth.arg(user);
            }
            auth.arg(password);
            setup.push(auth);
        }
        if self.db != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(self.db);
            setup.push(select);
        }
        for cmd in setup {
            let v = stream.exchange(&cmd.get_packed_command(), 1).await?;
            if let Some(Err(e)) = v.into_iter().next().map(Value::extract_error) {
                return Err(std::io::Error::other(e));
            }
        }
        Ok(stream)
    }
}

impl Stream {
    /// Write `bytes` and read `count` replies.
    async fn exchange(&mut self, bytes: &[u8], count: usize) -> std::io::Result<Vec<Value>> {
        self.tcp.write_all(bytes).await?;
        self.read(count).await
    }

    /// Read `count` replies (what is left of them in the buffer too).
    async fn read(&mut self, count: usize) -> std::io::Result<Vec<Value>> {
        let mut replies = Vec::with_capacity(count);
        let mut start = 0;
        while replies.len() < count {
            if let Parsed::Whole(v, len) = parse(&self.buf[start..]) {
                replies.push(v);
                start += len;
                continue;
            }
            match complete(&self.buf[start..]) {
                Ok(Some(len)) => {
                    let v = redis::parse_redis_value(&self.buf[start..start + len])
                        .map_err(std::io::Error::other)?;
                    replies.push(v);
                    start += len;
                }
                Ok(None) => {
                    if self.tcp.read_buf(&mut self.buf).await? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(what) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("distlock: not a RESP2 reply: {what}"),
                    ))
                }
            }
        }
        if start != self.buf.len() {
            // More than was asked for: the connection is out of step; it is closed.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "distlock: a reply nobody asked for",
            ));
        }
        self.buf.clear();
        Ok(replies)
    }
}

/// The length of the first whole RESP2 value in `buf`, `None` while it is incomplete.
/// What [`parse`] made of the start of a buffer.
#[derive(Debug, PartialEq)]
enum Parsed {
    /// A whole reply, and its length.
    Whole(Value, usize),
    /// Not whole yet, an error reply, or not RESP2 as `parse` reads it: left to
    /// [`complete`] and redis-rs's parser.
    Other,
}

/// The reply at the start of `buf` in one pass, without redis-rs's parser, which sets up
/// a decoder and zeroes its buffer for every reply (a fifth of a sequential lock's client
/// CPU). Only what the lock scripts answer: integers, bulk and simple strings, nil and
/// arrays of those; anything else (an error reply, a reply not yet whole) is
/// [`Parsed::Other`].
fn parse(buf: &[u8]) -> Parsed {
    let Some(&kind) = buf.first() else {
        return Parsed::Other;
    };
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Parsed::Other;
    };
    let line = eol + 2;
    let text = &buf[1..eol];
    let number = || std::str::from_utf8(text).ok()?.parse::<i64>().ok();
    match kind {
        b':' => match number() {
            Some(n) => Parsed::Whole(Value::Int(n), line),
            None => Parsed::Other,
        },
        b'+' if text == b"OK" => Parsed::Whole(Value::Okay, line),
        b'+' => match std::str::from_utf8(text) {
            Ok(t) => Parsed::Whole(Value::SimpleString(t.to_owned()), line),
            Err(_) => Parsed::Other,
        },
        b'$' => match number() {
            Some(-1) => Parsed::Whole(Value::Nil, line),
            Some(n) if n >= 0 => {
                let end = usize::try_from(n).ok().and_then(|n| line.checked_add(n));
                match end.and_then(|end| Some((end, buf.get(end..end.checked_add(2)?)?))) {
                    Some((end, b"\r\n")) => {
                        Parsed::Whole(Value::BulkString(buf[line..end].to_vec()), end + 2)
                    }
                    _ => Parsed::Other,
                }
            }
            _ => Parsed::Other,
        },
        b'*' => match number() {
            Some(-1) => Parsed::Whole(Value::Nil, line),
            Some(n) if n >= 0 => {
                let mut items = Vec::with_capacity(n.min(64) as usize);
                let mut at = line;
                for _ in 0..n {
                    match parse(&buf[at..]) {
                        Parsed::Whole(v, len) => {
                            items.push(v);
                            at += len;
                        }
                        Parsed::Other => return Parsed::Other,
                    }
                }
                Parsed::Whole(Value::Array(items), at)
            }
            _ => Parsed::Other,
        },
        _ => Parsed::Other,
    }
}

fn complete(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = eol + 2;
    let number = || -> Result<i64, &'static str> {
        std::str::from_utf8(&buf[1..eol])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("a length that is not a number")
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(line)),
        b'$' => match number()? {
            n if n < 0 => Ok(Some(line)),
            n => {
                let end = line + usize::try_from(n).map_err(|_| "a length out of range")? + 2;
                Ok((buf.len() >= end).then_some(end))
            }
        },
        b'*' => {
            let n = number()?;
            let mut at = line;
            for _ in 0..n.max(0) {
                match complete(&buf[at..])? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err("an unknown type byte"),
    }
}

/// Where a [`Lease`]'s request is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flight {
    /// Nothing sent, or every reply read.
    Idle,
    /// Being written: cut here, the connection is closed (the command never runs).
    Writing,
    /// Written whole; this many replies not read yet.
    Reading(usize),
}

/// The use of one idle direct connection for one request (or pipeline). Dropped with its
/// request written and its reply not read, it hands the connection to a drain task.
pub(crate) struct Lease {
    guard: Option<OwnedMutexGuard<Option<Stream>>>,
    slot: Arc<RuntimeConn>,
    direct: Arc<Direct>,
    /// The caller's runtime: the socket's, where a drain runs.
    handle: Handle,
    state: Flight,
}

impl Lease {
    async fn exchange(&mut self, bytes: &[u8], count: usize) -> redis::RedisResult<Vec<Value>> {
        let Some(stream) = self.guard.as_mut().and_then(|g| g.as_mut()) else {
            return Err(std::io::Error::from(std::io::ErrorKind::NotConnected).into());
        };
        self.state = Flight::Writing;
        let written = stream.tcp.write_all(bytes).await;
        let result = match written {
            Ok(()) => {
                self.state = Flight::Reading(count);
                stream.read(count).await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(replies) => {
                self.state = Flight::Idle;
                if let Ok(mut state) = self.slot.state.lock() {
                    state.failures = 0;
                }
                Ok(replies)
            }
            Err(e) => {
                // Out of step or gone: closed (the drop below sees nothing to drain).
                self.state = Flight::Idle;
                if let Some(g) = self.guard.as_mut() {
                    **g = None;
                }
                Err(e.into())
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        match self.state {
            Flight::Idle => {}
            Flight::Writing => *guard = None,
            Flight::Reading(count) => {
                // Its reply is read and thrown away before anything else uses the
                // connection, and before the multiplexed one sends anything more.
                self.direct.draining.fetch_add(1, Ordering::AcqRel);
                let direct = self.direct.clone();
                let timeout = self.direct.response_timeout;
                /// Ends the drain however its task ends (its runtime shutting down too).
                struct Drain(Arc<Direct>);
                impl Drop for Drain {
                    fn drop(&mut self) {
                        self.0.draining.fetch_sub(1, Ordering::AcqRel);
                        self.0.drained.notify_waiters();
                    }
                }
                let drain = Drain(direct);
                let slot = self.slot.clone();
                let spawned = self.handle.spawn(async move {
                    let _drain = drain;
                    let read = match guard.as_mut() {
                        Some(stream) => tokio::time::timeout(timeout, stream.read(count)).await,
                        None => return,
                    };
                    if !matches!(read, Ok(Ok(_))) {
                        *guard = None;
                        if let Ok(mut state) = slot.state.lock() {
                            state.failed();
                        }
                    }
                });
                drop(spawned);
                return;
            }
        }
        if guard.is_none() {
            if let Ok(mut state) = self.slot.state.lock() {
                state.failed();
            }
        }
    }
}

impl ConnectionLike for Lease {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut replies = self.exchange(&cmd.get_packed_command(), 1).await?;
            replies
                .pop()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into())
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut replies = self
                .exchange(&pipeline.get_packed_pipeline(), offset + count)
                .await?;
            Ok(replies.split_off(offset))
        })
    }

    fn get_db(&self) -> i64 {
        self.direct.db
    }
}

#[cfg(test)]
mod tests {
    use super::{complete, parse, Parsed};

    #[test]
    fn a_reply_parses_as_redis_rs_parses_it() {
        for reply in [
            &b":12\r\n"[..],
            b":-3\r\n",
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b"$3\r\nabc\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n:1\r\n$4\r\n1234\r\n",
            b"*2\r\n*2\r\n:0\r\n$-1\r\n+OK\r\n",
        ] {
            let ours = parse(reply);
            let theirs = redis::parse_redis_value(reply).unwrap();
            assert_eq!(ours, Parsed::Whole(theirs, reply.len()), "{reply:?}");
        }
        // Not whole yet, or not for this parser: left to `complete` and redis-rs.
        for other in [
            &b""[..],
            b":12",
            b"$3\r\nab",
            b"$3\r\nabcd\r\n",
            b"*2\r\n:1\r\n",
            b"-NOSCRIPT x\r\n",
            b"*1\r\n-ERR x\r\n",
            b"?x\r\n",
            b":x\r\n",
        ] {
            assert_eq!(parse(other), Parsed::Other, "{other:?}");
        }
    }

    #[test]
    fn a_reply_is_complete_only_when_whole() {
        assert_eq!(complete(b""), Ok(None));
        assert_eq!(complete(b":12"), Ok(None));
        assert_eq!(complete(b":12\r\n"), Ok(Some(5)));
        assert_eq!(complete(b"-NOSCRIPT x\r\n"), Ok(Some(13)));
        assert_eq!(complete(b"$3\r\nab"), Ok(None));
        assert_eq!(complete(b"$3\r\nabc\r\n"), Ok(Some(9)));
        assert_eq!(complete(b"$-1\r\n"), Ok(Some(5)));
        assert_eq!(complete(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(complete(b"*2\r\n:1\r\n:2\r\n"), Ok(Some(12)));
        assert_eq!(complete(b"*2\r\n:1\r\n:2\r\n+OK\r\n"), Ok(Some(12)));
        assert_eq!(complete(b"*-1\r\n"), Ok(Some(5)));
        assert!(complete(b"?x\r\n").is_err());
        assert!(complete(b"$x\r\n").is_err());
    }
}
