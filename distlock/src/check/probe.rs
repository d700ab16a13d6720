//! The `init` self-check of one server, as far as the protocol goes: which commands (with
//! which keys and channels) distlock sends for a lock under a backend's `key_prefix`, the
//! script that asks the server whether the connection's ACL user may run each of them
//! (`probe.lua`, Redis 7's `redis.acl_check_cmd`) and what its reply means (the version
//! it reports is judged by `version.rs`).
//!
//! One round trip per server: the probe script (EVAL, numkeys 0) pipelined with `INFO
//! server` and `INFO memory` (version and `maxmemory_policy`; either may be refused to a
//! least-privilege user: the script's `redis.REDIS_VERSION` then gives the version, and the
//! eviction policy stays unknown).

use redis::{RedisResult, Value};

use crate::check::report::ServerReport;
use crate::protocol::keys::{FenceScope, LockKeys};
use crate::LockKind;

use super::version::{flavour_of, info_field, version_problem, MIN_VERSION};
use crate::protocol::{Publish, Script};

/// The probe script.
pub(crate) const SOURCE: &str = include_str!("probe.lua");

/// What a backend's locks use beyond the scripts, for the permission check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Needs {
    /// PUBLISH (with SUBSCRIBE) or SPUBLISH (with SSUBSCRIBE).
    pub(crate) publish: Publish,
    /// A Redis Cluster: `CLUSTER SLOTS` and `ASKING` (the client's slot discovery).
    pub(crate) cluster: bool,
    /// A sentinel master: `ROLE` (checked before use); `WAIT` with `sync_replicas`.
    pub(crate) role: bool,
    pub(crate) wait: bool,
    /// redlock/multi: `INCRBY` (lagging fencing counters are raised).
    pub(crate) incrby: bool,
    /// `protocol = "redisson"`: Redisson's keys and channels instead of distlock's.
    pub(crate) redisson: bool,
}

/// What a command names besides itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    None,
    /// A key, its n-th word (1-based).
    Key(usize),
    /// A channel, its 2nd word.
    Channel,
}

impl Object {
    /// As `probe.lua` takes it.
    fn code(self) -> i64 {
        match self {
            Object::None => 0,
            Object::Key(n) => n as i64,
            Object::Channel => -1,
        }
    }
}

/// One command as distlock sends it.
#[derive(Debug, Clone)]
struct Check {
    words: Vec<String>,
    /// How many of `words` name the command (2 with a subcommand).
    command_words: usize,
    object: Object,
}

impl Check {
    fn name(&self) -> String {
        self.words[..self.command_words].join("|").to_lowercase()
    }

    fn shown(&self) -> String {
        let mut w = self.words.clone();
        if let Some(first) = w.first_mut() {
            *first = first.to_uppercase();
        }
        w.join(" ")
    }
}

/// The commands the Lua scripts call (all keyed on their first argument but TIME). The
/// `protocol` tests compare this with the scripts' sources. `hgetall` is only read by
/// inspection (`distlock list`/`show`), not by a lock.
pub(crate) const SCRIPT_COMMANDS: &[(&str, &[&str])] = &[
    ("del", &[]),
    ("exists", &[]),
    ("get", &[]),
    ("set", &["1"]),
    ("incr", &[]),
    ("hdel", &["f"]),
    ("hexists", &["f"]),
    ("hget", &["f"]),
    ("hincrby", &["f", "1"]),
    ("hmget", &["f"]),
    ("hset", &["f", "1"]),
    ("lindex", &["0"]),
    ("lpop", &[]),
    ("lrem", &["0", "x"]),
    ("persist", &[]),
    ("pexpire", &["1"]),
    ("pttl", &[]),
    ("rpush", &["x"]),
    ("zadd", &["1", "x"]),
    ("zcard", &[]),
    ("zrange", &["0", "-1", "withscores"]),
    ("zrangebyscore", &["-inf", "1"]),
    ("zrem", &["x"]),
    ("zremrangebyscore", &["-inf", "1"]),
    ("zscore", &["x"]),
];

