//! A `#[distributed_lock]` site naming a backend the configuration does not have fails
//! `init`, naming the function, its file and line, and the backend. A test binary of its
//! own, since the bad site is linked into it. A site asking for a kind its backend does not
//! offer (a read lock on redlock) fails init the same way.

use distlock::{distributed_lock, InitError, LockError};

const NOPE_LINE: u32 = line!() + 1;
#[distributed_lock(key = "attr:bad-site:<id>", backend = "nope")]
async fn on_a_missing_backend(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

const READ_LINE: u32 = line!() + 1;
#[distributed_lock(key = "attr:bad-kind:<id>", backend = "quorum", kind = "read")]
async fn a_read_lock_on_redlock(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[test]
fn a_site_naming_an_unknown_backend_fails_init() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let nodes: Vec<String> = distlock_tests::redlock_urls()
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect();
        let config = format!(
            "[defaults]\nbackend = \"main\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n[backends.quorum]\nmode = \"redlock\"\nnodes = [{}]\n",
            distlock_tests::single_url(),
            nodes.join(", ")
        );
        let err = distlock::init_from_str(&config)
            .await
            .expect_err("init accepted a site on a backend that does not exist");
        let message = err.to_string();
        match &err {
            InitError::Sites(lines) => {
                assert_eq!(lines.len(), 2, "every bad site at once: {message}");
            }
            other => panic!("expected InitError::Sites, got {other:?}"),
        }
        for part in [
            "attribute_bad_site::on_a_missing_backend".to_owned(),
            format!("attribute_bad_site.rs:{NOPE_LINE}"),
            "nope".to_owned(),
            "attribute_bad_site::a_read_lock_on_redlock".to_owned(),
            format!("attribute_bad_site.rs:{READ_LINE}"),
            "lock kind `read`".to_owned(),
            "quorum".to_owned(),
        ] {
            assert!(
                message.contains(&part),
                "init's error does not name {part:?}: {message}"
            );
        }
        // Not initialized: the function says so.
        assert!(matches!(
            on_a_missing_backend(1).await,
            Err(LockError::NotInitialized)
        ));
    });
}
