//! The schedule: the steps an explorer run can take, their text form, and the state
//! machine (`proptest-state-machine`) that generates and shrinks them.

use std::cell::Cell;
use std::fmt;

use proptest::prelude::*;
use proptest_state_machine::ReferenceStateMachine;

/// Owners (separate registries) per schedule.
pub const OWNERS: u8 = 2;
/// Tasks per owner.
pub const TASKS: u8 = 3;
/// Lock names per schedule (`k0`, `k1`), shared by the reentrant, fair and read-write
/// kinds, and semaphore names (`s0`).
pub const NAMES: u8 = 2;
/// The permits of every semaphore of a schedule.
pub const PERMITS: u32 = 2;
/// How deep one task nests its acquisitions.
const MAX_DEPTH: u8 = 3;

/// What is acquired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `LockKind::Reentrant`.
    Reentrant,
    /// `LockKind::Fair`.
    Fair,
    /// `LockKind::Read`.
    Read,
    /// `LockKind::Write`.
    Write,
    /// A semaphore of [`PERMITS`] permits; the number taken.
    Semaphore(u32),
    /// A multi-key lock (`Registry::lock_all`) of every name's reentrant lock, `k0` and
    /// `k1`: each key its own reentrant lock, so it conflicts with any holder of any of them.
    Multi,
    /// A leader election (`Registry::leader`, `e<n>`): the lock `leader:e<n>`, auto lease.
    Leader,
    /// A run-once job: the reentrant lock `k<n>` taken with `hold_at_least`
    /// ([`RUN_ONCE_HOLD_MS`]): once in, nobody else gets in before that much has passed.
    RunOnce,
}

/// The `hold_at_least` of a run-once job (below the shortest fixed lease drawn, 400 ms).
pub const RUN_ONCE_HOLD_MS: u32 = 300;

/// Which Redis keys a kind uses: kinds of one family on one name exclude each other,
/// kinds of different families do not (docs/locks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Reentrant locks.
    Reentrant,
    /// Fair locks.
    Fair,
    /// Read-write locks.
    Rw,
    /// Semaphores.
    Semaphore,
    /// Leader elections (keys of their own).
    Leader,
}

impl Kind {
    /// The family of Redis keys it takes.
    pub fn family(self) -> Family {
        match self {
            Kind::Reentrant | Kind::Multi | Kind::RunOnce => Family::Reentrant,
            Kind::Leader => Family::Leader,
            Kind::Fair => Family::Fair,
            Kind::Read | Kind::Write => Family::Rw,
            Kind::Semaphore(_) => Family::Semaphore,
        }
    }

    /// Whether a task holding `self` re-enters it when it asks for `inner` on the same
    /// name (docs/design.md "Reentrancy": no upgrade from read to write).
    pub fn reenters(self, inner: Kind) -> bool {
        use Kind::{Multi, Reentrant, RunOnce};
        // A multi-key lock inner may need a key its task does not hold: never judged here.
        if matches!(self, Reentrant | Multi | RunOnce) && matches!(inner, Reentrant | RunOnce) {
            return true;
        }
        matches!(
            (self, inner),
            (Kind::Reentrant, Kind::Reentrant)
                | (Kind::Fair, Kind::Fair)
                | (Kind::Read, Kind::Read)
                | (Kind::Write, Kind::Write)
                | (Kind::Write, Kind::Read)
        )
    }
}

/// The lease asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseSpec {
    /// `Lease::Auto` (renewed by the watchdog).
    Auto,
    /// `Lease::Fixed` of this many milliseconds.
    Fixed(u32),
}

/// One acquisition by one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    /// Which owner (registry).
    pub owner: u8,
    /// Which task of that owner.
    pub task: u8,
    /// Which name (`k<n>`, or `s<n>` for a semaphore).
    pub name: u8,
    /// What kind.
    pub kind: Kind,
    /// `wait` in milliseconds (0: try once).
    pub wait_ms: u32,
    /// The lease.
    pub lease: LeaseSpec,
    /// `try_acquire` instead of `acquire` (the wait is then 0).
    pub try_once: bool,
    /// The future is dropped after this many milliseconds, at whatever await point it is.
    pub drop_after_ms: Option<u32>,
}

