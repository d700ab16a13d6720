//! The explorer: random schedules of lock operations and faults over several owners
//! and tasks, run against real servers, every step checked against a model of what the
//! locks promise (safety, liveness, errors), a failing schedule shrunk to a minimal one
//! and replayable by its seed. `scripts/explore.sh` runs it; docs/fault-testing.md
//! describes the model and the bounds.
//!
//! - [`model`]: the steps and the generator (a `proptest-state-machine` reference state
//!   machine, which also shrinks);
//! - [`world`]: servers, proxies, registries and the faults injected into them;
//! - [`task`]: the tasks that acquire (nested in `LockGuard::scope`) and release;
//! - [`check`]: the model of who is inside and the checks;
//! - [`differ`]: the same edge-case input on Redis and on memory;
//! - [`run`]: one schedule, start to end;
//! - [`scan`]: patterns a generated schedule may contain (`--scan`).

pub mod check;
pub mod differ;
pub mod holder;
pub mod model;
pub mod run;
pub mod scan;
pub mod task;
pub mod world;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use proptest_state_machine::ReferenceStateMachine;

pub use model::{schedule_text, Step};
pub use world::{BackendKind, Format};

/// A bug planted in the explorer's adapter layer (never in the library), which the
/// self-test requires the checks to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// No bug.
    None,
    /// The guard's `lost()` is never listened to.
    IgnoreLost,
    /// `try_acquire` answers busy without asking the server.
    TryWithoutServer,
    /// A reentrant lock is released with a raw `DEL` of its hash: no owner check
    /// (Redis backends).
    ReleaseWithoutOwnerCheck,
    /// The fenced resource of the increments takes every claim and write, whatever its
    /// token (the extended generator).
    FenceWithoutCheck,
    /// The paused holder process answers from a flag it set when it took the lock, not
    /// from its guard's `is_held()` ([`Fault::HolderPause`](model::Fault::HolderPause),
    /// with `holders`).
    HolderTrustsAFlag,
}

impl Plant {
    /// Parse a `--plant` value.
    pub fn parse(s: &str) -> Option<Plant> {
        match s {
            "none" => Some(Plant::None),
            "ignore-lost" => Some(Plant::IgnoreLost),
            "try-without-server" => Some(Plant::TryWithoutServer),
            "release-without-owner-check" => Some(Plant::ReleaseWithoutOwnerCheck),
            "fence-without-check" => Some(Plant::FenceWithoutCheck),
            "holder-trusts-a-flag" => Some(Plant::HolderTrustsAFlag),
            _ => None,
        }
    }
}

pub(crate) fn task_kind(k: model::Kind) -> distlock::LockKind {
    match k {
        model::Kind::Fair => distlock::LockKind::Fair,
        model::Kind::Read => distlock::LockKind::Read,
        model::Kind::Write => distlock::LockKind::Write,
        model::Kind::Reentrant
        | model::Kind::Semaphore(_)
        | model::Kind::Multi
        | model::Kind::Leader
        | model::Kind::RunOnce => distlock::LockKind::Reentrant,
    }
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// The backend.
    pub backend: BackendKind,
    /// The lock format (`Redisson`: on single, cluster and sentinel).
    pub format: Format,
    /// The first schedule's seed; schedule `i` uses `seed + i`.
    pub seed: u64,
    /// How many schedules.
    pub schedules: u64,
    /// Steps per schedule: at least, at most.
    pub steps: (usize, usize),
    /// A planted bug (self-test).
    pub plant: Plant,
    /// How many shrinking runs a failure may take.
    pub shrink_iters: u32,
    /// Stop starting schedules after this long (`None`: run them all).
    pub duration: Option<Duration>,
    /// Print each schedule's seed and verdict as it runs.
    pub verbose: bool,
    /// Generate `join!` siblings too (another generator: its seeds are listed with
    /// `siblings`).
    pub siblings: bool,
    /// Names per schedule (default 2; 1 concentrates every step on one lock, another
    /// generator again).
    pub names: u8,
    /// The extended generator: multi-key locks, leader elections, run-once jobs and
    /// fenced increments too (another generator: its seeds are listed with `extended`).
    pub extended: bool,
    /// The focused generator ([`model::GenConfig::focused`]: one name, no faults, nested
    /// acquisitions across kinds, hand-offs to local waiters; its seeds are listed with
    /// `focused`).
    pub focused: bool,
    /// Faults also pause a holder in a process of its own ([`model::GenConfig::holders`];
    /// its seeds are listed with `holders`).
    pub holders: bool,
    /// Faults also reset an owner's connections or lose a reply
    /// ([`model::GenConfig::resets`]; its seeds are listed with `resets`).
    pub resets: bool,
    /// Run differential steps as no-ops (the same schedules, without the memory-vs-Redis
    /// check, e.g. while a known disagreement would hide everything else).
    pub skip_differential: bool,
    /// How many schedules run at once: several on memory (each schedule has names of its
    /// own, and nothing there is shared but the registries), one where a fault would
    /// strike every schedule on the servers.
    pub jobs: usize,
}

