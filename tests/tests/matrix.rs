//! The test matrix: every shared scenario (in `scenarios/`) against the six backends, in one
//! table — and the table IS the tests.
//!
//! [`matrix!`] reads one row per scenario: the scenario's function (a path into `scenarios`,
//! so a typo does not compile), the lock kinds it takes, and one cell per backend, in the
//! order single, cluster, sentinel, redlock, multi, memory:
//!
//! - `Y` (or `Y(args)`): the macro generates `#[tokio::test] <scenario>::<backend>`, which
//!   calls the scenario with that backend's registry (`common::backend::<backend>()`), plus
//!   `args`. Nothing else in the suite runs that scenario on that backend with that
//!   configuration.
//! - `Unsupported(reason)`: the library refuses the row's lock kinds on that backend; the
//!   test [`unsupported_cells_are_refused`] checks it by acquiring each kind there, which
//!   must answer `LockError::Unsupported` naming the kind and the backend's mode (the same
//!   style as `rules.rs`: the library's own answer, not reading source text).
//! - `No(reason)`: skipped here, with the reason (e.g. another file covers it with a test of
//!   its own); [`every_cell_that_does_not_run_says_why`] checks the reason is given.
//!
//! A scenario that no row runs is a dead-code error in this crate (the `scenarios` module
//! has no `allow(dead_code)`), so a new scenario cannot be left out of the table.

#![deny(dead_code)]

// `common` allows dead code itself (not every helper is used here); `scenarios` does not.
mod common;
mod scenarios;

use std::time::Duration;

use distlock::{LockError, LockKind, Registry};

/// A cell of the table, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// A generated test runs the scenario on this backend.
    Runs,
    /// The library refuses the row's lock kinds on this backend (checked by acquiring).
    Unsupported(&'static str),
    /// Not run here, and why.
    Skipped(&'static str),
}

/// The columns of the table, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Single,
    Cluster,
    Sentinel,
    Redlock,
    Multi,
    Memory,
}

const BACKENDS: [Backend; 6] = [
    Backend::Single,
    Backend::Cluster,
    Backend::Sentinel,
    Backend::Redlock,
    Backend::Multi,
    Backend::Memory,
];

impl Backend {
    /// The backend's `mode` in a configuration (and in the library's messages).
    fn mode(self) -> &'static str {
        match self {
            Backend::Single => "single",
            Backend::Cluster => "cluster",
            Backend::Sentinel => "sentinel",
            Backend::Redlock => "redlock",
            Backend::Multi => "multi",
            Backend::Memory => "memory",
        }
    }

    async fn registry(self) -> Registry {
        match self {
            Backend::Single => common::backend::single().await,
            Backend::Cluster => common::backend::cluster().await,
            Backend::Sentinel => common::backend::sentinel().await,
            Backend::Redlock => common::backend::redlock().await,
            Backend::Multi => common::backend::multi().await,
            Backend::Memory => common::backend::memory().await,
        }
    }
}

/// A row as data: the scenario's name, the lock kinds it takes, a cell per backend.
struct Row {
    scenario: &'static str,
    kinds: &'static [LockKind],
    cells: [Cell; 6],
}

/// One cell's generated test (none for a cell that does not run).
macro_rules! cell_test {
    ($scenario:ident, $backend:ident, Y, [$($arg:expr),*]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $backend() {
            let reg = crate::common::backend::$backend().await;
            crate::scenarios::$scenario(&reg $(, $arg)*).await;
        }
    };
    ($scenario:ident, $backend:ident, No, [$why:expr]) => {};
    ($scenario:ident, $backend:ident, Unsupported, [$why:expr]) => {};
}

/// One cell as data.
macro_rules! cell_value {
    (Y, [$($arg:expr),*]) => {
        Cell::Runs
    };
    (No, [$why:expr]) => {
        Cell::Skipped($why)
    };
    (Unsupported, [$why:expr]) => {
        Cell::Unsupported($why)
    };
}

