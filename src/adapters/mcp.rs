//! An MCP server over the executor (cargo feature `mcp`): everything behind the
//! `swiftide-ssh-mcp` binary (its own crate, which parses the command line, builds the
//! executor and calls [`serve`]), for embedding the server in a program of your own.
//!
//! [`SshMcpServer`] is an [`rmcp`] `ServerHandler` with twenty-two tools: `run_command`,
//! `read_file`, `write_file`, `list_directory`, `glob`, `grep` and `file_info`; for jobs
//! (commands that outlive the call, the connection and the server: [`SshExecutor::spawn_job`])
//! `start_job`, `job_output` (stdout and stderr since a cursor: cursor in, cursor out,
//! nothing consumed), `job_status` (with an optional wait for the end), `kill_job` and
//! `list_jobs`; and for terminals (a program in a pseudo-terminal, the login shell by
//! default, driven with text and named keys and read as a screen:
//! [`SshExecutor::open_terminal`]) `open_terminal`, `terminal_send`, `terminal_screen`,
//! `close_terminal` and `list_terminals`; and for services on the host, `expose_port` (a local
//! address, through a forward: [`SshExecutor::forward_local`], with structured `address` and
//! `url`) and `list_ports`; and for rolling back what an agent did, `checkpoint`,
//! `changes_since` and `rollback` ([`SshExecutor::checkpoint`], within the root). Job,
//! terminal, port and checkpoint tools take the arguments and give the
//! texts of every door (the crate's shared tools). Exposed ports are the server's: they close
//! when it goes away.
//!
//! * **Streaming:** `run_command` sends each batch of output as a `notifications/progress`
//!   message (progress = bytes so far, message = the text) when the request carried a
//!   progress token.
//! * **Cancellation:** a `notifications/cancelled` for a running tool call drops the
//!   executor's future, which kills the remote process group (SIGTERM, then SIGKILL after the
//!   grace period). So does the client going away (stdin closed). A job is not a call: it
//!   keeps running when the client or the server goes away; `kill_job` kills it. A
//!   terminal is the server's: cancelling a `terminal_send` or `terminal_screen` ends its
//!   wait (the terminal stays open, what was typed stays typed); `close_terminal` kills its
//!   session, and so does the server going away (dropping the last clone of it kills every
//!   terminal still open). At most 8 are open at once.
//! * **Root:** with [`ServerOptions::root`] every file tool (and the working directory of
//!   `run_command`, `start_job` and `open_terminal`) resolves its path with the server's `realpath` (SFTP) before each access, and
//!   refuses a path that resolves outside the root. Commands themselves are not confined: a shell
//!   command can touch anything the account can.
//! * **Errors:** arguments that do not match a tool's schema are JSON-RPC `invalid params`
//!   errors (rmcp's convention); everything else that goes wrong (a nonzero exit, a path
//!   outside the root, a missing file, an unreachable host) is a tool result with
//!   `isError: true` and a message saying what happened. The server never exits because of
//!   a tool call.
//!
//! File contents and command texts are never logged.

use std::{
    ffi::OsString,
    ops::ControlFlow,
    path::{Component, Path, PathBuf},
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use data_encoding::BASE64;
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        CallToolResult, ContentBlock, Implementation, ProgressNotificationParam,
        ServerCapabilities, ServerConfig,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{
    Error, ExecOptions, Execution, ExitStatus, FileMetadata, OutputChunk, SftpStatus, SshExecutor,
    forwards::tools::{EXPOSE_PORT_ABOUT, ExposePortArgs, LIST_PORTS_ABOUT, PortSet},
    jobs::tools::{
        JOB_OUTPUT_ABOUT, JOB_STATUS_ABOUT, JobOutputArgs, JobStatusArgs, KILL_JOB_ABOUT,
        KillJobArgs, LIST_JOBS_ABOUT, START_JOB_ABOUT, StartJobArgs, job_output, job_status,
        kill_job, list_jobs, model_facing, start_job,
    },
    terminals::tools::{
        CLOSE_TERMINAL_ABOUT, CloseTerminalArgs, LIST_TERMINALS_ABOUT, OPEN_TERMINAL_ABOUT,
        OpenTerminalArgs, TERMINAL_SCREEN_ABOUT, TERMINAL_SEND_ABOUT, TerminalScreenArgs,
        TerminalSendArgs, TerminalSet, ToolFailure,
    },
    tools::{
        checkpoints::{
            self, CHANGES_SINCE_ABOUT, CHECKPOINT_ABOUT, CheckpointArgs, CheckpointIdArgs,
            ROLLBACK_ABOUT,
        },
        search::{self, GLOB_ABOUT, GREP_ABOUT, SearchError},
    },
};

/// Files larger than this are refused by `read_file` (an MCP message carries them whole).
pub const MAX_READ_BYTES: u64 = 10 * 1024 * 1024;
/// `write_file` compares an existing file of the same size up to this many bytes with the
/// new content (read back: a cost next to the write's only for small files).
const MAX_COMPARED_BYTES: u64 = 1024 * 1024;
/// How long `glob` and `grep` may take.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(120);
/// `grep` shows at most this many characters of a line (then `…`).
const MAX_LINE_CHARS: usize = 500;
/// Symlink resolution gives up after this many missing trailing components.
const MAX_MISSING_COMPONENTS: usize = 64;

/// What the server needs besides the executor.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServerOptions {
    /// Confine the file tools (and the working directories of `run_command`, `start_job`
    /// and `open_terminal`) to this remote directory.
    pub root: Option<PathBuf>,
}

