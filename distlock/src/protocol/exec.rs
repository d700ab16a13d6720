//! Running calls: EVALSHA, and EVAL for what the server's script cache lacks (`NOSCRIPT`:
//! a restarted server, a promoted replica, `SCRIPT FLUSH`). Every script call of every
//! topology goes through here.
//!
//! The fallback is safe: a `NOSCRIPT` reply means the script did not run, so sending it
//! again with its source runs it once.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisResult, ServerErrorKind, Value};

use super::{Call, Script};

fn is_noscript(r: &RedisResult<Value>) -> bool {
    matches!(r, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript))
}

fn command(call: &Call, by_sha: bool) -> Cmd {
    let (verb, script) = if by_sha {
        ("EVALSHA", call.script.sha())
    } else {
        ("EVAL", call.script.source())
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

/// Run one call.
pub(crate) async fn eval<C: ConnectionLike + Send>(
    conn: &mut C,
    call: &Call,
) -> RedisResult<Value> {
    let r = command(call, true).query_async(conn).await;
    if !is_noscript(&r) {
        return r;
    }
    tracing::debug!(script = ?call.script, "distlock: NOSCRIPT; sending the script's source");
    command(call, false).query_async(conn).await
}

/// Run `calls` in one pipeline, followed by `then` when given (its reply last), each with
/// its own outcome. Calls answered `NOSCRIPT` are sent again with their source, alone; the
/// others ran once. `Err` only when the connection failed.
pub(crate) async fn eval_pipelined<C: ConnectionLike + Send>(
    conn: &mut C,
    calls: &[Call],
    then: Option<&Cmd>,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut pipe = Pipeline::new();
    pipe.ignore_errors();
    for call in calls {
        pipe.add_command(command(call, true));
    }
    if let Some(cmd) = then {
        pipe.add_command(cmd.clone());
    }
    let mut replies: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
    let missing: Vec<usize> = (0..calls.len().min(replies.len()))
        .filter(|&i| is_noscript(&replies[i]))
        .collect();
    if missing.is_empty() {
        return Ok(replies);
    }
    tracing::debug!(
        calls = missing.len(),
        "distlock: NOSCRIPT; sending the scripts' source"
    );
    let mut again = Pipeline::new();
    again.ignore_errors();
    for &i in &missing {
        again.add_command(command(&calls[i], false));
    }
    if let Some(cmd) = then {
        // `then` (WAIT) counts the writes before it: ask again after the scripts that ran now.
        again.add_command(cmd.clone());
    }
    let mut second: Vec<RedisResult<Value>> = again.query_async(conn).await?;
    if then.is_some() {
        if let (Some(last), Some(slot)) = (second.pop(), replies.last_mut()) {
            *slot = last;
        }
    }
    for (i, r) in missing.into_iter().zip(second) {
        replies[i] = r;
    }
    Ok(replies)
}

/// `SCRIPT LOAD` every script (so the first calls need no fallback).
pub(crate) async fn load_all<C: ConnectionLike + Send>(conn: &mut C) -> RedisResult<()> {
    for script in Script::ALL {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(script.source());
        cmd.query_async::<Value>(conn).await?;
    }
    Ok(())
}
