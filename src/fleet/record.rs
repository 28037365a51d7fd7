//! One JSON record per host, the exit-code policy, and the failed-hosts file.
//!
//! # The record schema (`schema_version` 1)
//!
//! One JSON object per host, one per line when written with [`write_records`]. Fields are
//! only ever added (readers must ignore unknown ones); a change to a field's meaning bumps
//! `schema_version`.
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `schema_version` | number | `1` |
//! | `host` | string | the host's name (inventory name, node set member, or address) |
//! | `address` | string | the address connected to (`ansible_host`, `HostName`, or `host`) |
//! | `port` | number | the SSH port |
//! | `user` | string | the login user |
//! | `member` | number | the host's position in the fleet |
//! | `batch` | number or null | the batch it ran in (0-based); null when skipped before its batch |
//! | `status` | string | one of `ok`, `failed`, `signal`, `timed_out`, `may_have_run`, `unreachable`, `host_key_unknown`, `host_key_mismatch`, `host_key_revoked`, `auth_rejected`, `become_failed`, `error`, `skipped` |
//! | `become_failure` | string or null | with `become_failed`: `incorrect_password`, `password_required`, `not_allowed`, `terminal_required`, `unknown_user`, `not_installed`, `timeout` or `other` |
//! | `exit_code` | number or null | the exit code when the command exited |
//! | `signal` | string or null | the signal's name when it was killed by one |
//! | `error` | string or null | why there is no exit status (the error and its causes) |
//! | `stdout`, `stderr` | string or null | the output, lossily decoded as UTF-8; null when the record was made with digests only or nothing ran |
//! | `stdout_sha256`, `stderr_sha256` | string or null | hex SHA-256 of the raw output bytes; null when nothing ran |
//! | `omitted_bytes` | number | output bytes dropped by the executor's output cap |
//! | `started_ms` | number or null | when the host's first attempt started, in ms after the run started |
//! | `duration_ms` | number | wall time for the host, every attempt and backoff included |
//! | `attempts` | number | connection attempts (more than 1 only for retried unreachable hosts; 0 when skipped) |
//! | `changed` | bool or null | a push: `true` when a file was written, `false` when every file was already as pushed (Ansible's `changed`); null for other operations and failed pushes |
//! | `files` | array or null | a push: one `{"path": ..., "change": ...}` per file, `change` one of `created`, `changed`, `unchanged` ([`FileChange::word`](super::FileChange::word)); null for other operations and failed pushes |
//!
//! # Exit codes
//!
//! [`exit_code`] gives one number for a run, for scripts and for the command-line tool. The
//! highest applicable code wins:
//!
//! | code | when |
//! |---|---|
//! | 0 | every host ran the command and it exited 0 |
//! | 1 | a command exited nonzero or was killed by a signal |
//! | 2 | (reserved for usage errors of the command-line tool: bad arguments, no hosts) |
//! | 3 | a command timed out, or a connection broke under it (`may_have_run`): its effect is unknown |
//! | 4 | a host could not run the command: unreachable, authentication refused, escalation (`become_failed`) refused, other errors |
//! | 5 | a host key was refused (unknown, changed or revoked): an operator must act |
//! | 6 | hosts were skipped because a threshold or fail-fast stopped the rollout |
//!
//! [`max_exit_code`] is clush's `-S` instead: the largest exit code of the remote commands.

use std::{io::Write, path::Path};

use data_encoding::HEXLOWER;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{HostResult, SkippedHost, copy::PushedFiles, status::HostStatus};
use crate::{
    command::ExitStatus,
    error::{Error, Result},
};

/// The record schema's version, see the [module docs](self).
pub const SCHEMA_VERSION: u32 = 1;

/// One host's result as a stable, machine-readable record (see the schema in the
/// [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HostRecord {
    /// The schema's version: [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The host's name.
    pub host: String,
    /// The address connected to.
    pub address: String,
    /// The SSH port.
    pub port: u16,
    /// The login user.
    pub user: String,
    /// The host's position in the fleet.
    pub member: usize,
    /// The batch it ran in.
    pub batch: Option<usize>,
    /// The status word ([`HostStatus::word`]).
    pub status: String,
    /// The exit code.
    pub exit_code: Option<u32>,
    /// The signal's name.
    pub signal: Option<String>,
    /// Why there is no exit status.
    pub error: Option<String>,
    /// Standard output, lossily decoded.
    pub stdout: Option<String>,
    /// Standard error, lossily decoded.
    pub stderr: Option<String>,
    /// Hex SHA-256 of the raw standard output.
    pub stdout_sha256: Option<String>,
    /// Hex SHA-256 of the raw standard error.
    pub stderr_sha256: Option<String>,
    /// Output bytes dropped by the output cap.
    pub omitted_bytes: u64,
    /// Start of the first attempt, in ms after the run started.
    pub started_ms: Option<u64>,
    /// Wall time, every attempt included, in ms.
    pub duration_ms: u64,
    /// Connection attempts.
    pub attempts: u32,
    /// Why the escalation failed, with the status `become_failed`
    /// ([`BecomeFailure::word`](crate::BecomeFailure::word)). Absent in records of earlier
    /// versions.
    #[serde(default)]
    pub become_failure: Option<String>,
    /// A push: whether a file was written ([`PushedFiles::changed`]). Absent in records of
    /// earlier versions.
    #[serde(default)]
    pub changed: Option<bool>,
    /// A push: what was done to each file. Absent in records of earlier versions.
    #[serde(default)]
    pub files: Option<Vec<PushedFileRecord>>,
}

