//! The explorer's command (`scripts/explore.sh` builds and runs it): random schedules of
//! lock operations and faults, checked against a model; exit 1 on a violation, printing
//! its seed and the shrunk schedule.
//!
//! ```text
//! explore [--backend memory|single|cluster|sentinel|redlock|multi] [--format distlock|redisson] [--seed S] [--schedules N] [--steps MAX]
//!         [--seeds-file FILE [--failing]] [--duration SECS] [--report FILE] [--plant BUG] [--siblings] [--extended] [--extended-schedules N] [--focused] [--focused-schedules N] [--holders] [--resets] [--names 1|2] [--shrink ITERS] [--jobs N] [--skip-differential] [--scan PATTERN] [--show] [--verbose]
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use distlock_tests::explore::{explore, BackendKind, Format, Options, Plant, Summary};

struct Args {
    opts: Options,
    /// Listed seeds: the generator, and the draws it was listed with.
    seeds: Vec<(u64, Generator, Draws)>,
    /// Random schedules of the extended generator after the others (same first seed).
    extended_schedules: u64,
    /// Random schedules of the focused generator after those (same first seed).
    focused_schedules: u64,
    report: Option<String>,
}

/// What a listed seed was drawn with besides its generator.
#[derive(Clone, Copy, Default)]
struct Draws {
    /// Paused holder processes (`--holders`).
    holders: bool,
    /// `join!` siblings (`--siblings`).
    siblings: bool,
    /// Connection resets and lost replies (`--resets`).
    resets: bool,
}

/// Which generator a listed seed is of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Generator {
    Plain,
    Extended,
    Focused,
}

fn usage(msg: &str) -> ! {
    eprintln!("explore: {msg}\nusage: explore [--backend memory|single|cluster|sentinel|redlock|multi] [--format distlock|redisson] [--seed S] [--schedules N] [--steps MAX] [--seeds-file FILE [--failing]] [--duration SECS] [--report FILE] [--plant BUG] [--siblings] [--extended] [--extended-schedules N] [--focused] [--focused-schedules N] [--holders] [--resets] [--names 1|2] [--shrink ITERS] [--jobs N] [--skip-differential] [--scan PATTERN] [--show] [--verbose]");
    std::process::exit(2);
}

fn value<T: std::str::FromStr>(it: &mut impl Iterator<Item = String>, flag: &str) -> T {
    it.next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
}

/// Seeds of a file for `backend` (`single`, or `single/redisson` in Redisson's format):
/// lines `BACKEND SEED pass|fail [extended|focused] [holders] [siblings] [resets]`, `#`
/// starts a comment; `extended`, `focused`: a seed of that generator; `holders`,
/// `siblings`, `resets`: drawn with paused holder processes (`--holders`), with `join!`
/// siblings (`--siblings`), with connection resets and lost replies (`--resets`).
/// `fail` seeds (known violations, listed until their fix is merged) are taken only with
/// `failing`.
fn seeds_of(path: &str, backend: &str, failing: bool) -> Vec<(u64, Generator, Draws)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| usage(&format!("{path}: {e}")));
    let want = if failing { "fail" } else { "pass" };
    text.lines()
        .filter_map(|l| l.split('#').next())
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [b, seed, status, flags @ ..] = w.as_slice() else {
                return None;
            };
            if *b != backend || *status != want {
                return None;
            }
            let mut draws = Draws::default();
            let mut flags: &[&str] = flags;
            loop {
                match flags {
                    [rest @ .., "holders"] => (draws.holders, flags) = (true, rest),
                    [rest @ .., "siblings"] => (draws.siblings, flags) = (true, rest),
                    [rest @ .., "resets"] => (draws.resets, flags) = (true, rest),
                    _ => break,
                }
            }
            let generator = match flags {
                [] => Generator::Plain,
                ["extended"] => Generator::Extended,
                ["focused"] => Generator::Focused,
                _ => return None,
            };
            seed.parse().ok().map(|s| (s, generator, draws))
        })
        .collect()
}

