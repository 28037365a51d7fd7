//! The swiftide-core 0.33 layer: the `ToolExecutor` implementation (this file), and the job
//! terminal and port tools an agent calls ([`job_tools`], [`terminal_tools`],
//! [`port_tools`]). The only module
//! that speaks swiftide's types, so a swiftide upgrade touches this directory alone.

mod family;
mod job_tools;
mod port_tools;
mod terminal_tools;

pub use job_tools::JobTools;
pub use port_tools::PortTools;
pub use terminal_tools::TerminalTools;

use std::{path::Path, time::Duration};

use async_trait::async_trait;
use futures::StreamExt;
use swiftide_core::{
    Command, CommandError, CommandOutput, CommandOutputChunk, CommandOutputSink, ToolExecutor,
    indexing::{IndexingStream, TextNode},
    report_buffered_output,
};

use crate::{
    command::{Execution, ExitStatus, OutputChunk},
    error::Error,
    executor::{ExecOptions, SshExecutor},
    files::{self, LoadedFile},
};

fn to_swiftide(chunk: &OutputChunk) -> CommandOutputChunk {
    match chunk {
        OutputChunk::Stdout(bytes) => CommandOutputChunk::Stdout(bytes.clone()),
        OutputChunk::Stderr(bytes) => CommandOutputChunk::Stderr(bytes.clone()),
    }
}

/// Transport, connection and input problems are `ExecutorError`, as in swiftide's docker
/// executor; never `NonZeroExit`, which means "the command ran and failed".
fn executor_error(error: Error) -> CommandError {
    CommandError::ExecutorError(anyhow::Error::new(error))
}

fn to_result(execution: Execution) -> Result<CommandOutput, CommandError> {
    let mut chunks: Vec<CommandOutputChunk> = execution.chunks.iter().map(to_swiftide).collect();
    if execution.omitted_bytes > 0 {
        // CommandOutput has no truncation flag: say it in the text a model reads.
        let marker = format!(
            "\n[... {} bytes of output omitted ...]\n",
            execution.omitted_bytes
        );
        chunks.insert(
            execution.omitted_at.min(chunks.len()),
            CommandOutputChunk::Stdout(marker.into()),
        );
    }
    let output = CommandOutput::from_chunks(chunks);
    match execution.status {
        ExitStatus::Code(0) => Ok(output),
        ExitStatus::TimedOut { timeout, .. } => Err(CommandError::TimedOut { timeout, output }),
        _ => Err(CommandError::NonZeroExit(output)),
    }
}

/// The reason part of LocalExecutor's (fs-err's) file error messages, e.g. `Is a directory
/// (os error 21)`, when the failure is about the file (the server answered with a status).
/// Transport and input failures give `None`: they become `ExecutorError`.
fn file_failure(error: &Error) -> Option<&str> {
    match error {
        Error::Sftp {
            status: Some(_),
            reason,
            ..
        } => Some(reason),
        _ => None,
    }
}

/// A loaded file as LocalExecutor's loader builds its node: the content decoded lossily, and
/// `original_size` the length of that decoded text.
fn to_node(file: LoadedFile) -> anyhow::Result<TextNode> {
    let chunk = String::from_utf8_lossy(&file.content).into_owned();
    let original_size = chunk.len();
    TextNode::builder()
        .path(file.path)
        .chunk(chunk)
        .original_size(original_size)
        .build()
}

impl SshExecutor {
    async fn with_timeout<T>(
        &self,
        timeout: Option<Duration>,
        work: impl Future<Output = Result<T, CommandError>>,
    ) -> Result<T, CommandError> {
        match self.resolve_timeout(timeout) {
            Some(limit) => {
                tokio::time::timeout(limit, work)
                    .await
                    .map_err(|_| CommandError::TimedOut {
                        timeout: limit,
                        output: CommandOutput::empty(),
                    })?
            }
            None => work.await,
        }
    }

