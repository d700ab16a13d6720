//! The configuration schema: every accepted form, and every error with its line and field.

use std::time::Duration;

use distlock_config::{Config, ConfigError, LeaseSpec, Mode, Protocol, RedisUrl, Source};

fn ok(text: &str) -> Config {
    Config::from_str(text).unwrap_or_else(|e| panic!("expected a valid config, got: {e}"))
}

fn err(text: &str) -> ConfigError {
    match Config::from_str(text) {
        Ok(config) => panic!("expected an error, got {config:#?}"),
        Err(e) => e,
    }
}

/// Asserts the error's line, field and that its message contains every one of `parts`.
#[track_caller]
fn check(e: &ConfigError, line: usize, field: &str, parts: &[&str]) {
    assert_eq!(e.location, format!("<string>:{line}"), "location of: {e}");
    assert_eq!(e.field, field, "field of: {e}");
    for part in parts {
        assert!(
            e.message.contains(part),
            "message {:?} lacks {part:?}",
            e.message
        );
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn url(s: &str) -> RedisUrl {
    RedisUrl::parse(s).unwrap()
}

const SINGLE: &str = "[backends.main]\nmode = \"single\"\nurl = \"redis://127.0.0.1:6379\"\n";

// ---------------------------------------------------------------- happy paths

#[test]
fn single_mode_with_every_default() {
    let config = ok(SINGLE);
    assert_eq!(config.source, Source::Str);
    assert_eq!(config.defaults.backend.as_deref(), Some("main"));
    assert_eq!(config.defaults.wait, ms(5_000));
    assert_eq!(config.defaults.lease, LeaseSpec::Auto);
    assert_eq!(config.defaults.watchdog_timeout, ms(30_000));
    assert_eq!(config.defaults.key_prefix, "lock:");
    let main = &config.backends["main"];
    assert_eq!(main.name, "main");
    assert_eq!(main.line, 1);
    let Mode::Single { url, .. } = &main.mode else {
        panic!("{:?}", main.mode)
    };
    assert_eq!(url.url, "redis://127.0.0.1:6379");
    assert_eq!(url.address, "127.0.0.1:6379");
    assert!(!url.tls);
    assert_eq!(main.response_timeout, ms(2_000));
    assert_eq!(main.connect_timeout, ms(2_000));
    assert_eq!(config.default_backend(), Some(main));
}

#[test]
fn holder_information_is_on_by_default_where_the_format_has_a_place_for_it() {
    assert!(ok(SINGLE).backends["main"].holder_info, "distlock's format");
    let off = ok(&format!("{SINGLE}holder_info = false\n"));
    assert!(!off.backends["main"].holder_info);
    let redisson = ok(&format!("{SINGLE}protocol = \"redisson\"\n"));
    assert!(
        !redisson.backends["main"].holder_info,
        "Redisson's format has no place for it"
    );
}

#[test]
fn defaults_given_explicitly() {
    let config = ok(r#"
[defaults]
backend = "b"
wait = "250ms"
lease = "1m30s"
watchdog_timeout = "100ms"
key_prefix = "app:locks:"

[backends.a]
mode = "memory"

[backends.b]
mode = "single"
url = "rediss://user:pw@cache.example.com:6380/2"
response_timeout = "500ms"
connect_timeout = "3s"
"#);
    let d = &config.defaults;
    assert_eq!(d.backend.as_deref(), Some("b"));
    assert_eq!(d.wait, ms(250));
    assert_eq!(d.lease, LeaseSpec::Fixed(ms(90_000)));
    assert_eq!(d.watchdog_timeout, ms(100));
    assert_eq!(d.key_prefix, "app:locks:");
    let b = &config.backends["b"];
    assert_eq!(b.line, 12);
    assert_eq!(b.response_timeout, ms(500));
    assert_eq!(b.connect_timeout, ms(3_000));
    let Mode::Single { url, .. } = &b.mode else {
        panic!("{:?}", b.mode)
    };
    assert_eq!(url.address, "cache.example.com:6380");
    assert!(url.tls);
    assert_eq!(url.url, "rediss://user:pw@cache.example.com:6380/2");
    assert_eq!(config.backends["a"].line, 9);
}

#[test]
fn wait_zero_and_empty_prefix_are_allowed() {
    let config = ok(&format!(
        "[defaults]\nwait = \"0s\"\nkey_prefix = \"\"\n{SINGLE}"
    ));
    assert_eq!(config.defaults.wait, Duration::ZERO);
    assert_eq!(config.defaults.key_prefix, "");
}

#[test]
fn several_backends_without_a_default() {
    let config = ok(r#"
[backends.one]
mode = "memory"
[backends.two]
mode = "memory"
"#);
    assert_eq!(config.defaults.backend, None);
    assert_eq!(config.default_backend(), None);
    assert_eq!(config.backends.len(), 2);
}

#[test]
fn cluster_mode() {
    let config = ok(r#"
[backends.c]
mode = "cluster"
nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"]
"#);
    let Mode::Cluster { nodes, .. } = &config.backends["c"].mode else {
        panic!("{:?}", config.backends["c"].mode)
    };
    assert_eq!(
        *nodes,
        vec![url("redis://10.0.0.1:7000"), url("redis://10.0.0.2:7001")]
    );
}

#[test]
fn sentinel_mode_with_defaults_and_explicit() {
    let config = ok(r#"
[backends.s1]
mode = "sentinel"
master_name = "mymaster"
sentinels = ["redis://10.0.1.1:26379"]

[backends.s2]
mode = "sentinel"
master_name = "other"
sentinels = ["redis://10.0.1.1:26379", "redis://10.0.1.2:26379"]
sync_replicas = 2
sync_timeout = "250ms"
"#);
    let sentinel = |name: &str| match &config.backends[name].mode {
        Mode::Sentinel {
            master_name,
            sentinels,
            sync_replicas,
            sync_timeout,
            ..
        } => (
            master_name.clone(),
            sentinels.clone(),
            *sync_replicas,
            *sync_timeout,
        ),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        sentinel("s1"),
        (
            "mymaster".to_owned(),
            vec![url("redis://10.0.1.1:26379")],
            0,
            ms(1_000)
        )
    );
    assert_eq!(
        sentinel("s2"),
        (
            "other".to_owned(),
            vec![url("redis://10.0.1.1:26379"), url("redis://10.0.1.2:26379")],
            2,
            ms(250)
        )
    );
}

#[test]
fn redlock_and_multi_modes() {
    let config = ok(r#"
[backends.r]
mode = "redlock"
nodes = ["redis://a", "redis://b", "redis://c"]

[backends.m]
mode = "multi"
nodes = ["redis://a", "redis://b"]
node_timeout = "20ms"
drift_factor = 0.1
retry_delay = "1ms"
"#);
    let nodes = |names: &[&str]| -> Vec<RedisUrl> {
        names.iter().map(|n| url(&format!("redis://{n}"))).collect()
    };
    let quorum = |name: &str| match &config.backends[name].mode {
        Mode::Redlock { nodes, quorum, .. } => ("redlock", nodes.clone(), *quorum),
        Mode::Multi { nodes, quorum, .. } => ("multi", nodes.clone(), *quorum),
        other => panic!("{other:?}"),
    };
    let (mode, r_nodes, r) = quorum("r");
    assert_eq!(mode, "redlock");
    assert_eq!(r_nodes, nodes(&["a", "b", "c"]));
    assert_eq!(
        (r.node_timeout, r.drift_factor, r.retry_delay),
        (ms(50), 0.01, ms(50))
    );
    let (mode, m_nodes, m) = quorum("m");
    assert_eq!(mode, "multi");
    assert_eq!(m_nodes, nodes(&["a", "b"]));
    assert_eq!(
        (m.node_timeout, m.drift_factor, m.retry_delay),
        (ms(20), 0.1, ms(1))
    );
}

#[test]
fn drift_factor_zero_as_integer() {
    let config =
        ok("[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\"]\ndrift_factor = 0\n");
    let Mode::Redlock { quorum, .. } = config.backends["r"].mode.clone() else {
        panic!()
    };
    assert_eq!(quorum.drift_factor, 0.0);
}

#[test]
fn memory_mode() {
    let config = ok("[backends.mem]\nmode = \"memory\"\n");
    let mem = &config.backends["mem"];
    assert_eq!(mem.mode, Mode::Memory);
    assert_eq!(mem.mode.name(), "memory");
    assert_eq!(config.defaults.backend.as_deref(), Some("mem"));
}

#[test]
fn inline_and_dotted_tables() {
    let config = ok(r#"
backends.a.mode = "memory"
backends.b = { mode = "single", url = "redis://h" }
defaults = { wait = "1s" }
"#);
    assert_eq!(config.backends["a"].line, 2);
    assert_eq!(config.backends["b"].line, 3);
    assert_eq!(config.defaults.wait, ms(1_000));
}

#[test]
fn backend_names_with_dashes_and_underscores() {
    let config = ok("[backends.Cache_2-eu]\nmode = \"memory\"\n");
    assert!(config.backends.contains_key("Cache_2-eu"));
}

#[test]
fn from_str_trait_and_with_source() {
    let config: Config = SINGLE.parse().unwrap();
    assert_eq!(config, ok(SINGLE));
    let source = Source::File("etc/locks.toml".into());
    let config = Config::from_str_with_source(SINGLE, source.clone()).unwrap();
    assert_eq!(config.source, source);
    let e: ConfigError = "[backends.x]".parse::<Config>().unwrap_err();
    check(&e, 1, "backends.x.mode", &["missing field `mode`"]);
}

#[test]
fn durations_table() {
    let table: &[(&str, u64)] = &[
        ("0s", 0),
        ("250ms", 250),
        ("5s", 5_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1m30s", 90_000),
        ("1h2m3s4ms", 3_723_004),
    ];
    for (text, want) in table {
        let config = ok(&format!("[defaults]\nwait = \"{text}\"\n{SINGLE}"));
        assert_eq!(config.defaults.wait, ms(*want), "{text}");
    }
}

/// A bad duration in the file keeps the hint the attribute gives for the same mistake.
#[test]
fn a_bad_duration_says_how_to_write_one() {
    for (field, value) in [("wait", "5"), ("wait", "5 s"), ("watchdog_timeout", "1.5s")] {
        let e = err(&format!("[defaults]\n{field} = \"{value}\"\n{SINGLE}"));
        check(
            &e,
            2,
            &format!("defaults.{field}"),
            &[
                &format!("invalid duration {value:?}"),
                "write e.g. \"250ms\", \"5s\"",
            ],
        );
    }
    // A lease: as the attribute says it.
    let e = err(&format!("[defaults]\nlease = \"30sec\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.lease",
        &["a lease is \"auto\" or a duration such as \"30s\""],
    );
    let e = err("[backends.main]\nmode = \"single\"\nurl = \"redis://h\"\nresponse_timeout = \"2 seconds\"\n");
    check(
        &e,
        4,
        "backends.main.response_timeout",
        &["write e.g. \"250ms\", \"5s\""],
    );
}

// ---------------------------------------------------------------- files

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "distlock-config-test-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn from_path_reads_a_file() {
    let path = temp_file("good", SINGLE);
    let config = Config::from_path(&path).unwrap();
    assert_eq!(config.source, Source::File(path.clone()));
    assert_eq!(config.backends["main"].mode.name(), "single");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn from_path_locates_errors_in_the_file() {
    let path = temp_file(
        "bad",
        "[backends.main]\nmode = \"single\"\nurl = \"http://h\"\n",
    );
    let e = Config::from_path(&path).unwrap_err();
    assert_eq!(e.location, format!("{}:3", path.display()));
    assert_eq!(e.field, "backends.main.url");
    assert_eq!(e.line(), Some(3));
    assert!(e
        .to_string()
        .starts_with(&format!("{}:3: backends.main.url: ", path.display())));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn unreadable_file() {
    let path = std::env::temp_dir().join("distlock-config-test-does-not-exist/x.toml");
    let e = Config::from_path(&path).unwrap_err();
    assert_eq!(e.location, path.display().to_string());
    assert_eq!(e.field, "(file)");
    assert!(
        e.message.contains("cannot read the configuration file"),
        "{e}"
    );
    assert!(e.message.to_lowercase().contains("no such file"), "{e}");
    assert_eq!(e.line(), None);
}

// ---------------------------------------------------------------- TOML and structure errors

#[test]
fn toml_syntax_error() {
    let e = err("[defaults]\nwait = \"5s\nkey_prefix = \"x\"\n");
    check(&e, 2, "(syntax)", &["invalid TOML"]);
}

#[test]
fn toml_duplicate_key() {
    let e = err("[defaults]\nwait = \"5s\"\nwait = \"6s\"\n");
    check(&e, 3, "(syntax)", &["duplicate key `wait`"]);
}

#[test]
fn unknown_top_level_table() {
    let e = err(&format!("{SINGLE}\n[lockz]\nx = 1\n"));
    check(
        &e,
        5,
        "lockz",
        &[
            "unknown top-level key `lockz`",
            "[defaults]",
            "[backends.NAME]",
        ],
    );
}

#[test]
fn unknown_field_in_defaults() {
    let e = err(&format!(
        "[defaults]\nwait = \"1s\"\ntimeout = \"1s\"\n{SINGLE}"
    ));
    check(
        &e,
        3,
        "defaults.timeout",
        &["unknown field `timeout`", "wait", "lease"],
    );
}

#[test]
fn unknown_field_in_backend() {
    let e = err(&format!("{SINGLE}password = \"x\"\n"));
    check(
        &e,
        4,
        "backends.main.password",
        &["unknown field `password`", "url"],
    );
}

#[test]
fn field_not_used_by_mode() {
    let e = err(&format!("{SINGLE}nodes = [\"redis://b\"]\n"));
    check(
        &e,
        4,
        "backends.main.nodes",
        &["field `nodes` is not used by mode \"single\""],
    );

    let e = err("[backends.t]\nmode = \"memory\"\nurl = \"redis://h\"\n");
    check(
        &e,
        3,
        "backends.t.url",
        &["field `url` is not used by mode \"memory\""],
    );

    let e = err("[backends.t]\nmode = \"memory\"\nresponse_timeout = \"1s\"\n");
    check(
        &e,
        3,
        "backends.t.response_timeout",
        &["not used by mode \"memory\""],
    );

    let e = err("[backends.c]\nmode = \"cluster\"\nnodes = [\"redis://a\"]\ndrift_factor = 0.1\n");
    check(
        &e,
        4,
        "backends.c.drift_factor",
        &["not used by mode \"cluster\""],
    );

    let e = err("[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\"]\nsync_replicas = 1\n");
    check(
        &e,
        4,
        "backends.r.sync_replicas",
        &["not used by mode \"redlock\""],
    );
}

#[test]
fn unknown_mode() {
    let e = err("[backends.main]\nmode = \"standalone\"\n");
    check(
        &e,
        2,
        "backends.main.mode",
        &[
            "unknown mode \"standalone\"",
            "single, cluster, sentinel, redlock, multi, memory",
        ],
    );
}

#[test]
fn missing_mode() {
    let e = err("\n[backends.main]\nurl = \"redis://h\"\n");
    check(
        &e,
        2,
        "backends.main.mode",
        &["missing field `mode` (one of single, cluster, sentinel, redlock, multi, memory)"],
    );
}

#[test]
fn mode_of_the_wrong_type() {
    let e = err("[backends.main]\nmode = 1\n");
    check(
        &e,
        2,
        "backends.main.mode",
        &["expected a string, found integer"],
    );
}

#[test]
fn missing_required_fields() {
    let cases: &[(&str, &str, &str)] = &[
        ("mode = \"single\"", "url", "single"),
        ("mode = \"cluster\"", "nodes", "cluster"),
        (
            "mode = \"sentinel\"\nsentinels = [\"redis://s\"]",
            "master_name",
            "sentinel",
        ),
        (
            "mode = \"sentinel\"\nmaster_name = \"m\"",
            "sentinels",
            "sentinel",
        ),
        ("mode = \"redlock\"", "nodes", "redlock"),
        (
            "mode = \"multi\"\nnode_timeout = \"10ms\"",
            "nodes",
            "multi",
        ),
    ];
    for (body, field, mode) in cases {
        let e = err(&format!("{SINGLE}\n[backends.x]\n{body}\n"));
        check(
            &e,
            5,
            &format!("backends.x.{field}"),
            &[&format!(
                "missing field `{field}` (required by mode \"{mode}\")"
            )],
        );
    }
}

#[test]
fn empty_node_lists() {
    let e = err("[backends.c]\nmode = \"cluster\"\nnodes = []\n");
    check(
        &e,
        3,
        "backends.c.nodes",
        &["`nodes` is empty: give at least one redis:// URL"],
    );

    let e = err("[backends.s]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = []\n");
    check(&e, 4, "backends.s.sentinels", &["`sentinels` is empty"]);
}

#[test]
fn node_list_of_the_wrong_type() {
    let e = err("[backends.c]\nmode = \"cluster\"\nnodes = \"redis://a\"\n");
    check(
        &e,
        3,
        "backends.c.nodes",
        &["expected an array of URLs", "found string"],
    );
}

#[test]
fn bad_node_points_at_its_element() {
    let e =
        err("[backends.r]\nmode = \"redlock\"\nnodes = [\n  \"redis://a\",\n  \"http://b\",\n]\n");
    check(
        &e,
        5,
        "backends.r.nodes[1]",
        &["unsupported scheme \"http\""],
    );

    let e = err("[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\", 5]\n");
    check(
        &e,
        3,
        "backends.r.nodes[1]",
        &["expected a URL string", "found integer"],
    );
}

#[test]
fn no_backend_at_all() {
    let e = err("");
    assert_eq!(e.location, "<string>");
    assert_eq!(e.field, "backends");
    assert!(e.message.contains("no backend is defined"), "{e}");

    let e = err("[defaults]\nwait = \"1s\"\n");
    assert_eq!(e.location, "<string>");

    let e = err("[defaults]\nwait = \"1s\"\n[backends]\n");
    check(
        &e,
        3,
        "backends",
        &["no backend is defined", "[backends.NAME]"],
    );
}

#[test]
fn default_backend_that_does_not_exist() {
    let e = err(r#"
[defaults]
backend = "mian"

[backends.main]
mode = "memory"
[backends.other]
mode = "memory"
"#);
    check(
        &e,
        3,
        "defaults.backend",
        &["backend \"mian\" is not defined", "\"main\", \"other\""],
    );
}

#[test]
fn invalid_backend_names() {
    let e = err("[backends.\"my cache\"]\nmode = \"memory\"\n");
    check(
        &e,
        1,
        "backends.my cache",
        &["invalid backend name \"my cache\"", "letters, digits"],
    );

    let e = err("[backends.\"\"]\nmode = \"memory\"\n");
    check(&e, 1, "backends.\"\"", &["backend name is empty"]);

    let e = err("[backends.\"caché\"]\nmode = \"memory\"\n");
    check(&e, 1, "backends.caché", &["invalid backend name"]);
}

#[test]
fn wrong_table_types() {
    let e = err(&format!("defaults = 3\n{SINGLE}"));
    check(
        &e,
        1,
        "defaults",
        &["expected a table `[defaults]`, found integer"],
    );

    let e = err("backends = [1]\n");
    check(
        &e,
        1,
        "backends",
        &["expected tables `[backends.NAME]`, found array"],
    );

    let e = err("[backends]\nmain = \"redis://h\"\n");
    check(
        &e,
        2,
        "backends.main",
        &["expected a table `[backends.main]`, found string"],
    );
}

#[test]
fn wrong_value_types() {
    let e = err("[backends.main]\nmode = \"single\"\nurl = 6379\n");
    check(
        &e,
        3,
        "backends.main.url",
        &["expected a URL string", "found integer"],
    );

    let e = err(&format!("[defaults]\nwait = 5\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.wait",
        &["expected a duration string", "found integer"],
    );

    let e = err(&format!("[defaults]\nlease = true\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.lease",
        &["expected \"auto\" or a duration", "found boolean"],
    );

    let e = err(&format!("[defaults]\nbackend = [\"main\"]\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.backend",
        &["expected a string, found array"],
    );
}

// ---------------------------------------------------------------- URLs

#[test]
fn url_with_a_bad_scheme_hides_the_password() {
    let e = err("[backends.main]\nmode = \"single\"\nurl = \"http://admin:hunter2@h:6379\"\n");
    check(
        &e,
        3,
        "backends.main.url",
        &[
            "unsupported scheme \"http\"",
            "use redis:// or rediss://",
            "admin:***@h:6379",
        ],
    );
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn url_errors() {
    let cases: &[(&str, &str)] = &[
        ("redis://", "missing host"),
        ("localhost:6379", "is not a URL"),
        ("redis://h:notaport", "invalid URL"),
        ("redis://h/zero", "database"),
        ("", "the URL is empty"),
    ];
    for (value, want) in cases {
        let e = err(&format!(
            "[backends.main]\nmode = \"single\"\nurl = \"{value}\"\n"
        ));
        check(&e, 3, "backends.main.url", &[want]);
    }
}

#[test]
fn invalid_url_never_leaks_the_password() {
    let e = err("[backends.main]\nmode = \"single\"\nurl = \"redis://u:pa/ss@h:1\"\n");
    check(&e, 3, "backends.main.url", &["***"]);
    assert!(!e.to_string().contains("pa/ss"), "{e}");
}

// ---------------------------------------------------------------- durations and values

#[test]
fn bad_duration_unit() {
    let e = err(&format!("[defaults]\nwait = \"5x\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.wait",
        &["invalid duration \"5x\": unknown unit \"x\" (use ms, s, m or h)"],
    );
}

#[test]
fn bad_durations_in_backends() {
    let e = err(&format!("{SINGLE}connect_timeout = \"2 s\"\n"));
    check(
        &e,
        4,
        "backends.main.connect_timeout",
        &["invalid duration \"2 s\"", "spaces"],
    );

    let e = err(&format!("{SINGLE}response_timeout = \"0s\"\n"));
    check(
        &e,
        4,
        "backends.main.response_timeout",
        &["must be greater than 0"],
    );

    let e =
        err("[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\"]\nnode_timeout = \"0ms\"\n");
    check(
        &e,
        4,
        "backends.r.node_timeout",
        &["must be greater than 0"],
    );

    let e = err("[backends.r]\nmode = \"multi\"\nnodes = [\"redis://a\"]\nretry_delay = \"50\"\n");
    check(
        &e,
        4,
        "backends.r.retry_delay",
        &["missing unit after \"50\""],
    );

    let e = err(
        "[backends.s]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"redis://s\"]\nsync_timeout = \"0s\"\n",
    );
    check(
        &e,
        5,
        "backends.s.sync_timeout",
        &["must be greater than 0"],
    );
}

#[test]
fn zero_lease() {
    let e = err(&format!("[defaults]\nlease = \"0s\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.lease",
        &["a lease must be greater than 0", "\"auto\""],
    );
}

#[test]
fn bad_lease() {
    let e = err(&format!("[defaults]\nlease = \"forever\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.lease",
        &["invalid duration \"forever\"", "\"auto\""],
    );
}

#[test]
fn watchdog_timeout_too_short() {
    let e = err(&format!(
        "[defaults]\nwatchdog_timeout = \"50ms\"\n{SINGLE}"
    ));
    check(
        &e,
        2,
        "defaults.watchdog_timeout",
        &["between 100ms and 24h", "got 50ms"],
    );
}

/// Durations out of the one table of valid ranges (the builders, the attribute and the
/// command use the same) are refused with file:line:field.
#[test]
fn durations_out_of_range() {
    let e = err(
        "[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\", \"redis://b\", \"redis://c\"]\nretry_delay = \"0s\"\n",
    );
    check(
        &e,
        4,
        "backends.r.retry_delay",
        &[
            "`retry_delay` must be between 1ms and 1m",
            "got 0s",
            "write e.g. \"250ms\", \"5s\"",
        ],
    );
    let e = err("[backends.r]\nmode = \"multi\"\nnodes = [\"redis://a\", \"redis://b\"]\nretry_delay = \"2m\"\n");
    check(
        &e,
        4,
        "backends.r.retry_delay",
        &["between 1ms and 1m", "got 2m"],
    );
    let e = err(&format!("[defaults]\nlease = \"25h\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.lease",
        &["`lease` must be between 1ms and 24h", "got 25h"],
    );
    let e = err(&format!(
        "[defaults]\nwatchdog_timeout = \"24h1s\"\n{SINGLE}"
    ));
    check(
        &e,
        2,
        "defaults.watchdog_timeout",
        &["between 100ms and 24h", "got 24h1s"],
    );
    // In range: accepted.
    let c = Config::from_str(&format!("[defaults]\nlease = \"24h\"\n{SINGLE}")).unwrap();
    assert_eq!(
        c.defaults.lease,
        distlock_config::LeaseSpec::Fixed(Duration::from_secs(86_400))
    );
}

#[test]
fn key_prefix_with_braces() {
    let e = err(&format!("[defaults]\nkey_prefix = \"{{app}}:\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.key_prefix",
        &["must not contain `{` or `}`"],
    );
}

#[test]
fn drift_factor_out_of_range() {
    for (value, want) in [
        ("0.5", "must be at least 0 and below 0.5, found 0.5"),
        ("-0.1", "found -0.1"),
        ("nan", "below 0.5"),
        ("inf", "below 0.5"),
        ("\"lots\"", "expected a number"),
        ("true", "found boolean"),
    ] {
        let e = err(&format!(
            "[backends.r]\nmode = \"redlock\"\nnodes = [\"redis://a\"]\ndrift_factor = {value}\n"
        ));
        check(&e, 4, "backends.r.drift_factor", &[want]);
    }
}

#[test]
fn sync_replicas_out_of_range() {
    for (value, want) in [
        ("-1", "from 0 to 4294967295, found -1"),
        ("4294967296", "found 4294967296"),
        ("1.5", "found float"),
        ("\"two\"", "found \"two\""),
    ] {
        let e = err(&format!(
            "[backends.s]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"redis://s\"]\nsync_replicas = {value}\n"
        ));
        check(&e, 5, "backends.s.sync_replicas", &[want]);
    }
}

#[test]
fn empty_master_name() {
    let e =
        err("[backends.s]\nmode = \"sentinel\"\nmaster_name = \"\"\nsentinels = [\"redis://s\"]\n");
    check(&e, 3, "backends.s.master_name", &["`master_name` is empty"]);
}

// ---------------------------------------------------------------- ${ENV} interpolation

#[test]
fn env_interpolation_everywhere() {
    std::env::set_var("DISTLOCK_CFG_T1_HOST", "10.1.2.3");
    std::env::set_var("DISTLOCK_CFG_T1_PASSWORD", "p\"w'd");
    std::env::set_var("DISTLOCK_CFG_T1_WAIT", "1m30s");
    std::env::set_var("DISTLOCK_CFG_T1_MODE", "sentinel");
    std::env::set_var("DISTLOCK_CFG_T1_MASTER", "master \"one\"");
    std::env::set_var("DISTLOCK_CFG_T1_PREFIX", "svc");
    std::env::set_var("DISTLOCK_CFG_T1_REPLICAS", "2");
    let config = ok(r#"
[defaults]
backend = "${DISTLOCK_CFG_T1_MODE}"
wait = "${DISTLOCK_CFG_T1_WAIT}"
key_prefix = "${DISTLOCK_CFG_T1_PREFIX}:lock:"

[backends.single]
mode = "single"
url = "redis://:${DISTLOCK_CFG_T1_PASSWORD}@${DISTLOCK_CFG_T1_HOST}:6379/1"

[backends.sentinel]
mode = "${DISTLOCK_CFG_T1_MODE}"
master_name = '${DISTLOCK_CFG_T1_MASTER}'
sentinels = ["redis://${DISTLOCK_CFG_T1_HOST}:26379"]
sync_replicas = "${DISTLOCK_CFG_T1_REPLICAS}"
"#);
    assert_eq!(config.defaults.backend.as_deref(), Some("sentinel"));
    assert_eq!(config.defaults.wait, ms(90_000));
    assert_eq!(config.defaults.key_prefix, "svc:lock:");
    let Mode::Single { url, .. } = &config.backends["single"].mode else {
        panic!()
    };
    assert_eq!(url.url, "redis://:p\"w'd@10.1.2.3:6379/1");
    assert_eq!(url.address, "10.1.2.3:6379");
    let Mode::Sentinel {
        master_name,
        sentinels,
        sync_replicas,
        ..
    } = &config.backends["sentinel"].mode
    else {
        panic!()
    };
    assert_eq!(master_name, "master \"one\"");
    assert_eq!(sentinels[0].address, "10.1.2.3:26379");
    assert_eq!(*sync_replicas, 2);
}

#[test]
fn double_dollar_is_a_literal_dollar() {
    let prefix = ok(&format!("[defaults]\nkey_prefix = \"$$app$$:\"\n{SINGLE}"))
        .defaults
        .key_prefix;
    assert_eq!(prefix, "$app$:");

    let config = ok(
        "[backends.s]\nmode = \"sentinel\"\nmaster_name = \"$${DISTLOCK_CFG_NEVER_SET}$$$$\"\nsentinels = [\"redis://s\"]\n",
    );
    let Mode::Sentinel { master_name, .. } = &config.backends["s"].mode else {
        panic!()
    };
    assert_eq!(master_name, "${DISTLOCK_CFG_NEVER_SET}$$");

    let config = ok("[backends.main]\nmode = \"single\"\nurl = \"redis://:pa$$s$word@h\"\n");
    let Mode::Single { url, .. } = &config.backends["main"].mode else {
        panic!()
    };
    assert_eq!(url.url, "redis://:pa$s$word@h");
}

#[test]
fn unset_env_var() {
    let e =
        err("[backends.main]\nmode = \"single\"\nurl = \"redis://${DISTLOCK_CFG_NEVER_SET_42}\"\n");
    check(
        &e,
        3,
        "backends.main.url",
        &["environment variable `DISTLOCK_CFG_NEVER_SET_42` is not set"],
    );

    let e = err("[backends.r]\nmode = \"redlock\"\nnodes = [\n  \"redis://a\",\n  \"redis://${DISTLOCK_CFG_NEVER_SET_43}\",\n]\n");
    check(
        &e,
        5,
        "backends.r.nodes[1]",
        &["`DISTLOCK_CFG_NEVER_SET_43` is not set"],
    );

    let e = err(&format!(
        "[defaults]\nwait = \"${{DISTLOCK_CFG_NEVER_SET_44}}\"\n{SINGLE}"
    ));
    check(
        &e,
        2,
        "defaults.wait",
        &["`DISTLOCK_CFG_NEVER_SET_44` is not set"],
    );
}

#[test]
fn unclosed_env_reference() {
    let e = err(&format!("[defaults]\nkey_prefix = \"${{APP\"\n{SINGLE}"));
    check(
        &e,
        2,
        "defaults.key_prefix",
        &["`${` is not closed by `}`", "`$$`"],
    );
}

#[test]
fn env_value_is_validated_after_interpolation() {
    std::env::set_var("DISTLOCK_CFG_T2_URL", "http://u:secret@h");
    let e = err("[backends.main]\nmode = \"single\"\nurl = \"${DISTLOCK_CFG_T2_URL}\"\n");
    check(
        &e,
        3,
        "backends.main.url",
        &["unsupported scheme \"http\"", "u:***@h"],
    );
    assert!(!e.to_string().contains("secret"));
}

#[test]
fn errors_display_location_field_and_message() {
    let e = err("[backends.main]\nmode = \"single\"\n");
    assert_eq!(
        e.to_string(),
        "<string>:1: backends.main.url: missing field `url` (required by mode \"single\")"
    );
}

#[test]
fn no_panic_on_odd_input() {
    let inputs = [
        "\u{feff}[backends.a]\nmode = \"memory\"\n",
        "[[backends]]\nmode = \"memory\"\n",
        "[backends.a]\nmode = \"memory\"\n[backends.a.sub]\nx = 1\n",
        "backends.a.mode.x = 1",
        "[backends.a]\nmode = [\"single\"]\n",
        "[backends.a]\nmode = \"single\"\nurl = \"redis://\u{1F512}\"\n",
        "[backends.a]\nmode = \"single\"\nurl = \"${\"\n",
        "[backends.a]\nmode = \"single\"\nurl = \"$\"\n",
        "\0",
        "[",
        "a = 1979-05-27T07:32:00Z",
        "[backends.a]\nmode = \"redlock\"\nnodes = [\"redis://a\"]\ndrift_factor = 0x7fffffffffffffff\n",
        "[backends.a]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"redis://s\"]\nsync_replicas = 0b1111111111111111111111111111111111111111111111111111111111111111\n",
    ];
    for input in inputs {
        let _ = Config::from_str(input);
    }
    let deep = "a = ".to_owned() + &"[".repeat(10_000);
    assert!(Config::from_str(&deep).is_err());
}

/// A directory with empty `ca.pem`, `client.pem` and `client.key` (the schema only checks
/// that the files exist; their contents are read at `init`).
fn tls_files(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("distlock-cfg-tls-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.pem", "client.pem", "client.key"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    dir
}

#[test]
fn tls_fields_on_every_mode_but_memory() {
    let dir = tls_files("ok");
    let d = dir.display();
    std::env::set_var("DISTLOCK_CFG_T3_TLS_DIR", dir.as_os_str());
    std::env::set_var("DISTLOCK_CFG_T3_SKIP", "false");
    let tls = format!(
        "tls_ca = \"${{DISTLOCK_CFG_T3_TLS_DIR}}/ca.pem\"\ntls_cert = \"{d}/client.pem\"\ntls_key = \"{d}/client.key\"\n"
    );
    let c = ok(&format!(
        "[backends.a]\nmode = \"single\"\nurl = \"rediss://u:pw@10.0.0.1:6380\"\n{tls}tls_insecure_skip_verify = true\n\
         [backends.b]\nmode = \"cluster\"\nnodes = [\"rediss://10.0.0.1\", \"rediss://10.0.0.2\"]\n{tls}\
         [backends.c]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"rediss://10.0.0.1:26379\"]\n{tls}\
         [backends.d]\nmode = \"redlock\"\nnodes = [\"rediss://10.0.0.1\", \"rediss://10.0.0.2\", \"rediss://10.0.0.3\"]\ntls_ca = \"{d}/ca.pem\"\n\
         [backends.e]\nmode = \"multi\"\nnodes = [\"rediss://10.0.0.1\"]\ntls_insecure_skip_verify = \"${{DISTLOCK_CFG_T3_SKIP}}\"\n"
    ));
    let a = &c.backends["a"];
    assert_eq!(a.tls_ca.as_deref(), Some(dir.join("ca.pem").as_path()));
    assert_eq!(
        a.tls_cert.as_deref(),
        Some(dir.join("client.pem").as_path())
    );
    assert_eq!(a.tls_key.as_deref(), Some(dir.join("client.key").as_path()));
    assert!(a.tls_insecure_skip_verify);
    for b in ["b", "c"] {
        assert!(c.backends[b].tls_cert.is_some(), "{b}");
        assert!(!c.backends[b].tls_insecure_skip_verify, "{b}");
    }
    assert!(c.backends["d"].tls_cert.is_none());
    assert!(!c.backends["e"].tls_insecure_skip_verify);
    // Defaults: no CA (the platform's roots), no client certificate, verification on.
    let c = ok("[backends.a]\nmode = \"single\"\nurl = \"rediss://10.0.0.1\"\n");
    let a = &c.backends["a"];
    assert!(a.tls_ca.is_none() && a.tls_cert.is_none() && a.tls_key.is_none());
    assert!(!a.tls_insecure_skip_verify);
}

#[test]
fn tls_field_errors_name_line_and_field() {
    let dir = tls_files("err");
    let d = dir.display();
    let head = "[backends.a]\nmode = \"single\"\nurl = \"rediss://10.0.0.1\"\n";
    let e = err(&format!("{head}tls_ca = \"{d}/nope.pem\"\n"));
    check(&e, 4, "backends.a.tls_ca", &["cannot read", "nope.pem"]);
    let e = err(&format!("{head}tls_ca = \"{d}\"\n"));
    check(&e, 4, "backends.a.tls_ca", &["is not a file"]);
    let e = err(&format!("{head}tls_ca = \"\"\n"));
    check(&e, 4, "backends.a.tls_ca", &["empty"]);
    let e = err(&format!("{head}tls_cert = \"{d}/client.pem\"\n"));
    check(&e, 4, "backends.a.tls_cert", &["needs `tls_key`"]);
    let e = err(&format!("{head}\ntls_key = \"{d}/client.key\"\n"));
    check(&e, 5, "backends.a.tls_key", &["needs `tls_cert`"]);
    let e = err(&format!("{head}tls_insecure_skip_verify = 1\n"));
    check(
        &e,
        4,
        "backends.a.tls_insecure_skip_verify",
        &["expected true or false"],
    );
    let e = err(&format!("{head}tls_insecure_skip_verify = \"yes\"\n"));
    check(
        &e,
        4,
        "backends.a.tls_insecure_skip_verify",
        &["expected true or false"],
    );
    let e = err(&format!("{head}tls_ca = \"${{DISTLOCK_CFG_T4_UNSET}}\"\n"));
    check(&e, 4, "backends.a.tls_ca", &["DISTLOCK_CFG_T4_UNSET"]);
    // TLS fields without rediss://.
    let e = err(&format!(
        "[backends.a]\nmode = \"single\"\nurl = \"redis://10.0.0.1\"\ntls_ca = \"{d}/ca.pem\"\n"
    ));
    check(
        &e,
        4,
        "backends.a.tls_ca",
        &["no URL of this backend uses TLS", "rediss://"],
    );
    // Mixed schemes.
    let e = err(
        "[backends.a]\nmode = \"redlock\"\nnodes = [\"rediss://10.0.0.1\", \"redis://10.0.0.2\"]\n",
    );
    check(
        &e,
        1,
        "backends.a.nodes",
        &["10.0.0.2:6379 is plaintext", "one scheme"],
    );
    // Not on memory.
    let e = err("[backends.a]\nmode = \"memory\"\ntls_insecure_skip_verify = true\n");
    check(
        &e,
        3,
        "backends.a.tls_insecure_skip_verify",
        &["not used by mode \"memory\""],
    );
}

#[test]
fn protocol_field() {
    let c = ok("[backends.a]\nmode = \"single\"\nurl = \"redis://h\"\n");
    assert_eq!(c.backends["a"].protocol, Protocol::Distlock);
    for mode in ["single", "cluster", "sentinel", "redlock"] {
        let where_ = match mode {
            "single" => "url = \"redis://h\"",
            "sentinel" => "master_name = \"m\"\nsentinels = [\"redis://h:26379\"]",
            _ => "nodes = [\"redis://h:1\"]",
        };
        let c = ok(&format!(
            "[backends.a]\nmode = \"{mode}\"\n{where_}\nprotocol = \"redisson\"\n"
        ));
        assert_eq!(c.backends["a"].protocol, Protocol::Redisson, "{mode}");
    }
    let c = ok("[backends.a]\nmode = \"single\"\nurl = \"redis://h\"\nprotocol = \"distlock\"\n");
    assert_eq!(c.backends["a"].protocol, Protocol::Distlock);
    let e = err("[backends.a]\nmode = \"single\"\nurl = \"redis://h\"\nprotocol = \"jedis\"\n");
    check(
        &e,
        4,
        "backends.a.protocol",
        &["unknown protocol \"jedis\"", "\"redisson\""],
    );
    let e = err("[backends.a]\nmode = \"memory\"\nprotocol = \"redisson\"\n");
    check(
        &e,
        3,
        "backends.a.protocol",
        &["not used by mode \"memory\""],
    );
}

#[test]
fn sharded_subscription_mode_field() {
    use distlock_config::{Mode, ShardedSubscriptionMode as S};
    let base = "[backends.a]\nmode = \"cluster\"\nnodes = [\"redis://h:1\"]\n";
    let mode_of = |c: &distlock_config::Config| match &c.backends["a"].mode {
        Mode::Cluster {
            sharded_subscription_mode,
            ..
        } => *sharded_subscription_mode,
        other => panic!("{other:?}"),
    };
    assert_eq!(mode_of(&ok(base)), S::Auto);
    assert_eq!(
        mode_of(&ok(&format!("{base}protocol = \"redisson\"\n"))),
        S::Auto
    );
    for (text, want) in [("auto", S::Auto), ("on", S::On), ("off", S::Off)] {
        let c = ok(&format!(
            "{base}protocol = \"redisson\"\nsharded_subscription_mode = \"{text}\"\n"
        ));
        assert_eq!(mode_of(&c), want, "{text}");
    }
    let e = err(&format!(
        "{base}protocol = \"redisson\"\nsharded_subscription_mode = \"sometimes\"\n"
    ));
    check(
        &e,
        5,
        "backends.a.sharded_subscription_mode",
        &["unknown sharded_subscription_mode \"sometimes\"", "\"off\""],
    );
    let e = err(&format!("{base}sharded_subscription_mode = \"off\"\n"));
    check(
        &e,
        4,
        "backends.a.sharded_subscription_mode",
        &["goes with protocol = \"redisson\""],
    );
    let e = err("[backends.a]\nmode = \"single\"\nurl = \"redis://h\"\nprotocol = \"redisson\"\nsharded_subscription_mode = \"off\"\n");
    check(
        &e,
        5,
        "backends.a.sharded_subscription_mode",
        &["not used by mode \"single\""],
    );
}

#[test]
fn handoff_field() {
    // Default true on every mode that takes it; `false` (or "${VAR}") is barging.
    for mode in ["single", "cluster", "sentinel", "redlock", "multi"] {
        let where_ = match mode {
            "single" => "url = \"redis://h\"",
            "sentinel" => "master_name = \"m\"\nsentinels = [\"redis://h:26379\"]",
            _ => "nodes = [\"redis://h:1\"]",
        };
        let head = format!("[backends.a]\nmode = \"{mode}\"\n{where_}\n");
        assert!(ok(&head).backends["a"].handoff, "{mode}: default");
        let c = ok(&format!("{head}handoff = false\n"));
        assert!(!c.backends["a"].handoff, "{mode}: false");
        let c = ok(&format!("{head}handoff = true\n"));
        assert!(c.backends["a"].handoff, "{mode}: true");
    }
    // Where there is no hand-off it is accepted all the same (and changes nothing).
    let c = ok("[backends.a]\nmode = \"sentinel\"\nmaster_name = \"m\"\nsentinels = [\"redis://h:26379\"]\nsync_replicas = 1\nhandoff = true\n");
    assert!(c.backends["a"].handoff);
    let c = ok("[backends.a]\nmode = \"single\"\nurl = \"redis://h\"\nprotocol = \"redisson\"\nhandoff = true\n");
    assert!(c.backends["a"].handoff);
    std::env::set_var("DISTLOCK_CFG_T5_HANDOFF", "false");
    let c = ok(&format!(
        "{SINGLE}handoff = \"${{DISTLOCK_CFG_T5_HANDOFF}}\"\n"
    ));
    assert!(!c.backends["main"].handoff);

    let e = err(&format!("{SINGLE}handoff = 0\n"));
    check(
        &e,
        4,
        "backends.main.handoff",
        &["expected true or false", "found integer"],
    );
    let e = err(&format!("{SINGLE}handoff = \"barging\"\n"));
    check(
        &e,
        4,
        "backends.main.handoff",
        &["expected true or false", "\"barging\""],
    );
    let e = err(&format!(
        "{SINGLE}handoff = \"${{DISTLOCK_CFG_T5_UNSET}}\"\n"
    ));
    check(&e, 4, "backends.main.handoff", &["DISTLOCK_CFG_T5_UNSET"]);
    // Like every backend field, not on memory.
    let e = err("[backends.t]\nmode = \"memory\"\nhandoff = false\n");
    check(
        &e,
        3,
        "backends.t.handoff",
        &["field `handoff` is not used by mode \"memory\""],
    );
    // In a file: the file's name, the line and the field.
    let path = temp_file("handoff", &format!("{SINGLE}\nhandoff = []\n"));
    let e = Config::from_path(&path).unwrap_err();
    assert_eq!(e.location, format!("{}:5", path.display()));
    assert_eq!(e.field, "backends.main.handoff");
    assert!(
        e.message.contains("expected true or false, found array"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}