/// Commands the scripts call only for inspection (not needed to lock; `pubsub` counts the
/// waiting processes, under `pcall`, and is `null` without the right; `cluster nodes`, under
/// `pcall`, gives a cluster node's own address, else the seed list is shown).
#[cfg(test)]
pub(crate) const INSPECTION_ONLY: &[&str] = &["hgetall", "lrange", "pubsub", "cluster"];

/// What the scripts call without needing it: the forced release's plain `PUBLISH` of the
/// revocation message (`<key_prefix>__revoked`, see `crate::upkeep::revoke`) is sent with
/// `redis.pcall` and a refusal is ignored (the holders then hear of it at their next
/// renewal), so the self-check does not ask for it.
#[cfg(test)]
pub(crate) const BEST_EFFORT: &[&str] = &["publish"];

/// The commands only the `protocol = "redisson"` scripts call besides [`SCRIPT_COMMANDS`]
/// (checked only on such a backend).
pub(crate) const REDISSON_SCRIPT_COMMANDS: &[(&str, &[&str])] = &[
    ("hkeys", &[]),
    ("hlen", &[]),
    ("lrange", &["0", "-1"]),
    ("zincrby", &["1", "x"]),
];

/// The permission check of one backend: the commands its locks send, with sample keys
/// and channels under its `key_prefix`.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    checks: Vec<Check>,
    /// `~PREFIX*`, `&PREFIX*`: the patterns a refused key or channel asks for.
    key_pattern: String,
    channel_pattern: String,
    /// A cluster (the version requirements differ).
    cluster: bool,
}

/// What one server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// `redis_version` (from the script, else from `INFO server`).
    pub(crate) version: Option<String>,
    /// The server software and its own version, from `INFO server` (`None`: INFO refused).
    pub(crate) flavour: Option<(String, String)>,
    /// The script found a server older than 7.0.
    pub(crate) pre_7: bool,
    /// The rights refused, in `ACL SETUSER` terms with the command that needs each
    /// (`None`: not known, the script could not run for another reason than a refusal).
    pub(crate) missing: Option<Vec<String>>,
    /// The `ACL SETUSER` arguments that grant what is missing.
    pub(crate) grant: Vec<String>,
    /// `maxmemory_policy` from `INFO memory` (`None`: INFO refused).
    pub(crate) eviction: Option<String>,
    /// Why the script could not run, when it was not a refusal.
    pub(crate) error: Option<String>,
}

