//! An agent-sdk [`Environment`] over SSH (feature `agent-sdk`): the SDK's primitive tools
//! (Read, Write, Edit, Grep, Glob, Bash) then work on a remote host.
//!
//! Every method behaves like agent-sdk's `LocalFileSystem` run on the remote host, with
//! four deliberate differences:
//!
//! * **Confinement in every method.** Each method clamps its path with
//!   [`resolve_path`](Environment::resolve_path) (the SDK's lexical clamp to the root), where
//!   `LocalFileSystem` only normalizes. Inside the root both behave the same. With
//!   [`SshEnvironment::symlink_proof`], every access is also checked after resolving
//!   symlinks on the server (SFTP `realpath`, `lstat`): a path whose real location is outside
//!   the root is refused with an error naming both.
//! * **Atomic writes.** `write_file` replaces a file atomically (temporary file + rename,
//!   [`SshExecutor::write_file_bytes`]) instead of truncating it in place.
//! * **Remote walks.** `grep` and `glob` are the crate's one glob and grep, which every door
//!   shares (the MCP server's and bamboo's too; the guide's
//!   [Adapters](crate::guide::adapters#glob-and-grep-the-same-on-every-door) has their
//!   rules): `glob` is `glob::glob`'s algorithm over a remote `find` snapshot (paths only
//!   cross the wire), `grep` reads the candidate files (regular files up to 16 MiB, not
//!   behind a symlink) over SFTP, 8 at a time, and matches them locally with the same
//!   `regex` code as `LocalFileSystem`. In symlink-proof mode `glob` does not walk into
//!   symlinked directories and drops results that resolve outside the root.
//! * **`.git` is skipped.** `grep` does not search below a directory named `.git`, and
//!   `glob`'s wildcards neither list nor enter one (a literal `.git` component still
//!   reaches it), so an agent's search of a checkout is not flooded with git's objects.
//!   `grep`'s matches come sorted by path and line (`LocalFileSystem`'s come in directory
//!   order).
//!
//! Commands (`exec`, `exec_streamed`) run in the root through `sh -c`, in their own remote
//! process group; a timeout, the output cap or dropping the future kills the whole group.
//! Confinement does not apply to commands: a shell can `cd` anywhere the account can.

use std::{
    collections::VecDeque,
    fs::File,
    io::Write,
    ops::ControlFlow,
    path::{Path, PathBuf},
    time::Duration,
};

use agent_sdk_tools::environment::{
    Environment, ExecResult, ExecSinkSpec, ExecStreamCapture, ExecStreamResult, FileEntry,
    GrepMatch, HARD_MAX_EXEC_CAPTURE_WINDOW_BYTES, HARD_MAX_EXEC_SPOOL_BYTES_PER_STREAM,
    normalize_path_buf, resolve_within_root,
};
use anyhow::{Context, Result, bail, ensure};
use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::{
    command::{ExitStatus, OutputChunk},
    error::{Error, SftpStatus},
    executor::{ExecOptions, SshExecutor},
    tools::search::{self, SearchError},
};

/// `LocalFileSystem`'s limits (grep's are `tools::search`'s).
const MAX_EXEC_OUTPUT_BYTES: usize = 1024 * 1024;
const DEFAULT_EXEC_TIMEOUT_MS: u64 = 120_000;

/// An agent-sdk [`Environment`] whose files and commands are on a remote host.
///
/// ```no_run
/// # async fn demo(executor: swiftide_ssh_executor::SshExecutor) -> anyhow::Result<()> {
/// use std::sync::Arc;
/// use swiftide_ssh_executor::adapters::agent_sdk::SshEnvironment;
///
/// let env = Arc::new(SshEnvironment::new(executor, "/srv/checkout")?.symlink_proof(true));
/// // e.g. agent_sdk::primitive_tools::ReadTool::new(env.clone(), capabilities)
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SshEnvironment {
    executor: SshExecutor,
    root: String,
    symlink_proof: bool,
    canonical_root: std::sync::Arc<OnceCell<PathBuf>>,
}

