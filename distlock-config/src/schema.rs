//! Walks the parsed TOML document, checks it against the schema and builds a [`Config`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use crate::duration::parse_duration;
use crate::error::Locator;
use crate::interp::{interpolate, EnvLookup};
use crate::limits::{check_duration, DurationUse};
use crate::{
    BackendConfig, Config, ConfigError, Defaults, LeaseSpec, Mode, ModeKind, Protocol,
    QuorumOptions, RedisUrl, ShardedSubscriptionMode, Source,
};

type Key<'i> = Spanned<DeString<'i>>;
type Val<'i> = Spanned<DeValue<'i>>;

/// The valid modes, as listed in messages.
const MODES: &str = "single, cluster, sentinel, redlock, multi, memory";
/// The fields of `[defaults]`.
const DEFAULTS_FIELDS: &[&str] = &["backend", "wait", "lease", "watchdog_timeout", "key_prefix"];
/// Every field some mode takes.
const BACKEND_FIELDS: &[&str] = &[
    "mode",
    "url",
    "nodes",
    "master_name",
    "sentinels",
    "sync_replicas",
    "sync_timeout",
    "node_timeout",
    "drift_factor",
    "retry_delay",
    "response_timeout",
    "connect_timeout",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "tls_insecure_skip_verify",
    "holder_info",
    "handoff",
    "required",
    "protocol",
    "tcp_nodelay",
    "sharded_subscription_mode",
    "master_username",
    "master_password",
];

const DEFAULT_WAIT: Duration = Duration::from_secs(5);
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_KEY_PREFIX: &str = "lock:";
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Parses and validates `text`, read from `source`, looking `${VAR}`s up with `env`.
pub(crate) fn parse(text: &str, source: Source, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
    let cx = Cx {
        loc: Locator::new(text, &source),
        env,
    };
    let doc = DeTable::parse(text).map_err(|e| cx.syntax_error(text, &e))?;

    let mut defaults: Option<RawDefaults> = None;
    let mut backends: BTreeMap<String, BackendConfig> = BTreeMap::new();
    let mut backends_key: Option<usize> = None;
    for (key, value) in sorted(doc.get_ref()) {
        match key.get_ref().as_ref() {
            "defaults" => defaults = Some(cx.defaults(value)?),
            "backends" => {
                backends_key = Some(key.span().start);
                let DeValue::Table(table) = value.get_ref() else {
                    return Err(cx.loc.at(
                        value.span().start,
                        "backends",
                        format!(
                            "expected tables `[backends.NAME]`, found {}",
                            value.get_ref().type_str()
                        ),
                    ));
                };
                for (name, backend) in sorted(table) {
                    let backend = cx.backend(name, backend)?;
                    backends.insert(backend.name.clone(), backend);
                }
            }
            other => {
                return Err(cx.loc.at(
                    key.span().start,
                    other,
                    format!(
                        "unknown top-level key `{other}` (expected a `[defaults]` table and `[backends.NAME]` tables)"
                    ),
                ))
            }
        }
    }

    if backends.is_empty() {
        let message = "no backend is defined: add at least one `[backends.NAME]` table, e.g. \
                       `[backends.main]` with `mode = \"single\"` and `url = \"redis://127.0.0.1:6379\"`";
        return Err(match backends_key {
            Some(offset) => cx.loc.at(offset, "backends", message),
            None => cx.loc.whole("backends", message),
        });
    }

    let raw = defaults.unwrap_or_default();
    let backend = match raw.backend {
        Some((name, offset)) => {
            if !backends.contains_key(&name) {
                let defined: Vec<String> = backends.keys().map(|n| format!("\"{n}\"")).collect();
                return Err(cx.loc.at(
                    offset,
                    "defaults.backend",
                    format!(
                        "backend \"{name}\" is not defined (defined backends: {})",
                        defined.join(", ")
                    ),
                ));
            }
            Some(name)
        }
        None if backends.len() == 1 => backends.keys().next().cloned(),
        None => None,
    };
    Ok(Config {
        source,
        defaults: Defaults {
            backend,
            wait: raw.wait.unwrap_or(DEFAULT_WAIT),
            lease: raw.lease.unwrap_or(LeaseSpec::Auto),
            watchdog_timeout: raw.watchdog_timeout.unwrap_or(DEFAULT_WATCHDOG_TIMEOUT),
            key_prefix: raw
                .key_prefix
                .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned()),
        },
        backends,
    })
}