impl Probe {
    /// The check for a backend with `prefix` that uses `needs`.
    pub(crate) fn new(prefix: &str, needs: Needs) -> Probe {
        let sample = "distlock-check".to_owned();
        let mut keys = Vec::new();
        let mut channels = Vec::new();
        let mut key_pattern = format!("~{}*", glob_escape(prefix));
        let mut channel_pattern = format!("&{}*", glob_escape(prefix));
        if needs.redisson {
            // Redisson's names: the lock is the bare name (any key), everything derived is
            // `redisson_...:{name}` or `{name}:...`; the channels all start `redisson_`.
            (keys, channels) = redisson_samples(&sample);
            key_pattern = "~*".to_owned();
            channel_pattern = "&redisson_*".to_owned();
        }
        let kinds: &[LockKind] = if needs.redisson {
            &[]
        } else {
            &[LockKind::Reentrant, LockKind::Fair, LockKind::Read]
        };
        for &kind in kinds {
            if let Ok(k) = LockKeys::for_kind(prefix, sample.clone(), kind) {
                keys.push(k.hash.clone());
                if kind != LockKind::Reentrant {
                    keys.extend(k.extra());
                }
                if kind == LockKind::Reentrant {
                    // The key's own counter, and the server's and the slot's.
                    for scope in [FenceScope::Server, FenceScope::Slot] {
                        keys.push(k.clone().scoped(scope).counters().0);
                    }
                    keys.push(k.fence());
                    keys.push(format!("{}:fenced", k.hash));
                }
                channels.push(k.channel.clone());
            }
        }
        let ids = format!("{prefix}ids:{sample}:0");
        let mut checks = Vec::new();
        let mut push = |words: Vec<String>, command_words: usize, object: Object| {
            checks.push(Check {
                words,
                command_words,
                object,
            })
        };
        let w = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // Every key the scripts touch, with every command the scripts call: the key
        // patterns must cover them all.
        let extra: &[(&str, &[&str])] = if needs.redisson {
            REDISSON_SCRIPT_COMMANDS
        } else {
            &[]
        };
        for (name, args) in SCRIPT_COMMANDS.iter().chain(extra) {
            for key in &keys {
                let mut words = vec![(*name).to_owned(), key.clone()];
                words.extend(w(args));
                push(words, 1, Object::Key(2));
            }
        }
        push(w(&["time"]), 1, Object::None);
        // Running the scripts.
        let sha = Script::Acquire.sha().to_owned();
        push(
            vec!["evalsha".into(), sha, "1".into(), keys[0].clone()],
            1,
            Object::Key(4),
        );
        push(
            vec![
                "eval".into(),
                "return 1".into(),
                "1".into(),
                keys[0].clone(),
            ],
            1,
            Object::Key(4),
        );
        push(w(&["script", "load", "return 1"]), 2, Object::None);
        // Wake-up.
        let (publish, subscribe, unsubscribe) = match needs.publish {
            Publish::Plain => ("publish", "subscribe", "unsubscribe"),
            Publish::Sharded => ("spublish", "ssubscribe", "sunsubscribe"),
        };
        for channel in &channels {
            push(
                vec![publish.into(), channel.clone(), "x".into()],
                1,
                Object::Channel,
            );
            push(vec![subscribe.into(), channel.clone()], 1, Object::Channel);
            push(
                vec![unsubscribe.into(), channel.clone()],
                1,
                Object::Channel,
            );
        }
        push(w(&["ping"]), 1, Object::None);
        // distlock::ids.
        push(vec!["incr".into(), ids.clone()], 1, Object::Key(2));
        push(
            vec!["expire".into(), ids, "1".into(), "nx".into()],
            1,
            Object::Key(2),
        );
        if needs.incrby {
            push(
                vec!["incrby".into(), keys[0].clone(), "1".into()],
                1,
                Object::Key(2),
            );
        }
        if needs.role {
            push(w(&["role"]), 1, Object::None);
        }
        if needs.wait {
            push(w(&["wait", "0", "0"]), 1, Object::None);
        }
        if needs.cluster {
            push(w(&["cluster", "slots"]), 2, Object::None);
            push(w(&["asking"]), 1, Object::None);
        }
        Probe {
            checks,
            key_pattern,
            channel_pattern,
            cluster: needs.cluster,
        }
    }

