//! Durations on the command line (`--delay 30s`, `--backoff 1500ms`, `--backoff-max 5m`):
//! one strict parser, and the bounded value parsers the flags use, so a bad value is a
//! clap usage error naming its flag, refused before anything is sent.
//!
//! Strict on purpose: a number and one unit, nothing else (`1500ms`, `30s`, `5m`, `2h`,
//! `1d`). A bare number is refused rather than read as milliseconds or seconds, since
//! either guess would be wrong for someone; so are fractions, signs, spaces, upper-case
//! units and compounds (`1m30s`). The API itself takes milliseconds (docs/api.md).

use leasehold_statemachine::limits::{DELAY_MS_MAX, RUN_AT_AHEAD_MS_MAX};

/// The units, longest suffix first so `ms` is not read as `m` + garbage.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// A duration flag's value that is not `<digits><unit>`, or is out of the flag's range
/// (clap prints it after the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadDuration {
    #[error("expected a whole number and a unit: ms, s, m, h or d (e.g. 1500ms, 30s, 5m)")]
    Form,
    #[error("too large")]
    Overflow,
    #[error("at most {max} ({max_ms}ms)")]
    TooLong { max: &'static str, max_ms: u64 },
}

/// `<digits><unit>` in milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, BadDuration> {
    let (digits, per_unit) = UNITS
        .iter()
        .find_map(|(unit, ms)| s.strip_suffix(unit).map(|d| (d, *ms)))
        .ok_or(BadDuration::Form)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadDuration::Form);
    }
    let n: u64 = digits.parse().map_err(|_| BadDuration::Overflow)?;
    n.checked_mul(per_unit).ok_or(BadDuration::Overflow)
}

fn at_most(s: &str, max_ms: u64, max: &'static str) -> Result<u64, BadDuration> {
    let ms = parse_duration_ms(s)?;
    if ms > max_ms {
        return Err(BadDuration::TooLong { max, max_ms });
    }
    Ok(ms)
}

/// `--backoff`, `--backoff-max`, `job release --delay`: 0 … one day (`DELAY_MS_MAX`).
pub fn delay_ms(s: &str) -> Result<u64, BadDuration> {
    at_most(s, DELAY_MS_MAX, "1d")
}

/// `job submit --delay`, `job retry --delay`: from the cluster's time to `run_at_ms`, at
/// most 366 days ahead (`RUN_AT_AHEAD_MS_MAX`).
pub fn run_delay_ms(s: &str) -> Result<u64, BadDuration> {
    at_most(s, RUN_AT_AHEAD_MS_MAX, "366d")
}

/// `ms` as the largest unit that divides it (`90000` → `90s`, `3600000` → `1h`, `0` →
/// `0ms`): how a duration is shown back, in the parser's own form.
pub fn show_ms(ms: u64) -> String {
    if ms == 0 {
        return "0ms".to_owned();
    }
    let (unit, per_unit) = UNITS
        .iter()
        .rev()
        .find(|(_, per)| ms.is_multiple_of(*per))
        .expect("1 ms divides every duration");
    format!("{}{unit}", ms / per_unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_and_one_unit_parse_to_milliseconds() {
        let cases = [
            ("0ms", 0),
            ("0s", 0),
            ("1500ms", 1_500),
            ("30s", 30_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("007s", 7_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration_ms(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        let bad = [
            "", "5", "0", "ms", "s", "1.5s", "-1s", "+1s", " 1s", "1s ", "1 s", "5M", "5S",
            "1m30s", "1sec", "1us", "1w", "0x10s", "１s", "1_000ms",
        ];
        for text in bad {
            assert_eq!(parse_duration_ms(text), Err(BadDuration::Form), "{text:?}");
        }
    }

    #[test]
    fn overflow_is_refused_not_wrapped() {
        assert_eq!(
            parse_duration_ms(&format!("{}ms", u64::MAX)),
            Ok(u64::MAX),
            "the largest millisecond count"
        );
        assert_eq!(
            parse_duration_ms("99999999999999999999ms"),
            Err(BadDuration::Overflow)
        );
        assert_eq!(
            parse_duration_ms(&format!("{}s", u64::MAX / 1000 + 1)),
            Err(BadDuration::Overflow)
        );
    }

    #[test]
    fn bounded_parsers_take_their_limit_and_refuse_one_past_it() {
        assert_eq!(delay_ms("1d"), Ok(DELAY_MS_MAX));
        assert_eq!(delay_ms("24h"), Ok(DELAY_MS_MAX));
        let past = format!("{}ms", DELAY_MS_MAX + 1);
        assert!(matches!(delay_ms(&past), Err(BadDuration::TooLong { .. })));
        assert_eq!(run_delay_ms("366d"), Ok(RUN_AT_AHEAD_MS_MAX));
        let past = format!("{}ms", RUN_AT_AHEAD_MS_MAX + 1);
        let e = run_delay_ms(&past).unwrap_err().to_string();
        assert!(e.contains("366d"), "{e}");
        assert_eq!(delay_ms("5"), Err(BadDuration::Form));
    }

    #[test]
    fn shown_durations_parse_back() {
        for ms in [
            0,
            1,
            999,
            1_000,
            1_500,
            90_000,
            3_600_000,
            DELAY_MS_MAX,
            7 * DELAY_MS_MAX,
        ] {
            assert_eq!(parse_duration_ms(&show_ms(ms)), Ok(ms), "{}", show_ms(ms));
        }
        assert_eq!(show_ms(3_600_000), "1h");
        assert_eq!(show_ms(1_500), "1500ms");
        assert_eq!(show_ms(0), "0ms");
    }
}
