//! Compile-time behaviour of `#[distributed_lock]`: what compiles (and runs, on the memory
//! backend), and the errors misuse gets, each on the offending token.
//!
//! Regenerate the expected errors with `TRYBUILD=overwrite cargo test -p distlock --test ui`
//! and read the `.stderr` files before committing them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