    /// The probe script's EVAL.
    pub(crate) fn command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SOURCE).arg(0);
        for c in &self.checks {
            cmd.arg(c.words.len()).arg(c.object.code());
            for w in &c.words {
                cmd.arg(w);
            }
        }
        cmd
    }

    /// The commands of the pipeline, in the order [`Probe::answer`] takes their replies.
    pub(crate) fn pipeline(&self) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.add_command(self.command())
            .cmd("INFO")
            .arg("server")
            .cmd("INFO")
            .arg("memory");
        pipe
    }

    /// What the replies to [`Probe::command`], `INFO server` and `INFO memory` mean.
    pub(crate) fn answer(
        &self,
        script: RedisResult<Value>,
        server: RedisResult<Value>,
        memory: RedisResult<Value>,
    ) -> Answer {
        let text = |r: RedisResult<Value>| match r {
            Ok(v) => redis::from_redis_value::<String>(v).ok(),
            Err(_) => None,
        };
        let server = text(server);
        let memory = text(memory);
        let mut answer = Answer {
            version: server
                .as_deref()
                .and_then(|i| info_field(i, "redis_version"))
                .map(str::to_owned),
            flavour: server.as_deref().and_then(flavour_of),
            pre_7: false,
            missing: None,
            grant: Vec::new(),
            eviction: memory
                .as_deref()
                .and_then(|i| info_field(i, "maxmemory_policy"))
                .map(str::to_owned),
            error: None,
        };
        match script {
            Ok(Value::Array(items)) => {
                let mut items = items.into_iter();
                match items.next() {
                    Some(Value::BulkString(v)) => {
                        answer.version = Some(String::from_utf8_lossy(&v).into_owned());
                    }
                    Some(Value::SimpleString(v)) => answer.version = Some(v),
                    // false: older than 7.0; nothing was checked.
                    _ => {
                        answer.pre_7 = true;
                        return answer;
                    }
                }
                let numbers: Vec<i64> = items
                    .filter_map(|v| match v {
                        Value::Int(n) => Some(n),
                        _ => None,
                    })
                    .collect();
                let refused = numbers
                    .chunks(2)
                    .filter_map(|p| match p {
                        [i, how] => Some((*i, *how)),
                        _ => None,
                    })
                    .filter_map(|(i, how)| {
                        let check = self.checks.get(usize::try_from(i).ok()?.checked_sub(1)?)?;
                        Some((check, how))
                    });
                let (missing, grant) = self.describe(refused);
                answer.missing = Some(missing);
                answer.grant = grant;
            }
            Ok(other) => {
                answer.error = Some(format!("unexpected reply to the probe script: {other:?}"))
            }
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
                answer.missing = Some(vec![format!(
                    "missing +eval (EVAL itself is refused, so no other right could be checked: {})",
                    e.detail().unwrap_or("NOPERM")
                )]);
                answer.grant = vec!["+eval".into()];
            }
            Err(e) => answer.error = Some(e.to_string()),
        }
        answer
    }

    /// The report of the server at `address` that gave `answer`.
    pub(crate) fn report(&self, address: &str, answer: Answer) -> ServerReport {
        let mut r = ServerReport::new(address);
        r.too_old = version_problem(answer.version.as_deref(), answer.pre_7, self.cluster);
        r.version = match (&answer.version, answer.pre_7) {
            (None, true) => Some("older than 7.0".to_owned()),
            (v, _) => v.clone(),
        };
        if let Some((flavour, version)) = answer.flavour {
            r.flavour = Some(flavour);
            r.flavour_version = Some(version);
        }
        r.eviction = answer.eviction;
        r.missing_rights = answer.missing;
        r.grant = answer.grant;
        r.problem = answer.error;
        if answer.pre_7 && r.problem.is_none() {
            r.problem =
                Some("the permissions were not checked: the server is older than 7.0".into());
        }
        r
    }

    /// The refused checks as `ACL SETUSER` rights, each once, with the command that needs
    /// it; and the arguments that grant them.
    fn describe<'a>(
        &self,
        refused: impl Iterator<Item = (&'a Check, i64)>,
    ) -> (Vec<String>, Vec<String>) {
        let mut missing = Vec::new();
        let mut grant: Vec<String> = Vec::new();
        for (check, how) in refused {
            let (right, text) = match (how, check.object) {
                (1, Object::Key(_)) => (
                    self.key_pattern.clone(),
                    format!("missing key permission {} ({})", self.key_pattern, check.shown()),
                ),
                (1, Object::Channel) => (
                    self.channel_pattern.clone(),
                    format!(
                        "missing channel permission {} ({})",
                        self.channel_pattern,
                        check.shown()
                    ),
                ),
                (2, _) => (
                    format!("unknown:{}", check.name()),
                    format!(
                        "the server does not know the command {} (too old? distlock needs Redis {}.{})",
                        check.name().to_uppercase(),
                        MIN_VERSION.0,
                        MIN_VERSION.1
                    ),
                ),
                _ => (format!("+{}", check.name()), format!("missing +{}", check.name())),
            };
            if !grant.contains(&right) {
                grant.push(right);
                missing.push(text);
            }
        }
        grant.retain(|g| !g.starts_with("unknown:"));
        (missing, grant)
    }
}

