//! Terminals as tools an agent calls, shared by every door (the swiftide tools, the bamboo
//! adapter, the MCP server): the arguments with their JSON schemas, the operations on one
//! door's open terminals ([`TerminalSet`]), and the text a model reads. A door only maps its
//! own call and result types.
//!
//! The text keeps what is ours apart from what the program drew. Every line we write comes
//! before the screen: a status line (`terminal term-1: ...`), and for `terminal_screen` a
//! scrollback heading that says how many rows follow it. Then [`Screen::render`]'s header
//! line (`[screen 24 rows x 80 cols, cursor at row 3 col 10]`, also ours), and after it only
//! rows of the screen, verbatim, down to the end of the text. Anything quoted from the model
//! (a command, a regex) is Debug-quoted, so it cannot start a line of its own.
//!
//! Terminals are bound to the door that opened them: ids (`term-1`, `term-2`, ...) are the
//! door's own and never reused, at most [`MAX_OPEN_TERMINALS`] are open at once, and dropping
//! the [`TerminalSet`] (the door) kills every terminal still open (each [`Terminal`]'s drop
//! kills its session), so nothing outlives the agent on the host.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Arc, Mutex},
    time::Duration,
};

use regex::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::{sync::watch, time::Instant};

use super::{Key, Screen, Terminal, TerminalOptions, Until};
use crate::{
    command::ExitStatus,
    error::Error,
    executor::SshExecutor,
    jobs::tools::{exit_text, seconds},
};

/// The most terminals one door keeps open at once.
pub(crate) const MAX_OPEN_TERMINALS: usize = 8;
/// Columns of a new terminal when the model names none, and the range it may ask for.
const DEFAULT_COLS: u32 = 80;
const COLS: (u32, u32) = (20, 400);
/// Rows of a new terminal when the model names none, and the range it may ask for.
const DEFAULT_ROWS: u32 = 24;
const ROWS: (u32, u32) = (5, 200);
/// How long a screen must stay unchanged to count as settled, unless the model says.
const DEFAULT_QUIET: Duration = Duration::from_millis(300);
/// The longest `open_terminal` waits for the program's first screen to settle.
const OPEN_WAIT: Duration = Duration::from_secs(5);
/// How much longer `open_terminal` waits for a program that drew nothing while the executor
/// has no connection at all: it has not started, and the connection's own attempts (with
/// their retries) decide whether it will.
const CONNECT_WAIT: Duration = Duration::from_secs(60);
/// How often `open_terminal` looks whether the executor has connected meanwhile.
const CONNECT_POLL: Duration = Duration::from_millis(50);
/// How long a wait lasts when the model names no timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait a model may ask for.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);
/// After a send, how long a wait first gives the program to draw anything (the echo of
/// what was typed) before it looks at the screen: without it, a `wait_for` on the prompt
/// would match the prompt that was there before the command, and a quiet wait could end
/// before a slow link brought the echo back.
const FIRST_DRAW_GRACE: Duration = Duration::from_secs(2);
/// How often a wait for the first output looks.
const POLL: Duration = Duration::from_millis(10);
/// The most scrollback rows one `terminal_screen` returns.
pub(crate) const MAX_SCROLLBACK_LINES: u32 = 1000;
/// The most a compiled `wait_for` may take (the regex crate's own default is 10 MiB).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Arguments of `open_terminal`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OpenTerminalArgs {
    /// The program to run, as a shell command line: `python3 -q`, `psql mydb`, `top`,
    /// `bash --norc`. Defaults to the login shell, interactive.
    #[serde(default)]
    pub(crate) command: Option<String>,
    /// Columns, 20 to 400 (default 80).
    #[serde(default)]
    pub(crate) cols: Option<u32>,
    /// Rows, 5 to 200 (default 24).
    #[serde(default)]
    pub(crate) rows: Option<u32>,
    /// Directory to start in: absolute, or relative to the working directory.
    #[serde(default)]
    pub(crate) working_directory: Option<String>,
}

