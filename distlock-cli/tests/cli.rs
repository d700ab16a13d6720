//! The `distlock` binary run as a user runs it, against the shared single test server
//! (`scripts/test.sh` starts it; `DISTLOCK_TEST_SINGLE`). The other process holding locks
//! is `distlock run` itself (every kind, with `--kind`), or this test process through the
//! library.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use distlock::{LockKind, Registry};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// A configuration file for the single test server, with keys under a prefix of this test.
struct Setup {
    path: PathBuf,
    toml: String,
    /// The `key_prefix` of this test's keys.
    prefix: String,
}

impl Setup {
    fn new(test: &str) -> Setup {
        let url = distlock_tests::single_url();
        let prefix = format!("cli-{}-{test}:", std::process::id());
        let toml = format!(
            "[defaults]\nwatchdog_timeout = \"1s\"\nwait = \"30s\"\nkey_prefix = \"{prefix}\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nholder_info = true\n"
        );
        let path =
            std::env::temp_dir().join(format!("distlock-cli-{}-{test}.toml", std::process::id()));
        std::fs::write(&path, &toml).expect("write config");
        Setup { path, toml, prefix }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&self.path).args(args);
        c.env_remove("DISTLOCK_CONFIG");
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run distlock")
    }

    /// `distlock run --kind KIND KEY -- sh -c 'echo HELD $TOKEN; exec sleep 60'`, returned
    /// once it holds the lock (`wait_held`), or at once.
    fn hold(&self, kind: &str, key: &str, wait_held: bool) -> (Child, Option<u64>) {
        let mut child = self
            .cmd(&[
                "run",
                "--kind",
                kind,
                "--grace",
                "2s",
                key,
                "--",
                "sh",
                "-c",
                "echo HELD $DISTLOCK_FENCING_TOKEN; exec sleep 60",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn distlock run");
        if !wait_held {
            return (child, None);
        }
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("stdout"))
            .read_line(&mut line)
            .expect("read HELD");
        let token = line
            .strip_prefix("HELD ")
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("expected `HELD <token>`, got {line:?}"));
        (child, Some(token))
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON output")
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Wait (at most `limit`) for a child's exit status.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(flavour, its version, redis_version)` of the single test server, from `INFO server`.
fn server_identity() -> (String, String, String) {
    let addr = distlock_tests::addr_of(&distlock_tests::single_url());
    let info = match distlock_tests::resp_command(&addr, &["INFO", "server"]) {
        Ok(distlock_tests::RespValue::Bulk(b)) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO server on {addr}: {other:?}"),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
    };
    let redis_version = field("redis_version").expect("redis_version in INFO");
    match field("valkey_version") {
        Some(v) => ("Valkey".into(), v, redis_version),
        None => ("Redis".into(), redis_version.clone(), redis_version),
    }
}

/// `check` with `valkey://` URLs: the same server, reached by the Valkey spelling of the
/// scheme.
#[test]
fn check_accepts_valkey_urls() {
    let setup = Setup::new("check-valkey-url");
    let url = distlock_tests::single_url().replacen("redis://", "valkey://", 1);
    assert!(url.starts_with("valkey://"), "{url}");
    let toml = setup.toml.replace(&distlock_tests::single_url(), &url);
    std::fs::write(&setup.path, &toml).unwrap();
    let rows = setup.json(&["check", "--json"]);
    let row = &rows.as_array().expect("an array")[0];
    assert_eq!(row["status"], "ok", "{row}");
    assert_eq!(row["reachable"], true, "{row}");
}

#[test]
fn check_reports_good_and_broken_backends() {
    let setup = Setup::new("check");
    let out = setup.output(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("main") && stdout.contains("ok"), "{stdout}");

    // A second backend nobody listens on: that row fails, naming backend and address.
    let port = distlock_tests::allocate_port();
    let broken = format!(
        "{}[backends.gone]\nmode = \"single\"\nurl = \"redis://127.0.0.1:{port}\"\nconnect_timeout = \"300ms\"\n",
        setup.toml
    );
    std::fs::write(&setup.path, broken).unwrap();
    let out = setup.output(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("gone"))
        .expect("a row for `gone`");
    assert!(
        row.contains("FAILED") && row.contains(&format!("127.0.0.1:{port}")),
        "{row}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("main") && l.contains(" ok")),
        "{stdout}"
    );

    // --json: one object per server, with the self-check's fields.
    std::fs::write(&setup.path, &setup.toml).unwrap();
    let rows = setup.json(&["check", "--json"]);
    let row = &rows.as_array().expect("an array")[0];
    assert_eq!(row["backend"], "main", "{row}");
    assert_eq!(row["status"], "ok", "{row}");
    assert_eq!(row["reachable"], true, "{row}");
    assert_eq!(row["tls"], false, "{row}");
    assert_eq!(row["auth"], "none", "{row}");
    assert_eq!(row["permissions"], "ok", "{row}");
    // The server's flavour and version, as its INFO says (Redis 7.0/8.x or Valkey 8.x:
    // Valkey's redis_version is the Redis version it is compatible with).
    let (flavour, version, redis_version) = server_identity();
    assert_eq!(row["server"], flavour.as_str(), "{row}");
    assert_eq!(row["version"], version.as_str(), "{row}");
    assert_eq!(row["redis_version"], redis_version.as_str(), "{row}");
    assert!(row["eviction"].is_string(), "{row}");
    let out = setup.output(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header = stdout.lines().next().unwrap_or_default();
    let main = stdout
        .lines()
        .find(|l| l.starts_with("main"))
        .unwrap_or_default();
    assert!(header.contains("SERVER"), "{stdout}");
    assert!(main.contains(&format!("{flavour} {version}")), "{stdout}");

    // A configuration that does not parse: exit 1 naming the file's line and field.
    std::fs::write(&setup.path, "[backends.x]\nmode = \"nope\"\n").unwrap();
    let out = setup.output(&["check"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mode"), "{stderr}");
}

/// An ACL user missing one right: `check` fails, naming the right, its user and address;
/// the password appears nowhere.
#[test]
fn check_names_a_missing_right() {
    let server = distlock_tests::RedisProcess::start();
    let password = "Cli-s3cret-pw";
    let mut args = vec!["ACL", "SETUSER", "app", "on"];
    let pw = format!(">{password}");
    args.push(&pw);
    // The README's rights but +hincrby.
    args.extend_from_slice(&["resetkeys", "resetchannels", "-@all"]);
    args.extend(
        distlock_tests::README_ACL_RIGHTS
            .iter()
            .copied()
            .filter(|r| *r != "+hincrby"),
    );
    let r = distlock_tests::resp_command(&server.addr(), &args).expect("ACL SETUSER");
    assert!(r.is_ok(), "{r:?}");
    let path = std::env::temp_dir().join(format!("distlock-cli-{}-acl.toml", std::process::id()));
    let toml = format!(
        "[backends.main]\nmode = \"single\"\nurl = \"redis://app:{password}@{}\"\n",
        server.addr()
    );
    std::fs::write(&path, toml).unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_remove("DISTLOCK_CONFIG")
            .output()
            .expect("run distlock")
    };
    let out = run(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("main"))
        .expect("a row for main");
    assert!(
        row.contains("FAILED") && row.contains("missing +hincrby"),
        "{row}"
    );
    assert!(row.contains(&server.addr()) && row.contains("app"), "{row}");
    assert!(!stdout.contains(password) && !stderr.contains(password));
    let out = run(&["check", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let row = &rows[0];
    assert_eq!(row["status"], "FAILED", "{row}");
    assert_eq!(row["auth"], "app", "{row}");
    assert_eq!(row["permissions"], "missing", "{row}");
    assert_eq!(
        row["missing_rights"],
        serde_json::json!(["missing +hincrby"]),
        "{row}"
    );
    let _ = std::fs::remove_file(&path);
}

/// `maxmemory-policy allkeys-lru`: `check` warns (exit 0) and `init` (here through `list`)
/// logs a warning naming the backend, the address and the policy.
#[test]
fn an_evicting_policy_warns() {
    let server =
        distlock_tests::RedisProcess::start_with_args(&["--maxmemory-policy", "allkeys-lru"]);
    let path = std::env::temp_dir().join(format!("distlock-cli-{}-evict.toml", std::process::id()));
    let toml = format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        server.url()
    );
    std::fs::write(&path, toml).unwrap();
    let run = |args: &[&str]| {
        Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .args(args)
            .env_remove("DISTLOCK_CONFIG")
            .env_remove("DISTLOCK_LOG")
            .output()
            .expect("run distlock")
    };
    let out = run(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("main"))
        .expect("a row");
    assert!(row.contains("WARN") && row.contains("allkeys-lru"), "{row}");
    let out = run(&["list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("maxmemory-policy")
            && stderr.contains("allkeys-lru")
            && stderr.contains(&server.addr())
            && stderr.contains("main"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn list_and_show_locks_of_every_kind_held_by_another_process() {
    let setup = Setup::new("list");
    let mut children = Vec::new();
    let mut pids = Vec::new();
    for (kind, key) in [
        ("reentrant", "job:r"),
        ("fair", "job:f"),
        ("read", "job:rd"),
        ("write", "job:w"),
    ] {
        let (child, token) = setup.hold(kind, key, true);
        assert!(token.unwrap() >= 1);
        pids.push((key, kind, child.id()));
        children.push(child);
    }
    // One waiter each on the fair and the write lock.
    for (kind, key) in [("fair", "job:f"), ("write", "job:w")] {
        let (child, _) = setup.hold(kind, key, false);
        children.push(child);
    }
    let host = hostname();
    let deadline = Instant::now() + Duration::from_secs(20);
    let list = loop {
        let list = setup.json(&["list", "job:*", "--json"]);
        let waiting = |key: &str| {
            list.as_array()
                .unwrap()
                .iter()
                .any(|l| l["key"] == key && l["waiters"].as_array().is_some_and(|w| w.len() == 1))
        };
        if waiting("job:f") && waiting("job:w") {
            break list;
        }
        assert!(Instant::now() < deadline, "waiters never showed: {list:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let locks = list.as_array().unwrap();
    assert_eq!(locks.len(), 4, "{list:#}");
    for (key, kind, pid) in &pids {
        let l = locks
            .iter()
            .find(|l| l["key"] == *key)
            .unwrap_or_else(|| panic!("{key} listed: {list:#}"));
        assert_eq!(l["kind"], *kind, "{l:#}");
        assert!(l["ttl_ms"].as_u64().unwrap() > 0, "{l:#}");
        assert!(l["token"].as_u64().unwrap() >= 1, "{l:#}");
        let holders = l["holders"].as_array().unwrap();
        assert_eq!(holders.len(), 1, "{l:#}");
        assert_eq!(holders[0]["pid"], *pid, "{l:#}");
        assert_eq!(holders[0]["host"], host.as_str(), "{l:#}");
        assert_eq!(holders[0]["site"], "distlock run", "{l:#}");
        assert!(holders[0]["since"].as_u64().unwrap() > 0, "{l:#}");
    }

    // show: the same for one key; the table names host and pid too.
    let shown = setup.json(&["show", "job:w", "--json"]);
    assert_eq!(shown[0]["kind"], "write");
    assert_eq!(shown[0]["waiters"].as_array().unwrap().len(), 1);
    let out = setup.output(&["show", "job:r"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&format!("{host}:{}", pids[0].2)), "{table}");
    assert!(table.starts_with("KEY"), "{table}");

    // Clean up: force-release everything until every `run` has ended with 74 (lease
    // lost): the waiters get their lock after the first round and lose it in a later one.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut running = children;
    while !running.is_empty() {
        for key in ["job:r", "job:f", "job:rd", "job:w"] {
            let out = setup.output(&["unlock", key, "--yes"]);
            assert!(out.status.success());
        }
        std::thread::sleep(Duration::from_millis(200));
        running.retain_mut(|c| match c.try_wait().expect("try_wait") {
            Some(status) => {
                assert_eq!(status.code(), Some(74));
                false
            }
            None => true,
        });
        if Instant::now() > deadline {
            for c in &mut running {
                let _ = c.kill();
            }
            panic!("{} `distlock run` processes did not end", running.len());
        }
    }
}

/// Waiters of the kinds that are not queued in Redis count too: two processes waiting for
/// a reentrant lock, one reader process waiting behind a write lock (`waiting_processes`,
/// and `2 proc` in the table).
#[test]
fn list_and_show_count_waiting_processes_of_every_kind() {
    let setup = Setup::new("waiting");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let held = rt.block_on(registry.lock("wait:r").acquire()).unwrap();
    let writing = rt
        .block_on(registry.lock("wait:w").kind(LockKind::Write).acquire())
        .unwrap();
    let mut children = vec![
        setup.hold("reentrant", "wait:r", false).0,
        setup.hold("reentrant", "wait:r", false).0,
        setup.hold("read", "wait:w", false).0,
    ];
    let processes =
        |key: &str| setup.json(&["show", key, "--json"])[0]["waiting_processes"].as_u64();
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes("wait:r") != Some(2) || processes("wait:w") != Some(1) {
        assert!(
            Instant::now() < deadline,
            "waiting processes never showed: {:?} {:?}",
            setup.json(&["show", "wait:r", "--json"]),
            setup.json(&["show", "wait:w", "--json"])
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let list = setup.json(&["list", "wait:*", "--json"]);
    let r = list
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "wait:r")
        .unwrap_or_else(|| panic!("wait:r listed: {list:#}"));
    assert_eq!(r["waiting_processes"], 2, "{r:#}");
    let out = setup.output(&["show", "wait:r"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("2 proc"), "{table}");

    rt.block_on(held.release()).unwrap();
    rt.block_on(writing.release()).unwrap();
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    for key in ["wait:r", "wait:w"] {
        assert!(setup.output(&["unlock", key, "--yes"]).status.success());
    }
}

#[test]
fn unlock_frees_the_lock_and_the_holder_finds_it_lost() {
    let setup = Setup::new("unlock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let guard = rt.block_on(registry.lock("stuck").acquire()).unwrap();

    // Without --yes it asks; "n" keeps the lock.
    let mut child = setup
        .cmd(&["unlock", "stuck"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(guard.is_held());

    let out = setup.output(&["unlock", "stuck", "--yes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("{}:{}", hostname(), std::process::id())),
        "prints who held it: {stdout}"
    );
    assert!(stdout.contains("released"), "{stdout}");
    let lost =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), guard.lost()).await });
    assert!(
        matches!(lost, Ok(distlock::LockError::LeaseLost { .. })),
        "{lost:?}"
    );
    let shown = setup.json(&["show", "stuck", "--json"]);
    assert_eq!(shown, serde_json::json!([]));
    // The lock is free again.
    let again = rt
        .block_on(
            registry
                .lock("stuck")
                .kind(LockKind::Reentrant)
                .try_acquire(),
        )
        .unwrap();
    assert!(again.is_some());
}

/// `distlock unlock leader:NAME --yes` is heard by the leader at once (without it: two leaders
/// for 5 s): its `lost()` resolves within 1 s of the command's exit, while its next renewal
/// (`watchdog_timeout = "30s"`) is 10 s away.
#[test]
fn unlock_is_heard_by_the_holder_at_once() {
    let setup = Setup::new("unlock-at-once");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let holder_toml = setup
        .toml
        .replace("watchdog_timeout = \"1s\"", "watchdog_timeout = \"30s\"");
    let registry = rt.block_on(Registry::from_str(&holder_toml)).unwrap();
    let leader = rt
        .block_on(registry.leader("auditor").campaign())
        .expect("campaign");
    let out = setup.output(&["unlock", "leader:auditor", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exited = std::time::Instant::now();
    let lost =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(1), leader.lost()).await });
    assert!(
        matches!(lost, Ok(distlock::LockError::LeaseLost { .. })),
        "the leader did not hear of `distlock unlock` within 1 s: {lost:?}"
    );
    eprintln!(
        "distlock unlock: the leader heard {:?} after the command exited",
        exited.elapsed()
    );
    assert!(!leader.is_leader());
}

#[test]
fn run_passes_exit_code_and_token_and_refuses_when_busy() {
    let setup = Setup::new("run");
    let out = setup.output(&[
        "run",
        "cron",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let first: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a token");
    assert!(first >= 1);
    let out = setup.output(&[
        "run",
        "cron",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let second: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(second > first, "tokens grow: {first} then {second}");
    // A child ended by a signal: 128 + the signal, as a shell reports it.
    let out = setup.output(&["run", "cron", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));

    // Busy: another holder; after --wait, exit 75 without running the command.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let guard = rt.block_on(registry.lock("cron").acquire()).unwrap();
    let out = setup.output(&[
        "run", "cron", "--wait", "200ms", "--", "sh", "-c", "echo RAN",
    ]);
    assert_eq!(out.status.code(), Some(75));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"));
    rt.block_on(guard.release()).unwrap();
}

#[test]
fn run_kills_the_child_when_the_lease_is_lost() {
    let setup = Setup::new("lost");
    let marker = std::env::temp_dir().join(format!("distlock-cli-lost-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "trap 'echo TERM > {}; exit 0' TERM; echo HELD $DISTLOCK_FENCING_TOKEN; while :; do sleep 0.05; done",
        marker.display()
    );
    let mut child = setup
        .cmd(&["run", "--grace", "2s", "nightly", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("HELD "), "{line:?}");
    let out = setup.output(&["unlock", "nightly", "--yes"]);
    assert!(out.status.success());
    // The watchdog (lease 1s) finds the lock gone within about a third of the lease.
    let status = wait_exit(&mut child, Duration::from_secs(15));
    assert_eq!(status.code(), Some(74));
    let got = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(got.trim(), "TERM", "the child got SIGTERM");
    let _ = std::fs::remove_file(&marker);
}

/// `kill -SIG pid` (SIGSTOP/SIGCONT of the `distlock` process under test).
fn send_signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Whether process `pid` still exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) STATE ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Start `distlock run --grace GRACE KEY -- sh -c SCRIPT` where SCRIPT prints
/// `HELD <token> <pid of the shell>` first; returns the process, the token and the pid.
fn run_printing_held(setup: &Setup, key: &str, grace: &str, script: &str) -> (Child, u64, u32) {
    let script =
        format!("{script}; echo HELD $DISTLOCK_FENCING_TOKEN $$; while :; do sleep 0.05; done");
    let mut child = setup
        .cmd(&["run", "--grace", grace, key, "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        ["HELD", token, pid] => (child, token.parse().unwrap(), pid.parse().unwrap()),
        _ => panic!("expected `HELD <token> <pid>`, got {line:?}"),
    }
}

/// SIGSTOP the `distlock run` process until its lease (auto, watchdog_timeout 1s) has
/// expired on the server and another holder took the lock, then SIGCONT it: it must find
/// its lease lost and stop its child. Returns the other holder's guard (still held) and
/// how long `run` took from SIGCONT to its exit.
fn stop_past_the_lease(
    setup: &Setup,
    rt: &tokio::runtime::Runtime,
    registry: &Registry,
    key: &str,
    cli: &mut Child,
    cli_token: u64,
) -> (distlock::LockGuard, Duration) {
    // The token the child sees is the lock's.
    let shown = setup.json(&["show", key, "--json"]);
    assert_eq!(shown[0]["token"], cli_token, "{shown:#}");
    assert_eq!(shown[0]["holders"][0]["pid"], cli.id(), "{shown:#}");

    send_signal("STOP", cli.id());
    // Its watchdog cannot renew: the lease runs out on the server, and another holder
    // takes the lock (polled: the expiry is the server's).
    let deadline = Instant::now() + Duration::from_secs(15);
    let other = loop {
        if let Some(g) = rt.block_on(registry.lock(key).try_acquire()).unwrap() {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped holder's lease never expired"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(other.fencing_token() > cli_token);
    assert!(cli.try_wait().unwrap().is_none(), "stopped, not exited");

    send_signal("CONT", cli.id());
    let resumed = Instant::now();
    let status = wait_exit(cli, Duration::from_secs(20));
    let took = resumed.elapsed();
    assert_eq!(status.code(), Some(74), "exit 74: the lease was lost");
    let mut stderr = String::new();
    std::io::Read::read_to_string(cli.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("SIGTERM"), "{stderr}");

    // `run` released nothing of the new holder's.
    assert!(other.is_held());
    let shown = setup.json(&["show", key, "--json"]);
    assert_eq!(shown[0]["token"], other.fencing_token(), "{shown:#}");
    assert_eq!(
        shown[0]["holders"][0]["pid"],
        std::process::id(),
        "{shown:#}"
    );
    (other, took)
}

#[test]
fn run_stopped_past_its_lease_terms_the_child_and_exits_74() {
    let setup = Setup::new("sigstop");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let marker = std::env::temp_dir().join(format!("distlock-cli-sigstop-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let (mut cli, token, shell) = run_printing_held(
        &setup,
        "nightly",
        "10s",
        &format!("trap 'echo TERM > {}; exit 0' TERM", marker.display()),
    );
    let (other, took) = stop_past_the_lease(&setup, &rt, &registry, "nightly", &mut cli, token);
    // The child stopped on SIGTERM, well before the 10 s grace.
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "TERM",
        "the child got SIGTERM"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(!alive(shell));
    rt.block_on(other.release()).unwrap();
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn run_stopped_past_its_lease_kills_a_child_that_ignores_sigterm() {
    let setup = Setup::new("sigkill");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let (mut cli, token, shell) = run_printing_held(&setup, "nightly", "1s", "trap '' TERM");
    let (other, took) = stop_past_the_lease(&setup, &rt, &registry, "nightly", &mut cli, token);
    // SIGTERM was ignored: SIGKILL came after the 1 s grace.
    assert!(took >= Duration::from_secs(1), "took {took:?}");
    assert!(!alive(shell), "the child {shell} was killed");
    rt.block_on(other.release()).unwrap();
}

#[test]
fn run_refuses_a_lease_out_of_range_before_connecting() {
    let setup = Setup::new("lease-range");
    for lease in ["25h", "24h1ms"] {
        let out = setup.output(&["run", "--lease", lease, "job", "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A usage error (2), as clap reports a bad argument, not a failed acquisition (1).
        assert_eq!(out.status.code(), Some(2), "{lease}: {stderr}");
        assert!(stderr.contains("between 1ms and 24h"), "{lease}: {stderr}");
    }
}

/// Wait (at most `limit`) until process `pid` is gone (or a zombie); whether it went.
fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while alive(pid) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// `distlock run KEY -- sh -c '<background sleep>; echo HELD token shell sleeper; wait'`:
/// the command leaves a grandchild (the background `sleep`). Returns the process, the
/// shell's pid and the grandchild's.
fn run_with_a_grandchild(setup: &Setup, key: &str) -> (Child, u32, u32) {
    let script = "sleep 1000 & echo HELD $DISTLOCK_FENCING_TOKEN $$ $!; wait";
    let mut child = setup
        .cmd(&["run", "--grace", "1s", key, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        ["HELD", _token, shell, sleeper] => {
            (child, shell.parse().unwrap(), sleeper.parse().unwrap())
        }
        _ => panic!("expected `HELD <token> <shell> <sleeper>`, got {line:?}"),
    }
}

#[test]
fn run_stops_the_whole_process_tree_when_the_lease_is_lost() {
    let setup = Setup::new("tree-lost");
    let (mut cli, shell, sleeper) = run_with_a_grandchild(&setup, "tree");
    assert!(alive(sleeper));
    // The key vanishes behind the holder.
    let out = setup.output(&["unlock", "tree", "--yes"]);
    assert!(out.status.success());
    let status = wait_exit(&mut cli, Duration::from_secs(15));
    assert_eq!(status.code(), Some(74));
    assert!(
        gone_within(shell, Duration::from_secs(5)),
        "the shell {shell} was stopped"
    );
    let went = gone_within(sleeper, Duration::from_secs(5));
    if !went {
        // Do not leave it behind for the next run.
        send_signal("KILL", sleeper);
    }
    assert!(went, "the grandchild {sleeper} was stopped with its group");
}

#[test]
fn run_stops_the_process_tree_when_the_command_exits_first() {
    let setup = Setup::new("tree-exit");
    // The command exits at once, leaving a background process behind.
    let out = setup.output(&[
        "run",
        "tree",
        "--",
        "sh",
        "-c",
        "sleep 1000 > /dev/null 2>&1 & echo $!",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sleeper: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let went = gone_within(sleeper, Duration::from_secs(5));
    if !went {
        send_signal("KILL", sleeper);
    }
    assert!(
        went,
        "the leftover {sleeper} was stopped with the lock's release"
    );
}

#[test]
fn killing_run_kills_the_command_and_its_children() {
    let setup = Setup::new("tree-killed");
    let (mut cli, shell, sleeper) = run_with_a_grandchild(&setup, "tree");
    send_signal("KILL", cli.id());
    let _ = wait_exit(&mut cli, Duration::from_secs(5));
    let shell_went = gone_within(shell, Duration::from_secs(5));
    let sleeper_went = gone_within(sleeper, Duration::from_secs(5));
    for (pid, went) in [(shell, shell_went), (sleeper, sleeper_went)] {
        if !went {
            send_signal("KILL", pid);
        }
    }
    assert!(shell_went, "the command {shell} died with `distlock run`");
    assert!(sleeper_went, "its child {sleeper} died with `distlock run`");
}

/// Frames of `distlock watch` output (each starts with its `distlock watch` header line),
/// read on a thread.
fn watch_frames(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut frame = String::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("distlock watch")
                && !frame.is_empty()
                && tx.send(std::mem::take(&mut frame)).is_err()
            {
                return;
            }
            frame.push_str(&line);
            frame.push('\n');
        }
        let _ = tx.send(frame);
    });
    rx
}

/// The next frame of `frames` for which `want` holds (within 20 s).
fn frame_where(
    frames: &std::sync::mpsc::Receiver<String>,
    all: &mut String,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match frames.recv_timeout(left) {
            Ok(frame) => {
                all.push_str(&frame);
                if want(&frame) {
                    return frame;
                }
            }
            Err(e) => panic!("no watch frame with {what} ({e}); output so far:\n{all}"),
        }
    }
}

/// The table row of `key` in a frame.
fn row_of<'a>(frame: &'a str, key: &str) -> Option<&'a str> {
    frame
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
}

#[test]
fn watch_follows_holders_and_waiters_live_in_plain_text() {
    let setup = Setup::new("watch");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let host = hostname();
    // This process holds a fair lock; a `distlock run` process waits for it.
    let guard = rt
        .block_on(registry.lock("job:q").kind(LockKind::Fair).acquire())
        .unwrap();
    let (mut waiter, _) = setup.hold("fair", "job:q", false);

    let mut watch = setup
        .cmd(&["watch", "job:*", "--interval", "200ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let frames = watch_frames(&mut watch);
    let mut all = String::new();
    let me = format!("{host}:{}", std::process::id());
    let held = frame_where(&frames, &mut all, "job:q held with one waiter", |f| {
        row_of(f, "job:q").is_some_and(|r| r.contains(&me) && r.ends_with(" 1"))
    });
    assert!(held.lines().nth(1).unwrap().starts_with("KEY"), "{held}");
    let row = row_of(&held, "job:q").unwrap();
    assert!(row.contains("fair") && row.contains("cli.rs:"), "{row}");

    // Released: the waiter holds it now, nobody waits.
    rt.block_on(guard.release()).unwrap();
    let them = format!("{host}:{} distlock run", waiter.id());
    frame_where(&frames, &mut all, "job:q passed to the waiter", |f| {
        row_of(f, "job:q").is_some_and(|r| r.contains(&them) && r.ends_with(" 0"))
    });

    // The waiter's lock force-released and its `run` ended: the key leaves the view.
    let out = setup.output(&["unlock", "job:q", "--yes"]);
    assert!(out.status.success());
    assert_eq!(
        wait_exit(&mut waiter, Duration::from_secs(15)).code(),
        Some(74)
    );
    frame_where(&frames, &mut all, "job:q gone", |f| {
        f.contains("KEY") && row_of(f, "job:q").is_none()
    });
    let _ = watch.kill();
    let _ = watch.wait();
    // Not a terminal: plain text, no escape sequences (colour, screen clearing).
    assert!(!all.contains('\u{1b}'), "escape sequences in:\n{all}");

    // --count N: N refreshes, then exit 0.
    let out = setup.output(&["watch", "job:*", "--interval", "100ms", "--count", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("distlock watch").count(), 2, "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
}

/// `EXISTS name` on the single test server.
fn exists(name: &str) -> bool {
    let addr = distlock_tests::addr_of(&distlock_tests::single_url());
    match distlock_tests::resp_command(&addr, &["EXISTS", name]) {
        Ok(distlock_tests::RespValue::Integer(n)) => n == 1,
        other => panic!("EXISTS {name}: {other:?}"),
    }
}

/// The holder information fields (`i:<owner id>`) of the lock `name` on the single test
/// server: a reentrant or fair lock's record (`lock_fields`), a read-write lock's hash.
fn info_fields(name: &str) -> Vec<String> {
    use distlock_tests::{resp_command, RespValue};
    let addr = distlock_tests::addr_of(&distlock_tests::single_url());
    let fields: Vec<String> = match resp_command(&addr, &["TYPE", name]) {
        Ok(t) if t.as_str() == Some("hash") => match resp_command(&addr, &["HKEYS", name]) {
            Ok(RespValue::Array(fields)) => fields
                .iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect(),
            other => panic!("HKEYS {name}: {other:?}"),
        },
        _ => distlock_tests::lock_fields(&addr, name)
            .into_iter()
            .map(|(f, _)| f)
            .collect(),
    };
    fields.into_iter().filter(|f| f.starts_with("i:")).collect()
}

#[test]
fn holder_information_goes_with_the_lock_and_can_be_switched_off() {
    let setup = Setup::new("info");
    let prefix = format!("cli-{}-info:", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    for (kind, suffix) in [
        (LockKind::Reentrant, ""),
        (LockKind::Fair, ":fair"),
        (LockKind::Read, ":rw"),
        (LockKind::Write, ":rw"),
    ] {
        // In the lock's own record or hash: no key of its own.
        let hash = format!("{prefix}{{k}}{suffix}");
        assert!(!exists(&format!("{hash}:info")));
        let outer = rt
            .block_on(registry.lock("k").kind(kind).acquire())
            .unwrap();
        let written = info_fields(&hash);
        assert_eq!(
            written.len(),
            1,
            "{kind:?}: written in {hash} with the lock"
        );
        // Re-entered: one holder, count 2.
        let inner = rt
            .block_on(outer.scope(registry.lock("k").kind(kind).acquire()))
            .unwrap();
        let shown = rt.block_on(registry.inspect("k", None)).unwrap();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(shown[0].kind, kind);
        assert_eq!(shown[0].holders[0].count, 2, "{shown:?}");
        assert_eq!(shown[0].holders[0].pid, Some(std::process::id()));
        assert_eq!(shown[0].holders[0].token, Some(outer.fencing_token()));
        assert!(
            shown[0].holders[0]
                .site
                .as_deref()
                .unwrap()
                .contains("cli.rs:"),
            "{shown:?}"
        );
        assert_eq!(written[0], format!("i:{}", shown[0].holders[0].owner));
        // Since when: the acquiring process's clock in ms (a read-write lock: the server's TIME).
        let held_for = shown[0].holders[0].held_for;
        assert!(
            held_for.is_some_and(|d| d < Duration::from_secs(60)),
            "{kind:?}: held for {held_for:?}"
        );
        rt.block_on(inner.release()).unwrap();
        assert_eq!(info_fields(&hash), written);
        rt.block_on(outer.release()).unwrap();
        assert!(!exists(&hash), "{kind:?}: {hash} deleted with the lock");
        assert!(info_fields(&hash).is_empty());
    }

    // holder_info = false: holders are listed without host and pid, nothing else written.
    let off = setup
        .toml
        .replace("holder_info = true", "holder_info = false");
    let registry = rt.block_on(Registry::from_str(&off)).unwrap();
    let guard = rt.block_on(registry.lock("k").acquire()).unwrap();
    assert!(info_fields(&format!("{prefix}{{k}}")).is_empty());
    let shown = rt.block_on(registry.inspect("k", None)).unwrap();
    assert_eq!(shown[0].holders.len(), 1);
    assert_eq!(shown[0].holders[0].host, None);
    rt.block_on(guard.release()).unwrap();
}

#[test]
fn list_on_a_cluster_and_show_on_redlock() {
    let nodes = |urls: Vec<String>| {
        urls.iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let prefix = format!("cli-{}-topo:", std::process::id());
    let toml = format!(
        "[defaults]\nbackend = \"c\"\nkey_prefix = \"{prefix}\"\n[backends.c]\nmode = \"cluster\"\nnodes = [{}]\nholder_info = true\n[backends.r]\nmode = \"redlock\"\nnodes = [{}]\nholder_info = true\n",
        nodes(distlock_tests::cluster_urls()),
        nodes(distlock_tests::redlock_urls())
    );
    let setup = Setup::new("topo");
    std::fs::write(&setup.path, &toml).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&toml)).unwrap();
    // Enough keys to land on every master.
    let keys: Vec<String> = (0..24).map(|i| format!("slot:{i}")).collect();
    let guards: Vec<_> = keys
        .iter()
        .map(|k| rt.block_on(registry.lock(k.clone()).acquire()).unwrap())
        .collect();
    let list = setup.json(&["list", "slot:*", "--backend", "c", "--json"]);
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = keys.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(listed, want);
    for l in list.as_array().unwrap() {
        assert_eq!(l["holders"][0]["pid"], std::process::id());
        // The master holding the key (one `host:port`), not the seed list.
        let address = l["address"].as_str().unwrap();
        let name = format!("{prefix}{{{}}}", l["key"].as_str().unwrap());
        assert_eq!(
            distlock_tests::resp_command(address, &["EXISTS", &name]),
            Ok(distlock_tests::RespValue::Integer(1)),
            "{l:#}: the address is the master holding {name}"
        );
    }
    for g in guards {
        rt.block_on(g.release()).unwrap();
    }

    let guard = rt
        .block_on(registry.lock("quorum-job").backend("r").acquire())
        .unwrap();
    let shown = setup.json(&["show", "quorum-job", "--backend", "r", "--json"]);
    assert_eq!(shown.as_array().unwrap().len(), 1, "{shown:#}");
    assert_eq!(shown[0]["holders"][0]["pid"], std::process::id());
    assert_eq!(shown[0]["kind"], "reentrant");
    let listed = setup.json(&["list", "--backend", "r", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["key"] == "quorum-job"),
        "{listed:#}"
    );
    rt.block_on(guard.release()).unwrap();
    let shown = setup.json(&["show", "quorum-job", "--backend", "r", "--json"]);
    assert_eq!(shown, serde_json::json!([]));
}

/// A command that cannot start: `run` says so, exits 127 (as `env` does), and the lock is
/// free by the time it returns, every time (its release is sent and answered before the
/// process exits, not left to a background task that the exit cuts short).
#[test]
fn run_frees_the_lock_when_its_command_cannot_start() {
    let setup = Setup::new("nostart");
    let hash = format!("{}{{nightly}}", setup.prefix);
    for i in 0..25 {
        let out = setup.output(&["run", "nightly", "--lease", "30s", "--", "/nonexistent"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !exists(&hash),
            "run {i}: the lock is still held after `run` returned ({stderr})"
        );
        assert_eq!(out.status.code(), Some(127), "run {i}: {stderr}");
        assert!(stderr.contains("/nonexistent"), "run {i}: {stderr}");
    }
    let out = setup.output(&["show", "nightly"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "nightly: not held"
    );
}

/// The scheduling state of process `pid` (`R`, `S`, `T` stopped, `Z`, ...), `None` when gone.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether process `pid` is stopped (`T`), or has a SIGSTOP pending, so that it runs no
/// more of its own code: on a loaded machine a process may wait long for the CPU time it
/// takes to act on the signal, and one in an uninterruptible wait (`D`: dash waits for a
/// `vfork`ed child that way) acts on it only when that wait ends.
fn stopped_or_stopping(pid: u32) -> bool {
    if state_of(pid) == Some('T') {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let stop = 1u64 << (libc::SIGSTOP - 1);
    status.lines().any(|l| {
        ["ShdPnd:", "SigPnd:"].iter().any(|field| {
            l.strip_prefix(field)
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .is_some_and(|mask| mask & stop != 0)
        })
    }) || state_of(pid) == Some('T')
}

/// `distlock run --lease 2s` stopped by `signal` (TSTP: Ctrl-Z, or STOP) until its lease has
/// ended on the server and a second owner holds the lock: by then the command is stopped
/// too (never running unlocked); continued, `run` finds the lease lost, the command gets
/// SIGTERM and `run` exits 74, leaving the second owner's lock alone.
fn stopped_run_stops_its_command(test: &str, signal: &str, prelude: &str) {
    let setup = Setup::new(test);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let marker = std::env::temp_dir().join(format!("distlock-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "{prelude}trap 'echo TERM > {}; exit 0' TERM; echo HELD $DISTLOCK_FENCING_TOKEN $$; while :; do sleep 0.05; done",
        marker.display()
    );
    let mut cli = setup
        .cmd(&[
            "run", "--lease", "2s", "--grace", "5s", "nightly", "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(cli.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (token, shell): (u64, u32) = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["HELD", t, p] => (t.parse().unwrap(), p.parse().unwrap()),
        _ => panic!("expected `HELD <token> <pid>`, got {line:?}"),
    };

    send_signal(signal, cli.id());
    let deadline = Instant::now() + Duration::from_secs(15);
    let other = loop {
        if let Some(g) = rt.block_on(registry.lock("nightly").try_acquire()).unwrap() {
            break g;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped run's lease never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(other.fencing_token() > token);
    assert!(
        stopped_or_stopping(shell),
        "SIG{signal}: another owner holds the lock and the command of the stopped run is not stopped ({:?})",
        state_of(shell)
    );
    assert!(cli.try_wait().unwrap().is_none(), "stopped, not exited");

    send_signal("CONT", cli.id());
    let status = wait_exit(&mut cli, Duration::from_secs(20));
    assert_eq!(status.code(), Some(74), "exit 74: the lease was lost");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "TERM",
        "the command got SIGTERM"
    );
    assert!(gone_within(shell, Duration::from_secs(5)));
    assert!(other.is_held());
    let shown = setup.json(&["show", "nightly", "--json"]);
    assert_eq!(shown[0]["token"], other.fencing_token(), "{shown:#}");
    rt.block_on(other.release()).unwrap();
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn run_stopped_by_sigtstp_stops_its_command_with_it() {
    stopped_run_stops_its_command("tstp", "TSTP", "");
}

/// A command that ignores SIGTSTP is stopped all the same (SIGSTOP from the guard).
#[test]
fn run_stopped_by_sigtstp_stops_a_command_that_ignores_it() {
    stopped_run_stops_its_command("tstpignored", "TSTP", "trap '' TSTP; ");
}

#[test]
fn run_stopped_by_sigstop_stops_its_command_with_it() {
    stopped_run_stops_its_command("sigstopped", "STOP", "");
}

/// Ctrl-Z then `fg` within the lease: the command is stopped with `run` and continued with
/// it, and runs to its end under the lock (exit status its own).
#[test]
fn run_continued_within_its_lease_continues_its_command() {
    let setup = Setup::new("tstpcont");
    // A lease that a stop of a few scheduling delays cannot come near.
    std::fs::write(&setup.path, setup.toml.replace("\"1s\"", "\"30s\"")).unwrap();
    let script = "echo HELD $DISTLOCK_FENCING_TOKEN $$; read line; exit 3";
    let mut cli = setup
        .cmd(&["run", "nightly", "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(cli.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let shell: u32 = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["HELD", _, p] => p.parse().unwrap(),
        _ => panic!("expected `HELD <token> <pid>`, got {line:?}"),
    };
    send_signal("TSTP", cli.id());
    distlock_tests::wait_until(Duration::from_secs(5), "the command stopped", || {
        state_of(shell) == Some('T')
    });
    send_signal("CONT", cli.id());
    distlock_tests::wait_until(Duration::from_secs(5), "the command continued", || {
        state_of(shell).is_some_and(|s| s != 'T')
    });
    std::io::Write::write_all(cli.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let status = wait_exit(&mut cli, Duration::from_secs(10));
    assert_eq!(status.code(), Some(3));
}

/// A semaphore with every permit taken is shown by `show`, `list` and `watch` (permits,
/// holders with host, pid, site and lease left, waiting processes) and `unlock` frees one
/// holder (`--holder ID`) or all of them; each freed holder hears it at once (`lost()`
/// within 1 s, with a renewal 10 s away), the others keep their permits.
#[test]
fn semaphores_are_shown_and_unlocked_holder_by_holder() {
    let setup = Setup::new("sem");
    let toml = setup.toml.replace("\"1s\"", "\"30s\"");
    std::fs::write(&setup.path, &toml).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&toml)).unwrap();
    let (a, b) = rt.block_on(async {
        let a = registry.semaphore("quota", 3).acquire(1).await.unwrap();
        let b = registry.semaphore("quota", 3).acquire(2).await.unwrap();
        (a, b)
    });
    // A third process-local acquisition waits: every permit is taken.
    let waiter = {
        let registry = registry.clone();
        rt.spawn(async move {
            registry
                .semaphore("quota", 3)
                .wait(Duration::from_secs(60))
                .acquire(1)
                .await
        })
    };
    let shown = loop {
        let shown = setup.json(&["show", "quota", "--json"]);
        let s = shown
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["kind"] == "semaphore")
            .cloned()
            .unwrap_or_else(|| panic!("a semaphore with every permit taken is shown: {shown:#}"));
        if s["waiting_processes"] == 1 {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(shown["permits"], 3, "{shown:#}");
    assert!(shown["ttl_ms"].as_u64().unwrap() > 20_000, "{shown:#}");
    let holders = shown["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{shown:#}");
    for (h, guard) in [(&a, 1u64), (&b, 2)].map(|(g, n)| {
        let h = holders
            .iter()
            .find(|h| h["token"] == g.fencing_token())
            .unwrap_or_else(|| panic!("a holder with token {}: {shown:#}", g.fencing_token()));
        (h, n)
    }) {
        assert_eq!(h["permits"], guard, "{h:#}");
        assert_eq!(h["count"], guard, "{h:#}");
        assert_eq!(h["host"], hostname(), "{h:#}");
        assert_eq!(h["pid"], std::process::id(), "{h:#}");
        assert!(h["site"].as_str().unwrap().contains("cli.rs"), "{h:#}");
        assert!(h["lease_left_ms"].as_u64().unwrap() > 20_000, "{h:#}");
    }
    let listed = setup.json(&["list", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["key"] == "quota" && l["kind"] == "semaphore"),
        "{listed:#}"
    );
    let table = String::from_utf8_lossy(&setup.output(&["show", "quota"]).stdout).into_owned();
    assert!(
        table.contains("semaphore 3/3") && table.contains("1 proc"),
        "{table}"
    );
    let watched =
        String::from_utf8_lossy(&setup.output(&["watch", "--count", "1"]).stdout).into_owned();
    assert!(
        row_of(&watched, "quota").is_some_and(|r| r.contains("semaphore 3/3")),
        "{watched}"
    );

    // One holder: `a` hears it at once; `b` keeps its permits; the waiter gets a permit.
    let a_id = holders
        .iter()
        .find(|h| h["token"] == a.fencing_token())
        .unwrap()["owner"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(a_id, a.holder_id());
    let out = setup.output(&["unlock", "quota", "--holder", &a_id[..12], "--yes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("released"), "{stdout}");
    let unlocked = Instant::now();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(1), a.lost())
            .await
            .expect("the freed holder hears it within 1 s")
    });
    assert!(unlocked.elapsed() < Duration::from_secs(1));
    assert!(b.is_held());
    let c = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), waiter).await })
        .expect("the waiter got the freed permit")
        .unwrap()
        .unwrap();
    let shown = setup.json(&["show", "quota", "--json"]);
    assert_eq!(
        shown[0]["holders"].as_array().unwrap().len(),
        2,
        "{shown:#}"
    );

    // No such holder: exit 1, nothing freed.
    let out = setup.output(&["unlock", "quota", "--holder", "zz", "--yes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(b.is_held() && c.is_held());

    // All of them.
    let out = setup.output(&["unlock", "quota", "--yes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("(semaphore): released"),
        "{stdout}"
    );
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(1), b.lost())
            .await
            .expect("b hears it within 1 s");
        tokio::time::timeout(Duration::from_secs(1), c.lost())
            .await
            .expect("c hears it within 1 s");
    });
    // Nobody holds it (this process may still count as waiting until its subscription to
    // the release channel is swept).
    let shown = setup.json(&["show", "quota", "--json"]);
    assert!(
        shown
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["holders"] == serde_json::json!([])),
        "{shown:#}"
    );
    assert!(!exists(&format!("{}{{quota}}:sem", setup.prefix)));
    assert!(!exists(&format!("{}{{quota}}:sem:n", setup.prefix)));
}

/// A fair semaphore's queue is shown: `show` lists each queued waiter (its holder id and
/// the wait it has left), in the order they are served, and the WAITERS cell counts them.
#[test]
fn a_fair_semaphores_queue_is_shown() {
    let setup = Setup::new("fairsem");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&setup.toml)).unwrap();
    let held = rt
        .block_on(registry.semaphore("pool", 2).fair().acquire(2))
        .unwrap();
    let waiters: Vec<_> = [1u32, 1]
        .into_iter()
        .map(|n| {
            let registry = registry.clone();
            rt.spawn(async move {
                registry
                    .semaphore("pool", 2)
                    .fair()
                    .wait(Duration::from_secs(60))
                    .acquire(n)
                    .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let shown = loop {
        let shown = setup.json(&["show", "pool", "--json"]);
        let s = shown
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["kind"] == "semaphore")
            .cloned()
            .unwrap_or_else(|| panic!("a fair semaphore with its permits taken: {shown:#}"));
        if s["waiters"].as_array().is_some_and(|w| w.len() == 2) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the two queued waiters are not shown: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for w in shown["waiters"].as_array().unwrap() {
        assert!(!w["owner"].as_str().unwrap().is_empty(), "{w:#}");
        assert!(w["wait_left_ms"].as_u64().unwrap() > 30_000, "{w:#}");
    }
    rt.block_on(held.release()).unwrap();
    for w in waiters {
        let g = rt
            .block_on(w)
            .unwrap()
            .expect("served once the permits are back");
        rt.block_on(g.release()).unwrap();
    }
}

/// A semaphore on `backend` (the TOML lines of `[backends.c]`) is shown and `unlock` frees
/// it, heard by its holder at once; on a cluster (`master_address`) the address shown is the
/// master that holds it.
fn semaphore_shown_and_unlocked_on(test: &str, backend: &str, master_address: bool) {
    let prefix = format!("cli-{}-{test}:", std::process::id());
    let toml = format!(
        "[defaults]\nwatchdog_timeout = \"30s\"\nkey_prefix = \"{prefix}\"\n[backends.c]\n{backend}\nholder_info = true\n"
    );
    let setup = Setup::new(test);
    std::fs::write(&setup.path, &toml).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = rt.block_on(Registry::from_str(&toml)).unwrap();
    let g = rt
        .block_on(registry.semaphore("quota", 1).acquire(1))
        .unwrap();
    let shown = setup.json(&["show", "quota", "--json"]);
    let s = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == "semaphore")
        .unwrap_or_else(|| panic!("{shown:#}"));
    assert_eq!(s["permits"], 1, "{s:#}");
    assert_eq!(s["holders"][0]["pid"], std::process::id(), "{s:#}");
    assert_eq!(s["holders"][0]["owner"], g.holder_id(), "{s:#}");
    if master_address {
        let address = s["address"].as_str().unwrap();
        assert_eq!(
            distlock_tests::resp_command(address, &["EXISTS", &format!("{prefix}{{quota}}:sem")]),
            Ok(distlock_tests::RespValue::Integer(1)),
            "{address} holds the semaphore"
        );
    }
    let out = setup.output(&["unlock", "quota", "--yes"]);
    assert!(out.status.success());
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(1), g.lost())
            .await
            .expect("the holder hears it within 1 s")
    });
}

fn quoted(urls: Vec<String>) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn semaphores_on_a_cluster_are_shown_and_unlocked() {
    semaphore_shown_and_unlocked_on(
        "csem",
        &format!(
            "mode = \"cluster\"\nnodes = [{}]",
            quoted(distlock_tests::cluster_urls())
        ),
        true,
    );
}

#[test]
fn semaphores_on_sentinel_are_shown_and_unlocked() {
    semaphore_shown_and_unlocked_on(
        "ssem",
        &format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            distlock_tests::sentinel_master_name(),
            quoted(distlock_tests::sentinel_urls())
        ),
        false,
    );
}
