//! The builder: every setting, its default, and validation into a frozen [`Config`].

#[cfg(feature = "flags")]
pub mod flags;
mod from_ssh_config;

use std::{collections::HashMap, fmt, path::PathBuf, sync::Arc, time::Duration};

use russh::keys::PrivateKey;

use crate::{
    command::Supervision,
    config::{
        self, AuthMethod, Become, Config, EnvPlan, HostKeyPolicy, JumpHost, JumpTarget, Runner,
        RunnerHelper, Secret, limit,
    },
    error::{Error, Result},
    executor::SshExecutor,
};

/// Builds an [`SshExecutor`]. Start with [`SshExecutor::builder`].
///
/// Only [`host`](Self::host) is required. Setters take and return the builder by value.
#[derive(Clone)]
#[must_use]
pub struct SshExecutorBuilder {
    host: Option<String>,
    port: u16,
    user: Option<String>,
    auth: Vec<AuthMethod>,
    host_key_policy: HostKeyPolicy,
    workdir: Option<PathBuf>,
    default_timeout: Option<Duration>,
    env_clear: bool,
    env_remove: Vec<String>,
    envs: HashMap<String, String>,
    max_connections: u32,
    channels_per_connection: u32,
    spare_channels: u32,
    connect_timeout: Duration,
    pool_wait_timeout: Duration,
    idle_timeout: Option<Duration>,
    max_connection_lifetime: Option<Duration>,
    keepalive_interval: Option<Duration>,
    keepalive_max: usize,
    kill_grace: Duration,
    kill_on_disconnect: bool,
    max_output_bytes: Option<usize>,
    job_retention: Option<Duration>,
    escalation: Option<Become>,
    /// `None`: [`Runner::from_env`] at build time.
    runner: Option<Runner>,
    guard: crate::config::Guard,
    unguarded_where_unenforceable: bool,
    audit: Option<crate::audit::AuditTrail>,
    runner_helper: Option<Arc<RunnerHelper>>,
    /// Jump hosts in order, client side first (`ssh/jump.rs`).
    pub(crate) jump_hosts: Vec<JumpHost>,
    /// The jump hosts came from an ssh_config `ProxyJump`: an explicit `jump_host`
    /// replaces them rather than extending the chain.
    pub(crate) jump_hosts_from_file: bool,
    /// Authentication methods derived from an ssh_config (`from_ssh_config.rs`); used only when
    /// no method is added explicitly, so explicit settings win over the file.
    pub(crate) file_auth: Vec<AuthMethod>,
}

impl fmt::Debug for SshExecutorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Env values may hold tokens: show names only. Auth methods redact themselves.
        let mut names: Vec<&String> = self.envs.keys().collect();
        names.sort();
        f.debug_struct("SshExecutorBuilder")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("auth", &self.auth)
            .field("host_key_policy", &self.host_key_policy)
            .field("workdir", &self.workdir)
            .field("env_clear", &self.env_clear)
            .field("env_remove", &self.env_remove)
            .field("envs", &names)
            .field("jump_hosts", &self.jump_hosts)
            .field("file_auth", &self.file_auth)
            .field("escalation", &self.escalation)
            .field("runner", &self.runner)
            .field("runner_helper", &self.runner_helper)
            .finish_non_exhaustive()
    }
}

impl Default for SshExecutorBuilder {
    fn default() -> Self {
        Self {
            host: None,
            port: 22,
            user: None,
            auth: Vec::new(),
            host_key_policy: HostKeyPolicy::default(),
            workdir: None,
            default_timeout: None,
            env_clear: false,
            env_remove: Vec::new(),
            envs: HashMap::new(),
            max_connections: 4,
            channels_per_connection: 8,
            spare_channels: 1,
            connect_timeout: Duration::from_secs(10),
            pool_wait_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(600)),
            max_connection_lifetime: Some(Duration::from_secs(3600)),
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 3,
            kill_grace: Duration::from_secs(1),
            kill_on_disconnect: true,
            max_output_bytes: None,
            job_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            escalation: None,
            runner: None,
            guard: crate::config::Guard::default(),
            unguarded_where_unenforceable: false,
            audit: None,
            runner_helper: None,
            jump_hosts: Vec::new(),
            jump_hosts_from_file: false,
            file_auth: Vec::new(),
        }
    }
}

impl SshExecutor {
    /// Starts a builder.
    pub fn builder() -> SshExecutorBuilder {
        SshExecutorBuilder::default()
    }
}

