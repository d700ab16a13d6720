//! Fixed explorer seeds on the memory backend and a private redis-server: every
//! schedule passes the model's checks (scripts/explore.sh runs many more).

use distlock_tests::explore::{explore, BackendKind, Options};

fn fixed(backend: BackendKind, seeds: &[u64]) {
    for &seed in seeds {
        let summary = explore(&Options::new(backend, seed, 1));
        let text: String = summary.findings.iter().map(|f| f.text(backend)).collect();
        assert_eq!(summary.aborted, None, "seed {seed}: the servers held up");
        assert!(summary.operations > 0, "seed {seed}: no lock operation ran");
        assert!(summary.findings.is_empty(), "{text}");
    }
}

#[test]
fn fixed_schedules_on_memory_keep_every_rule() {
    fixed(BackendKind::Memory, &[1, 2, 3, 4]);
}

#[test]
fn fixed_schedules_on_a_redis_server_with_faults_keep_every_rule() {
    fixed(BackendKind::Single, &[331, 332]);
}
