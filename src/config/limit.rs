//! The longest duration a setting may hold, and deadline arithmetic that cannot overflow.
//!
//! `Instant + Duration` panics when the sum does not fit the clock ("overflow when adding
//! duration to instant"), and `Duration * n` when the product does not fit a `Duration`.
//! Durations come from callers (builder setters, per-command timeouts) and from files
//! (`ConnectTimeout`, `ServerAliveInterval`), so every setting is checked once against
//! [`MAX_DURATION`] when the executor is built, and the remaining sums go through
//! [`deadline`], which turns a sum the clock cannot hold into "no deadline".

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest duration any setting accepts: 2³¹ − 1 seconds (about 68 years). This is
/// OpenSSH's own limit for time values in `ssh_config` (`convtime` refuses more), and far
/// below what the monotonic clock can add to "now" (hundreds of billions of years on
/// 64-bit platforms), so sums of a few settings still fit.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(i32::MAX as u64);

/// Refuses `value` for `setting` when it is longer than [`MAX_DURATION`].
pub(crate) fn check(setting: &'static str, value: Duration) -> Result<()> {
    if value > MAX_DURATION {
        return Err(Error::DurationTooLong {
            setting,
            value,
            max: MAX_DURATION,
        });
    }
    Ok(())
}

/// [`check`] for an optional setting (`None` is always fine).
pub(crate) fn check_optional(setting: &'static str, value: Option<Duration>) -> Result<()> {
    value.map_or(Ok(()), |value| check(setting, value))
}

/// `start + after`, or `None` when the clock cannot hold the sum: a deadline that far away
/// can never pass, so "no deadline" is the exact meaning.
pub(crate) fn deadline<I>(start: I, after: Duration) -> Option<I>
where
    I: CheckedAdd,
{
    start.checked_add_duration(after)
}

/// Instants that can add a duration without panicking (std's and tokio's).
pub(crate) trait CheckedAdd: Sized {
    fn checked_add_duration(self, after: Duration) -> Option<Self>;
}

impl CheckedAdd for Instant {
    fn checked_add_duration(self, after: Duration) -> Option<Self> {
        self.checked_add(after)
    }
}

impl CheckedAdd for tokio::time::Instant {
    fn checked_add_duration(self, after: Duration) -> Option<Self> {
        self.checked_add(after)
    }
}

/// Runs `future` until `deadline` (`None`: without one); `None` when the deadline passed
/// first.
pub(crate) async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, future).await.ok(),
        None => Some(future.await),
    }
}

/// Sleeps until `deadline`; never returns without one (a `select!` arm that is off).
pub(crate) async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The sum of durations, saturating at `Duration::MAX` instead of panicking.
pub(crate) fn sum(parts: &[Duration]) -> Duration {
    parts
        .iter()
        .fold(Duration::ZERO, |total, part| total.saturating_add(*part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_setting_fits_the_clock_many_times_over() {
        let now = Instant::now();
        assert!(deadline(now, sum(&[MAX_DURATION; 8])).is_some());
        assert!(deadline(now, Duration::MAX).is_none());
        assert!(deadline(tokio::time::Instant::now(), Duration::MAX).is_none());
        assert_eq!(sum(&[Duration::MAX, Duration::MAX]), Duration::MAX);
        assert!(check("connect_timeout", MAX_DURATION).is_ok());
        let error = check("connect_timeout", MAX_DURATION + Duration::from_nanos(1));
        assert!(
            matches!(
                error,
                Err(Error::DurationTooLong {
                    setting: "connect_timeout",
                    ..
                })
            ),
            "{error:?}"
        );
        assert!(check_optional("idle_timeout", None).is_ok());
        assert!(check_optional("idle_timeout", Some(Duration::MAX)).is_err());
    }
}
