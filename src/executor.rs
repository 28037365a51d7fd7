//! [`SshExecutor`]: the cheap, cloneable handle users hold.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tracing::Instrument;

use crate::{
    audit::{self, Exit},
    command::{
        self, Escalated, Exchange, ExecRequest, Execution, OutputChunk, OutputSink, Program,
        Supervision,
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
    /// [`spawn`](SshExecutor::spawn) does not apply it: its caller decides when to kill.
    pub timeout: Option<Duration>,
    /// Run in a pseudo-terminal. Defaults to none: stdout and stderr apart, byte-exact, as
    /// under LocalExecutor. With one, they arrive merged as stdout (`\n` written as `\r\n`
    /// by the terminal), the command's stdin is the terminal, and a timeout or cancel kills
    /// its whole session (see [`Pty`](crate::Pty) and the guide's
    /// [Terminals](crate::guide::terminals#pseudo-terminals)).
    pub pty: Option<crate::command::Pty>,
    /// Bytes for the command's stdin, which reads EOF after them. Defaults to none: stdin
    /// is `/dev/null`, as under LocalExecutor. (Not for `#!` scripts, whose interpreter
    /// reads its body on stdin. For a stream or a writer kept open, see
    /// [`spawn`](SshExecutor::spawn).) They travel on a second channel into a FIFO on the
    /// host: see the guide's [Terminals](crate::guide::terminals#stdin-for-commands).
    pub stdin: Option<bytes::Bytes>,
    /// Resource limits for this command, replacing the builder's
    /// ([`SshExecutorBuilder::limits`](crate::SshExecutorBuilder::limits)). Defaults to the
    /// builder's.
    pub limits: Option<crate::Limits>,
    /// Kernel confinement for this command, replacing the builder's
    /// ([`SshExecutorBuilder::confinement`](crate::SshExecutorBuilder::confinement)).
    /// Defaults to the builder's.
    pub confinement: Option<crate::Confinement>,
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

    /// Runs the command in a pseudo-terminal.
    #[must_use]
    pub fn pty(mut self, pty: crate::command::Pty) -> Self {
        self.pty = Some(pty);
        self
    }

    /// Gives the command `bytes` on stdin.
    #[must_use]
    pub fn stdin(mut self, bytes: impl Into<bytes::Bytes>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Sets this command's resource limits (replacing the builder's).
    #[must_use]
    pub fn limits(mut self, limits: crate::Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Sets this command's confinement (replacing the builder's).
    #[must_use]
    pub fn confinement(mut self, confinement: crate::Confinement) -> Self {
        self.confinement = Some(confinement);
        self
    }
}

/// A process's input channels: the sender the `Process` keeps, and the driver's end (with
/// the control channel's sender beside it).
fn command_input() -> (
    tokio::sync::mpsc::Sender<command::StdinItem>,
    (
        command::Input,
        tokio::sync::mpsc::UnboundedSender<command::Control>,
    ),
) {
    let (stdin_tx, stdin_rx) = tokio::sync::mpsc::channel(command::STDIN_QUEUE);
    let (control_tx, control_rx) = tokio::sync::mpsc::unbounded_channel();
    let input = command::Input {
        stdin: Arc::new(tokio::sync::Mutex::new(stdin_rx)),
        control: control_rx,
    };
    (stdin_tx, (input, control_tx))
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

    /// The login user (the one given, else the running uid's login name).
    pub fn user(&self) -> &str {
        &self.inner.config.user
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
        let mut audit = self.audit_command("command", command, &options)?;
        let result = if audit.is_on() {
            let mut digests = audit::OutputDigests::default();
            let mut digesting = |chunk: &OutputChunk| {
                chunk.digest_into(&mut digests);
                sink(chunk);
            };
            let result = self
                .execute_unaudited(command, options, &mut digesting)
                .await;
            audit.note(|record| digests.record_into(record));
            result
        } else {
            self.execute_unaudited(command, options, sink).await
        };
        match &result {
            Ok(execution) => audit.end(execution.status.audit_exit()),
            Err(error) => audit.end(Exit::Error(error.with_causes())),
        }
        result
    }

    /// [`execute`](Self::execute) without its audit record.
    async fn execute_unaudited(
        &self,
        command: &str,
        options: ExecOptions,
        sink: &mut OutputSink<'_>,
    ) -> Result<Execution> {
        let timeout = self.resolve_timeout(options.timeout);
        if options.stdin.is_some() {
            // Through a process: its stdin written and closed, then run to its end.
            let mut options = options;
            let bytes = options.stdin.take().unwrap_or_default();
            // Recorded by `execute` as the command it is.
            let unrecorded = audit::Entry::off();
            let mut process = if options.pty.is_some() {
                self.terminal_process(command, options, unrecorded)?
            } else {
                self.piped_process(command, options, unrecorded).await?
            };
            let write = process.write(bytes);
            if let Err(error) = write.await {
                tracing::debug!(%error, "the command's stdin closed before it took all its input");
            }
            process.close_stdin().await;
            return process.finish(timeout, sink).await;
        }
        let request = self.request(command, &options, None)?;
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

    /// Starts `command` as [`execute`](Self::execute) would, and returns at once with a
    /// [`Process`](crate::Process) to write its stdin, resize its terminal, read its output
    /// as it arrives, and wait for or kill it. `options.timeout` is not applied.
    ///
    /// The command's stdin is the caller's: what [`Process::write`](crate::Process::write)
    /// writes, then EOF at [`Process::close_stdin`](crate::Process::close_stdin). In a
    /// terminal (`options.pty`) it is the terminal; without one the bytes travel on a second
    /// channel into a FIFO on the host (one more channel and a `cat` for the command's life;
    /// `options.stdin` goes first).
    ///
    /// # Errors
    /// Invalid input; [`Error::Closed`]. Connection failures come from the `Process`.
    ///
    /// # Cancel safety
    /// Dropping the `Process` kills the command's group in the background (best effort).
    pub async fn spawn(&self, command: &str, options: ExecOptions) -> Result<crate::Process> {
        if options.pty.is_some() {
            return self.spawn_in_terminal(command, options);
        }
        let audit = self.audit_command("process", command, &options)?;
        self.piped_process(command, options, audit).await
    }

    /// [`spawn`](Self::spawn) without a terminal, recorded by `audit` when it ends.
    async fn piped_process(
        &self,
        command: &str,
        options: ExecOptions,
        audit: audit::Entry,
    ) -> Result<crate::Process> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let (stdin, input) = command_input();
        // Refused input (a `#!` script, a NUL) is refused before the feeder makes its FIFO.
        self.request(command, &options, Some(&command::FeederFifo::unmade()))?;
        // The command's own channel keeps its stdin for the supervisor's control line: the
        // caller's bytes go to a FIFO on the host that a second channel feeds (see
        // `command::feeder`).
        let feeder = command::Feeder::start(&self.inner, self.exchange(), input.0).await?;
        let request = self.request(command, &options, Some(feeder.fifo()))?;
        let process = self.launch_process(
            command,
            request,
            None,
            (stdin, input.1),
            Some(feeder),
            audit,
        );
        if let Some(bytes) = options.stdin {
            process.write(bytes).await?;
        }
        Ok(process)
    }

    /// [`spawn`](Self::spawn) in a terminal: the terminal carries stdin, so nothing waits
    /// for a second channel.
    pub(crate) fn spawn_in_terminal(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> Result<crate::Process> {
        let audit = self.audit_command("terminal", command, &options)?;
        self.terminal_process(command, options, audit)
    }

    /// [`spawn_in_terminal`](Self::spawn_in_terminal), recorded by `audit` when it ends.
    fn terminal_process(
        &self,
        command: &str,
        options: ExecOptions,
        audit: audit::Entry,
    ) -> Result<crate::Process> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let request = self.request(command, &options, None)?;
        let (stdin, (input, control)) = command_input();
        if let Some(bytes) = options.stdin.clone() {
            // Queued ahead of everything the caller writes; the queue has room for it.
            let _ = stdin.try_send(command::StdinItem::Data(bytes));
        }
        Ok(self.launch_process(command, request, Some(input), (stdin, control), None, audit))
    }

    /// Hands `request` to its driver and wraps it into a [`Process`](crate::Process).
    fn launch_process(
        &self,
        command: &str,
        request: ExecRequest,
        input: Option<command::Input>,
        (stdin, control): (
            tokio::sync::mpsc::Sender<command::StdinItem>,
            tokio::sync::mpsc::UnboundedSender<command::Control>,
        ),
        feeder: Option<command::Feeder>,
        audit: audit::Entry,
    ) -> crate::Process {
        let terminal = request.pty.is_some();
        let command_id = self
            .inner
            .registry
            .counters
            .commands
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        let span = tracing::debug_span!("ssh_process", host = %self.inner.config.host,
            command_id, command_len = command.len(), terminal);
        let launched = span.in_scope(|| command::launch(&self.inner, request, input));
        crate::Process::new(
            self.inner.clone(),
            launched,
            stdin,
            control,
            terminal,
            feeder,
            audit,
        )
    }

    /// The audit entry of `op` on this handle (off without a trail): who, where, as whom.
    ///
    /// # Errors
    /// [`Error::Audit`] when the trail has failed: the operation must not run.
    pub(crate) fn audit(&self, op: &str) -> Result<audit::Entry> {
        let config = &self.inner.config;
        let Some(trail) = &config.audit else {
            return Ok(audit::Entry::off());
        };
        let mut record = audit::template(&config.host, config.port, &config.user, op);
        if let Some(escalated) = &self.escalation {
            record.user = escalated.settings.user.clone();
            record.r#become = Some(escalated.settings.method.name().to_owned());
        }
        trail.begin(record)
    }

    /// The audit entry of `op` on `path` (and `to`, a rename's second path).
    pub(crate) fn audit_path(
        &self,
        op: &str,
        path: &Path,
        to: Option<&Path>,
    ) -> Result<audit::Entry> {
        let mut entry = self.audit(op)?;
        entry.note(|record| {
            record.path = Some(audit::path_text(path));
            record.to = to.map(audit::path_text);
        });
        Ok(entry)
    }

    /// Runs `work`, recorded as `op` on `path` (and `to`) with its outcome.
    pub(crate) async fn audited<T>(
        &self,
        op: &str,
        path: &Path,
        to: Option<&Path>,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let audit = self.audit_path(op, path, to)?;
        let result = work.await;
        audit.end_with(&result);
        result
    }

    /// The audit entry of a command (`op`: `command`, `process`, `terminal`): its text,
    /// directory and guard.
    fn audit_command(
        &self,
        op: &str,
        command: &str,
        options: &ExecOptions,
    ) -> Result<audit::Entry> {
        let mut entry = self.audit(op)?;
        entry.note(|record| {
            record.command = Some(command.to_owned());
            let dir = self.resolve_dir(options.current_dir.as_deref());
            let guard = self.guard(options);
            if !guard.is_empty() {
                let entries = guard.to_protocol(dir.as_deref()).encode();
                record.guard = Some(
                    entries
                        .split(|byte| *byte == 0)
                        .filter(|entry| !entry.is_empty())
                        .map(|entry| String::from_utf8_lossy(entry).into_owned())
                        .collect(),
                );
            }
            record.dir = dir.map(|dir| audit::path_text(&dir));
        });
        Ok(entry)
    }

    /// The request for `command` with `options`; its stdin read from the FIFO `stdin_fifo`
    /// on the host, when given.
    fn request(
        &self,
        command: &str,
        options: &ExecOptions,
        stdin_fifo: Option<&command::FeederFifo>,
    ) -> Result<ExecRequest> {
        let config = &self.inner.config;
        let guard = self.guard(options);
        ExecRequest::command(
            config,
            Program::parse(command),
            self.resolve_dir(options.current_dir.as_deref()),
            options.pty.clone(),
            stdin_fifo.map(command::FeederFifo::open_prefix),
            self.exchange(),
            guard,
        )
    }

    /// The limits and confinement of a command with `options`: its own, or the builder's.
    fn guard(&self, options: &ExecOptions) -> crate::config::Guard {
        let config = &self.inner.config;
        crate::config::Guard {
            limits: options
                .limits
                .clone()
                .unwrap_or_else(|| config.guard.limits.clone()),
            confinement: options
                .confinement
                .clone()
                .or_else(|| config.guard.confinement.clone()),
        }
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
    /// The [audit trail](crate::SshExecutorBuilder::audit)'s queued records are then
    /// written.
    pub async fn close(&self) {
        self.inner.close().await;
        if let Some(trail) = &self.inner.config.audit {
            // Its failure refused operations already; nothing more to say here.
            let _ = trail.flush().await;
        }
    }

    /// Disconnects the idle connections and retires the busy ones (they close when their
    /// commands end), leaving the executor usable: the next command dials again. For fleets
    /// that let a host's connection go once its result is in.
    pub(crate) async fn release_connections(&self) {
        self.inner.registry.close_all().await;
    }
}
