//! What a reader accepts: sane times, bounded inflation.
//!
//! Input files are written by other programs and sometimes by other people, so every
//! reader checks what it takes against these limits once, as it reads; no later stage
//! sees a value outside them.
//!
//! - Times: a timestamp more than [`MAX_ABS_TS_NS`] (100 years) from the epoch, or a
//!   duration over [`MAX_DUR_NS`] (7 days), makes the event unusable: it is skipped and
//!   counted (`time_out_of_range`), like any other bad event. Inside these bounds every
//!   `ts + dur`, and every difference of two such sums, fits an `i64` of nanoseconds.
//! - Decompression: gzip is inflated as a stream into a buffer that stops at
//!   [`Limits::max_inflated_bytes`] (default 8 GiB) and, once past 64 MiB, at
//!   [`Limits::max_ratio`] (default 100) times the compressed bytes read so far (real
//!   traces inflate 5-20×; a gzip bomb of spaces ~1000×). Set them with
//!   `TENSIGHT_MAX_INFLATED` (bytes, with an optional K/M/G suffix) and
//!   `TENSIGHT_MAX_RATIO`, or the CLI's `--max-inflated` and `--max-ratio`.
//! - Strings: [`crate::text::MAX_STRING_BYTES`].
//!
//! It does not decide what a value means: the readers do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Largest distance of a timestamp from the epoch a reader keeps, ns (100 years).
pub const MAX_ABS_TS_NS: i64 = 3_155_760_000 * 1_000_000_000; // 100 × 365.25 days

/// Longest duration a reader keeps, ns (7 days).
pub const MAX_DUR_NS: i64 = 7 * 86_400 * 1_000_000_000;

/// The counter an event with a time outside the bounds increments.
pub const TIME_OUT_OF_RANGE: (&str, &str) = (
    "time_out_of_range",
    "events with a timestamp more than 100 years from the epoch or a duration over 7 days; skipped",
);

/// True when `ts_ns` and `dur_ns` are inside the bounds (a negative duration is the
/// caller's business: Kineto readers treat it as zero-length).
#[inline]
pub fn time_ok(ts_ns: i64, dur_ns: i64) -> bool {
    (-MAX_ABS_TS_NS..=MAX_ABS_TS_NS).contains(&ts_ns) && dur_ns <= MAX_DUR_NS
}

/// Default [`Limits::max_inflated_bytes`]: 8 GiB.
pub const DEFAULT_MAX_INFLATED: u64 = 8 << 30;
/// Default [`Limits::max_ratio`].
pub const DEFAULT_MAX_RATIO: u64 = 100;
/// Inflated bytes below which the ratio is not checked (small files have odd ratios).
pub const RATIO_GRACE_BYTES: u64 = 64 << 20;

/// Bounds on decompression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes one compressed input may inflate to.
    pub max_inflated_bytes: u64,
    /// Most inflated bytes per compressed byte (checked past [`RATIO_GRACE_BYTES`]).
    pub max_ratio: u64,
}

static SET_INFLATED: AtomicU64 = AtomicU64::new(0);
static SET_RATIO: AtomicU64 = AtomicU64::new(0);
static FROM_ENV: OnceLock<Limits> = OnceLock::new();

impl Limits {
    /// The limits in force: those [`Limits::set`] gave, else the environment's, else
    /// the defaults.
    pub fn current() -> Limits {
        let env = *FROM_ENV.get_or_init(|| Limits {
            max_inflated_bytes: std::env::var("TENSIGHT_MAX_INFLATED")
                .ok()
                .and_then(|v| parse_size(&v))
                .unwrap_or(DEFAULT_MAX_INFLATED),
            max_ratio: std::env::var("TENSIGHT_MAX_RATIO")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .filter(|&r| r > 0)
                .unwrap_or(DEFAULT_MAX_RATIO),
        });
        let pick = |set: &AtomicU64, env: u64| match set.load(Ordering::Relaxed) {
            0 => env,
            v => v,
        };
        Limits {
            max_inflated_bytes: pick(&SET_INFLATED, env.max_inflated_bytes),
            max_ratio: pick(&SET_RATIO, env.max_ratio),
        }
    }

    /// Override the limits for this process (the CLI's flags); `None` keeps the current.
    pub fn set(max_inflated_bytes: Option<u64>, max_ratio: Option<u64>) {
        if let Some(v) = max_inflated_bytes.filter(|&v| v > 0) {
            SET_INFLATED.store(v, Ordering::Relaxed);
        }
        if let Some(v) = max_ratio.filter(|&v| v > 0) {
            SET_RATIO.store(v, Ordering::Relaxed);
        }
    }
}

/// `"8G"`, `"512M"`, `"100k"`, `"1048576"` → bytes (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&t[..i], 1 << 20),
        (i, 'g' | 'G') => (&t[..i], 1 << 30),
        (i, 't' | 'T') => (&t[..i], 1 << 40),
        _ => (t, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_keep_sums_and_differences_in_an_i64() {
        assert_eq!(MAX_ABS_TS_NS, 3_155_760_000_000_000_000);
        let far = MAX_ABS_TS_NS + MAX_DUR_NS;
        assert!(far.checked_mul(2).is_some());
        assert!(time_ok(1_700_000_000_000_000_000, 1_000));
        assert!(time_ok(-5, -1));
        assert!(!time_ok(0, MAX_DUR_NS + 1));
        assert!(!time_ok(i64::MAX, 0));
        assert!(!time_ok(i64::MIN, 0));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }
}
