//! The process group of `distlock run`'s command: started in a group of its own, stopped
//! as a whole, and never left running after `run` (whatever ended it).
//!
//! - The command is the leader of a new process group (`setpgid(0, 0)`), so one
//!   `kill(-pgid)` reaches everything it started that stayed in the group.
//! - It gets `PR_SET_PDEATHSIG(SIGKILL)`: it dies with the thread that started it (the
//!   main thread of `run`, which lives as long as `run`). A `run` that died between the
//!   fork and the `prctl` is seen by `getppid()` and the command is not started.
//! - `PR_SET_PDEATHSIG` reaches the command only, not what it started: a guard process
//!   (`distlock __guard`, started before the command) reads a pipe from `run`, on which
//!   the command itself writes its group's id between fork and exec; when the pipe closes
//!   without `done` (`run` was killed), it SIGKILLs the group.
//! - `run` is a child subreaper, so the group's orphans become its children and it reaps
//!   them: "the group is gone" is then seen at once instead of after `--grace`.
//! - Job control: the command is never left running while `run` is stopped (its renewals
//!   stopped with it, so another owner may take the lock). `run` forwards SIGTSTP (Ctrl-Z)
//!   to the group, then stops itself; a SIGSTOP cannot be caught, so the guard process
//!   looks at `run`'s state every [`GUARD_POLL`] and stops the group (SIGSTOP) while `run`
//!   is stopped. When `run` is continued (SIGCONT) it continues the group only if its lease
//!   is still held; else the group gets SIGTERM (then SIGCONT, so that it is delivered) and
//!   `run` exits 74 as for any lost lease.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// Make `cmd` start in a process group of its own that dies with this process, and that
/// the guard `watcher` is told of before the command runs (so that a `run` stopped or
/// killed the moment the command starts still has its group stopped or killed).
pub(crate) fn own_group_dying_with_us(cmd: &mut tokio::process::Command, watcher: &Guard) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let guard_fd = watcher.fd();
    cmd.process_group(0);
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, getpid, write) and builds an io::Error without allocating.
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(target_os = "linux")]
            {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // `run` died before the prctl: nobody would be there to stop the command.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // The group's id (this process's id, as its leader) to the guard, in one write
            // (atomic on a pipe): `run` sends it again after the spawn, too late for a
            // `run` stopped in between.
            if let Some(fd) = guard_fd {
                let mut line = [0u8; 24];
                let n = decimal_line(libc::getpid(), &mut line);
                libc::write(fd, line.as_ptr().cast(), n);
            }
            Ok(())
        });
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl on this process with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// `pid` in decimal with a newline into `buf`, without allocating; returns its length.
fn decimal_line(pid: libc::pid_t, buf: &mut [u8; 24]) -> usize {
    let mut digits = [0u8; 20];
    let mut n = u64::try_from(pid).unwrap_or(0);
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[i] = digits[len - 1 - i];
    }
    buf[len] = b'\n';
    len + 1
}

/// Whether any process of group `pgid` is left, after reaping the group's zombies that
/// are this process's children (the orphans it adopted as subreaper).
fn group_left(pgid: libc::pid_t) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out pointer; only called once the command itself
        // was waited for (or after SIGKILL), so it never steals tokio's child.
        let reaped = unsafe { libc::waitpid(-pgid, &mut status, libc::WNOHANG) };
        if reaped <= 0 {
            break;
        }
    }
    // SAFETY: kill(2) with signal 0 only checks for existence.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

pub(crate) fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) of the group the command leads (this process's child, or its
    // leftovers while this process still has not let the group id go).
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Stop this process (SIGSTOP: it cannot be caught), after SIGTSTP was forwarded to the
/// command's group; it goes on at the next SIGCONT.
pub(crate) fn stop_self() {
    // SAFETY: kill(2) of this process.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGSTOP);
    }
}

