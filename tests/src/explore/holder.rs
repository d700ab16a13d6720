//! A holder in a process of its own, for the fault no task of the explorer's process can
//! suffer: a holder paused (`SIGSTOP`, as a GC pause or a stopped VM would) past its
//! lease ([`Fault::HolderPause`](super::model::Fault::HolderPause)). The process is
//! `lock-worker explore-holder` (its protocol is at the head of
//! `tests/src/bin/lock-worker.rs`), built beside the explorer's binary.
//!
//! What it must show when it is resumed:
//! - past its lease, its guard no longer says it holds the lock (`is_held()` is false at
//!   the first instruction after the pause: the lock may be another's by then);
//! - not holding, its `lost()` resolves within [`LOST_BOUND`];
//! - its release fails, if it does, with an error naming the key and the backend.
//!
//! Meanwhile the servers take no fault, so every step of the other owners is judged as
//! usual: the lock is the process's until its lease runs out on the server, then free.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The holder's lease: the auto lease (`watchdog_timeout`, [`super::world::WATCHDOG`]) or
/// a fixed one as long.
pub const LEASE: Duration = Duration::from_secs(1);

/// Resumed without the lock, its `lost()` must resolve within this.
pub const LOST_BOUND: Duration = Duration::from_secs(1);

/// How long the process may take to answer (start-up included).
const ANSWER: Duration = Duration::from_secs(10);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// `lock-worker`, built beside the running binary: the explorer's (`target/debug`) or a
/// test's (`target/debug/deps`).
fn worker() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the running binary's path: {e}"))?;
    let beside = exe.with_file_name("lock-worker");
    let above = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("lock-worker"));
    std::iter::once(beside.clone())
        .chain(above)
        .find(|p| p.exists())
        .ok_or_else(|| {
            format!(
                "{} is not built (cargo build -p distlock-tests --bin lock-worker)",
                beside.display()
            )
        })
}

/// A running `lock-worker explore-holder`.
pub struct Holder {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    config: PathBuf,
    /// What it answered to its try: `HELD <token>`, `BUSY` or `ERR <error>`.
    pub answer: String,
    paused_at: Option<Instant>,
    /// The shortest pause.
    pause: Duration,
}

/// What the holder showed when it was resumed.
#[derive(Debug)]
pub struct Resumed {
    /// How long it was stopped.
    pub paused_for: Duration,
    /// Its `is_held()` at once after the pause.
    pub held: bool,
    /// How long after it was resumed `lost()` resolved (`None`: not within 2 s).
    pub lost_after: Option<Duration>,
    /// `ok`, or its release's error.
    pub released: String,
}

impl Holder {
    /// Start a holder with the registry of `config` trying once to take `key` (the auto
    /// lease, else a fixed one of [`LEASE`]), and read its answer. `flag`: the planted
    /// bug of a holder that answers from a flag, not from its guard (self-test).
    pub async fn start(config: &str, key: &str, auto: bool, flag: bool) -> Result<Holder, String> {
        let bin = worker()?;
        let path = std::env::temp_dir().join(format!(
            "distlock-explore-holder-{}-{}.toml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
        let lease = if auto {
            "auto".to_owned()
        } else {
            LEASE.as_millis().to_string()
        };
        let mut child = Command::new(&bin)
            .arg("explore-holder")
            .arg(&path)
            .arg(key)
            .arg(&lease)
            .args(flag.then_some("trust-a-flag"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the holder process has no pipes".to_owned());
        };
        let mut holder = Holder {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            config: path,
            answer: String::new(),
            paused_at: None,
            pause: Duration::ZERO,
        };
        holder.answer = holder.line("its try").await?;
        Ok(holder)
    }

    /// Its token, when it holds the lock.
    pub fn token(&self) -> Option<u64> {
        self.answer.strip_prefix("HELD ")?.parse().ok()
    }

    /// The process's next line, within [`ANSWER`].
    async fn line(&mut self, what: &str) -> Result<String, String> {
        match tokio::time::timeout(ANSWER, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err(format!("the holder process ended before {what}")),
            Ok(Err(e)) => Err(format!("reading the holder process ({what}): {e}")),
            Err(_) => Err(format!(
                "hang: the holder process did not answer {what} within {ANSWER:?}"
            )),
        }
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on the pid of a child this process started and has not
            // reaped (`kill_on_drop` reaps it when the holder is dropped).
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    /// SIGSTOP it, for at least `pause`.
    pub fn pause(&mut self, pause: Duration) {
        self.signal(libc::SIGSTOP);
        self.paused_at = Some(Instant::now());
        self.pause = pause;
    }

    /// SIGCONT it (once its shortest pause is over), tell it to go on, and read what it
    /// shows; then it exits.
    pub async fn resume(mut self) -> Result<Resumed, String> {
        if let Some(at) = self.paused_at {
            tokio::time::sleep_until((at + self.pause).into()).await;
        }
        let paused_for = self.paused_at.map(|t| t.elapsed()).unwrap_or_default();
        self.signal(libc::SIGCONT);
        self.stdin
            .write_all(b"go\n")
            .await
            .map_err(|e| format!("writing to the holder process: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("writing to the holder process: {e}"))?;
        let resumed = self.line("being resumed").await?;
        let held = match resumed.as_str() {
            "RESUMED true" => true,
            "RESUMED false" => false,
            other => return Err(format!("the holder process answered {other:?} to resuming")),
        };
        let lost = self.line("lost()").await?;
        let lost_after = lost
            .strip_prefix("LOST ")
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis);
        let released = self.line("its release").await?;
        let released = released
            .strip_prefix("RELEASED ")
            .unwrap_or(&released)
            .to_owned();
        let _ = tokio::time::timeout(ANSWER, self.child.wait()).await;
        Ok(Resumed {
            paused_for,
            held,
            lost_after,
            released,
        })
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // The process itself is SIGKILLed (`kill_on_drop`), stopped or not.
        let _ = std::fs::remove_file(&self.config);
    }
}

/// The rules a resumed holder broke, for the lock `key` of backend `main`.
pub fn judge(r: &Resumed, key: &str, token: u64) -> Vec<String> {
    let mut broken = Vec::new();
    let who = format!("the holder process of {key} (token {token})");
    if r.held && r.paused_for > LEASE + Duration::from_millis(100) {
        broken.push(format!(
            "paused holder: {who}, SIGSTOPped {:?} (its lease {LEASE:?}), still said is_held() when resumed: another holder may be inside",
            r.paused_for
        ));
    }
    if !r.held && r.lost_after.is_none_or(|t| t > LOST_BOUND) {
        broken.push(format!(
            "paused holder: {who} resumed not holding, yet lost() resolved {} (bound {LOST_BOUND:?})",
            r.lost_after
                .map_or("not within 2 s".to_owned(), |t| format!("after {t:?}"))
        ));
    }
    if r.released != "ok" && !(r.released.contains(key) && r.released.contains("`main`")) {
        broken.push(format!(
            "error: {who}'s release failed with an error that names no key or backend: {}",
            r.released
        ));
    }
    broken
}