impl Options {
    /// Defaults for `backend`: 4 to 24 steps, no plant.
    pub fn new(backend: BackendKind, seed: u64, schedules: u64) -> Options {
        Options {
            backend,
            format: Format::Distlock,
            seed,
            schedules,
            steps: (4, 24),
            plant: Plant::None,
            // A shrinking run costs what a schedule costs: seconds where failovers settle.
            shrink_iters: match backend {
                BackendKind::Memory => 400,
                BackendKind::Single | BackendKind::Redlock | BackendKind::Multi => 40,
                BackendKind::Cluster | BackendKind::Sentinel => 20,
            },
            duration: None,
            verbose: false,
            siblings: false,
            names: model::NAMES,
            extended: false,
            focused: false,
            holders: false,
            resets: false,
            skip_differential: false,
            jobs: match backend {
                BackendKind::Memory => MEMORY_JOBS,
                _ => 1,
            },
        }
    }
}

/// Schedules run at once on memory. A schedule spends nearly all its time waiting
/// (settling steps, waits, leases): on a 2-core VM one runs about 75 a minute alone, and
/// 32 at once about 2,300 a minute with the load average under 1.5.
pub const MEMORY_JOBS: usize = 32;

/// A schedule that broke a rule.
#[derive(Clone, Debug)]
pub struct Finding {
    /// Its seed (`--seed` replays it).
    pub seed: u64,
    /// The schedule as generated.
    pub original: Vec<Step>,
    /// What the generated schedule broke.
    pub original_violations: Vec<String>,
    /// The shrunk schedule.
    pub shrunk: Vec<Step>,
    /// What the shrunk schedule broke.
    pub violations: Vec<String>,
    /// The format it ran in.
    pub format: Format,
    /// Whether the extended generator drew it.
    pub extended: bool,
    /// Whether the focused generator drew it.
    pub focused: bool,
    /// Whether paused holder processes were drawn.
    pub holders: bool,
    /// Whether `join!` siblings were drawn.
    pub siblings: bool,
    /// Whether connection resets and lost replies were drawn.
    pub resets: bool,
}

impl Finding {
    /// The finding as text: seed, shrunk schedule, violations.
    pub fn text(&self, backend: BackendKind) -> String {
        let format = match self.format {
            Format::Distlock => String::new(),
            f => format!(" --format {}", f.name()),
        };
        let flags = [
            (self.extended, " --extended"),
            (self.focused, " --focused"),
            (self.holders, " --holders"),
            (self.siblings, " --siblings"),
            (self.resets, " --resets"),
        ];
        let format = flags
            .iter()
            .filter(|(on, _)| *on)
            .fold(format, |text, (_, flag)| text + flag);
        format!(
            "VIOLATION seed {} (replay: scripts/explore.sh --backend {}{format} --seed {} --schedules 1)\nshrunk schedule ({} of {} steps):\n{}violations of the shrunk schedule:\n{}\nviolations of the generated schedule:\n{}\n",
            self.seed,
            backend.name(),
            self.seed,
            self.shrunk.len(),
            self.original.len(),
            schedule_text(&self.shrunk),
            bullets(&self.violations),
            bullets(&self.original_violations),
        )
    }
}

