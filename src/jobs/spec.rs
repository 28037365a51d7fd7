//! What a job is started with: [`JobOptions`], the id rules, and the `spec` file that records
//! it on the host (hex-encoded values, one setting a line, so hostile text is stored and read
//! back exactly and never meets a shell unquoted).

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use data_encoding::HEXLOWER;

use crate::error::{Error, Result};

/// The most bytes of a job id.
pub(crate) const MAX_ID_LEN: usize = 64;

/// The spool cap per stream when none is set: 1 GiB.
pub const DEFAULT_SPOOL_CAP: u64 = 1 << 30;

/// The kill grace of a deadline when none is set.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(1);

/// How a job is started ([`SshExecutor::spawn_job`](crate::SshExecutor::spawn_job)).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct JobOptions {
    pub(crate) id: Option<String>,
    pub(crate) current_dir: Option<PathBuf>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) env_remove: Vec<String>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) kill_grace: Option<Duration>,
    pub(crate) spool_cap: Option<u64>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) stdin: bool,
}

impl JobOptions {
    /// Options with every default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The job's id, chosen by the client: 1 to 64 bytes of `A-Z a-z 0-9 . _ -`, not starting
    /// with `.` or `-`. It is the idempotency key: starting the same id with the same command
    /// and options again returns the running job instead of a second run. Defaults to a random
    /// `job-<16 hex digits>`.
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The directory to run in: absolute, or relative to the executor's workdir. Defaults to
    /// the workdir (the login directory without one), as for commands.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets an environment variable for the job, after the executor's own environment
    /// settings. Defaults to none.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Removes an environment variable for the job (also one the executor sets). Defaults to
    /// none.
    #[must_use]
    pub fn env_remove(mut self, name: impl Into<String>) -> Self {
        self.env_remove.push(name.into());
        self
    }

    /// The job's own deadline, counted from its start on the host: then its process group
    /// gets `SIGTERM`, and `SIGKILL` after the [`kill_grace`](Self::kill_grace), with or
    /// without a client attached. Defaults to none (the job runs until it ends or is killed).
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The time between `SIGTERM` and `SIGKILL` when the deadline kills the job. Defaults to
    /// 1 s.
    #[must_use]
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = Some(grace);
        self
    }

    /// The most bytes kept per stream (stdout, stderr) on the host. Output beyond it is
    /// counted and dropped (the job keeps running); reads then report it in
    /// [`JobOutput::dropped`](crate::JobOutput::dropped). Defaults to 1 GiB.
    #[must_use]
    pub fn spool_cap(mut self, bytes: u64) -> Self {
        self.spool_cap = Some(bytes);
        self
    }

    /// Gives the job a stdin that clients write to while it runs
    /// ([`Job::write_stdin`](crate::Job::write_stdin), from any client process, reattached
    /// or not) and close ([`Job::close_stdin`](crate::Job::close_stdin)). Defaults to off:
    /// stdin is `/dev/null`, as for commands. Not for `#!` scripts, whose interpreter reads
    /// its body on stdin.
    #[must_use]
    pub fn stdin(mut self, enabled: bool) -> Self {
        self.stdin = enabled;
        self
    }

    /// Adds a label (any text; stored and listed exactly). Defaults to none.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// Checks a job id (see [`JobOptions::id`]).
pub(crate) fn validate_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        Some("is empty")
    } else if id.len() > MAX_ID_LEN {
        Some("is longer than 64 bytes")
    } else if id.starts_with(['.', '-']) {
        Some("starts with '.' or '-'")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("has a character other than A-Z, a-z, 0-9, '.', '_' and '-'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidJobId {
            id: id.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// A random id for a job started without one.
pub(crate) fn random_id() -> String {
    format!("job-{:016x}", rand::random::<u64>())
}

/// Everything a job was started with, as recorded in its `spec` file. Two starts of one id are
/// the same job when their specs are equal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Spec {
    pub(crate) id: String,
    pub(crate) command: String,
    pub(crate) current_dir: Option<PathBuf>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) env_remove: Vec<String>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) kill_grace: Duration,
    pub(crate) spool_cap: u64,
    pub(crate) labels: BTreeMap<String, String>,
    /// The job reads the stdin clients write (`stdin.d/`), not `/dev/null`.
    pub(crate) stdin: bool,
}