/// Arguments of `terminal_send`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TerminalSendArgs {
    /// The terminal's id, as open_terminal returned it (`term-1`).
    pub(crate) id: String,
    /// Text to type, as is. No Enter is added: press it with keys ["Enter"].
    #[serde(default)]
    pub(crate) text: Option<String>,
    /// Keys to press after the text, in order: Enter, Tab, Shift-Tab, Escape, Backspace,
    /// Delete, Up, Down, Left, Right, Home, End, PageUp, PageDown, F1..F12, Space, Ctrl
    /// with a letter (Ctrl-C interrupts, Ctrl-D ends input, Ctrl-L redraws), Alt with a
    /// character (Alt-x).
    #[serde(default)]
    pub(crate) keys: Option<Vec<String>>,
    /// Wait until this regular expression matches the screen's text (rows joined by
    /// newlines; `^` and `$` match at each row's start and end; rows have no trailing
    /// spaces, so a prompt `$ ` is the row `$`). It is tried once the program has drawn
    /// something after what was sent (at most 2 s later). Without it, the call waits for the
    /// screen to be quiet.
    #[serde(default)]
    pub(crate) wait_for: Option<String>,
    /// Without wait_for: return once the screen has not changed for this many milliseconds
    /// (default 300).
    #[serde(default)]
    pub(crate) quiet_ms: Option<u64>,
    /// Wait at most this many seconds (default 10, at most 600), then return the screen as
    /// it is.
    #[serde(default)]
    pub(crate) timeout_secs: Option<f64>,
}

/// Arguments of `terminal_screen`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TerminalScreenArgs {
    /// The terminal's id, as open_terminal returned it (`term-1`).
    pub(crate) id: String,
    /// Wait first until this regular expression matches the screen's text (as in
    /// terminal_send: rows joined by newlines, `^` and `$` at each row). Defaults to no wait.
    #[serde(default)]
    pub(crate) wait_for: Option<String>,
    /// Wait first until the screen has not changed for this many milliseconds. Defaults to
    /// no wait.
    #[serde(default)]
    pub(crate) quiet_ms: Option<u64>,
    /// Wait at most this many seconds (default 10, at most 600).
    #[serde(default)]
    pub(crate) timeout_secs: Option<f64>,
    /// Also return up to this many rows that scrolled off the top, oldest first (default 0,
    /// at most 1000).
    #[serde(default)]
    pub(crate) scrollback_lines: Option<u32>,
}

/// Arguments of `close_terminal`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseTerminalArgs {
    /// The terminal's id, as open_terminal returned it (`term-1`).
    pub(crate) id: String,
}

/// Arguments of `list_terminals` (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListTerminalsArgs {}

/// The descriptions of the five tools, the same behind every door.
pub(crate) const OPEN_TERMINAL_ABOUT: &str = "Open an interactive terminal on the remote host: \
    a program (by default the login shell) in a pseudo-terminal, for whatever needs a person at \
    a keyboard: REPLs (python3, psql, node), commands that ask questions (read -p, apt, \
    ssh-keygen, a y/N prompt), full-screen programs (less, top, vi). Returns the terminal's id \
    (term-1, ...) and its first screen once it settles. Type into it with terminal_send, read \
    it again with terminal_screen, and close it with close_terminal when done: at most 8 are \
    open at once. The terminal lives only as long as this session (it is not a background \
    job); for a command that just runs and prints, run it without a terminal.";
/// See [`OPEN_TERMINAL_ABOUT`].
pub(crate) const TERMINAL_SEND_ABOUT: &str = "Type into a terminal, wait, and return its screen. \
    text is typed as is, then keys are pressed in order: to run a command send text \"ls -la\" \
    with keys [\"Enter\"]; to answer a prompt send text \"y\" with keys [\"Enter\"]; to \
    interrupt a program send keys [\"Ctrl-C\"]; Tab completes, Up recalls history, Escape, \
    PageDown and F1..F12 work as on a keyboard. Then it waits: with wait_for, until that \
    regular expression matches the screen (e.g. the prompt \"^\\\\$$\" or \"^>>>$\", or the \
    answer you expect; rows have no trailing spaces), otherwise until the screen is quiet for \
    quiet_ms (default 300); at most timeout_secs (default 10). For a long command, pass its \
    prompt as wait_for and a larger timeout_secs. The first line says what happened (matched, \
    quiet, timed out, or the program ended); then the screen: a [screen ...] line with its \
    size and the cursor, then the rows exactly as shown.";
/// See [`OPEN_TERMINAL_ABOUT`].
pub(crate) const TERMINAL_SCREEN_ABOUT: &str = "Read a terminal's screen without typing \
    anything, optionally after waiting for wait_for (a regular expression on the screen, e.g. \
    the prompt coming back after a long build) or for quiet_ms without change, at most \
    timeout_secs (default 10). scrollback_lines adds up to that many rows that scrolled off \
    the top (default 0, at most 1000), under a heading saying how many follow.";
