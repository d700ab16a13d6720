//! The test matrix: which shared scenario (in `common/mod.rs`) runs on which backend, in one
//! table. The test below reads the backend test files and fails when the table and the
//! files disagree, so a backend that skips a scenario shows here, with the reason.
//!
//! Rows of the reentrant lock are checked in `<backend>.rs` (a call `scenario(`); rows of
//! read-write and fair locks in `rwlock.rs` / `fair.rs` (a call `scenario(&<backend>()`).

/// A cell: the scenario runs there, or why not.
#[derive(Debug, Clone, Copy)]
enum Cell {
    Runs,
    Skipped(&'static str),
}
use Cell::{Runs as Y, Skipped as No};

const BACKENDS: [&str; 6] = [
    "single", "cluster", "sentinel", "redlock", "multi", "memory",
];

/// Where a row's calls are looked for.
#[derive(Debug, Clone, Copy)]
enum In {
    /// `<backend>.rs`.
    BackendFile,
    /// This file, with the backend's registry function as the first argument.
    File(&'static str),
}

const UNSUPPORTED: Cell = No("fair and read-write locks are Unsupported on quorum backends");
const QUORUM_OWN: Cell = No("redlock.rs has its own exclusion test (node counts, minority down)");
const NOT_YET: Cell = No("not covered yet");

#[rustfmt::skip]
const MATRIX: &[(&str, In, [Cell; 6])] = &[
    //                                              single cluster sentinel redlock     multi    memory
    ("exclusion_16_tasks",           In::BackendFile, [Y,     Y,      Y,       QUORUM_OWN, Y,       Y]),
    ("try_and_timeout",              In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("hand_off",                     In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("auto_lease_outlives_watchdog", In::BackendFile, [Y,     Y,      Y,       Y,          NOT_YET, Y]),
    ("fixed_lease_expires",          In::BackendFile, [Y,     Y,      NOT_YET, Y,          NOT_YET, Y]),
    ("fencing_tokens_grow",          In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("deleted_lock_is_lost",         In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("dropped_guard_frees",          In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("reentrancy",                   In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("run_releases",                 In::BackendFile, [Y,     Y,      Y,       Y,          Y,       Y]),
    ("errors_name_things",           In::BackendFile, [Y,     Y,      Y,       Y,          NOT_YET, Y]),
    ("readers_overlap",              In::File("rwlock.rs"), [Y, NOT_YET, NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("writers_exclude",              In::File("rwlock.rs"), [Y, Y,       NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("writer_not_starved",           In::File("rwlock.rs"), [Y, Y,       NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("crashed_reader_expires",       In::File("rwlock.rs"), [Y, Y,       NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("downgrade_and_tokens",         In::File("rwlock.rs"), [Y, NOT_YET, NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("fair_in_order",                In::File("fair.rs"),   [Y, NOT_YET, NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
    ("fair_timeout_leaves_queue",    In::File("fair.rs"),   [Y, NOT_YET, NOT_YET, UNSUPPORTED, UNSUPPORTED, Y]),
];

fn source(file: &str) -> &'static str {
    match file {
        "single.rs" => include_str!("single.rs"),
        "cluster.rs" => include_str!("cluster.rs"),
        "sentinel.rs" => include_str!("sentinel.rs"),
        "redlock.rs" => include_str!("redlock.rs"),
        "multi.rs" => include_str!("multi.rs"),
        "memory.rs" => include_str!("memory.rs"),
        "rwlock.rs" => include_str!("rwlock.rs"),
        "fair.rs" => include_str!("fair.rs"),
        other => panic!("matrix.rs does not know the test file {other}"),
    }
}

#[test]
fn the_matrix_matches_the_test_files() {
    let mut wrong = Vec::new();
    for (scenario, place, cells) in MATRIX {
        for (backend, cell) in BACKENDS.iter().zip(cells) {
            let (file, call) = match place {
                In::BackendFile => (format!("{backend}.rs"), format!("{scenario}(")),
                In::File(f) => (f.to_string(), format!("{scenario}(&{backend}()")),
            };
            let runs = source(&file).contains(&call);
            match (cell, runs) {
                (Cell::Runs, true) | (Cell::Skipped(_), false) => {}
                (Cell::Runs, false) => {
                    wrong.push(format!("{scenario} on {backend}: the table says it runs, {file} has no `{call}`"))
                }
                (Cell::Skipped(why), true) => wrong.push(format!(
                    "{scenario} on {backend}: {file} runs it, the table says skipped ({why}): mark it Y"
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "tests/tests/matrix.rs is out of date:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_shared_scenario_is_in_the_matrix() {
    let common = include_str!("common/mod.rs");
    let helpers = ["wait_for_waiter", "percentile", "unique", "every_mode"];
    for line in common.lines() {
        let Some(rest) = line.strip_prefix("pub async fn ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or_default();
        if helpers.contains(&name) {
            continue;
        }
        assert!(
            MATRIX.iter().any(|(s, _, _)| *s == name),
            "the shared scenario `{name}` is missing from tests/tests/matrix.rs"
        );
    }
}
