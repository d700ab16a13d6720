//! One Redis server (`mode = "single"`): one auto-reconnecting multiplexed connection shared
//! by every task, every command bounded by the response timeout, scripts by EVALSHA.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::{Attempt, Released};
use crate::keys::LockKeys;
use crate::owner::OwnerId;
use crate::scripts::{LuaScript, Scripts};

/// A connection to one Redis server.
#[derive(Clone)]
pub(crate) struct RedisDriver {
    conn: ConnectionManager,
    response_timeout: Duration,
}

impl std::fmt::Debug for RedisDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDriver").finish_non_exhaustive()
    }
}

fn timed_out(what: &'static str, after: Duration) -> RedisError {
    RedisError::from((ErrorKind::Io, what, format!("no reply within {after:?}")))
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn unexpected(what: &'static str, v: &Value) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, what, format!("{v:?}")))
}

impl RedisDriver {
    /// Connect to `client`'s server, bounded by `connect_timeout`.
    pub async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<RedisDriver> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let conn = tokio::time::timeout(
            connect_timeout * 2,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| timed_out("connect timed out", connect_timeout * 2))??;
        let driver = RedisDriver {
            conn,
            response_timeout,
        };
        driver.load_scripts().await?;
        Ok(driver)
    }

    /// SCRIPT LOAD every script, so EVALSHA finds them.
    async fn load_scripts(&self) -> RedisResult<()> {
        let s = Scripts::get();
        for script in [&s.acquire, &s.release, &s.renew, &s.force_release] {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("LOAD").arg(script.source);
            self.query::<String>(&cmd, "SCRIPT LOAD timed out").await?;
        }
        Ok(())
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &Cmd,
        what: &'static str,
    ) -> RedisResult<T> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.response_timeout, cmd.query_async(&mut conn)).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(what, self.response_timeout)),
        }
    }

    /// EVALSHA, falling back to EVAL (which caches the script again) after NOSCRIPT.
    async fn eval(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> RedisResult<Value> {
        let build = |verb: &str, body: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(body).arg(keys.len());
            for k in keys {
                cmd.arg(*k);
            }
            for a in args {
                cmd.arg(*a);
            }
            cmd
        };
        match self
            .query(&build("EVALSHA", &script.sha), "EVALSHA timed out")
            .await
        {
            Err(e) if is_noscript(&e) => {
                tracing::debug!("distlock: NOSCRIPT; sending the script again");
                self.query(&build("EVAL", script.source), "EVAL timed out")
                    .await
            }
            r => r,
        }
    }

    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
    ) -> RedisResult<Attempt> {
        let lease_ms = lease_ms(lease);
        let v = self
            .eval(
                &Scripts::get().acquire,
                &[&keys.hash, &keys.fence],
                &[&owner.hex(), lease_ms.as_bytes()],
            )
            .await?;
        let pair = match &v {
            Value::Array(items) if items.len() == 2 => (&items[0], &items[1]),
            other => return Err(unexpected("unexpected reply to the acquire script", other)),
        };
        match pair {
            (Value::Int(1), Value::Int(token)) => Ok(Attempt::Acquired {
                token: u64::try_from(*token).unwrap_or(0),
            }),
            (Value::Int(2), _) => Ok(Attempt::Reentered),
            (Value::Int(0), Value::Int(pttl)) => Ok(Attempt::Held {
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            }),
            _ => Err(unexpected("unexpected reply to the acquire script", &v)),
        }
    }

    pub async fn release(&self, keys: &LockKeys, owner: OwnerId) -> RedisResult<Released> {
        let v = self
            .eval(
                &Scripts::get().release,
                &[&keys.hash],
                &[&owner.hex(), keys.channel.as_bytes()],
            )
            .await?;
        match v {
            Value::Int(0) => Ok(Released::Freed),
            Value::Int(n) if n > 0 => Ok(Released::StillHeld),
            Value::Int(_) => Ok(Released::NotHeld),
            other => Err(unexpected("unexpected reply to the release script", &other)),
        }
    }

    /// Renew many leases in one pipeline. `Ok(v)`: `v[i]` tells whether `items[i]` was renewed.
    pub async fn renew(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> RedisResult<Vec<bool>> {
        let script = &Scripts::get().renew;
        let lease_ms = lease_ms(lease);
        let build = |by_sha: bool| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (keys, owner) in items {
                if by_sha {
                    pipe.cmd("EVALSHA").arg(&script.sha);
                } else {
                    pipe.cmd("EVAL").arg(script.source);
                }
                pipe.arg(1)
                    .arg(&keys.hash)
                    .arg(&owner.hex()[..])
                    .arg(&lease_ms);
            }
            pipe
        };
        let mut conn = self.conn.clone();
        let mut by_sha = true;
        loop {
            let pipe = build(by_sha);
            let replies: Vec<RedisResult<i64>> = match tokio::time::timeout(
                self.response_timeout,
                pipe.query_async(&mut conn),
            )
            .await
            {
                Ok(r) => r?,
                Err(_) => return Err(timed_out("renewal timed out", self.response_timeout)),
            };
            if by_sha
                && replies
                    .iter()
                    .any(|r| matches!(r, Err(e) if is_noscript(e)))
            {
                by_sha = false;
                continue;
            }
            return replies
                .into_iter()
                .map(|r| r.map(|n| n == 1))
                .collect::<RedisResult<Vec<bool>>>();
        }
    }

    pub async fn force_release(&self, keys: &LockKeys) -> RedisResult<bool> {
        let v = self
            .eval(
                &Scripts::get().force_release,
                &[&keys.hash],
                &[keys.channel.as_bytes()],
            )
            .await?;
        Ok(matches!(v, Value::Int(1)))
    }
}

impl RedisDriver {
    pub async fn next_sequence(&self, key: &str, ttl: Duration) -> RedisResult<u64> {
        let mut pipe = redis::pipe();
        pipe.cmd("INCR")
            .arg(key)
            .cmd("EXPIRE")
            .arg(key)
            .arg(ttl.as_secs().max(1))
            .arg("NX")
            .ignore();
        let mut conn = self.conn.clone();
        let (n,): (u64,) =
            match tokio::time::timeout(self.response_timeout, pipe.query_async(&mut conn)).await {
                Ok(r) => r?,
                Err(_) => return Err(timed_out("INCR timed out", self.response_timeout)),
            };
        Ok(n)
    }
}

fn lease_ms(lease: Duration) -> String {
    // At least 1 ms: PEXPIRE 0 would delete the lock at once.
    lease.as_millis().clamp(1, i64::MAX as u128).to_string()
}