fn bullets(v: &[String]) -> String {
    v.iter().map(|s| format!("  - {s}\n")).collect()
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Schedules run (not counting shrinking runs).
    pub schedules: u64,
    /// Lock operations in them.
    pub operations: u64,
    /// Faults in them.
    pub faults: u64,
    /// Schedules that broke a rule.
    pub findings: Vec<Finding>,
    /// Why the run stopped early, if its servers could not be restored (e.g. another
    /// process took the private server's port while it was down).
    pub aborted: Option<String>,
}

fn rng_of(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(
            &(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes(),
        );
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The schedule seed `seed` generates with `opts`' generator (without running it).
pub fn generate(opts: &Options, seed: u64) -> Vec<Step> {
    model::set_gen_config(gen_config(opts));
    // Drawn the way a run draws its first case (`TestRunner::run` forks the runner's
    // generator per case, so a tree drawn straight from the runner is another schedule).
    let config = Config {
        cases: 1,
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, rng_of(seed));
    let strategy = model::Schedules::sequential_strategy(opts.steps.0..=opts.steps.1);
    let drawn: RefCell<Vec<Step>> = RefCell::new(Vec::new());
    let _ = runner.run(&strategy, |(_, steps, _)| {
        *drawn.borrow_mut() = steps;
        Ok(())
    });
    drawn.into_inner()
}

fn gen_config(opts: &Options) -> model::GenConfig {
    model::GenConfig {
        faults: opts.backend != BackendKind::Memory && !opts.focused,
        all_kinds: true,
        siblings: opts.siblings,
        names: if opts.focused { 1 } else { opts.names },
        topology: opts.backend.topology(),
        redisson: opts.format == Format::Redisson,
        reentrant_only: opts.backend.quorum(),
        extended: opts.extended,
        focused: opts.focused,
        holders: opts.holders && opts.backend != BackendKind::Memory,
        resets: opts.resets && opts.backend != BackendKind::Memory,
    }
}

fn counts(steps: &[Step]) -> (u64, u64) {
    let faults = steps
        .iter()
        .filter(|s| {
            matches!(
                s,
                Step::FaultBegin(_)
                    | Step::KillClients
                    | Step::ResetConnections { .. }
                    | Step::DeleteKeys(_)
                    | Step::DebugSleep(_)
                    | Step::Failover
            )
        })
        .count() as u64;
    let ops = steps
        .iter()
        .map(|s| match s {
            Step::Acquire(_)
            | Step::Release { .. }
            | Step::ForceUnlock { .. }
            | Step::Increment { .. } => 1,
            Step::Siblings(..) => 2,
            _ => 0,
        })
        .sum();
    (ops, faults)
}

/// Run `opts.schedules` schedules (or until `opts.duration`), shrinking each failure;
/// `opts.jobs` of them at once, each drawn from its own seed as when run alone.
pub fn explore(opts: &Options) -> Summary {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("explorer runtime");
    // Servers that do not come up (a port taken meanwhile, a cluster not ready in time on
    // a loaded machine) abort the run, as servers that fail during it do: once more on
    // fresh servers, never a violation.
    let start = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(world::World::start(opts.backend, opts.format))
    }));
    let world = match start {
        Ok(world) => Arc::new(world),
        Err(e) => {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic".to_owned());
            return Summary {
                aborted: Some(format!("the servers did not start: {why}")),
                ..Summary::default()
            };
        }
    };
    let started = std::time::Instant::now();
    let next = AtomicU64::new(0);
    let parts: Vec<Summary> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..opts.jobs.max(1))
            .map(|_| s.spawn(|| schedules(&rt, &world, opts, started, &next)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("an explorer thread panicked"))
            .collect()
    });
    drop(world);
    rt.shutdown_timeout(Duration::from_secs(2));
    let mut summary = Summary::default();
    for part in parts {
        summary.schedules += part.schedules;
        summary.operations += part.operations;
        summary.faults += part.faults;
        summary.findings.extend(part.findings);
        summary.aborted = summary.aborted.or(part.aborted);
    }
    summary.findings.sort_by_key(|f| f.seed);
    summary
}