/// The table: generates a module of tests per row and the `MATRIX` data.
macro_rules! matrix {
    ($(
        $scenario:ident ($($kind:ident),+): [
            $s:ident $(($($sa:expr),*))?,
            $c:ident $(($($ca:expr),*))?,
            $se:ident $(($($sea:expr),*))?,
            $r:ident $(($($ra:expr),*))?,
            $mu:ident $(($($mua:expr),*))?,
            $me:ident $(($($mea:expr),*))? $(,)?
        ];
    )*) => {
        $(
            #[allow(unused_imports)]
            mod $scenario {
                use super::*;
                cell_test!($scenario, single, $s, [$($($sa),*)?]);
                cell_test!($scenario, cluster, $c, [$($($ca),*)?]);
                cell_test!($scenario, sentinel, $se, [$($($sea),*)?]);
                cell_test!($scenario, redlock, $r, [$($($ra),*)?]);
                cell_test!($scenario, multi, $mu, [$($($mua),*)?]);
                cell_test!($scenario, memory, $me, [$($($mea),*)?]);
            }
        )*

        const MATRIX: &[Row] = &[$(
            Row {
                scenario: stringify!($scenario),
                kinds: &[$(LockKind::$kind),+],
                cells: [
                    cell_value!($s, [$($($sa),*)?]),
                    cell_value!($c, [$($($ca),*)?]),
                    cell_value!($se, [$($($sea),*)?]),
                    cell_value!($r, [$($($ra),*)?]),
                    cell_value!($mu, [$($($mua),*)?]),
                    cell_value!($me, [$($($mea),*)?]),
                ],
            },
        )*];
    };
}

const QUORUM: &str = "fair and read-write locks need one server's atomic scripts: \
                      redlock and multi refuse them";
const REDLOCK_OWN: &str =
    "redlock.rs has its own exclusion test (16 x 10 sections over a majority of 5 masters)";

/// The hand-off's median bound: a server round trip, tighter on the in-process memory backend.
const P50: Duration = Duration::from_millis(10);
const P50_MEMORY: Duration = Duration::from_millis(5);

