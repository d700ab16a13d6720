//! `redis://` and `rediss://` URLs (and their Valkey spellings, `valkey://` and `valkeys://`).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use url::{Host, Url};

use crate::RedisUrl;

/// Port used when a URL gives none.
pub const DEFAULT_PORT: u16 = 6379;

const FORM: &str =
    "redis://[USER:PASSWORD@]HOST[:PORT][/DB] or rediss://... (valkey:// and valkeys:// too)";

impl RedisUrl {
    /// Parses and checks a Redis URL: `redis://` or `rediss://` (TLS), a host, an optional
    /// port (default 6379), optional `user:password@` and an optional numeric `/DB`.
    /// `valkey://` and `valkeys://` are the same as `redis://` and `rediss://`: the
    /// protocol is the same whichever server answers ([`RedisUrl::driver_url`] is the URL
    /// with the `redis` scheme).
    ///
    /// The error never contains the password: URLs are shown with it replaced by `***`.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::RedisUrl;
    ///
    /// let url = RedisUrl::parse("rediss://app:s3cret@cache.internal/2").unwrap();
    /// assert_eq!(url.address, "cache.internal:6379");
    /// assert!(url.tls);
    /// assert_eq!(url.to_string(), "rediss://app:***@cache.internal/2");
    ///
    /// let url = RedisUrl::parse("valkeys://cache.internal:6380").unwrap();
    /// assert!(url.tls);
    ///
    /// let err = RedisUrl::parse("http://app:s3cret@cache.internal").unwrap_err();
    /// assert!(err.contains("unsupported scheme \"http\""));
    /// assert!(!err.contains("s3cret"));
    /// ```
    pub fn parse(s: &str) -> Result<RedisUrl, String> {
        let shown = redact(s);
        if s.trim().is_empty() {
            return Err(format!("the URL is empty: write {FORM}"));
        }
        if s.trim() != s {
            return Err(format!(
                "the URL \"{shown}\" has leading or trailing whitespace"
            ));
        }
        if !s.contains("://") {
            return Err(format!("\"{shown}\" is not a URL: write {FORM}"));
        }
        let parsed =
            Url::parse(s).map_err(|e| format!("invalid URL \"{shown}\": {e} (write {FORM})"))?;
        let tls = match parsed.scheme() {
            "redis" | "valkey" => false,
            "rediss" | "valkeys" => true,
            other => {
                return Err(format!(
                    "unsupported scheme \"{other}\" in \"{shown}\": use redis:// or rediss:// \
                     (or valkey:// or valkeys://)"
                ))
            }
        };
        let host = match parsed.host() {
            Some(Host::Ipv6(ip)) => format!("[{ip}]"),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Domain(d)) if !d.is_empty() => d.to_owned(),
            _ => return Err(format!("missing host in \"{shown}\": write {FORM}")),
        };
        let port = parsed.port().unwrap_or(DEFAULT_PORT);
        if port == 0 {
            return Err(format!(
                "port 0 in \"{shown}\" is not valid (leave it out for {DEFAULT_PORT})"
            ));
        }
        let db = parsed.path().strip_prefix('/').unwrap_or(parsed.path());
        let db_ok = db.is_empty() || (db.len() <= 9 && db.bytes().all(|b| b.is_ascii_digit()));
        if !db_ok {
            return Err(format!(
                "the database in \"{shown}\" must be a number, as in redis://HOST:PORT/0"
            ));
        }
        Ok(RedisUrl {
            url: s.to_owned(),
            address: format!("{host}:{port}"),
            tls,
        })
    }

    /// The URL as the Redis driver takes it: a `valkey://` or `valkeys://` scheme written
    /// `redis://` or `rediss://` (the rest unchanged); other URLs as they are.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::RedisUrl;
    ///
    /// let url = RedisUrl::parse("valkeys://app:pw@cache.internal:6380/1").unwrap();
    /// assert_eq!(url.driver_url(), "rediss://app:pw@cache.internal:6380/1");
    /// let url = RedisUrl::parse("redis://127.0.0.1").unwrap();
    /// assert_eq!(url.driver_url(), "redis://127.0.0.1");
    /// ```
    pub fn driver_url(&self) -> Cow<'_, str> {
        match self.url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("valkey") => {
                Cow::Owned(format!("redis://{rest}"))
            }
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("valkeys") => {
                Cow::Owned(format!("rediss://{rest}"))
            }
            _ => Cow::Borrowed(&self.url),
        }
    }

    /// The URL with its password, if any, replaced by `***`: safe to log.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::RedisUrl;
    ///
    /// let url = RedisUrl::parse("redis://:hunter2@127.0.0.1:7000").unwrap();
    /// assert_eq!(url.redacted(), "redis://:***@127.0.0.1:7000");
    /// ```
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }
}

