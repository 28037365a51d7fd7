//! What happened on one host, as one word an operator acts on.

use crate::{
    command::{Execution, ExitStatus},
    error::{BecomeFailure, Error, Phase},
};

/// Why a host key was refused. Each one needs an operator: a key that changed may be an
/// attack, an unknown key needs adding, a revoked key needs replacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostKeyProblem {
    /// No known_hosts file lists the host ([`Error::UnknownHostKey`]).
    Unknown,
    /// The key differs from the one on record ([`Error::HostKeyMismatch`]).
    Mismatch,
    /// The key is marked `@revoked` ([`Error::HostKeyRevoked`]).
    Revoked,
}

/// The outcome on one host, classified. Every status but [`Ok`](HostStatus::Ok) counts as a
/// failure for batch thresholds, unreachable and host-key-refused hosts included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostStatus {
    /// The command exited 0.
    Ok,
    /// The command exited with a nonzero code.
    Failed {
        /// The exit code.
        code: u32,
    },
    /// The command was killed by a signal.
    Signal {
        /// The signal's name (`KILL`, `SEGV`, ...).
        name: String,
    },
    /// The command, or the host's connection, ran out of time. The command may have run.
    TimedOut,
    /// The connection broke while the command ran ([`Error::ConnectionLost`]): it may have
    /// run, partly or completely. Never retried.
    MayHaveRun,
    /// The host could not be reached before anything was sent: connection refused or timed
    /// out, a broken handshake, no channel. Retried when the fleet retries.
    Unreachable,
    /// The host key was refused: nothing was sent. Never retried.
    HostKeyRefused(HostKeyProblem),
    /// The server refused every authentication method. Never retried.
    AuthRejected,
    /// Logged in, but the escalation ([`Become`](crate::Become)) failed: a wrong or missing
    /// password, no sudoers rule, a tool that wants a terminal ([`Error::BecomeFailed`]).
    /// Nothing ran. Never retried (the host was reached; another try fails the same way).
    BecomeFailed {
        /// Why.
        reason: BecomeFailure,
    },
    /// The command could not be run for another reason (a key file, the agent, the
    /// configuration, an exec refused by the server).
    Error,
    /// The host was not started: a batch threshold or fail-fast stopped the run first.
    Skipped,
}

impl HostStatus {
    /// Classifies an outcome.
    pub fn of(outcome: &Result<Execution, Error>) -> Self {
        match outcome {
            Ok(execution) => match &execution.status {
                ExitStatus::Code(0) => HostStatus::Ok,
                ExitStatus::Code(code) => HostStatus::Failed { code: *code },
                ExitStatus::Signal { name, .. } => HostStatus::Signal { name: name.clone() },
                ExitStatus::TimedOut { .. } => HostStatus::TimedOut,
                _ => HostStatus::Error,
            },
            Err(error) => Self::of_error(error),
        }
    }

    fn of_error(error: &Error) -> Self {
        match error {
            Error::UnknownHostKey { .. } => HostStatus::HostKeyRefused(HostKeyProblem::Unknown),
            Error::HostKeyMismatch { .. } => HostStatus::HostKeyRefused(HostKeyProblem::Mismatch),
            Error::HostKeyRevoked { .. } => HostStatus::HostKeyRefused(HostKeyProblem::Revoked),
            Error::AuthRejected { .. } => HostStatus::AuthRejected,
            Error::BecomeFailed { reason, .. } => HostStatus::BecomeFailed { reason: *reason },
            Error::ConnectionLost { .. } | Error::RunnerLost { .. } => HostStatus::MayHaveRun,
            Error::Timeout { phase, .. } if before_exec(*phase) => HostStatus::Unreachable,
            Error::Timeout { .. } => HostStatus::TimedOut,
            Error::Ssh { phase, .. } if before_exec(*phase) => HostStatus::Unreachable,
            Error::Connect { .. } | Error::ChannelRefused { .. } | Error::JumpForward { .. } => {
                HostStatus::Unreachable
            }
            // The pool wait ends before a channel is opened, so before the exec left; a typed
            // refusal behind it keeps its own status (it must not be retried).
            Error::PoolTimeout { last_error, .. } => {
                match last_error.as_deref().map(Self::of_error) {
                    Some(refused @ (HostStatus::HostKeyRefused(_) | HostStatus::AuthRejected)) => {
                        refused
                    }
                    _ => HostStatus::Unreachable,
                }
            }
            _ => HostStatus::Error,
        }
    }

    /// `true` for [`Ok`](HostStatus::Ok).
    pub fn is_ok(&self) -> bool {
        matches!(self, HostStatus::Ok)
    }

    /// `true` when the command is known not to have started, so running it again cannot run
    /// it twice: only [`Unreachable`](HostStatus::Unreachable) (a refused host key or
    /// credentials need an operator, not another try).
    pub fn is_retryable(&self) -> bool {
        matches!(self, HostStatus::Unreachable)
    }