/// One file of a push in a [`HostRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PushedFileRecord {
    /// The remote path, lossily decoded.
    pub path: String,
    /// What was done to it ([`FileChange::word`](super::FileChange::word): `created`,
    /// `changed`, `unchanged`).
    pub change: String,
}

impl HostRecord {
    /// The record of a host that ran (or tried to). With `digests_only`, `stdout` and
    /// `stderr` are left out and only their digests kept.
    pub fn from_result(result: &HostResult, digests_only: bool) -> Self {
        let status = result.status();
        let mut record = HostRecord {
            schema_version: SCHEMA_VERSION,
            host: result.name.clone(),
            address: result.host.clone(),
            port: result.port,
            user: result.user.clone(),
            member: result.member,
            batch: Some(result.batch),
            status: status.word().to_owned(),
            exit_code: None,
            signal: None,
            error: None,
            stdout: None,
            stderr: None,
            stdout_sha256: None,
            stderr_sha256: None,
            omitted_bytes: 0,
            started_ms: Some(millis(result.started)),
            duration_ms: millis(result.duration),
            attempts: result.attempts,
            become_failure: match status {
                HostStatus::BecomeFailed { reason } => Some(reason.word().to_owned()),
                _ => None,
            },
            changed: result.pushed.as_ref().map(PushedFiles::changed),
            files: result.pushed.as_ref().map(|pushed| {
                pushed
                    .files
                    .iter()
                    .map(|file| PushedFileRecord {
                        path: file.path.to_string_lossy().into_owned(),
                        change: file.change.word().to_owned(),
                    })
                    .collect()
            }),
        };
        match &result.outcome {
            Ok(execution) => {
                match &execution.status {
                    ExitStatus::Code(code) => record.exit_code = Some(*code),
                    ExitStatus::Signal { name, .. } => record.signal = Some(name.clone()),
                    _ => {}
                }
                let (stdout, stderr) = (execution.stdout(), execution.stderr());
                record.stdout_sha256 = Some(sha256(&stdout));
                record.stderr_sha256 = Some(sha256(&stderr));
                if !digests_only {
                    record.stdout = Some(String::from_utf8_lossy(&stdout).into_owned());
                    record.stderr = Some(String::from_utf8_lossy(&stderr).into_owned());
                }
                record.omitted_bytes = execution.omitted_bytes;
            }
            Err(error) => record.error = Some(error_chain(error)),
        }
        record
    }

    /// The record of a host that was never started.
    pub fn from_skipped(skipped: &SkippedHost) -> Self {
        HostRecord {
            schema_version: SCHEMA_VERSION,
            host: skipped.name.clone(),
            address: skipped.host.clone(),
            port: skipped.port,
            user: skipped.user.clone(),
            member: skipped.member,
            batch: None,
            status: HostStatus::Skipped.word().to_owned(),
            exit_code: None,
            signal: None,
            error: Some(skipped.reason.clone()),
            stdout: None,
            stderr: None,
            stdout_sha256: None,
            stderr_sha256: None,
            omitted_bytes: 0,
            started_ms: None,
            duration_ms: 0,
            attempts: 0,
            become_failure: None,
            changed: None,
            files: None,
        }
    }

    /// The record's status (an unknown word, from a newer schema, reads as
    /// [`HostStatus::Error`]).
    pub fn host_status(&self) -> HostStatus {
        use super::status::HostKeyProblem::*;
        match self.status.as_str() {
            "ok" => HostStatus::Ok,
            "failed" => HostStatus::Failed {
                code: self.exit_code.unwrap_or(1),
            },
            "signal" => HostStatus::Signal {
                name: self.signal.clone().unwrap_or_default(),
            },
            "timed_out" => HostStatus::TimedOut,
            "may_have_run" => HostStatus::MayHaveRun,
            "unreachable" => HostStatus::Unreachable,
            "host_key_unknown" => HostStatus::HostKeyRefused(Unknown),
            "host_key_mismatch" => HostStatus::HostKeyRefused(Mismatch),
            "host_key_revoked" => HostStatus::HostKeyRefused(Revoked),
            "auth_rejected" => HostStatus::AuthRejected,
            "become_failed" => HostStatus::BecomeFailed {
                reason: crate::error::BecomeFailure::from_word(
                    self.become_failure.as_deref().unwrap_or_default(),
                ),
            },
            "skipped" => HostStatus::Skipped,
            _ => HostStatus::Error,
        }
    }
}

