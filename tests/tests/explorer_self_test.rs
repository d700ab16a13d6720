//! The explorer's checks can fail: bugs planted in its adapter layer (never in the
//! library) must be reported as violations, on seeds whose schedules pass without them.

use distlock_tests::explore::{explore, BackendKind, Options, Plant};

fn run(backend: BackendKind, seed: u64, plant: Plant) -> usize {
    findings(backend, seed, plant, |_| {}).len()
}

/// One schedule of `seed` with `plant`, drawn as `draw` sets the options; its findings.
fn findings(
    backend: BackendKind,
    seed: u64,
    plant: Plant,
    draw: impl Fn(&mut Options),
) -> Vec<distlock_tests::explore::Finding> {
    let mut opts = Options::new(backend, seed, 1);
    draw(&mut opts);
    opts.plant = plant;
    opts.shrink_iters = 0;
    let summary = explore(&opts);
    for f in &summary.findings {
        eprintln!("{}", f.text(backend));
    }
    assert_eq!(summary.aborted, None, "the servers held up");
    assert_eq!(summary.schedules, 1, "the schedule ran");
    assert!(summary.operations > 0, "the schedule has lock operations");
    summary.findings
}

#[test]
fn a_guard_that_ignores_lost_is_reported_as_an_overlap() {
    assert_eq!(
        run(BackendKind::Memory, 1, Plant::None),
        0,
        "seed 1 passes unplanted"
    );
    assert_eq!(
        run(BackendKind::Memory, 1, Plant::IgnoreLost),
        1,
        "planted: lost() ignored"
    );
}

#[test]
fn a_try_acquire_that_never_asks_the_server_is_reported() {
    assert_eq!(
        run(BackendKind::Memory, 8, Plant::None),
        0,
        "seed 8 passes unplanted"
    );
    assert_eq!(
        run(BackendKind::Memory, 8, Plant::TryWithoutServer),
        1,
        "planted: try without the server"
    );
}

#[test]
fn a_release_without_the_owner_check_is_reported_on_redis() {
    let seed = RAW_DEL_SEED;
    assert_eq!(
        run(BackendKind::Single, seed, Plant::None),
        0,
        "the seed passes unplanted"
    );
    assert_eq!(
        run(BackendKind::Single, seed, Plant::ReleaseWithoutOwnerCheck),
        1,
        "planted: release by a raw DEL"
    );
}

#[test]
fn a_guard_that_ignores_lost_is_reported_on_redlock_nodes() {
    assert_eq!(
        run(BackendKind::Redlock, REDLOCK_SEED, Plant::None),
        0,
        "the seed passes unplanted"
    );
    assert_eq!(
        run(BackendKind::Redlock, REDLOCK_SEED, Plant::IgnoreLost),
        1,
        "planted: lost() ignored"
    );
}

/// A redlock schedule in which a hold loses its lease to a fault and another task gets in.
const REDLOCK_SEED: u64 = 1000;

/// A single-server schedule in which releases by a raw `DEL` (never through the library)
/// leave a lock that the end check finds unavailable.
const RAW_DEL_SEED: u64 = 331;

#[test]
fn a_fenced_resource_without_its_token_check_loses_an_update() {
    let run = |plant| {
        findings(BackendKind::Memory, FENCE_SEED, plant, |o| {
            o.extended = true
        })
    };
    assert!(run(Plant::None).is_empty(), "the seed passes unplanted");
    let found = run(Plant::FenceWithoutCheck);
    assert_eq!(
        found.len(),
        1,
        "planted: the fenced resource takes any token"
    );
    assert!(
        found[0]
            .violations
            .iter()
            .any(|v| v.starts_with("lost update") || v.starts_with("fenced:")),
        "reported as a lost update or a stale token: {:?}",
        found[0].violations
    );
}

/// An extended schedule on memory in which a fair and a read lock of `k1` are held at once
/// (other families, one fencing counter) and their fenced increments interleave: without
/// the resource's token check an older token's write is taken and an update is lost.
const FENCE_SEED: u64 = 135;

#[test]
fn a_paused_holder_that_trusts_a_flag_over_its_guard_is_reported() {
    let run = |plant| {
        findings(BackendKind::Single, HOLDER_SEED, plant, |o| {
            o.holders = true
        })
    };
    assert!(run(Plant::None).is_empty(), "the seed passes unplanted");
    let found = run(Plant::HolderTrustsAFlag);
    assert_eq!(found.len(), 1, "planted: the holder trusts a flag");
    assert!(
        found[0]
            .violations
            .iter()
            .any(|v| v.starts_with("paused holder:")),
        "reported as a paused holder that believes it holds: {:?}",
        found[0].violations
    );
}

/// A single-server schedule whose last step is a holder process that takes `k0` with a
/// fixed lease of 1 s and is SIGSTOPped for 2.5 s.
const HOLDER_SEED: u64 = 7004;
