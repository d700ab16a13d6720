//! Running calls: every script call of every topology goes through here.
//!
//! A server that loaded distlock's function library ([`Functions`]: Redis 7.0 and later,
//! Valkey) runs each call as `FCALL` of the script's function; any other runs it by
//! EVALSHA, and by EVAL where the server's script cache lacks it (`NOSCRIPT`: a restarted
//! server, a promoted replica, `SCRIPT FLUSH`). A function defines its helpers once, when
//! the library is loaded, where a script defines them on every call: a lock and release
//! pair costs the server about half a microsecond less (docs/performance.md).
//!
//! Every fallback is safe: `NOSCRIPT`, "Function not found" and a refused `FCALL` mean
//! the call did not run, so sending it again in another form runs it once.
//!
//! A library that is gone (a restart without data, `FUNCTION FLUSH`, a cluster master
//! that never had it) is loaded again on the connection that found it gone, and the call
//! sent again; a server that refuses the library or `FCALL` (a server before 7.0, an ACL
//! user without `+function|load` or `+fcall`) is sent scripts from then on.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisResult, ServerErrorKind, Value};

use super::script::LIBRARY;
use super::{Call, Script};

/// Whether a server (a cluster's masters) runs the protocol as distlock's function library.
#[derive(Debug, Default)]
pub(crate) struct Functions {
    loaded: AtomicBool,
}

impl Functions {
    fn in_use(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    /// Scripts from now on: the server refused the library or `FCALL`.
    fn give_up(&self, why: &RedisResult<Value>) {
        if self.loaded.swap(false, Ordering::Relaxed) {
            if let Err(e) = why {
                tracing::info!(error = %e,
                    "distlock: the server refused a function call; scripts are sent by EVALSHA from now on");
            }
        }
    }

    /// `FUNCTION LOAD REPLACE` the library on `conn`; `true` when it is loaded (then calls
    /// go by FCALL). `Err` only when the connection failed.
    async fn load<C: ConnectionLike + Send>(&self, conn: &mut C) -> RedisResult<bool> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(&LIBRARY.source);
        let loaded = match cmd.query_async::<Value>(conn).await {
            Ok(_) => true,
            // Refused (a server before 7.0, an ACL user without `+function|load`, a full
            // server): scripts serve.
            Err(e) if is_reply(&e) => {
                tracing::debug!(error = %e, "distlock: FUNCTION LOAD refused; scripts are sent by EVALSHA");
                false
            }
            Err(e) => return Err(e),
        };
        self.loaded.store(loaded, Ordering::Relaxed);
        Ok(loaded)
    }
}

/// An error the server answered (not a failed connection).
fn is_reply(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_))
}

/// Why a call's reply says it did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotRun {
    /// EVALSHA: the script cache lacks it.
    NoScript,
    /// FCALL: the library is not loaded there.
    NoFunction,
    /// FCALL: refused (no right to it, or a server without functions).
    Refused,
}

