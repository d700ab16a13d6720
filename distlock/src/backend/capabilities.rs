//! What a backend offers. Known from its configuration before it is connected: which lock
//! kinds each mode serves, semaphores, and what `protocol = "redisson"` cannot be combined
//! with. Once connected, its [`Capabilities`]: those, and what its topology tells
//! ([`Facts`]), computed once.

use std::time::Duration;

use distlock_config::{BackendConfig, Mode, ModeKind, Protocol};

use crate::protocol::keys::FenceScope;
use crate::protocol::Publish;
use crate::Feature;
use crate::{InitError, LockError, LockKind};

/// How a change of leader is announced (`Backend::announce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Announce {
    /// To the watchers in this process (memory).
    Deliver,
    /// Published on the lock's server with this verb (single, sentinel, cluster).
    Publish(Publish),
    /// Not offered: a message goes to one server, a quorum backend has independent masters.
    NotOffered,
}

/// What a connected topology tells about itself.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    /// Which counter its fencing tokens come from.
    pub(super) fence_scope: FenceScope,
    /// Whether it can hand a lock on to a waiter in one script (before the configuration
    /// and the format have their say).
    pub(super) hand_off: bool,
    /// `redlock` or `multi` and its clock drift allowance, on a quorum backend.
    pub(super) quorum: Option<(&'static str, f64)>,
    /// How a change of leader is announced.
    pub(super) announce: Announce,
    /// Whether it is a Redis Cluster.
    pub(super) cluster: bool,
    /// The address each reply of a script run comes from (every node of a quorum, in
    /// order); `None`: the backend's address.
    pub(super) reply_addresses: Option<Vec<String>>,
}

/// What a backend offers, computed once when it is connected: every fact its methods
/// answer with is a field read.
#[derive(Debug, Clone)]
pub(super) struct Capabilities {
    /// The lock kinds it serves.
    pub(super) kinds: Vec<LockKind>,
    /// Whether it serves semaphores.
    pub(super) semaphores: bool,
    /// Whether a release hands the lock to a local waiter (`crate::lease::handoff`).
    pub(super) hand_off: bool,
    /// Which counter its fencing tokens come from.
    pub(super) fence_scope: FenceScope,
    /// `redlock` or `multi`, on a quorum backend.
    pub(super) quorum_mode: Option<&'static str>,
    /// The clock drift allowance as a fraction of the lease (quorum backends).
    pub(super) drift_factor: Option<f64>,
    /// How a change of leader is announced.
    pub(super) announce: Announce,
    /// Whether it is a Redis Cluster.
    pub(super) cluster: bool,
    /// The address each reply of a script run comes from; `None`: the backend's address.
    pub(super) reply_addresses: Option<Vec<String>>,
}

/// How long a lease granted (or renewed) now is valid, as far as this process can tell,
/// when clocks may drift by `factor` of it: less `lease × factor + 2 ms`.
pub(super) fn validity_under_drift(lease: Duration, factor: f64) -> Duration {
    lease.saturating_sub(lease.mul_f64(factor) + Duration::from_millis(2))
}

impl Capabilities {
    /// The capabilities of the backend `cfg` describes, whose topology told `facts`.
    pub(super) fn of(cfg: &BackendConfig, facts: Facts) -> Capabilities {
        let (mode, protocol) = (cfg.mode.kind(), cfg.protocol);
        let all = [
            LockKind::Reentrant,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
        ];
        Capabilities {
            kinds: all
                .into_iter()
                .filter(|&k| offers(&cfg.name, mode, protocol, k).is_ok())
                .collect(),
            semaphores: semaphore_offered(&cfg.name, mode, protocol).is_ok(),
            // `handoff = false`: barging on every mode (a release frees the lock and
            // publishes).
            hand_off: cfg.handoff && protocol == Protocol::Distlock && facts.hand_off,
            fence_scope: facts.fence_scope,
            quorum_mode: facts.quorum.map(|(mode, _)| mode),
            drift_factor: facts.quorum.map(|(_, drift)| drift),
            announce: facts.announce,
            cluster: facts.cluster,
            reply_addresses: facts.reply_addresses,
        }
    }

    /// How long a lease of `lease` granted now is valid, as far as this process can tell:
    /// less the part clock drift may eat on a quorum backend ([`validity_under_drift`]).
    pub(super) fn validity(&self, lease: Duration) -> Duration {
        match self.drift_factor {
            Some(factor) => validity_under_drift(lease, factor),
            None => lease,
        }
    }