impl ServerOptions {
    /// Sets [`root`](Self::root).
    #[must_use]
    pub fn root(mut self, root: impl Into<PathBuf>) -> Self {
        self.root = Some(root.into());
        self
    }
}

/// The MCP server: the executor's commands and files as MCP tools. Serve it with rmcp
/// (`server.serve(transport)`), or over stdio with [`serve`].
#[derive(Debug, Clone)]
pub struct SshMcpServer {
    executor: SshExecutor,
    root: Option<PathBuf>,
    /// The open terminals, shared by clones; the last one dropped kills them.
    terminals: Arc<TerminalSet>,
    /// The exposed ports, shared by clones; the last one dropped closes them.
    ports: Arc<PortSet>,
    tool_router: ToolRouter<Self>,
}

/// Arguments of `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunCommandArgs {
    /// The shell command, run with `sh -c` on the remote host (a text starting with `#!` runs
    /// as a script with that interpreter). Stdin is empty; there is no terminal.
    pub command: String,
    /// Timeout in seconds; the remote process group is killed when it expires. Defaults to
    /// the server's `--timeout`.
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// Directory to run in: absolute, or relative to the server's working directory.
    #[serde(default)]
    pub working_directory: Option<String>,
}

/// How file content travels in `read_file` and `write_file`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Encoding {
    /// UTF-8 text (the default); `read_file` refuses a file that is not valid UTF-8.
    #[default]
    Utf8,
    /// Standard base64 (RFC 4648, with padding), for binary files.
    Base64,
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ReadFileArgs {
    /// The file: absolute, or relative to the server's working directory.
    pub path: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WriteFileArgs {
    /// The file: absolute, or relative to the server's working directory. Missing parent
    /// directories are created; an existing file is replaced atomically, keeping its mode
    /// (one that already holds the content is left alone and reported unchanged).
    pub path: String,
    /// The new content, encoded as `encoding` says.
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
}

/// Arguments of `list_directory` and `file_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PathArgs {
    /// The path: absolute, or relative to the server's working directory.
    pub path: String,
}

/// Arguments of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ListDirectoryArgs {
    /// The directory: absolute, or relative to the server's working directory. Defaults to
    /// the working directory.
    #[serde(default)]
    pub path: Option<String>,
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GlobArgs {
    /// A glob relative to `path` (the `glob` crate's syntax): `*` and `?` stay within one
    /// path component, `**` spans directories, `[abc]` and `[!abc]` are classes (e.g.
    /// `src/**/*.rs`). Not absolute, no `..` components.
    pub pattern: String,
    /// The directory to search. Defaults to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// At most this many paths (default 1000).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GrepArgs {
    /// A regular expression in Rust regex syntax (as ripgrep: `\d+`, `foo|bar`, `(?i)x`),
    /// or a literal string with `fixed_strings`.
    pub pattern: String,
    /// The file or directory to search (directories recursively, binary files skipped).
    /// Defaults to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files that match this glob: the file name when it has no `/` (e.g.
    /// `*.rs`), else the path below `path` (e.g. `src/**/*.rs`).
    #[serde(default)]
    pub include: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Treat `pattern` as a literal string.
    #[serde(default)]
    pub fixed_strings: bool,
    /// At most this many matching lines (default 200), sorted by path then line; the search
    /// stops there.
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// A tool failure: the message the client sees in an `isError` result.
type ToolResult<T> = std::result::Result<T, String>;

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

fn into_result(result: ToolResult<CallToolResult>) -> Result<CallToolResult, ErrorData> {
    Ok(result.unwrap_or_else(tool_error))
}

/// A search failure as the client reads it.
fn search_failure(error: SearchError) -> String {
    match error {
        SearchError::Host(error) => describe(&error),
        SearchError::Missing(path) => {
            format!(
                "cannot search {}: no such file or directory",
                path.display()
            )
        }
        SearchError::NotADirectory(path) => {
            format!("cannot search {}: not a directory", path.display())
        }
        other => other.to_string(),
    }
}

/// Runs a search within [`SEARCH_TIMEOUT`], ending it (and its remote `find`) when the client
/// cancels the call.
async fn bounded<T>(
    search: impl Future<Output = T>,
    cancel: &RequestContext<RoleServer>,
) -> ToolResult<T> {
    tokio::select! {
        done = tokio::time::timeout(SEARCH_TIMEOUT, search) => done.map_err(|_| {
            format!(
                "the search took over {} s; pass a narrower `path`",
                SEARCH_TIMEOUT.as_secs()
            )
        }),
        () = cancel.ct.cancelled() => Err("cancelled by the client".to_owned()),
    }
}

/// An error with its causes, `: `-separated (a cause already in the message is skipped).
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Splits a stream's bytes into text without breaking a UTF-8 sequence across chunks.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    fn push(&mut self, bytes: &[u8], out: &mut String) {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete sequence at the end waits for the next chunk.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
        self.pending.drain(..valid);
    }
}

