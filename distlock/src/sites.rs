//! Lock sites: every `#[distributed_lock]` function linked into the binary registers one,
//! so `init` can check them all against the configuration before anything runs.

/// One `#[distributed_lock]` function.
///
/// ```
/// for site in distlock::sites() {
///     println!("{} at {}:{} locks {:?}", site.function, site.file, site.line, site.key);
/// }
/// ```
#[derive(Debug)]
pub struct Site {
    /// `module::path::function`.
    pub function: &'static str,
    /// The key template, e.g. `order:<user_id>`.
    pub key: &'static str,
    /// The backend named by `backend = "..."`, or `None` for the default backend.
    pub backend: Option<&'static str>,
    /// The source file.
    pub file: &'static str,
    /// The line of the attribute.
    pub line: u32,
    /// The kind of lock (`kind = "..."`); `init` checks that the backend offers it.
    pub kind: crate::LockKind,
}

inventory::collect!(Site);

/// Every lock site linked into this binary.
pub fn sites() -> impl Iterator<Item = &'static Site> {
    inventory::iter::<Site>.into_iter()
}
