//! A bamboo [`ToolExecutor`] over SSH (feature `bamboo`): bamboo's built-in shell and file
//! tools, named and shaped as in `bamboo-tools` (`Bash`, `BashOutput`, `KillShell`, `Read`,
//! `Write`, `Glob`, `Grep`, `GetFileInfo`, with the same JSON argument schemas), running on
//! a remote host.
//!
//! * Arguments arrive as raw JSON (`ToolCall::function::arguments`); unknown fields, missing
//!   or mistyped ones are [`ToolError::InvalidArguments`], an unknown tool is
//!   [`ToolError::NotFound`].
//! * `Bash` streams its output as [`AgentEvent::ToolToken`] through the context's
//!   `event_tx`; dropping the future kills the remote process group. Interactive shells
//!   (`interactive`) are not available in `Bash`: the terminal tools (below) run
//!   interactive programs.
//! * `Bash` with `run_in_background: true` starts the command as a job on the host
//!   ([`SshExecutor::spawn_job`]): it outlives the call, the connection and the agent. The
//!   outcome is bamboo's [`ToolOutcome::Running`] (from
//!   [`execute_with_context_outcome`](ToolExecutor::execute_with_context_outcome); the other
//!   entry points return its acknowledgement), whose ack names the `bash_id`. When the
//!   context carries a `bash_completion_sink` and a session id, a watcher task delivers the
//!   end (exit code, status, output tail) to it, as bamboo's own background shells do. The
//!   handle's `kill` kills the job's process group. `timeout` does not apply to a
//!   background shell.
//! * `BashOutput` (`bash_id`, optional `filter` regex) returns the shell's output since the
//!   last `BashOutput` call for it through this executor, with its state and the cursor
//!   reached; passing that `cursor` back reads from there again (nothing is consumed on the
//!   host, so another executor or a restarted agent can read everything). `KillShell`
//!   (`shell_id`) kills the job's whole process group. Both work for any job on the host.
//! * Terminals, for what needs a keyboard (REPLs, prompts, full-screen programs):
//!   `open_terminal`, `terminal_send`, `terminal_screen`, `close_terminal` and
//!   `list_terminals`, with the arguments and texts of every door (the crate's shared terminal
//!   tools; bamboo has no terminal tools of its own). A terminal starts in the workspace
//!   (`working_directory` relative to it); the executor and its clones share the open
//!   terminals (at most 8), and dropping the last of them kills every one still open.
//! * Services on the host (a dev server started with `Bash`): `expose_port` gives a local
//!   address the agent's other tools open (a local forward, [`SshExecutor::forward_local`]),
//!   `list_ports` lists them; the arguments and texts of every door. The executor and its
//!   clones share them (at most 16); dropping the last clone closes them.
//! * `call_mutability` / `call_concurrency_safe`: `Read`, `Glob`, `Grep`, `GetFileInfo`,
//!   `BashOutput`, `terminal_screen`, `list_terminals` and `list_ports` are read-only and may
//!   run in parallel; `Bash`, `Write`, `KillShell`, the other terminal tools, `expose_port`
//!   and unknown names are mutating.
//! * Permission checks keep bamboo's defaults (this executor adds no gate of its own).
//! * Relative paths resolve against the workspace given to [`SshToolExecutor::new`].
//! * `Glob` and `Grep` are the crate's one glob and grep, which every door shares (the guide's
//!   [Adapters](crate::guide::adapters#glob-and-grep-the-same-on-every-door) has their rules):
//!   glob-crate patterns below `path`, results sorted by path (not newest first as bamboo's
//!   built-in `Glob`); Rust regex line by line, binary files, symbolic links and `.git` skipped
//!   below a directory, files over 16 MiB too. They do not apply `.gitignore` rules (bamboo's
//!   built-ins do inside git repositories) and `Grep`'s `type` filter is not supported.

use std::{
    collections::HashMap,
    ops::ControlFlow,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, UNIX_EPOCH},
};