impl SshMcpServer {
    /// A server over `executor`. Nothing is sent to the host until the first tool call, so a
    /// host that is down makes each call fail with a tool error rather than the server.
    pub fn new(executor: SshExecutor, options: ServerOptions) -> Self {
        Self {
            terminals: Arc::new(TerminalSet::new(executor.clone())),
            ports: Arc::new(PortSet::new(executor.clone())),
            executor,
            root: options.root,
            tool_router: Self::tool_router(),
        }
    }

    /// The executor the tools use.
    pub fn executor(&self) -> &SshExecutor {
        &self.executor
    }

    /// The remote path a file tool accesses for `path`: relative paths join the workdir;
    /// with a root, the result of the server's `realpath` (following every symlink, allowing
    /// missing trailing components), refused when it is outside the root's own `realpath`.
    async fn resolve(&self, path: &str) -> ToolResult<PathBuf> {
        if path.is_empty() {
            return Err("`path` is empty".to_owned());
        }
        let lexical = self.executor.resolve_path(Path::new(path), None);
        let Some(root) = &self.root else {
            return Ok(lexical);
        };
        let root_real = self.executor.canonicalize(root).await.map_err(|e| {
            format!(
                "cannot resolve the root {}: {}",
                root.display(),
                describe(&e)
            )
        })?;
        let real = self.real_path(&lexical).await?;
        if real.starts_with(&root_real) {
            Ok(real)
        } else {
            Err(format!(
                "path `{path}` resolves to {}, which is outside the root {}; the file tools \
                 only access paths under the root",
                real.display(),
                root_real.display()
            ))
        }
    }

    /// `realpath` that tolerates missing trailing components (a file about to be written):
    /// the deepest existing ancestor is resolved and the missing names appended.
    async fn real_path(&self, path: &Path) -> ToolResult<PathBuf> {
        let mut missing: Vec<OsString> = Vec::new();
        let mut current = path.to_path_buf();
        loop {
            match self.executor.canonicalize(&current).await {
                Ok(mut real) => {
                    for name in missing.iter().rev() {
                        real.push(name);
                    }
                    return Ok(real);
                }
                Err(Error::Sftp {
                    status: Some(SftpStatus::NoSuchFile),
                    ..
                }) if missing.len() < MAX_MISSING_COMPONENTS => {
                    let Some(Component::Normal(name)) = current.components().next_back() else {
                        return Err(format!(
                            "cannot resolve {}: no such directory",
                            path.display()
                        ));
                    };
                    missing.push(name.to_owned());
                    current.pop();
                    if current.as_os_str().is_empty() {
                        current.push(".");
                    }
                }
                Err(error) => {
                    return Err(format!(
                        "cannot resolve {}: {}",
                        path.display(),
                        describe(&error)
                    ));
                }
            }
        }
    }
}

