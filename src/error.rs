//! The crate's one error type.

use std::{path::PathBuf, sync::Arc, time::Duration};

/// The phase of a connection in which something went wrong.
///
/// Carried by [`Error::Ssh`] and [`Error::Timeout`] so that a message says *where* a failure
/// happened, not only what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Opening the TCP connection.
    Connect,
    /// Version exchange, key exchange and host-key verification.
    Handshake,
    /// User authentication.
    Auth,
    /// Waiting for a free channel slot in the pool.
    PoolWait,
    /// Opening a session channel.
    ChannelOpen,
    /// Sending the exec request and waiting for the server's answer.
    Exec,
    /// Running the command (output, exit status).
    Command,
    /// Killing a remote process group.
    Kill,
    /// An SFTP operation.
    Sftp,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Handshake => "handshake",
            Phase::Auth => "authentication",
            Phase::PoolWait => "pool wait",
            Phase::ChannelOpen => "channel open",
            Phase::Exec => "exec request",
            Phase::Command => "command",
            Phase::Kill => "kill",
            Phase::Sftp => "sftp",
        })
    }
}

/// The tool a [`Become`](crate::Become) escalates with. (It lives beside [`Error`], which
/// names it in [`Error::BecomeFailed`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BecomeMethod {
    /// `sudo`.
    Sudo,
    /// `doas` (OpenBSD's, or opendoas on Linux).
    Doas,
    /// `su`.
    Su,
}

impl BecomeMethod {
    /// The tool's name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BecomeMethod::Sudo => "sudo",
            BecomeMethod::Doas => "doas",
            BecomeMethod::Su => "su",
        }
    }
}

impl std::fmt::Display for BecomeMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BecomeMethod {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "sudo" => Ok(BecomeMethod::Sudo),
            "doas" => Ok(BecomeMethod::Doas),
            "su" => Ok(BecomeMethod::Su),
            other => Err(Error::Config {
                reason: format!("unknown become method {other:?} (sudo, doas or su)"),
            }),
        }
    }
}

/// Why an escalation failed ([`Error::BecomeFailed`]). In every case the command did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BecomeFailure {
    /// The tool rejected the password (sudo: "Sorry, try again"; su and doas:
    /// "Authentication failure"). It is sent once: a second prompt is not answered.
    IncorrectPassword,
    /// The tool wants a password and none was configured (or the provider gave none), or
    /// an empty one was refused (sudo: "a password is required"; doas: "Authentication
    /// required", also when one was configured, since doas reads passwords only from a
    /// terminal).
    PasswordRequired,
    /// The account may not escalate to the target, or may not run `/bin/sh` as it ("is not
    /// in the sudoers file", "is not allowed to execute", "Operation not permitted").
    NotAllowed,
    /// The tool wants a terminal (sudo's `Defaults requiretty`: "you must have a tty"). The
    /// executor's commands have none; allow the account `Defaults:<user> !requiretty`.
    TerminalRequired,
    /// The target account does not exist.
    UnknownUser,
    /// The tool is not installed on the host (or not on the login's `PATH`).
    NotInstalled,
    /// The escalation did not hand over within [`Become::timeout`](crate::Become::timeout)
    /// (a prompt nobody answers, a PAM module that waits).
    Timeout,
    /// Anything else; the tool's own words are in the error's `message`.
    Other,
}

impl BecomeFailure {
    /// The reason's word in fleet records (`become_failure`): `incorrect_password`,
    /// `password_required`, `not_allowed`, `terminal_required`, `unknown_user`,
    /// `not_installed`, `timeout`, `other`. Part of the record schema.
    pub fn word(self) -> &'static str {
        match self {
            BecomeFailure::IncorrectPassword => "incorrect_password",
            BecomeFailure::PasswordRequired => "password_required",
            BecomeFailure::NotAllowed => "not_allowed",
            BecomeFailure::TerminalRequired => "terminal_required",
            BecomeFailure::UnknownUser => "unknown_user",
            BecomeFailure::NotInstalled => "not_installed",
            BecomeFailure::Timeout => "timeout",
            BecomeFailure::Other => "other",
        }
    }

    /// The reason a [`word`](Self::word) names (an unknown word reads as `Other`).
    pub fn from_word(word: &str) -> Self {
        [
            BecomeFailure::IncorrectPassword,
            BecomeFailure::PasswordRequired,
            BecomeFailure::NotAllowed,
            BecomeFailure::TerminalRequired,
            BecomeFailure::UnknownUser,
            BecomeFailure::NotInstalled,
            BecomeFailure::Timeout,
        ]
        .into_iter()
        .find(|reason| reason.word() == word)
        .unwrap_or(BecomeFailure::Other)
    }
}

