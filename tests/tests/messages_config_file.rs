//! `distlock::init()` without a configuration file: the message names the working
//! directory and what `DISTLOCK_CONFIG` was (unset, empty, a path). A binary of its own,
//! with one test, since it changes the environment.

use distlock::InitError;

#[test]
fn a_missing_configuration_file() {
    let cwd = std::env::current_dir().expect("the working directory");
    assert!(
        !cwd.join("distlock.toml").exists(),
        "this test needs a working directory without distlock.toml: {}",
        cwd.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let init = || -> InitError {
        rt.block_on(distlock::init())
            .expect_err("no configuration file")
    };
    let no_file = "cannot read the configuration file: No such file or directory (os error 2)";

    std::env::remove_var("DISTLOCK_CONFIG");
    let err = init();
    let expected = format!(
        "distlock.toml: (file): {no_file} (a relative path: looked in the working directory {}); DISTLOCK_CONFIG is not set, so the default `distlock.toml` was used: set DISTLOCK_CONFIG to the file's path, or call init_from_path",
        cwd.display()
    );
    assert_eq!(err.to_string(), expected);
    assert_eq!(format!("{err:?}"), expected);

    std::env::set_var("DISTLOCK_CONFIG", "");
    let err = init();
    let expected = format!(
        "distlock.toml: (file): {no_file} (a relative path: looked in the working directory {}); DISTLOCK_CONFIG is set but empty, so the default `distlock.toml` was used: set DISTLOCK_CONFIG to the file's path (or unset it)",
        cwd.display()
    );
    assert_eq!(err.to_string(), expected);
    assert_eq!(format!("{err:?}"), expected);

    std::env::set_var("DISTLOCK_CONFIG", "/nonexistent/locks.toml");
    let err = init();
    let expected = format!("/nonexistent/locks.toml: (file): {no_file}; DISTLOCK_CONFIG names it");
    assert_eq!(err.to_string(), expected);
    assert_eq!(format!("{err:?}"), expected);

    std::env::set_var("DISTLOCK_CONFIG", "conf/locks.toml");
    let err = init();
    let expected = format!(
        "conf/locks.toml: (file): {no_file} (a relative path: looked in the working directory {}); DISTLOCK_CONFIG names it",
        cwd.display()
    );
    assert_eq!(err.to_string(), expected);
    std::env::remove_var("DISTLOCK_CONFIG");
}