/// Shows the URL without its password.
impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl FromStr for RedisUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RedisUrl::parse(s)
    }
}

/// `s` with the password part of `user:password@` replaced by `***`.
///
/// Works on text that is not a valid URL too, and errs on the side of hiding: everything
/// between the first `:` after the scheme and the last `@` is hidden.
pub(crate) fn redact(s: &str) -> String {
    let start = s.find("://").map_or(0, |i| i + 3);
    let rest = &s[start..];
    let Some(at) = rest.rfind('@') else {
        return s.to_owned();
    };
    let userinfo = &rest[..at];
    let Some(colon) = userinfo.find(':') else {
        return s.to_owned();
    };
    format!("{}***{}", &s[..start + colon + 1], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_urls() {
        let table: &[(&str, &str, bool)] = &[
            ("redis://localhost", "localhost:6379", false),
            ("redis://127.0.0.1:7000", "127.0.0.1:7000", false),
            (
                "rediss://cache.internal:6380/3",
                "cache.internal:6380",
                true,
            ),
            ("redis://user:pw@h:1/0", "h:1", false),
            ("redis://:pw@h", "h:6379", false),
            ("redis://user@h/", "h:6379", false),
            ("redis://[::1]:7000", "[::1]:7000", false),
            ("redis://[::1]", "[::1]:6379", false),
            ("rediss://h?protocol=resp3#insecure", "h:6379", true),
            ("valkey://localhost", "localhost:6379", false),
            ("valkey://user:pw@h:1/0", "h:1", false),
            (
                "valkeys://cache.internal:6380/3",
                "cache.internal:6380",
                true,
            ),
            ("VALKEYS://[::1]", "[::1]:6379", true),
        ];
        for (text, address, tls) in table {
            let url = RedisUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.url, *text);
            assert_eq!(url.address, *address, "{text}");
            assert_eq!(url.tls, *tls, "{text}");
        }
    }

    #[test]
    fn rejected_urls() {
        let table: &[(&str, &str)] = &[
            ("", "the URL is empty"),
            ("http://h:6379", "unsupported scheme \"http\""),
            ("unix:///tmp/redis.sock", "unsupported scheme \"unix\""),
            ("localhost:6379", "is not a URL"),
            ("redis://", "missing host"),
            ("redis:///0", "missing host"),
            ("redis://h:0", "port 0"),
            ("redis://h:99999", "invalid URL"),
            ("redis://h:abc", "invalid URL"),
            ("redis://h/x", "database"),
            ("redis://h/1/2", "database"),
            ("redis://h/+1", "database"),
            (" redis://h", "whitespace"),
            ("redis://a b", "invalid URL"),
            ("valkey://", "missing host"),
            ("valkeys://h:0", "port 0"),
            ("valkey://h/x", "database"),
            (
                "valkey+unix:///tmp/valkey.sock",
                "unsupported scheme \"valkey+unix\"",
            ),
        ];
        for (text, want) in table {
            let err = RedisUrl::parse(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn valkey_schemes_reach_the_driver_as_redis_schemes() {
        let table: &[(&str, &str)] = &[
            ("valkey://h:1/0", "redis://h:1/0"),
            ("valkeys://u:pw@h", "rediss://u:pw@h"),
            ("VALKEY://h", "redis://h"),
            ("Valkeys://h", "rediss://h"),
            ("redis://h", "redis://h"),
            ("rediss://u:pw@h:2/3", "rediss://u:pw@h:2/3"),
        ];
        for (text, driver) in table {
            let url = RedisUrl::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(url.driver_url(), *driver, "{text}");
            // What the user wrote is what messages show.
            assert_eq!(url.url, *text);
        }
        let shown = RedisUrl::parse("valkeys://u:SECRET@h").unwrap().to_string();
        assert_eq!(shown, "valkeys://u:***@h");
    }

    #[test]
    fn errors_never_show_passwords() {
        for text in [
            "http://u:SECRET@h",
            "redis://u:SECRET@h:99999",
            "valkey://u:SECRET@h:99999",
            "redis://u:SEC/RET@h",
            "redis://u:SEC@RET@h/x",
            "redis://:SECRET@/0",
            "u:SECRET@h:6379",
            " redis://u:SECRET@h",
        ] {
            let err = RedisUrl::parse(text).expect_err(text);
            assert!(!err.contains("SEC"), "{text}: {err}");
            assert!(!err.contains("RET"), "{text}: {err}");
        }
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("redis://u:p@w@h"), "redis://u:***@h");
        let url = RedisUrl::parse("redis://u:pw@h").unwrap();
        assert_eq!(url.to_string(), "redis://u:***@h");
        assert_eq!(format!("{url}"), url.redacted());
    }
}
