//! Jobs as tools an agent calls, shared by every door (the swiftide tools, the bamboo
//! adapter's background shells, the MCP server): the arguments with their JSON schemas, the
//! operations, and the text a model reads. A door only maps its own call and result types.
//!
//! The text names everything the model needs for its next call: the job's state (exit code
//! or signal), the cursor to pass back (`stdout=N,stderr=M`, exact byte offsets), and bytes
//! the host dropped. Output is decoded lossily for the model, but a UTF-8 sequence cut by a
//! read is held back for the next read instead of being mangled, so the offsets stay exact.

use std::{fmt, str::FromStr, time::Duration};

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Job, JobCursor, JobDrop, JobEndCause, JobInfo, JobOptions, JobStatus, JobStream};
use crate::{
    command::ExitStatus,
    error::{Error, Result},
    executor::SshExecutor,
};

/// Bytes of each stream one output call returns when the caller sets no limit.
pub(crate) const DEFAULT_OUTPUT_BYTES: u64 = 16 * 1024;
/// The most bytes of each stream one output call returns.
pub(crate) const MAX_OUTPUT_BYTES: u64 = 1 << 20;
/// The smallest read: room for any one UTF-8 sequence, so a read always makes progress.
const MIN_OUTPUT_BYTES: u64 = 4;
/// The longest a status call waits for the end.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);
/// The grace between `SIGTERM` and `SIGKILL` of a kill when the caller sets none.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// The longest kill grace a caller may ask for.
const MAX_KILL_GRACE: Duration = Duration::from_secs(60);
/// How long a poll that found both streams ended waits for the exit record.
const END_RECORD_WAIT: Duration = Duration::from_millis(500);
/// Characters of a command shown in a listing.
const LISTED_COMMAND_CHARS: usize = 120;

/// The text form is `stdout=N,stderr=M` (byte offsets), what the agent tools show and accept.
impl fmt::Display for JobCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stdout={},stderr={}", self.stdout, self.stderr)
    }
}

/// Parses the text form `stdout=N,stderr=M` (either order, spaces allowed; a missing stream
/// is offset 0, so `stdout=0` and the empty text both mean the start).
impl FromStr for JobCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidInput {
            reason: format!(
                "cursor {text:?} is not of the form stdout=N,stderr=M (pass the cursor a previous \
                 call returned, or omit it to read from the start)"
            ),
        };
        let mut cursor = JobCursor::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(invalid)?;
            let value: u64 = value.trim().parse().map_err(|_| invalid())?;
            match name.trim() {
                "stdout" => cursor.stdout = value,
                "stderr" => cursor.stderr = value,
                _ => return Err(invalid()),
            }
        }
        Ok(cursor)
    }
}

/// A label of `start_job`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobLabel {
    /// The label's name.
    pub(crate) key: String,
    /// Its value.
    pub(crate) value: String,
}

/// Arguments of `start_job`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartJobArgs {
    /// The shell command, run with `sh -c` on the remote host (stdin empty, no terminal). It
    /// runs detached: it outlives this call, the connection and the agent, until it ends or
    /// is killed. Use it for builds, test suites and servers.
    pub(crate) command: String,
    /// An id of your choice: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-`.
    /// Starting the same id with the same command again returns the existing job instead of
    /// running it twice. Defaults to a random id.
    #[serde(default)]
    pub(crate) id: Option<String>,
    /// Directory to run in: absolute, or relative to the working directory.
    #[serde(default)]
    pub(crate) working_directory: Option<String>,
    /// Kill the job after this many seconds, even with nobody watching. Defaults to no
    /// deadline.
    #[serde(default)]
    pub(crate) deadline_secs: Option<f64>,
    /// Labels to recognize the job by in `list_jobs`.
    #[serde(default)]
    pub(crate) labels: Option<Vec<JobLabel>>,
}

