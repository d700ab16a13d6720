//! `scheduled-report`: three instances whose clocks differ by 0, 1 and 2 seconds (Debian's
//! `faketime` on two of them) fire the same `*/10 * * * * *` schedule against the shared
//! single test server (`scripts/test.sh`); every slot of the schedule is run exactly once,
//! and the instances that fire later skip it (`hold_at_least = "4s"`, measured on the
//! server's clock).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A child process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i128
}

#[test]
fn three_instances_with_skewed_clocks_run_each_slot_once() {
    let faketime = "faketime";
    assert!(
        Command::new(faketime)
            .arg("-f")
            .arg("+0s")
            .arg("true")
            .status()
            .is_ok_and(|s| s.success()),
        "`faketime` is needed (Debian package faketime; scripts/test.sh installs it)"
    );
    let config = std::env::temp_dir().join(format!("scheduled-report-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[defaults]\nkey_prefix = \"sched-{}-{}:\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
            std::process::id(),
            now_ms(),
            distlock_tests::single_url()
        ),
    )
    .unwrap();

    const RUNS: u64 = 3;
    let (tx, rx) = mpsc::channel::<(u32, String)>();
    let mut children = Vec::new();
    for skew in [0u32, 1, 2] {
        let mut cmd = Command::new(faketime);
        cmd.arg("-f")
            .arg(format!("+{skew}s"))
            .arg(env!("CARGO_BIN_EXE_scheduled-report"))
            .arg("--runs")
            .arg(RUNS.to_string())
            // The wall clock only: tokio's timers keep the real monotonic clock.
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("DISTLOCK_CONFIG", &config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start scheduled-report under faketime");
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((skew, line));
            }
        });
        children.push(Process(child));
    }
    drop(tx);

    // Each slot: who ran it, who skipped it.
    let mut ran: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let mut skipped: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((skew, line)) = rx.recv_timeout(left) else {
            break; // every child closed its output (ran its slots), or the deadline
        };
        lines.push(format!("+{skew}s: {line}"));
        let slot = |l: &str| -> u64 {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("slot="))
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no slot in {l:?}"))
        };
        if let Some(clock) = line.strip_prefix("ready ").and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("clock_ms="))
        }) {
            // faketime took effect: this instance's clock is `skew` seconds ahead.
            let ahead = clock.parse::<i128>().unwrap() - now_ms();
            let expected = i128::from(skew) * 1000;
            assert!(
                (ahead - expected).abs() < 700,
                "instance +{skew}s reads a clock {ahead} ms ahead, expected about {expected}: {lines:#?}"
            );
        } else if line.starts_with("ran ") {
            ran.entry(slot(&line)).or_default().push(skew);
        } else if line.starts_with("skipped ") {
            skipped.entry(slot(&line)).or_default().push(skew);
        } else {
            panic!("unexpected line {line:?}: {lines:#?}");
        }
    }
    let _ = std::fs::remove_file(&config);
    for mut c in children {
        let status = c.0.wait().unwrap();
        assert!(
            status.success(),
            "an instance failed ({status}): {lines:#?}"
        );
    }

    let slots: Vec<u64> = ran.keys().chain(skipped.keys()).copied().collect();
    for slot in &slots {
        let runners = ran.get(slot).cloned().unwrap_or_default();
        assert_eq!(
            runners.len(),
            1,
            "slot {slot} was run by {runners:?} (once expected): {lines:#?}"
        );
    }
    // The instance ahead fires first and runs; the others find it held and skip.
    let contested = skipped.values().filter(|s| !s.is_empty()).count();
    assert!(
        contested >= 2,
        "at least two slots fired in several instances: {lines:#?}"
    );
    for (slot, runners) in &ran {
        if let Some(later) = skipped.get(slot) {
            assert!(
                later.iter().all(|s| s < &runners[0]),
                "slot {slot}: run by +{}s, skipped by clocks further ahead {later:?}: {lines:#?}",
                runners[0]
            );
        }
    }
}
