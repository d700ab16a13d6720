//! What a backend offers, known from its configuration before it is connected: which lock
//! kinds each mode serves, semaphores, and what `protocol = "redisson"` cannot be combined
//! with.

use distlock_config::{BackendConfig, Mode, ModeKind, Protocol};

use crate::Feature;
use crate::{InitError, LockError, LockKind};

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