/// Arguments of `job_output`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobOutputArgs {
    /// The job's id.
    pub(crate) id: String,
    /// Where to continue: the `cursor` the previous call returned (`stdout=N,stderr=M`).
    /// Omit it to read from the start. Reading consumes nothing: the same cursor returns the
    /// same output again.
    #[serde(default)]
    pub(crate) cursor: Option<String>,
    /// At most this many bytes of each stream (default 16384, at most 1048576).
    #[serde(default)]
    pub(crate) max_bytes: Option<u64>,
}

/// Arguments of `job_status`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobStatusArgs {
    /// The job's id.
    pub(crate) id: String,
    /// Wait up to this many seconds (at most 600) for the job to end before answering.
    /// Defaults to answering at once.
    #[serde(default)]
    pub(crate) wait_secs: Option<f64>,
}

/// Arguments of `kill_job`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillJobArgs {
    /// The job's id.
    pub(crate) id: String,
    /// Seconds between SIGTERM and SIGKILL (default 2, at most 60).
    #[serde(default)]
    pub(crate) grace_secs: Option<f64>,
}

/// Arguments of `list_jobs` (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListJobsArgs {}

/// The descriptions of the five tools, the same behind every door.
pub(crate) const START_JOB_ABOUT: &str = "Start a shell command as a background job on the \
    remote host and return at once with its id. The job outlives this call, the connection \
    and the agent: read its output with job_output, check it with job_status, stop it with \
    kill_job.";
/// See [`START_JOB_ABOUT`].
pub(crate) const JOB_OUTPUT_ABOUT: &str = "Read a job's stdout and stderr since a cursor, and its \
    state. Pass the cursor the previous call returned to get only what is new; nothing is \
    consumed, so repeating a call is safe.";
/// See [`START_JOB_ABOUT`].
pub(crate) const JOB_STATUS_ABOUT: &str = "A job's state (running, exit code or signal, lost), \
    optionally waiting up to wait_secs for it to end.";
/// See [`START_JOB_ABOUT`].
pub(crate) const KILL_JOB_ABOUT: &str = "Kill a job's whole process group (SIGTERM, then \
    SIGKILL after the grace period) and return its final state.";
/// See [`START_JOB_ABOUT`].
pub(crate) const LIST_JOBS_ABOUT: &str = "List the jobs on the remote host with their state, \
    command and labels.";

/// Seconds as given by a model: finite and not negative.
pub(crate) fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| Error::InvalidInput {
        reason: format!("{name} must be a number of seconds of at least 0, not {value}"),
    })
}

impl StartJobArgs {
    /// The command and the options it asks for (the working directory as given: a door that
    /// confines paths replaces it).
    pub(crate) fn into_options(self) -> Result<(String, JobOptions)> {
        let mut options = JobOptions::new();
        if let Some(id) = self.id {
            options = options.id(id);
        }
        if let Some(dir) = self.working_directory {
            options = options.current_dir(dir);
        }
        if let Some(deadline) = self.deadline_secs {
            options = options.deadline(seconds("deadline_secs", deadline)?);
        }
        for label in self.labels.unwrap_or_default() {
            options = options.label(label.key, label.value);
        }
        Ok((self.command, options))
    }
}

impl JobOutputArgs {
    /// The cursor and the byte limit asked for.
    pub(crate) fn cursor_and_limit(&self) -> Result<(JobCursor, u64)> {
        let cursor = self.cursor.as_deref().unwrap_or("").parse()?;
        let max = self
            .max_bytes
            .unwrap_or(DEFAULT_OUTPUT_BYTES)
            .clamp(MIN_OUTPUT_BYTES, MAX_OUTPUT_BYTES);
        Ok((cursor, max))
    }
}

impl JobStatusArgs {
    /// The wait asked for.
    pub(crate) fn wait(&self) -> Result<Option<Duration>> {
        self.wait_secs.map(|s| seconds("wait_secs", s)).transpose()
    }
}

impl KillJobArgs {
    /// The grace asked for.
    pub(crate) fn grace(&self) -> Result<Option<Duration>> {
        self.grace_secs
            .map(|s| seconds("grace_secs", s))
            .transpose()
    }
}

