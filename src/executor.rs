//! [`SshExecutor`]: the cheap, cloneable handle users hold.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tracing::Instrument;

use crate::{
    builder::{Config, SshExecutorBuilder},
    error::{Error, Phase, Result},
    exec::{self, ExecRequest},
    output::{Execution, OutputSink},
    pool::{LogSink, PoolStats, Registry, SlotManager},
    shell::{self, Program},
};

pub(crate) struct Inner {
    pub(crate) config: Arc<Config>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) pool: bb8::Pool<SlotManager>,
    closed: AtomicBool,
}

/// Runs commands and file operations on one remote host over pooled SSH connections.
///
/// Cloning is cheap (an `Arc`); clones share the pool. Implements swiftide's
/// [`ToolExecutor`](swiftide_core::ToolExecutor), and converts into
/// `Arc<dyn ToolExecutor>` for `DefaultContext::from_executor`.
///
/// Dropping the last clone drops the pool: idle connections close, and commands still
/// running keep their connection until they end.
#[derive(Clone)]
pub struct SshExecutor {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for SshExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshExecutor")
            .field("config", &self.inner.config)
            .field("registry", &self.inner.registry)
            .finish_non_exhaustive()
    }
}

/// Per-call options for [`SshExecutor::execute`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ExecOptions {
    /// Directory to run in: absolute, or relative to the executor's workdir. Defaults to the
    /// workdir.
    pub current_dir: Option<PathBuf>,
    /// Timeout for this call. Defaults to the executor's default timeout.
    pub timeout: Option<Duration>,
}

impl ExecOptions {
    /// Sets the directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl SshExecutor {
    /// Starts a builder.
    pub fn builder() -> SshExecutorBuilder {
        SshExecutorBuilder::default()
    }