/// Stop the group `pgid`: `sig` (SIGTERM, or the signal `run` got), then SIGKILL after
/// `grace` if anything of the group is left. `child` is the command when it has not been
/// waited for yet. A group stopped by job control gets SIGCONT after `sig`, so that `sig`
/// is delivered now rather than at SIGKILL, and the guard is told to let it go on.
pub(crate) async fn stop(
    pgid: libc::pid_t,
    sig: libc::c_int,
    grace: Duration,
    mut child: Option<&mut tokio::process::Child>,
    watcher: &mut Guard,
) {
    signal_group(pgid, sig);
    signal_group(pgid, libc::SIGCONT);
    watcher.cont();
    if let Some(c) = child.as_mut() {
        if tokio::time::timeout(grace, c.wait()).await.is_err() {
            signal_group(pgid, libc::SIGKILL);
            let _ = c.wait().await;
        }
    }
    // The rest of the group: no event tells of the exit of processes that are not our
    // children, so look every 20 ms until the grace is over.
    let deadline = tokio::time::Instant::now() + grace;
    while group_left(pgid) {
        if tokio::time::Instant::now() >= deadline {
            signal_group(pgid, libc::SIGKILL);
            let _ = group_left(pgid);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The signals `run` handles instead of taking their default action.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

/// What a signal to `run` asks for.
pub(crate) enum Signalled {
    /// SIGINT, SIGTERM or SIGHUP: forwarded to the group, which is stopped; `run` ends.
    End(libc::c_int),
    /// SIGTSTP (Ctrl-Z): stop the group, then `run` itself.
    Stop,
    /// SIGCONT: `run` was continued (after a stop, or by a stray SIGCONT).
    Continued,
}

impl Signals {
    pub(crate) fn new() -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let on = |k: SignalKind| signal(k).map_err(|e| format!("cannot handle signals: {e}"));
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
            tstp: on(SignalKind::from_raw(libc::SIGTSTP))?,
            cont: on(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }

    /// The next signal.
    pub(crate) async fn recv(&mut self) -> Signalled {
        tokio::select! {
            _ = self.int.recv() => Signalled::End(libc::SIGINT),
            _ = self.term.recv() => Signalled::End(libc::SIGTERM),
            _ = self.hup.recv() => Signalled::End(libc::SIGHUP),
            _ = self.tstp.recv() => Signalled::Stop,
            _ = self.cont.recv() => Signalled::Continued,
        }
    }
}

/// `run`'s end of the guard process.
pub(crate) struct Guard {
    process: std::process::Child,
    pipe: Option<std::process::ChildStdin>,
}

impl Guard {
    /// Start `distlock __guard` (this same program) in a group of its own, out of reach of
    /// the terminal's signals, with a pipe from this process as its stdin.
    pub(crate) fn start() -> Result<Guard, String> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this program to start its guard: {e}"))?;
        let mut process = std::process::Command::new(exe)
            .arg("__guard")
            .env_remove("DISTLOCK_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start the guard process: {e}"))?;
        let pipe = process.stdin.take();
        Ok(Guard { process, pipe })
    }

    /// The pipe to the guard, for the command to write its group's id before it runs.
    fn fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.pipe.as_ref().map(|p| p.as_raw_fd())
    }

    /// Tell the guard which group to kill if this process dies (the command told it
    /// already; this covers a guard that missed it).
    pub(crate) fn watch(&mut self, pgid: libc::pid_t) {
        self.send(&format!("{pgid}\n"));
    }

    /// `run` was continued: if the guard stopped the group while `run` was stopped, it
    /// continues it (`run` sends its own SIGCONT too; this one undoes a SIGSTOP the guard
    /// may have sent just after it).
    pub(crate) fn cont(&mut self) {
        self.send("cont\n");
    }

    /// The group was stopped (or never started): the guard exits without killing anything.
    pub(crate) fn done(mut self) {
        self.send("done\n");
        self.pipe = None;
        let _ = self.process.wait();
    }

    fn send(&mut self, line: &str) {
        if let Some(p) = self.pipe.as_mut() {
            if let Err(e) = p.write_all(line.as_bytes()).and_then(|()| p.flush()) {
                eprintln!("distlock: the guard process is gone ({e}); the command is still stopped with `run`");
            }
        }
    }
}

/// How often the guard looks whether `run` is stopped.
pub(crate) const GUARD_POLL: Duration = Duration::from_millis(20);

/// `distlock __guard`: read a group id, then wait for `done` or the end of stdin; at the
/// end of stdin (`run` died) SIGKILL the group. Meanwhile, every [`GUARD_POLL`], stop the
/// group (SIGSTOP) while `run` is stopped; `cont` (sent by `run` when continued) continues
/// a group stopped that way.
pub(crate) fn guard() -> ExitCode {
    // SAFETY: setting signal dispositions to SIG_IGN.
    unsafe {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    // SAFETY: getppid has no preconditions.
    let run = unsafe { libc::getppid() };
    let mut input = Input::default();
    let mut pgid: Option<libc::pid_t> = None;
    // Whether the group is stopped by this guard (and not continued since).
    let mut stopped = false;
    loop {
        match input.next(GUARD_POLL) {
            Next::Line(l) => match (l.trim(), pgid) {
                ("done", _) => return ExitCode::SUCCESS,
                ("cont", Some(g)) => {
                    if std::mem::take(&mut stopped) {
                        signal_group(g, libc::SIGCONT);
                    }
                }
                (l, None) => match l.parse() {
                    Ok(p) if p > 1 => pgid = Some(p),
                    _ => return ExitCode::FAILURE,
                },
                (_, Some(_)) => {}
            },
            // `run` died (or a read error): kill what it started, if anything.
            Next::End => break,
            Next::Idle => {}
        }
        if let Some(g) = pgid {
            if !stopped && is_stopped(run) {
                signal_group(g, libc::SIGSTOP);
                stopped = true;
            }
        }
    }
    if let Some(g) = pgid {
        signal_group(g, libc::SIGKILL);
    }
    ExitCode::SUCCESS
}

/// Whether process `pid` is stopped by a signal (`T` in `/proc/PID/stat`).
fn is_stopped(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.trim_start().chars().next()
        })
        == Some('T')
}

/// The guard's stdin, read line by line without blocking longer than asked.
#[derive(Default)]
struct Input {
    buf: Vec<u8>,
    ended: bool,
}

enum Next {
    Line(String),
    /// Nothing came within the time asked.
    Idle,
    /// End of input (or a read error).
    End,
}

impl Input {
    /// The next line, or `Idle` when none came within `wait`.
    fn next(&mut self, wait: Duration) -> Next {
        loop {
            if let Some(at) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=at).collect();
                return Next::Line(String::from_utf8_lossy(&line).into_owned());
            }
            if self.ended {
                return Next::End;
            }
            let mut fds = libc::pollfd {
                fd: libc::STDIN_FILENO,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: poll(2) on one valid pollfd.
            let ready = unsafe { libc::poll(&mut fds, 1, ms) };
            if ready == 0 {
                return Next::Idle;
            }
            if ready < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                self.ended = true;
                continue;
            }
            let mut chunk = [0u8; 256];
            // SAFETY: read(2) into a buffer of the given length.
            let n =
                unsafe { libc::read(libc::STDIN_FILENO, chunk.as_mut_ptr().cast(), chunk.len()) };
            match usize::try_from(n) {
                Ok(0) => self.ended = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => {
                    if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                        self.ended = true;
                    }
                }
            }
        }
    }
}