/// A fault the explorer can inject (on the Redis backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The server is SIGKILLed; it comes back at the fault's end with its data
    /// (`persist`: AOF `appendfsync always`) or empty.
    Down {
        /// Whether the data survives.
        persist: bool,
    },
    /// The server is SIGSTOPped; SIGCONT at the fault's end.
    Pause,
    /// The owner's connections go silent (its proxy blackholes them) until the end.
    Blackhole {
        /// Which owner.
        owner: u8,
    },
    /// Redlock and multi: a minority of the nodes (2 of 5; 1 of 3) SIGKILLed; they come
    /// back at the fault's end with their data (`persist`: AOF `appendfsync always`) or
    /// empty.
    NodesDown {
        /// Whether the data survives.
        persist: bool,
    },
    /// Redlock and multi: a minority of the nodes SIGSTOPped; SIGCONT at the end.
    NodesPause,
    /// Cluster and sentinel: the master (on a cluster, the master of `k0`'s slot)
    /// SIGKILLed; its replica takes over, and at the fault's end it is restarted empty
    /// and rejoins as a replica.
    MasterDown,
    /// Cluster and sentinel: the master (of `k0`'s slot) SIGSTOPped; SIGCONT at the end.
    /// Longer than the failure detection (1 s) it is replaced by its replica.
    MasterPause,
    /// A holder in a process of its own (`lock-worker explore-holder`) tries once to take
    /// `k0` (reentrant; `auto`: the auto lease of 1 s, else a fixed one of 1 s) and is
    /// SIGSTOPped holding it; SIGCONT at the end, and not before `pause_ms`. Resumed past
    /// its lease it must know it lost the lock, and hear `lost()` soon. The servers take no fault: every step is
    /// judged meanwhile (the lock is the process's until its lease runs out on the
    /// server, then free). Drawn only with [`GenConfig::holders`].
    HolderPause {
        /// The auto lease (else a fixed one).
        auto: bool,
        /// The shortest pause, in milliseconds.
        pause_ms: u32,
    },
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A task acquires (nested inside what it holds: `LockGuard::scope`).
    Acquire(Acquire),
    /// Two acquisitions by one task at once (`join!`), nested in what it holds; each
    /// holds for 30 ms, then releases. Siblings under one hold take a lock in turns.
    Siblings(Acquire, Acquire),
    /// A task releases its innermost hold.
    Release {
        /// Which owner.
        owner: u8,
        /// Which task.
        task: u8,
    },
    /// `force_unlock` of a name and kind, from an owner.
    ForceUnlock {
        /// Which owner.
        owner: u8,
        /// Which name.
        name: u8,
        /// Which kind.
        kind: Kind,
    },
    /// Let time pass.
    Sleep(u32),
    /// A task increments the fenced counter of its innermost hold's name: claim with its
    /// token, read, 20 ms later write the value plus one with the same token.
    Increment {
        /// Which owner.
        owner: u8,
        /// Which task.
        task: u8,
    },
    /// A fault begins.
    FaultBegin(Fault),
    /// The active fault ends.
    FaultEnd,
    /// `CLIENT KILL` of every client connection.
    KillClients,
    /// Single, redlock and multi: one owner's connections reset (RST) through its fault
    /// proxies now, or (`lose_reply`) the next reply of each of its servers swallowed and
    /// that connection reset: the command ran, the owner never hears of it. Drawn only
    /// with [`GenConfig::resets`].
    ResetConnections {
        /// Whose.
        owner: u8,
        /// Lose the next reply instead of resetting now.
        lose_reply: bool,
    },
    /// The name's keys (every kind's) deleted behind their holders with a raw `DEL`.
    DeleteKeys(u8),
    /// `DEBUG SLEEP` of this many milliseconds on the server (cluster: every master;
    /// sentinel: the master; redlock and multi: a minority of the nodes).
    DebugSleep(u32),
    /// Cluster: `CLUSTER FAILOVER` sent to the replica of `k0`'s master (a coordinated
    /// hand-over); sentinel: `SENTINEL FAILOVER`. The step lasts until the new master
    /// serves and has its replica in sync again.
    Failover,
    /// The same acquisition, with inputs at and beyond the documented bounds, on the Redis
    /// backend and on a memory backend: both must answer alike (accept, or refuse with the
    /// same error).
    Differential(Edge),
}

/// Inputs at the edges of what distlock accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// A semaphore of this many permits (`None`: a reentrant lock).
    pub permits: Option<u32>,
    /// Take every permit (else one).
    pub take_all: bool,
    /// Which key: 0 plain, 1 empty, 2 with a hash tag, 3 of 600 bytes.
    pub key: u8,
    /// A fixed lease of this many milliseconds (`None`: auto).
    pub lease_ms: Option<u32>,
}

fn edge_strategy() -> impl Strategy<Value = Edge> {
    (
        prop::option::weighted(
            0.7,
            prop_oneof![
                Just(1u32),
                Just(2),
                Just(i32::MAX as u32),
                Just(1u32 << 31),
                Just(3_000_000_000),
                Just(u32::MAX)
            ],
        ),
        any::<bool>(),
        0u8..4,
        prop::option::of(prop_oneof![
            Just(1u32),
            Just(2000),
            Just(86_400_000),
            Just(86_400_001)
        ]),
    )
        .prop_map(|(permits, take_all, key, lease_ms)| Edge {
            permits,
            take_all,
            key,
            lease_ms,
        })
}

