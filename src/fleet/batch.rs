//! Rolling batches, as Ansible's `serial`: a count, a percentage, or a growing list whose last
//! size repeats (`1, 10%, 50%`). A batch starts only when the one before it is done.

use std::str::FromStr;

use crate::error::{Error, Result};

/// The size of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchSize {
    /// This many hosts (at least 1).
    Count(usize),
    /// This percentage of all selected hosts, rounded down, at least 1 host (Ansible's rule).
    Percent(u8),
}

impl BatchSize {
    fn hosts(self, total: usize) -> usize {
        match self {
            BatchSize::Count(n) => n.max(1),
            BatchSize::Percent(p) => (total * usize::from(p.min(100)) / 100).max(1),
        }
    }
}

impl FromStr for BatchSize {
    type Err = Error;

    /// `5` or `20%`.
    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        let bad = || Error::InvalidInput {
            reason: format!("batch size `{text}`: expected a count (`5`) or a percentage (`20%`)"),
        };
        match text.strip_suffix('%') {
            Some(percent) => match percent.trim().parse::<u8>() {
                Ok(p) if (1..=100).contains(&p) => Ok(BatchSize::Percent(p)),
                _ => Err(bad()),
            },
            None => match text.parse::<usize>() {
                Ok(n) if n > 0 => Ok(BatchSize::Count(n)),
                _ => Err(bad()),
            },
        }
    }
}

/// A rollout's batch sizes: each entry is one batch, the last one repeats until every host
/// has had its batch. An empty plan is one batch of every host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batches(pub Vec<BatchSize>);

impl FromStr for Batches {
    type Err = Error;

    /// A comma-separated list: `1,10%,50%`.
    fn from_str(text: &str) -> Result<Self> {
        text.split(',')
            .map(str::parse)
            .collect::<Result<Vec<_>>>()
            .map(Batches)
    }
}

impl Batches {
    /// Splits `total` hosts (by position) into consecutive batches.
    pub fn split(&self, total: usize) -> Vec<std::ops::Range<usize>> {
        let mut batches = Vec::new();
        let mut start = 0;
        let mut sizes = self.0.iter().copied();
        let mut size = total.max(1);
        while start < total {
            if let Some(next) = sizes.next() {
                size = next.hosts(total);
            } else if self.0.is_empty() {
                size = total;
            }
            let end = (start + size).min(total);
            batches.push(start..end);
            start = end;
        }
        batches
    }
}

/// When a rollout stops starting hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Thresholds {
    /// After a batch, stop when more than this percentage of its hosts failed (Ansible's
    /// `max_fail_percentage`: `0` stops after any failure). `None`: never.
    pub max_fail_percentage: Option<u8>,
    /// Stop at the first failure: hosts not yet started are skipped, running ones finish.
    pub fail_fast: bool,
}

impl Thresholds {
    /// `true` when a finished batch of `hosts` with `failed` failures trips the threshold.
    pub(crate) fn batch_trips(&self, failed: usize, hosts: usize) -> bool {
        match self.max_fail_percentage {
            Some(p) => failed * 100 > usize::from(p) * hosts,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BatchSize, Batches, Thresholds};

    fn sizes(plan: &str, total: usize) -> Vec<usize> {
        plan.parse::<Batches>()
            .unwrap()
            .split(total)
            .iter()
            .map(|r| r.len())
            .collect()
    }

    #[test]
    fn batch_plans() {
        assert_eq!(sizes("3", 10), [3, 3, 3, 1]);
        assert_eq!(sizes("1,10%,50%", 100), [1, 10, 50, 39]);
        assert_eq!(sizes("1, 10%, 50%", 20), [1, 2, 10, 7]);
        // A percentage of few hosts is still one host.
        assert_eq!(sizes("10%", 5), [1, 1, 1, 1, 1]);
        assert_eq!(sizes("100%", 5), [5]);
        assert_eq!(sizes("50", 5), [5]);
        let all = Batches::default().split(7);
        assert_eq!((all.len(), all.first().cloned()), (1, Some(0..7)));
        assert!(Batches::default().split(0).is_empty());
        for bad in ["0", "0%", "101%", "x", "", "5,,2", "-1"] {
            assert!(bad.parse::<Batches>().is_err(), "{bad}");
        }
        assert_eq!("25%".parse::<BatchSize>().unwrap(), BatchSize::Percent(25));
    }

    #[test]
    fn thresholds_trip_above_the_percentage() {
        let t = |p| Thresholds {
            max_fail_percentage: Some(p),
            fail_fast: false,
        };
        assert!(!t(20).batch_trips(2, 10));
        assert!(t(20).batch_trips(3, 10));
        assert!(t(0).batch_trips(1, 10));
        assert!(!t(0).batch_trips(0, 10));
        assert!(!Thresholds::default().batch_trips(10, 10));
    }
}