/// The text and structured result of a finished command.
fn execution_result(execution: &Execution) -> CallToolResult {
    let stdout = execution.stdout_lossy();
    let stderr = String::from_utf8_lossy(&execution.stderr()).into_owned();
    let mut text = stdout;
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&stderr);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if execution.omitted_bytes > 0 {
        text.push_str(&format!(
            "[{} bytes of output omitted from the middle]\n",
            execution.omitted_bytes
        ));
    }
    let (exit_code, signal, timed_out) = match &execution.status {
        ExitStatus::Code(code) => {
            text.push_str(&format!("[exit code {code}]"));
            (Some(*code), None, false)
        }
        ExitStatus::Signal { name, .. } => {
            text.push_str(&format!("[killed by signal {name}]"));
            (None, Some(name.clone()), false)
        }
        ExitStatus::TimedOut { timeout, .. } => {
            text.push_str(&format!(
                "[timed out after {:.1} s; the process group was killed]",
                timeout.as_secs_f64()
            ));
            (None, None, true)
        }
        _ => {
            text.push_str("[ended without an exit status]");
            (None, None, false)
        }
    };
    let mut result = if execution.success() {
        text_result(text)
    } else {
        tool_error(text)
    };
    result.structured_content = Some(json!({
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "duration_ms": u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX),
        "omitted_bytes": execution.omitted_bytes,
    }));
    result
}

fn metadata_json(
    path: &Path,
    metadata: &FileMetadata,
    link: Option<&FileMetadata>,
) -> serde_json::Value {
    let modified = metadata
        .modified
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map(|since| since.as_secs());
    json!({
        "path": path.to_string_lossy(),
        "type": metadata.file_type.to_string(),
        "size": metadata.size,
        "permissions": format!("{:04o}", metadata.permissions),
        "modified_unix": modified,
        "uid": metadata.uid,
        "gid": metadata.gid,
        "is_symlink": link.is_some_and(FileMetadata::is_symlink),
    })
}

#[tool_router]
impl SshMcpServer {
    #[tool(
        description = "Run a shell command on the remote host (sh -c, no stdin, no terminal) and \
        return its stdout, stderr and exit status. Output is streamed as progress notifications \
        when the request has a progress token. Cancelling the request kills the command's whole \
        process group. A nonzero exit is reported as an error result with the output."
    )]
    async fn run_command(
        &self,
        Parameters(args): Parameters<RunCommandArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.run_command_inner(args, &context).await)
    }

    #[tool(
        description = "Read a whole file on the remote host (up to 10 MiB). Text by default; pass \
        encoding \"base64\" for binary files."
    )]
    async fn read_file(
        &self,
        Parameters(args): Parameters<ReadFileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.read_file_inner(args).await)
    }

    #[tool(
        description = "Write a whole file on the remote host, replacing it atomically (mode kept) \
        and creating missing parent directories; a file that already holds the content is left \
        alone and reported unchanged. Content is text by default; pass encoding \"base64\" \
        for binary content."
    )]
    async fn write_file(
        &self,
        Parameters(args): Parameters<WriteFileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.write_file_inner(args).await)
    }

    #[tool(
        description = "List a directory on the remote host: one entry per line with its type \
        (file, dir, symlink, other), permissions, size in bytes and name (directories end in /)."
    )]
    async fn list_directory(
        &self,
        Parameters(args): Parameters<ListDirectoryArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.list_directory_inner(args).await)
    }

    #[tool(description = GLOB_ABOUT)]
    async fn glob(
        &self,
        Parameters(args): Parameters<GlobArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.glob_inner(args, &context).await)
    }

    #[tool(description = GREP_ABOUT)]
    async fn grep(
        &self,
        Parameters(args): Parameters<GrepArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.grep_inner(args, &context).await)
    }

    #[tool(
        description = "Metadata of a path on the remote host as JSON: type, size, permissions \
        (octal), modification time (Unix seconds), owner ids, and whether it is a symlink."
    )]
    async fn file_info(
        &self,
        Parameters(args): Parameters<PathArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.file_info_inner(args).await)
    }

    #[tool(description = CHECKPOINT_ABOUT)]
    async fn checkpoint(
        &self,
        Parameters(args): Parameters<CheckpointArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.checkpoint_inner(&args.path, None).await)
    }

    #[tool(description = CHANGES_SINCE_ABOUT)]
    async fn changes_since(
        &self,
        Parameters(args): Parameters<CheckpointIdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(
            self.checkpoint_inner(&args.path, Some((&args.id, false)))
                .await,
        )
    }

    #[tool(description = ROLLBACK_ABOUT)]
    async fn rollback(
        &self,
        Parameters(args): Parameters<CheckpointIdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(
            self.checkpoint_inner(&args.path, Some((&args.id, true)))
                .await,
        )
    }

    #[tool(description = START_JOB_ABOUT)]
    async fn start_job(
        &self,
        Parameters(args): Parameters<StartJobArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.start_job_inner(args).await)
    }

    #[tool(description = JOB_OUTPUT_ABOUT)]
    async fn job_output(
        &self,
        Parameters(args): Parameters<JobOutputArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.job_output_inner(args).await)
    }

    #[tool(description = JOB_STATUS_ABOUT)]
    async fn job_status(
        &self,
        Parameters(args): Parameters<JobStatusArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let wait = args.wait();
        into_result(match wait {
            Ok(wait) => job_status(&self.executor, &args.id, wait)
                .await
                .map(text_result)
                .map_err(|e| job_error(&e)),
            Err(error) => Err(job_error(&error)),
        })
    }

    #[tool(description = KILL_JOB_ABOUT)]
    async fn kill_job(
        &self,
        Parameters(args): Parameters<KillJobArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let grace = args.grace();
        into_result(match grace {
            Ok(grace) => kill_job(&self.executor, &args.id, grace)
                .await
                .map(text_result)
                .map_err(|e| job_error(&e)),
            Err(error) => Err(job_error(&error)),
        })
    }

    #[tool(description = LIST_JOBS_ABOUT)]
    async fn list_jobs(&self) -> Result<CallToolResult, ErrorData> {
        into_result(
            list_jobs(&self.executor)
                .await
                .map(text_result)
                .map_err(|e| job_error(&e)),
        )
    }

    #[tool(description = OPEN_TERMINAL_ABOUT)]
    async fn open_terminal(
        &self,
        Parameters(args): Parameters<OpenTerminalArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(self.open_terminal_inner(args).await)
    }

    #[tool(description = TERMINAL_SEND_ABOUT)]
    async fn terminal_send(
        &self,
        Parameters(args): Parameters<TerminalSendArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(cancellable(self.terminals.send(args), &context).await)
    }

    #[tool(description = TERMINAL_SCREEN_ABOUT)]
    async fn terminal_screen(
        &self,
        Parameters(args): Parameters<TerminalScreenArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(cancellable(self.terminals.screen(args), &context).await)
    }

    #[tool(description = CLOSE_TERMINAL_ABOUT)]
    async fn close_terminal(
        &self,
        Parameters(args): Parameters<CloseTerminalArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(
            self.terminals
                .close(args)
                .await
                .map(text_result)
                .map_err(|e| e.to_string()),
        )
    }

    #[tool(description = LIST_TERMINALS_ABOUT)]
    async fn list_terminals(&self) -> Result<CallToolResult, ErrorData> {
        Ok(text_result(self.terminals.list()))
    }

    #[tool(description = EXPOSE_PORT_ABOUT)]
    async fn expose_port(
        &self,
        Parameters(args): Parameters<ExposePortArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        into_result(match self.ports.expose(args).await {
            Ok((local, text)) => {
                let mut result = text_result(text);
                result.structured_content = Some(json!({
                    "address": local.to_string(),
                    "url": format!("http://{local}/"),
                }));
                Ok(result)
            }
            Err(error) => Err(error.to_string()),
        })
    }

    #[tool(description = LIST_PORTS_ABOUT)]
    async fn list_ports(&self) -> Result<CallToolResult, ErrorData> {
        Ok(text_result(self.ports.list().await))
    }
}