/// The error's message and its causes, `: `-separated.
fn error_chain(error: &Error) -> String {
    error.with_causes()
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn sha256(bytes: &[u8]) -> String {
    HEXLOWER.encode(&Sha256::digest(bytes))
}

/// Writes records as JSON lines.
///
/// # Errors
/// [`Error::InvalidInput`] when `out` cannot be written.
pub fn write_records<'a>(
    records: impl IntoIterator<Item = &'a HostRecord>,
    mut out: impl Write,
) -> Result<()> {
    for record in records {
        serde_json::to_writer(&mut out, record).map_err(|e| Error::InvalidInput {
            reason: format!("cannot write a host record: {e}"),
        })?;
        out.write_all(b"\n").map_err(|e| Error::InvalidInput {
            reason: format!("cannot write a host record: {e}"),
        })?;
    }
    Ok(())
}

/// Reads JSON-lines records (blank lines ignored), e.g. the files of several shards
/// concatenated, to [`fold`](super::fold_records) them into one report.
///
/// # Errors
/// [`Error::InvalidInput`] naming the line that is not a record.
pub fn read_records(text: &str) -> Result<Vec<HostRecord>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            serde_json::from_str(line).map_err(|e| Error::InvalidInput {
                reason: format!("host record on line {}: {e}", number + 1),
            })
        })
        .collect()
}

/// The run's exit code under the policy in the [module docs](self).
pub fn exit_code<'a>(statuses: impl IntoIterator<Item = &'a HostStatus>) -> u8 {
    statuses
        .into_iter()
        .map(|status| match status {
            HostStatus::Ok => 0,
            HostStatus::Failed { .. } | HostStatus::Signal { .. } => 1,
            HostStatus::TimedOut | HostStatus::MayHaveRun => 3,
            HostStatus::HostKeyRefused(_) => 5,
            HostStatus::Skipped => 6,
            _ => 4,
        })
        .max()
        .unwrap_or(0)
}

/// clush's `-S`: the largest exit code of the commands (a death by signal counts as 1), 0
/// when none exited nonzero.
pub fn max_exit_code<'a>(statuses: impl IntoIterator<Item = &'a HostStatus>) -> u32 {
    statuses
        .into_iter()
        .map(|status| match status {
            HostStatus::Failed { code } => *code,
            HostStatus::Signal { .. } => 1,
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// Writes the names of the hosts that did not succeed (failed, unreachable, refused,
/// skipped, ...), one a line, after a `#` comment line: Ansible's `.retry` file, pssh's
/// `hosts.failed`. Read it back with [`read_host_list`] to run on those hosts only
/// ([`Inventory::limit`](super::Inventory::limit), [`Fleet::from_hosts`](super::Fleet::from_hosts)).
///
/// # Errors
/// [`Error::InvalidInput`] when the file cannot be written.
pub fn write_failed_hosts<'a>(
    path: &Path,
    records: impl IntoIterator<Item = &'a HostRecord>,
) -> Result<()> {
    let mut text = String::from("# hosts that did not succeed: one name a line\n");
    for record in records {
        if record.status != "ok" {
            text.push_str(&record.host);
            text.push('\n');
        }
    }
    std::fs::write(path, text).map_err(|e| Error::InvalidInput {
        reason: format!("cannot write the failed-hosts file {}: {e}", path.display()),
    })
}

/// Reads a host list: one name (or node set) a line, `#` comments and blank lines ignored;
/// node sets are expanded (`web[01-03]`).
///
/// # Errors
/// [`Error::InvalidInput`] for an unreadable file or a bad node set.
pub fn read_host_list(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidInput {
        reason: format!("cannot read host list {}: {e}", path.display()),
    })?;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if !line.is_empty() {
            names.extend(super::nodeset::expand_nodeset(line)?);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::{HostStatus, exit_code, max_exit_code};
    use crate::fleet::status::HostKeyProblem;

    #[test]
    fn the_worst_status_sets_the_exit_code() {
        assert_eq!(exit_code(&[]), 0);
        assert_eq!(exit_code(&[HostStatus::Ok, HostStatus::Ok]), 0);
        assert_eq!(
            exit_code(&[HostStatus::Ok, HostStatus::Failed { code: 7 }]),
            1
        );
        assert_eq!(
            exit_code(&[HostStatus::Failed { code: 7 }, HostStatus::MayHaveRun]),
            3
        );
        assert_eq!(
            exit_code(&[HostStatus::Unreachable, HostStatus::TimedOut]),
            4
        );
        assert_eq!(
            exit_code(&[
                HostStatus::Unreachable,
                HostStatus::HostKeyRefused(HostKeyProblem::Mismatch)
            ]),
            5
        );
        assert_eq!(
            exit_code(&[HostStatus::Skipped, HostStatus::AuthRejected]),
            6
        );
        assert_eq!(
            max_exit_code(&[
                HostStatus::Failed { code: 7 },
                HostStatus::Failed { code: 2 }
            ]),
            7
        );
        assert_eq!(max_exit_code(&[HostStatus::Unreachable]), 0);
    }
}