    async fn read_file_command(
        &self,
        path: &Path,
        current_dir: Option<&Path>,
        timeout: Option<Duration>,
    ) -> Result<CommandOutput, CommandError> {
        let resolved = self.resolve_path(path, current_dir);
        self.with_timeout(timeout, async {
            match self.read_resolved(&resolved).await {
                Ok(bytes) => Ok(CommandOutput::new(bytes)),
                Err(error) => match file_failure(&error) {
                    Some(reason) => Err(CommandError::NonZeroExit(
                        format!(
                            "failed to read from file `{}`: {reason}",
                            resolved.display()
                        )
                        .into(),
                    )),
                    None => Err(executor_error(error)),
                },
            }
        })
        .await
    }

    async fn write_file_command(
        &self,
        path: &Path,
        content: &str,
        current_dir: Option<&Path>,
        timeout: Option<Duration>,
    ) -> Result<CommandOutput, CommandError> {
        let resolved = self.resolve_path(path, current_dir);
        self.with_timeout(timeout, async {
            match self.write_resolved(&resolved, content.as_bytes()).await {
                Ok(()) => Ok(CommandOutput::empty()),
                Err(error) => match file_failure(&error) {
                    Some(reason) => Err(CommandError::NonZeroExit(
                        format!("failed to write to file `{}`: {reason}", resolved.display())
                            .into(),
                    )),
                    None => Err(executor_error(error)),
                },
            }
        })
        .await
    }
}

#[async_trait]
impl ToolExecutor for SshExecutor {
    async fn exec_cmd(&self, cmd: &Command) -> Result<CommandOutput, CommandError> {
        self.exec_cmd_streaming(cmd, &mut |_| {}).await
    }

    async fn exec_cmd_streaming(
        &self,
        cmd: &Command,
        output: &mut CommandOutputSink<'_>,
    ) -> Result<CommandOutput, CommandError> {
        match cmd {
            Command::Shell {
                command,
                current_dir,
                timeout,
            } => {
                let options = ExecOptions {
                    current_dir: current_dir.clone(),
                    timeout: *timeout,
                    ..ExecOptions::default()
                };
                let mut forward = |chunk: &OutputChunk| output(&to_swiftide(chunk));
                let execution = self
                    .execute(command, options, &mut forward)
                    .await
                    .map_err(executor_error)?;
                to_result(execution)
            }
            Command::ReadFile {
                path,
                current_dir,
                timeout,
            } => report_buffered_output(
                self.read_file_command(path, current_dir.as_deref(), *timeout)
                    .await,
                output,
            ),
            Command::WriteFile {
                path,
                content,
                current_dir,
                timeout,
            } => report_buffered_output(
                self.write_file_command(path, content, current_dir.as_deref(), *timeout)
                    .await,
                output,
            ),
            // `Command` is non-exhaustive; its Debug could hold file content, so it is not shown.
            _ => Err(CommandError::ExecutorError(anyhow::anyhow!(
                "unsupported swiftide Command variant"
            ))),
        }
    }

    /// Streams the files below `path` as LocalExecutor does (see the `stream_files` module for
    /// the selection rules). A relative `path` resolves against the workdir, not the local
    /// process's directory as in LocalExecutor. Always `Ok`: every failure, including a
    /// missing root, is an `Err` item.
    async fn stream_files(
        &self,
        path: &Path,
        extensions: Option<Vec<String>>,
    ) -> anyhow::Result<IndexingStream<String>> {
        let root = self.resolve_path(path, None);
        let files = files::walk_files(self.clone(), root, extensions);
        let nodes = futures::stream::unfold(files, |mut files| async move {
            let item = files.recv().await?;
            Some((item.and_then(to_node), files))
        });
        Ok(nodes.boxed().into())
    }
}

impl From<SshExecutor> for std::sync::Arc<dyn swiftide_core::ToolExecutor> {
    fn from(executor: SshExecutor) -> Self {
        std::sync::Arc::new(executor)
    }
}