/// A terminal tool's wait, ended early by the client's `notifications/cancelled` (the
/// terminal stays open).
async fn cancellable(
    work: impl Future<Output = Result<String, ToolFailure>>,
    context: &RequestContext<RoleServer>,
) -> ToolResult<CallToolResult> {
    tokio::select! {
        result = work => result.map(text_result).map_err(|e| e.to_string()),
        () = context.ct.cancelled() => Err("cancelled by the client; the terminal is still open \
            (what was sent before the cancel was typed)".to_owned()),
    }
}

/// A job error as the client reads it: the plain message for one the model can act on, the
/// message with its causes for a transport failure.
fn job_error(error: &Error) -> String {
    model_facing(error).unwrap_or_else(|| describe(error))
}

impl SshMcpServer {
    async fn run_command_inner(
        &self,
        args: RunCommandArgs,
        context: &RequestContext<RoleServer>,
    ) -> ToolResult<CallToolResult> {
        if args.command.trim().is_empty() {
            return Err("`command` is empty".to_owned());
        }
        let mut options = ExecOptions::default();
        if let Some(secs) = args.timeout_secs {
            if !(secs.is_finite() && secs > 0.0 && secs <= 7.0 * 86_400.0) {
                return Err(format!(
                    "`timeout_secs` must be a number of seconds above 0 and at most 604800, not {secs}"
                ));
            }
            options = options.timeout(Duration::from_secs_f64(secs));
        }
        if let Some(dir) = &args.working_directory {
            options = options.current_dir(self.resolve(dir).await?);
        }
        let token = context.meta.get_progress_token();
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<OutputChunk>();
        let executor = self.executor.clone();
        let command = args.command;
        let streams = token.is_some();
        let run = async move {
            let mut sink = |chunk: &OutputChunk| {
                if streams {
                    let _ = sender.send(chunk.clone());
                }
            };
            executor.execute(&command, options, &mut sink).await
            // `sender` drops here, which ends the forwarding below.
        };
        let forward = async {
            let Some(token) = token else { return };
            let (mut out, mut err) = (Utf8Carry::default(), Utf8Carry::default());
            let mut total = 0u64;
            while let Some(first) = receiver.recv().await {
                // Everything already queued goes out as one notification.
                let mut text = String::new();
                let mut next = Some(first);
                while let Some(chunk) = next {
                    total += chunk.bytes().len() as u64;
                    match &chunk {
                        OutputChunk::Stdout(bytes) => out.push(bytes, &mut text),
                        OutputChunk::Stderr(bytes) => err.push(bytes, &mut text),
                    }
                    next = receiver.try_recv().ok();
                }
                let progress =
                    ProgressNotificationParam::new(token.clone(), total as f64).with_message(text);
                if context.peer.notify_progress(progress).await.is_err() {
                    tracing::debug!("could not send a progress notification");
                }
            }
        };
        let finished = async {
            let (result, ()) = tokio::join!(run, forward);
            result
        };
        tokio::select! {
            result = finished => match result {
                Ok(execution) => Ok(execution_result(&execution)),
                Err(error) => Err(describe(&error)),
            },
            // Dropping `finished` drops the executor's future: the remote group is killed.
            () = context.ct.cancelled() => Err("cancelled by the client; the command's process group was killed".to_owned()),
        }
    }