/// See [`OPEN_TERMINAL_ABOUT`].
pub(crate) const CLOSE_TERMINAL_ABOUT: &str = "Close a terminal: kill its program and \
    everything started in it (the whole session), and forget its id. Returns how the program \
    ended. Close terminals you no longer need: at most 8 are open at once, ended ones \
    included.";
/// See [`OPEN_TERMINAL_ABOUT`].
pub(crate) const LIST_TERMINALS_ABOUT: &str = "List the open terminals: id, whether the \
    program is still running, size and command.";

/// Why a shared tool call failed: a terminal tool's here, and the port tools'
/// (`forwards::tools`), which every door maps the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToolFailure {
    /// A mistake the model can act on (an unknown id, a bad key name or regex, too many
    /// terminals or ports, a program that has ended): the text it reads, as a failed tool
    /// result.
    Model(String),
    /// The host could not be asked (the executor is closed, the terminal or forward could not
    /// start on the connection): the door reports it as its framework's execution error.
    Host(String),
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolFailure::Model(text) | ToolFailure::Host(text) => f.write_str(text),
        }
    }
}

type ToolResult<T> = std::result::Result<T, ToolFailure>;

fn model(text: impl Into<String>) -> ToolFailure {
    ToolFailure::Model(text.into())
}

/// How a program ended, in a few words: `exited with code 0`, `killed by signal KILL`, or
/// why the terminal failed.
fn end_text(ended: &std::result::Result<ExitStatus, String>) -> String {
    match ended {
        Ok(status) => format!("the program has ended: {}", exit_text(status)),
        Err(reason) => format!("the terminal failed: {reason}"),
    }
}

/// What a wait waits for.
#[derive(Debug, Clone)]
enum Wait {
    /// Nothing: the screen as it is.
    Nothing,
    /// No change for this long.
    Quiet(Duration),
    /// A match of the regex on the screen's text.
    Screen(Regex),
}

/// A wait as the model asked for it.
#[derive(Debug, Clone)]
struct WaitPlan {
    wait: Wait,
    timeout: Duration,
}

impl WaitPlan {
    /// The wait of `wait_for`, `quiet_ms` and `timeout_secs`; without either of the first
    /// two, a quiet wait of the default length if `quiet_by_default`, else none.
    fn new(
        wait_for: Option<&str>,
        quiet_ms: Option<u64>,
        timeout_secs: Option<f64>,
        quiet_by_default: bool,
    ) -> ToolResult<Self> {
        let timeout = match timeout_secs {
            Some(secs) => seconds("timeout_secs", secs)
                .map_err(|e| model(error_text(&e)))?
                .min(MAX_WAIT),
            None => DEFAULT_TIMEOUT,
        };
        let wait = match (wait_for, quiet_ms) {
            (Some(pattern), _) => Wait::Screen(screen_regex(pattern)?),
            (None, Some(ms)) => Wait::Quiet(Duration::from_millis(ms)),
            (None, None) if quiet_by_default => Wait::Quiet(DEFAULT_QUIET),
            (None, None) => Wait::Nothing,
        };
        Ok(WaitPlan { wait, timeout })
    }
}

/// The message of one of the crate's errors without its `invalid input: ` prefix.
fn error_text(error: &Error) -> String {
    match error {
        Error::InvalidInput { reason } => reason.clone(),
        other => other.to_string(),
    }
}

/// `pattern` compiled as `wait_for` uses it: `^` and `$` at each row.
fn screen_regex(pattern: &str) -> ToolResult<Regex> {
    RegexBuilder::new(pattern)
        .multi_line(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            model(format!(
                "wait_for {pattern:?} is not a valid regular expression (Rust regex syntax): {e}; \
                 nothing was sent"
            ))
        })
}

/// The keys named, or the first bad name's error, which lists the names that work.
fn parse_keys(names: &[String]) -> ToolResult<Vec<Key>> {
    names
        .iter()
        .map(|name| {
            name.parse::<Key>().map_err(|e| {
                model(format!(
                    "{e}. Nothing was sent. Send words as text, and keys by name, e.g. text \
                     \"ls\" with keys [\"Enter\"]"
                ))
            })
        })
        .collect()
}