/// One worker of [`explore`]: takes the next schedule until none is left, the time is up
/// or the servers broke.
fn schedules(
    rt: &tokio::runtime::Runtime,
    world: &Arc<world::World>,
    opts: &Options,
    started: std::time::Instant,
    next: &AtomicU64,
) -> Summary {
    model::set_gen_config(gen_config(opts));
    let mut summary = Summary::default();
    loop {
        if opts.duration.is_some_and(|d| started.elapsed() >= d) || world.broken().is_some() {
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= opts.schedules {
            break;
        }
        let seed = opts.seed.wrapping_add(i);
        let finding = one(rt, world, opts, seed, &mut summary);
        if let Some(why) = world.broken() {
            summary.aborted = Some(format!("seed {seed}: {why}"));
            break;
        }
        if opts.verbose {
            eprintln!(
                "explore: seed {seed}: {}",
                if finding.is_some() { "VIOLATION" } else { "ok" }
            );
        }
        if let Some(f) = finding {
            if opts.verbose {
                eprintln!("{}", f.text(opts.backend));
            }
            summary.findings.push(f);
        }
    }
    summary
}

static SCHEDULE: AtomicU64 = AtomicU64::new(0);

fn prefix() -> String {
    let run = std::process::id();
    format!("ex{run}.{}.", SCHEDULE.fetch_add(1, Ordering::Relaxed))
}

fn one(
    rt: &tokio::runtime::Runtime,
    world: &Arc<world::World>,
    opts: &Options,
    seed: u64,
    summary: &mut Summary,
) -> Option<Finding> {
    let config = Config {
        cases: 1,
        failure_persistence: None,
        max_shrink_iters: opts.shrink_iters,
        max_shrink_time: 600_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, rng_of(seed));
    let strategy = model::Schedules::sequential_strategy(opts.steps.0..=opts.steps.1);
    let first: RefCell<Option<(Vec<Step>, Vec<String>)>> = RefCell::new(None);
    // The last failing run is the smallest failure (shrinking only simplifies failures);
    // proptest's own answer may be a passing neighbour when a failure is timing-bound.
    let last_fail: RefCell<Option<(Vec<Step>, Vec<String>)>> = RefCell::new(None);
    let result = runner.run(&strategy, |(_, steps, seen)| {
        // Every step ran (the end checks may find what an early step did).
        // (Not when no shrinking follows: proptest then reads the value once more, which
        // a non-zero count forbids.)
        if let Some(seen) = seen.filter(|_| opts.shrink_iters > 0) {
            seen.store(steps.len(), Ordering::SeqCst);
        }
        let run: Vec<Step> = steps
            .iter()
            .filter(|s| !(opts.skip_differential && matches!(s, Step::Differential(_))))
            .cloned()
            .collect();
        let violations = rt.block_on(run::run_schedule(
            world.clone(),
            &run,
            &prefix(),
            opts.plant,
        ));
        if opts.verbose && first.borrow().is_none() {
            eprintln!("explore: seed {seed}:\n{}", schedule_text(&steps));
        }
        if first.borrow().is_none() {
            *first.borrow_mut() = Some((steps.clone(), violations.clone()));
        }
        if !violations.is_empty() {
            *last_fail.borrow_mut() = Some((steps.clone(), violations.clone()));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(violations.join("\n")))
        }
    });
    let (original, original_violations) = first.into_inner().unwrap_or_default();
    let (ops, faults) = counts(&original);
    summary.schedules += 1;
    summary.operations += ops;
    summary.faults += faults;
    match result {
        Ok(()) => None,
        Err(TestError::Fail(..)) => {
            let (shrunk, violations) = last_fail.into_inner().unwrap_or_default();
            Some(Finding {
                seed,
                original,
                original_violations,
                shrunk,
                violations,
                format: opts.format,
                extended: opts.extended,
                focused: opts.focused,
                holders: opts.holders,
                siblings: opts.siblings,
                resets: opts.resets,
            })
        }
        Err(TestError::Abort(msg)) => Some(Finding {
            seed,
            original: original.clone(),
            original_violations: vec![format!("aborted: {msg}")],
            shrunk: original,
            violations: vec![format!("aborted: {msg}")],
            format: opts.format,
            extended: opts.extended,
            focused: opts.focused,
            holders: opts.holders,
            siblings: opts.siblings,
            resets: opts.resets,
        }),
    }
}