/// The text a model reads for an error it can act on (a bad or unknown id, a job that
/// exists with another command, a bad argument, a job the host cannot start); `None` for
/// transport and connection failures, which the door reports as its framework's execution
/// error.
pub(crate) fn model_facing(error: &Error) -> Option<String> {
    match error {
        Error::InvalidJobId { .. }
        | Error::JobNotFound { .. }
        | Error::JobExists { .. }
        | Error::JobStart { .. }
        | Error::JobRunning { .. }
        | Error::JobPidReused { .. }
        | Error::InvalidInput { .. } => Some(error.to_string()),
        _ => None,
    }
}

/// A state in a few words: `running (pid 42)`, `exited with code 0`, `killed by signal TERM`.
pub(crate) fn status_text(status: &JobStatus) -> String {
    match status {
        JobStatus::Starting => "starting".to_owned(),
        JobStatus::Running { pid, .. } => format!("running (pid {pid})"),
        JobStatus::Exited(exit) => exit_text(exit),
        JobStatus::Lost => "lost: its processes are gone without an exit status (the host \
                            rebooted, or the system killed it)"
            .to_owned(),
    }
}

/// An exit status in a few words.
pub(crate) fn exit_text(exit: &ExitStatus) -> String {
    match exit {
        ExitStatus::Code(code) => format!("exited with code {code}"),
        ExitStatus::Signal { name, .. } => format!("killed by signal {name}"),
        ExitStatus::TimedOut { timeout, .. } => {
            format!("timed out after {:.1} s", timeout.as_secs_f64())
        }
        ExitStatus::Unknown => "ended without an exit status".to_owned(),
    }
}

fn drop_text(stream: JobStream, drop: &JobDrop) -> String {
    format!(
        "[{}: {} bytes dropped on the host: {}]",
        stream.name(),
        drop.bytes,
        drop.reason
    )
}

/// How many leading bytes of `bytes` end on a whole UTF-8 sequence: an incomplete sequence
/// at the end (at most 3 bytes) is left for the next read. Invalid bytes elsewhere count as
/// whole (they decode to U+FFFD).
pub(crate) fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(3) {
        let byte = bytes[len - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: the sequence started earlier
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if needed > back { len - back } else { len };
    }
    len
}

/// New output of one stream, decoded for a model.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamText {
    /// The text (lossy; never a cut sequence unless the stream ended).
    pub(crate) text: String,
    /// The offset after the bytes `text` decodes.
    pub(crate) next_offset: u64,
    /// The stream ended and `next_offset` is its end.
    pub(crate) eof: bool,
    /// The read was full: more may be waiting right now.
    pub(crate) more: bool,
    /// What the stream dropped on the host (known at its end).
    pub(crate) dropped: Option<JobDrop>,
}

/// A job's state and its new output since a cursor.
#[derive(Debug, Clone)]
pub(crate) struct JobPoll {
    /// The job's state when polled.
    pub(crate) status: JobStatus,
    /// New stdout.
    pub(crate) stdout: StreamText,
    /// New stderr.
    pub(crate) stderr: StreamText,
}

impl JobPoll {
    /// The cursor to continue from.
    pub(crate) fn cursor(&self) -> JobCursor {
        JobCursor {
            stdout: self.stdout.next_offset,
            stderr: self.stderr.next_offset,
        }
    }

    /// Both streams have ended and everything was read.
    pub(crate) fn finished(&self) -> bool {
        self.stdout.eof && self.stderr.eof
    }