    async fn read_file_inner(&self, args: ReadFileArgs) -> ToolResult<CallToolResult> {
        let path = self.resolve(&args.path).await?;
        match self.executor.metadata(&path).await {
            Ok(metadata) if metadata.is_dir() => {
                return Err(format!(
                    "{} is a directory; use list_directory",
                    path.display()
                ));
            }
            Ok(metadata) if metadata.size > MAX_READ_BYTES => {
                return Err(format!(
                    "{} is {} bytes, over read_file's limit of {MAX_READ_BYTES}; read parts of it \
                     with run_command (e.g. `head -c`, `sed -n`)",
                    path.display(),
                    metadata.size
                ));
            }
            // Without SFTP metadata fails; the read itself has a fallback and its own errors.
            _ => {}
        }
        let bytes = self
            .executor
            .read_file_bytes(&path)
            .await
            .map_err(|e| describe(&e))?;
        match args.encoding {
            Encoding::Base64 => Ok(text_result(BASE64.encode(&bytes))),
            Encoding::Utf8 => String::from_utf8(bytes).map(text_result).map_err(|e| {
                format!(
                    "{} is not valid UTF-8 text (invalid byte at offset {}); read it with \
                     encoding \"base64\"",
                    path.display(),
                    e.utf8_error().valid_up_to()
                )
            }),
        }
    }

    async fn write_file_inner(&self, args: WriteFileArgs) -> ToolResult<CallToolResult> {
        let content = match args.encoding {
            Encoding::Utf8 => args.content.into_bytes(),
            Encoding::Base64 => BASE64
                .decode(args.content.trim().as_bytes())
                .map_err(|e| format!("`content` is not valid base64: {e}"))?,
        };
        let path = self.resolve(&args.path).await?;
        if self.already_holds(&path, &content).await {
            return Ok(text_result(format!(
                "unchanged: {} already holds these {} bytes; nothing written",
                path.display(),
                content.len()
            )));
        }
        self.executor
            .write_file_bytes(&path, &content)
            .await
            .map_err(|e| describe(&e))?;
        Ok(text_result(format!(
            "wrote {} bytes to {}",
            content.len(),
            path.display()
        )))
    }

    /// Whether `path` is a regular file holding exactly `content`: then `write_file` writes
    /// nothing, as a push leaves a file that is already as pushed (the mode and owner a write
    /// keeps are unchanged by definition). Only files of the same size up to
    /// [`MAX_COMPARED_BYTES`] are read back; any failure answers no, and the write reports
    /// what is wrong.
    async fn already_holds(&self, path: &Path, content: &[u8]) -> bool {
        let len = content.len() as u64;
        if len > MAX_COMPARED_BYTES {
            return false;
        }
        match self.executor.metadata(path).await {
            Ok(metadata) if metadata.is_file() && metadata.size == len => {}
            _ => return false,
        }
        self.executor
            .read_file_bytes(path)
            .await
            .is_ok_and(|bytes| bytes == content)
    }