impl OpenTerminalArgs {
    /// The command as shown to the model (`None`: the login shell) and the options asked
    /// for (the working directory as given: a door that confines or roots paths replaces
    /// it).
    pub(crate) fn into_options(self) -> ToolResult<(Option<String>, TerminalOptions)> {
        let size = |name: &str, value: Option<u32>, default: u32, (min, max): (u32, u32)| {
            let value = value.unwrap_or(default);
            if (min..=max).contains(&value) {
                Ok(value)
            } else {
                Err(model(format!(
                    "{name} must be from {min} to {max}, not {value}"
                )))
            }
        };
        let cols = size("cols", self.cols, DEFAULT_COLS, COLS)?;
        let rows = size("rows", self.rows, DEFAULT_ROWS, ROWS)?;
        let mut options = TerminalOptions::default().size(cols, rows);
        if let Some(command) = &self.command {
            if command.trim().is_empty() {
                return Err(model(
                    "command is empty: omit it to open the login shell, or name a program",
                ));
            }
            options = options.command(command.clone());
        }
        if let Some(dir) = self.working_directory {
            options = options.current_dir(dir);
        }
        Ok((self.command, options))
    }
}

/// One open terminal of a set.
struct Entry {
    /// The command as the model gave it (`None`: the login shell).
    command: Option<String>,
    cols: u32,
    rows: u32,
    /// The terminal, held by one call at a time (so a send and its wait are not interleaved
    /// with another call's keys); `None` once closed.
    terminal: tokio::sync::Mutex<Option<Terminal>>,
    /// Set by `close_terminal`, to end a wait in progress at once.
    closing: watch::Sender<bool>,
}

impl Entry {
    fn label(&self) -> String {
        match &self.command {
            Some(command) => format!("command {command:?}"),
            None => "login shell".to_owned(),
        }
    }
}

#[derive(Default)]
struct Open {
    /// The number of the last id given (`term-N`); ids are never reused.
    last: u64,
    terminals: BTreeMap<u64, Arc<Entry>>,
}

/// The open terminals of one door, by id (`term-1`, `term-2`, ...), on one executor's host.
/// Dropping the set kills every terminal still open.
pub(crate) struct TerminalSet {
    executor: SshExecutor,
    limit: usize,
    open: Mutex<Open>,
}

impl fmt::Debug for TerminalSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let open: Vec<String> = self.lock().terminals.keys().map(|n| id(*n)).collect();
        f.debug_struct("TerminalSet")
            .field("host", &self.executor.host())
            .field("limit", &self.limit)
            .field("open", &open)
            .finish()
    }
}

fn id(number: u64) -> String {
    format!("term-{number}")
}

/// How a wait ended.
struct Seen {
    screen: Screen,
    reached: bool,
    ended: Option<std::result::Result<ExitStatus, String>>,
    elapsed: Duration,
}

/// Waits until the terminal has received more than `since` bytes, it ended, or `deadline`.
async fn first_output(terminal: &Terminal, since: u64, deadline: Instant) {
    loop {
        if terminal.bytes_received() > since || terminal.exit_status().is_some() {
            return;
        }
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        tokio::time::sleep((deadline - now).min(POLL)).await;
    }
}