impl SshExecutorBuilder {
    /// The remote host name or IP address. Required.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// The SSH port. Defaults to 22.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The login user. Defaults to the login name of the running uid (its passwd entry, as
    /// OpenSSH takes it; `$USER` is not read).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Adds an unencrypted OpenSSH private key file (a leading `~/` is expanded). Methods are
    /// tried in the order they were added. Defaults to no methods: with none configured, the
    /// ssh-agent at `$SSH_AUTH_SOCK` is used.
    pub fn private_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.auth.push(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: None,
        });
        self
    }

    /// Adds a private key file encrypted with `passphrase`. The passphrase never appears in
    /// `Debug` output or logs.
    pub fn private_key_file_with_passphrase(
        mut self,
        path: impl Into<PathBuf>,
        passphrase: impl Into<Secret>,
    ) -> Self {
        self.auth.push(AuthMethod::KeyFile {
            path: path.into(),
            passphrase: Some(passphrase.into()),
        });
        self
    }

    /// Adds an OpenSSH user certificate and its private key, for servers that trust a user
    /// CA (`TrustedUserCAKeys`) rather than listing keys in `authorized_keys`. The
    /// certificate must certify that key (checked before it is offered to the server).
    pub fn certificate_file(
        mut self,
        key: impl Into<PathBuf>,
        certificate: impl Into<PathBuf>,
    ) -> Self {
        self.auth.push(AuthMethod::CertificateFile {
            key: key.into(),
            passphrase: None,
            certificate: certificate.into(),
        });
        self
    }

    /// Like [`certificate_file`](Self::certificate_file), for a key encrypted with
    /// `passphrase` (never shown in `Debug` output or logs).
    pub fn certificate_file_with_passphrase(
        mut self,
        key: impl Into<PathBuf>,
        passphrase: impl Into<Secret>,
        certificate: impl Into<PathBuf>,
    ) -> Self {
        self.auth.push(AuthMethod::CertificateFile {
            key: key.into(),
            passphrase: Some(passphrase.into()),
            certificate: certificate.into(),
        });
        self
    }

    /// Adds a private key held in memory.
    pub fn private_key(mut self, key: PrivateKey) -> Self {
        self.auth.push(AuthMethod::Key(Arc::new(key)));
        self
    }

    /// Adds the identities of the ssh-agent at `$SSH_AUTH_SOCK`.
    pub fn agent(mut self) -> Self {
        self.auth.push(AuthMethod::Agent { socket: None });
        self
    }

    /// Adds the identities of the ssh-agent listening on `socket`.
    pub fn agent_socket(mut self, socket: impl Into<PathBuf>) -> Self {
        self.auth.push(AuthMethod::Agent {
            socket: Some(socket.into()),
        });
        self
    }

    /// Adds password authentication. The password never appears in `Debug` output or logs.
    pub fn password(mut self, password: impl Into<Secret>) -> Self {
        self.auth.push(AuthMethod::Password(password.into()));
        self
    }

    /// Adds any [`AuthMethod`].
    pub fn auth_method(mut self, method: AuthMethod) -> Self {
        self.auth.push(method);
        self
    }

    /// Verifies host keys strictly against this one known_hosts file. Defaults to
    /// `~/.ssh/known_hosts` plus `/etc/ssh/ssh_known_hosts`, strictly.
    pub fn known_hosts_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.host_key_policy = HostKeyPolicy::Strict {
            known_hosts: vec![path.into()],
        };
        self
    }

    /// Records the key of a host that `path` does not know yet, and refuses a changed key
    /// (OpenSSH's `StrictHostKeyChecking accept-new`). Defaults to strict checking.
    pub fn accept_new_host_keys(mut self, path: impl Into<PathBuf>) -> Self {
        self.host_key_policy = HostKeyPolicy::AcceptNew {
            known_hosts: vec![path.into()],
        };
        self
    }

    /// **Disables host-key verification.** Anyone able to intercept the connection can then
    /// impersonate the server. Use only for throwaway test hosts; each connection logs a
    /// warning. Defaults to strict checking.
    pub fn insecure_accept_any_host_key(mut self) -> Self {
        self.host_key_policy = HostKeyPolicy::InsecureAcceptAnyHostKey;
        self
    }

    /// Sets the host-key policy directly. Defaults to [`HostKeyPolicy::default`].
    pub fn host_key_policy(mut self, policy: HostKeyPolicy) -> Self {
        self.host_key_policy = policy;
        self
    }

    /// The remote working directory for commands and relative file paths; a relative value is
    /// relative to the login directory. Defaults to the login (home) directory.
    pub fn workdir(mut self, workdir: impl Into<PathBuf>) -> Self {
        self.workdir = Some(workdir.into());
        self
    }

    /// Timeout for commands that carry none. Defaults to `None` (no timeout), like
    /// LocalExecutor.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    /// A per-command timeout ([`ExecOptions::timeout`](crate::ExecOptions::timeout),
    /// swiftide's `Command` timeout) is not limited: one too long for the clock to hold
    /// means no timeout, since its deadline could never pass.
    pub fn default_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// Starts commands with an empty environment (`env -i`). Defaults to `false`: commands get
    /// the sshd login environment.
    pub fn env_clear(mut self, clear: bool) -> Self {
        self.env_clear = clear;
        self
    }

    /// Variables removed from the environment (after clearing, before setting). Defaults to
    /// none.
    pub fn env_remove(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.env_remove = names.into_iter().map(Into::into).collect();
        self
    }

    /// Variables set for every command (applied last, so they win over removal). Defaults to
    /// none. Values never appear in `Debug` output.
    pub fn envs(
        mut self,
        vars: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>,
    ) -> Self {
        self.envs = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// Maximum SSH connections to the host. Defaults to 4.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Maximum concurrent commands per connection. OpenSSH refuses more than `MaxSessions`
    /// (default 10) channels per connection and frees a slot only some time after a channel
    /// closes; the executor also needs room for the SFTP channel and for a kill channel (used
    /// only for commands with very large script bodies). Defaults to 8.
    pub fn channels_per_connection(mut self, n: u32) -> Self {
        self.channels_per_connection = n;
        self
    }

    /// Session channels each connection keeps open ahead of demand, so that a command starts
    /// without the channel-open round trip. A command takes a spare when one is ready and a
    /// replacement is opened in the background.
    ///
    /// Once a connection knows that its login shell is POSIX (the direct exec form, see the
    /// guide's [Commands](crate::guide::commands#in-detail)), its spares are also
    /// **pre-started**: the login shell is already running and waits for the command on stdin,
    /// so a warm command costs one round trip and neither the channel open nor the login
    /// shell's start: a warm `true` 2.4 ms against raw russh's 2.45 ms on loopback, 1.1 round
    /// trips over a 20 ms link (3.1 without spares). The login shell's rc files therefore run
    /// before the command is known (and before sshd logs the session); if they print anything,
    /// that connection stops pre-starting.
    ///
    /// Spares count against the connection's channel limit (`channels_per_connection`, lowered
    /// to what the server allows when it refuses a channel): they are opened only while a
    /// running command could not need that room, so the server's `MaxSessions` is never
    /// exceeded because of them. An idle spare costs one of the server's session slots, and
    /// a pre-started one also a waiting login shell (no CPU); closing stdin ends it without
    /// running anything. Spares close with their connection (idle reaping, `close()`,
    /// maximum lifetime). `0` turns them off. Defaults to 1.
    pub fn spare_channels(mut self, n: u32) -> Self {
        self.spare_channels = n;
        self
    }

    /// Deadline for TCP connect, handshake and authentication together, and for each channel
    /// open. Defaults to 10 seconds.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a command waits for a free channel slot when all connections are busy.
    /// Defaults to 30 seconds.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn pool_wait_timeout(mut self, timeout: Duration) -> Self {
        self.pool_wait_timeout = timeout;
        self
    }

    /// Idle channel slots are released after this long; a connection left with no slots is
    /// closed. Defaults to 10 minutes.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Connections older than this take no new commands and close once idle. Defaults to 1
    /// hour.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn max_connection_lifetime(mut self, lifetime: Option<Duration>) -> Self {
        self.max_connection_lifetime = lifetime;
        self
    }

    /// Sends an SSH keepalive after this much silence from the server; after
    /// [`keepalive_max`](Self::keepalive_max) unanswered ones the connection is dropped.
    /// Defaults to 15 seconds (a dead server is noticed within about a minute). `None`
    /// disables keepalives, and a frozen server can then hang a command with no timeout.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn keepalive_interval(mut self, interval: Option<Duration>) -> Self {
        self.keepalive_interval = interval;
        self
    }

    /// Unanswered keepalives before the connection is declared dead. Defaults to 3.
    pub fn keepalive_max(mut self, max: usize) -> Self {
        self.keepalive_max = max;
        self
    }

    /// On timeout or cancellation the remote process group gets SIGTERM, then, once the
    /// command's leader has exited or this grace period has passed, SIGKILL (which also takes
    /// members that ignore SIGTERM). `Duration::ZERO` sends SIGKILL at once (LocalExecutor's
    /// behaviour). Defaults to 1 second.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Kills a command's remote process group (SIGKILL) when its SSH connection is gone: the
    /// client process died, the connection broke or was closed. sshd itself leaves such
    /// commands running. The command's supervisor (see the crate docs) notices when sshd
    /// closes the channel's stdin, which happens at once when the client's TCP connection
    /// closes and, for a silent network cut, once the server's sshd gives up on the client
    /// (OpenSSH 9.2: about 2 × `ClientAliveInterval` × (`ClientAliveCountMax` + 1); without
    /// `ClientAliveInterval` only TCP keepalive, about 2 hours). Defaults to `true`.
    ///
    /// With `false`, commands in the direct exec form (warm connections to a POSIX login
    /// shell) also run without that supervisor: one forked shell less per command, about
    /// 0.5 ms of server CPU (see BENCHMARKS.md). A kill on timeout or cancellation then goes
    /// through a second channel, which counts against the server's `MaxSessions` (refusals
    /// are retried).
    pub fn kill_on_disconnect(mut self, enabled: bool) -> Self {
        self.kill_on_disconnect = enabled;
        self
    }

    /// How commands start on the host: through a resident runner per connection (one exec
    /// request, then every command is a request on its channel: about half the server CPU of a
    /// session per command) or one SSH session per command. See [`Runner`] and the guide's [How
    /// commands run](crate::guide::commands#how-commands-run) for which commands take the
    /// runner. Defaults to [`Runner::Auto`] (the runner where the host can start one, silently
    /// per exec elsewhere), or to what the `SWIFTIDE_SSH_RUNNER` environment variable names
    /// (`auto`, `resident`, `per-exec`) when this setter is not called.
    pub fn runner(mut self, runner: Runner) -> Self {
        self.runner = Some(runner);
        self
    }

    /// Resource limits for every command ([`Limits`](crate::Limits)), applied by the host's
    /// runner in the command's leader before it runs; [`ExecOptions::limits`] replaces them
    /// for one command. Defaults to none. A command that cannot get them (no runner on the
    /// host, a terminal, the caller's stdin, the Perl runner) is refused with
    /// [`Error::GuardUnavailable`](crate::Error::GuardUnavailable); see the guide's
    /// [Guarded commands](crate::guide::guards).
    ///
    /// [`ExecOptions::limits`]: crate::ExecOptions::limits
    pub fn limits(mut self, limits: crate::Limits) -> Self {
        self.guard.limits = limits;
        self
    }

    /// Kernel confinement for every command ([`Confinement`](crate::Confinement), Landlock),
    /// applied by the host's runner in the command's leader before it runs;
    /// [`ExecOptions::confinement`] replaces it for one command. Defaults to none. Where the
    /// host cannot enforce it whole (no Landlock or too old a kernel, no runner, a terminal,
    /// the caller's stdin, the Perl runner) the command is refused with
    /// [`Error::GuardUnavailable`](crate::Error::GuardUnavailable): nothing ever runs
    /// weaker than asked, unless
    /// [`run_unguarded_where_unenforceable`](Self::run_unguarded_where_unenforceable).
    ///
    /// [`ExecOptions::confinement`]: crate::ExecOptions::confinement
    pub fn confinement(mut self, confinement: crate::Confinement) -> Self {
        self.guard.confinement = Some(confinement);
        self
    }

    /// **Dangerous:** runs a command whose [`limits`](Self::limits) or
    /// [`confinement`](Self::confinement) the host cannot enforce *without* them (a warning
    /// is logged), instead of refusing it. Defaults to false.
    pub fn run_unguarded_where_unenforceable(mut self, unguarded: bool) -> Self {
        self.unguarded_where_unenforceable = unguarded;
        self
    }

    /// Records every operation of this executor and its clones (commands, processes and
    /// terminals, file reads and writes, `stream_files`, jobs, forwards) in `trail`, a
    /// hash-chained JSON-lines [`AuditTrail`](crate::audit::AuditTrail). Defaults to none.
    /// Once the trail cannot be written, operations are refused with
    /// [`Error::Audit`](crate::Error::Audit).
    pub fn audit(mut self, trail: crate::audit::AuditTrail) -> Self {
        self.audit = Some(trail);
        self
    }

    /// A native runner to install on hosts and try before Python and Perl: the bytes of this
    /// crate's `swiftide-ssh-runner` binary, built for the hosts' architecture (e.g.
    /// `cargo build --release -p swiftide-ssh-runner --target x86_64-unknown-linux-musl`,
    /// a static binary). Defaults to none.
    ///
    /// The first connection to a host copies it over the runner's channel to
    /// `~/.cache/swiftide-ssh/runner-<sha256>` (a private directory, mode 700, written under
    /// umask 077 and renamed into place); every start checks the copy's SHA-256 with the
    /// host's `sha256sum` first, and a copy that is missing, not the login's or altered is
    /// written again before it runs. A host where it cannot run (another architecture, no
    /// `sha256sum`, a `noexec` home) goes on to Python, Perl, then one session per command.
    pub fn runner_helper(mut self, binary: impl Into<bytes::Bytes>) -> Self {
        self.runner_helper = Some(Arc::new(RunnerHelper::new(binary.into())));
        self
    }

    /// Caps the output a command's result keeps: the first half and the last half of `n`
    /// bytes survive, the middle is dropped and counted in
    /// [`Execution::omitted_bytes`](crate::Execution::omitted_bytes) (through swiftide, a
    /// line `[... N bytes of output omitted ...]` marks the gap). Streaming sinks still see
    /// every byte. Keeps client memory bounded for commands with huge output. Defaults to
    /// `None`: everything is kept, as LocalExecutor does.
    pub fn max_output_bytes(mut self, n: Option<usize>) -> Self {
        self.max_output_bytes = n;
        self
    }

    /// How long the host keeps a job after it ended. The executor's housekeeping removes the
    /// jobs that ended at least this long ago (by the host's clock), with their output, as
    /// [`prune_jobs`](SshExecutor::prune_jobs) does; running and lost jobs stay. It runs in a
    /// task of its own after a [`spawn_job`](SshExecutor::spawn_job), so a start never waits
    /// for it, and at most once an hour per executor (once per retention, if shorter): one
    /// exec on the host. The jobs are the login's, so the shortest retention of the
    /// executors using that login on that host wins. `None` keeps them until
    /// [`Job::remove`](crate::Job::remove) or `prune_jobs`. Defaults to 7 days.
    /// [`build`](Self::build) refuses more than 2³¹ − 1 seconds (about 68 years) with
    /// [`Error::DurationTooLong`].
    pub fn job_retention(mut self, retention: Option<Duration>) -> Self {
        self.job_retention = retention;
        self
    }

    /// Escalates everything the executor does on the host (commands, file operations,
    /// `stream_files`, jobs) to another account with `sudo`, `doas` or `su` (see [`Become`]).
    /// [`SshExecutor::with_become`] and [`SshExecutor::without_become`] change it for one
    /// handle. Defaults to none: everything runs as the login user. [`build`](Self::build)
    /// refuses a target user or flag that could change the exec request, and a password with
    /// a newline, with [`Error::Config`].
    pub fn with_become(mut self, escalation: Become) -> Self {
        self.escalation = Some(escalation);
        self
    }

    pub(crate) fn into_config(self) -> Result<Config> {
        let config_error = |reason: &str| Error::Config {
            reason: reason.to_owned(),
        };
        let host = self
            .host
            .filter(|h| !h.is_empty())
            .ok_or_else(|| config_error("a host is required"))?;
        let user = match self.user {
            Some(user) => user,
            None => crate::config::local_user().ok_or_else(|| {
                config_error(
                    "no user given, and the running uid has no passwd entry to take a login \
                     name from",
                )
            })?,
        };
        if self.max_connections == 0 {
            return Err(config_error("max_connections must be at least 1"));
        }
        if self.channels_per_connection == 0 {
            return Err(config_error("channels_per_connection must be at least 1"));
        }
        limit::check_optional("default_timeout", self.default_timeout)?;
        limit::check("connect_timeout", self.connect_timeout)?;
        limit::check("pool_wait_timeout", self.pool_wait_timeout)?;
        limit::check_optional("idle_timeout", self.idle_timeout)?;
        limit::check_optional("max_connection_lifetime", self.max_connection_lifetime)?;
        limit::check_optional("keepalive_interval", self.keepalive_interval)?;
        limit::check("kill_grace", self.kill_grace)?;
        limit::check_optional("job_retention", self.job_retention)?;
        if let Some(escalation) = &self.escalation {
            escalation.validate()?;
        }
        let mut auth = self.auth;
        if auth.is_empty() {
            auth = self.file_auth;
        }
        if auth.is_empty() {
            auth.push(AuthMethod::Agent { socket: None });
        }
        let jump_hosts = config::resolve_hops(
            self.jump_hosts,
            &JumpTarget {
                user: &user,
                auth: &auth,
                policy: &self.host_key_policy,
            },
        )?;
        let mut set: Vec<(String, String)> = self.envs.into_iter().collect();
        set.sort();
        let env = EnvPlan {
            clear: self.env_clear,
            remove: self.env_remove,
            set,
        };
        env.validate()?;
        let mut config = Config {
            host,
            port: self.port,
            user,
            auth,
            host_key_policy: self.host_key_policy,
            workdir: self.workdir,
            default_timeout: self.default_timeout,
            env,
            max_connections: self.max_connections,
            channels_per_connection: self.channels_per_connection,
            spare_channels: self.spare_channels,
            // Depends on the kill settings: set below, from the finished config.
            prestart_request: Vec::new(),
            connect_timeout: self.connect_timeout,
            pool_wait_timeout: self.pool_wait_timeout,
            idle_timeout: self.idle_timeout,
            max_connection_lifetime: self.max_connection_lifetime,
            keepalive_interval: self.keepalive_interval,
            keepalive_max: self.keepalive_max,
            kill_grace: self.kill_grace,
            kill_on_disconnect: self.kill_on_disconnect,
            max_output_bytes: self.max_output_bytes,
            job_retention: self.job_retention,
            drain_timeout: Duration::from_secs(2),
            jump_hosts,
            escalation: self.escalation,
            runner: self.runner.unwrap_or_else(Runner::from_env),
            runner_helper: self.runner_helper,
            guard: self.guard,
            unguarded_where_unenforceable: self.unguarded_where_unenforceable,
            audit: self.audit,
        };
        config.prestart_request = crate::command::prestart_request(Supervision::of(&config));
        Ok(config)
    }

    /// Validates the settings and opens the first connection, so that a wrong host key,
    /// refused credentials or an unreachable host fail here with a typed error.
    ///
    /// # Errors
    /// [`Error::Config`] or [`Error::InvalidInput`] for bad settings,
    /// [`Error::DurationTooLong`] for a duration setting over 2³¹ − 1 seconds; any
    /// connection error.
    pub async fn build(self) -> Result<SshExecutor> {
        let executor = self.build_lazy()?;
        executor.warm_up().await?;
        Ok(executor)
    }

    /// Validates the settings without connecting; the first command connects.
    ///
    /// # Errors
    /// [`Error::Config`] or [`Error::InvalidInput`] for bad settings,
    /// [`Error::DurationTooLong`] for a duration setting over 2³¹ − 1 seconds.
    pub fn build_lazy(self) -> Result<SshExecutor> {
        SshExecutor::from_config(self.into_config()?)
    }
}

/// Jump-host settings of the builder.
impl SshExecutorBuilder {
    /// Adds a jump host (OpenSSH `ProxyJump`): connections go through the hops in the order
    /// they were added, the first one reached directly. Each hop is authenticated and its
    /// host key verified on its own; settings a hop does not have are taken from the target
    /// (see [`JumpHost`]). One connection per hop carries all of the executor's pooled
    /// connections, and it stays open as long as they do. The first call replaces the
    /// hops read from an ssh_config `ProxyJump`. Defaults to none: a direct connection.
    pub fn jump_host(mut self, hop: JumpHost) -> Self {
        if self.jump_hosts_from_file {
            self.jump_hosts.clear();
            self.jump_hosts_from_file = false;
        }
        self.jump_hosts.push(hop);
        self
    }

    /// Replaces every jump host with `hops`, in order; an empty list connects directly
    /// (OpenSSH `ProxyJump none`). Defaults to none: a direct connection.
    pub fn jump_hosts(mut self, hops: impl IntoIterator<Item = JumpHost>) -> Self {
        self.jump_hosts = hops.into_iter().collect();
        self.jump_hosts_from_file = false;
        self
    }
}