    /// The poll as a model reads it: the state, the new output per stream, drops, the cursor.
    pub(crate) fn text(&self, id: &str) -> String {
        let mut out = format!("job {id}: {}\n", status_text(&self.status));
        for (stream, part) in [
            (JobStream::Stdout, &self.stdout),
            (JobStream::Stderr, &self.stderr),
        ] {
            if !part.text.is_empty() {
                out.push_str(&format!("--- {} ---\n{}", stream.name(), part.text));
                if !part.text.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        if self.stdout.text.is_empty() && self.stderr.text.is_empty() {
            out.push_str("(no new output)\n");
        }
        for (stream, part) in [
            (JobStream::Stdout, &self.stdout),
            (JobStream::Stderr, &self.stderr),
        ] {
            if let Some(drop) = &part.dropped {
                out.push_str(&drop_text(stream, drop));
                out.push('\n');
            }
        }
        if self.stdout.more || self.stderr.more {
            out.push_str("[more output is waiting: call again with this cursor]\n");
        } else if self.finished() {
            out.push_str("[end of output]\n");
        }
        out.push_str(&format!("cursor: {}", self.cursor()));
        out
    }
}

impl Job {
    /// The state and up to `max` new bytes of each stream since `cursor`, read at once.
    pub(crate) async fn poll(&self, cursor: JobCursor, max: u64) -> Result<JobPoll> {
        let max = max.max(MIN_OUTPUT_BYTES);
        let (status, stdout, stderr) = tokio::join!(
            self.status(),
            self.stream_text(JobStream::Stdout, cursor.stdout, max),
            self.stream_text(JobStream::Stderr, cursor.stderr, max),
        );
        let mut poll = JobPoll {
            status: status?,
            stdout: stdout?,
            stderr: stderr?,
        };
        if poll.finished() && !poll.status.is_finished() {
            // The streams close as the command ends, a moment before the runner records its
            // status: wait that moment rather than show "running" after the end of output.
            // (A job that closed its streams and runs on costs this poll the wait.)
            poll.status = self.wait(END_RECORD_WAIT).await?;
        }
        Ok(poll)
    }

    async fn stream_text(&self, stream: JobStream, offset: u64, max: u64) -> Result<StreamText> {
        let output = self.read(stream, offset, max).await?;
        // At the end nothing follows a cut sequence: it is shown (as U+FFFD) and passed.
        let whole = if output.eof {
            output.bytes.len()
        } else {
            complete_utf8_prefix(&output.bytes)
        };
        Ok(StreamText {
            text: String::from_utf8_lossy(&output.bytes[..whole]).into_owned(),
            next_offset: offset + whole as u64,
            eof: output.eof,
            more: output.bytes.len() as u64 >= max,
            dropped: output.dropped,
        })
    }
}

/// Starts a job; returns its handle and the text for the model.
pub(crate) async fn start_job(
    executor: &SshExecutor,
    command: &str,
    options: JobOptions,
) -> Result<(Job, String)> {
    let job = executor.spawn_job(command, options).await?;
    let status = job.status().await?;
    let text = format!(
        "job {id}: started, {}\ncursor: {}",
        status_text(&status),
        JobCursor::default(),
        id = job.id(),
    );
    Ok((job, text))
}

/// New output since `cursor`, as text, with the poll it came from.
pub(crate) async fn job_output(
    executor: &SshExecutor,
    id: &str,
    cursor: JobCursor,
    max: u64,
) -> Result<(JobPoll, String)> {
    let job = executor.job(id).await?;
    let poll = job.poll(cursor, max).await?;
    let text = poll.text(id);
    Ok((poll, text))
}

/// Everything about one job as a model reads it.
pub(crate) fn info_text(info: &JobInfo) -> String {
    let mut out = format!("job {}: {}", info.id, status_text(&info.status));
    match info.ended_by {
        Some(JobEndCause::Killed) => out.push_str(" (ended by a kill)"),
        Some(JobEndCause::Deadline) => out.push_str(" (ended by its deadline)"),
        _ => {}
    }
    out.push_str(&format!("\ncommand: {:?}", info.command));
    if let Some(dir) = &info.current_dir {
        out.push_str(&format!("\ndirectory: {}", dir.display()));
    }
    if let Some(deadline) = info.deadline {
        out.push_str(&format!("\ndeadline: {:.1} s", deadline.as_secs_f64()));
    }
    if !info.labels.is_empty() {
        out.push_str(&format!("\nlabels: {}", labels_text(info)));
    }
    for (stream, drop) in [
        (JobStream::Stdout, &info.stdout_dropped),
        (JobStream::Stderr, &info.stderr_dropped),
    ] {
        if let Some(drop) = drop {
            out.push('\n');
            out.push_str(&drop_text(stream, drop));
        }
    }
    out
}

fn labels_text(info: &JobInfo) -> String {
    info.labels
        .iter()
        .map(|(key, value)| format!("{key:?}={value:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The job's state, after waiting up to `wait` (clamped to 600 s) for its end.
pub(crate) async fn job_status(
    executor: &SshExecutor,
    id: &str,
    wait: Option<Duration>,
) -> Result<String> {
    let job = executor.job(id).await?;
    if let Some(wait) = wait.filter(|wait| !wait.is_zero()) {
        job.wait(wait.min(MAX_WAIT)).await?;
    }
    Ok(info_text(&job.info().await?))
}

/// Kills the job's group; the text says its state after.
pub(crate) async fn kill_job(
    executor: &SshExecutor,
    id: &str,
    grace: Option<Duration>,
) -> Result<String> {
    let job = executor.job(id).await?;
    let before = job.status().await?;
    if before.is_finished() {
        return Ok(format!(
            "job {id}: already {}; nothing was signalled",
            status_text(&before)
        ));
    }
    let grace = grace.unwrap_or(DEFAULT_KILL_GRACE).min(MAX_KILL_GRACE);
    let after = job.kill(grace).await?;
    Ok(format!("job {id}: {}", status_text(&after)))
}

/// Every job, one line each.
pub(crate) async fn list_jobs(executor: &SshExecutor) -> Result<String> {
    let jobs = executor.jobs().await?;
    if jobs.is_empty() {
        return Ok("no jobs".to_owned());
    }
    let lines: Vec<String> = jobs
        .iter()
        .map(|info| {
            let mut command: String = info.command.chars().take(LISTED_COMMAND_CHARS).collect();
            if command.len() < info.command.len() {
                command.push('…');
            }
            let mut line = format!(
                "{}: {}, command {command:?}",
                info.id,
                status_text(&info.status)
            );
            if !info.labels.is_empty() {
                line.push_str(&format!(", labels {}", labels_text(info)));
            }
            line
        })
        .collect();
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_text_round_trips() {
        let cursor = JobCursor {
            stdout: 1024,
            stderr: 7,
        };
        assert_eq!(cursor.to_string(), "stdout=1024,stderr=7");
        assert_eq!("stdout=1024,stderr=7".parse::<JobCursor>().unwrap(), cursor);
        assert_eq!(
            " stderr = 7 , stdout=1024 ".parse::<JobCursor>().unwrap(),
            cursor
        );
        assert_eq!("".parse::<JobCursor>().unwrap(), JobCursor::default());
        for bad in ["1024", "stdout=-1", "stdin=3", "stdout=x,stderr=1"] {
            assert!(
                matches!(bad.parse::<JobCursor>(), Err(Error::InvalidInput { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_cut_utf8_sequence_is_held_back() {
        let text = "aé€😀".as_bytes();
        assert_eq!(complete_utf8_prefix(text), text.len());
        // Every cut inside a sequence ends the prefix at that sequence's start.
        let starts = [0, 1, 3, 6, 10];
        for cut in 0..=text.len() {
            let expected = starts.iter().copied().filter(|&s| s <= cut).max().unwrap();
            let expected = if starts.contains(&cut) { cut } else { expected };
            assert_eq!(complete_utf8_prefix(&text[..cut]), expected, "cut {cut}");
        }
        // Invalid bytes are not waited for.
        assert_eq!(complete_utf8_prefix(b"a\xff"), 2);
        assert_eq!(complete_utf8_prefix(b"\x80\x80\x80\x80"), 4);
    }
}
