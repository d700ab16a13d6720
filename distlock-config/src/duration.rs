//! Durations written as `"1m30s"`, `"250ms"`, ...

use std::time::Duration;

/// The units, largest first: name and length in milliseconds.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

const USE_UNITS: &str = "use ms, s, m or h";

/// Parses a duration such as `"250ms"`, `"5s"`, `"1m30s"` or `"1h2m3s4ms"`.
///
/// A duration is one or more `<unsigned integer><unit>` parts with the units `h`, `m`, `s` and
/// `ms`, each used at most once, largest first, with no spaces, signs or fractions. `"0s"` is
/// accepted (callers that need a positive duration check for zero themselves). A total that
/// does not fit in `u64` milliseconds is an error.
///
/// The error is a sentence that quotes the input and says what is wrong, for example
/// `invalid duration "5x": unknown unit "x" (use ms, s, m or h)`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
/// use distlock::config::parse_duration;
///
/// assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("1h2m3s4ms"), Ok(Duration::from_millis(3_723_004)));
///
/// let err = parse_duration("5x").unwrap_err();
/// assert_eq!(err, r#"invalid duration "5x": unknown unit "x" (use ms, s, m or h)"#);
/// assert!(parse_duration("30s1m").is_err()); // units go largest first
/// assert!(parse_duration("5").is_err());     // a unit is required
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_ms(s)
        .map(Duration::from_millis)
        .map_err(|why| format!("invalid duration {s:?}: {why}"))
}

fn parse_ms(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err("it is empty (write e.g. \"250ms\", \"5s\" or \"1m30s\")".to_owned());
    }
    let mut rest = s;
    let mut total: u64 = 0;
    // Index in UNITS and name of the last unit seen.
    let mut last: Option<(usize, &str)> = None;
    while !rest.is_empty() {
        let digits_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (digits, after) = rest.split_at(digits_len);
        if digits.is_empty() {
            return Err(no_number_here(after));
        }
        let number: u64 = digits
            .parse()
            .map_err(|_| format!("the number {digits} is too large"))?;
        let unit_len: usize = after
            .chars()
            .take_while(|c| c.is_alphabetic())
            .map(char::len_utf8)
            .sum();
        let (unit, after_unit) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(match after.chars().next() {
                None => format!("missing unit after {digits:?} ({USE_UNITS})"),
                Some('.' | ',') => "fractions are not allowed: use a smaller unit, e.g. \"1500ms\" instead of \"1.5s\"".to_owned(),
                Some(c) if c.is_whitespace() => "spaces are not allowed".to_owned(),
                Some(c) => format!("unexpected character {c:?} after {digits:?} ({USE_UNITS})"),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit {unit:?} ({USE_UNITS})"));
        };
        if let Some((last_index, last_unit)) = last {
            if index == last_index {
                return Err(format!("unit {unit:?} appears more than once"));
            }
            if index < last_index {
                return Err(format!(
                    "units must go from largest to smallest (h, m, s, ms): {unit:?} comes after {last_unit:?}"
                ));
            }
        }
        last = Some((index, unit));
        total = number
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "it is too large".to_owned())?;
        rest = after_unit;
    }
    Ok(total)
}

/// The message for a place where a number was expected but something else is.
fn no_number_here(rest: &str) -> String {
    match rest.chars().next() {
        Some('-' | '+') => "a sign is not allowed (durations are never negative)".to_owned(),
        Some(c) if c.is_whitespace() => "spaces are not allowed".to_owned(),
        Some(c) if c.is_alphabetic() => {
            let unit: String = rest.chars().take_while(|c| c.is_alphabetic()).collect();
            format!("missing number before {unit:?} (write e.g. \"5s\")")
        }
        Some(c) => {
            format!("unexpected character {c:?} (write e.g. \"250ms\", \"5s\" or \"1m30s\")")
        }
        None => "missing number".to_owned(),
    }
}

