//! One audit record: what was done, where, as whom, and how it ended.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One line of an audit trail, as JSON: an operation on a host (a command, a file read or
/// write, a walk of files, a job start or kill, a terminal, a forward), written when it ends.
///
/// Never holds a secret: become passwords and [`Secret`](crate::Secret) values are not part
/// of any operation's record, and file contents and command output appear only as their
/// size and SHA-256. The command text is recorded as given: an agent that types a secret
/// into a command puts it in the trail, as it would in a shell's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// Position in the trail, from 1.
    pub seq: u64,
    /// When the operation started (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// The host as configured, and its port.
    pub host: String,
    /// The SSH port.
    pub port: u16,
    /// The login user.
    pub login: String,
    /// The user the operation ran as: the login, or the [`Become`](crate::Become) target.
    pub user: String,
    /// The escalation tool (`sudo`, `doas`, `su`) when the operation ran through one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#become: Option<String>,
    /// What was done: `command`, `process`, `terminal`, `read_file`, `write_file`,
    /// `remove_file`, `remove_dir`, `remove_dir_all`, `create_dir_all`, `rename`,
    /// `stream_files`, `job_start`, `job_kill`, `forward_local`, `forward_dynamic`,
    /// `forward_remote`, `checkpoint`, `rollback`.
    pub op: String,
    /// The working directory a command ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// The command text, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The file or directory a file operation worked on (lossily decoded), or what a
    /// forward reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The second path of a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// A job's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// A checkpoint's id (`checkpoint`, `rollback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The limits and confinement the command was given, as the runner protocol's entries
    /// (`memory=N`, `writes=confined`, `write=PATH`, ...; see runner/PROTOCOL.md), when any
    /// were. A command that could not get them was refused
    /// ([`Error::GuardUnavailable`](crate::Error::GuardUnavailable), its `exit` says so),
    /// unless the builder allows running unguarded where unenforceable, which logs a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<Vec<String>>,
    /// How it ended.
    pub exit: Exit,
    /// Wall time from start to end, in milliseconds.
    pub duration_ms: u64,
    /// What a command wrote to stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<Digested>,
    /// What a command wrote to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Digested>,
    /// The content a file operation read or wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Digested>,
    /// The SHA-256 of the line before this one (see [`verify`](super::verify)).
    pub prev: String,
}

/// How an audited operation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Exit {
    /// A command exited with this code.
    Code(u32),
    /// A command was killed by this signal (`KILL`, `XCPU`, ...).
    Signal(String),
    /// A command ran past its timeout (seconds) and its group was killed.
    TimedOut(f64),
    /// A command's channel closed without a status.
    Unknown,
    /// A file, job, terminal or forward operation succeeded.
    Ok,
    /// The operation failed with this error.
    Error(String),
    /// The caller dropped the operation before it ended (a command's group is then killed).
    Cancelled,
}

/// The size and SHA-256 of some bytes (output, file content): what they were, without them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digested {
    /// How many bytes.
    pub bytes: u64,
    /// Their SHA-256, lowercase hex.
    pub sha256: String,
}

impl Digested {
    /// The digest of `bytes`.
    pub(crate) fn of(bytes: &[u8]) -> Digested {
        let mut digest = Digesting::default();
        digest.update(bytes);
        digest.finish()
    }
}

/// A [`Digested`] being computed, as bytes arrive.
#[derive(Debug, Default, Clone)]
pub(crate) struct Digesting {
    bytes: u64,
    hasher: Sha256,
}

impl Digesting {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        self.hasher.update(bytes);
    }

    pub(crate) fn finish(self) -> Digested {
        Digested {
            bytes: self.bytes,
            sha256: data_encoding::HEXLOWER.encode(&self.hasher.finalize()),
        }
    }
}

/// A command's stdout and stderr, digested as they stream past.
#[derive(Debug, Default)]
pub(crate) struct OutputDigests {
    stdout: Digesting,
    stderr: Digesting,
}

impl OutputDigests {
    pub(crate) fn stdout(&mut self, bytes: &[u8]) {
        self.stdout.update(bytes);
    }

    pub(crate) fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.update(bytes);
    }

    /// Puts the digests into `record`, leaving these empty.
    pub(crate) fn record_into(&mut self, record: &mut AuditRecord) {
        record.stdout = Some(std::mem::take(&mut self.stdout).finish());
        record.stderr = Some(std::mem::take(&mut self.stderr).finish());
    }
}