/// Which faults a backend's servers can take (the generator draws only those).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// In-process: no faults.
    Memory,
    /// One redis-server behind a fault proxy per owner.
    Single,
    /// A private Redis Cluster of 3 masters with a replica each.
    Cluster,
    /// A private master, its replica and 3 sentinels.
    Sentinel,
    /// Independent masters (redlock, multi), each behind a fault proxy per owner.
    Quorum,
}

/// What the generator may use (set by the runner for the thread that generates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Whether faults are possible (not on the memory backend).
    pub faults: bool,
    /// Whether the read-write and fair kinds are available.
    pub all_kinds: bool,
    /// Whether `join!` siblings are generated (off by default: turning it on changes what
    /// every seed generates, so the seeds of `tests/explore-seeds.txt` assume it off).
    pub siblings: bool,
    /// How many names a schedule uses (1 or [`NAMES`]; fewer concentrate the steps on one
    /// lock — another generator again).
    pub names: u8,
    /// The servers' topology: which faults are drawn (a single server in distlock's
    /// format keeps the generator its seeds were listed with).
    pub topology: Topology,
    /// Redisson's format: leases of 400 ms and 2 s instead of 20 s (a nested acquisition
    /// whose reply is lost keeps its count until its lease ends: docs/redisson.md).
    pub redisson: bool,
    /// Whether the mode offers only reentrant locks (redlock, multi): other kinds are
    /// drawn rarely, and must be refused with `Unsupported`.
    pub reentrant_only: bool,
    /// The extended generator: multi-key locks, leader elections, run-once jobs and fenced
    /// increments too (another generator: its seeds are listed with `extended`).
    pub extended: bool,
    /// The focused generator: one name, no faults (so every step is judged), most steps
    /// by one owner's tasks; nested acquisitions of that name across kinds in one task,
    /// tasks of one owner waiting for a reentrant lock another of its tasks holds (the
    /// hand-off to local waiters), `force_unlock` and `try_acquire` in between (another
    /// generator: its seeds are listed with `focused`).
    pub focused: bool,
    /// Faults also pause a holder in a process of its own ([`Fault::HolderPause`];
    /// another generator again: its seeds are listed with `holders`).
    pub holders: bool,
    /// Faults also reset an owner's connections or lose a reply through its proxies
    /// ([`Step::ResetConnections`]; its seeds are listed with `resets`).
    pub resets: bool,
}

thread_local! {
    static GEN: Cell<GenConfig> = const { Cell::new(GenConfig { faults: false, all_kinds: true, siblings: false, names: NAMES, topology: Topology::Memory, redisson: false, reentrant_only: false, extended: false, focused: false, holders: false, resets: false }) };
}

/// Set what the generator of this thread may use.
pub fn set_gen_config(cfg: GenConfig) {
    GEN.with(|g| g.set(cfg));
}

/// The model the generator keeps: what each task holds (the kinds it asked for, outermost
/// first, whether or not they were granted) and whether a fault is on.
#[derive(Clone, Debug)]
pub struct ModelState {
    cfg: GenConfig,
    held: Vec<Vec<Kind>>,
    /// The step at which each task's outermost acquisition was drawn (of the tasks of one
    /// owner holding a lock, the earliest is likely its holder, the others its waiters).
    since: Vec<usize>,
    /// Steps drawn so far.
    steps: usize,
    /// Per owner, how far a hand-off seam has come: 1 its holder released the reentrant
    /// lock while another of its tasks held or waited for it (handed to that task), 2 a
    /// `force_unlock` of the lock followed (the handed hold revoked); the focused generator
    /// then draws the next step of the seam more often.
    seam: Vec<u8>,
    fault_on: bool,
}

impl ModelState {
    fn depth(&self, owner: u8, task: u8) -> u8 {
        self.held[usize::from(owner * TASKS + task)].len() as u8
    }

    fn held_mut(&mut self, owner: u8, task: u8) -> &mut Vec<Kind> {
        &mut self.held[usize::from(owner * TASKS + task)]
    }

    /// When task `owner.task`'s outermost acquisition was drawn.
    fn since(&self, owner: u8, task: u8) -> usize {
        self.since[usize::from(owner * TASKS + task)]
    }

    /// Whether `owner.task`, releasing now, would hand the reentrant lock to another task of
    /// its owner: its only hold is the reentrant lock, which a later task of the owner
    /// holds or waits for.
    fn hands_off(&self, owner: u8, task: u8) -> bool {
        let held = |t: u8| &self.held[usize::from(owner * TASKS + t)];
        held(task).as_slice() == [Kind::Reentrant]
            && (0..TASKS).any(|t| {
                t != task
                    && held(t).first() == Some(&Kind::Reentrant)
                    && self.since(owner, t) > self.since(owner, task)
            })
    }