    /// The status's word in tables, folded headers and JSON records (`ok`, `failed`,
    /// `signal`, `timed_out`, `may_have_run`, `unreachable`, `host_key_unknown`,
    /// `host_key_mismatch`, `host_key_revoked`, `auth_rejected`, `become_failed`, `error`,
    /// `skipped`).
    /// These words are part of the record schema and do not change.
    pub fn word(&self) -> &'static str {
        match self {
            HostStatus::Ok => "ok",
            HostStatus::Failed { .. } => "failed",
            HostStatus::Signal { .. } => "signal",
            HostStatus::TimedOut => "timed_out",
            HostStatus::MayHaveRun => "may_have_run",
            HostStatus::Unreachable => "unreachable",
            HostStatus::HostKeyRefused(HostKeyProblem::Unknown) => "host_key_unknown",
            HostStatus::HostKeyRefused(HostKeyProblem::Mismatch) => "host_key_mismatch",
            HostStatus::HostKeyRefused(HostKeyProblem::Revoked) => "host_key_revoked",
            HostStatus::AuthRejected => "auth_rejected",
            HostStatus::BecomeFailed { .. } => "become_failed",
            HostStatus::Error => "error",
            HostStatus::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for HostStatus {
    /// `ok`, `exit 3`, `signal KILL`, `become failed (incorrect password)`, or the status's
    /// [`word`](HostStatus::word) with spaces (`timed out`, `host key mismatch`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostStatus::Failed { code } => write!(f, "exit {code}"),
            HostStatus::Signal { name } => write!(f, "signal {name}"),
            HostStatus::BecomeFailed { reason } => write!(f, "become failed ({reason})"),
            other => f.write_str(&other.word().replace('_', " ")),
        }
    }
}

/// Phases that end before the exec request leaves: a failure there cannot have run anything.
fn before_exec(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Connect | Phase::Handshake | Phase::Auth | Phase::PoolWait | Phase::ChannelOpen
    )
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use super::{HostKeyProblem, HostStatus};
    use crate::error::{Error, Phase};

    fn of(error: Error) -> HostStatus {
        HostStatus::of(&Err(error))
    }

    #[test]
    fn errors_before_the_exec_are_unreachable_and_only_they_retry() {
        let refused = Error::Connect {
            host: "h".into(),
            port: 22,
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        };
        assert_eq!(of(refused), HostStatus::Unreachable);
        let timeout = |phase| Error::Timeout {
            host: "h".into(),
            port: 22,
            phase,
            after: Duration::from_secs(1),
        };
        assert_eq!(of(timeout(Phase::Handshake)), HostStatus::Unreachable);
        assert_eq!(of(timeout(Phase::Exec)), HostStatus::TimedOut);
        assert_eq!(of(timeout(Phase::Command)), HostStatus::TimedOut);
        let lost = Error::ConnectionLost {
            host: "h".into(),
            port: 22,
        };
        assert_eq!(of(lost), HostStatus::MayHaveRun);
        assert!(!HostStatus::MayHaveRun.is_retryable());
        assert!(!HostStatus::TimedOut.is_retryable());
        assert!(HostStatus::Unreachable.is_retryable());
        let mismatch = Error::HostKeyMismatch {
            host: "h".into(),
            port: 22,
            fingerprint: "SHA256:x".into(),
            file: "kh".into(),
            line: 1,
        };
        let status = of(mismatch);
        assert_eq!(status, HostStatus::HostKeyRefused(HostKeyProblem::Mismatch));
        assert!(!status.is_retryable());
        assert_eq!(status.word(), "host_key_mismatch");
        // A pool wait that ended on a refused key is a refused key, not "unreachable".
        let wrapped = Error::PoolTimeout {
            host: "h".into(),
            port: 22,
            waited: Duration::from_secs(1),
            last_error: Some(Arc::new(Error::UnknownHostKey {
                host: "h".into(),
                port: 22,
                fingerprint: "SHA256:x".into(),
                files: "kh".into(),
            })),
        };
        assert_eq!(
            of(wrapped),
            HostStatus::HostKeyRefused(HostKeyProblem::Unknown)
        );
        assert_eq!(HostStatus::Failed { code: 3 }.to_string(), "exit 3");
        let become_failed = of(Error::BecomeFailed {
            host: "h".into(),
            port: 22,
            method: crate::error::BecomeMethod::Sudo,
            user: "root".into(),
            reason: crate::error::BecomeFailure::IncorrectPassword,
            message: String::new(),
        });
        assert_eq!(become_failed.word(), "become_failed");
        assert!(!become_failed.is_ok() && !become_failed.is_retryable());
        assert_eq!(
            become_failed.to_string(),
            "become failed (incorrect password)"
        );
        assert_eq!(HostStatus::MayHaveRun.to_string(), "may have run");
    }
}