    /// Whether it serves lock kind `kind`.
    pub(super) fn offers(&self, kind: LockKind) -> bool {
        self.kinds.contains(&kind)
    }
}

/// `kind` refused on backend `name` of `mode` in `format`, for `reason`.
pub(super) fn unsupported(
    name: &str,
    kind: Feature,
    format: Protocol,
    mode: ModeKind,
    reason: impl Into<String>,
) -> LockError {
    LockError::Unsupported {
        backend: name.to_owned(),
        kind,
        format,
        mode,
        reason: reason.into(),
    }
}

/// Whether a backend of `mode` offers lock kind `kind` (known before it is connected).
/// Every kind is offered in both protocols (`protocol = "redisson"` is refused at init on
/// the modes it cannot serve).
pub(crate) fn mode_offers(
    name: &str,
    mode: &Mode,
    protocol: Protocol,
    kind: LockKind,
) -> Result<(), LockError> {
    offers(name, mode.kind(), protocol, kind)
}

/// Whether a backend of `mode` offers semaphores (known before it is connected).
pub(crate) fn mode_offers_semaphore(
    name: &str,
    mode: &Mode,
    protocol: Protocol,
) -> Result<(), LockError> {
    semaphore_offered(name, mode.kind(), protocol)
}

/// Whether `mode` is a quorum mode (independent masters).
fn is_quorum(mode: ModeKind) -> bool {
    match mode {
        ModeKind::Redlock | ModeKind::Multi => true,
        ModeKind::Single | ModeKind::Cluster | ModeKind::Sentinel | ModeKind::Memory => false,
    }
}

/// Semaphores need their holders counted in one place (one server, one cluster slot, or
/// this process), in distlock's format: a quorum backend or Redisson's format refuses them.
pub(super) fn semaphore_offered(
    name: &str,
    mode: ModeKind,
    protocol: Protocol,
) -> Result<(), LockError> {
    if is_quorum(mode) {
        return Err(unsupported(name, Feature::Semaphore, protocol, mode,
            "a semaphore's holders must be counted in one place; use a single, cluster, sentinel or memory backend"));
    }
    match protocol {
        Protocol::Distlock => Ok(()),
        Protocol::Redisson => Err(unsupported(name, Feature::Semaphore, protocol, mode,
            "Redisson's semaphore formats are not covered: distlock speaks its reentrant, fenced, fair and read-write locks; see docs/redisson.md")),
    }
}

/// What `protocol = "redisson"` cannot be combined with, as an init error.
pub(super) fn protocol_fits(cfg: &BackendConfig) -> Result<(), InitError> {
    if cfg.protocol != Protocol::Redisson {
        return Ok(());
    }
    let what = match &cfg.mode {
        Mode::Redlock { .. } | Mode::Multi { .. } => format!(
            "protocol = \"redisson\" with mode = \"{}\": Redisson's lock format lives on one master (its RedissonRedLock/RedissonMultiLock are not covered); use mode single, cluster or sentinel",
            cfg.mode.name()
        ),
        Mode::Memory => "protocol = \"redisson\" with mode = \"memory\"".to_string(),
        Mode::Single { .. } | Mode::Cluster { .. } | Mode::Sentinel { .. } if cfg.holder_info => {
            "protocol = \"redisson\" with holder_info = true: Redisson's format has no place for holder information".to_string()
        }
        Mode::Single { .. } | Mode::Cluster { .. } | Mode::Sentinel { .. } => return Ok(()),
    };
    Err(InitError::Unsupported {
        backend: cfg.name.clone(),
        message: what,
    })
}

/// Fair and read-write locks need one master or one cluster slot: a quorum backend
/// offers only reentrant locks.
pub(super) fn offers(
    name: &str,
    mode: ModeKind,
    protocol: Protocol,
    kind: LockKind,
) -> Result<(), LockError> {
    match kind {
        LockKind::Reentrant => Ok(()),
        LockKind::Fair | LockKind::Read | LockKind::Write if !is_quorum(mode) => Ok(()),
        LockKind::Fair | LockKind::Read | LockKind::Write => Err(unsupported(
            name,
            Feature::Lock(kind),
            protocol,
            mode,
            "fair and read-write locks need one master or one cluster slot; use a single, cluster, sentinel or memory backend",
        )),
    }
}
