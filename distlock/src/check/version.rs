//! Which Redis version distlock needs, and why (the `init` self-check refuses an older
//! server, `backend/check.rs`): the newest of the versions in `REQUIREMENTS`.

/// The oldest Redis distlock runs on.
pub(crate) const MIN_VERSION: (u32, u32) = (7, 0);

/// What needs which Redis version (the newest of them is [`MIN_VERSION`]).
struct Requirement {
    since: (u32, u32),
    /// Needed on a cluster only.
    cluster_only: bool,
    what: &'static str,
}

const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        since: (7, 0),
        cluster_only: true,
        what: "SPUBLISH/SSUBSCRIBE (sharded pub/sub) announce releases on a cluster",
    },
    Requirement {
        since: (7, 0),
        cluster_only: false,
        what: "EXPIRE with NX keeps the counters of distlock::ids, and redis.acl_check_cmd checks the ACL user's rights at init",
    },
    Requirement {
        since: (6, 0),
        cluster_only: false,
        what: "ACL users (user names in URLs) and RESP3 (the cluster subscriber)",
    },
    Requirement {
        since: (5, 0),
        cluster_only: false,
        what: "the acquire scripts call TIME before they write (script effects replication, the default from 5.0)",
    },
];

/// `major.minor` of a version text such as `7.0.15`.
pub(crate) fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// `redis_version` of an `INFO` text.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The server software an `INFO server` text names, and its own version: `("Valkey",
/// valkey_version)` when it says `server_name:valkey` or has a `valkey_version` (Valkey's
/// `redis_version` is the Redis version it is compatible with: 7.2.4 on Valkey 8), another
/// `server_name` with its `<name>_version` when there is one, else `("Redis",
/// redis_version)`. `None` without any of these fields.
pub(crate) fn flavour_of(info: &str) -> Option<(String, String)> {
    let name = info_field(info, "server_name").filter(|n| !n.is_empty());
    let valkey = info_field(info, "valkey_version");
    let redis = info_field(info, "redis_version");
    match (name, valkey) {
        (Some(n), _) if n.eq_ignore_ascii_case("valkey") => {
            Some(("Valkey".to_owned(), valkey.or(redis)?.to_owned()))
        }
        (None, Some(v)) => Some(("Valkey".to_owned(), v.to_owned())),
        (Some(n), _) if !n.eq_ignore_ascii_case("redis") => {
            let own = info_field(info, &format!("{n}_version"));
            let mut shown = n.to_owned();
            if let Some(first) = shown.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            Some((shown, own.or(redis)?.to_owned()))
        }
        _ => Some(("Redis".to_owned(), redis?.to_owned())),
    }
}

/// Why a server of version `version` cannot run distlock (`None`: it can). `pre_7`: the
/// probe script found no `redis.REDIS_VERSION` (a server older than 7.0), whatever
/// `version` says (it may be unknown: `INFO` refused).
pub(crate) fn version_problem(version: Option<&str>, pre_7: bool, cluster: bool) -> Option<String> {
    let found = match version.and_then(parse_version) {
        Some(v) if !pre_7 || v < MIN_VERSION => v,
        // INFO says 7 or newer but the Lua API does not: trust the Lua API.
        Some(_) | None if pre_7 => (6, 99),
        _ => return None,
    };
    let why: Vec<String> = REQUIREMENTS
        .iter()
        .filter(|r| found < r.since && (cluster || !r.cluster_only))
        .map(|r| format!("{} (Redis {}.{})", r.what, r.since.0, r.since.1))
        .collect();
    if why.is_empty() {
        None
    } else {
        Some(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO_7: &str =
        "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n";
    const INFO_62: &str = "# Server\r\nredis_version:6.2.14\r\nredis_mode:cluster\r\n";
    const INFO_50: &str = "# Server\r\nredis_version:5.0.7\r\n";

    #[test]
    fn versions_from_info_text() {
        assert_eq!(info_field(INFO_7, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(INFO_62, "redis_version"), Some("6.2.14"));
        assert_eq!(info_field("# Server\r\n", "redis_version"), None);
        assert_eq!(
            info_field(
                "# Memory\r\nmaxmemory_policy:allkeys-lru\r\n",
                "maxmemory_policy"
            ),
            Some("allkeys-lru")
        );
        assert_eq!(parse_version("7.2"), Some((7, 2)));
        assert_eq!(parse_version("8"), Some((8, 0)));
        assert_eq!(parse_version("x.1"), None);
    }

    #[test]
    fn flavours_from_info_text() {
        let valkey_8 = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\nserver_mode:standalone\r\n";
        let redis_8 = "# Server\r\nredis_version:8.2.3\r\nredis_git_sha1:b5d43ceb\r\nredis_mode:standalone\r\n";
        let owned = |a: &str, b: &str| Some((a.to_owned(), b.to_owned()));
        assert_eq!(flavour_of(valkey_8), owned("Valkey", "8.1.8"));
        assert_eq!(flavour_of(redis_8), owned("Redis", "8.2.3"));
        assert_eq!(flavour_of(INFO_7), owned("Redis", "7.0.15"));
        // Valkey without server_name, or without valkey_version.
        assert_eq!(
            flavour_of("redis_version:7.2.4\r\nvalkey_version:8.0.1\r\n"),
            owned("Valkey", "8.0.1")
        );
        assert_eq!(
            flavour_of("redis_version:7.2.4\r\nserver_name:valkey\r\n"),
            owned("Valkey", "7.2.4")
        );
        // Another server that names itself, with and without its own version field.
        assert_eq!(
            flavour_of("redis_version:7.2.0\r\nserver_name:other\r\nother_version:1.2\r\n"),
            owned("Other", "1.2")
        );
        assert_eq!(
            flavour_of("redis_version:7.2.0\r\nserver_name:redis\r\n"),
            owned("Redis", "7.2.0")
        );
        assert_eq!(flavour_of("# Server\r\n"), None);
        assert_eq!(flavour_of(""), None);
    }

    #[test]
    fn version_decision() {
        let v = |info: &str| info_field(info, "redis_version").map(str::to_owned);
        assert_eq!(version_problem(v(INFO_7).as_deref(), false, true), None);
        assert_eq!(version_problem(Some("7.2.4"), false, false), None);
        assert_eq!(version_problem(Some("8.0.0"), false, true), None);
        // 6.2: too old everywhere (EXPIRE NX, acl_check_cmd); on a cluster SPUBLISH too.
        let single = version_problem(v(INFO_62).as_deref(), false, false).expect("too old");
        assert!(
            single.contains("EXPIRE with NX") && !single.contains("SPUBLISH"),
            "{single}"
        );
        let cluster = version_problem(v(INFO_62).as_deref(), false, true).expect("too old");
        assert!(
            cluster.contains("SPUBLISH") && cluster.contains("(Redis 7.0)"),
            "{cluster}"
        );
        // 5.0: ACL users too.
        let five = version_problem(v(INFO_50).as_deref(), false, false).expect("too old");
        assert!(five.contains("ACL users"), "{five}");
        assert!(!five.contains("TIME"), "{five}");
        assert!(version_problem(Some("4.0.9"), false, false)
            .unwrap()
            .contains("TIME"));
        // INFO refused and the script says pre-7.0: still refused.
        assert!(version_problem(None, true, false).is_some());
        // Unknown and not known to be old: not refused.
        assert_eq!(version_problem(None, false, false), None);
        assert_eq!(version_problem(Some("garbage"), false, false), None);
    }
}