    pub(crate) fn from_config(config: Config) -> Result<Self> {
        // bb8 spawns its reaper on the current runtime.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Config {
                reason: "an SshExecutor must be built inside a tokio runtime".to_owned(),
            });
        }
        let config = Arc::new(config);
        let registry = Arc::new(Registry::new(config.clone()));
        let pool = bb8::Pool::builder()
            .max_size(config.max_connections * config.channels_per_connection)
            .min_idle(None)
            .test_on_check_out(true)
            .idle_timeout(config.idle_timeout)
            // Connection lifetime is enforced per connection by the registry, not per slot.
            .max_lifetime(None)
            .connection_timeout(config.pool_wait_timeout)
            .error_sink(Box::new(LogSink))
            .build_unchecked(SlotManager {
                registry: registry.clone(),
            });
        Ok(SshExecutor {
            inner: Arc::new(Inner {
                config,
                registry,
                pool,
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// Opens a connection now unless one exists.
    pub(crate) async fn warm_up(&self) -> Result<()> {
        self.inner.registry.dial_if_needed(0).await
    }

    /// The configured host.
    pub fn host(&self) -> &str {
        &self.inner.config.host
    }

    /// The configured port.
    pub fn port(&self) -> u16 {
        self.inner.config.port
    }

    /// The configured remote working directory (`None`: the login directory).
    pub fn workdir(&self) -> Option<&Path> {
        self.inner.config.workdir.as_deref()
    }

    /// The directory a command with `current_dir` runs in: an absolute `current_dir` as is, a
    /// relative one joined to the workdir, none means the workdir. `None` means the login
    /// directory.
    pub fn resolve_dir(&self, current_dir: Option<&Path>) -> Option<PathBuf> {
        match (current_dir, self.workdir()) {
            (Some(dir), _) if dir.is_absolute() => Some(dir.to_path_buf()),
            (Some(dir), Some(workdir)) => Some(workdir.join(dir)),
            (Some(dir), None) => Some(dir.to_path_buf()),
            (None, workdir) => workdir.map(Path::to_path_buf),
        }
    }

    /// A file path as file commands see it: absolute as is, otherwise joined to
    /// [`resolve_dir`](Self::resolve_dir). A path left relative is relative to the login
    /// directory.
    pub fn resolve_path(&self, path: &Path, current_dir: Option<&Path>) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        match self.resolve_dir(current_dir) {
            Some(dir) => dir.join(path),
            None => path.to_path_buf(),
        }
    }

    /// The timeout a call gets: its own, else the default (LocalExecutor's rule).
    pub fn resolve_timeout(&self, timeout: Option<Duration>) -> Option<Duration> {
        timeout.or(self.inner.config.default_timeout)
    }

    /// Runs a shell command in the workdir with the default timeout and returns everything
    /// about it. A nonzero exit, a signal or a timeout is reported in
    /// [`Execution::status`], not as an error.
    ///
    /// # Errors
    /// Invalid input, connection, authentication and transport failures.
    ///
    /// # Cancel safety
    /// Dropping the future kills the remote process group in the background (best effort).
    pub async fn run(&self, command: &str) -> Result<Execution> {
        self.execute(command, ExecOptions::default(), &mut |_| {})
            .await
    }

    /// Runs a command with options, handing each output chunk to `sink` as it arrives.
    ///
    /// `command` is run as LocalExecutor runs it: `sh -c <command>` with stdin at EOF, or,
    /// when it starts with `#!`, the named interpreter (plus at most one argument) reading
    /// the rest of the text on stdin. The executor's environment settings apply.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    ///
    /// # Cancel safety
    /// As [`run`](Self::run).
    pub async fn execute(
        &self,
        command: &str,
        options: ExecOptions,
        sink: &mut OutputSink<'_>,
    ) -> Result<Execution> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let program = Program::parse(command);
        let marker = shell::marker_prefix(rand::random());
        let dir = self.resolve_dir(options.current_dir.as_deref());
        let config = &self.inner.config;
        let supervision = shell::Supervision {
            kill_on_disconnect: config.kill_on_disconnect,
            grace: config.kill_grace,
        };
        let wrapped = shell::wrapper(&program, dir.as_deref(), &config.env, &marker, supervision)?;
        let request = ExecRequest {
            wrapper: wrapped.request,
            stdin: wrapped.stdin,
            marker,
            controlled: wrapped.controlled,
        };
        let timeout = self.resolve_timeout(options.timeout);
        // The command text may hold secrets typed by an agent: log its length only.
        let command_id = self
            .inner
            .registry
            .counters
            .commands
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        let span = tracing::debug_span!("ssh_command", host = %self.inner.config.host,
            command_id, command_len = command.len(), ?timeout);
        exec::execute(&self.inner, request, timeout, sink)
            .instrument(span)
            .await
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// A snapshot of the pool's state and counters.
    pub fn pool_stats(&self) -> PoolStats {
        let state = self.inner.pool.state();
        let sessions = self.inner.registry.sessions();
        let counters = &self.inner.registry.counters;
        PoolStats {
            connections: sessions.iter().filter(|s| !s.is_dead()).count(),
            retiring_connections: sessions
                .iter()
                .filter(|s| !s.is_dead() && s.is_retired())
                .count(),
            slots: state.connections,
            idle_slots: state.idle_connections,
            busy_slots: state.connections.saturating_sub(state.idle_connections),
            dials: counters.dials.load(Ordering::Relaxed),
            dial_failures: counters.dial_failures.load(Ordering::Relaxed),
            connections_closed: counters.sessions_closed.load(Ordering::Relaxed),
            channel_open_retries: counters.channel_open_retries.load(Ordering::Relaxed),
            connections_recycled: counters.sessions_recycled.load(Ordering::Relaxed),
            commands: counters.commands.load(Ordering::Relaxed),
            kills: counters.kills.load(Ordering::Relaxed),
            waits: state.statistics.get_waited,
            wait_timeouts: state.statistics.get_timed_out,
            wait_time: state.statistics.get_wait_time,
        }
    }

    /// Stops taking commands and disconnects idle connections. Commands already running
    /// finish on their connections, which then close. Further calls fail with
    /// [`Error::Closed`].
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.registry.close_all().await;
    }

    /// Checks out a slot, dialing in this task first when the pool must grow (so connection
    /// errors arrive typed), and maps a pool timeout to the last dial error.
    pub(crate) async fn acquire_slot_for(
        inner: &Arc<Inner>,
    ) -> Result<bb8::PooledConnection<'static, SlotManager>> {
        let state = inner.pool.state();
        inner
            .registry
            .dial_if_needed(state.idle_connections)
            .await?;
        inner.pool.get_owned().await.map_err(|e| match e {
            bb8::RunError::User(e) => e,
            bb8::RunError::TimedOut => Error::PoolTimeout {
                host: inner.config.host.clone(),
                port: inner.config.port,
                waited: inner.config.pool_wait_timeout,
                last_error: inner.registry.last_dial_error(),
            },
            // bb8 may add variants; treat them as a pool wait failure.
            #[allow(unreachable_patterns)]
            _ => Error::Timeout {
                host: inner.config.host.clone(),
                port: inner.config.port,
                phase: Phase::PoolWait,
                after: inner.config.pool_wait_timeout,
            },
        })
    }
}

impl Inner {
    pub(crate) async fn acquire_slot(
        self: &Arc<Self>,
    ) -> Result<bb8::PooledConnection<'static, SlotManager>> {
        SshExecutor::acquire_slot_for(self).await
    }
}

impl From<SshExecutor> for Arc<dyn swiftide_core::ToolExecutor> {
    fn from(executor: SshExecutor) -> Self {
        Arc::new(executor)
    }
}