impl std::fmt::Display for BecomeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BecomeFailure::IncorrectPassword => "incorrect password",
            BecomeFailure::PasswordRequired => "a password is required",
            BecomeFailure::NotAllowed => "not allowed",
            BecomeFailure::TerminalRequired => "a terminal is required",
            BecomeFailure::UnknownUser => "unknown target user",
            BecomeFailure::NotInstalled => "not installed",
            BecomeFailure::Timeout => "timed out",
            BecomeFailure::Other => "failed",
        })
    }
}

/// Which kind of account an [`Error::UnknownAccount`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccountKind {
    /// A user (a file's owner).
    User,
    /// A group.
    Group,
}

impl std::fmt::Display for AccountKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AccountKind::User => "user",
            AccountKind::Group => "group",
        })
    }
}

/// Everything that can go wrong in this crate.
///
/// Command failures are *not* errors: a nonzero exit, a death by signal or a timeout are
/// reported in [`Execution::status`](crate::Execution::status). These variants are about the
/// executor, the transport and the caller's input. Messages never contain passwords, key
/// material or file contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder was given settings that cannot work together.
    #[error("invalid configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },

    /// A duration setting is longer than the longest one accepted (2³¹ − 1 seconds, about
    /// 68 years: OpenSSH's limit for time values), which timers could not hold. Values read
    /// from an ssh_config file are refused when the file is loaded, as [`Error::SshConfig`]
    /// naming the line.
    #[error("{setting} of {value:?} is longer than the longest accepted, {max:?}")]
    DurationTooLong {
        /// The builder setting, e.g. `connect_timeout`.
        setting: &'static str,
        /// The value given.
        value: Duration,
        /// The longest value accepted.
        max: Duration,
    },

    /// A command, path or environment setting cannot be passed to the remote host.
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong with it.
        reason: String,
    },

    /// The TCP connection could not be established.
    #[error("could not connect to {host}:{port}")]
    Connect {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },

    /// A phase did not finish within its deadline.
    #[error("{phase} with {host}:{port} timed out after {after:?}")]
    Timeout {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// Which phase timed out.
        phase: Phase,
        /// The deadline that expired.
        after: Duration,
    },

    /// The server presented a host key that no known_hosts file lists for this host.
    #[error(
        "host key {fingerprint} of {host}:{port} is not in known_hosts ({files}); \
         add it (e.g. with ssh-keyscan) or choose an accept-new policy"
    )]
    UnknownHostKey {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// SHA256 fingerprint of the presented key.
        fingerprint: String,
        /// The files that were consulted, comma separated.
        files: String,
    },

    /// The server presented a host key that differs from the one on record.
    #[error(
        "HOST KEY MISMATCH for {host}:{port}: presented {fingerprint}, but {file}:{line} \
         records another key (possible man-in-the-middle attack); nothing was sent"
    )]
    HostKeyMismatch {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// SHA256 fingerprint of the presented key.
        fingerprint: String,
        /// The known_hosts file holding the conflicting entry.
        file: String,
        /// 1-based line number of that entry.
        line: usize,
    },

    /// The server presented a key that a known_hosts file marks `@revoked`.
    #[error("host key {fingerprint} of {host}:{port} is revoked ({file}:{line})")]
    HostKeyRevoked {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// SHA256 fingerprint of the presented key.
        fingerprint: String,
        /// The known_hosts file holding the `@revoked` line.
        file: String,
        /// 1-based line number of that line.
        line: usize,
    },

    /// A known_hosts file has a `@revoked` line for this host (or one whose host field
    /// cannot be read either) whose key cannot be read. It may revoke the presented key, so
    /// the host is refused rather than the revocation ignored; fix or remove the line.
    #[error(
        "{file}:{line} is a @revoked line for {host}:{port} whose key cannot be read; \
         refusing host key {fingerprint} rather than ignoring the revocation"
    )]
    UnreadableRevocation {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// SHA256 fingerprint of the presented key.
        fingerprint: String,
        /// The known_hosts file holding the `@revoked` line.
        file: String,
        /// 1-based line number of that line.
        line: usize,
    },

    /// A known_hosts file exists but cannot be read; the connection fails closed.
    #[error("cannot read known_hosts file {}", path.display())]
    KnownHosts {
        /// The file.
        path: PathBuf,
        /// The read error.
        #[source]
        source: std::io::Error,
    },

    /// A private key file could not be loaded.
    #[error("cannot load private key {}: {reason}", path.display())]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// Why (never includes the passphrase).
        reason: String,
    },

    /// The ssh-agent could not be used.
    #[error("ssh-agent: {reason}")]
    Agent {
        /// Why.
        reason: String,
    },

    /// The server refused every configured authentication method.
    #[error(
        "authentication of {user}@{host}:{port} refused; tried: {tried}; \
         server accepts: {remaining}"
    )]
    AuthRejected {
        /// Login user.
        user: String,
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// The methods tried, in order (e.g. `publickey (/home/me/.ssh/id_ed25519)`).
        tried: String,
        /// The methods the server said may continue.
        remaining: String,
    },

    /// An SSH protocol or transport failure.
    #[error("ssh {phase} with {host}:{port} failed")]
    Ssh {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// Which phase failed.
        phase: Phase,
        /// The russh error.
        #[source]
        source: russh::Error,
    },

    /// The server refused to open a session channel, even after retries.
    ///
    /// OpenSSH refuses channels beyond `MaxSessions` (10 by default) per connection.
    #[error("{host}:{port} refused to open a channel after {attempts} attempts")]
    ChannelRefused {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// How many opens were tried.
        attempts: u32,
    },

    /// The server refused the exec request (a forced-command or SFTP-only account, say).
    #[error("{host}:{port} refused to execute the command")]
    ExecRefused {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },

    /// The connection broke while a command was running.
    ///
    /// There is no way to tell how far the command got: it **may have run**, partly or
    /// completely. It is never re-sent.
    #[error(
        "connection to {host}:{port} was lost while the command was running; \
         the command may have run"
    )]
    ConnectionLost {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },

    /// The host's resident runner (see [`Runner`](crate::Runner)) ended while the command
    /// ran: killed (`kill -9`, the OOM killer) or its channel closed. As with a lost
    /// connection the command **may have run**, partly or completely, and it is never re-sent;
    /// its process group, if it had started, was sent SIGKILL from a new channel. The next
    /// command starts a new runner.
    #[error(
        "the resident runner on {host}:{port} ended while the command was running; \
         the command may have run"
    )]
    RunnerLost {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },

    /// The host's resident runner refused a request it could not read (a runner of another
    /// version, a corrupted channel; see the `swiftide-ssh-runner` crate's protocol,
    /// "Faults"); nothing of the command ran.
    #[error("the resident runner on {host}:{port} refused the request: {reason}")]
    RunnerFault {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// The runner's words.
        reason: String,
    },

    /// [`Runner::Resident`](crate::Runner::Resident) was asked for and no resident runner
    /// could start on the host (neither `python3` nor `perl` on the account's `PATH`, a login
    /// shell that exits
    /// at once); nothing ran.
    #[error("no resident runner could start on {host}:{port}: {reason}")]
    RunnerUnavailable {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// What the start attempt saw (the login shell's words, its exit status).
        reason: String,
    },

    /// A command's [limits](crate::Limits) or [confinement](crate::Confinement) cannot be
    /// enforced for it on this host (no runner, or one that cannot apply them, no Landlock
    /// or too old a kernel, a terminal or the caller's stdin, which take no runner); nothing
    /// ran. See the guide's [Guarded commands](crate::guide::guards).
    #[error(
        "the command's limits or confinement cannot be enforced on {host}:{port}, so it did not run: {reason}"
    )]
    GuardUnavailable {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// Why (the runner's words, or the route the command needed).
        reason: String,
    },

    /// No channel slot became free within the pool's wait timeout.
    #[error("no connection to {host}:{port} became available within {waited:?}{}",
        last_error.as_ref().map(|e| format!("; last connection attempt: {e}")).unwrap_or_default())]
    PoolTimeout {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// The wait timeout.
        waited: Duration,
        /// The most recent dial error, if the pool failed to grow.
        last_error: Option<Arc<Error>>,
    },

    /// A file operation on a remote path failed: an SFTP request, or the exec fallback used
    /// for paths that are not valid UTF-8. `reason` uses LocalExecutor's wording where the
    /// cause is known (`No such file or directory (os error 2)`, `Is a directory (os error
    /// 21)`, ...); `status` is `None` when the transport, not the file, failed.
    #[error("sftp {operation} `{path}` on {host}: {reason}")]
    Sftp {
        /// Destination host.
        host: String,
        /// The operation (`open`, `read`, `write`, `rename`, ...).
        operation: &'static str,
        /// The remote path, lossily decoded.
        path: String,
        /// The server's or the transport's reason.
        reason: String,
        /// The SFTP status when the server sent one.
        status: Option<SftpStatus>,
    },

    /// An OpenSSH client configuration file could not be read, or holds a value this crate
    /// cannot use (see [`SshConfig`](crate::SshConfig)).
    #[error("ssh config {}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    SshConfig {
        /// The file.
        path: PathBuf,
        /// 1-based line number, when one line is at fault.
        line: Option<usize>,
        /// What is wrong.
        reason: String,
    },

    /// A jump host could not open the forwarded (`direct-tcpip`) connection to the next host
    /// of the chain. `AdministrativelyProhibited` usually means the jump host's sshd has
    /// `AllowTcpForwarding no` or a `PermitOpen` list without that destination.
    #[error(
        "jump host {jump_host}:{jump_port} could not open a connection to {host}:{port}: {reason}"
    )]
    JumpForward {
        /// The jump host that was asked to forward.
        jump_host: String,
        /// Its port.
        jump_port: u16,
        /// The destination it was asked to reach.
        host: String,
        /// The destination port.
        port: u16,
        /// The reason the jump host gave.
        reason: String,
    },

    /// The server has no usable SFTP subsystem (refused, or no `sftp-server` behind it, as
    /// on a Dropbear host without one). Whole-file reads and writes (`ReadFile`, `WriteFile`,
    /// [`read_file_bytes`](crate::SshExecutor::read_file_bytes),
    /// [`write_file_bytes`](crate::SshExecutor::write_file_bytes)) and `stream_files` then
    /// go through shell scripts over exec; the other file methods fail with this error.
    #[error("{host}:{port} has no SFTP subsystem")]
    SftpUnavailable {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },

    /// A job id that cannot be used (see [`JobOptions::id`](crate::JobOptions::id)).
    #[error("invalid job id {id:?}: it {reason}")]
    InvalidJobId {
        /// The id as given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// No job with this id exists on the host (never started, or removed).
    #[error("no job {id} on {host}")]
    JobNotFound {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
    },

    /// A job with this id exists on the host, started with another command or other options.
    /// (Starting the same id with the same command and options returns the existing job.)
    #[error("job {id} on {host} exists with another command or options")]
    JobExists {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
    },

    /// The host could not start the job: no `setsid`, no writable state
    /// directory, a full disk (`reason` then names it), or the runner did not start.
    #[error("job {id} on {host} could not be started: {reason}")]
    JobStart {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
        /// What the host said.
        reason: String,
    },

    /// A job operation's script failed on the host (`operation`: `kill`, `remove`, `prune`,
    /// `find`).
    #[error("job {operation} on {host} failed: {reason}")]
    JobFailed {
        /// Destination host.
        host: String,
        /// The operation.
        operation: &'static str,
        /// The job id (empty for operations on all jobs).
        id: String,
        /// What the host said.
        reason: String,
    },

    /// The job is still running (from [`Job::remove`](crate::Job::remove)).
    #[error("job {id} on {host} is still running")]
    JobRunning {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
    },

    /// The job's recorded process id now belongs to another process (its start time no longer
    /// matches): nothing was signalled.
    #[error("job {id} on {host}: pid {pid} is no longer the job's (reused); nothing was signalled")]
    JobPidReused {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
        /// The recorded pid.
        pid: u32,
    },

    /// Output of a job was dropped on the host: the stream reached its spool cap, or writing
    /// the spool file failed (a full disk). Reported once the stream has ended.
    #[error("job {id} on {host} dropped {bytes} bytes of {stream}: {reason}")]
    JobOutputDropped {
        /// Destination host.
        host: String,
        /// The job id.
        id: String,
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// How many bytes were dropped (at least; see [`JobDrop`](crate::JobDrop)).
        bytes: u64,
        /// Why, in words (`spool cap of 1048576 bytes reached`, `No space left on device`).
        reason: String,
    },

    /// Escalating to another account ([`Become`](crate::Become)) failed before the command,
    /// file operation or job started: **nothing ran**. Never retried; the password, if one
    /// was sent, is in neither field.
    #[error("{method} to {user} on {host}:{port}: {reason}{}",
        if message.is_empty() { String::new() } else { format!(" ({message})") })]
    BecomeFailed {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
        /// The escalation tool.
        method: BecomeMethod,
        /// The target account.
        user: String,
        /// Why, as far as the tool's words tell.
        reason: BecomeFailure,
        /// What the tool said, its prompts left out (at most a few lines).
        message: String,
    },

    /// The server refused a pseudo-terminal for the command (`PermitTTY no`, a forced
    /// command, `no-pty` in `authorized_keys`); the command was killed if it had started.
    #[error("{host}:{port} refused a terminal for the command")]
    TerminalRefused {
        /// Destination host.
        host: String,
        /// Destination port.
        port: u16,
    },

    /// The server refused a port forward: a local or dynamic forward's channel to `target`
    /// (the target refused the connection, `AllowTcpForwarding no`, `PermitOpen`), or a
    /// remote forward's listener (`PermitListen`, a port in use, `AllowTcpForwarding
    /// local`). Typed and at once: nothing waits for a timeout.
    #[error("{host}:{port} refused to forward {target}: {reason}")]
    ForwardRefused {
        /// Destination host (the SSH server).
        host: String,
        /// Destination port.
        port: u16,
        /// What was to be forwarded: `host:port` or a socket path on the host for a local
        /// forward, the listen address for a remote one.
        target: String,
        /// Why, by kind.
        refusal: ForwardRefusal,
        /// Why, in the server's words where it gave any.
        reason: String,
    },

    /// A forward's local listener could not be bound, or a remote forward's local target
    /// could not be reached.
    #[error("local {operation} {address}")]
    ForwardLocal {
        /// `bind` or `connect`.
        operation: &'static str,
        /// The local address.
        address: String,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// The executor was closed with [`SshExecutor::close`](crate::SshExecutor::close).
    #[error("the executor is closed")]
    Closed,

    /// A file copied to or from a host ([`Fleet::push`](crate::Fleet::push),
    /// [`Fleet::pull`](crate::Fleet::pull)) does not have the content that was sent: its
    /// SHA-256 after the copy differs from the source's.
    #[error("{path} on {host}: sha256 {actual} after the copy, expected {expected}")]
    ChecksumMismatch {
        /// The host.
        host: String,
        /// The remote path, lossily decoded.
        path: String,
        /// The source's digest (hex).
        expected: String,
        /// The copy's digest (hex).
        actual: String,
    },

    /// A push's owner or group ([`PushOptions::owner`](crate::PushOptions::owner),
    /// [`PushOptions::group`](crate::PushOptions::group)) names an account the host does
    /// not have. Nothing was written on that host.
    #[error("no {kind} named {name:?} on {host}")]
    UnknownAccount {
        /// The host.
        host: String,
        /// A user or a group.
        kind: AccountKind,
        /// The name as given.
        name: String,
    },

    /// A local file of a copy could not be read or written.
    #[error("local {operation} {}", path.display())]
    LocalFile {
        /// What was done (`read`, `write`, `create directory`, ...).
        operation: &'static str,
        /// The local path.
        path: std::path::PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// A [checkpoint](crate::Checkpoint) could not be taken, compared or rolled back: no
    /// `git` on the host, a tree that is not a directory or holds the checkpoint store, an
    /// unknown checkpoint, or git's own failure.
    #[error("checkpoint of {} on {host}: {reason}", dir.display())]
    Checkpoint {
        /// The host.
        host: String,
        /// The tree.
        dir: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The executor's [audit trail](crate::audit::AuditTrail) cannot be opened or written
    /// (or an existing trail's chain is broken): the operation did not run, and none will
    /// on that trail.
    #[error("audit trail: {reason}")]
    Audit {
        /// What failed.
        reason: String,
    },

    /// A fleet run needs more open files than the process may have: its soft limit
    /// (`RLIMIT_NOFILE`) could not be raised to `needed`. Nothing was started.
    #[error(
        "a fleet run needs {needed} open files; the open-file limit is {soft} (hard {hard}): {reason}"
    )]
    DescriptorLimit {
        /// Descriptors the run needs: those open, one socket per connection, and headroom.
        needed: u64,
        /// The soft limit in force.
        soft: u64,
        /// The hard limit.
        hard: u64,
        /// Why it could not be raised, and what to do.
        reason: String,
    },
}

