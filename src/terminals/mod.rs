//! Terminals for agents: a long-lived program in a pseudo-terminal on the host (an
//! interactive shell by default), whose screen is rebuilt here from what it draws, so that a
//! model reads lines of text and a cursor instead of escape codes, and drives it with text
//! and named keys.
//!
//! A [`Terminal`] is a [`Process`] in a [`Pty`] with a task that feeds its output into a
//! [`ScreenState`](screen::ScreenState) (the `vt100` emulator, see [`screen`]) as it arrives.
//! It is bound to its connection: it does not survive the client, and when the client or the
//! connection goes, the host hangs up the terminal and the command's supervisor kills what
//! is left of its session (see `command::supervisor`), so nothing is orphaned.
//! [`Terminal::close`] and dropping the `Terminal` kill the whole session too.

pub(crate) mod keys;
mod recording;
pub(crate) mod screen;
pub(crate) mod tools;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{oneshot, watch};

pub use keys::{Key, KeyParseError};
pub use screen::Screen;

use crate::{
    command::{ExitStatus, OutputChunk, Process, ProcessInput, Pty},
    error::{Error, Result},
    executor::{ExecOptions, SshExecutor},
};

/// Settings of a [`Terminal`] ([`SshExecutor::open_terminal`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TerminalOptions {
    /// The program to run. Defaults to the login's shell, interactive:
    /// `exec "${SHELL:-/bin/sh}" -i`.
    pub command: Option<String>,
    /// The terminal: size, `TERM`, modes. Defaults to 80 × 24, `xterm-256color`.
    pub pty: Pty,
    /// Where the program starts, as for commands. Defaults to the workdir.
    pub current_dir: Option<PathBuf>,
    /// Rows kept once they scroll off the top. Defaults to 1000 (at most 5000).
    pub scrollback: usize,
    /// An asciicast v3 recording of the terminal (output, resizes, the exit status) written
    /// to this local file as it happens, for `asciinema play`; named in the audit trail.
    /// Defaults to none.
    pub record: Option<PathBuf>,
    /// Whether the recording holds typed input too (never a line typed while the screen
    /// asks for a password or passphrase). Defaults to false.
    pub record_input: bool,
}

impl Default for TerminalOptions {
    fn default() -> Self {
        TerminalOptions {
            command: None,
            pty: Pty::default(),
            current_dir: None,
            scrollback: 1000,
            record: None,
            record_input: false,
        }
    }
}

impl TerminalOptions {
    /// Runs `command` instead of the login shell.
    #[must_use]
    pub fn command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// Sets the terminal's size.
    #[must_use]
    pub fn size(mut self, cols: u32, rows: u32) -> Self {
        self.pty.cols = cols;
        self.pty.rows = rows;
        self
    }

    /// Sets the directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Records the terminal into `path` (see [`record`](Self::record)). Defaults to none.
    #[must_use]
    pub fn record(mut self, path: impl Into<PathBuf>) -> Self {
        self.record = Some(path.into());
        self
    }

    /// Records typed input too (see [`record_input`](Self::record_input)). Defaults to
    /// false.
    #[must_use]
    pub fn record_input(mut self, input: bool) -> Self {
        self.record_input = input;
        self
    }
}

/// What [`Terminal::wait_for`] waits for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Until {
    /// A match of the regular expression anywhere on the screen's text (rows joined by
    /// `\n`).
    Screen(regex::Regex),
    /// No output for this long (the program waits for input, or works silently).
    Quiet(Duration),
    /// The program ended.
    Exit,
}

/// How a [`Terminal::wait_for`] ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Waited {
    /// The screen then.
    pub screen: Screen,
    /// Whether what was waited for happened (otherwise the timeout passed, or the program
    /// ended first).
    pub reached: bool,
    /// How the program ended, if it did.
    pub exited: Option<ExitStatus>,
}

