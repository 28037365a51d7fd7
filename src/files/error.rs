//! How file failures read. LocalExecutor's messages carry `std::io::Error`'s text for the OS
//! error (through fs-err), so this crate words its [`Error::Sftp`] reasons the same way
//! whenever it knows which error it was: from an SFTP status, from its own checks, or from a
//! fallback script's stderr.

use std::{io, path::Path};

use russh_sftp::{client::error::Error as SftpError, protocol::StatusCode};

use crate::{
    error::{Error, SftpStatus},
    executor::SshExecutor,
};

/// Linux error numbers whose texts LocalExecutor's messages contain.
pub(crate) const ENOENT: i32 = 2;
pub(crate) const EACCES: i32 = 13;
pub(crate) const ENOTDIR: i32 = 20;
pub(crate) const EISDIR: i32 = 21;
pub(crate) const ELOOP: i32 = 40;

/// The text `std::io::Error` prints for an OS error, e.g. `Is a directory (os error 21)`:
/// the exact reason LocalExecutor (through fs-err) puts in its file error messages.
pub(crate) fn os_error_text(code: i32) -> String {
    io::Error::from_raw_os_error(code).to_string()
}

/// [`os_error_text`] without its ` (os error N)` suffix (`Is a directory`), as tools such
/// as `cat` print it.
pub(crate) fn os_error_reason(code: i32) -> String {
    let text = os_error_text(code);
    match text.strip_suffix(&format!(" (os error {code})")) {
        Some(reason) => reason.to_owned(),
        None => text,
    }
}

/// The status and reason text of a status error (`None` for transport errors). OpenSSH sends
/// generic texts ("No such file"); LocalExecutor's messages carry `std::io::Error`'s, so
/// those are used where the status says which error it was.
fn classify(error: &SftpError) -> Option<(SftpStatus, String)> {
    let SftpError::Status(status) = error else {
        return None;
    };
    Some(match status.status_code {
        StatusCode::NoSuchFile => (SftpStatus::NoSuchFile, os_error_text(ENOENT)),
        StatusCode::PermissionDenied => (SftpStatus::PermissionDenied, os_error_text(EACCES)),
        code => {
            let kind = if code == StatusCode::Failure {
                SftpStatus::Failure
            } else {
                SftpStatus::Other
            };
            let text = if status.error_message.is_empty() {
                code.to_string()
            } else {
                status.error_message.clone()
            };
            (kind, text)
        }
    })
}

impl SshExecutor {
    /// An [`Error::Sftp`] on this executor's host.
    pub(crate) fn file_failure(
        &self,
        operation: &'static str,
        path: impl Into<String>,
        reason: impl Into<String>,
        status: Option<SftpStatus>,
    ) -> Error {
        Error::Sftp {
            host: self.inner.config.host.clone(),
            operation,
            path: path.into(),
            reason: reason.into(),
            status,
        }
    }

    /// A typed error for a failed SFTP request, with LocalExecutor's reason texts for the
    /// statuses that have one. A missing status means a transport problem.
    pub(crate) fn sftp_error(
        &self,
        operation: &'static str,
        path: &str,
        error: SftpError,
    ) -> Error {
        let (status, reason) = match classify(&error) {
            Some((status, reason)) => (Some(status), reason),
            None => (None, error.to_string()),
        };
        self.file_failure(operation, path, reason, status)
    }

    /// A file-level failure found by this crate (not by the server), e.g. "Is a directory".
    pub(crate) fn file_error(&self, operation: &'static str, path: &Path, code: i32) -> Error {
        let status = match code {
            ENOENT => SftpStatus::NoSuchFile,
            EACCES => SftpStatus::PermissionDenied,
            _ => SftpStatus::Failure,
        };
        self.file_failure(
            operation,
            path.to_string_lossy(),
            os_error_text(code),
            Some(status),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_local_executor_texts() {
        assert_eq!(
            os_error_text(ENOENT),
            "No such file or directory (os error 2)"
        );
        assert_eq!(os_error_text(EISDIR), "Is a directory (os error 21)");
        assert_eq!(os_error_text(EACCES), "Permission denied (os error 13)");
        assert_eq!(os_error_reason(EISDIR), "Is a directory");
    }
}