fn parse() -> Args {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    let mut opts = Options::new(BackendKind::Memory, now, 100);
    let (mut seeds_file, mut report, mut backend, mut max_steps) = (None, None, None, None);
    let mut failing = false;
    let mut format = Format::Distlock;
    let mut scan: Option<String> = None;
    let mut shrink: Option<u32> = None;
    let mut jobs: Option<usize> = None;
    let mut extended_schedules = 0;
    let mut focused_schedules = 0;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--backend" => {
                let b: String = value(&mut it, "--backend");
                backend = Some(BackendKind::parse(&b).unwrap_or_else(|| {
                    usage(&format!(
                        "unknown backend {b} (memory, single, cluster, sentinel, redlock, multi)"
                    ))
                }));
            }
            "--format" => {
                let f: String = value(&mut it, "--format");
                format = Format::parse(&f)
                    .unwrap_or_else(|| usage(&format!("unknown format {f} (distlock, redisson)")));
            }
            "--seed" => opts.seed = value(&mut it, "--seed"),
            "--schedules" => opts.schedules = value(&mut it, "--schedules"),
            "--steps" => max_steps = Some(value::<usize>(&mut it, "--steps")),
            "--seeds-file" => seeds_file = Some(value::<String>(&mut it, "--seeds-file")),
            "--failing" => failing = true,
            "--duration" => opts.duration = Some(Duration::from_secs(value(&mut it, "--duration"))),
            "--report" => report = Some(value(&mut it, "--report")),
            "--plant" => {
                let p: String = value(&mut it, "--plant");
                opts.plant =
                    Plant::parse(&p).unwrap_or_else(|| usage(&format!("unknown plant {p}")));
            }
            "--verbose" => opts.verbose = true,
            "--siblings" => opts.siblings = true,
            "--extended" => opts.extended = true,
            "--extended-schedules" => {
                extended_schedules = value::<u64>(&mut it, "--extended-schedules")
            }
            "--focused" => opts.focused = true,
            "--holders" => opts.holders = true,
            "--resets" => opts.resets = true,
            "--focused-schedules" => {
                focused_schedules = value::<u64>(&mut it, "--focused-schedules")
            }
            "--skip-differential" => opts.skip_differential = true,
            "--scan" => scan = Some(value::<String>(&mut it, "--scan")),
            "--show" => scan = Some(String::new()),
            "--names" => opts.names = value(&mut it, "--names"),
            "--shrink" => shrink = Some(value::<u32>(&mut it, "--shrink")),
            "--jobs" => jobs = Some(value::<usize>(&mut it, "--jobs").max(1)),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if let Some(b) = backend {
        let mut fresh = Options::new(b, opts.seed, opts.schedules);
        fresh.steps = opts.steps;
        fresh.duration = opts.duration;
        fresh.plant = opts.plant;
        fresh.verbose = opts.verbose;
        fresh.siblings = opts.siblings;
        fresh.extended = opts.extended;
        fresh.focused = opts.focused;
        fresh.holders = opts.holders;
        fresh.resets = opts.resets;
        fresh.names = opts.names;
        fresh.skip_differential = opts.skip_differential;
        opts = fresh;
    }
    if format == Format::Redisson && !opts.backend.takes_redisson() {
        usage(&format!(
            "--format redisson needs --backend single, cluster or sentinel (not {})",
            opts.backend.name()
        ));
    }
    opts.format = format;
    if opts.extended && opts.focused {
        usage("--extended and --focused are two generators: one at a time");
    }
    if let Some(n) = shrink {
        opts.shrink_iters = n;
    }
    if let Some(n) = jobs {
        opts.jobs = n;
    }
    if let Some(m) = max_steps {
        opts.steps = (opts.steps.0.min(m), m);
    }
    let seeds = seeds_file
        .map(|f| seeds_of(&f, &label(&opts), failing))
        .unwrap_or_default();
    if let Some(pattern) = scan {
        scan_seeds(&opts, &pattern);
    }
    Args {
        opts,
        seeds,
        report,
        extended_schedules,
        focused_schedules,
    }
}

/// Print the seeds of `opts` whose generated schedules contain `pattern`, and exit.
fn scan_seeds(opts: &Options, pattern: &str) -> ! {
    for i in 0..opts.schedules {
        let seed = opts.seed.wrapping_add(i);
        let steps = distlock_tests::explore::generate(opts, seed);
        if pattern.is_empty() {
            let text = distlock_tests::explore::schedule_text(&steps);
            println!("seed {seed}:\n{text}");
        } else if distlock_tests::explore::scan::contains(&steps, pattern) {
            println!("{seed}");
        }
    }
    std::process::exit(0);
}

/// The backend and format as the seeds file names them.
fn label(opts: &Options) -> String {
    match opts.format {
        Format::Distlock => opts.backend.name().to_owned(),
        f => format!("{}/{}", opts.backend.name(), f.name()),
    }
}

