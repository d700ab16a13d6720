//! Lock sites: every `#[distributed_lock]` function linked into the binary registers one,
//! so `init` can check them all against the configuration before anything runs.

/// One `#[distributed_lock]` function.
///
/// ```
/// for site in distlock::inspect::sites() {
///     println!("{} at {}:{} locks {:?}", site.function, site.file, site.line, site.key);
/// }
/// ```
#[derive(Debug)]
pub struct Site {
    /// `module::path::function`.
    pub function: &'static str,
    /// The key template, e.g. `order:<user_id>` (a multi-key lock, `keys = [..]`: the
    /// templates joined with `, `).
    pub key: &'static str,
    /// The backend named by `backend = "..."`, or `None` for the default backend.
    pub backend: Option<&'static str>,
    /// The source file.
    pub file: &'static str,
    /// The line of the attribute.
    pub line: u32,
    /// The kind of lock (`kind = "..."`); `init` checks that the backend offers it. A
    /// semaphore site says `Reentrant` here, and has `permits`.
    pub kind: crate::LockKind,
    /// `Some(N)` for a semaphore (`kind = "semaphore", permits = N`): `init` checks that
    /// the backend offers semaphores.
    pub permits: Option<u32>,
}

inventory::collect!(Site);

/// Every `#[distributed_lock]` function linked into this binary, in no particular order.
///
/// Each annotated function registers one [`Site`] at compile time (collected with the
/// `inventory` crate when the program starts): its path, key template, backend, kind, file
/// and line. [`init`](crate::init) (and [`Registry::check_sites`](crate::Registry::check_sites))
/// go through them before any lock is taken, so that a site naming a backend the
/// configuration does not have, needing a default backend that is not set, or asking for a
/// kind its backend does not offer, fails start-up with one line per bad site instead of
/// failing each call later. Functions in crates that are not linked (a dependency nobody
/// calls into, code removed by the linker) are not listed.
///
/// Use it for start-up reports or a check in your own tests:
///
/// ```
/// #[distlock::distributed_lock(key = "invoice:<id>", backend = "billing")]
/// async fn settle(id: u64) -> Result<(), distlock::LockError> {
///     Ok(())
/// }
///
/// let site = distlock::inspect::sites()
///     .find(|s| s.function.ends_with("::settle"))
///     .expect("registered");
/// assert_eq!(site.key, "invoice:<id>");
/// assert_eq!(site.backend, Some("billing"));
/// assert_eq!(site.kind, distlock::LockKind::Reentrant);
/// assert_eq!(site.permits, None);
/// assert!(site.line > 0);
/// ```
pub fn sites() -> impl Iterator<Item = &'static Site> {
    inventory::iter::<Site>.into_iter()
}

/// The lock site of `distlock run` (the command of `distlock-cli`), as its holder
/// information records it.
#[cfg(any(feature = "axum", feature = "tower"))]
pub(crate) const RUN_SITE: &str = "distlock run";

/// Where a lock is taken: the `#[distributed_lock]` function, or the `file:line` of
/// `Lock::new` / `Registry::lock`. Holder information and metrics name it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LockSite {
    Caller(&'static std::panic::Location<'static>),
    Named(&'static str),
}

impl std::fmt::Display for LockSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockSite::Caller(l) => write!(f, "{}:{}", l.file(), l.line()),
            LockSite::Named(n) => f.write_str(n),
        }
    }
}
