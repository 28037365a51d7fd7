//! The executor's own shell scripts: the exec fallbacks for paths SFTP cannot carry
//! ([`crate::files::exec_fallback`]) and the remote `find` runs behind `stream_files`
//! ([`crate::files::stream_files`]). They run through the same exec machinery as user commands, so
//! a dropped future kills them, but without the user's directory and environment settings.

use std::path::Path;

use crate::{
    command::{self, ExecRequest, Execution, ExitStatus, OutputChunk, OutputSink, quote},
    error::{Error, Result},
    executor::SshExecutor,
};

/// Runs `script` with `stdin`, passing its output to `sink` as it arrives. It reports its
/// process group with the same marker as user commands so that a dropped future kills it.
pub(crate) async fn run_script(
    executor: &SshExecutor,
    script: &[u8],
    stdin: Vec<u8>,
    sink: &mut OutputSink<'_>,
) -> Result<Execution> {
    // As the handle escalates: files, listings and jobs of the target account.
    let request = ExecRequest::script(script, &stdin, executor.exchange())?;
    command::execute(&executor.inner, request, None, sink).await
}

/// What a finished script printed, collected through the sink (the [`Execution`] may keep
/// less when an output cap is configured).
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// Runs a script to completion and returns its status and everything it printed.
pub(crate) async fn run_collect(
    executor: &SshExecutor,
    script: &[u8],
    stdin: Vec<u8>,
) -> Result<(ExitStatus, Collected)> {
    let mut collected = Collected::default();
    let run = run_script(executor, script, stdin, &mut |chunk| match chunk {
        OutputChunk::Stdout(bytes) => collected.stdout.extend_from_slice(bytes),
        OutputChunk::Stderr(bytes) => collected.stderr.extend_from_slice(bytes),
    })
    .await?;
    Ok((run.status, collected))
}

/// A path's bytes with `./` before a relative path, so that it never looks like an option.
pub(crate) fn option_safe(path: &[u8]) -> Vec<u8> {
    let mut word = Vec::with_capacity(path.len() + 2);
    if !path.starts_with(b"/") {
        word.extend_from_slice(b"./");
    }
    word.extend_from_slice(path);
    word
}

/// A path as one quoted shell word, made [`option_safe`].
pub(crate) fn quoted_path(path: &Path) -> Result<Vec<u8>> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.contains(&0) {
        return Err(Error::InvalidInput {
            reason: format!("path {} contains a NUL byte", path.display()),
        });
    }
    Ok(quote(&option_safe(bytes)))
}