/// Formats a duration the way [`parse_duration`] reads it: `"1m30s"`, `"250ms"`, `"0s"`.
///
/// A duration with a part smaller than a millisecond is shown in the `Debug` form of
/// [`Duration`] instead (e.g. `"1.5µs"`), which `parse_duration` does not read.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
/// use distlock::config::{format_duration, parse_duration};
///
/// assert_eq!(format_duration(Duration::from_millis(90_250)), "1m30s250ms");
/// assert_eq!(format_duration(Duration::ZERO), "0s");
/// let d = Duration::from_millis(3_723_004);
/// assert_eq!(parse_duration(&format_duration(d)), Ok(d));
/// ```
pub fn format_duration(d: Duration) -> String {
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{d:?}");
    }
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (name, len) in UNITS {
        let len = u128::from(len);
        let n = ms / len;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(name);
        }
        ms %= len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn accepted_durations() {
        let table: &[(&str, u64)] = &[
            ("0s", 0),
            ("0ms", 0),
            ("250ms", 250),
            ("5s", 5_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
            ("1m30s", 90_000),
            ("1h30m", 5_400_000),
            ("1h2m3s4ms", 3_723_004),
            ("1s500ms", 1_500),
            ("1h5ms", 3_600_005),
            ("90s", 90_000),
            ("007s", 7_000),
            ("1500ms", 1_500),
        ];
        for (text, want) in table {
            assert_eq!(parse_duration(text), Ok(ms(*want)), "{text}");
        }
    }

    #[test]
    fn rejected_durations() {
        let table: &[(&str, &str)] = &[
            ("", "is empty"),
            ("5", "missing unit after \"5\" (use ms, s, m or h)"),
            ("5x", "unknown unit \"x\" (use ms, s, m or h)"),
            ("5sec", "unknown unit \"sec\""),
            ("5S", "unknown unit \"S\""),
            ("5µs", "unknown unit \"µs\""),
            ("1d", "unknown unit \"d\""),
            ("-5s", "a sign is not allowed"),
            ("+5s", "a sign is not allowed"),
            (" 5s", "spaces are not allowed"),
            ("5 s", "spaces are not allowed"),
            ("5s ", "spaces are not allowed"),
            ("1m 30s", "spaces are not allowed"),
            ("1.5s", "fractions are not allowed"),
            ("s", "missing number before \"s\""),
            ("ms", "missing number before \"ms\""),
            ("5s5", "missing unit after \"5\""),
            ("5s5s", "unit \"s\" appears more than once"),
            (
                "30s1m",
                "units must go from largest to smallest (h, m, s, ms): \"m\" comes after \"s\"",
            ),
            ("5ms1s", "\"s\" comes after \"ms\""),
            ("5s_", "unexpected character '_'"),
            ("5_000ms", "unexpected character '_' after \"5\""),
            (
                "99999999999999999999s",
                "the number 99999999999999999999 is too large",
            ),
            ("18446744073709551615h", "too large"),
            ("5124095576030h1h", "appears more than once"),
            ("5124095576031h", "it is too large"),
            ("5124095576030h59m", "it is too large"),
        ];
        for (text, want) in table {
            let err = parse_duration(text).expect_err(text);
            assert!(
                err.starts_with(&format!("invalid duration {text:?}: ")),
                "{err}"
            );
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn largest_duration() {
        assert_eq!(
            parse_duration("5124095576030h"),
            Ok(ms(5_124_095_576_030 * 3_600_000))
        );
        assert_eq!(parse_duration("18446744073709551615ms"), Ok(ms(u64::MAX)));
        assert!(parse_duration("18446744073709551616ms").is_err());
    }

    #[test]
    fn format_round_trips() {
        for n in [
            0, 1, 999, 1_000, 59_999, 60_000, 3_600_000, 3_723_004, 86_400_000,
        ] {
            let text = format_duration(ms(n));
            assert_eq!(parse_duration(&text), Ok(ms(n)), "{text}");
        }
        assert_eq!(format_duration(ms(3_723_004)), "1h2m3s4ms");
        assert_eq!(format_duration(ms(100)), "100ms");
        assert_eq!(format_duration(Duration::from_nanos(1_500)), "1.5µs");
    }
}