/// Waits as `plan` says; with `first_draw = Some((bytes, grace))`, first for output beyond
/// `bytes` (up to `grace`), so the wait looks at what the program drew after a send.
async fn wait(terminal: &Terminal, plan: &WaitPlan, first_draw: Option<(u64, Duration)>) -> Seen {
    let started = Instant::now();
    let deadline = started + plan.timeout;
    let until = match &plan.wait {
        Wait::Nothing => None,
        Wait::Quiet(quiet) => Some(Until::Quiet(*quiet)),
        Wait::Screen(pattern) => Some(Until::Screen(pattern.clone())),
    };
    let (screen, reached) = match until {
        None => (terminal.screen(), true),
        Some(until) => {
            if let Some((since, grace)) = first_draw {
                first_output(terminal, since, deadline.min(started + grace)).await;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let waited = terminal.wait_for(&until, left).await;
            (waited.screen, waited.reached)
        }
    };
    Seen {
        screen,
        reached,
        ended: terminal.exit_status(),
        elapsed: started.elapsed(),
    }
}

/// A duration as a model reads it: `40 ms`, `1.2 s`.
fn duration_text(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// The status line of a wait: what happened, in the model's terms.
fn outcome(id: &str, plan: &WaitPlan, seen: &Seen) -> String {
    let after = duration_text(seen.elapsed);
    let ended = seen.ended.as_ref().map(end_text);
    let line = match (&plan.wait, seen.reached, ended) {
        (Wait::Nothing, _, None) => "the program is running".to_owned(),
        (Wait::Nothing, _, Some(ended)) => ended,
        (Wait::Screen(pattern), true, None) => {
            format!("wait_for {:?} matched after {after}", pattern.as_str())
        }
        (Wait::Screen(pattern), true, Some(ended)) => {
            format!("wait_for {:?} matched; {ended}", pattern.as_str())
        }
        (Wait::Screen(pattern), false, Some(ended)) => {
            format!("{ended} (wait_for {:?} did not match)", pattern.as_str())
        }
        (Wait::Screen(pattern), false, None) => format!(
            "timed out after {after}: wait_for {:?} did not match; the program is still \
             running",
            pattern.as_str()
        ),
        (Wait::Quiet(quiet), true, None) => format!(
            "the screen is quiet (no change for {} ms) after {after}",
            quiet.as_millis()
        ),
        (Wait::Quiet(_), _, Some(ended)) => ended,
        (Wait::Quiet(_), false, None) => format!(
            "timed out after {after}: the screen was still changing; the program is still \
             running"
        ),
    };
    format!("terminal {id}: {line}")
}

impl TerminalSet {
    /// No terminals yet, on `executor`'s host, at most [`MAX_OPEN_TERMINALS`] at once.
    pub(crate) fn new(executor: SshExecutor) -> Self {
        Self::with_limit(executor, MAX_OPEN_TERMINALS)
    }

    /// No terminals yet, at most `limit` (at least 1) at once.
    pub(crate) fn with_limit(executor: SshExecutor, limit: usize) -> Self {
        TerminalSet {
            executor,
            limit: limit.max(1),
            open: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent map.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The id as we write it and the entry of `id_text` (`term-2`, or just `2`), or the
    /// error naming the ids that exist.
    fn entry(&self, id_text: &str) -> ToolResult<(String, Arc<Entry>)> {
        let open = self.lock();
        let trimmed = id_text.trim();
        let number = trimmed
            .strip_prefix("term-")
            .unwrap_or(trimmed)
            .parse::<u64>()
            .ok();
        if let Some((n, entry)) = number.and_then(|n| Some((n, open.terminals.get(&n)?))) {
            return Ok((id(n), entry.clone()));
        }
        let known: Vec<String> = open.terminals.keys().map(|n| id(*n)).collect();
        let open_now = if known.is_empty() {
            "no terminal is open (open one with open_terminal)".to_owned()
        } else {
            format!("open terminals: {}", known.join(", "))
        };
        Err(model(match number {
            Some(n) if n >= 1 && n <= open.last => format!(
                "terminal {} was closed (ids are not reused); {open_now}",
                id(n)
            ),
            _ => format!("no terminal {id_text:?}; {open_now}"),
        }))
    }

    /// Opens a terminal and waits for its first screen to settle; returns its id and the
    /// text. A program that ended at once is closed again (its last screen is shown).
    pub(crate) async fn open(
        &self,
        command: Option<String>,
        options: TerminalOptions,
    ) -> ToolResult<(String, String)> {
        let (cols, rows) = (options.pty.cols, options.pty.rows);
        let (number, entry) = {
            let mut open = self.lock();
            if open.terminals.len() >= self.limit {
                let listed: Vec<String> = open
                    .terminals
                    .iter()
                    .map(|(n, entry)| format!("{} ({})", id(*n), entry.label()))
                    .collect();
                return Err(model(format!(
                    "{} terminals are open, the most at once: close one you no longer need with \
                     close_terminal first (open: {})",
                    open.terminals.len(),
                    listed.join(", ")
                )));
            }
            let terminal = self.executor.open_terminal(options).map_err(|e| match e {
                Error::InvalidInput { reason } => model(reason),
                other => ToolFailure::Host(other.to_string()),
            })?;
            open.last += 1;
            let number = open.last;
            let entry = Arc::new(Entry {
                command,
                cols,
                rows,
                terminal: tokio::sync::Mutex::new(Some(terminal)),
                closing: watch::Sender::new(false),
            });
            open.terminals.insert(number, entry.clone());
            (number, entry)
        };
        let id = id(number);
        let mut held = entry.terminal.lock().await;
        let Some(terminal) = held.as_ref() else {
            return Err(model(format!("terminal {id} was closed while it opened")));
        };
        let plan = WaitPlan {
            wait: Wait::Quiet(DEFAULT_QUIET),
            timeout: OPEN_WAIT,
        };
        let started = Instant::now();
        // The first output may take a few round trips: the quiet wait starts with it.
        let mut seen = wait(terminal, &plan, Some((0, OPEN_WAIT))).await;
        let connecting = || self.executor.pool_stats().connections == 0;
        if seen.ended.is_none() && terminal.bytes_received() == 0 && connecting() {
            // Not even connected yet (a program that just draws nothing would be): wait for
            // the connection's own attempts, so that a host that cannot be reached is this
            // call's error, not a later one's.
            let deadline = Instant::now() + CONNECT_WAIT;
            while connecting()
                && terminal.bytes_received() == 0
                && terminal.exit_status().is_none()
                && Instant::now() < deadline
            {
                tokio::time::sleep(CONNECT_POLL).await;
            }
            seen = wait(terminal, &plan, Some((0, OPEN_WAIT))).await;
            seen.elapsed = started.elapsed();
        }
        let opened = format!("terminal {id} opened ({cols}x{rows}): {}", entry.label());
        let status = match &seen.ended {
            Some(Err(reason)) => {
                // The channel, the terminal or the connection failed: nothing to show.
                drop(held.take());
                drop(held);
                self.forget(number);
                return Err(ToolFailure::Host(format!(
                    "the terminal could not be opened: {reason}"
                )));
            }
            Some(Ok(_)) => {
                if let Some(terminal) = held.take() {
                    let _ = terminal.close().await;
                }
                drop(held);
                self.forget(number);
                format!(
                    "{}; it is closed now (its id is gone), and this is its last screen",
                    outcome(&id, &plan, &seen)
                )
            }
            None if !seen.reached && seen.screen.text().is_empty() => format!(
                "terminal {id}: nothing drawn yet after {}; the program is running",
                duration_text(seen.elapsed)
            ),
            None => outcome(&id, &plan, &seen),
        };
        Ok((id, format!("{opened}\n{status}\n{}", seen.screen.render())))
    }

    fn forget(&self, number: u64) -> Option<Arc<Entry>> {
        self.lock().terminals.remove(&number)
    }

    /// Types `text`, presses `keys`, waits as asked, and returns the screen.
    pub(crate) async fn send(&self, args: TerminalSendArgs) -> ToolResult<String> {
        // Everything is checked before anything is typed.
        let keys = parse_keys(args.keys.as_deref().unwrap_or_default())?;
        let plan = WaitPlan::new(
            args.wait_for.as_deref(),
            args.quiet_ms,
            args.timeout_secs,
            true,
        )?;
        let (id, entry) = self.entry(&args.id)?;
        let id = id.as_str();
        let mut closing = entry.closing.subscribe();
        let held = entry.terminal.lock().await;
        let terminal = held.as_ref().ok_or_else(|| closed(id))?;
        let not_sent = |ended: &std::result::Result<ExitStatus, String>| {
            model(format!(
                "terminal {id}: {}; nothing was sent. Read its last screen with \
                 terminal_screen, and close it with close_terminal",
                end_text(ended)
            ))
        };
        if let Some(ended) = terminal.exit_status() {
            return Err(not_sent(&ended));
        }
        let before = terminal.bytes_received();
        let sends = args.text.as_ref().is_some_and(|text| !text.is_empty()) || !keys.is_empty();
        let typed = async {
            if let Some(text) = &args.text {
                terminal.send_text(text).await?;
            }
            terminal.send_keys(&keys).await
        };
        if typed.await.is_err() {
            // The program ended meanwhile.
            let ended = terminal.exit_status().unwrap_or(Ok(ExitStatus::Unknown));
            return Err(not_sent(&ended));
        }
        let seen = tokio::select! {
            seen = wait(terminal, &plan, sends.then_some((before, FIRST_DRAW_GRACE))) => seen,
            _ = closing.wait_for(|closing| *closing) => return Err(closed_while_waiting(id)),
        };
        Ok(format!(
            "{}\n{}",
            outcome(id, &plan, &seen),
            seen.screen.render()
        ))
    }

    /// The screen, after the wait asked for, with scrollback rows before it if asked.
    pub(crate) async fn screen(&self, args: TerminalScreenArgs) -> ToolResult<String> {
        let plan = WaitPlan::new(
            args.wait_for.as_deref(),
            args.quiet_ms,
            args.timeout_secs,
            false,
        )?;
        let (id, entry) = self.entry(&args.id)?;
        let id = id.as_str();
        let mut closing = entry.closing.subscribe();
        let held = entry.terminal.lock().await;
        let terminal = held.as_ref().ok_or_else(|| closed(id))?;
        let seen = tokio::select! {
            seen = wait(terminal, &plan, None) => seen,
            _ = closing.wait_for(|closing| *closing) => return Err(closed_while_waiting(id)),
        };
        let mut text = outcome(id, &plan, &seen);
        let wanted = args.scrollback_lines.unwrap_or(0).min(MAX_SCROLLBACK_LINES);
        if wanted > 0 {
            let rows = terminal.scrollback(usize::try_from(wanted).unwrap_or(usize::MAX));
            let kept = terminal.scrollback_len();
            let heading = if rows.is_empty() && seen.screen.alternate_screen {
                "[scrollback: 0 rows (a full-screen program is drawing: its screen has none); \
                 the screen follows]"
                    .to_owned()
            } else {
                format!(
                    "[scrollback: the last {} of {kept} rows kept, oldest first; the screen \
                     follows]",
                    rows.len()
                )
            };
            text.push('\n');
            text.push_str(&heading);
            for row in rows {
                text.push('\n');
                text.push_str(&row);
            }
        }
        text.push('\n');
        text.push_str(&seen.screen.render());
        Ok(text)
    }

    /// Kills the terminal's session, forgets its id, and says how it ended.
    pub(crate) async fn close(&self, args: CloseTerminalArgs) -> ToolResult<String> {
        let (id, entry) = self.entry(&args.id)?;
        let id = id.as_str();
        {
            // Gone for every later call; a wait in progress ends now.
            let mut open = self.lock();
            open.terminals
                .retain(|_, other| !Arc::ptr_eq(other, &entry));
        }
        entry.closing.send_replace(true);
        let Some(terminal) = entry.terminal.lock().await.take() else {
            return Err(closed(id));
        };
        let before = terminal.exit_status();
        let ended = terminal.close().await;
        Ok(match (before, ended) {
            (Some(Ok(status)), _) => format!(
                "terminal {id} closed; the program had already ended: {}",
                exit_text(&status)
            ),
            (Some(Err(reason)), _) => {
                format!("terminal {id} closed; the terminal had already failed: {reason}")
            }
            (None, Ok(status)) => format!(
                "terminal {id} closed: its session was killed; the program ended: {}",
                exit_text(&status)
            ),
            (None, Err(reason)) => format!(
                "terminal {id} closed: its session was killed; the terminal failed: {reason}"
            ),
        })
    }

    /// One line per open terminal.
    pub(crate) fn list(&self) -> String {
        let open = self.lock();
        let mut text = match open.terminals.len() {
            0 => format!(
                "no terminals open (at most {} at once; open one with open_terminal)",
                self.limit
            ),
            n => format!("{n} of at most {} terminals open:", self.limit),
        };
        for (number, entry) in &open.terminals {
            let state = match entry.terminal.try_lock() {
                Ok(held) => match held.as_ref().map(Terminal::exit_status) {
                    Some(None) => "running".to_owned(),
                    Some(Some(ended)) => end_text(&ended),
                    None => "closing".to_owned(),
                },
                Err(_) => "running, in use by a call in progress".to_owned(),
            };
            text.push_str(&format!(
                "\n{}: {state}, {}x{}, {}",
                id(*number),
                entry.cols,
                entry.rows,
                entry.label()
            ));
        }
        text
    }
}

fn closed(id: &str) -> ToolFailure {
    model(format!("terminal {id} was closed (ids are not reused)"))
}

fn closed_while_waiting(id: &str) -> ToolFailure {
    model(format!(
        "terminal {id} was closed by close_terminal while this call waited"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(lines: &[&str]) -> Screen {
        let mut state = super::super::screen::ScreenState::new(5, 20, 10);
        state.process(lines.join("\r\n").as_bytes());
        state.snapshot()
    }

    #[test]
    fn bad_keys_name_the_accepted_forms_and_good_ones_parse() {
        let keys = parse_keys(&["Enter".to_owned(), "ctrl-c".to_owned(), "Up".to_owned()]).unwrap();
        assert_eq!(keys, [Key::Enter, Key::Ctrl('C'), Key::Up]);
        let Err(ToolFailure::Model(text)) = parse_keys(&["Enter".to_owned(), "Return!".to_owned()])
        else {
            panic!("a bad key must be a model error");
        };
        assert!(text.contains("\"Return!\""), "{text}");
        assert!(text.contains("Ctrl-<letter>"), "{text}");
        assert!(text.contains("Nothing was sent"), "{text}");
    }

    #[test]
    fn waits_are_checked_and_bounded() {
        let plan = WaitPlan::new(None, None, None, true).unwrap();
        assert!(matches!(plan.wait, Wait::Quiet(q) if q == DEFAULT_QUIET));
        assert_eq!(plan.timeout, DEFAULT_TIMEOUT);
        let plan = WaitPlan::new(None, None, Some(1e9), false).unwrap();
        assert!(matches!(plan.wait, Wait::Nothing));
        assert_eq!(plan.timeout, MAX_WAIT);
        let plan = WaitPlan::new(Some("^42$"), Some(5), Some(1.5), true).unwrap();
        let Wait::Screen(pattern) = &plan.wait else {
            panic!("wait_for wins over quiet_ms");
        };
        assert!(
            pattern.is_match("6*7\n42\n>>>"),
            "^ and $ match at each row"
        );
        let Err(ToolFailure::Model(text)) = WaitPlan::new(Some("(unclosed"), None, None, true)
        else {
            panic!("a bad regex must be a model error");
        };
        assert!(text.contains("\"(unclosed\""), "{text}");
        assert!(WaitPlan::new(None, None, Some(-1.0), true).is_err());
        assert!(WaitPlan::new(None, None, Some(f64::NAN), true).is_err());
    }

    #[test]
    fn open_arguments_are_checked() {
        let args = |json: &str| serde_json::from_str::<OpenTerminalArgs>(json).unwrap();
        let (command, options) = args("{}").into_options().unwrap();
        assert_eq!(command, None);
        assert_eq!(options.command, None);
        assert_eq!((options.pty.cols, options.pty.rows), (80, 24));
        let (command, options) = args(
            r#"{"command": "python3 -q", "cols": 120, "rows": 40, "working_directory": "/tmp"}"#,
        )
        .into_options()
        .unwrap();
        assert_eq!(command.as_deref(), Some("python3 -q"));
        assert_eq!(options.command.as_deref(), Some("python3 -q"));
        assert_eq!((options.pty.cols, options.pty.rows), (120, 40));
        assert_eq!(options.current_dir.unwrap(), std::path::Path::new("/tmp"));
        for bad in [
            r#"{"cols": 19}"#,
            r#"{"cols": 401}"#,
            r#"{"rows": 4}"#,
            r#"{"rows": 201}"#,
            r#"{"command": "  "}"#,
        ] {
            assert!(
                matches!(args(bad).into_options(), Err(ToolFailure::Model(_))),
                "{bad}"
            );
        }
        assert!(serde_json::from_str::<OpenTerminalArgs>(r#"{"shell": "sh"}"#).is_err());
    }

    #[test]
    fn status_lines_say_what_happened_in_one_line_before_the_screen() {
        let seen = |reached, ended| Seen {
            screen: screen(&["6*7", "42", ">>>"]),
            reached,
            ended,
            elapsed: Duration::from_millis(1234),
        };
        let regex = WaitPlan::new(Some("^42$"), None, None, true).unwrap();
        let quiet = WaitPlan::new(None, None, None, true).unwrap();
        let none = WaitPlan::new(None, None, None, false).unwrap();
        let cases = [
            (
                &regex,
                seen(true, None),
                r#"terminal term-1: wait_for "^42$" matched after 1.2 s"#,
            ),
            (
                &regex,
                seen(false, None),
                r#"terminal term-1: timed out after 1.2 s: wait_for "^42$" did not match; the program is still running"#,
            ),
            (
                &regex,
                seen(false, Some(Ok(ExitStatus::Code(3)))),
                r#"terminal term-1: the program has ended: exited with code 3 (wait_for "^42$" did not match)"#,
            ),
            (
                &quiet,
                seen(true, None),
                "terminal term-1: the screen is quiet (no change for 300 ms) after 1.2 s",
            ),
            (
                &quiet,
                seen(false, None),
                "terminal term-1: timed out after 1.2 s: the screen was still changing; the program is still running",
            ),
            (
                &quiet,
                seen(false, Some(Err("connection lost".into()))),
                "terminal term-1: the terminal failed: connection lost",
            ),
            (
                &none,
                seen(true, None),
                "terminal term-1: the program is running",
            ),
        ];
        for (plan, seen, expected) in cases {
            let line = outcome("term-1", plan, &seen);
            assert_eq!(line, expected);
            assert!(!line.contains('\n'));
        }
        assert_eq!(duration_text(Duration::from_millis(40)), "40 ms");
        assert_eq!(duration_text(Duration::from_millis(10_049)), "10.0 s");
        // A regex with a newline in it stays on its line.
        let odd = WaitPlan::new(Some("a\nb"), None, None, true).unwrap();
        assert!(!outcome("term-1", &odd, &seen(true, None)).contains('\n'));
    }
}