/// What the reader task and the handle share.
struct Shared {
    screen: Mutex<screen::ScreenState>,
    /// The screen's version (it changes with every change drawn), and once more at the end.
    output: watch::Sender<u64>,
    ended: Mutex<Option<std::result::Result<ExitStatus, String>>>,
    recording: Option<recording::Recording>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, screen::ScreenState> {
        // A poisoned lock only means a panic elsewhere while feeding the parser.
        self.screen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ended(&self) -> Option<std::result::Result<ExitStatus, String>> {
        self.ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// An interactive program in a pseudo-terminal on the host, with its screen kept here (see
/// the [module docs](self)).
///
/// Dropping a `Terminal` kills its program's whole session in the background, best effort
/// (it needs the connection): [`close`](Self::close) does it and waits.
pub struct Terminal {
    host: String,
    shared: Arc<Shared>,
    input: ProcessInput,
    close: Option<oneshot::Sender<()>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("host", &self.host)
            .field("ended", &self.shared.ended())
            .finish_non_exhaustive()
    }
}

impl SshExecutor {
    /// Opens a terminal on the host: `options.command` (the login shell by default) in a
    /// pseudo-terminal, its screen kept here (see [`Terminal`]). Returns at once; the program
    /// starts meanwhile.
    ///
    /// # Errors
    /// Invalid input; [`Error::Closed`]. A refused terminal or connection failure shows as
    /// the terminal ending ([`Terminal::exit_status`]).
    pub fn open_terminal(&self, options: TerminalOptions) -> Result<Terminal> {
        let command = options
            .command
            .clone()
            .unwrap_or_else(|| "exec \"${SHELL:-/bin/sh}\" -i".to_owned());
        let rows = u16::try_from(options.pty.rows).unwrap_or(u16::MAX);
        let cols = u16::try_from(options.pty.cols).unwrap_or(u16::MAX);
        let mut exec = ExecOptions::default().pty(options.pty.clone());
        exec.current_dir = options.current_dir.clone();
        // Before the program starts: a file that cannot be made fails the open.
        let recording = match &options.record {
            Some(path) => Some(recording::Recording::start(
                path,
                (cols, rows),
                &options.pty.term,
                &command,
                options.record_input,
            )?),
            None => None,
        };
        let mut process = self.spawn_in_terminal(&command, exec)?;
        if let Some(path) = &options.record {
            process.note_audit(|record| {
                record.path = Some(crate::audit::path_text(path));
            });
        }
        let input = process.input().ok_or_else(|| Error::InvalidInput {
            reason: "the terminal's input is closed".to_owned(),
        })?;
        let state = screen::ScreenState::new(rows, cols, options.scrollback);
        let (output, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            screen: Mutex::new(state),
            output,
            ended: Mutex::new(None),
            recording,
        });
        let (close, closing) = oneshot::channel();
        let reader = tokio::spawn(read_output(process, shared.clone(), closing));
        Ok(Terminal {
            host: self.host().to_owned(),
            shared,
            input,
            close: Some(close),
            reader: Some(reader),
        })
    }
}

/// Feeds the program's output into the screen until it ends, or kills it when asked.
async fn read_output(
    mut process: Process,
    shared: Arc<Shared>,
    mut closing: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            chunk = process.next() => match chunk {
                Some(chunk) => {
                    let bytes = match &chunk {
                        OutputChunk::Stdout(bytes) | OutputChunk::Stderr(bytes) => bytes,
                    };
                    if let Some(recording) = &shared.recording {
                        recording.output(bytes);
                    }
                    let drawn = {
                        let mut screen = shared.lock();
                        screen.process(bytes);
                        screen.version()
                    };
                    shared.output.send_replace(drawn);
                }
                None => break,
            },
            _ = &mut closing => {
                let ended = process
                    .kill()
                    .await
                    .map(|run| run.status)
                    .map_err(|e| e.with_causes());
                finish(&shared, ended);
                return;
            }
        }
    }
    let ended = process
        .wait()
        .await
        .map(|run| run.status)
        .map_err(|e| e.with_causes());
    finish(&shared, ended);
}

fn finish(shared: &Shared, ended: std::result::Result<ExitStatus, String>) {
    if let Some(recording) = &shared.recording {
        recording.exit(&ended);
    }
    *shared
        .ended
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ended);
    shared.output.send_modify(|count| *count += 1);
}

impl Terminal {
    /// Types `text` into the terminal, as is (a `\r` is the Enter key; see [`Key`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] once the program has ended.
    pub async fn send_text(&self, text: &str) -> Result<()> {
        self.send_bytes(text.as_bytes().to_vec()).await
    }

    /// Presses `keys`, one after another, as the terminal's current mode encodes them
    /// (arrows differ in a full-screen program's application mode).
    ///
    /// # Errors
    /// As [`send_text`](Self::send_text).
    pub async fn send_keys(&self, keys: &[Key]) -> Result<()> {
        let modes = self.shared.lock().key_modes();
        let bytes: Vec<u8> = keys
            .iter()
            .flat_map(|key| keys::encode(*key, modes))
            .collect();
        self.send_bytes(bytes).await
    }

