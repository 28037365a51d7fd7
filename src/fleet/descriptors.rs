//! The open-file limit a fleet run needs. Each connection is one socket, and a fleet whose
//! connections stay pooled holds one per host: parallel-ssh stopped at about 1,010 hosts on
//! the usual soft limit of 1,024 (its issue #311) with "Too many open files" half way
//! through a run. A fleet raises its soft limit (`RLIMIT_NOFILE`) to what the run needs
//! before the first connection, up to the hard limit, or refuses to start with
//! [`Error::DescriptorLimit`].

use crate::error::{Error, Result};

/// Descriptors kept free besides the process's open ones and the connections: files the
/// caller opens during the run, the runtime's, a connection being replaced.
pub(crate) const HEADROOM: u64 = 64;

/// Descriptors a run with `connections` sockets open at once needs in all: those already
/// open in this process, the sockets, and [`HEADROOM`].
pub(crate) fn needed(connections: usize) -> u64 {
    open_now()
        .saturating_add(connections as u64)
        .saturating_add(HEADROOM)
}

/// Makes sure the soft open-file limit is at least `needed`: raises it (never above the hard
/// limit, never lowers it) and returns the soft limit in force.
///
/// # Errors
/// [`Error::DescriptorLimit`] when the hard limit is below `needed`, or the limit cannot be
/// read or raised.
pub(crate) fn ensure(needed: u64) -> Result<u64> {
    imp::ensure(needed)
}

/// The descriptors open in this process (`/proc/self/fd` on Linux; 0 where it cannot be
/// counted, which [`HEADROOM`] then covers).
fn open_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64)
}

#[cfg(unix)]
mod imp {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    use crate::error::Result;

    pub(super) fn ensure(needed: u64) -> Result<u64> {
        let limit = getrlimit(Resource::Nofile);
        // `None` is unlimited.
        let soft = limit.current.unwrap_or(u64::MAX);
        let hard = limit.maximum.unwrap_or(u64::MAX);
        if soft >= needed {
            return Ok(soft);
        }
        if hard < needed {
            return Err(super::refused(needed, soft, hard, None));
        }
        let raised = Rlimit {
            current: Some(needed),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised)
            .map_err(|e| super::refused(needed, soft, hard, Some(e.to_string())))?;
        tracing::debug!(
            from = soft,
            to = needed,
            "raised the soft open-file limit for a fleet"
        );
        Ok(needed)
    }
}

#[cfg(not(unix))]
mod imp {
    use crate::error::Result;

    /// No `RLIMIT_NOFILE` here: the system's own limits apply.
    pub(super) fn ensure(needed: u64) -> Result<u64> {
        Ok(needed)
    }
}

fn refused(needed: u64, soft: u64, hard: u64, cause: Option<String>) -> Error {
    Error::DescriptorLimit {
        needed,
        soft,
        hard,
        reason: cause.unwrap_or_else(|| {
            format!(
                "the hard limit is {hard}: raise it (`ulimit -Hn`, LimitNOFILE=, limits.conf), \
                 run fewer hosts at once, or release each host's connection once its result \
                 is in (Fleet::release_connections)"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{HEADROOM, ensure, needed};

    #[test]
    fn needs_a_socket_per_connection_plus_what_is_open() {
        let n = needed(1000);
        assert!(n >= 1000 + HEADROOM, "{n}");
        assert!(n < 1000 + HEADROOM + 10_000, "{n}");
    }

    #[cfg(unix)]
    #[test]
    fn a_limit_above_the_hard_one_is_refused_and_a_low_one_is_kept() {
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .maximum
            .unwrap_or(u64::MAX);
        if hard < u64::MAX {
            let error = ensure(hard + 1).unwrap_err();
            assert!(
                matches!(error, crate::Error::DescriptorLimit { needed, .. } if needed == hard + 1),
                "{error:?}"
            );
            assert!(error.to_string().contains("open-file limit"), "{error}");
        }
        // Never lowered.
        let soft = ensure(1).unwrap();
        assert!(soft >= 1);
    }
}
