//! [`Process`]: a running command the caller talks to while it runs: its stdin, its
//! terminal's size, its output as it arrives, and its end.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::{
    command::{
        drive::{Control, Heard, Launched, StdinItem},
        feeder::Feeder,
        output::{Execution, ExitStatus, OutputChunk, Retained},
    },
    error::{Error, Result},
    pool::Pool,
};

/// How many writes may wait for the command's channel: a caller that writes faster than the
/// command reads waits here (backpressure), instead of client memory growing.
pub(crate) const STDIN_QUEUE: usize = 16;

/// A command started with [`SshExecutor::spawn`](crate::SshExecutor::spawn), running on the
/// host: write to its stdin, resize its terminal, read its output as it arrives, wait for
/// its end, or kill it.
///
/// Output is handed out once by [`next`](Self::next) and also kept (as for
/// [`SshExecutor::execute`](crate::SshExecutor::execute), capped by `max_output_bytes`) for
/// the [`Execution`] that [`wait`](Self::wait) and [`kill`](Self::kill) return.
///
/// Dropping a `Process` kills the command's whole process group (and, in a terminal, its
/// session) in the background, best effort: it needs the connection.
pub struct Process {
    inner: Arc<Pool>,
    launched: Launched,
    stdin: Option<mpsc::Sender<StdinItem>>,
    control: mpsc::UnboundedSender<Control>,
    kept: Retained,
    finished: Option<Result<ExitStatus>>,
    terminal: bool,
    /// The second channel that carries stdin to a command without a terminal.
    feeder: Option<Feeder>,
    /// Its audit record, ended when its end is seen (dropped before that: cancelled).
    audit: crate::audit::Entry,
    /// Its output's digests, kept only while a record will be written.
    digests: Option<Box<crate::audit::OutputDigests>>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("host", &self.inner.config.host)
            .field("terminal", &self.terminal)
            .field("stdin_open", &self.stdin.is_some())
            .field("finished", &self.finished.is_some())
            .finish_non_exhaustive()
    }
}

/// A second handle on a [`Process`]'s input, for a task that reads its output meanwhile
/// (terminals).
#[derive(Debug, Clone)]
pub(crate) struct ProcessInput {
    stdin: mpsc::Sender<StdinItem>,
    control: mpsc::UnboundedSender<Control>,
}

impl ProcessInput {
    /// As [`Process::write`]; `false` once the command's stdin is gone.
    pub(crate) async fn write(&self, bytes: bytes::Bytes) -> bool {
        self.stdin.send(StdinItem::Data(bytes)).await.is_ok()
    }

    /// As [`Process::resize`].
    pub(crate) fn resize(&self, cols: u32, rows: u32) {
        let _ = self.control.send(Control::Resize { cols, rows });
    }
}

impl Process {
    /// Another handle on this process's input (while its stdin is open).
    pub(crate) fn input(&self) -> Option<ProcessInput> {
        Some(ProcessInput {
            stdin: self.stdin.clone()?,
            control: self.control.clone(),
        })
    }

    pub(crate) fn new(
        inner: Arc<Pool>,
        launched: Launched,
        stdin: mpsc::Sender<StdinItem>,
        control: mpsc::UnboundedSender<Control>,
        terminal: bool,
        feeder: Option<Feeder>,
        audit: crate::audit::Entry,
    ) -> Self {
        let kept = Retained::new(inner.config.max_output_bytes);
        Process {
            inner,
            launched,
            stdin: Some(stdin),
            control,
            kept,
            finished: None,
            terminal,
            feeder,
            digests: audit.is_on().then(Box::default),
            audit,
        }
    }

    /// Fills in the audit record of the process (what its caller knows, e.g. a terminal's
    /// recording).
    pub(crate) fn note_audit(&mut self, fill: impl FnOnce(&mut crate::audit::AuditRecord)) {
        self.audit.note(fill);
    }

    /// Keeps a chunk of output (and digests it for the audit record).
    fn heard_output(&mut self, chunk: &OutputChunk) {
        if let Some(digests) = &mut self.digests {
            chunk.digest_into(digests);
        }
        self.kept.push(chunk.clone());
    }

    /// Ends the audit record with how the command ended.
    fn heard_end(&mut self, result: &Result<ExitStatus>) {
        let mut audit = std::mem::take(&mut self.audit);
        if let Some(mut digests) = self.digests.take() {
            audit.note(|record| digests.record_into(record));
        }
        audit.end(match result {
            Ok(status) => status.audit_exit(),
            Err(error) => crate::audit::Exit::Error(error.with_causes()),
        });
    }

    /// Once the command has ended: closes stdin and lets the feeder (if any) finish, so
    /// that it leaves nothing behind on the host.
    async fn release_stdin(&mut self) {
        self.close_stdin().await;
        if let Some(feeder) = self.feeder.take() {
            feeder.finish().await;
        }
    }

