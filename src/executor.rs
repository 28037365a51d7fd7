//! [`SshExecutor`]: the cheap, cloneable handle users hold.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tracing::Instrument;

use crate::{
    command::{
        self, Escalated, Exchange, ExecRequest, Execution, OutputSink, Program, Supervision,
    },
    config::{Become, Config},
    error::{Error, Result},
    pool::{Pool, PoolStats},
};

/// Runs commands and file operations on one remote host over pooled SSH connections.
///
/// Cloning is cheap (an `Arc`); clones share the pool. Implements swiftide's
/// [`ToolExecutor`](swiftide_core::ToolExecutor), and converts into
/// `Arc<dyn ToolExecutor>` for `DefaultContext::from_executor`.
///
/// Dropping the last clone drops the pool: idle connections close, and commands still
/// running keep their connection until they end.
///
/// A handle escalates (sudo, doas, su) as its [`Become`] says: the builder's
/// [`with_become`](crate::SshExecutorBuilder::with_become), or another one for this handle
/// and its clones with [`with_become`](Self::with_become) /
/// [`without_become`](Self::without_become), which share the pool.
#[derive(Clone)]
pub struct SshExecutor {
    pub(crate) inner: Arc<Pool>,
    /// The escalation of this handle's commands, files and jobs.
    pub(crate) escalation: Option<Arc<Escalated>>,
}

impl std::fmt::Debug for SshExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshExecutor")
            .field("config", &self.inner.config)
            .field("escalation", &self.escalation)
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
    /// Timeout for this call. Defaults to the executor's default timeout. One too long for
    /// the clock to hold (`Duration::MAX`) is no timeout: its deadline could never pass.
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
    pub(crate) fn from_config(config: Config) -> Result<Self> {
        let escalation = config
            .escalation
            .clone()
            .map(|settings| Arc::new(Escalated::new(settings, Supervision::of(&config))));
        Ok(SshExecutor {
            inner: Arc::new(Pool::new(config)?),
            escalation,
        })
    }

    /// A handle on the same pool whose commands, file operations, `stream_files` and jobs
    /// escalate with `escalation` (see [`Become`]); this handle keeps its own. Cheap: no
    /// connection is made. Jobs started through it live in the target's state directory,
    /// so reattach to them through a handle with the same escalation.
    ///
    /// # Errors
    /// [`Error::Config`] for a target user or flag that could change the exec request, or a
    /// password with a newline.
    pub fn with_become(&self, escalation: Become) -> Result<SshExecutor> {
        escalation.validate()?;
        let supervision = Supervision::of(&self.inner.config);
        Ok(SshExecutor {
            inner: self.inner.clone(),
            escalation: Some(Arc::new(Escalated::new(escalation, supervision))),
        })
    }

    /// A handle on the same pool that runs everything as the login user.
    pub fn without_become(&self) -> SshExecutor {
        SshExecutor {
            inner: self.inner.clone(),
            escalation: None,
        }
    }

    /// The escalation this handle uses, if any.
    pub fn escalation(&self) -> Option<&Become> {
        self.escalation
            .as_deref()
            .map(|escalated| &*escalated.settings)
    }

    /// A fresh exchange with the escalation tool for one exec request (a new random prompt).
    pub(crate) fn exchange(&self) -> Option<Exchange> {
        self.escalation.as_deref().map(Exchange::new)
    }

    /// Opens a connection now unless one exists.
    pub(crate) async fn warm_up(&self) -> Result<()> {
        self.inner.warm_up().await
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
        let marker = command::marker_prefix(rand::random());
        let dir = self.resolve_dir(options.current_dir.as_deref());
        let config = &self.inner.config;
        let supervision = Supervision::of(config);
        let exchange = self.exchange();
        let escalation = exchange.as_ref().map(Exchange::escalation);
        let wrapped = command::wrapper(
            &program,
            dir.as_deref(),
            &config.env,
            &marker,
            supervision,
            escalation.as_ref(),
        )?;
        // The direct form runs the command as the login shell's user: not under an
        // escalation, whose commands take the universal form through the tool.
        let direct = exchange
            .is_none()
            .then(|| {
                command::direct_wrapper(&program, dir.as_deref(), &config.env, &marker, supervision)
            })
            .flatten()
            .map(|direct| (direct.request, direct.stdin.into(), direct.controlled));
        // A spare pre-escalated for this escalation runs as the target already: it gets the
        // payload of the unescalated request.
        let pre_escalated = match exchange
            .as_ref()
            .filter(|exchange| exchange.spares.is_some())
        {
            Some(_) => {
                let plain = command::wrapper(
                    &program,
                    dir.as_deref(),
                    &config.env,
                    &marker,
                    supervision,
                    None,
                )?;
                Some(command::prestart_payload(
                    Some(&program),
                    dir.as_deref(),
                    &config.env,
                    &marker,
                    supervision,
                    &plain,
                ))
            }
            None => None,
        };
        let prestarted = command::prestart_payload(
            exchange.is_none().then_some(&program),
            dir.as_deref(),
            &config.env,
            &marker,
            supervision,
            &wrapped,
        );
        let request = ExecRequest {
            wrapper: wrapped.request,
            stdin: wrapped.stdin.into(),
            marker,
            controlled: wrapped.controlled,
            direct,
            prestarted,
            pre_escalated,
            escalation: exchange,
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
        command::execute(&self.inner, request, timeout, sink)
            .instrument(span)
            .await
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// A snapshot of the pool's state and counters.
    pub fn pool_stats(&self) -> PoolStats {
        self.inner.stats()
    }

    /// Stops taking commands and disconnects idle connections. Commands already running
    /// finish on their connections, which then close. Further calls fail with
    /// [`Error::Closed`]. The pruning a [`spawn_job`](Self::spawn_job) set off in the
    /// background (`job_retention`), if still in flight, gets up to 10 s to finish first.
    pub async fn close(&self) {
        self.inner.close().await;
    }

    /// Disconnects the idle connections and retires the busy ones (they close when their
    /// commands end), leaving the executor usable: the next command dials again. For fleets
    /// that let a host's connection go once its result is in.
    pub(crate) async fn release_connections(&self) {
        self.inner.registry.close_all().await;
    }
}
