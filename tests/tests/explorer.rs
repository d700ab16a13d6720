//! Fixed explorer seeds on the memory backend, a private redis-server (in both formats)
//! and private redlock nodes: every schedule passes the model's checks
//! (scripts/explore.sh runs many more, and the cluster and sentinel topologies).

use distlock_tests::explore::{explore, BackendKind, Format, Options};

fn fixed(backend: BackendKind, seeds: &[u64]) {
    fixed_in(backend, Format::Distlock, seeds);
}

fn fixed_in(backend: BackendKind, format: Format, seeds: &[u64]) {
    for &seed in seeds {
        let mut opts = Options::new(backend, seed, 1);
        opts.format = format;
        let summary = explore(&opts);
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

#[test]
fn fixed_schedules_on_redlock_nodes_with_faults_keep_every_rule() {
    fixed(BackendKind::Redlock, &REDLOCK_SEEDS);
}

#[test]
fn fixed_schedules_in_the_redisson_format_keep_every_rule() {
    fixed_in(BackendKind::Single, Format::Redisson, &REDISSON_SEEDS);
}

/// Redlock schedules with a minority of the nodes down and kinds redlock does not offer.
const REDLOCK_SEEDS: [u64; 1] = [1010];
/// Single-server schedules in Redisson's format, with a fault.
const REDISSON_SEEDS: [u64; 1] = [1];