    async fn list_directory_inner(&self, args: ListDirectoryArgs) -> ToolResult<CallToolResult> {
        let path = self.resolve(args.path.as_deref().unwrap_or(".")).await?;
        let entries = self
            .executor
            .list_dir(&path)
            .await
            .map_err(|e| describe(&e))?;
        let mut text = format!("{} ({} entries)\n", path.display(), entries.len());
        for entry in &entries {
            let metadata = &entry.metadata;
            let suffix = if metadata.is_dir() { "/" } else { "" };
            text.push_str(&format!(
                "{:<7} {:04o} {:>12} {}{suffix}\n",
                metadata.file_type.to_string(),
                metadata.permissions,
                metadata.size,
                entry.name
            ));
        }
        Ok(text_result(text))
    }

    async fn glob_inner(
        &self,
        args: GlobArgs,
        context: &RequestContext<RoleServer>,
    ) -> ToolResult<CallToolResult> {
        if args.pattern.is_empty() || args.pattern.starts_with('/') {
            return Err(
                "`pattern` must be a non-empty glob relative to `path` (pass the directory as \
                 `path`)"
                    .to_owned(),
            );
        }
        let max = args.max_results.unwrap_or(1000).max(1) as usize;
        let base = self.resolve(args.path.as_deref().unwrap_or(".")).await?;
        // With a root, a walk never enters a symlinked directory (it could lead out).
        let query = search::GlobQuery {
            dir: &base,
            pattern: &args.pattern,
            follow_links: self.root.is_none(),
        };
        let found = bounded(search::glob(&self.executor, &query), context)
            .await?
            .map_err(search_failure)?;
        let total = found.len();
        let mut text = found
            .iter()
            .take(max)
            .map(|path| {
                path.strip_prefix(&base)
                    .unwrap_or(path)
                    .to_string_lossy()
                    .into_owned()
            })
            .collect::<Vec<_>>()
            .join("\n");
        if total == 0 {
            text = format!("no paths under {} match `{}`", base.display(), args.pattern);
        } else if total > max {
            text.push_str(&format!("\n[{} more not shown]", total - max));
        }
        Ok(text_result(text))
    }

    async fn grep_inner(
        &self,
        args: GrepArgs,
        context: &RequestContext<RoleServer>,
    ) -> ToolResult<CallToolResult> {
        if args.pattern.is_empty() {
            return Err("`pattern` is empty".to_owned());
        }
        let max = args.max_results.unwrap_or(200).max(1) as usize;
        let options = search::RegexOptions {
            case_insensitive: args.case_insensitive,
            fixed_strings: args.fixed_strings,
            multiline: false,
        };
        let matcher = search::Matcher::new(&args.pattern, options).map_err(search_failure)?;
        let include = args
            .include
            .as_deref()
            .map(search::Include::new)
            .transpose()
            .map_err(search_failure)?;
        let base = self.resolve(args.path.as_deref().unwrap_or(".")).await?;
        let query = search::GrepQuery {
            path: &base,
            matcher: &matcher,
            include: include.as_ref(),
            recursive: true,
        };
        let mut lines = Vec::new();
        let mut stopped = false;
        let search = search::grep(&self.executor, &query, |file| {
            for hit in file.hits {
                if lines.len() == max {
                    stopped = true;
                    return ControlFlow::Break(());
                }
                let text = match hit.line.char_indices().nth(MAX_LINE_CHARS) {
                    Some((at, _)) => format!("{}…", &hit.line[..at]),
                    None => hit.line,
                };
                lines.push(format!(
                    "{}:{}:{text}",
                    file.path.display(),
                    hit.line_number
                ));
            }
            ControlFlow::Continue(())
        });
        bounded(search, context).await?.map_err(search_failure)?;
        if lines.is_empty() {
            return Ok(text_result(format!(
                "no matches for `{}` in {}",
                args.pattern,
                base.display()
            )));
        }
        if stopped {
            lines.push(format!("[stopped after {max} matching lines]"));
        }
        Ok(text_result(lines.join("\n")))
    }

    /// `checkpoint` (no id), `changes_since` (an id) or `rollback` (an id, `true`) of the
    /// tree at `path`, within the root.
    async fn checkpoint_inner(
        &self,
        path: &str,
        id: Option<(&str, bool)>,
    ) -> ToolResult<CallToolResult> {
        let dir = self.resolve(path).await?;
        let done = match id {
            None => checkpoints::checkpoint(&self.executor, &dir).await,
            Some((id, false)) => checkpoints::changes_since(&self.executor, &dir, id).await,
            Some((id, true)) => checkpoints::rollback(&self.executor, &dir, id).await,
        };
        done.map(text_result).map_err(|error| describe(&error))
    }

