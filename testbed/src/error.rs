//! The error type of the testbed.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why a testbed could not be set up, started or controlled.
///
/// Every message says what went wrong and, where possible, what to do about it.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestbedError {
    /// The OpenSSH server binary does not exist.
    SshdNotFound {
        /// Where it was looked for (`/usr/sbin/sshd`, or the value of
        /// `SWIFTIDE_SSH_TESTBED_SSHD`).
        path: PathBuf,
    },
    /// The requested setup needs root privileges, and the process does not have them.
    NotRoot {
        /// What needed root.
        what: String,
    },
    /// sshd (running as root) needs its privilege separation directory, which is missing
    /// and could not be created.
    MissingPrivsepDir {
        /// The directory (`/run/sshd`).
        path: PathBuf,
    },
    /// An I/O operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A helper command (`ssh-keygen`, `useradd`, `chpasswd`, `chown`, `kill`, ...) failed.
    Command {
        /// The command and what it was for.
        what: String,
        /// How it exited.
        status: ExitStatus,
        /// What it wrote to standard error.
        stderr: String,
    },
    /// sshd exited during start-up or did not accept connections in time.
    StartFailed {
        /// What happened (exit status, timeout, ...).
        reason: String,
        /// The contents of sshd's log (and of anything it wrote to standard error).
        log: String,
    },
    /// The operation needs a running sshd, but the testbed was stopped.
    NotRunning,
    /// A program the requested setup needs (Dropbear, `dropbearkey`, a login shell,
    /// BusyBox, the SFTP server) is not installed.
    ProgramNotFound {
        /// Where it was looked for.
        path: PathBuf,
        /// How to install it.
        hint: String,
    },
    /// The combination of settings is not supported (for example
    /// [`sshd_config_line`](crate::TestbedBuilder::sshd_config_line) with Dropbear).
    Unsupported {
        /// What is not supported, and why.
        what: String,
    },
    /// The operation ([`Testbed::cut_network`](crate::Testbed::cut_network), ...) needs a
    /// testbed started with
    /// [`network_namespace(true)`](crate::TestbedBuilder::network_namespace).
    NoNetworkNamespace,
    /// The Docker testbed cannot be used here: no `docker` CLI, or its daemon is not
    /// reachable (see [`DockerTestbed::available`](crate::DockerTestbed::available)).
    DockerUnavailable {
        /// Why.
        reason: String,
    },
    /// `testcontainers` could not tell something about a running container (its mapped
    /// port, its host).
    #[cfg(feature = "testcontainers")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testcontainers")))]
    Container {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: testcontainers::TestcontainersError,
    },
}

impl TestbedError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for TestbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SshdNotFound { path } => write!(
                f,
                "OpenSSH server not found at {}; install it with \
                 `apt-get install -y openssh-server`, or set {} to the absolute path of an \
                 sshd binary",
                path.display(),
                crate::SSHD_PATH_ENV_VAR
            ),
            Self::NotRoot { what } => write!(
                f,
                "{what} requires root privileges; run the tests as root (for example in a \
                 container)"
            ),
            Self::MissingPrivsepDir { path } => write!(
                f,
                "sshd's privilege separation directory {} is missing and could not be \
                 created; create it with `mkdir -p -m 0755 {}`",
                path.display(),
                path.display()
            ),
            Self::Io { what, source } => write!(f, "{what}: {source}"),
            Self::Command {
                what,
                status,
                stderr,
            } => {
                write!(f, "{what} failed ({status})")?;
                let stderr = stderr.trim();
                if !stderr.is_empty() {
                    write!(f, ": {stderr}")?;
                }
                Ok(())
            }
            Self::StartFailed { reason, log } => {
                write!(f, "sshd failed to start: {reason}")?;
                if log.trim().is_empty() {
                    write!(f, " (its log is empty)")
                } else {
                    write!(f, "; sshd log:\n{}", log.trim_end())
                }
            }
            Self::ProgramNotFound { path, hint } => {
                write!(f, "{} not found; {hint}", path.display())
            }
            Self::Unsupported { what } => write!(f, "not supported: {what}"),
            Self::NotRunning => write!(
                f,
                "the testbed's sshd is not running (it was stopped); call restart() first"
            ),
            Self::NoNetworkNamespace => write!(
                f,
                "the testbed has no network namespace; start it with \
                 Testbed::builder().network_namespace(true)"
            ),
            Self::DockerUnavailable { reason } => write!(
                f,
                "Docker is not available: {reason}; run `bash testbed/docker/prepare.sh` \
                 (installs docker.io, starts dockerd and builds the testbed images)"
            ),
            #[cfg(feature = "testcontainers")]
            Self::Container { what, .. } => write!(f, "{what} failed (testcontainers)"),
        }
    }
}

impl std::error::Error for TestbedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            #[cfg(feature = "testcontainers")]
            Self::Container { source, .. } => Some(source),
            _ => None,
        }
    }
}
