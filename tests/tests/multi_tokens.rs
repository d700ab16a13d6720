//! `mode = "multi"` fencing tokens: the token is the largest counter among the nodes, and,
//! as every later acquisition is granted by every node again (the one at the token
//! included), the lagging counters are left alone: no `INCRBY` round per new key.
//! (redlock raises them: `redlock.rs`, `fencing_counters_are_raised_to_the_token`.)
//!
//! On private servers: the test counts the `INCRBY` calls of each node.

mod common;
mod quorum_common;

use common::unique;
use quorum_common::*;

/// `INCRBY` calls the node of `url` has run (`INFO commandstats`).
fn incrby_calls(url: &str) -> u64 {
    let info = on(url, &["INFO", "commandstats"]);
    let text = info.as_str().expect("INFO is a bulk string").to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_incrby:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

#[tokio::test]
async fn multi_tokens_grow_without_raising_lagging_counters() {
    let servers = private_servers(3);
    let urls = urls_of(&servers);
    let reg = connect("multi", &urls, "500ms").await;

    // New keys: each node seeds its counter from its own clock, so they differ.
    for i in 0..20 {
        let key = unique(&format!("fresh{i}"));
        let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
        let counters: Vec<u64> = urls.iter().map(|u| fence_on(u, &key)).collect();
        assert_eq!(
            Some(g.fencing_token()),
            counters.iter().copied().max(),
            "the token is the largest counter: {counters:?}"
        );
        g.release().await.expect("release");
    }
    let raised: u64 = urls.iter().map(|u| incrby_calls(u)).sum();
    assert_eq!(raised, 0, "no counter raised on multi");

    // One node far ahead: the token follows it, and still grows from holder to holder.
    let key = unique("ahead");
    let fence = format!("{}:fence", hash_of(&key));
    on(&urls[1], &["SET", &fence, "5000000000000000"]);
    let mut last = 0;
    for _ in 0..5 {
        let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
        assert!(
            g.fencing_token() > last,
            "token {} after {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    assert!(
        last > 5_000_000_000_000_000,
        "the node ahead decides: {last}"
    );
}
