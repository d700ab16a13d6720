//! How long locks are held, per backend, in this process: a moving average of the hold
//! times of the locks released here. A `Timeout` reports it, and the axum mapping bases
//! its `Retry-After` on it. Bounded: one entry per backend name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

static HOLDS: Mutex<Option<HashMap<Arc<str>, Duration>>> = Mutex::new(None);

/// Weight of the newest hold time in the average: 1/8.
const NEWEST: u32 = 8;

/// A lock of `backend` acquired here was released after `held`.
pub(crate) fn record(backend: &Arc<str>, held: Duration) {
    let mut map = HOLDS.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    match map.get_mut(&**backend) {
        Some(avg) => *avg = (*avg * (NEWEST - 1) + held) / NEWEST,
        None => {
            map.insert(backend.clone(), held);
        }
    }
}

/// The average hold time of `backend`'s locks released in this process, if any were.
pub(crate) fn typical(backend: &str) -> Option<Duration> {
    let map = HOLDS.lock().unwrap_or_else(|e| e.into_inner());
    map.as_ref().and_then(|m| m.get(backend).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_average() {
        let b: Arc<str> = Arc::from("holds-test");
        assert_eq!(typical("holds-test"), None);
        record(&b, Duration::from_millis(800));
        assert_eq!(typical("holds-test"), Some(Duration::from_millis(800)));
        record(&b, Duration::from_millis(1600));
        assert_eq!(typical("holds-test"), Some(Duration::from_millis(900)));
    }
}