use async_trait::async_trait;
use bamboo_agent_core::{
    AgentEvent, AsyncWaitKind, BashCompletionInfo, BashCompletionSink, FunctionSchema,
    RunningCompletion, RunningHandle, ToolCall, ToolError, ToolExecutionContext, ToolExecutor,
    ToolMutability, ToolOutcome, ToolResult, ToolSchema,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{
    command::{ExitStatus, OutputChunk},
    error::{Error, SftpStatus},
    executor::{ExecOptions, SshExecutor},
    forwards::tools::{
        EXPOSE_PORT_ABOUT, ExposePortArgs, LIST_PORTS_ABOUT, ListPortsArgs, PortSet,
    },
    jobs::{
        Job, JobCursor, JobOptions, JobStatus, JobStream,
        tools::{
            DEFAULT_KILL_GRACE, DEFAULT_OUTPUT_BYTES, complete_utf8_prefix, kill_job, model_facing,
            start_job,
        },
    },
    terminals::tools::{
        CLOSE_TERMINAL_ABOUT, CloseTerminalArgs, LIST_TERMINALS_ABOUT, ListTerminalsArgs,
        OPEN_TERMINAL_ABOUT, OpenTerminalArgs, TERMINAL_SCREEN_ABOUT, TERMINAL_SEND_ABOUT,
        TerminalScreenArgs, TerminalSendArgs, TerminalSet, ToolFailure,
    },
    tools::search::{self, GLOB_ABOUT, GREP_ABOUT, SearchError},
};

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
const MAX_CAPTURE_BYTES: usize = 512 * 1024;
const DEFAULT_HEAD_LIMIT: usize = 200;
const MAX_MATCHES: usize = 2_000;
const DEFAULT_GLOB_MATCHES: usize = 100;
const MAX_GLOB_MATCHES: usize = 200;
/// Bytes of each stream's end a background shell's completion carries.
const COMPLETION_TAIL_BYTES: u64 = 2048;
/// How often the completion watcher asks a background shell's state, at most.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// Failed state reads in a row after which the watcher reports an error.
const WATCH_FAILURES: u32 = 5;

const READ_ONLY: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "GetFileInfo",
    "BashOutput",
    "terminal_screen",
    "list_terminals",
    "list_ports",
];
const TOOL_NAMES: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Read",
    "Write",
    "Glob",
    "Grep",
    "GetFileInfo",
    "open_terminal",
    "terminal_send",
    "terminal_screen",
    "close_terminal",
    "list_terminals",
    "expose_port",
    "list_ports",
];

/// bamboo's built-in shell and file tools on a remote host.
///
/// ```no_run
/// # async fn demo(executor: swiftide_ssh_executor::SshExecutor) {
/// use std::sync::Arc;
/// use bamboo_agent_core::ToolExecutor;
/// use swiftide_ssh_executor::adapters::bamboo::SshToolExecutor;
///
/// let tools: Arc<dyn ToolExecutor> = Arc::new(SshToolExecutor::new(executor, "/srv/checkout"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SshToolExecutor {
    executor: SshExecutor,
    workspace: PathBuf,
    /// Where each background shell's `BashOutput` continues (shared by clones).
    cursors: Arc<Mutex<HashMap<String, JobCursor>>>,
    /// The open terminals (shared by clones; the last one dropped kills them).
    terminals: Arc<TerminalSet>,
    /// The exposed ports (shared by clones; the last one dropped closes them).
    ports: Arc<PortSet>,
}

impl SshToolExecutor {
    /// Tools on `executor`'s host; relative paths and `Bash` run in `workspace`.
    pub fn new(executor: SshExecutor, workspace: impl Into<PathBuf>) -> Self {
        Self {
            terminals: Arc::new(TerminalSet::new(executor.clone())),
            ports: Arc::new(PortSet::new(executor.clone())),
            executor,
            workspace: workspace.into(),
            cursors: Arc::default(),
        }
    }

    /// The executor the tools run on.
    pub fn executor(&self) -> &SshExecutor {
        &self.executor
    }

    fn path(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.workspace.join(path)
        }
    }
}

fn invalid(tool: &str, error: impl std::fmt::Display) -> ToolError {
    ToolError::InvalidArguments(format!("Invalid {tool} args: {error}"))
}

fn parse<T: for<'de> Deserialize<'de>>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| invalid(tool, e))
}

/// Refuses an empty or blank path argument.
fn require_path(name: &str, value: &str) -> Result<(), ToolError> {
    if value.trim().is_empty() {
        return Err(ToolError::InvalidArguments(format!(
            "{name} must be a non-empty string"
        )));
    }
    Ok(())
}

/// A transport failure is an execution error; a file failure becomes a failed result.
fn failed(error: &Error) -> Result<ToolResult, ToolError> {
    match error {
        Error::Sftp {
            status: Some(_), ..
        } => Ok(ToolResult {
            success: false,
            result: error.to_string(),
            display_preference: Some("error".to_owned()),
            images: Vec::new(),
        }),
        _ => Err(ToolError::Execution(error.to_string())),
    }
}

/// A search that did not run: bad patterns are the model's arguments; a missing path, one
/// that is not a directory, or a host failure, an execution error.
fn search_failed(error: SearchError) -> ToolError {
    match error {
        SearchError::Invalid(message) => ToolError::InvalidArguments(message),
        SearchError::Missing(path) => {
            ToolError::Execution(format!("Path does not exist: {}", path.display()))
        }
        SearchError::NotADirectory(path) => ToolError::Execution(format!(
            "Search path is not a directory: {}",
            path.display()
        )),
        other => ToolError::Execution(other.to_string()),
    }
}

/// The result of a terminal or port tool: its text, a failed result the model can act on,
/// or an execution error when the host could not give a terminal or a forward.
fn shared_result(result: Result<String, ToolFailure>) -> Result<ToolResult, ToolError> {
    match result {
        Ok(answer) => Ok(text(true, answer)),
        Err(ToolFailure::Model(message)) => Ok(text(false, message)),
        Err(ToolFailure::Host(message)) => Err(ToolError::Execution(message)),
    }
}