/// Whether an error is the server saying "no such file".
fn is_missing(error: &Error) -> bool {
    matches!(
        error,
        Error::Sftp {
            status: Some(SftpStatus::NoSuchFile),
            ..
        }
    )
}

/// A search failure as the SDK's error: the executor's own error where there is one.
fn search_error(error: SearchError) -> anyhow::Error {
    match error {
        SearchError::Host(error) => error.into(),
        other => anyhow::Error::new(other),
    }
}

/// Whether an error is about the file (the server answered), not the transport.
fn is_file_failure(error: &Error) -> bool {
    matches!(
        error,
        Error::Sftp {
            status: Some(_),
            ..
        }
    )
}

impl SshEnvironment {
    /// An environment rooted at `root` on `executor`'s host. The root must be an absolute
    /// UTF-8 path; it is normalized lexically (`.` and `..` removed).
    ///
    /// # Errors
    /// A relative root.
    pub fn new(executor: SshExecutor, root: impl AsRef<str>) -> Result<Self> {
        let root = root.as_ref();
        ensure!(
            root.starts_with('/'),
            "the environment root must be an absolute path, got {root:?}"
        );
        let root = normalize_path_buf(Path::new(root))
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            executor,
            root,
            symlink_proof: false,
            canonical_root: std::sync::Arc::default(),
        })
    }

    /// Opt-in symlink-proof confinement: before every file access the clamped path is
    /// resolved on the server (SFTP `realpath` of its deepest existing ancestor, `lstat` of
    /// the missing rest) and refused when it lies outside the root's real location. A
    /// dangling symlink is refused too (writing through it could create a file anywhere).
    /// Costs one or two SFTP round trips per call.
    #[must_use]
    pub fn symlink_proof(mut self, on: bool) -> Self {
        self.symlink_proof = on;
        self
    }

    /// The executor this environment runs on.
    pub fn executor(&self) -> &SshExecutor {
        &self.executor
    }

    /// The path a method accesses for `path`: clamped to the root lexically and, in
    /// symlink-proof mode, checked against the root after resolving symlinks.
    ///
    /// # Errors
    /// In symlink-proof mode: a path whose real location is outside the root, a dangling
    /// symlink on the way, or a failure to resolve.
    pub async fn checked_path(&self, path: &str) -> Result<PathBuf> {
        let clamped = PathBuf::from(self.resolve_path(path));
        if self.symlink_proof {
            self.check_contained(&clamped).await?;
        }
        Ok(clamped)
    }

    async fn canonical_root(&self) -> Result<&PathBuf> {
        self.canonical_root
            .get_or_try_init(|| async {
                self.executor
                    .canonicalize(Path::new(&self.root))
                    .await
                    .with_context(|| {
                        format!("failed to resolve the environment root {}", self.root)
                    })
            })
            .await
    }

    async fn check_contained(&self, path: &Path) -> Result<()> {
        let root = self.canonical_root().await?;
        let mut existing = path.to_path_buf();
        let mut tail = Vec::new();
        let resolved = loop {
            match self.executor.canonicalize(&existing).await {
                Ok(real) => break real,
                Err(error) if is_missing(&error) => {
                    // Missing, or a symlink whose target is missing: refuse the latter.
                    if let Ok(meta) = self.executor.symlink_metadata(&existing).await
                        && meta.is_symlink()
                    {
                        bail!(
                            "path {} is a dangling symbolic link; refused in symlink-proof mode",
                            existing.display()
                        );
                    }
                    let Some(name) = existing.file_name().map(ToOwned::to_owned) else {
                        break PathBuf::from("/");
                    };
                    tail.push(name);
                    if !existing.pop() {
                        break PathBuf::from("/");
                    }
                }
                Err(error) => {
                    return Err(anyhow::Error::new(error)
                        .context(format!("failed to resolve {}", existing.display())));
                }
            }
        };
        let mut resolved = resolved;
        for name in tail.into_iter().rev() {
            resolved.push(name);
        }
        ensure!(
            resolved.starts_with(root),
            "path {} escapes the environment root {} after resolving symlinks (it is {})",
            path.display(),
            root.display(),
            resolved.display()
        );
        Ok(())
    }

    /// Runs `command` in the root, streaming each stream into its capture.
    async fn run_captured(
        &self,
        command: &str,
        timeout_ms: Option<u64>,
        mut stdout: Capture,
        mut stderr: Capture,
    ) -> Result<(Capture, Capture, i32)> {
        let timeout_ms = timeout_ms.unwrap_or(DEFAULT_EXEC_TIMEOUT_MS);
        // LocalFileSystem always runs `sh -c`: a leading newline keeps a `#!` line a comment
        // instead of the executor's script form.
        let command = if command.starts_with("#!") {
            format!("\n{command}")
        } else {
            command.to_owned()
        };
        let options = ExecOptions::default()
            .current_dir(&self.root)
            .timeout(Duration::from_millis(timeout_ms));
        let abort = tokio::sync::Notify::new();
        let finished = {
            let mut sink = |chunk: &OutputChunk| {
                let over = match chunk {
                    OutputChunk::Stdout(bytes) => stdout.push(bytes),
                    OutputChunk::Stderr(bytes) => stderr.push(bytes),
                };
                if over {
                    abort.notify_one();
                }
            };
            tokio::select! {
                run = self.executor.execute(&command, options, &mut sink) => Some(run),
                // Dropping the execution kills the remote process group.
                () = abort.notified() => None,
            }
        };
        let status = match finished {
            Some(run) => run.context("Failed to execute command")?.status,
            None => ExitStatus::Unknown,
        };
        if let ExitStatus::TimedOut { .. } = status {
            bail!("Command timed out after {timeout_ms}ms");
        }
        stdout.check()?;
        stderr.check()?;
        let exit_code = match status {
            ExitStatus::Code(code) => i32::try_from(code).unwrap_or(-1),
            // Killed by a signal: `status.code()` is `None` locally.
            _ => -1,
        };
        Ok((stdout, stderr, exit_code))
    }
}