    /// Every task, with what it holds.
    fn tasks(&self) -> impl Iterator<Item = (u8, u8, &Vec<Kind>)> {
        (0..OWNERS).flat_map(move |o| {
            (0..TASKS).map(move |t| (o, t, &self.held[usize::from(o * TASKS + t)]))
        })
    }
}

/// The generator of schedules.
pub struct Schedules;

fn kind_strategy(all: bool) -> BoxedStrategy<Kind> {
    if all {
        prop_oneof![
            3 => Just(Kind::Reentrant),
            1 => Just(Kind::Fair),
            1 => Just(Kind::Read),
            1 => Just(Kind::Write),
            1 => (1..=PERMITS).prop_map(Kind::Semaphore),
        ]
        .boxed()
    } else {
        prop_oneof![3 => Just(Kind::Reentrant), 1 => (1..=PERMITS).prop_map(Kind::Semaphore)]
            .boxed()
    }
}

/// Kinds where only reentrant locks are offered: the others rarely (each must be refused).
fn reentrant_mostly() -> BoxedStrategy<Kind> {
    prop_oneof![
        24 => Just(Kind::Reentrant),
        1 => Just(Kind::Fair),
        1 => Just(Kind::Read),
        1 => Just(Kind::Write),
        1 => (1..=PERMITS).prop_map(Kind::Semaphore),
    ]
    .boxed()
}

/// The extended generator's kinds: the others, and multi-key locks, elections and
/// run-once jobs.
fn extended_kinds(reentrant_only: bool) -> BoxedStrategy<Kind> {
    let base = if reentrant_only {
        reentrant_mostly()
    } else {
        kind_strategy(true)
    };
    // Where only reentrant locks are offered: multi-key locks and run-once jobs are
    // reentrant locks (offered), elections are not.
    let (multi, leader, run_once) = if reentrant_only { (6, 1, 4) } else { (2, 2, 2) };
    prop_oneof![
        8 => base,
        multi => Just(Kind::Multi),
        leader => Just(Kind::Leader),
        run_once => Just(Kind::RunOnce),
    ]
    .boxed()
}

fn kinds_of(cfg: &GenConfig) -> BoxedStrategy<Kind> {
    if cfg.extended {
        extended_kinds(cfg.reentrant_only)
    } else if cfg.reentrant_only {
        reentrant_mostly()
    } else {
        kind_strategy(cfg.all_kinds)
    }
}

fn acquire_strategy(cfg: &GenConfig, names: u8) -> impl Strategy<Value = Acquire> {
    let long = if cfg.redisson { 2000 } else { 20_000 };
    (
        (0..OWNERS, 0..TASKS, 0..names),
        kinds_of(cfg),
        prop_oneof![Just(0u32), Just(0), Just(100), Just(400), Just(1000)],
        prop_oneof![
            2 => Just(LeaseSpec::Auto),
            1 => Just(LeaseSpec::Fixed(400)),
            1 => Just(LeaseSpec::Fixed(long)),
        ],
        prop::bool::weighted(0.2),
        prop::option::weighted(0.15, prop_oneof![Just(0u32), Just(1), Just(5), Just(30)]),
    )
        .prop_map(
            |((owner, task, name), kind, wait_ms, lease, try_once, drop_after_ms)| Acquire {
                owner,
                task,
                name,
                kind,
                wait_ms,
                lease,
                try_once,
                drop_after_ms,
            },
        )
}

fn fault_strategy() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::Down { persist: true }),
        Just(Fault::Down { persist: false }),
        Just(Fault::Pause),
        (0..OWNERS).prop_map(|owner| Fault::Blackhole { owner }),
    ]
}

/// The lasting faults of a topology, and a paused holder process with `holders`.
fn faults_of(cfg: &GenConfig) -> BoxedStrategy<Fault> {
    let servers = server_faults(cfg.topology);
    if cfg.holders {
        prop_oneof![
            3 => servers,
            1 => (any::<bool>(), prop_oneof![Just(300u32), Just(1500), Just(2500)])
                .prop_map(|(auto, pause_ms)| Fault::HolderPause { auto, pause_ms }),
        ]
        .boxed()
    } else {
        servers
    }
}

/// The lasting faults of a topology's servers.
fn server_faults(topology: Topology) -> BoxedStrategy<Fault> {
    match topology {
        Topology::Memory | Topology::Single => fault_strategy().boxed(),
        Topology::Cluster | Topology::Sentinel => {
            prop_oneof![Just(Fault::MasterDown), Just(Fault::MasterPause)].boxed()
        }
        Topology::Quorum => prop_oneof![
            Just(Fault::NodesDown { persist: true }),
            Just(Fault::NodesDown { persist: false }),
            Just(Fault::NodesPause),
            (0..OWNERS).prop_map(|owner| Fault::Blackhole { owner }),
        ]
        .boxed(),
    }
}

