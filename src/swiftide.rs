//! The swiftide-core 0.33 `ToolExecutor` implementation: the only module that speaks
//! swiftide's types, so a swiftide upgrade touches one file.

use std::{path::Path, time::Duration};

use async_trait::async_trait;
use swiftide_core::{
    Command, CommandError, CommandOutput, CommandOutputChunk, CommandOutputSink, ToolExecutor,
    indexing::IndexingStream, report_buffered_output,
};

use crate::{
    error::{Error, SftpStatus},
    executor::{ExecOptions, SshExecutor},
    output::{Execution, ExitStatus, OutputChunk},
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
    let output = CommandOutput::from_chunks(execution.chunks.iter().map(to_swiftide));
    match execution.status {
        ExitStatus::Code(0) => Ok(output),
        ExitStatus::TimedOut { timeout, .. } => Err(CommandError::TimedOut { timeout, output }),
        _ => Err(CommandError::NonZeroExit(output)),
    }
}

/// The reason part of LocalExecutor's (fs-err's) file error messages.
fn file_failure(error: &Error) -> Option<String> {
    match error {
        Error::Sftp { status, reason, .. } => Some(match status {
            Some(SftpStatus::NoSuchFile) => "No such file or directory".to_owned(),
            Some(SftpStatus::PermissionDenied) => "Permission denied".to_owned(),
            _ => reason.clone(),
        }),
        _ => None,
    }
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
            match self.read_file_bytes(&resolved).await {
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
            match self.write_file_bytes(&resolved, content.as_bytes()).await {
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

    async fn stream_files(
        &self,
        path: &Path,
        extensions: Option<Vec<String>>,
    ) -> anyhow::Result<IndexingStream<String>> {
        let _ = (path, extensions);
        Ok(IndexingStream::from(anyhow::anyhow!(
            "stream_files is not available yet in swiftide-ssh-executor"
        )))
    }
}
