//! [`Runner`]: how commands reach the host's shell, one session per command or through a
//! resident runner (the mechanics live in `command::resident`).

/// How the executor starts commands on a host.
///
/// Every command through sshd costs a whole SSH session on the host: sshd forks and sets up
/// the session, the login shell starts, then the command's own `sh`. A **resident runner** is
/// one small program per connection (a Python 3 script, or the same runner in Perl where the
/// host has no Python 3.8: `perl` is Essential on Debian and Ubuntu; or this crate's
/// `swiftide-ssh-runner` binary, see
/// [`runner_helper`](crate::SshExecutorBuilder::runner_helper)), started by one exec
/// request, that
/// runs the executor's commands as requests on its channel: each one is `fork` and `sh -c`,
/// in a session and process group of its own, stdout and stderr on pipes of their own. See
/// [How commands run](crate::guide::commands#how-commands-run) for what takes which path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Runner {
    /// A resident runner where the host can start one (the helper runs, or the account's
    /// `PATH` has `python3` or `perl`),
    /// else one session per command, silently: the results are the same either way. The
    /// runner starts in the background: the command that sets it off runs per exec.
    /// A [`Fleet`](crate::Fleet)'s work on a host starts none (one already running on the
    /// connection is used): one command, or a few, per host cost less per exec.
    #[default]
    Auto,
    /// A resident runner or nothing: a command that could use it waits for its start, and
    /// fails with [`Error::RunnerUnavailable`](crate::Error::RunnerUnavailable) on a host
    /// where none starts.
    Resident,
    /// One SSH session per command, as before there was a runner.
    PerExec,
}

impl Runner {
    /// The setting named by `SWIFTIDE_SSH_RUNNER` (`auto`, `resident`, `per-exec`), for the
    /// builders that were given none; `Auto` when it is unset. An unknown value is ignored
    /// with a warning.
    pub(crate) fn from_env() -> Runner {
        match std::env::var("SWIFTIDE_SSH_RUNNER") {
            Ok(value) => match value.trim() {
                "" | "auto" => Runner::Auto,
                "resident" => Runner::Resident,
                "per-exec" | "perexec" => Runner::PerExec,
                other => {
                    tracing::warn!(
                        value = other,
                        "SWIFTIDE_SSH_RUNNER: unknown value, using auto"
                    );
                    Runner::Auto
                }
            },
            Err(_) => Runner::Auto,
        }
    }
}

/// A native runner program to install on hosts (see
/// [`SshExecutorBuilder::runner_helper`](crate::SshExecutorBuilder::runner_helper)): its
/// bytes and their SHA-256, which is checked on the host before every start.
pub(crate) struct RunnerHelper {
    pub(crate) binary: bytes::Bytes,
    /// Lowercase hex.
    pub(crate) sha256: String,
}

impl RunnerHelper {
    pub(crate) fn new(binary: bytes::Bytes) -> Self {
        use sha2::Digest;
        let sha256 = data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(&binary));
        RunnerHelper { binary, sha256 }
    }
}

impl std::fmt::Debug for RunnerHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerHelper")
            .field("bytes", &self.binary.len())
            .field("sha256", &self.sha256)
            .finish()
    }
}
