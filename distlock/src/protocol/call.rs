//! One script call (its script, keys and arguments) and what its reply means.

use std::time::Duration;

use redis::Value;

use crate::errors::reply::UnexpectedReply;
use crate::protocol::keys::{LockKeys, Shape};
use crate::protocol::script::{Attempt, HandedOff, Released, Script};

/// What a call's argument can be made of: text or bytes, moved in when owned.
pub(crate) trait IntoArg {
    fn into_arg(self) -> Vec<u8>;
}

impl IntoArg for String {
    fn into_arg(self) -> Vec<u8> {
        self.into_bytes()
    }
}

impl IntoArg for Vec<u8> {
    fn into_arg(self) -> Vec<u8> {
        self
    }
}

impl IntoArg for std::borrow::Cow<'_, str> {
    fn into_arg(self) -> Vec<u8> {
        self.into_owned().into_bytes()
    }
}

impl IntoArg for &String {
    fn into_arg(self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

impl IntoArg for &str {
    fn into_arg(self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

impl<const N: usize> IntoArg for [u8; N] {
    fn into_arg(self) -> Vec<u8> {
        self.to_vec()
    }
}

impl IntoArg for &[u8] {
    fn into_arg(self) -> Vec<u8> {
        self.to_vec()
    }
}

/// One script call: the script, its keys and its arguments.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) script: Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
}

impl Call {
    /// A call of `script` on a lock's main key, with the fair or read-write lock's other
    /// keys after it.
    pub(crate) fn on(script: Script, keys: &LockKeys) -> Call {
        let names = match &keys.shape {
            Shape::Reentrant | Shape::Semaphore(_) => vec![keys.hash.clone()],
            Shape::Fair | Shape::Read | Shape::Write => {
                let [a, b] = keys.extra();
                vec![keys.hash.clone(), a, b]
            }
        };
        Call {
            script,
            keys: names,
            // Room for the longest argument list (rw_acquire's, with holder information),
            // so pushing them does not grow the vector.
            args: Vec::with_capacity(8),
        }
    }

    /// A call of `script` with these keys and arguments (scripts outside the lock
    /// protocol: `crate::ops::fence`).
    pub(crate) fn raw(script: Script, keys: Vec<String>, args: Vec<Vec<u8>>) -> Call {
        Call { script, keys, args }
    }

    /// One more argument (an owned `String` is moved in, not copied).
    pub(crate) fn arg(mut self, a: impl IntoArg) -> Call {
        self.args.push(a.into_arg());
        self
    }

    fn unexpected(&self, v: &Value) -> UnexpectedReply {
        UnexpectedReply {
            script: self.script.name(),
            reply: format!("{v:?}"),
        }
    }

    /// The unlock latch key of a Redisson-format release, which the caller deletes once
    /// answered; `None` for other calls.
    pub(crate) fn redisson_latch(&self) -> Option<&str> {
        let at = match self.script {
            Script::RedissonUnlock | Script::RedissonWriteUnlock => 2,
            Script::RedissonFairUnlock | Script::RedissonReadUnlock => 4,
            Script::Acquire
            | Script::Release
            | Script::Renew
            | Script::ForceRelease
            | Script::RwAcquire
            | Script::RwRelease
            | Script::RwRenew
            | Script::RwCancel
            | Script::FairAcquire
            | Script::FairCancel
            | Script::Fence
            | Script::FenceGet
            | Script::FenceClaim
            | Script::FenceQuorum
            | Script::FenceUndo
            | Script::Inspect
            | Script::RedissonLock
            | Script::RedissonRenew
            | Script::RedissonFairLock
            | Script::RedissonFairCancel
            | Script::RedissonReadLock
            | Script::RedissonReadRenew
            | Script::RedissonWriteLock
            | Script::RedissonFairForceUnlock
            | Script::Announce
            | Script::SemAcquire
            | Script::SemRelease
            | Script::SemRenew
            | Script::SemFairAcquire
            | Script::SemFairCancel
            | Script::Handoff => return None,
        };
        self.keys.get(at).map(String::as_str)
    }

    /// What an acquire call's reply means.
    pub(crate) fn attempt(&self, v: &Value) -> Result<Attempt, UnexpectedReply> {
        match v {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(token)] => Ok(Attempt::Acquired {
                    token: u64::try_from(*token).map_err(|_| self.unexpected(v))?,
                }),
                [Value::Int(2), _] => Ok(Attempt::Reentered),
                [Value::Int(3), _] => Ok(Attempt::OuterLost),
                [Value::Int(0), Value::Int(pttl)] => Ok(Attempt::Held {
                    ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(self.unexpected(v)),
            },
            _ => Err(self.unexpected(v)),
        }
    }

    /// Why the release (cancel, forced release) that `v` answers could not announce itself,
    /// when it could not: it did what it did, but its PUBLISH failed (an ACL user without
    /// the channel right gets NOPERM), so waiters wake at the lease's end instead.
    pub(crate) fn publish_failure(v: &Value) -> Option<String> {
        match v {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(_), Value::BulkString(e)] => {
                    Some(String::from_utf8_lossy(e).into_owned())
                }
                [Value::Int(_), Value::SimpleString(e)] => Some(e.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// What a release call's reply means.
    pub(crate) fn released(&self, v: &Value) -> Result<Released, UnexpectedReply> {
        if self.redisson_latch().is_some() {
            return match v {
                Value::Int(1) => Ok(Released::Freed),
                Value::Int(0) => Ok(Released::StillHeld),
                Value::Int(-1) => Ok(Released::NotHeld),
                other => Err(self.unexpected(other)),
            };
        }
        if Call::publish_failure(v).is_some() {
            return Ok(Released::Freed);
        }
        match v {
            Value::Int(0) => Ok(Released::Freed),
            Value::Int(n) if *n > 0 => Ok(Released::StillHeld),
            Value::Int(_) => Ok(Released::NotHeld),
            other => Err(self.unexpected(other)),
        }
    }

    /// What a hand-off call's reply means: handed to the waiter with a token, or what the
    /// release did instead.
    pub(crate) fn handed_off(&self, v: &Value) -> Result<HandedOff, UnexpectedReply> {
        match v {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(4), Value::Int(token)] => Ok(HandedOff::To {
                    token: u64::try_from(*token).map_err(|_| self.unexpected(v))?,
                }),
                _ => self.released(v).map(HandedOff::Released),
            },
            _ => self.released(v).map(HandedOff::Released),
        }
    }

    /// What a renew (or cancel, or force-release) call's reply means: whether it did it.
    pub(crate) fn done(&self, v: &Value) -> Result<bool, UnexpectedReply> {
        if Call::publish_failure(v).is_some() {
            return Ok(true);
        }
        match v {
            Value::Int(n) => Ok(*n == 1),
            other => Err(self.unexpected(other)),
        }
    }

    /// Keep only the lock's main key (the scripts shared with the reentrant lock).
    pub(crate) fn only_hash(mut self) -> Call {
        self.keys.truncate(1);
        self
    }
}