/// The keys and channels of a sample lock `name` of every kind in Redisson's format: the
/// lock hash, the token counter, an unlock latch, the fair queue and deadlines, a reader's
/// hold key; the lock channel, a fair waiter's channel, the read-write channel.
fn redisson_samples(name: &str) -> (Vec<String>, Vec<String>) {
    let lease = std::time::Duration::from_secs(1);
    let of = |kind| LockKeys::redisson(name.to_owned(), kind, lease);
    let (Ok(r), Ok(rw)) = (of(LockKind::Reentrant), of(LockKind::Read)) else {
        // (not for the fixed sample name; the bare name still gets checked)
        return (vec![name.to_owned()], Vec::new());
    };
    let field = format!("{}:0", crate::terms::owner::redisson_client_id());
    let [queue, deadlines] = r.extra();
    let keys = vec![
        r.hash.clone(),
        r.fence(),
        r.redisson_latch(&"0".repeat(32)),
        queue,
        deadlines,
        format!("{}:{field}:rwlock_timeout:1", rw.redisson_rw_stem()),
    ];
    let channels = vec![
        r.channel.clone(),
        format!("{}:{field}", r.channel),
        rw.channel.clone(),
    ];
    (keys, channels)
}

/// `prefix` with the glob characters of an ACL pattern escaped.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> Needs {
        Needs {
            publish: Publish::Plain,
            cluster: false,
            role: false,
            wait: false,
            incrby: false,
            redisson: false,
        }
    }

    #[test]
    fn redisson_checks_redissons_names() {
        let probe = Probe::new(
            "lock:",
            Needs {
                redisson: true,
                publish: Publish::Sharded,
                ..needs()
            },
        );
        let words: Vec<String> = probe.checks.iter().map(|c| c.words.join(" ")).collect();
        for want in [
            "hincrby distlock-check f 1",
            "incr redisson_lock_token:{distlock-check}",
            "rpush redisson_lock_queue:{distlock-check} x",
            "zincrby redisson_lock_timeout:{distlock-check} 1 x",
            "spublish redisson_lock__channel:{distlock-check} x",
            "ssubscribe redisson_rwlock:{distlock-check}",
        ] {
            assert!(words.iter().any(|w| w == want), "{want} not in {words:?}");
        }
        assert!(words
            .iter()
            .any(|w| w.starts_with("set redisson_unlock_latch:{distlock-check}:")));
        assert!(
            words
                .iter()
                .any(|w| w.starts_with("pexpire {distlock-check}:")
                    && w.contains(":rwlock_timeout:1"))
        );
        assert!(
            !words.iter().any(|w| w.contains(" lock:{distlock-check}")),
            "none of distlock's own names"
        );
        assert_eq!(probe.key_pattern, "~*");
        assert_eq!(probe.channel_pattern, "&redisson_*");
    }

    #[test]
    fn refusals_become_acl_rights() {
        let probe = Probe::new("lock:", needs());
        let idx = |name: &str| {
            probe
                .checks
                .iter()
                .position(|c| c.words[0] == name)
                .map(|i| i as i64 + 1)
                .unwrap()
        };
        let reply = Value::Array(vec![
            Value::BulkString(b"7.0.15".to_vec()),
            Value::Int(idx("hincrby")),
            Value::Int(0),
            Value::Int(idx("hset")),
            Value::Int(1),
            Value::Int(idx("hget")),
            Value::Int(1),
            Value::Int(idx("publish")),
            Value::Int(1),
        ]);
        let a = probe.answer(
            Ok(reply),
            Ok(Value::BulkString(b"redis_version:7.0.15\r\n".to_vec())),
            Ok(Value::Nil),
        );
        assert_eq!(a.version.as_deref(), Some("7.0.15"));
        assert_eq!(a.flavour, Some(("Redis".into(), "7.0.15".into())));
        let missing = a.missing.unwrap();
        assert_eq!(missing[0], "missing +hincrby");
        assert_eq!(
            missing[1],
            "missing key permission ~lock:* (HSET lock:{distlock-check} f 1)"
        );
        assert_eq!(
            missing[2],
            "missing channel permission &lock:* (PUBLISH lock:{distlock-check}:released x)"
        );
        assert_eq!(missing.len(), 3, "{missing:?}");
        assert_eq!(a.grant, vec!["+hincrby", "~lock:*", "&lock:*"]);
    }

    #[test]
    fn valkey_is_reported_with_its_own_version_and_judged_on_redis_version() {
        let probe = Probe::new("lock:", needs());
        let a = probe.answer(
            Ok(Value::Array(vec![Value::BulkString(b"7.2.4".to_vec())])),
            Ok(Value::BulkString(
                b"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n"
                    .to_vec(),
            )),
            Ok(Value::Nil),
        );
        let r = probe.report("h:1", a);
        assert_eq!(r.version.as_deref(), Some("7.2.4"));
        assert_eq!(r.flavour.as_deref(), Some("Valkey"));
        assert_eq!(r.flavour_version.as_deref(), Some("8.1.8"));
        assert_eq!(r.server().as_deref(), Some("Valkey 8.1.8"));
        assert_eq!(r.too_old, None);
        // INFO refused: the script's version alone, no flavour.
        let a = probe.answer(
            Ok(Value::Array(vec![Value::BulkString(b"7.2.4".to_vec())])),
            Err(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
                "no permissions to run the 'info' command",
            ))),
            Ok(Value::Nil),
        );
        let r = probe.report("h:1", a);
        assert_eq!(r.flavour, None);
        assert_eq!(r.server().as_deref(), Some("7.2.4"));
    }

    #[test]
    fn pre_7_and_refused_eval() {
        let probe = Probe::new("lock:", needs());
        let a = probe.answer(
            Ok(Value::Array(vec![Value::Boolean(false)])),
            Ok(Value::BulkString(b"redis_version:6.2.14\r\n".to_vec())),
            Ok(Value::BulkString(
                b"maxmemory_policy:noeviction\r\n".to_vec(),
            )),
        );
        assert!(a.pre_7);
        assert_eq!(a.version.as_deref(), Some("6.2.14"));
        assert_eq!(a.eviction.as_deref(), Some("noeviction"));
        let noperm = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "this user has no permissions to run the 'eval' command",
        ));
        let a = probe.answer(Err(noperm), Ok(Value::Nil), Ok(Value::Nil));
        assert!(a.missing.unwrap()[0].starts_with("missing +eval"));
        assert_eq!(a.grant, vec!["+eval"]);
    }

    #[test]
    fn patterns_escape_globs() {
        assert_eq!(glob_escape("app*[x]:"), "app\\*\\[x\\]:");
    }

    /// Every command a lock script calls is in the probe's list (or inspection-only).
    #[test]
    fn the_probe_checks_every_command_the_scripts_call() {
        for s in Script::ALL {
            let src = s.source();
            for (i, _) in src.match_indices("call('") {
                let rest = &src[i + 6..];
                let name = &rest[..rest.find('\'').unwrap()];
                assert!(
                    name == "time"
                        || SCRIPT_COMMANDS.iter().any(|(n, _)| *n == name)
                        || REDISSON_SCRIPT_COMMANDS.iter().any(|(n, _)| *n == name)
                        || INSPECTION_ONLY.contains(&name)
                        || BEST_EFFORT.contains(&name),
                    "{s:?} calls {name}, which the probe does not check"
                );
            }
        }
    }
}