/// A schema of the arguments every door shares (schemars', as the swiftide and MCP doors
/// send it), without the `$schema` and `title` keys bamboo's own schemas do not have.
fn shared_schema(name: &str, description: &str, schema: schemars::Schema) -> ToolSchema {
    let mut parameters = schema.to_value();
    if let Some(object) = parameters.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    self::schema(name, description, parameters)
}

fn text(success: bool, result: impl Into<String>) -> ToolResult {
    ToolResult::text(success, result)
}

fn schema(name: &str, description: &str, parameters: Value) -> ToolSchema {
    ToolSchema {
        schema_type: "function".to_owned(),
        function: FunctionSchema {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
        },
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BashArgs {
    command: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    run_in_background: Option<bool>,
    #[serde(default)]
    interactive: Option<bool>,
    #[serde(default)]
    workdir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BashOutputArgs {
    bash_id: String,
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillShellArgs {
    shell_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    file_path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    file_path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    #[allow(dead_code)]
    include_ignored: bool,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    Content,
    #[default]
    FilesWithMatches,
    Count,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    output_mode: Option<OutputMode>,
    #[serde(default, rename = "-B")]
    before: Option<usize>,
    #[serde(default, rename = "-A")]
    after: Option<usize>,
    #[serde(default, rename = "-C")]
    context: Option<usize>,
    #[serde(default, rename = "-n")]
    line_numbers: Option<bool>,
    #[serde(default, rename = "-i")]
    case_insensitive: Option<bool>,
    #[serde(default, rename = "type")]
    file_type: Option<String>,
    #[serde(default)]
    head_limit: Option<usize>,
    #[serde(default)]
    multiline: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    include_ignored: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoArgs {
    path: String,
}

impl SshToolExecutor {
    async fn bash(
        &self,
        args: Value,
        ctx: &ToolExecutionContext<'_>,
    ) -> Result<ToolOutcome, ToolError> {
        let args: BashArgs = parse("Bash", args)?;
        let command = args.command.trim();
        if command.is_empty() {
            return Err(ToolError::InvalidArguments(
                "'command' cannot be empty".to_owned(),
            ));
        }
        if args.interactive == Some(true) {
            return Err(ToolError::InvalidArguments(
                "interactive is not available in Bash over SSH: omit it, use run_in_background, \
                 or run an interactive program with open_terminal and terminal_send"
                    .to_owned(),
            ));
        }
        let dir = args
            .workdir
            .as_deref()
            .map_or_else(|| self.workspace.clone(), |d| self.path(d));
        if args.run_in_background == Some(true) {
            return self.bash_background(command, dir, ctx).await;
        }
        self.bash_foreground(command, dir, args.timeout, ctx)
            .await
            .map(ToolOutcome::Completed)
    }

    async fn bash_foreground(
        &self,
        command: &str,
        dir: PathBuf,
        timeout: Option<u64>,
        ctx: &ToolExecutionContext<'_>,
    ) -> Result<ToolResult, ToolError> {
        let timeout_ms = timeout
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .clamp(1, MAX_TIMEOUT_MS);
        let options = ExecOptions::default()
            .current_dir(dir)
            .timeout(Duration::from_millis(timeout_ms));
        let (tokens_tx, mut tokens_rx) = futures::channel::mpsc::unbounded::<String>();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let run = async {
            let mut sink = |chunk: &OutputChunk| {
                let (bytes, kept) = match chunk {
                    OutputChunk::Stdout(bytes) => (bytes, &mut stdout),
                    OutputChunk::Stderr(bytes) => (bytes, &mut stderr),
                };
                let room = MAX_CAPTURE_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
                let _ = tokens_tx.unbounded_send(String::from_utf8_lossy(bytes).into_owned());
            };
            let result = self.executor.execute(command, options, &mut sink).await;
            drop(tokens_tx);
            result
        };
        let forward = async {
            while let Some(content) = tokens_rx.next().await {
                if let Some(tx) = ctx.event_tx {
                    let _ = tx
                        .send(AgentEvent::ToolToken {
                            tool_call_id: ctx.tool_call_id.to_owned(),
                            content,
                        })
                        .await;
                }
            }
        };
        let (result, ()) = futures::join!(run, forward);
        let execution = result.map_err(|e| ToolError::Execution(e.to_string()))?;
        let mut output = String::from_utf8_lossy(&stdout).into_owned();
        if !stderr.is_empty() {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(&String::from_utf8_lossy(&stderr));
        }
        let (success, status) = match &execution.status {
            ExitStatus::Code(code) => (*code == 0, format!("exit code {code}")),
            ExitStatus::Signal { name, .. } => (false, format!("killed by signal {name}")),
            ExitStatus::TimedOut { .. } => {
                (false, format!("Command timed out after {timeout_ms}ms"))
            }
            _ => (false, "ended without an exit status".to_owned()),
        };
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&format!("[{status}]"));
        if stdout.len() >= MAX_CAPTURE_BYTES || stderr.len() >= MAX_CAPTURE_BYTES {
            output.push_str("\n[TRUNCATED] output capped at 512KB per stream");
        }
        Ok(text(success, output))
    }

    /// `Bash` with `run_in_background`: the command as a job, and bamboo's `Running`
    /// outcome whose ack names the `bash_id`.
    async fn bash_background(
        &self,
        command: &str,
        dir: PathBuf,
        ctx: &ToolExecutionContext<'_>,
    ) -> Result<ToolOutcome, ToolError> {
        let mut options = JobOptions::new()
            .current_dir(dir)
            .label("bamboo.tool_call_id", ctx.tool_call_id);
        if let Some(session) = ctx.session_id {
            options = options.label("bamboo.session_id", session);
        }
        let (job, started) = match start_job(&self.executor, command, options).await {
            Ok(started) => started,
            Err(error) => return job_failed(error).map(ToolOutcome::Completed),
        };
        let id = job.id().to_owned();
        self.remember(&id, JobCursor::default());
        let ack = ToolResult {
            success: true,
            result: json!({
                "bash_id": id,
                "status": "running",
                "command": command,
                "message": format!(
                    "{started}\nRead its output with BashOutput {{\"bash_id\": \"{id}\"}}; stop \
                     it with KillShell {{\"shell_id\": \"{id}\"}}. It keeps running on the host \
                     after this call."
                ),
            })
            .to_string(),
            display_preference: Some("json".to_owned()),
            images: Vec::new(),
        };
        if let (Some(sink), Some(session)) = (ctx.cloned_bash_completion_sink(), ctx.session_id) {
            tokio::spawn(watch_background(
                self.executor.clone(),
                job.clone(),
                command.to_owned(),
                session.to_owned(),
                sink,
            ));
        }
        let kill: Box<dyn FnOnce() + Send> = Box::new(move || {
            // A sync callback: the kill runs as a task (nothing to run it on outside a runtime).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(error) = job.kill(DEFAULT_KILL_GRACE).await {
                        tracing::debug!(id = %job.id(), %error, "killing a background shell failed");
                    }
                });
            }
        });
        Ok(ToolOutcome::Running(RunningHandle {
            tool_call_id: ctx.tool_call_id.to_owned(),
            ack,
            completion: RunningCompletion::Detached,
            wait_kind: AsyncWaitKind::AsyncTools,
            kill,
        }))
    }

    fn remember(&self, id: &str, cursor: JobCursor) {
        self.cursors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.to_owned(), cursor);
    }

    fn recalled(&self, id: &str) -> JobCursor {
        self.cursors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .copied()
            .unwrap_or_default()
    }

    /// `BashOutput`: what is new since the last call (or since `cursor`), with the state.
    async fn bash_output(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: BashOutputArgs = parse("BashOutput", args)?;
        require_path("bash_id", &args.bash_id)?;
        let filter =
            match args.filter.as_deref() {
                Some(filter) => Some(regex::Regex::new(filter).map_err(|e| {
                    ToolError::InvalidArguments(format!("Invalid filter regex: {e}"))
                })?),
                None => None,
            };
        let cursor = match args.cursor.as_deref() {
            Some(text) => text
                .parse()
                .map_err(|e: Error| ToolError::InvalidArguments(e.to_string()))?,
            None => self.recalled(&args.bash_id),
        };
        let poll = match self.executor.job(&args.bash_id).await {
            Ok(job) => job.poll(cursor, DEFAULT_OUTPUT_BYTES).await,
            Err(error) => Err(error),
        };
        let mut poll = match poll {
            Ok(poll) => poll,
            Err(error) => return job_failed(error),
        };
        self.remember(&args.bash_id, poll.cursor());
        if let Some(filter) = &filter {
            for part in [&mut poll.stdout, &mut poll.stderr] {
                part.text = part
                    .text
                    .lines()
                    .filter(|line| filter.is_match(line))
                    .map(|line| format!("{line}\n"))
                    .collect();
            }
        }
        Ok(text(true, poll.text(&args.bash_id)))
    }

    /// `KillShell`: the job's whole process group.
    async fn kill_shell(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: KillShellArgs = parse("KillShell", args)?;
        require_path("shell_id", &args.shell_id)?;
        match kill_job(&self.executor, &args.shell_id, None).await {
            Ok(answer) => Ok(text(true, answer)),
            Err(error) => job_failed(error),
        }
    }

    async fn read(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: ReadArgs = parse("Read", args)?;
        require_path("file_path", &args.file_path)?;
        let path = self.path(&args.file_path);
        let meta = match self.executor.metadata(&path).await {
            Ok(meta) => meta,
            Err(error) => return failed(&error),
        };
        let lines: Vec<String> = if meta.is_dir() {
            match self.executor.list_dir(&path).await {
                Ok(entries) => entries
                    .into_iter()
                    .map(|e| {
                        if e.metadata.is_dir() {
                            format!("{}/", e.name)
                        } else {
                            e.name
                        }
                    })
                    .collect(),
                Err(error) => return failed(&error),
            }
        } else if !meta.is_file() {
            return Ok(text(
                false,
                format!("Refusing to read {}: not a regular file", path.display()),
            ));
        } else {
            let content = match self.executor.read_file_bytes(&path).await {
                Ok(content) => content,
                Err(error) => return failed(&error),
            };
            if search::looks_binary(&content) {
                return Ok(text(
                    true,
                    format!("[binary file omitted: {} bytes]", content.len()),
                ));
            }
            String::from_utf8_lossy(&content)
                .lines()
                .map(str::to_owned)
                .collect()
        };
        let total = lines.len();
        let start = args.offset.unwrap_or(0).min(total);
        let end = args
            .limit
            .map_or(total, |limit| start.saturating_add(limit).min(total));
        let mut out = lines[start..end]
            .iter()
            .enumerate()
            .map(|(i, line)| format!("{:>6}\t{}", start + i + 1, line))
            .collect::<Vec<_>>()
            .join("\n");
        if end < total {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "[TRUNCATED] Showing lines {}-{end} of {total}. Continue with offset={end}",
                start + 1
            ));
        }
        Ok(text(true, out))
    }

    async fn write(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: WriteArgs = parse("Write", args)?;
        require_path("file_path", &args.file_path)?;
        let path = self.path(&args.file_path);
        match self
            .executor
            .write_file_bytes(&path, args.content.as_bytes())
            .await
        {
            Ok(()) => Ok(text(
                true,
                format!("Wrote {} bytes to {}", args.content.len(), path.display()),
            )),
            Err(error) => failed(&error),
        }
    }

    /// The directory or file a `Glob` or `Grep` searches: `path`, or the workspace.
    fn search_path(&self, path: Option<&str>) -> PathBuf {
        path.map_or_else(|| self.workspace.clone(), |p| self.path(p))
    }

    async fn glob(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: GlobArgs = parse("Glob", args)?;
        let dir = self.search_path(args.path.as_deref());
        let limit = args
            .limit
            .unwrap_or(DEFAULT_GLOB_MATCHES)
            .clamp(1, MAX_GLOB_MATCHES);
        let query = search::GlobQuery {
            dir: &dir,
            pattern: args.pattern.trim(),
            follow_links: true,
        };
        let matched = search::glob(&self.executor, &query)
            .await
            .map_err(search_failed)?;
        let total = matched.len();
        let mut lines: Vec<String> = matched
            .into_iter()
            .take(limit)
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if total > limit {
            lines.push(format!(
                "[TRUNCATED] Showing first {limit} matches (matched {total}). Refine pattern/path and retry."
            ));
        }
        Ok(ToolResult {
            success: true,
            result: lines.join("\n"),
            display_preference: Some("Collapsible".to_owned()),
            images: Vec::new(),
        })
    }

    async fn grep(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: GrepArgs = parse("Grep", args)?;
        if args.file_type.is_some() {
            return Err(ToolError::InvalidArguments(
                "the type filter is not supported over SSH; use glob instead".to_owned(),
            ));
        }
        let options = search::RegexOptions {
            case_insensitive: args.case_insensitive.unwrap_or(false),
            fixed_strings: false,
            multiline: args.multiline.unwrap_or(false),
        };
        let matcher = search::Matcher::new(&args.pattern, options).map_err(search_failed)?;
        let include = args
            .glob
            .as_deref()
            .map(search::Include::new)
            .transpose()
            .map_err(search_failed)?;
        let path = self.search_path(args.path.as_deref());
        let query = search::GrepQuery {
            path: &path,
            matcher: &matcher,
            include: include.as_ref(),
            recursive: true,
        };
        let mode = args.output_mode.unwrap_or_default();
        let context = args.context.unwrap_or(0);
        let (before, after) = (
            args.before.unwrap_or(context),
            args.after.unwrap_or(context),
        );
        let numbers = args.line_numbers.unwrap_or(false);
        let head_limit = args.head_limit.unwrap_or(DEFAULT_HEAD_LIMIT);
        let mut rows = Vec::new();
        let mut total = 0usize;
        let mut partial = false;
        let mut too_large = false;
        search::grep(&self.executor, &query, |file| {
            total = total.saturating_add(file.hits.len());
            if total > MAX_MATCHES {
                too_large = true;
                return ControlFlow::Break(());
            }
            let shown = file.path.to_string_lossy();
            match mode {
                OutputMode::FilesWithMatches => rows.push(shown.into_owned()),
                OutputMode::Count => rows.push(format!("{shown}:{}", file.hits.len())),
                OutputMode::Content => {
                    let lines: Vec<&str> = file.text.lines().collect();
                    let mut wanted = std::collections::BTreeSet::new();
                    for hit in &file.hits {
                        let index = hit.line_number.saturating_sub(1);
                        let from = index.saturating_sub(before);
                        let to = index
                            .saturating_add(after)
                            .min(lines.len().saturating_sub(1));
                        wanted.extend(from..=to);
                    }
                    for index in wanted {
                        let Some(line) = lines.get(index) else {
                            continue;
                        };
                        rows.push(if numbers {
                            format!("{shown}:{}:{line}", index + 1)
                        } else {
                            format!("{shown}:{line}")
                        });
                    }
                }
            }
            if rows.len() >= head_limit {
                rows.truncate(head_limit);
                partial = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .await
        .map_err(search_failed)?;
        if too_large {
            return Err(ToolError::Execution(
                "Result too large; refine query and retry.".to_owned(),
            ));
        }
        if partial {
            rows.push(format!(
                "[TRUNCATED] Showing first {head_limit} entries. Narrow the search."
            ));
        }
        Ok(text(true, rows.join("\n")))
    }

    /// `open_terminal`: in the workspace, or in `working_directory` relative to it.
    async fn open_terminal(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: OpenTerminalArgs = parse("open_terminal", args)?;
        let (command, mut options) = match args.into_options() {
            Ok(opened) => opened,
            Err(error) => return shared_result(Err(error)),
        };
        options.current_dir = Some(match options.current_dir.take() {
            Some(dir) if dir.is_absolute() => dir,
            Some(dir) => self.workspace.join(dir),
            None => self.workspace.clone(),
        });
        shared_result(
            self.terminals
                .open(command, options)
                .await
                .map(|(_, answer)| answer),
        )
    }

    async fn file_info(&self, args: Value) -> Result<ToolResult, ToolError> {
        let args: InfoArgs = parse("GetFileInfo", args)?;
        require_path("path", &args.path)?;
        let path = self.path(&args.path);
        let result = match self.executor.metadata(&path).await {
            Ok(meta) => json!({
                "path": args.path,
                "exists": true,
                "is_file": meta.is_file(),
                "is_dir": meta.is_dir(),
                "size_bytes": meta.size,
                "modified_unix": meta.modified
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs()),
            }),
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => json!({ "path": args.path, "exists": false }),
            Err(error) => return failed(&error),
        };
        Ok(ToolResult {
            success: true,
            result: result.to_string(),
            display_preference: Some("json".to_owned()),
            images: Vec::new(),
        })
    }
}

/// A job error the model can act on (unknown id, bad cursor) is a failed result; a transport
/// failure is an execution error.
fn job_failed(error: Error) -> Result<ToolResult, ToolError> {
    match model_facing(&error) {
        Some(message) => Ok(text(false, message)),
        None => Err(ToolError::Execution(error.to_string())),
    }
}

/// The last bytes of each stream of a finished job, for its completion.
async fn output_tail(executor: &SshExecutor, job: &Job) -> String {
    let mut out = String::new();
    for stream in [JobStream::Stdout, JobStream::Stderr] {
        let Ok(meta) = executor.metadata(&job.dir().join(stream.name())).await else {
            continue;
        };
        let from = meta.size.saturating_sub(COMPLETION_TAIL_BYTES);
        let Ok(read) = job.read(stream, from, COMPLETION_TAIL_BYTES).await else {
            continue;
        };
        // Start on a whole UTF-8 sequence (skip the continuation bytes the cut left).
        let skip = read
            .bytes
            .iter()
            .take(3)
            .take_while(|byte| *byte & 0xC0 == 0x80)
            .count();
        let bytes = &read.bytes[skip..];
        let tail = String::from_utf8_lossy(&bytes[..complete_utf8_prefix(bytes)]);
        if tail.is_empty() {
            continue;
        }
        if stream == JobStream::Stderr {
            out.push_str("--- stderr ---\n");
        }
        out.push_str(&tail);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// Watches a background shell until it ends and delivers the end to bamboo's sink, as
/// bamboo's own background shells do.
async fn watch_background(
    executor: SshExecutor,
    job: Job,
    command: String,
    session_id: String,
    sink: Arc<dyn BashCompletionSink>,
) {
    let mut failures = 0;
    let mut pause = Duration::from_millis(100);
    let status = loop {
        match job.status().await {
            Ok(status) if status.is_finished() => break Some(status),
            Ok(_) => failures = 0,
            Err(Error::JobNotFound { .. }) => break None,
            Err(error) => {
                failures += 1;
                tracing::debug!(id = %job.id(), %error, "background shell state unknown");
                if failures >= WATCH_FAILURES {
                    break None;
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(WATCH_INTERVAL);
    };
    let (exit_code, state) = match &status {
        Some(JobStatus::Exited(ExitStatus::Code(code))) => (i32::try_from(*code).ok(), "completed"),
        Some(JobStatus::Exited(_)) => (None, "killed"),
        _ => (None, "error"),
    };
    let output_tail = output_tail(&executor, &job).await;
    sink.on_bash_completed(BashCompletionInfo {
        session_id,
        bash_id: job.id().to_owned(),
        command,
        exit_code,
        status: state.to_owned(),
        output_tail,
    });
}

fn parse_arguments(call: &ToolCall, ctx: &ToolExecutionContext<'_>) -> Result<Value, ToolError> {
    if let Some(args) = ctx.pre_parsed_args {
        return Ok(args.clone());
    }
    let raw = call.function.arguments.trim();
    if raw.is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_str(raw).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "arguments of {} are not valid JSON: {e}",
            call.function.name
        ))
    })?;
    if !value.is_object() {
        return Err(ToolError::InvalidArguments(format!(
            "arguments of {} must be a JSON object",
            call.function.name
        )));
    }
    Ok(value)
}

#[async_trait]
impl ToolExecutor for SshToolExecutor {
    async fn execute(&self, call: &ToolCall) -> Result<ToolResult, ToolError> {
        self.execute_with_context(call, ToolExecutionContext::none(&call.id))
            .await
    }

    /// The ack of a background `Bash`, or the result.
    async fn execute_with_context(
        &self,
        call: &ToolCall,
        ctx: ToolExecutionContext<'_>,
    ) -> Result<ToolResult, ToolError> {
        self.execute_with_context_outcome(call, ctx)
            .await
            .map(ToolOutcome::into_tool_result)
    }

    async fn execute_with_context_outcome(
        &self,
        call: &ToolCall,
        ctx: ToolExecutionContext<'_>,
    ) -> Result<ToolOutcome, ToolError> {
        let name = call.function.name.trim();
        if !self.owns_exact_tool(name) {
            return Err(ToolError::NotFound(name.to_owned()));
        }
        let args = parse_arguments(call, &ctx)?;
        let result = match name {
            "Bash" => return self.bash(args, &ctx).await,
            "BashOutput" => self.bash_output(args).await,
            "KillShell" => self.kill_shell(args).await,
            "Read" => self.read(args).await,
            "Write" => self.write(args).await,
            "Glob" => self.glob(args).await,
            "Grep" => self.grep(args).await,
            "GetFileInfo" => self.file_info(args).await,
            "open_terminal" => self.open_terminal(args).await,
            "terminal_send" => shared_result(self.terminals.send(parse(name, args)?).await),
            "terminal_screen" => shared_result(self.terminals.screen(parse(name, args)?).await),
            "close_terminal" => shared_result(self.terminals.close(parse(name, args)?).await),
            "list_terminals" => {
                let ListTerminalsArgs {} = parse(name, args)?;
                shared_result(Ok(self.terminals.list()))
            }
            "expose_port" => shared_result(
                self.ports
                    .expose(parse(name, args)?)
                    .await
                    .map(|(_, text)| text),
            ),
            "list_ports" => {
                let ListPortsArgs {} = parse(name, args)?;
                shared_result(Ok(self.ports.list().await))
            }
            other => Err(ToolError::NotFound(other.to_owned())),
        };
        result.map(ToolOutcome::Completed)
    }

    fn list_tools(&self) -> Vec<ToolSchema> {
        vec![
            schema(
                "Bash",
                "Execute shell commands on the remote host with streaming output, in the workspace. \
                 Default timeout is 120000ms (max 600000ms); captured stdout/stderr are each capped \
                 at 512KB. With run_in_background the command starts as a background shell that \
                 outlives the call and the connection: it returns a bash_id at once; read the output \
                 with BashOutput and stop it with KillShell. Interactive mode is not available: run \
                 interactive programs (REPLs, prompts, less, top) with open_terminal.",
                json!({
                    "type": "object",
                    "properties": {
                        "command": { "type": "string", "description": "The command to execute" },
                        "timeout": { "type": "number", "description": "Optional timeout in milliseconds (default 120000, max 600000)" },
                        "description": { "type": "string", "description": "Optional short context label for the command" },
                        "run_in_background": { "type": "boolean", "description": "Set to true to run this command in the background on the remote host (no timeout applies). Use BashOutput to read the output later." },
                        "interactive": { "type": "boolean", "description": "Not available over SSH: omit it or set it to false (use open_terminal for interactive programs)." },
                        "workdir": { "type": "string", "description": "Optional working directory. Relative paths are resolved from the session workspace." }
                    },
                    "required": ["command"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "BashOutput",
                "Retrieve output from a running or completed background shell on the remote host. \
                 Returns only new output since the last BashOutput call for it, with its state \
                 (running, exit code or signal) and the cursor reached; pass a cursor to read from \
                 there again. Supports an optional regex filter on output lines.",
                json!({
                    "type": "object",
                    "properties": {
                        "bash_id": { "type": "string", "description": "The ID of the background shell to retrieve output from" },
                        "filter": { "type": "string", "description": "Optional regular expression to filter the output lines. Only lines matching this regex will be included in the result." },
                        "cursor": { "type": "string", "description": "Optional cursor (stdout=N,stderr=M) a previous call returned: read from there instead of from the last call's end. stdout=0,stderr=0 reads everything again." }
                    },
                    "required": ["bash_id"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "KillShell",
                "Kill a running background shell on the remote host by its ID: its whole process \
                 group gets SIGTERM, then SIGKILL after 2 s.",
                json!({
                    "type": "object",
                    "properties": {
                        "shell_id": { "type": "string", "description": "The ID of the background shell to kill" }
                    },
                    "required": ["shell_id"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "Read",
                "Read a file or directory on the remote host with line-numbered output (supports offset/limit). Binary files are omitted.",
                json!({
                    "type": "object",
                    "properties": {
                        "file_path": { "type": "string", "description": "The absolute path to the file or directory to read" },
                        "offset": { "type": "number", "description": "The line offset to start reading from. Omit when you want the full file or directory listing." },
                        "limit": { "type": "number", "description": "The maximum number of lines or directory entries to read. Omit for the full result when safe." }
                    },
                    "required": ["file_path"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "Write",
                "Write a file on the remote host (create or replace full content, atomically).",
                json!({
                    "type": "object",
                    "properties": {
                        "file_path": { "type": "string", "description": "The absolute path to the file to write" },
                        "content": { "type": "string", "description": "The content to write to the file" }
                    },
                    "required": ["file_path", "content"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "Glob",
                GLOB_ABOUT,
                json!({
                    "type": "object",
                    "properties": {
                        "pattern": { "type": "string", "description": "The glob pattern to match files against (for example **/*.rs or src/**/*.ts)" },
                        "path": { "type": "string", "description": "The directory to search in. Omit to use the current workspace root." },
                        "limit": { "type": "number", "description": "Maximum number of returned matches (default 100, hard cap 200). Use a smaller limit for broad searches." },
                        "include_ignored": { "type": "boolean", "default": false, "description": "Include gitignored files. Requires an explicit path; scan/result limits and fixed directory exclusions still apply." }
                    },
                    "required": ["pattern"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "Grep",
                GREP_ABOUT,
                json!({
                    "type": "object",
                    "properties": {
                        "pattern": { "type": "string", "description": "Regex pattern (Rust regex syntax, as ripgrep)" },
                        "path": { "type": "string", "description": "File or directory to search. An explicit file bypasses ignore rules. Narrow this for expensive or multiline searches." },
                        "glob": { "type": "string", "description": "Glob file filter used to limit candidate files: matched against the file name when it has no /, else against the path below `path`" },
                        "output_mode": {
                            "type": "string",
                            "enum": ["content", "files_with_matches", "count"],
                            "description": "Output mode. Prefer files_with_matches for broad discovery, then refine with Read or content mode."
                        },
                        "-B": { "type": "number", "description": "Lines before match" },
                        "-A": { "type": "number", "description": "Lines after match" },
                        "-C": { "type": "number", "description": "Lines before and after match" },
                        "-n": { "type": "boolean", "description": "Show line numbers" },
                        "-i": { "type": "boolean", "description": "Case insensitive" },
                        "type": { "type": "string", "description": "File type filter (for example rust, js, ts, py); not supported over SSH, use glob" },
                        "head_limit": { "type": "number", "description": "Limit output entries. Keep this small for broad queries." },
                        "multiline": { "type": "boolean", "description": "Enable multiline regex. Requires a narrowed path." },
                        "include_ignored": { "type": "boolean", "default": false, "description": "Include gitignored files. Requires an explicit path; scan/result limits and fixed directory exclusions still apply." }
                    },
                    "required": ["pattern"],
                    "additionalProperties": false
                }),
            ),
            schema(
                "GetFileInfo",
                "Get file metadata such as type, size, modification time, and existence without loading file contents.",
                json!({
                    "type": "object",
                    "properties": {
                        "path": { "type": "string", "description": "Absolute or relative path" }
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            ),
            shared_schema(
                "open_terminal",
                OPEN_TERMINAL_ABOUT,
                schemars::schema_for!(OpenTerminalArgs),
            ),
            shared_schema(
                "terminal_send",
                TERMINAL_SEND_ABOUT,
                schemars::schema_for!(TerminalSendArgs),
            ),
            shared_schema(
                "terminal_screen",
                TERMINAL_SCREEN_ABOUT,
                schemars::schema_for!(TerminalScreenArgs),
            ),
            shared_schema(
                "close_terminal",
                CLOSE_TERMINAL_ABOUT,
                schemars::schema_for!(CloseTerminalArgs),
            ),
            shared_schema(
                "list_terminals",
                LIST_TERMINALS_ABOUT,
                schemars::schema_for!(ListTerminalsArgs),
            ),
            shared_schema(
                "expose_port",
                EXPOSE_PORT_ABOUT,
                schemars::schema_for!(ExposePortArgs),
            ),
            shared_schema(
                "list_ports",
                LIST_PORTS_ABOUT,
                schemars::schema_for!(ListPortsArgs),
            ),
        ]
    }

    fn owns_exact_tool(&self, tool_name: &str) -> bool {
        TOOL_NAMES.contains(&tool_name)
    }

    fn tool_mutability(&self, tool_name: &str) -> ToolMutability {
        if READ_ONLY.contains(&tool_name) {
            ToolMutability::ReadOnly
        } else {
            ToolMutability::Mutating
        }
    }

    fn call_mutability(&self, call: &ToolCall) -> ToolMutability {
        self.tool_mutability(call.function.name.trim())
    }

    fn tool_concurrency_safe(&self, tool_name: &str) -> bool {
        READ_ONLY.contains(&tool_name)
    }

    fn call_concurrency_safe(&self, call: &ToolCall) -> bool {
        self.tool_concurrency_safe(call.function.name.trim())
    }
}
