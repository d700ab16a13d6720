//! Compile-time behaviour of `#[distributed_lock]`: what compiles (and runs, on the memory
//! backend), and the errors misuse gets, each on the offending token.
//!
//! Regenerate the expected errors with `TRYBUILD=overwrite cargo test -p distlock --test ui`
//! and read the `.stderr` files before committing them.
//!
//! The `.stderr` files hold the diagnostics of one compiler release, [`PINNED`]: their
//! wording changes between releases. On that release every case runs; on another one the
//! `pass` cases still run and the `fail` cases are reported as not compared (regenerate the
//! files on the new release and move the pin to adopt it).

/// The compiler release the expected diagnostics were written with.
const PINNED: &str = "1.95";

#[test]
fn ui() {
    // trybuild builds the cases in a workspace of its own, which does not get this one's
    // profiles: its copies of the dependencies would carry full debug info (3 GB on disk).
    // This is the binary's only test, so nothing else reads the environment meanwhile.
    std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "false");
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    if rustversion::cfg!(stable(1.95)) {
        t.compile_fail("tests/ui/fail/*.rs");
    } else {
        eprintln!(
            "tests/ui/fail: diagnostics are pinned to rustc {PINNED}; this compiler's are not compared"
        );
    }
}