/// A reset of one owner's connections, or a lost reply.
fn resets() -> BoxedStrategy<Step> {
    (0..OWNERS, any::<bool>())
        .prop_map(|(owner, lose_reply)| Step::ResetConnections { owner, lose_reply })
        .boxed()
}

/// The focused generator's kinds: every kind of name 0, reentrant most often (the kind
/// that hands off).
fn focused_kinds() -> BoxedStrategy<Kind> {
    prop_oneof![
        4 => Just(Kind::Reentrant),
        2 => Just(Kind::Read),
        1 => Just(Kind::Write),
        1 => Just(Kind::Fair),
        1 => (1..=PERMITS).prop_map(Kind::Semaphore),
    ]
    .boxed()
}

/// An acquisition of name 0 by `owner.task`: `wait` in milliseconds, `try_acquire` if
/// `try_once`.
fn focused_acquire(
    who: impl Strategy<Value = (u8, u8)>,
    kind: impl Strategy<Value = Kind>,
    wait: impl Strategy<Value = (u32, bool)>,
) -> impl Strategy<Value = Step> {
    (
        who,
        kind,
        wait,
        prop_oneof![
            2 => Just(LeaseSpec::Auto),
            1 => Just(LeaseSpec::Fixed(400)),
            1 => Just(LeaseSpec::Fixed(20_000)),
        ],
        prop::option::weighted(0.05, prop_oneof![Just(1u32), Just(5), Just(30)]),
    )
        .prop_map(
            |((owner, task), kind, (wait_ms, try_once), lease, drop_after_ms)| {
                Step::Acquire(Acquire {
                    owner,
                    task,
                    name: 0,
                    kind,
                    wait_ms,
                    lease,
                    try_once,
                    drop_after_ms,
                })
            },
        )
}

/// Waits of the focused generator: `try_acquire`, `wait` 0, 400 ms, 1 s.
fn focused_wait() -> BoxedStrategy<(u32, bool)> {
    prop_oneof![
        2 => Just((0u32, true)),
        1 => Just((0, false)),
        2 => Just((400, false)),
        2 => Just((1000, false)),
    ]
    .boxed()
}