const MAGIC: &str = "swiftide-ssh-job 1";

fn hex(text: &str) -> String {
    HEXLOWER.encode(text.as_bytes())
}

fn unhex(word: &str) -> Option<String> {
    let bytes = HEXLOWER.decode(word.as_bytes()).ok()?;
    String::from_utf8(bytes).ok()
}

impl Spec {
    /// The `spec` file's text.
    pub(crate) fn encode(&self) -> String {
        let mut out = format!("{MAGIC}\nid {}\ncommand {}\n", self.id, hex(&self.command));
        if let Some(dir) = &self.current_dir {
            out.push_str(&format!(
                "dir {}\n",
                HEXLOWER.encode(dir.as_os_str().as_encoded_bytes())
            ));
        }
        for name in &self.env_remove {
            out.push_str(&format!("env-remove {}\n", hex(name)));
        }
        for (name, value) in &self.env {
            out.push_str(&format!("env {} {}\n", hex(name), hex(value)));
        }
        if let Some(deadline) = self.deadline {
            out.push_str(&format!("deadline-ms {}\n", deadline.as_millis()));
        }
        out.push_str(&format!(
            "kill-grace-ms {}\nspool-cap {}\n",
            self.kill_grace.as_millis(),
            self.spool_cap
        ));
        for (key, value) in &self.labels {
            out.push_str(&format!("label {} {}\n", hex(key), hex(value)));
        }
        if self.stdin {
            out.push_str("stdin\n");
        }
        out
    }

    /// Parses a `spec` file; `None` when it is not one this version wrote.
    pub(crate) fn decode(text: &[u8]) -> Option<Spec> {
        let text = std::str::from_utf8(text).ok()?;
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut spec = Spec::default();
        for line in lines {
            let mut words = line.split(' ');
            let key = words.next()?;
            let mut next = || words.next();
            match key {
                "id" => spec.id = next()?.to_owned(),
                "command" => spec.command = unhex(next()?)?,
                "dir" => {
                    let bytes = HEXLOWER.decode(next()?.as_bytes()).ok()?;
                    spec.current_dir = Some(PathBuf::from(String::from_utf8(bytes).ok()?));
                }
                "env-remove" => spec.env_remove.push(unhex(next()?)?),
                "env" => {
                    let name = unhex(next()?)?;
                    spec.env.push((name, unhex(next()?)?));
                }
                "deadline-ms" => {
                    spec.deadline = Some(Duration::from_millis(next()?.parse().ok()?));
                }
                "kill-grace-ms" => spec.kill_grace = Duration::from_millis(next()?.parse().ok()?),
                "spool-cap" => spec.spool_cap = next()?.parse().ok()?,
                "label" => {
                    let key = unhex(next()?)?;
                    spec.labels.insert(key, unhex(next()?)?);
                }
                "stdin" => spec.stdin = true,
                // Lines of a later version are skipped.
                _ => {}
            }
        }
        Some(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for good in ["a", "build-1", "x.y_z", &"a".repeat(64)] {
            assert!(validate_id(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", ".x", "a/b", "a b", "é", "$(x)", &"a".repeat(65)] {
            assert!(
                matches!(validate_id(bad), Err(Error::InvalidJobId { .. })),
                "{bad}"
            );
        }
        assert!(validate_id(&random_id()).is_ok());
    }

    #[test]
    fn spec_round_trips_hostile_text() {
        let spec = Spec {
            id: "j1".into(),
            command: "echo '$(rm -rf /)' \"`x`\"\n\\ \u{0}é".into(),
            current_dir: Some(PathBuf::from("/tmp/a b\n'c")),
            env: vec![("A".into(), "x\ny 'z' $HOME".into())],
            env_remove: vec!["B".into()],
            deadline: Some(Duration::from_millis(1500)),
            kill_grace: Duration::from_secs(2),
            spool_cap: 42,
            labels: [("k\n ".to_owned(), "v $x".to_owned())].into(),
            stdin: true,
        };
        let text = spec.encode();
        assert!(text.lines().all(|l| l.is_ascii()));
        assert_eq!(Spec::decode(text.as_bytes()), Some(spec));
        assert_eq!(Spec::decode(b"something else"), None);
    }
}
