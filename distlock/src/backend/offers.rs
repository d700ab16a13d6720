//! What a backend offers, known from its configuration before it is connected: which lock
//! kinds each mode serves, semaphores, and what `protocol = "redisson"` cannot be combined
//! with.

use distlock_config::{BackendConfig, Mode, Protocol};

use crate::{InitError, LockError, LockKind};

/// Whether a backend of `mode` offers lock kind `kind` (known before it is connected).
/// Every kind is offered in both protocols (`protocol = "redisson"` is refused at init on
/// the modes it cannot serve).
pub(crate) fn mode_offers(name: &str, mode: &Mode, kind: LockKind) -> Result<(), LockError> {
    offers(name, quorum_of(mode), kind)
}

/// Whether a backend of `mode` offers semaphores (known before it is connected).
pub(crate) fn mode_offers_semaphore(
    name: &str,
    mode: &Mode,
    protocol: Protocol,
) -> Result<(), LockError> {
    semaphore_offered(name, quorum_of(mode), protocol)
}

/// The name of `mode` when it is a quorum mode.
fn quorum_of(mode: &Mode) -> Option<&'static str> {
    match mode {
        Mode::Redlock { .. } => Some("redlock"),
        Mode::Multi { .. } => Some("multi"),
        Mode::Single { .. } | Mode::Cluster { .. } | Mode::Sentinel { .. } | Mode::Memory => None,
    }
}

/// Semaphores need their holders counted in one place (one server, one cluster slot, or
/// this process), in distlock's format: a quorum backend (`quorum`: its mode's name) or
/// Redisson's format refuses them.
pub(super) fn semaphore_offered(
    name: &str,
    quorum: Option<&'static str>,
    protocol: Protocol,
) -> Result<(), LockError> {
    if let Some(mode) = quorum {
        return Err(LockError::Unsupported {
            backend: name.to_owned(),
            what: format!(
                "semaphores on mode = \"{mode}\" (a semaphore's holders must be counted in one place; use a single, cluster, sentinel or memory backend)"
            ),
        });
    }
    match protocol {
        Protocol::Distlock => Ok(()),
        Protocol::Redisson => Err(LockError::Unsupported {
            backend: name.to_owned(),
            what: "semaphores with protocol = \"redisson\" (Redisson's semaphore formats are not covered: distlock speaks its reentrant, fenced, fair and read-write locks; see docs/redisson.md)".to_string(),
        }),
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
/// (`quorum`: its mode's name) offers only reentrant locks.
pub(super) fn offers(
    name: &str,
    quorum: Option<&'static str>,
    kind: LockKind,
) -> Result<(), LockError> {
    match (quorum, kind) {
        (_, LockKind::Reentrant) | (None, LockKind::Fair | LockKind::Read | LockKind::Write) => {
            Ok(())
        }
        (Some(mode), LockKind::Fair | LockKind::Read | LockKind::Write) => {
            Err(LockError::Unsupported {
                backend: name.to_owned(),
                what: format!(
                    "lock kind `{}` on mode = \"{mode}\" (fair and read-write locks need one master or one cluster slot; use a single, cluster, sentinel or memory backend)",
                    kind.name(),
                ),
            })
        }
    }
}
