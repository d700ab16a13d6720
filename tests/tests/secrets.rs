//! Credentials stay secret: no password appears in an error, a `Debug` output or any
//! tracing event (every level, captured for the whole process); and a sentinel group
//! whose sentinels have a password distinct from the master's (`master_password`).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use distlock::Registry;
use distlock_tests::topology::PrivateSentinel;
use distlock_tests::{resp_command, RedisProcess};

const MASTER_PW: &str = "M4ster-pw-secret";
const SENTINEL_PW: &str = "S3ntinel-pw-secret";

/// Every tracing event of this process, as text.
fn captured() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .init();
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn must(addr: &str, args: &[&str]) {
    let r = resp_command(addr, args).unwrap_or_else(|e| panic!("{args:?} on {addr}: {e}"));
    assert!(r.is_ok(), "{args:?} on {addr}: {r:?}");
}

fn assert_secret(text: &str) {
    assert!(
        !text.contains(MASTER_PW),
        "the master password shows: {text}"
    );
    assert!(
        !text.contains(SENTINEL_PW),
        "the sentinel password shows: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_master_with_distinct_passwords_and_no_secret_shown() {
    let logs = captured();
    let group = PrivateSentinel::start(1);
    let name = PrivateSentinel::MASTER_NAME;
    let sentinel = group.sentinels[0].addr();
    // The master and its replica require MASTER_PW; the sentinel requires SENTINEL_PW.
    must(
        &sentinel,
        &["SENTINEL", "SET", name, "auth-pass", MASTER_PW],
    );
    must(
        &group.replica.addr(),
        &["CONFIG", "SET", "masterauth", MASTER_PW],
    );
    must(
        &group.replica.addr(),
        &["CONFIG", "SET", "requirepass", MASTER_PW],
    );
    must(
        &group.master.addr(),
        &["CONFIG", "SET", "requirepass", MASTER_PW],
    );
    must(
        &sentinel,
        &[
            "ACL",
            "SETUSER",
            "default",
            "on",
            "resetpass",
            &format!(">{SENTINEL_PW}"),
        ],
    );

    let toml = |master_password: &str, sentinel_pw: &str| {
        format!(
            "[backends.ha]\nmode = \"sentinel\"\nmaster_name = \"{name}\"\nsentinels = [\"redis://:{sentinel_pw}@{sentinel}\"]\nconnect_timeout = \"1s\"\nresponse_timeout = \"1s\"\n{master_password}\n"
        )
    };
    let good = toml(&format!("master_password = \"{MASTER_PW}\""), SENTINEL_PW);
    let reg = Registry::from_str(&good)
        .await
        .unwrap_or_else(|e| panic!("distinct passwords: {e}"));
    let guard = reg.lock("secret:1").acquire().await.unwrap();
    assert!(guard.fencing_token() >= 1);
    assert_secret(&format!("{reg:?} {guard:?}"));
    guard.release().await.unwrap();
    let parsed = distlock::config::Config::from_str(&good).unwrap();
    assert_secret(&format!("{parsed:?}"));

    // Without `master_password` the sentinels' password is sent to the master: refused,
    // naming the backend and the master's address.
    let e = Registry::from_str(&toml("", SENTINEL_PW))
        .await
        .expect_err("the master does not take the sentinel password");
    let shown = format!("{e} / {e:?}");
    assert!(shown.contains("ha"), "{shown}");
    assert!(shown.contains(&group.master.addr()), "{shown}");
    assert_secret(&shown);

    // A wrong sentinel password: refused, naming the sentinel.
    let e = Registry::from_str(&toml(
        &format!("master_password = \"{MASTER_PW}\""),
        "wrong-pw",
    ))
    .await
    .expect_err("wrong sentinel password");
    let shown = format!("{e} / {e:?}");
    assert!(shown.contains(&sentinel), "{shown}");
    assert_secret(&shown);

    // A wrong password on a single server, and everything above, in the captured events.
    let single = RedisProcess::start();
    must(&single.addr(), &["CONFIG", "SET", "requirepass", MASTER_PW]);
    let e = Registry::from_str(&format!(
        "[backends.s]\nmode = \"single\"\nurl = \"redis://:{SENTINEL_PW}@{}\"\n",
        single.addr()
    ))
    .await
    .expect_err("wrong password");
    assert_secret(&format!("{e} / {e:?}"));
    drop(reg);
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        text.contains("distlock"),
        "the capture saw no distlock event: {text}"
    );
    assert_secret(&text);
}