impl Error {
    /// The message with its causes, `outer: inner: innermost` (for records and tool text,
    /// where the chain would otherwise be lost).
    pub(crate) fn with_causes(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Why the server refused a port forward ([`Error::ForwardRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardRefusal {
    /// The host could not connect to the target (refused, unreachable, no such name).
    ConnectFailed,
    /// Not allowed: `AllowTcpForwarding`, `PermitOpen`, `PermitListen`,
    /// `AllowStreamLocalForwarding`, `DisableForwarding`, or a `restrict` key.
    Prohibited,
    /// The server does not know this kind of forward.
    Unsupported,
    /// The server is short of resources (too many channels or listeners).
    ResourceShortage,
    /// A remote forward's listener was refused without a reason (OpenSSH does not say
    /// whether the port is taken or not permitted).
    ListenRefused,
    /// Another reason; the error's `reason` has the server's words.
    Other,
}

/// The SFTP status codes a failed file operation can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SftpStatus {
    /// `SSH_FX_NO_SUCH_FILE`.
    NoSuchFile,
    /// `SSH_FX_PERMISSION_DENIED`.
    PermissionDenied,
    /// `SSH_FX_FAILURE`: the server gives no detail (a directory read as a file, say).
    Failure,
    /// Any other status.
    Other,
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn display_names_place_and_reason_and_keeps_cause_in_source() {
        let e = Error::Connect {
            host: "h".into(),
            port: 22,
            source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"),
        };
        assert_eq!(e.to_string(), "could not connect to h:22");
        assert!(e.source().is_some_and(|s| s.to_string() == "refused"));

        let e = Error::Timeout {
            host: "h".into(),
            port: 2,
            phase: Phase::Auth,
            after: Duration::from_secs(1),
        };
        assert_eq!(e.to_string(), "authentication with h:2 timed out after 1s");

        let e = Error::ConnectionLost {
            host: "h".into(),
            port: 22,
        };
        assert!(e.to_string().contains("may have run"));

        let inner = Arc::new(Error::Closed);
        let e = Error::PoolTimeout {
            host: "h".into(),
            port: 22,
            waited: Duration::from_secs(3),
            last_error: Some(inner),
        };
        assert_eq!(
            e.to_string(),
            "no connection to h:22 became available within 3s; last connection attempt: the executor is closed"
        );
        let e = Error::AuthRejected {
            user: "u".into(),
            host: "h".into(),
            port: 22,
            tried: "password".into(),
            remaining: "publickey".into(),
        };
        assert_eq!(
            e.to_string(),
            "authentication of u@h:22 refused; tried: password; server accepts: publickey"
        );
        assert!(e.source().is_none());

        let e = Error::SftpUnavailable {
            host: "h".into(),
            port: 22,
        };
        assert_eq!(e.to_string(), "h:22 has no SFTP subsystem");
        assert!(e.source().is_none());

        let e = Error::DurationTooLong {
            setting: "connect_timeout",
            value: Duration::MAX,
            max: Duration::from_secs(2_147_483_647),
        };
        assert_eq!(
            e.to_string(),
            "connect_timeout of 18446744073709551615.999999999s is longer than the longest \
             accepted, 2147483647s"
        );
        let e = Error::UnreadableRevocation {
            host: "h".into(),
            port: 22,
            fingerprint: "SHA256:x".into(),
            file: "/k".into(),
            line: 3,
        };
        assert_eq!(
            e.to_string(),
            "/k:3 is a @revoked line for h:22 whose key cannot be read; refusing host key \
             SHA256:x rather than ignoring the revocation"
        );
    }
}