/// The focused generator's next step (see [`GenConfig::focused`]): the tasks to draw from
/// are those the steps can serve (a nested acquisition by a task that holds something, a
/// waiter beside a sibling task's reentrant hold, a release by a task that holds).
fn focused_transitions(state: &ModelState) -> BoxedStrategy<Step> {
    let room: Vec<(u8, u8)> = state
        .tasks()
        .filter(|(_, _, h)| h.len() < usize::from(MAX_DEPTH))
        .map(|(o, t, _)| (o, t))
        .collect();
    // Mostly owner 0: its tasks hand the lock to each other.
    let mine: Vec<(u8, u8)> = room.iter().copied().filter(|(o, _)| *o == 0).collect();
    let nesting: Vec<(u8, u8, Vec<Kind>)> = state
        .tasks()
        .filter(|(_, _, h)| !h.is_empty() && h.len() < usize::from(MAX_DEPTH))
        .map(|(o, t, h)| (o, t, h.clone()))
        .collect();
    let holding: Vec<(u8, u8)> = state
        .tasks()
        .filter(|(_, _, h)| !h.is_empty())
        .map(|(o, t, _)| (o, t))
        .collect();
    // Idle tasks of an owner another of whose tasks holds the reentrant lock.
    let beside: Vec<(u8, u8)> = state
        .tasks()
        .filter(|(o, t, h)| {
            h.is_empty()
                && state
                    .tasks()
                    .any(|(o2, t2, h2)| o2 == *o && t2 != *t && h2.contains(&Kind::Reentrant))
        })
        .map(|(o, t, _)| (o, t))
        .collect();
    let mut arms: Vec<(u32, BoxedStrategy<Step>)> = vec![
        (
            3,
            (
                0..OWNERS,
                prop_oneof![3 => Just(Kind::Reentrant), 1 => focused_kinds()],
            )
                .prop_map(|(owner, kind)| Step::ForceUnlock {
                    owner,
                    name: 0,
                    kind,
                })
                .boxed(),
        ),
        (
            1,
            prop_oneof![Just(50u32), Just(300)]
                .prop_map(Step::Sleep)
                .boxed(),
        ),
    ];
    if !room.is_empty() {
        let who = prop::sample::select(room.clone());
        arms.push((
            4,
            focused_acquire(who, focused_kinds(), focused_wait()).boxed(),
        ));
        // A try of the reentrant lock (wait 0), mostly by an idle task of owner 0.
        let idle: Vec<(u8, u8)> = mine
            .iter()
            .copied()
            .filter(|(o, t)| state.depth(*o, *t) == 0)
            .collect();
        let mine = if idle.is_empty() { mine } else { idle };
        let who = if mine.is_empty() {
            prop::sample::select(room).boxed()
        } else {
            prop_oneof![3 => prop::sample::select(mine), 1 => prop::sample::select(room)].boxed()
        };
        let kind = prop_oneof![3 => Just(Kind::Reentrant), 1 => focused_kinds()];
        let wait = prop_oneof![3 => Just((0u32, true)), 1 => Just((0, false))];
        arms.push((3, focused_acquire(who, kind, wait).boxed()));
    }
    if !nesting.is_empty() {
        // A kind the task holds already (re-entered across the kinds between) or another.
        let nested = prop::sample::select(nesting).prop_flat_map(|(o, t, held)| {
            let kind = prop_oneof![3 => prop::sample::select(held), 2 => focused_kinds()];
            focused_acquire(Just((o, t)), kind, focused_wait())
        });
        arms.push((5, nested.boxed()));
    }
    if !beside.is_empty() {
        let wait = prop_oneof![3 => Just((1000u32, false)), 1 => Just((400, false))];
        let waiter = focused_acquire(prop::sample::select(beside), Just(Kind::Reentrant), wait);
        arms.push((5, waiter.boxed()));
    }
    if !holding.is_empty() {
        let release =
            prop::sample::select(holding).prop_map(|(owner, task)| Step::Release { owner, task });
        arms.push((5, release.boxed()));
    }
    // The holder of a reentrant lock its owner's other tasks wait for (the earliest of the
    // owner's tasks holding it) releases: the lock is handed to a waiter.
    let holders: Vec<(u8, u8)> = (0..OWNERS)
        .filter_map(|o| {
            let mut reentrant: Vec<u8> = (0..TASKS)
                .filter(|t| {
                    state.held[usize::from(o * TASKS + t)].first() == Some(&Kind::Reentrant)
                })
                .collect();
            reentrant.sort_by_key(|t| state.since(o, *t));
            (reentrant.len() > 1).then(|| (o, reentrant[0]))
        })
        .collect();
    if !holders.is_empty() {
        let release =
            prop::sample::select(holders).prop_map(|(owner, task)| Step::Release { owner, task });
        arms.push((6, release.boxed()));
    }
    // A hand-off seam under way: its next step, often (a hold handed to a task revoked,
    // then a try of the lock by an idle task of the same owner).
    if state.seam.contains(&1) {
        let revoke = (0..OWNERS).prop_map(|owner| Step::ForceUnlock {
            owner,
            name: 0,
            kind: Kind::Reentrant,
        });
        arms.push((20, revoke.boxed()));
    }
    let tries: Vec<(u8, u8)> = state
        .tasks()
        .filter(|(o, _, h)| state.seam[usize::from(*o)] == 2 && h.is_empty())
        .map(|(o, t, _)| (o, t))
        .collect();
    if !tries.is_empty() {
        let wait = prop_oneof![3 => Just((0u32, true)), 1 => Just((0, false))];
        let try_once = focused_acquire(prop::sample::select(tries), Just(Kind::Reentrant), wait);
        arms.push((40, try_once.boxed()));
    }
    proptest::strategy::Union::new_weighted(arms).boxed()
}

impl ReferenceStateMachine for Schedules {
    type State = ModelState;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<ModelState> {
        let cfg = GEN.with(Cell::get);
        Just(ModelState {
            cfg,
            held: vec![Vec::new(); usize::from(OWNERS * TASKS)],
            since: vec![0; usize::from(OWNERS * TASKS)],
            steps: 0,
            seam: vec![0; usize::from(OWNERS)],
            fault_on: false,
        })
        .boxed()
    }