    fn closed_stdin(&self) -> Error {
        Error::InvalidInput {
            reason: "the command's stdin is closed".to_owned(),
        }
    }

    /// Writes `bytes` to the command's stdin (in a terminal: types them). Waits while 16
    /// earlier writes have not reached the channel yet. Bytes written before the command
    /// started are sent once it runs, in order.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] once stdin was closed or the command has ended.
    pub async fn write(&self, bytes: impl Into<bytes::Bytes>) -> Result<()> {
        let stdin = self.stdin.as_ref().ok_or_else(|| self.closed_stdin())?;
        stdin
            .send(StdinItem::Data(bytes.into()))
            .await
            .map_err(|_| self.closed_stdin())
    }

    /// Closes the command's stdin: it reads EOF after what was written. (In a terminal the
    /// channel's EOF: programs there usually want `Ctrl-D` written instead.)
    pub async fn close_stdin(&mut self) {
        if let Some(stdin) = self.stdin.take() {
            let _ = stdin.send(StdinItem::Eof).await;
        }
    }

    /// Tells the command's terminal its new size (SSH `window-change`: the program gets
    /// `SIGWINCH`). Does nothing for a command without a terminal.
    pub fn resize(&self, cols: u32, rows: u32) {
        if self.terminal {
            let _ = self.control.send(Control::Resize { cols, rows });
        }
    }

    /// The next chunk of output as it arrives; `None` once the command has ended (and its
    /// output with it).
    pub async fn next(&mut self) -> Option<OutputChunk> {
        if self.finished.is_some() {
            return None;
        }
        match self.launched.next(&self.inner.config, None).await {
            Some(Heard::Output(chunk)) => {
                self.heard_output(&chunk);
                Some(chunk)
            }
            Some(Heard::Finished(result)) => {
                self.heard_end(&result);
                self.finished = Some(result);
                None
            }
            None => None,
        }
    }

    /// Waits for the command to end (reading what is left of its output) and returns
    /// everything about it.
    ///
    /// # Errors
    /// Connection and transport failures, as [`SshExecutor::execute`].
    ///
    /// [`SshExecutor::execute`]: crate::SshExecutor::execute
    pub async fn wait(mut self) -> Result<Execution> {
        while self.next().await.is_some() {}
        self.release_stdin().await;
        let status = match self.finished.take() {
            Some(result) => result?,
            None => ExitStatus::Unknown,
        };
        let kept = std::mem::replace(&mut self.kept, Retained::new(None));
        Ok(self.launched.execution(&self.inner.config, kept, status))
    }

    /// Runs the command to its end as [`SshExecutor::execute`] does: output to `sink`,
    /// killed at `timeout`.
    ///
    /// [`SshExecutor::execute`]: crate::SshExecutor::execute
    pub(crate) async fn finish(
        mut self,
        timeout: Option<std::time::Duration>,
        sink: &mut crate::command::OutputSink<'_>,
    ) -> Result<Execution> {
        let feeder = self.feeder.take();
        let stdin = self.stdin.take();
        let inner = self.inner.clone();
        let launched = std::mem::replace(&mut self.launched, Launched::ended());
        let execution = launched.finish(&inner, timeout, sink).await;
        drop(stdin);
        if let Some(feeder) = feeder {
            feeder.finish().await;
        }
        execution
    }

    /// Kills the command's whole process group (and a terminal's session): `SIGTERM`, the
    /// executor's `kill_grace`, then `SIGKILL`; waits (bounded) for it to end and returns
    /// what it printed, with the status it ended with, or
    /// [`ExitStatus::Unknown`] when the end was not seen in time.
    ///
    /// # Errors
    /// Connection and transport failures.
    pub async fn kill(mut self) -> Result<Execution> {
        if let Some(result) = self.finished.take() {
            let kept = std::mem::replace(&mut self.kept, Retained::new(None));
            return Ok(self.launched.execution(&self.inner.config, kept, result?));
        }
        self.launched.kill();
        let config = self.inner.config.clone();
        let mut status = ExitStatus::Unknown;
        let drain_until = crate::config::limit::deadline(
            tokio::time::Instant::now(),
            crate::config::limit::sum(&[
                config.kill_grace,
                config.drain_timeout,
                config.connect_timeout,
            ]),
        );
        loop {
            match self.launched.next(&config, drain_until).await {
                Some(Heard::Output(chunk)) => self.heard_output(&chunk),
                Some(Heard::Finished(result)) => {
                    self.heard_end(&result);
                    status = result?;
                    break;
                }
                None => break,
            }
        }
        // Killed without its end seen in time.
        self.heard_end(&Ok(status.clone()));
        let kept = std::mem::replace(&mut self.kept, Retained::new(None));
        self.release_stdin().await;
        Ok(self.launched.execution(&config, kept, status))
    }
}
