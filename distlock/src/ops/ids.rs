//! Unique 64-bit ids from Redis: seconds since a fixed epoch in the high 32 bits, a per-day
//! INCR sequence in the low 32. Unique across processes sharing the backend; roughly
//! time-ordered; 2^32 ids per day per generator name.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ops::target::Target;
use crate::registry::Registry;
use crate::LockError;

/// The epoch of the high 32 bits: 2024-01-01T00:00:00Z, as Unix seconds.
pub const EPOCH_UNIX_SECS: u64 = 1_704_067_200;

/// Sequence keys live this long past their day, so a clock near midnight cannot reuse one.
const SEQUENCE_TTL: Duration = Duration::from_secs(2 * 86_400);

/// A generator of ids named `name` (ids from different names may coincide).
///
/// ```
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await?;
/// use distlock::ids::IdGenerator;
/// let orders = IdGenerator::new("order").registry(registry);
/// let a = orders.next().await?;
/// let b = orders.next().await?;
/// assert!(b > a);
/// assert_eq!(distlock::ids::sequence_of(b), distlock::ids::sequence_of(a) + 1);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct IdGenerator {
    name: String,
    /// The registry and backend (a generator neither waits nor leases).
    target: Target,
}

impl IdGenerator {
    /// A generator on the default backend of the global registry.
    pub fn new(name: impl Into<String>) -> IdGenerator {
        IdGenerator {
            name: name.into(),
            target: Target::here(),
        }
    }

    /// Use the backend of this name.
    pub fn backend(mut self, name: impl Into<String>) -> IdGenerator {
        self.target.set_backend(name.into());
        self
    }

    /// Use this registry instead of the global one.
    pub fn registry(mut self, registry: Registry) -> IdGenerator {
        self.target.set_registry(registry);
        self
    }

    /// The next id.
    pub async fn next(&self) -> Result<u64, LockError> {
        let backend = self.target.backend()?;
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            .saturating_sub(EPOCH_UNIX_SECS);
        let day = secs / 86_400;
        let key = format!("{}ids:{}:{day}", backend.prefix, self.name);
        let seq = backend.next_sequence(&key, SEQUENCE_TTL).await?;
        Ok(((secs & 0xffff_ffff) << 32) | (seq & 0xffff_ffff))
    }
}

/// The seconds-since-epoch part of an id.
pub fn seconds_of(id: u64) -> u64 {
    id >> 32
}

/// The per-day sequence part of an id.
pub fn sequence_of(id: u64) -> u64 {
    id & 0xffff_ffff
}