/// A table's entries in the order they appear in the text.
fn sorted<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Key<'i>, &'t Val<'i>)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    entries
}

/// `[defaults]` as written; `None` where absent.
#[derive(Default)]
struct RawDefaults {
    /// The name and the offset of its value.
    backend: Option<(String, usize)>,
    wait: Option<Duration>,
    lease: Option<LeaseSpec>,
    watchdog_timeout: Option<Duration>,
    key_prefix: Option<String>,
}

/// The fields of one backend as written; `None` where absent.
#[derive(Default)]
struct RawBackend {
    url: Option<RedisUrl>,
    nodes: Option<Vec<RedisUrl>>,
    master_name: Option<String>,
    master_username: Option<String>,
    master_password: Option<crate::Secret>,
    sentinels: Option<Vec<RedisUrl>>,
    sync_replicas: Option<u32>,
    sync_timeout: Option<Duration>,
    node_timeout: Option<Duration>,
    drift_factor: Option<f64>,
    retry_delay: Option<Duration>,
    response_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    holder_info: Option<bool>,
    handoff: Option<bool>,
    required: Option<bool>,
    tcp_nodelay: Option<bool>,
    protocol: Option<Protocol>,
    sharded_subscription_mode: Option<(ShardedSubscriptionMode, usize)>,
    tls: RawTls,
}

/// The TLS fields as written, each with the offset of its value.
#[derive(Default)]
struct RawTls {
    tls_ca: Option<(PathBuf, usize)>,
    tls_cert: Option<(PathBuf, usize)>,
    tls_key: Option<(PathBuf, usize)>,
    tls_insecure_skip_verify: Option<(bool, usize)>,
}

impl ModeKind {
    fn from_name(name: &str) -> Option<ModeKind> {
        Some(match name {
            "single" => ModeKind::Single,
            "cluster" => ModeKind::Cluster,
            "sentinel" => ModeKind::Sentinel,
            "redlock" => ModeKind::Redlock,
            "multi" => ModeKind::Multi,
            "memory" => ModeKind::Memory,
            _ => return None,
        })
    }

    /// The fields this mode takes besides `mode`.
    fn fields(self) -> &'static [&'static str] {
        const T: [&str; 11] = [
            "response_timeout",
            "connect_timeout",
            "tls_ca",
            "tls_cert",
            "tls_key",
            "tls_insecure_skip_verify",
            "holder_info",
            "handoff",
            "required",
            "protocol",
            "tcp_nodelay",
        ];
        match self {
            ModeKind::Single => &[
                "url", T[0], T[1], T[2], T[3], T[4], T[5], T[6], T[7], T[8], T[9], T[10],
            ],
            ModeKind::Cluster => &[
                "nodes",
                T[0],
                T[1],
                T[2],
                T[3],
                T[4],
                T[5],
                T[6],
                T[7],
                T[8],
                T[9],
                T[10],
                "sharded_subscription_mode",
            ],
            ModeKind::Sentinel => &[
                "master_name",
                "sentinels",
                "sync_replicas",
                "sync_timeout",
                "master_username",
                "master_password",
                T[0],
                T[1],
                T[2],
                T[3],
                T[4],
                T[5],
                T[6],
                T[7],
                T[8],
                T[9],
                T[10],
            ],
            ModeKind::Redlock | ModeKind::Multi => &[
                "nodes",
                "node_timeout",
                "drift_factor",
                "retry_delay",
                T[0],
                T[1],
                T[2],
                T[3],
                T[4],
                T[5],
                T[6],
                T[7],
                T[8],
                T[9],
                T[10],
            ],
            ModeKind::Memory => &[],
        }
    }

    /// "mode \"single\" takes: url, ..." for messages.
    fn takes(self) -> String {
        let fields = self.fields();
        if fields.is_empty() {
            format!("mode \"{}\" takes no other field", self.name())
        } else {
            format!("mode \"{}\" takes: {}", self.name(), fields.join(", "))
        }
    }
}

/// What the checks need: where errors point, and the environment.
struct Cx<'a> {
    loc: Locator<'a>,
    env: EnvLookup<'a>,
}