    async fn start_job_inner(&self, args: StartJobArgs) -> ToolResult<CallToolResult> {
        if args.command.trim().is_empty() {
            return Err("`command` is empty".to_owned());
        }
        let dir = match &args.working_directory {
            Some(dir) => Some(self.resolve(dir).await?),
            None => None,
        };
        let (command, mut options) = args.into_options().map_err(|e| job_error(&e))?;
        if let Some(dir) = dir {
            options = options.current_dir(dir);
        }
        let (job, text) = start_job(&self.executor, &command, options)
            .await
            .map_err(|e| job_error(&e))?;
        let mut result = text_result(text);
        result.structured_content =
            Some(json!({ "id": job.id(), "cursor": crate::JobCursor::default().to_string() }));
        Ok(result)
    }

    async fn job_output_inner(&self, args: JobOutputArgs) -> ToolResult<CallToolResult> {
        let (cursor, max) = args.cursor_and_limit().map_err(|e| job_error(&e))?;
        let (poll, text) = job_output(&self.executor, &args.id, cursor, max)
            .await
            .map_err(|e| job_error(&e))?;
        let mut result = text_result(text);
        result.structured_content = Some(json!({
            "cursor": poll.cursor().to_string(),
            "finished": poll.finished(),
        }));
        Ok(result)
    }

    async fn open_terminal_inner(&self, args: OpenTerminalArgs) -> ToolResult<CallToolResult> {
        let dir = match &args.working_directory {
            Some(dir) => Some(self.resolve(dir).await?),
            None => None,
        };
        let (command, mut options) = args.into_options().map_err(|e| e.to_string())?;
        if let Some(dir) = dir {
            options = options.current_dir(dir);
        }
        let (id, text) = self
            .terminals
            .open(command, options)
            .await
            .map_err(|e| e.to_string())?;
        let mut result = text_result(text);
        result.structured_content = Some(json!({ "id": id }));
        Ok(result)
    }

    async fn file_info_inner(&self, args: PathArgs) -> ToolResult<CallToolResult> {
        let path = self.resolve(&args.path).await?;
        let link = self
            .executor
            .symlink_metadata(&path)
            .await
            .map_err(|e| describe(&e))?;
        let metadata = if link.is_symlink() {
            // A dangling link is described as the link itself.
            self.executor
                .metadata(&path)
                .await
                .unwrap_or_else(|_| link.clone())
        } else {
            link.clone()
        };
        Ok(CallToolResult::structured(metadata_json(
            &path,
            &metadata,
            Some(&link),
        )))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SshMcpServer {
    fn get_info(&self) -> ServerConfig {
        let mut instructions = format!(
            "Tools run commands and access files on the remote host {} over SSH. Relative paths \
             resolve against {}.",
            self.executor.host(),
            self.executor.workdir().map_or_else(
                || "the login directory".to_owned(),
                |dir| dir.display().to_string()
            )
        );
        instructions.push_str(
            " Commands get no stdin and no terminal: run interactive programs (REPLs, \
             prompts, less, top) with open_terminal and terminal_send, and close_terminal them \
             when done. A service started on the host (a dev server, a database) is reached \
             from here through expose_port.",
        );
        if let Some(root) = &self.root {
            instructions.push_str(&format!(
                " File tools only access paths under {} (after resolving symlinks).",
                root.display()
            ));
        }
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "swiftide-ssh-mcp",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(instructions)
    }
}

/// Serves `server` on this process's stdin and stdout until the client closes stdin (what the
/// `swiftide-ssh-mcp` binary runs). Tool calls still running then are cancelled (their remote
/// process groups killed). A first connection is attempted in the background at once, so
/// that an executor built with [`build_lazy`](crate::SshExecutorBuilder::build_lazy) reports
/// a wrong host key or an unreachable host in the log before the first tool call.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve(server: SshMcpServer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let warm = server.executor.clone();
    tokio::spawn(async move {
        match warm.metadata(Path::new("/")).await {
            Ok(_) => tracing::info!(host = %warm.host(), "connected"),
            Err(error) => tracing::warn!(
                host = %warm.host(),
                "cannot reach the host yet (tool calls will report it): {}",
                describe(&error)
            ),
        }
    });
    let service = server.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_sequences_survive_chunk_boundaries() {
        let mut carry = Utf8Carry::default();
        let mut out = String::new();
        let bytes = "héllo".as_bytes();
        carry.push(&bytes[..2], &mut out);
        carry.push(&bytes[2..], &mut out);
        assert_eq!(out, "héllo");
    }
}