/// One stream of a command: the head and tail windows, the total, the spool and the first
/// failure (over the cap, or a spool write error).
struct Capture {
    name: &'static str,
    head: Vec<u8>,
    head_bytes: usize,
    tail: VecDeque<u8>,
    tail_bytes: usize,
    total: u64,
    max: u64,
    spool: Option<File>,
    failure: Option<anyhow::Error>,
}

impl Capture {
    fn new(
        name: &'static str,
        head_bytes: usize,
        tail_bytes: usize,
        max: u64,
        spool: Option<File>,
    ) -> Self {
        Self {
            name,
            head: Vec::with_capacity(head_bytes.min(64 * 1024)),
            head_bytes,
            tail: VecDeque::new(),
            tail_bytes,
            total: 0,
            max,
            spool,
            failure: None,
        }
    }

    /// Takes one chunk; `true` when the command must be stopped.
    fn push(&mut self, bytes: &[u8]) -> bool {
        if self.failure.is_some() {
            return true;
        }
        self.total = self.total.saturating_add(bytes.len() as u64);
        let taken = if self.head.len() < self.head_bytes {
            let take = (self.head_bytes - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            take
        } else {
            0
        };
        if self.tail_bytes > 0 && taken < bytes.len() {
            self.tail.extend(&bytes[taken..]);
            if self.tail.len() > self.tail_bytes {
                let excess = self.tail.len() - self.tail_bytes;
                self.tail.drain(..excess);
            }
        }
        if self.total > self.max {
            self.failure = Some(anyhow::anyhow!(
                "{} exceeded the {}-byte process spool limit; command was terminated and output was not returned",
                self.name,
                self.max
            ));
            return true;
        }
        if let Some(spool) = &mut self.spool
            && let Err(error) = spool.write_all(bytes)
        {
            self.failure = Some(
                anyhow::Error::new(error)
                    .context(format!("failed to write private {} spool", self.name)),
            );
            return true;
        }
        false
    }

    fn check(&mut self) -> Result<()> {
        match self.failure.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn into_stream_capture(self) -> Result<ExecStreamCapture> {
        let Some(mut spool) = self.spool else {
            bail!("no {} spool", self.name);
        };
        spool
            .flush()
            .with_context(|| format!("failed to flush private {} spool", self.name))?;
        Ok(ExecStreamCapture {
            head: self.head,
            tail: self.tail.into(),
            total_bytes: self.total,
            spool,
        })
    }

    fn complete(self) -> Option<Vec<u8>> {
        let kept = self.head.len() + self.tail.len();
        if kept as u64 != self.total {
            return None;
        }
        let mut bytes = self.head;
        bytes.extend(self.tail);
        Some(bytes)
    }
}

#[async_trait]
impl Environment for SshEnvironment {
    async fn read_file(&self, path: &str) -> Result<String> {
        let bytes = self.read_file_bytes(path).await?;
        let path = self.resolve_path(path);
        String::from_utf8(bytes).with_context(|| format!("Failed to read file: {path}"))
    }

    async fn read_file_bytes(&self, path: &str) -> Result<Vec<u8>> {
        let path = self.checked_path(path).await?;
        self.executor
            .read_file_bytes(&path)
            .await
            .with_context(|| format!("Failed to read file: {}", path.display()))
    }

    async fn write_file(&self, path: &str, content: &str) -> Result<()> {
        self.write_file_bytes(path, content.as_bytes()).await
    }

    async fn write_file_bytes(&self, path: &str, content: &[u8]) -> Result<()> {
        let path = self.checked_path(path).await?;
        self.executor
            .write_file_bytes(&path, content)
            .await
            .with_context(|| format!("Failed to write file: {}", path.display()))
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<FileEntry>> {
        let path = self.checked_path(path).await?;
        let entries = self
            .executor
            .list_dir(&path)
            .await
            .with_context(|| format!("Failed to read directory: {}", path.display()))?;
        Ok(entries
            .into_iter()
            .map(|entry| FileEntry {
                is_dir: entry.metadata.is_dir(),
                size: entry.metadata.is_file().then_some(entry.metadata.size),
                path: entry.path.to_string_lossy().into_owned(),
                name: entry.name,
            })
            .collect())
    }

    async fn exists(&self, path: &str) -> Result<bool> {
        let path = self.checked_path(path).await?;
        match self.executor.metadata(&path).await {
            Ok(_) => Ok(true),
            Err(error) if is_file_failure(&error) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    async fn is_dir(&self, path: &str) -> Result<bool> {
        let path = self.checked_path(path).await?;
        match self.executor.metadata(&path).await {
            Ok(meta) => Ok(meta.is_dir()),
            Err(error) if is_file_failure(&error) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    async fn is_file(&self, path: &str) -> Result<bool> {
        let path = self.checked_path(path).await?;
        match self.executor.metadata(&path).await {
            Ok(meta) => Ok(meta.is_file()),
            Err(error) if is_file_failure(&error) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    async fn create_dir(&self, path: &str) -> Result<()> {
        let path = self.checked_path(path).await?;
        self.executor
            .create_dir_all(&path)
            .await
            .with_context(|| format!("Failed to create directory: {}", path.display()))
    }

    async fn delete_file(&self, path: &str) -> Result<()> {
        let path = self.checked_path(path).await?;
        self.executor
            .remove_file(&path)
            .await
            .with_context(|| format!("Failed to delete file: {}", path.display()))
    }

    async fn delete_dir(&self, path: &str, recursive: bool) -> Result<()> {
        let path = self.checked_path(path).await?;
        let result = if recursive {
            self.executor.remove_dir_all(&path).await
        } else {
            self.executor.remove_dir(&path).await
        };
        result.with_context(|| format!("Failed to delete directory: {}", path.display()))
    }

    async fn grep(&self, pattern: &str, path: &str, recursive: bool) -> Result<Vec<GrepMatch>> {
        let path = self.checked_path(path).await?;
        let matcher = search::Matcher::new(pattern, search::RegexOptions::default())
            .context("Invalid regex pattern")?;
        let query = search::GrepQuery {
            path: &path,
            matcher: &matcher,
            include: None,
            recursive,
        };
        let mut matches = Vec::new();
        let searched = search::grep(&self.executor, &query, |file| {
            let shown = file.path.to_string_lossy().into_owned();
            matches.extend(file.hits.into_iter().map(|hit| GrepMatch {
                path: shown.clone(),
                line_number: hit.line_number,
                line_content: hit.line,
                match_start: hit.start,
                match_end: hit.end,
            }));
            ControlFlow::Continue(())
        })
        .await;
        match searched {
            Ok(()) => Ok(matches),
            // A path that is not there (or that the server will not describe) has no
            // matches, as in `LocalFileSystem`.
            Err(SearchError::Missing(_) | SearchError::Unreachable { .. }) => Ok(Vec::new()),
            Err(error) => Err(search_error(error)),
        }
    }

    async fn glob(&self, pattern: &str) -> Result<Vec<String>> {
        let pattern = self.resolve_path(pattern);
        // The resolved pattern is absolute: it stands alone.
        let query = search::GlobQuery {
            dir: Path::new("/"),
            pattern: &pattern,
            follow_links: !self.symlink_proof,
        };
        if self.symlink_proof {
            let base = search::glob_base(&query).map_err(search_error)?;
            self.check_contained(&base).await?;
        }
        let mut paths = search::glob(&self.executor, &query)
            .await
            .map_err(search_error)?;
        if self.symlink_proof {
            let mut kept = Vec::with_capacity(paths.len());
            for path in paths {
                if self.check_contained(&path).await.is_ok() {
                    kept.push(path);
                }
            }
            paths = kept;
        }
        Ok(paths
            .into_iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect())
    }

    async fn exec(&self, command: &str, timeout_ms: Option<u64>) -> Result<ExecResult> {
        let max = MAX_EXEC_OUTPUT_BYTES as u64;
        let stdout = Capture::new("stdout", MAX_EXEC_OUTPUT_BYTES, 0, max, None);
        let stderr = Capture::new("stderr", MAX_EXEC_OUTPUT_BYTES, 0, max, None);
        let (stdout, stderr, exit_code) = self
            .run_captured(command, timeout_ms, stdout, stderr)
            .await?;
        let stdout = stdout
            .complete()
            .context("stdout exceeded the bounded legacy process capture")?;
        let stderr = stderr
            .complete()
            .context("stderr exceeded the bounded legacy process capture")?;
        Ok(ExecResult {
            stdout: String::from_utf8(stdout).context(
                "stdout was not valid UTF-8; binary output was withheld without lossy conversion",
            )?,
            stderr: String::from_utf8(stderr).context(
                "stderr was not valid UTF-8; binary output was withheld without lossy conversion",
            )?,
            exit_code,
        })
    }

    async fn exec_streamed(
        &self,
        command: &str,
        timeout_ms: Option<u64>,
        sinks: ExecSinkSpec,
    ) -> Result<ExecStreamResult> {
        ensure!(
            sinks.head_bytes <= HARD_MAX_EXEC_CAPTURE_WINDOW_BYTES
                && sinks.tail_bytes <= HARD_MAX_EXEC_CAPTURE_WINDOW_BYTES,
            "process capture windows exceed the {HARD_MAX_EXEC_CAPTURE_WINDOW_BYTES}-byte hard limit"
        );
        let max = sinks
            .max_bytes_per_stream
            .min(HARD_MAX_EXEC_SPOOL_BYTES_PER_STREAM);
        let stdout = Capture::new(
            "stdout",
            sinks.head_bytes,
            sinks.tail_bytes,
            max,
            Some(sinks.stdout),
        );
        let stderr = Capture::new(
            "stderr",
            sinks.head_bytes,
            sinks.tail_bytes,
            max,
            Some(sinks.stderr),
        );
        let (stdout, stderr, exit_code) = self
            .run_captured(command, timeout_ms, stdout, stderr)
            .await?;
        Ok(ExecStreamResult {
            stdout: stdout.into_stream_capture()?,
            stderr: stderr.into_stream_capture()?,
            exit_code,
        })
    }

    fn root(&self) -> &str {
        &self.root
    }

    fn resolve_path(&self, path: &str) -> String {
        resolve_within_root(&self.root, path)
    }
}