#[rustfmt::skip]
matrix! {
    // scenario (kinds):                            single   cluster  sentinel redlock              multi                memory
    exclusion_16_tasks (Reentrant):                [Y,       Y,       Y,       No(REDLOCK_OWN),     Y,                   Y];
    try_and_timeout (Reentrant):                   [Y,       Y,       Y,       Y,                   Y,                   Y];
    hand_off_is_prompt (Reentrant):                [Y(P50),  Y(P50),  Y(P50),  Y(P50),              Y(P50),              Y(P50_MEMORY)];
    auto_lease_outlives_watchdog (Reentrant):      [Y,       Y,       Y,       Y,                   Y,                   Y];
    fixed_lease_expires (Reentrant):               [Y,       Y,       Y,       Y,                   Y,                   Y];
    fencing_tokens_grow (Reentrant):               [Y,       Y,       Y,       Y,                   Y,                   Y];
    deleted_lock_is_lost (Reentrant):              [Y,       Y,       Y,       Y,                   Y,                   Y];
    dropped_guard_frees (Reentrant):               [Y,       Y,       Y,       Y,                   Y,                   Y];
    reentrancy (Reentrant):                        [Y,       Y,       Y,       Y,                   Y,                   Y];
    run_releases (Reentrant):                      [Y,       Y,       Y,       Y,                   Y,                   Y];
    errors_name_things (Reentrant):                [Y,       Y,       Y,       Y,                   Y,                   Y];
    readers_overlap (Read, Write):                 [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    writers_exclude (Read, Write):                 [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    writer_not_starved (Read, Write):              [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    crashed_reader_expires (Read, Write):          [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    downgrade_and_tokens (Read, Write, Reentrant): [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    fair_in_order (Fair):                          [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
    fair_timeout_leaves_queue (Fair):              [Y,       Y,       Y,       Unsupported(QUORUM), Unsupported(QUORUM), Y];
}

#[test]
fn every_cell_that_does_not_run_says_why() {
    let mut runs = 0;
    for row in MATRIX {
        assert!(!row.kinds.is_empty(), "{}: no lock kind", row.scenario);
        for (backend, cell) in BACKENDS.iter().zip(row.cells) {
            match cell {
                Cell::Runs => runs += 1,
                Cell::Skipped(why) | Cell::Unsupported(why) => assert!(
                    !why.trim().is_empty(),
                    "{} on {}: a cell that does not run must say why",
                    row.scenario,
                    backend.mode()
                ),
            }
        }
    }
    println!(
        "matrix: {} scenarios x {} backends, {runs} cells run",
        MATRIX.len(),
        BACKENDS.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_cells_are_refused() {
    let mut checked = 0;
    for backend in BACKENDS {
        let cells: Vec<_> = MATRIX
            .iter()
            .zip(std::iter::repeat(backend))
            .filter_map(|(row, b)| match row.cells[b as usize] {
                Cell::Unsupported(why) => Some((row, why)),
                Cell::Runs | Cell::Skipped(_) => None,
            })
            .collect();
        if cells.is_empty() {
            continue;
        }
        let reg = backend.registry().await;
        for (row, why) in cells {
            // A row's reentrant lock (e.g. `downgrade_and_tokens` checks that it is a
            // separate lock) is offered everywhere; the other kinds are what is refused.
            for kind in row.kinds.iter().filter(|k| **k != LockKind::Reentrant) {
                let at = format!("{} on {} ({kind:?})", row.scenario, backend.mode());
                let key = common::unique("matrix");
                match reg.lock(key.as_str()).kind(*kind).try_acquire().await {
                    Err(
                        err @ LockError::Unsupported {
                            kind: distlock::Feature::Lock(refused),
                            mode,
                            ..
                        },
                    ) => {
                        let text = err.to_string();
                        assert!(
                            refused == *kind && mode.name() == backend.mode(),
                            "{at}: the refusal must name the kind and the mode: {text}"
                        );
                        assert!(
                            text.contains(kind.name()) && text.contains(backend.mode()),
                            "{at}: the refusal must say the kind and the mode: {text}"
                        );
                        checked += 1;
                    }
                    Err(e) => panic!("{at}: expected Unsupported ({why}), got {e}"),
                    Ok(_) => panic!("{at}: the table says Unsupported ({why}), but it was taken"),
                }
            }
        }
    }
    assert!(checked > 0, "the table has Unsupported cells to check");
    println!("matrix: {checked} (cell, kind) refusals checked");
}

/// `valkey://` URLs (the Valkey spelling of `redis://`) work wherever `redis://` ones do:
/// every Redis mode connects with them, takes a lock, refuses it to a second try while it
/// is held, and gives it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_urls_work_on_every_mode() {
    use distlock_tests::{
        cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url,
    };
    let valkey = |urls: &[String]| -> Vec<String> {
        urls.iter()
            .map(|u| u.replacen("redis://", "valkey://", 1))
            .collect()
    };
    let bodies = [
        (
            "single",
            format!(
                "mode = \"single\"\nurl = \"{}\"\n",
                valkey(&[single_url()])[0]
            ),
        ),
        (
            "cluster",
            format!(
                "mode = \"cluster\"\nnodes = [{}]\n",
                common::quoted(&valkey(&cluster_urls()))
            ),
        ),
        (
            "sentinel",
            format!(
                "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n",
                sentinel_master_name(),
                common::quoted(&valkey(&sentinel_urls()))
            ),
        ),
        (
            "redlock",
            common::backend::quorum_body("redlock", &valkey(&redlock_urls()), "200ms"),
        ),
        (
            "multi",
            common::backend::quorum_body("multi", &valkey(&redlock_urls()[..3]), "200ms"),
        ),
    ];
    for (mode, body) in bodies {
        assert!(body.contains("valkey://"), "{mode}: {body}");
        let reg = Registry::from_str(&format!(
            "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n{body}"
        ))
        .await
        .unwrap_or_else(|e| panic!("{mode} with valkey:// URLs: {e}"));
        let key = common::unique("valkey-url");
        let guard = reg
            .lock(key.as_str())
            .try_acquire()
            .await
            .unwrap_or_else(|e| panic!("{mode}: try_acquire: {e}"))
            .unwrap_or_else(|| panic!("{mode}: a fresh key is free"));
        let second = reg.lock(key.as_str()).try_acquire().await;
        assert!(
            matches!(second, Ok(None)),
            "{mode}: a held lock is refused to a second try: {second:?}"
        );
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{mode}: release: {e}"));
        let again = reg.lock(key.as_str()).try_acquire().await;
        assert!(
            matches!(again, Ok(Some(_))),
            "{mode}: free again after the release: {again:?}"
        );
    }
}