    /// Types raw bytes into the terminal (any bytes: what a program reading its terminal
    /// raw would get).
    ///
    /// Keep a burst of input under 256 KiB while the terminal's echo is off: OpenSSH's sshd then
    /// answers each write to the terminal with an equally large `SSH_MSG_IGNORE` ("simulated
    /// echo"), and one above 256 KiB is larger than any SSH client accepts, so the connection
    /// is lost (see the guide's [Terminals](crate::guide::terminals#terminals)).
    ///
    /// # Errors
    /// As [`send_text`](Self::send_text).
    pub async fn send_bytes(&self, bytes: impl Into<Vec<u8>>) -> Result<()> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(recording) = &self.shared.recording {
            recording.input(&bytes, || self.screen());
        }
        if self.input.write(bytes.into()).await {
            Ok(())
        } else {
            Err(Error::InvalidInput {
                reason: "the terminal's program has ended".to_owned(),
            })
        }
    }

    /// The screen now.
    pub fn screen(&self) -> Screen {
        self.shared.lock().snapshot()
    }

    /// The last `lines` rows that scrolled off the top, oldest first (none while a
    /// full-screen program uses the alternate screen).
    pub fn scrollback(&self, lines: usize) -> Vec<String> {
        self.shared.lock().scrollback(lines)
    }

    /// How many rows have scrolled off the top and are kept.
    pub fn scrollback_len(&self) -> usize {
        self.shared.lock().scrollback_len()
    }

    /// How many bytes the program has written to the terminal so far.
    pub fn bytes_received(&self) -> u64 {
        self.shared.lock().bytes_processed()
    }

    /// Resizes the terminal: the program gets `SIGWINCH` and the new size.
    pub fn resize(&self, cols: u16, rows: u16) {
        if let Some(recording) = &self.shared.recording {
            recording.resize(cols, rows);
        }
        self.shared.lock().resize(rows, cols);
        self.input.resize(u32::from(cols), u32::from(rows));
    }

    /// How the program ended, once it has (`Err` with the reason when the connection or the
    /// terminal failed).
    pub fn exit_status(&self) -> Option<std::result::Result<ExitStatus, String>> {
        self.shared.ended()
    }

    /// Waits up to `timeout` for `until`, and returns the screen then. [`Until::Quiet`]
    /// counts from the call, and restarts with every change drawn on the screen.
    pub async fn wait_for(&self, until: &Until, timeout: Duration) -> Waited {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut output = self.shared.output.subscribe();
        let mut quiet_since = tokio::time::Instant::now();
        let mut seen = *output.borrow_and_update();
        loop {
            let exited = self
                .shared
                .ended()
                .map(|ended| ended.unwrap_or(ExitStatus::Unknown));
            let screen = self.screen();
            let reached = match until {
                Until::Screen(pattern) => pattern.is_match(&screen.text()),
                Until::Exit => exited.is_some(),
                Until::Quiet(quiet) => quiet_since.elapsed() >= *quiet,
            };
            if reached || exited.is_some() || tokio::time::Instant::now() >= deadline {
                return Waited {
                    screen,
                    reached,
                    exited,
                };
            }
            let wake = match until {
                Until::Quiet(quiet) => (quiet_since + *quiet).min(deadline),
                _ => deadline,
            };
            match tokio::time::timeout_at(wake, output.changed()).await {
                Ok(Ok(())) => {
                    let now = *output.borrow_and_update();
                    if now != seen {
                        seen = now;
                        quiet_since = tokio::time::Instant::now();
                    }
                }
                // The reader is gone: the end is recorded; the loop reports it.
                Ok(Err(_)) => tokio::time::sleep_until(wake).await,
                Err(_) => {}
            }
        }
    }

    /// Kills the program's whole session (`SIGTERM`, the executor's `kill_grace`,
    /// `SIGKILL`) unless it has ended, and returns how it ended.
    pub async fn close(mut self) -> std::result::Result<ExitStatus, String> {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.await;
        }
        self.shared.ended().unwrap_or(Ok(ExitStatus::Unknown))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Best effort: the reader kills the program when told to; when the runtime is gone
        // the process handle's own drop kills it.
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
    }
}