    fn transitions(state: &ModelState) -> BoxedStrategy<Step> {
        let cfg = state.cfg;
        if cfg.focused {
            return focused_transitions(state);
        }
        let names = state.cfg.names.clamp(1, NAMES);
        let ops = prop_oneof![
            8 => acquire_strategy(&cfg, names).prop_map(Step::Acquire),
            5 => (0..OWNERS, 0..TASKS).prop_map(|(owner, task)| Step::Release { owner, task }),
            1 => (0..OWNERS, 0..names, kinds_of(&cfg))
                .prop_map(|(owner, name, kind)| Step::ForceUnlock { owner, name, kind }),
            1 => prop_oneof![Just(50u32), Just(300), Just(1200)].prop_map(Step::Sleep),
        ];
        let ops = if state.cfg.extended {
            prop_oneof![
                15 => ops,
                4 => (0..OWNERS, 0..TASKS).prop_map(|(owner, task)| Step::Increment { owner, task }),
            ]
            .boxed()
        } else {
            ops.boxed()
        };
        let ops = if state.cfg.siblings {
            let siblings = (acquire_strategy(&cfg, names), acquire_strategy(&cfg, names)).prop_map(
                |(a, mut b)| {
                    (b.owner, b.task) = (a.owner, a.task);
                    Step::Siblings(a, b)
                },
            );
            prop_oneof![7 => ops, 1 => siblings].boxed()
        } else {
            ops.boxed()
        };
        if !state.cfg.faults {
            return ops;
        }
        let fault = if state.fault_on {
            Just(Step::FaultEnd).boxed()
        } else {
            faults_of(&cfg).prop_map(Step::FaultBegin).boxed()
        };
        if cfg.topology != Topology::Single {
            let mut arms: Vec<(u32, BoxedStrategy<Step>)> = vec![
                (12, ops),
                (2, fault),
                (1, Just(Step::KillClients).boxed()),
                (1, (0..names).prop_map(Step::DeleteKeys).boxed()),
                (
                    1,
                    prop_oneof![Just(200u32), Just(700)]
                        .prop_map(Step::DebugSleep)
                        .boxed(),
                ),
                (1, edge_strategy().prop_map(Step::Differential).boxed()),
            ];
            let failover = matches!(cfg.topology, Topology::Cluster | Topology::Sentinel);
            if failover && !state.fault_on {
                arms.push((1, Just(Step::Failover).boxed()));
            }
            if cfg.resets && cfg.topology == Topology::Quorum {
                arms.push((1, resets()));
            }
            return proptest::strategy::Union::new_weighted(arms).boxed();
        }
        let arms = prop_oneof![
            12 => ops,
            2 => fault,
            1 => Just(Step::KillClients),
            1 => (0..names).prop_map(Step::DeleteKeys),
            1 => prop_oneof![Just(200u32), Just(700)].prop_map(Step::DebugSleep),
            1 => edge_strategy().prop_map(Step::Differential),
        ];
        if cfg.resets {
            prop_oneof![18 => arms, 1 => resets()].boxed()
        } else {
            arms.boxed()
        }
    }

    fn preconditions(state: &ModelState, step: &Step) -> bool {
        match step {
            Step::Acquire(a) => state.depth(a.owner, a.task) < MAX_DEPTH,
            Step::Siblings(a, b) => (a.owner, a.task) == (b.owner, b.task),
            Step::Release { owner, task } | Step::Increment { owner, task } => {
                state.depth(*owner, *task) > 0
            }
            Step::FaultBegin(_) => state.cfg.faults && !state.fault_on,
            Step::FaultEnd => state.fault_on,
            Step::Failover => {
                state.cfg.faults
                    && !state.fault_on
                    && matches!(state.cfg.topology, Topology::Cluster | Topology::Sentinel)
            }
            Step::KillClients
            | Step::ResetConnections { .. }
            | Step::DeleteKeys(_)
            | Step::DebugSleep(_)
            | Step::Differential(_) => state.cfg.faults,
            Step::ForceUnlock { .. } | Step::Sleep(_) => true,
        }
    }

    fn apply(mut state: ModelState, step: &Step) -> ModelState {
        match step {
            Step::Acquire(a) => {
                if state.depth(a.owner, a.task) == 0 {
                    state.since[usize::from(a.owner * TASKS + a.task)] = state.steps;
                }
                state.held_mut(a.owner, a.task).push(a.kind);
                let once = a.try_once || a.wait_ms == 0;
                if a.kind == Kind::Reentrant && once {
                    state.seam[usize::from(a.owner)] = 0;
                }
            }
            Step::Release { owner, task } => {
                if state.hands_off(*owner, *task) {
                    state.seam[usize::from(*owner)] = 1;
                }
                state.held_mut(*owner, *task).pop();
            }
            Step::ForceUnlock {
                kind: Kind::Reentrant,
                ..
            } => {
                for s in state.seam.iter_mut().filter(|s| **s == 1) {
                    *s = 2;
                }
            }
            Step::FaultBegin(_) => state.fault_on = true,
            Step::FaultEnd => state.fault_on = false,
            _ => {}
        }
        state.steps += 1;
        state
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Reentrant => f.write_str("reentrant"),
            Kind::Fair => f.write_str("fair"),
            Kind::Read => f.write_str("read"),
            Kind::Write => f.write_str("write"),
            Kind::Semaphore(n) => write!(f, "semaphore({n} of {PERMITS})"),
            Kind::Multi => f.write_str("multi-key"),
            Kind::Leader => f.write_str("leader"),
            Kind::RunOnce => write!(f, "run-once(hold_at_least {RUN_ONCE_HOLD_MS}ms)"),
        }
    }
}

/// The name of lock `n` for a kind, as the schedule text shows it.
pub fn name_text(kind: Kind, n: u8) -> String {
    match kind {
        Kind::Semaphore(_) => format!("s{n}"),
        Kind::Multi => (0..NAMES)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join("+"),
        Kind::Leader => format!("e{n}"),
        _ => format!("k{n}"),
    }
}

