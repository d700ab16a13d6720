//! The process group of `distlock run`'s command: started in a group of its own, stopped
//! as a whole, and never left running after `run` (whatever ended it).
//!
//! - The command is the leader of a new process group (`setpgid(0, 0)`), so one
//!   `kill(-pgid)` reaches everything it started that stayed in the group.
//! - It gets `PR_SET_PDEATHSIG(SIGKILL)`: it dies with the thread that started it (the
//!   main thread of `run`, which lives as long as `run`). A `run` that died between the
//!   fork and the `prctl` is seen by `getppid()` and the command is not started.
//! - `PR_SET_PDEATHSIG` reaches the command only, not what it started: a guard process
//!   (`distlock __guard`, started before the command) reads a pipe from `run`; when the
//!   pipe closes without `done` (`run` was killed), it SIGKILLs the group.
//! - `run` is a child subreaper, so the group's orphans become its children and it reaps
//!   them: "the group is gone" is then seen at once instead of after `--grace`.

use std::io::{BufRead, Write};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// Make `cmd` start in a process group of its own that dies with this process.
pub(crate) fn own_group_dying_with_us(cmd: &mut tokio::process::Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    cmd.process_group(0);
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid) and builds an io::Error without allocating.
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
            Ok(())
        });
    }
    #[cfg(target_os = "linux")]
    // SAFETY: prctl on this process with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
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

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) of the group the command leads (this process's child, or its
    // leftovers while this process still has not let the group id go).
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// Stop the group `pgid`: `sig` (SIGTERM, or the signal `run` got), then SIGKILL after
/// `grace` if anything of the group is left. `child` is the command when it has not been
/// waited for yet.
pub(crate) async fn stop(
    pgid: libc::pid_t,
    sig: libc::c_int,
    grace: Duration,
    mut child: Option<&mut tokio::process::Child>,
) {
    signal_group(pgid, sig);
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

/// The signals `run` forwards to the group instead of dying of them.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let on = |k: SignalKind| signal(k).map_err(|e| format!("cannot handle signals: {e}"));
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The next of SIGINT, SIGTERM, SIGHUP.
    pub(crate) async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
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

    /// Tell the guard which group to kill if this process dies.
    pub(crate) fn watch(&mut self, pgid: libc::pid_t) {
        self.send(&format!("{pgid}\n"));
    }

    /// The group was stopped: the guard exits without killing anything.
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

/// `distlock __guard`: read a group id, then wait for `done` or the end of stdin; at the
/// end of stdin (`run` died) SIGKILL the group.
pub(crate) fn guard() -> ExitCode {
    // SAFETY: setting signal dispositions to SIG_IGN.
    unsafe {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let pgid: libc::pid_t = match lines.next() {
        Some(Ok(l)) => match l.trim().parse() {
            Ok(p) if p > 1 => p,
            _ => return ExitCode::FAILURE,
        },
        // `run` ended before it started the command (or a read error): nothing to guard.
        _ => return ExitCode::SUCCESS,
    };
    for line in lines {
        match line {
            Ok(l) if l.trim() == "done" => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    signal_group(pgid, libc::SIGKILL);
    ExitCode::SUCCESS
}
