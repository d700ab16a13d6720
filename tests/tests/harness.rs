//! Tests of the test harness itself, against real redis-server processes.

use std::time::Duration;

use distlock_tests::{addr_of, resp_command, single_url, wait_until, RedisProcess, RespValue};

#[test]
fn private_server_survives_kill_and_restart() {
    let mut redis = RedisProcess::start();
    assert!((17400..17500).contains(&redis.port()), "{redis:?}");
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    assert_eq!(addr_of(&redis.url()), redis.addr());
    assert!(redis.is_running());

    let addr = redis.addr();
    assert!(resp_command(&addr, &["SET", "harness:k", "v"])
        .unwrap()
        .is_ok());
    assert_eq!(
        resp_command(&addr, &["GET", "harness:k"]).unwrap(),
        RespValue::Bulk(b"v".to_vec())
    );
    match resp_command(&addr, &["NO-SUCH-COMMAND"]).unwrap() {
        RespValue::Error(e) => assert!(e.starts_with("ERR"), "{e}"),
        other => panic!("expected an error reply, got {other:?}"),
    }

    redis.kill();
    assert!(!redis.is_running());
    assert!(
        resp_command(&addr, &["PING"]).is_err(),
        "killed server still answers"
    );

    redis.restart();
    assert!(redis.is_running());
    assert_eq!(
        resp_command(&addr, &["PING"]).unwrap(),
        RespValue::Simple("PONG".into())
    );
    // Nothing is persisted: the restarted server is empty.
    assert!(resp_command(&addr, &["GET", "harness:k"])
        .unwrap()
        .is_null());

    redis.stop();
    assert!(!redis.is_running());
    redis.restart();
    assert_eq!(
        resp_command(&addr, &["DBSIZE"]).unwrap(),
        RespValue::Integer(0)
    );

    let dir = redis.dir().to_path_buf();
    drop(redis);
    assert!(!dir.exists(), "temp dir {} not removed", dir.display());
    wait_until(
        Duration::from_secs(5),
        "the dropped server's port to close",
        || resp_command(&addr, &["PING"]).is_err(),
    );
}

#[test]
fn parallel_private_servers_get_distinct_ports() {
    let servers: Vec<RedisProcess> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(RedisProcess::start)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = servers.iter().map(RedisProcess::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len(), "{servers:?}");
    for s in &servers {
        let key = format!("owner:{}", s.port());
        assert!(resp_command(&s.addr(), &["SET", &key, "1"])
            .unwrap()
            .is_ok());
        assert_eq!(
            resp_command(&s.addr(), &["DBSIZE"]).unwrap(),
            RespValue::Integer(1)
        );
    }
}

/// Needs the shared servers: `scripts/servers.sh start`, or `scripts/test.sh`.
#[test]
fn single_server_answers_ping() {
    let url = single_url();
    assert_eq!(
        resp_command(&addr_of(&url), &["PING"]).unwrap(),
        RespValue::Simple("PONG".into())
    );
}
