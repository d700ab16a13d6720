//! What a holder records of itself with the lock (`host\tpid\tsite`, see
//! `ops/inspect.rs` for the whole entry), and this host's name, which a leader also
//! publishes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// `host\tpid` of this process, computed once.
static PROCESS: LazyLock<String> =
    LazyLock::new(|| format!("{}\t{}", hostname(), std::process::id()));

/// This host's name: the kernel's, else `$HOSTNAME`, else `unknown`.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// What a holder at `site` (a site label) records: `host\tpid\tsite`, built once per site.
/// Each thread keeps the texts it used (no lock shared by concurrent acquisitions on the
/// hot path); the process-wide map builds each once.
pub(crate) fn holder_text(site: &'static str) -> Arc<str> {
    /// By the label's address and length (labels are `'static` and few).
    type Texts = HashMap<(usize, usize), Arc<str>>;
    static TEXTS: Mutex<Option<Texts>> = Mutex::new(None);
    thread_local! {
        static SEEN: std::cell::RefCell<Texts> = std::cell::RefCell::new(HashMap::new());
    }
    let at = (site.as_ptr() as usize, site.len());
    if let Some(text) = SEEN.with(|seen| seen.borrow().get(&at).cloned()) {
        return text;
    }
    let text = {
        let mut map = TEXTS.lock().unwrap_or_else(|e| e.into_inner());
        map.get_or_insert_with(HashMap::new)
            .entry(at)
            .or_insert_with(|| {
                let site = site.replace(['\t', '\n'], " ");
                Arc::from(format!("{}\t{site}", *PROCESS))
            })
            .clone()
    };
    SEEN.with(|seen| seen.borrow_mut().insert(at, text.clone()));
    text
}