impl Cx<'_> {
    fn syntax_error(&self, text: &str, e: &toml::de::Error) -> ConfigError {
        let mut message = format!("invalid TOML: {}", e.message().trim_end());
        let span = e.span();
        if let Some(span) = &span {
            // Name the key of a duplicate; never quote other text (it may hold a password).
            if message.contains("duplicate key") {
                if let Some(key) = text.get(span.clone()) {
                    if !key.is_empty() && key.len() <= 100 && !key.contains('\n') {
                        message.push_str(&format!(" `{key}`"));
                    }
                }
            }
        }
        match span {
            Some(span) => self.loc.at(span.start, "(syntax)", message),
            None => self.loc.whole("(syntax)", message),
        }
    }

    fn defaults(&self, value: &Val<'_>) -> Result<RawDefaults, ConfigError> {
        let DeValue::Table(table) = value.get_ref() else {
            return Err(self.loc.at(
                value.span().start,
                "defaults",
                format!(
                    "expected a table `[defaults]`, found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        let mut raw = RawDefaults::default();
        for (key, value) in sorted(table) {
            let name: &str = key.get_ref();
            let field = format!("defaults.{name}");
            match name {
                "backend" => {
                    raw.backend = Some((self.string(&field, value)?, value.span().start));
                }
                "wait" => {
                    let d = self.duration(&field, value)?;
                    raw.wait = Some(self.in_range(&field, value, DurationUse::Wait, d)?);
                }
                "lease" => raw.lease = Some(self.lease(&field, value)?),
                "watchdog_timeout" => {
                    let d = self.duration(&field, value)?;
                    raw.watchdog_timeout =
                        Some(self.in_range(&field, value, DurationUse::WatchdogTimeout, d)?);
                }
                "key_prefix" => {
                    let prefix = self.string(&field, value)?;
                    if prefix.contains(['{', '}']) {
                        return Err(self.loc.at(
                            value.span().start,
                            field,
                            "`key_prefix` must not contain `{` or `}` \
                             (distlock places the Redis Cluster hash tag itself)",
                        ));
                    }
                    raw.key_prefix = Some(prefix);
                }
                _ => {
                    return Err(self.loc.at(
                        key.span().start,
                        field,
                        format!(
                            "unknown field `{name}` in [defaults] (expected one of: {})",
                            DEFAULTS_FIELDS.join(", ")
                        ),
                    ))
                }
            }
        }
        Ok(raw)
    }

    fn backend(&self, key: &Key<'_>, value: &Val<'_>) -> Result<BackendConfig, ConfigError> {
        let name: &str = key.get_ref();
        let base = format!("backends.{name}");
        if name.is_empty() {
            return Err(self.loc.at(
                key.span().start,
                "backends.\"\"",
                "a backend name is empty (use letters, digits, `_` and `-`)",
            ));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(self.loc.at(
                key.span().start,
                &base,
                format!("invalid backend name {name:?}: use only letters, digits, `_` and `-`"),
            ));
        }
        let header = value.span().start;
        let DeValue::Table(table) = value.get_ref() else {
            return Err(self.loc.at(
                header,
                &base,
                format!(
                    "expected a table `[backends.{name}]`, found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        let entries = sorted(table);

        let mode_field = format!("{base}.mode");
        let Some((_, mode_value)) = entries.iter().find(|(k, _)| k.get_ref() == "mode") else {
            return Err(self.loc.at(
                header,
                mode_field,
                format!("missing field `mode` (one of {MODES})"),
            ));
        };
        let mode_name = self.string(&mode_field, mode_value)?;
        let Some(kind) = ModeKind::from_name(&mode_name) else {
            return Err(self.loc.at(
                mode_value.span().start,
                mode_field,
                format!("unknown mode {mode_name:?} (one of {MODES})"),
            ));
        };

        let mut raw = RawBackend::default();
        for (key, value) in entries {
            let key_name: &str = key.get_ref();
            if key_name == "mode" {
                continue;
            }
            let field = format!("{base}.{key_name}");
            if !BACKEND_FIELDS.contains(&key_name) {
                return Err(self.loc.at(
                    key.span().start,
                    field,
                    format!("unknown field `{key_name}` ({})", kind.takes()),
                ));
            }
            if !kind.fields().contains(&key_name) {
                return Err(self.loc.at(
                    key.span().start,
                    field,
                    format!(
                        "field `{key_name}` is not used by mode \"{}\" ({})",
                        kind.name(),
                        kind.takes()
                    ),
                ));
            }
            let at = value.span().start;
            match key_name {
                "url" => raw.url = Some(self.url(&field, value)?),
                "nodes" => raw.nodes = Some(self.url_list(&field, key_name, value)?),
                "sentinels" => raw.sentinels = Some(self.url_list(&field, key_name, value)?),
                "master_name" => {
                    let master = self.string(&field, value)?;
                    if master.is_empty() {
                        return Err(self.loc.at(
                            at,
                            field,
                            "`master_name` is empty: give the name the sentinels know the master by",
                        ));
                    }
                    raw.master_name = Some(master);
                }
                "master_username" => raw.master_username = Some(self.string(&field, value)?),
                "master_password" => {
                    raw.master_password = Some(crate::Secret::new(self.string(&field, value)?))
                }
                "sync_replicas" => raw.sync_replicas = Some(self.count(&field, value)?),
                "drift_factor" => raw.drift_factor = Some(self.drift_factor(&field, value)?),
                "retry_delay" => {
                    let d = self.duration(&field, value)?;
                    raw.retry_delay =
                        Some(self.in_range(&field, value, DurationUse::RetryDelay, d)?);
                }
                "sync_timeout" => {
                    raw.sync_timeout = Some(self.positive_duration(&field, key_name, value)?)
                }
                "node_timeout" => {
                    raw.node_timeout = Some(self.positive_duration(&field, key_name, value)?)
                }
                "response_timeout" => {
                    raw.response_timeout = Some(self.positive_duration(&field, key_name, value)?)
                }
                "connect_timeout" => {
                    raw.connect_timeout = Some(self.positive_duration(&field, key_name, value)?)
                }
                "tls_ca" => raw.tls.tls_ca = Some((self.pem_file(&field, value)?, at)),
                "tls_cert" => raw.tls.tls_cert = Some((self.pem_file(&field, value)?, at)),
                "tls_key" => raw.tls.tls_key = Some((self.pem_file(&field, value)?, at)),
                "tls_insecure_skip_verify" => {
                    raw.tls.tls_insecure_skip_verify = Some((self.boolean(&field, value)?, at))
                }
                "holder_info" => raw.holder_info = Some(self.boolean(&field, value)?),
                "handoff" => raw.handoff = Some(self.boolean(&field, value)?),
                "required" => raw.required = Some(self.boolean(&field, value)?),
                "tcp_nodelay" => raw.tcp_nodelay = Some(self.boolean(&field, value)?),
                "protocol" => {
                    raw.protocol = Some(match self.string(&field, value)?.as_str() {
                        "distlock" => Protocol::Distlock,
                        "redisson" => Protocol::Redisson,
                        other => {
                            return Err(self.loc.at(
                                at,
                                field,
                                format!(
                            "unknown protocol \"{other}\" (expected \"distlock\" or \"redisson\")"
                        ),
                            ))
                        }
                    })
                }
                "sharded_subscription_mode" => {
                    let mode = match self.string(&field, value)?.as_str() {
                        "auto" => ShardedSubscriptionMode::Auto,
                        "on" => ShardedSubscriptionMode::On,
                        "off" => ShardedSubscriptionMode::Off,
                        other => {
                            return Err(self.loc.at(
                                at,
                                field,
                                format!(
                                    "unknown sharded_subscription_mode \"{other}\" (expected \"auto\", \"on\" or \"off\")"
                                ),
                            ))
                        }
                    };
                    raw.sharded_subscription_mode = Some((mode, at));
                }
                _ => {}
            }
        }

        let missing = |field: &str| {
            self.loc.at(
                header,
                format!("{base}.{field}"),
                format!(
                    "missing field `{field}` (required by mode \"{}\")",
                    kind.name()
                ),
            )
        };
        let quorum = QuorumOptions {
            node_timeout: raw.node_timeout.unwrap_or(DEFAULT_NODE_TIMEOUT),
            drift_factor: raw.drift_factor.unwrap_or(DEFAULT_DRIFT_FACTOR),
            retry_delay: raw.retry_delay.unwrap_or(DEFAULT_RETRY_DELAY),
        };
        let mode = match kind {
            ModeKind::Single => Mode::Single {
                url: raw.url.ok_or_else(|| missing("url"))?,
            },
            ModeKind::Cluster => {
                if let Some((_, at)) = raw.sharded_subscription_mode {
                    if raw.protocol != Some(Protocol::Redisson) {
                        return Err(self.loc.at(
                            at,
                            format!("{base}.sharded_subscription_mode"),
                            "`sharded_subscription_mode` goes with protocol = \"redisson\" (Redisson's shardedSubscriptionMode); distlock's own protocol always uses sharded pub/sub on a cluster",
                        ));
                    }
                }
                Mode::Cluster {
                    nodes: raw.nodes.ok_or_else(|| missing("nodes"))?,
                    sharded_subscription_mode: raw
                        .sharded_subscription_mode
                        .map(|(m, _)| m)
                        .unwrap_or_default(),
                }
            }
            ModeKind::Sentinel => Mode::Sentinel {
                master_name: raw.master_name.ok_or_else(|| missing("master_name"))?,
                sentinels: raw.sentinels.ok_or_else(|| missing("sentinels"))?,
                sync_replicas: raw.sync_replicas.unwrap_or(0),
                sync_timeout: raw.sync_timeout.unwrap_or(DEFAULT_SYNC_TIMEOUT),
                master_username: raw.master_username,
                master_password: raw.master_password,
            },
            ModeKind::Redlock => Mode::Redlock {
                nodes: raw.nodes.ok_or_else(|| missing("nodes"))?,
                quorum,
            },
            ModeKind::Multi => Mode::Multi {
                nodes: raw.nodes.ok_or_else(|| missing("nodes"))?,
                quorum,
            },
            ModeKind::Memory => Mode::Memory,
        };
        self.check_tls(&base, header, &mode, &raw.tls)?;
        Ok(BackendConfig {
            name: name.to_owned(),
            line: self.loc.line(header),
            mode,
            response_timeout: raw.response_timeout.unwrap_or(DEFAULT_RESPONSE_TIMEOUT),
            connect_timeout: raw.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            tls_ca: raw.tls.tls_ca.map(|(p, _)| p),
            tls_cert: raw.tls.tls_cert.map(|(p, _)| p),
            tls_key: raw.tls.tls_key.map(|(p, _)| p),
            tls_insecure_skip_verify: raw.tls.tls_insecure_skip_verify.is_some_and(|(b, _)| b),
            // On by default where it has a place: distlock's format keeps it in the lock's
            // own hash; Redisson's format has none.
            holder_info: raw
                .holder_info
                .unwrap_or(raw.protocol != Some(Protocol::Redisson)),
            handoff: raw.handoff.unwrap_or(true),
            required: raw.required.unwrap_or(true),
            tcp_nodelay: raw.tcp_nodelay.unwrap_or(false),
            protocol: raw.protocol.unwrap_or_default(),
        })
    }

    /// The TLS fields go with `rediss://` URLs, `tls_cert` with `tls_key`.
    fn check_tls(
        &self,
        base: &str,
        header: usize,
        mode: &Mode,
        raw: &RawTls,
    ) -> Result<(), ConfigError> {
        let urls = mode.urls();
        let tls_urls = urls.iter().filter(|u| u.tls).count();
        let given = [
            ("tls_ca", raw.tls_ca.as_ref().map(|(_, at)| *at)),
            ("tls_cert", raw.tls_cert.as_ref().map(|(_, at)| *at)),
            ("tls_key", raw.tls_key.as_ref().map(|(_, at)| *at)),
            (
                "tls_insecure_skip_verify",
                raw.tls_insecure_skip_verify.map(|(_, at)| at),
            ),
        ];
        if tls_urls == 0 {
            if let Some((name, Some(at))) = given.iter().find(|(_, at)| at.is_some()) {
                return Err(self.loc.at(
                    *at,
                    format!("{base}.{name}"),
                    format!("`{name}` is set, but no URL of this backend uses TLS: write rediss:// URLs"),
                ));
            }
        } else if tls_urls < urls.len() {
            let plain = urls.iter().find(|u| !u.tls).map(|u| u.address.as_str());
            let field = match mode {
                Mode::Sentinel { .. } => "sentinels",
                _ => "nodes",
            };
            return Err(self.loc.at(
                header,
                format!("{base}.{field}"),
                format!(
                    "some URLs are rediss:// (TLS) and some redis:// ({} is plaintext): use one scheme for every server of a backend",
                    plain.unwrap_or("?")
                ),
            ));
        }
        match (&raw.tls_cert, &raw.tls_key) {
            (Some(_), None) => Err(self.loc.at(
                given[1].1.unwrap_or_default(),
                format!("{base}.tls_cert"),
                "`tls_cert` needs `tls_key` (the client certificate's private key) for mutual TLS",
            )),
            (None, Some(_)) => Err(self.loc.at(
                given[2].1.unwrap_or_default(),
                format!("{base}.tls_key"),
                "`tls_key` needs `tls_cert` (the client certificate) for mutual TLS",
            )),
            _ => Ok(()),
        }
    }

    /// A path string (interpolated) to a readable file: a PEM bundle, certificate or key.
    fn pem_file(&self, field: &str, value: &Val<'_>) -> Result<PathBuf, ConfigError> {
        let path = PathBuf::from(self.string(field, value)?);
        let at = value.span().start;
        if path.as_os_str().is_empty() {
            return Err(self
                .loc
                .at(at, field, "the path is empty: give a PEM file's path"));
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(path),
            Ok(_) => Err(self.loc.at(
                at,
                field,
                format!(
                    "\"{}\" is not a file (give a PEM file's path)",
                    path.display()
                ),
            )),
            Err(e) => Err(self.loc.at(
                at,
                field,
                format!("cannot read \"{}\": {e}", path.display()),
            )),
        }
    }

    fn boolean(&self, field: &str, value: &Val<'_>) -> Result<bool, ConfigError> {
        match value.get_ref() {
            DeValue::Boolean(b) => Ok(*b),
            DeValue::String(s) => match self.interpolate(field, value, s)?.as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(self.loc.at(
                    value.span().start,
                    field,
                    format!("expected true or false, found {other:?}"),
                )),
            },
            other => Err(self.loc.at(
                value.span().start,
                field,
                format!("expected true or false, found {}", other.type_str()),
            )),
        }
    }

    /// A string value, `${VAR}`s replaced.
    fn string(&self, field: &str, value: &Val<'_>) -> Result<String, ConfigError> {
        match value.get_ref() {
            DeValue::String(s) => self.interpolate(field, value, s),
            other => Err(self.loc.at(
                value.span().start,
                field,
                format!("expected a string, found {}", other.type_str()),
            )),
        }
    }

    fn interpolate(&self, field: &str, value: &Val<'_>, s: &str) -> Result<String, ConfigError> {
        interpolate(s, self.env).map_err(|m| self.loc.at(value.span().start, field, m))
    }

    fn duration(&self, field: &str, value: &Val<'_>) -> Result<Duration, ConfigError> {
        let DeValue::String(s) = value.get_ref() else {
            return Err(self.loc.at(
                value.span().start,
                field,
                format!(
                    "expected a duration string such as \"250ms\", \"5s\" or \"1m30s\", found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        let s = self.interpolate(field, value, s)?;
        // The hint the attribute gives for the same mistake.
        parse_duration(&s).map_err(|m| {
            self.loc.at(
                value.span().start,
                field,
                if m.contains("write e.g.") {
                    m
                } else {
                    format!("{m}; write e.g. \"250ms\", \"5s\" or \"1m30s\"")
                },
            )
        })
    }

    /// `d` (the value of `field`) checked against the range of `what`.
    fn in_range(
        &self,
        field: &str,
        value: &Val<'_>,
        what: DurationUse,
        d: Duration,
    ) -> Result<Duration, ConfigError> {
        check_duration(what, d).map_err(|e| self.loc.at(value.span().start, field, e.to_string()))
    }

    fn positive_duration(
        &self,
        field: &str,
        name: &str,
        value: &Val<'_>,
    ) -> Result<Duration, ConfigError> {
        let d = self.duration(field, value)?;
        if d.is_zero() {
            return Err(self.loc.at(
                value.span().start,
                field,
                format!("`{name}` must be greater than 0 (write e.g. \"1s\")"),
            ));
        }
        Ok(d)
    }

    fn lease(&self, field: &str, value: &Val<'_>) -> Result<LeaseSpec, ConfigError> {
        let at = value.span().start;
        let DeValue::String(s) = value.get_ref() else {
            return Err(self.loc.at(
                at,
                field,
                format!(
                    "expected \"auto\" or a duration string such as \"30s\", found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        let s = self.interpolate(field, value, s)?;
        if s == "auto" {
            return Ok(LeaseSpec::Auto);
        }
        let d = parse_duration(&s).map_err(|m| {
            self.loc.at(
                at,
                field,
                format!("{m}; a lease is \"auto\" or a duration such as \"30s\""),
            )
        })?;
        if d.is_zero() {
            return Err(self.loc.at(
                at,
                field,
                "a lease must be greater than 0: use \"auto\" (renewed by the watchdog) or a duration such as \"30s\"",
            ));
        }
        Ok(LeaseSpec::Fixed(self.in_range(
            field,
            value,
            DurationUse::Lease,
            d,
        )?))
    }

    fn url(&self, field: &str, value: &Val<'_>) -> Result<RedisUrl, ConfigError> {
        let DeValue::String(s) = value.get_ref() else {
            return Err(self.loc.at(
                value.span().start,
                field,
                format!(
                    "expected a URL string such as \"redis://127.0.0.1:6379\", found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        let s = self.interpolate(field, value, s)?;
        RedisUrl::parse(&s).map_err(|m| self.loc.at(value.span().start, field, m))
    }

    fn url_list(
        &self,
        field: &str,
        name: &str,
        value: &Val<'_>,
    ) -> Result<Vec<RedisUrl>, ConfigError> {
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.loc.at(
                value.span().start,
                field,
                format!(
                    "expected an array of URLs such as [\"redis://10.0.0.1:6379\", \"redis://10.0.0.2:6379\"], found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        if items.is_empty() {
            return Err(self.loc.at(
                value.span().start,
                field,
                format!("`{name}` is empty: give at least one redis:// URL"),
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, item)| self.url(&format!("{field}[{i}]"), item))
            .collect()
    }

    /// A whole number `>= 0` that fits in `u32`; a string is interpolated and read as one.
    fn count(&self, field: &str, value: &Val<'_>) -> Result<u32, ConfigError> {
        let at = value.span().start;
        let n: i128 = match value.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix()).map_err(|_| {
                self.loc
                    .at(at, field, format!("the number {i} is too large"))
            })?,
            DeValue::String(s) => {
                let s = self.interpolate(field, value, s)?;
                s.parse().map_err(|_| {
                    self.loc.at(
                        at,
                        field,
                        format!("expected a whole number >= 0, found {s:?}"),
                    )
                })?
            }
            other => {
                return Err(self.loc.at(
                    at,
                    field,
                    format!("expected a whole number >= 0, found {}", other.type_str()),
                ))
            }
        };
        u32::try_from(n).map_err(|_| {
            self.loc.at(
                at,
                field,
                format!("expected a whole number from 0 to {}, found {n}", u32::MAX),
            )
        })
    }

    /// A number in `[0, 0.5)`; a string is interpolated and read as one.
    fn drift_factor(&self, field: &str, value: &Val<'_>) -> Result<f64, ConfigError> {
        let at = value.span().start;
        let x: Option<f64> = match value.get_ref() {
            DeValue::Float(f) => f.as_str().parse().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            DeValue::String(s) => self.interpolate(field, value, s)?.parse().ok(),
            other => {
                return Err(self.loc.at(
                    at,
                    field,
                    format!(
                        "expected a number from 0 up to (not including) 0.5, found {}",
                        other.type_str()
                    ),
                ))
            }
        };
        match x {
            Some(x) if (0.0..0.5).contains(&x) => Ok(x),
            Some(x) => Err(self.loc.at(
                at,
                field,
                format!("`drift_factor` must be at least 0 and below 0.5, found {x}"),
            )),
            None => Err(self.loc.at(
                at,
                field,
                "expected a number from 0 up to (not including) 0.5, such as 0.01",
            )),
        }
    }
}