fn acquire_text(a: &Acquire) -> String {
    Step::Acquire(a.clone()).to_string()
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Siblings(a, b) => {
                let b = acquire_text(b);
                let b = b.split_once(' ').map_or(b.as_str(), |(_, rest)| rest);
                write!(f, "join!({}, {b}), each held 30ms", acquire_text(a))
            }
            Step::Acquire(a) => {
                let call = if a.try_once { "try_acquire" } else { "acquire" };
                write!(
                    f,
                    "o{}.t{} {call} {} {}",
                    a.owner,
                    a.task,
                    a.kind,
                    name_text(a.kind, a.name)
                )?;
                if !a.try_once {
                    write!(f, " wait={}ms", a.wait_ms)?;
                }
                match a.lease {
                    LeaseSpec::Auto => f.write_str(" lease=auto")?,
                    LeaseSpec::Fixed(ms) => write!(f, " lease={ms}ms")?,
                }
                if let Some(ms) = a.drop_after_ms {
                    write!(f, " (future dropped after {ms}ms)")?;
                }
                Ok(())
            }
            Step::Release { owner, task } => write!(f, "o{owner}.t{task} release innermost"),
            Step::Increment { owner, task } => write!(
                f,
                "o{owner}.t{task} fenced increment (claim, read, write) under its innermost hold"
            ),
            Step::ForceUnlock { owner, name, kind } => {
                write!(
                    f,
                    "o{owner} force_unlock {kind} {}",
                    name_text(*kind, *name)
                )
            }
            Step::Sleep(ms) => write!(f, "sleep {ms}ms"),
            Step::FaultBegin(Fault::Down { persist }) => {
                let how = if *persist {
                    "AOF always"
                } else {
                    "no persistence"
                };
                write!(f, "fault: server SIGKILLed ({how})")
            }
            Step::FaultBegin(Fault::Pause) => f.write_str("fault: server SIGSTOPped"),
            Step::FaultBegin(Fault::Blackhole { owner }) => {
                write!(f, "fault: o{owner}'s connections blackholed")
            }
            Step::FaultBegin(Fault::NodesDown { persist }) => {
                let how = if *persist {
                    "AOF always"
                } else {
                    "no persistence"
                };
                write!(f, "fault: a minority of the nodes SIGKILLed ({how})")
            }
            Step::FaultBegin(Fault::NodesPause) => {
                f.write_str("fault: a minority of the nodes SIGSTOPped")
            }
            Step::FaultBegin(Fault::MasterDown) => f.write_str(
                "fault: the master (of k0's slot) SIGKILLed; at the end it rejoins empty",
            ),
            Step::FaultBegin(Fault::MasterPause) => {
                f.write_str("fault: the master (of k0's slot) SIGSTOPped")
            }
            Step::FaultBegin(Fault::HolderPause { auto, pause_ms }) => {
                let lease = if *auto { "auto lease" } else { "fixed lease" };
                write!(
                    f,
                    "fault: a holder process takes k0 ({lease}, 1s) and is SIGSTOPped (at least {pause_ms}ms)"
                )
            }
            Step::Failover => f.write_str(
                "fault: failover (CLUSTER FAILOVER on the replica of k0's master / SENTINEL FAILOVER)",
            ),
            Step::FaultEnd => f.write_str("fault ends (restart / SIGCONT / proxy open)"),
            Step::KillClients => f.write_str("fault: CLIENT KILL of every client"),
            Step::ResetConnections {
                owner,
                lose_reply: false,
            } => write!(f, "fault: o{owner}'s connections reset"),
            Step::ResetConnections {
                owner,
                lose_reply: true,
            } => write!(
                f,
                "fault: o{owner}'s next reply from each server lost, its connection reset"
            ),
            Step::DeleteKeys(n) => write!(f, "fault: raw DEL of every key of k{n} and s{n}"),
            Step::DebugSleep(ms) => write!(f, "fault: DEBUG SLEEP {ms}ms"),
            Step::Differential(e) => {
                let key = [
                    "a plain key",
                    "the empty key",
                    "a key with a hash tag",
                    "a 600-byte key",
                ][usize::from(e.key % 4)];
                match e.permits {
                    Some(p) => write!(
                        f,
                        "memory vs redis: semaphore({p}) on {key} acquire({})",
                        if e.take_all { p } else { 1 }
                    )?,
                    None => write!(f, "memory vs redis: reentrant lock on {key}")?,
                }
                match e.lease_ms {
                    Some(ms) => write!(f, " lease={ms}ms"),
                    None => f.write_str(" lease=auto"),
                }
            }
        }
    }
}

/// A schedule as numbered lines.
pub fn schedule_text(steps: &[Step]) -> String {
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("  {i:>2}. {s}\n"))
        .collect()
}
