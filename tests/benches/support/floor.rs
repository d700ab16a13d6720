//! Redisson's protocol sent raw, the floor of the performance benchmarks: its lock and unlock
//! scripts (as distlock writes them in `protocol/redisson/`) by EVALSHA over one multiplexed
//! TCP_NODELAY connection (see `targets.rs`).

use redis::aio::MultiplexedConnection;

/// `redisson/lock.lua` as distlock sends it (after `redisson/token_prologue.lua`).
pub const REDISSON_LOCK: &str = distlock::__private::scripts::REDISSON_LOCK;
pub const REDISSON_UNLOCK: &str =
    include_str!("../../../distlock/src/protocol/redisson/unlock.lua");

#[derive(Clone)]
pub struct Floor {
    pub conn: MultiplexedConnection,
    pub lock_sha: String,
    pub unlock_sha: String,
    /// Redisson's fenced lock (`RFencedLock`): the lock script also INCRs the token counter
    /// `redisson_lock_token:{key}` (a diagnostic: what fencing costs on Redisson's side).
    pub fenced: bool,
}

impl Floor {
    pub async fn new(url: &str) -> Floor {
        let conn = connect(url).await;
        Floor::with(conn).await
    }

    /// The floor over a connection with Nagle's algorithm on (no `TCP_NODELAY`), as
    /// distlock's command connections have by default: a diagnostic of what that transport
    /// gives the same protocol.
    pub async fn with_nagle(url: &str) -> Floor {
        let conn = connect_with(url, false).await;
        Floor::with(conn).await
    }

    /// The floor whose connection (and so its driver task) lives on `rt`, another runtime,
    /// as distlock's connections live on its background runtime: a diagnostic of what that
    /// placement costs the same protocol.
    pub async fn on_runtime(url: &str, rt: &tokio::runtime::Runtime) -> Floor {
        let url = url.to_owned();
        let conn = rt
            .spawn(async move { connect(&url).await })
            .await
            .expect("connect on the other runtime");
        Floor::with(conn).await
    }

    pub async fn with(mut conn: MultiplexedConnection) -> Floor {
        let load = |src: &'static str| {
            let mut c = redis::cmd("SCRIPT");
            c.arg("LOAD").arg(src);
            c
        };
        let lock_sha: String = load(REDISSON_LOCK)
            .query_async(&mut conn)
            .await
            .expect("load");
        let unlock_sha: String = load(REDISSON_UNLOCK)
            .query_async(&mut conn)
            .await
            .expect("load");
        Floor {
            conn,
            lock_sha,
            unlock_sha,
            fenced: false,
        }
    }

    /// The lock script's call: `KEYS[2]` the token counter when fenced.
    pub fn lock_cmd(&self, key: &str, owner: &str) -> redis::Cmd {
        let mut c = redis::cmd("EVALSHA");
        c.arg(&self.lock_sha);
        if self.fenced {
            c.arg(2)
                .arg(key)
                .arg(format!("redisson_lock_token:{{{key}}}"));
        } else {
            c.arg(1).arg(key);
        }
        c.arg(30_000).arg(owner);
        c
    }

    /// The unlock script's call: publishes on the lock's channel, sets the unlock latch
    /// `redisson_unlock_latch:{key}:owner` for 1 s.
    pub fn unlock_cmd(&self, key: &str, owner: &str) -> redis::Cmd {
        let mut c = redis::cmd("EVALSHA");
        c.arg(&self.unlock_sha)
            .arg(3)
            .arg(key)
            .arg(format!("redisson_lock__channel:{{{key}}}"))
            .arg(format!("redisson_unlock_latch:{{{key}}}:{owner}"))
            .arg(0)
            .arg(30_000)
            .arg(owner)
            .arg("publish")
            .arg(1_000);
        c
    }

    /// One uncontended lock+unlock of `key` by `owner`.
    pub async fn pair(&self, key: &str, owner: &str) {
        let mut conn = self.conn.clone();
        let v: Vec<i64> = self
            .lock_cmd(key, owner)
            .query_async(&mut conn)
            .await
            .expect("floor lock");
        assert_eq!(v.first(), Some(&1), "{v:?}");
        let r: i64 = self
            .unlock_cmd(key, owner)
            .query_async(&mut conn)
            .await
            .expect("floor unlock");
        assert_eq!(r, 1);
    }
}

/// One multiplexed TCP_NODELAY connection.
pub async fn connect(url: &str) -> MultiplexedConnection {
    connect_with(url, true).await
}

/// A multiplexed connection to `url`, with `TCP_NODELAY` when `nodelay` (else Nagle's
/// algorithm on, as distlock's command connections have by default: `tcp_nodelay`).
pub async fn connect_with(url: &str, nodelay: bool) -> MultiplexedConnection {
    let info = redis::IntoConnectionInfo::into_connection_info(url).expect("url");
    let info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(nodelay));
    let client = redis::Client::open(info).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}