/// Whether `r`, a reply to a call sent as `form`, says it did not run, and why. The
/// redis client gives "Function not found" and an unknown command no kind of their own,
/// so those two are known by their text, as is a `NOPERM` for `FCALL` itself: one for a
/// key or a command inside is the caller's to see, as `EVALSHA` would have met it too.
fn not_run(r: &RedisResult<Value>, form: Form) -> Option<NotRun> {
    let Err(e) = r else { return None };
    match (form, e.kind()) {
        (Form::Sha, ErrorKind::Server(ServerErrorKind::NoScript)) => Some(NotRun::NoScript),
        (Form::Function, ErrorKind::Server(ServerErrorKind::NoPerm)) => e
            .detail()
            .is_some_and(|d| d.to_ascii_lowercase().contains("'fcall'"))
            .then_some(NotRun::Refused),
        (Form::Function, ErrorKind::Server(ServerErrorKind::ResponseError)) => {
            let detail = e.detail().unwrap_or("").to_ascii_lowercase();
            if detail.starts_with("function not found") {
                Some(NotRun::NoFunction)
            } else if detail.starts_with("unknown command") {
                Some(NotRun::Refused)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// How a call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Function,
    Sha,
    Source,
}

fn command(call: &Call, form: Form) -> Cmd {
    let (verb, script) = match form {
        Form::Function => ("FCALL", call.script.function()),
        Form::Sha => ("EVALSHA", call.script.sha()),
        Form::Source => ("EVAL", call.script.source()),
    };
    // Sized up front: the command's buffer is not grown (and copied) argument by argument.
    let data = verb.len()
        + script.len()
        + 20
        + call.keys.iter().map(String::len).sum::<usize>()
        + call.args.iter().map(Vec::len).sum::<usize>();
    let mut cmd = Cmd::with_capacity(3 + call.keys.len() + call.args.len(), data);
    cmd.arg(verb).arg(script).arg(call.keys.len());
    for k in &call.keys {
        cmd.arg(k);
    }
    for a in &call.args {
        cmd.arg(&a[..]);
    }
    cmd
}

/// What to send after a call sent as `form` did not run for `why`: the function again once
/// the library is loaded again (once: `reloaded`), else the script by SHA, then its
/// source; `None`: nothing more to try.
async fn next_form<C: ConnectionLike + Send>(
    conn: &mut C,
    functions: &Functions,
    form: Form,
    why: NotRun,
    reloaded: &mut bool,
    failed: &RedisResult<Value>,
) -> RedisResult<Option<Form>> {
    Ok(match (form, why) {
        (Form::Function, NotRun::NoFunction) if !*reloaded && functions.load(conn).await? => {
            *reloaded = true;
            Some(Form::Function)
        }
        (Form::Function, _) => {
            functions.give_up(failed);
            Some(Form::Sha)
        }
        (Form::Sha, _) => Some(Form::Source),
        (Form::Source, _) => None,
    })
}

fn first_form(functions: &Functions) -> Form {
    if functions.in_use() {
        Form::Function
    } else {
        Form::Sha
    }
}

/// Run one call.
///
/// # Cancel safety
///
/// Dropped at an await, the call has run once or not at all, as a single command would
/// have (the callers' undo guards cover that), and a `FUNCTION LOAD` cut short has loaded
/// the library or not: a later call that finds it gone loads it.
pub(crate) async fn eval<C: ConnectionLike + Send>(
    conn: &mut C,
    call: &Call,
    functions: &Functions,
) -> RedisResult<Value> {
    let mut form = first_form(functions);
    let mut reloaded = false;
    loop {
        let r = command(call, form).query_async(conn).await;
        let Some(why) = not_run(&r, form) else {
            return r;
        };
        tracing::debug!(script = ?call.script, ?why, "distlock: the call did not run; sending it again");
        match next_form(conn, functions, form, why, &mut reloaded, &r).await? {
            Some(next) => form = next,
            None => return r,
        }
    }
}

/// Send `calls` as `form` in one pipeline, followed by `then` when given.
async fn send<C: ConnectionLike + Send>(
    conn: &mut C,
    calls: &[&Call],
    form: Form,
    then: Option<&Cmd>,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut pipe = Pipeline::new();
    pipe.ignore_errors();
    for call in calls {
        pipe.add_command(command(call, form));
    }
    if let Some(cmd) = then {
        pipe.add_command(cmd.clone());
    }
    pipe.query_async(conn).await
}

/// Run `calls` in one pipeline, followed by `then` when given (its reply last), each with
/// its own outcome. Calls that did not run are sent again in the next form, alone; the
/// others ran once. `Err` only when the connection failed.
///
/// # Cancel safety
///
/// As [`eval`]'s, for each call.
pub(crate) async fn eval_pipelined<C: ConnectionLike + Send>(
    conn: &mut C,
    calls: &[Call],
    then: Option<&Cmd>,
    functions: &Functions,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut form = first_form(functions);
    let mut reloaded = false;
    let all: Vec<&Call> = calls.iter().collect();
    let mut replies = send(conn, &all, form, then).await?;
    loop {
        let missing: Vec<(usize, NotRun)> = (0..calls.len().min(replies.len()))
            .filter_map(|i| not_run(&replies[i], form).map(|why| (i, why)))
            .collect();
        let Some(&(first, why)) = missing
            .iter()
            .find(|(_, why)| *why == NotRun::Refused)
            .or(missing.first())
        else {
            return Ok(replies);
        };
        tracing::debug!(
            calls = missing.len(),
            ?why,
            "distlock: calls did not run; sending them again"
        );
        let next = next_form(conn, functions, form, why, &mut reloaded, &replies[first]).await?;
        let Some(next) = next else {
            return Ok(replies);
        };
        form = next;
        let again: Vec<&Call> = missing.iter().map(|&(i, _)| &calls[i]).collect();
        // `then` (WAIT) counts the writes before it: asked again after the calls that ran now.
        let mut second = send(conn, &again, form, then).await?;
        if then.is_some() {
            if let (Some(last), Some(slot)) = (second.pop(), replies.last_mut()) {
                *slot = last;
            }
        }
        for (&(i, _), r) in missing.iter().zip(second) {
            replies[i] = r;
        }
    }
}

/// Make the server ready: the function library loaded where the server takes it (then
/// calls go by FCALL), else every script loaded into its cache (`SCRIPT LOAD`, so the
/// first calls need no fallback).
pub(crate) async fn load_all<C: ConnectionLike + Send>(
    conn: &mut C,
    functions: &Functions,
) -> RedisResult<()> {
    if functions.load(conn).await? {
        return Ok(());
    }
    for script in Script::ALL {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(script.source());
        cmd.query_async::<Value>(conn).await?;
    }
    Ok(())
}