/// [`explore`], once more on fresh servers when the run's own servers failed (a sentinel
/// that did not fail over in time on a loaded machine, a port taken meanwhile): such an
/// abort says nothing about the locks. A second abort stands.
fn explore_once_more_if_aborted(o: &Options) -> Summary {
    let first = explore(o);
    match &first.aborted {
        Some(why) if first.findings.is_empty() => {
            println!("explore: the run's own servers failed ({why}); once more on fresh servers");
            explore(o)
        }
        _ => first,
    }
}

fn merge(total: &mut Summary, s: Summary) {
    total.schedules += s.schedules;
    total.operations += s.operations;
    total.faults += s.faults;
    total.findings.extend(s.findings);
    total.aborted = total.aborted.take().or(s.aborted);
}

fn main() {
    // `EXPLORE_LOG=debug` (or trace, info, warn): the library's logs on stderr, for a replay.
    if let Some(level) = std::env::var("EXPLORE_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
    {
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init();
    }
    let args = parse();
    let start = Instant::now();
    let mut total = Summary::default();
    let b = args.opts.backend;
    for &(seed, generator, draws) in &args.seeds {
        let mut o = args.opts.clone();
        o.seed = seed;
        o.schedules = 1;
        o.extended = generator == Generator::Extended;
        o.focused = generator == Generator::Focused;
        o.holders = draws.holders;
        o.siblings = draws.siblings;
        o.resets = draws.resets;
        let generator = match generator {
            Generator::Plain => "",
            Generator::Extended => " (extended)",
            Generator::Focused => " (focused)",
        };
        let holders = if draws.holders { " (holders)" } else { "" };
        let siblings = if draws.siblings { " (siblings)" } else { "" };
        let resets = if draws.resets { " (resets)" } else { "" };
        println!(
            "explore: {} fixed seed {seed}{generator}{holders}{siblings}{resets}",
            label(&args.opts)
        );
        merge(&mut total, explore_once_more_if_aborted(&o));
    }
    if args.opts.schedules > 0 {
        println!(
            "explore: {} random seeds {}..{} ({} schedules)",
            label(&args.opts),
            args.opts.seed,
            args.opts.seed.wrapping_add(args.opts.schedules),
            args.opts.schedules
        );
        merge(&mut total, explore_once_more_if_aborted(&args.opts));
    }
    if args.extended_schedules > 0 {
        let mut o = args.opts.clone();
        (o.schedules, o.extended, o.focused) = (args.extended_schedules, true, false);
        println!(
            "explore: {} random seeds {}..{} of the extended generator ({} schedules)",
            label(&o),
            o.seed,
            o.seed.wrapping_add(o.schedules),
            o.schedules
        );
        merge(&mut total, explore_once_more_if_aborted(&o));
    }
    if args.focused_schedules > 0 {
        let mut o = args.opts.clone();
        (o.schedules, o.extended, o.focused) = (args.focused_schedules, false, true);
        println!(
            "explore: {} random seeds {}..{} of the focused generator ({} schedules)",
            label(&o),
            o.seed,
            o.seed.wrapping_add(o.schedules),
            o.schedules
        );
        merge(&mut total, explore_once_more_if_aborted(&o));
    }
    let mut text = String::new();
    let mixed = args.extended_schedules > 0 || args.focused_schedules > 0;
    let generator = if args.opts.extended && !mixed {
        " (extended generator)"
    } else if args.opts.focused && !mixed {
        " (focused generator)"
    } else {
        ""
    };
    for f in &total.findings {
        text.push_str(&f.text(b));
        text.push('\n');
    }
    text.push_str(&format!(
        "explore: backend {}{generator}: {} schedules, {} operations, {} faults, {} violating schedule(s), {:.0} s\n",
        label(&args.opts),
        total.schedules,
        total.operations,
        total.faults,
        total.findings.len(),
        start.elapsed().as_secs_f64()
    ));
    print!("{text}");
    if let Some(path) = &args.report {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            eprintln!("explore: cannot write {path}: {e}");
        }
    }
    if let Some(why) = &total.aborted {
        eprintln!("explore: ABORTED (the run's own servers failed, not a lock violation): {why}");
        if total.findings.is_empty() {
            std::process::exit(2);
        }
    }
    std::process::exit(i32::from(!total.findings.is_empty()));
}
