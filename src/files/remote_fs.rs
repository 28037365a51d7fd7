//! The typed file API on [`SshExecutor`]: whole-file reads and writes, metadata, listing,
//! directories, removal and rename, all over the connection's SFTP channel
//! ([`crate::files::sftp`]). Writes replace files atomically ([`crate::files::atomic_write`]); reads and
//! writes of paths SFTP cannot carry go through a shell script ([`crate::files::exec_fallback`]).
//!
//! Every operation resolves a relative path against the workdir, and reports failures as
//! [`Error::Sftp`] with LocalExecutor's reason texts ([`crate::files::error`]). An operation
//! whose channel broke under it runs once more on a new channel when running it twice does
//! no harm ([`Retry`]).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures::TryStreamExt;
use russh_sftp::protocol::{FileAttributes, StatusCode};

use crate::{
    audit::Digested,
    error::{Error, Result, SftpStatus},
    executor::SshExecutor,
    files::{
        FileRule, ModeRule,
        error::{EISDIR, ENOTDIR},
        exec_fallback,
        sftp::{SftpChannel, has_status},
    },
};

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

/// What kind of file a [`FileMetadata`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (only from [`SshExecutor::symlink_metadata`] and
    /// [`SshExecutor::list_dir`], which do not follow links).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl std::fmt::Display for FileType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileType::File => "file",
            FileType::Dir => "dir",
            FileType::Symlink => "symlink",
            FileType::Other => "other",
        })
    }
}

/// Metadata of a remote file, as the SFTP server reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileMetadata {
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`mode & 0o7777`, e.g. `0o644`).
    pub permissions: u32,
    /// The kind of file.
    pub file_type: FileType,
    /// Last modification, with one-second precision (SFTP v3 carries whole seconds).
    pub modified: Option<SystemTime>,
    /// Owner's user id.
    pub uid: Option<u32>,
    /// Owner's group id.
    pub gid: Option<u32>,
}

impl FileMetadata {
    pub(crate) fn from_attrs(attrs: &FileAttributes) -> Self {
        let mode = attrs.permissions.unwrap_or(0);
        // russh-sftp's own `is_dir` tests single bits, which a socket (0o140000) also has.
        let file_type = match mode & S_IFMT {
            S_IFDIR => FileType::Dir,
            S_IFREG => FileType::File,
            S_IFLNK => FileType::Symlink,
            _ => FileType::Other,
        };
        Self {
            size: attrs.size.unwrap_or(0),
            permissions: mode & 0o7777,
            file_type,
            modified: attrs
                .mtime
                .map(|secs| UNIX_EPOCH + Duration::from_secs(u64::from(secs))),
            uid: attrs.uid,
            gid: attrs.gid,
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.file_type == FileType::Dir
    }

    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.file_type == FileType::File
    }

    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.file_type == FileType::Symlink
    }
}

/// One entry of [`SshExecutor::list_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirEntry {
    /// The entry's name. SFTP delivers names as text: bytes that are not valid UTF-8 come
    /// back as U+FFFD.
    pub name: String,
    /// The listed directory joined with `name`.
    pub path: PathBuf,
    /// The entry's own metadata (a symlink is reported as a symlink, not followed).
    pub metadata: FileMetadata,
}

/// The path as SFTP carries it: valid UTF-8 without NUL bytes (a NUL would silently cut the
/// path short on the server).
pub(crate) fn sftp_path(path: &Path) -> Result<&str> {
    let invalid = |what: &str| Error::InvalidInput {
        reason: format!("path {} {what}", path.display()),
    };
    let text = path
        .to_str()
        .ok_or_else(|| invalid("is not valid UTF-8, which SFTP cannot carry"))?;
    if text.contains('\0') {
        return Err(invalid("contains a NUL byte"));
    }
    Ok(text)
}

/// Whether an operation may run again on a new channel after its channel broke under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reads, and writes that replace a file as a whole: running them twice does no harm.
    Idempotent,
    /// Removing or renaming: the first attempt may have happened, so a retry could fail
    /// misleadingly.
    Never,
}

impl SshExecutor {
    /// Runs `op` on an SFTP channel. If the channel broke under it with a transport error,
    /// the channel is dropped and, when `retry` allows, `op` runs once more on a new one.
    pub(crate) async fn with_sftp<T, F, Fut>(&self, retry: Retry, op: F) -> Result<T>
    where
        F: Fn(Arc<SftpChannel>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        // Boxed: opening a channel and the operations are large futures, and every file
        // operation (and each job read) would otherwise carry them inline; in a debug build
        // their poll frames alone overflowed a test thread's 2 MiB stack.
        let channel = Box::pin(self.sftp()).await?;
        // Counts as running, so that retiring the connection does not close it under `op`.
        let running = channel.running();
        let result = Box::pin(op(channel.clone())).await;
        drop(running);
        let transport_failure = matches!(&result, Err(Error::Sftp { status: None, .. }));
        if !transport_failure || !channel.is_broken() {
            return result;
        }
        self.forget(&channel).await;
        if retry == Retry::Never {
            return result;
        }
        tracing::debug!(host = %self.inner.config.host, "sftp channel broke; retrying on a new one");
        let channel = Box::pin(self.sftp()).await?;
        let _running = channel.running();
        Box::pin(op(channel)).await
    }

    /// Reads a whole remote file. A relative `path` resolves against the workdir
    /// ([`resolve_path`](Self::resolve_path)).
    ///
    /// Over SFTP with up to 32 reads in flight; a path that is not valid UTF-8 is read with
    /// `cat` over exec instead.
    ///
    /// # Errors
    /// [`Error::Sftp`] naming the path: with a status (and LocalExecutor's reason text, e.g.
    /// `Is a directory (os error 21)`) when the file cannot be read, without one for transport
    /// failures. Connection errors as for commands.
    ///
    /// # Cancel safety
    /// Dropping the future leaves nothing behind (the remote handle closes in the background).
    pub async fn read_file_bytes(&self, path: &Path) -> Result<Vec<u8>> {
        self.read_resolved(&self.resolve_path(path, None)).await
    }

    /// [`read_file_bytes`](Self::read_file_bytes) of an already resolved path.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub(crate) async fn read_resolved(&self, path: &Path) -> Result<Vec<u8>> {
        let mut audit = self.audit_path("read_file", path, None)?;
        let result = self.read_unaudited(path).await;
        if let Ok(bytes) = &result {
            audit.note(|record| record.content = Some(Digested::of(bytes)));
        }
        audit.end_with(&result);
        result
    }

    /// [`read_resolved`](Self::read_resolved) without an audit record: for reads that are
    /// part of another operation (`stream_files`, a push's read-back), recorded as that.
    pub(crate) async fn read_unaudited(&self, path: &Path) -> Result<Vec<u8>> {
        if path.to_str().is_none() {
            return exec_fallback::read_via_exec(self, path).await;
        }
        let text = sftp_path(path)?;
        let result = self
            .with_sftp(Retry::Idempotent, |channel| async move {
                channel
                    .read_file(text)
                    .await
                    .map_err(|e| self.sftp_error("read", text, e))
            })
            .await;
        match result {
            Err(Error::SftpUnavailable { .. }) => exec_fallback::read_via_exec(self, path).await,
            // OpenSSH opens a directory fine and then fails the read with a bare "Failure".
            Err(Error::Sftp {
                status: Some(SftpStatus::Failure),
                ..
            }) if self.metadata_of(text, true).await.is_ok_and(|m| m.is_dir()) => {
                Err(self.file_error("read", path, EISDIR))
            }
            other => other,
        }
    }

    /// `path` as SFTP text, `None` when SFTP cannot carry it (not UTF-8), an error for a NUL.
    fn sftp_text<'a>(&self, path: &'a Path) -> Result<Option<&'a str>> {
        match path.to_str() {
            None => Ok(None),
            Some(_) => sftp_path(path).map(Some),
        }
    }

    /// What a path SFTP cannot carry is treated as: no SFTP, so the exec fallback runs.
    fn no_sftp(&self) -> Error {
        Error::SftpUnavailable {
            host: self.inner.config.host.clone(),
            port: self.inner.config.port,
        }
    }

    /// Up to `max` bytes of an absolute `path` from `offset`, or `None` when the file does
    /// not exist. Over SFTP, or with `tail | head` over exec on a server without SFTP or for
    /// a path SFTP cannot carry. Used by jobs, whose files are read by a client-owned cursor.
    pub(crate) async fn read_range(
        &self,
        path: &Path,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>> {
        let result = match self.sftp_text(path)? {
            None => Err(self.no_sftp()),
            Some(text) => {
                self.with_sftp(Retry::Idempotent, |channel| async move {
                    channel
                        .read_range(text, offset, max)
                        .await
                        .map_err(|e| self.sftp_error("read", text, e))
                })
                .await
            }
        };
        match result {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => Ok(None),
            Err(Error::SftpUnavailable { .. }) => {
                exec_fallback::read_range_via_exec(self, path, offset, max).await
            }
            Err(error) => Err(error),
        }
    }

    /// The names in an absolute directory `path` (without `.` and `..`), or `None` when it
    /// does not exist; over SFTP, else with `ls -A` over exec.
    pub(crate) async fn dir_names(&self, path: &Path) -> Result<Option<Vec<String>>> {
        let result = match self.sftp_text(path)? {
            None => Err(self.no_sftp()),
            Some(text) => {
                self.with_sftp(Retry::Idempotent, |channel| async move {
                    channel
                        .read_dir(text)
                        .await
                        .map_err(|e| self.sftp_error("list", text, e))
                })
                .await
            }
        };
        match result {
            Ok(entries) => Ok(Some(entries.into_iter().map(|(name, _)| name).collect())),
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => Ok(None),
            Err(Error::SftpUnavailable { .. }) => {
                exec_fallback::dir_names_via_exec(self, path).await
            }
            Err(error) => Err(error),
        }
    }

    /// Replaces a remote file's content atomically, creating missing parent directories
    /// (errors there are ignored, as LocalExecutor does). A relative `path` resolves against
    /// the workdir.
    ///
    /// The content goes to a temporary file next to the target
    /// (`.<name>.swiftide-<random>.tmp`), which then replaces the target with
    /// `posix-rename@openssh.com`: a reader, a dropped connection or a timeout sees the old
    /// content or the new one, never a mix. A failure removes the temporary file (best
    /// effort; after a lost connection it may stay behind).
    ///
    /// * An existing file keeps its permission bits and, where the server allows, its owner
    ///   and group. A new file gets `0o644`: LocalExecutor's `0o666 & !umask` cannot be
    ///   known over SFTP (the SFTP server's umask is not the login shell's).
    /// * A symlink is followed (relative targets against the link's directory, up to 40
    ///   links) and its target replaced; the link stays a link.
    /// * Unlike LocalExecutor's in-place write, the file gets a new inode: hard links to the
    ///   old file keep the old content, and ACLs or extended attributes are not copied.
    /// * If the directory does not allow creating the temporary file but the file itself is
    ///   writable, the content is written in place (not atomic), as LocalExecutor does.
    /// * A path that is not valid UTF-8, or a server without SFTP, is written by a shell
    ///   script over exec (`cat > temp && mv`), with the same atomicity but without keeping
    ///   the owner.
    ///
    /// # Errors
    /// [`Error::Sftp`] naming the path (with LocalExecutor's reason text when the server gave
    /// a status, e.g. `Is a directory (os error 21)`), or a connection error.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the old content in place; the temporary file is removed in
    /// the background.
    pub async fn write_file_bytes(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.write_resolved(&self.resolve_path(path, None), content)
            .await
    }

    /// [`write_file_bytes`](Self::write_file_bytes) of an already resolved path.
    #[tracing::instrument(
        level = "debug",
        skip(self, content),
        fields(host = %self.inner.config.host, len = content.len()),
        err(level = "debug")
    )]
    pub(crate) async fn write_resolved(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.write_resolved_with(path, content, ModeRule::Keep.into())
            .await
    }

    /// [`write_resolved`](Self::write_resolved) with the file's permission bits, owner and
    /// group as `rule` says (see [`FileRule`]), for fleet pushes. The in-place fallback (a
    /// directory that refuses the temporary file) keeps the old mode and owner.
    pub(crate) async fn write_resolved_with(
        &self,
        path: &Path,
        content: &[u8],
        rule: FileRule,
    ) -> Result<()> {
        let mut audit = self.audit_path("write_file", path, None)?;
        audit.note(|record| record.content = Some(Digested::of(content)));
        let result = self.write_unaudited(path, content, rule).await;
        audit.end_with(&result);
        result
    }

    /// [`write_resolved_with`](Self::write_resolved_with) without its audit record.
    async fn write_unaudited(&self, path: &Path, content: &[u8], rule: FileRule) -> Result<()> {
        if path.to_str().is_none() {
            return exec_fallback::write_via_exec(self, path, content, rule).await;
        }
        sftp_path(path)?;
        let result = self
            .with_sftp(Retry::Idempotent, |channel| async move {
                self.write_atomic(&channel, path, content, rule).await
            })
            .await;
        match result {
            Err(Error::SftpUnavailable { .. }) => {
                exec_fallback::write_via_exec(self, path, content, rule).await
            }
            other => other,
        }
    }

    /// Metadata of `path`, following symlinks.
    ///
    /// # Errors
    /// [`Error::Sftp`] (status `NoSuchFile` when missing), [`Error::InvalidInput`] for a path
    /// that is not valid UTF-8, or a connection error.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn metadata(&self, path: &Path) -> Result<FileMetadata> {
        let path = self.resolve_path(path, None);
        self.metadata_of(sftp_path(&path)?, true).await
    }

    /// Metadata of `path` itself: a symlink is reported as a symlink.
    ///
    /// # Errors
    /// As [`metadata`](Self::metadata).
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn symlink_metadata(&self, path: &Path) -> Result<FileMetadata> {
        let path = self.resolve_path(path, None);
        self.metadata_of(sftp_path(&path)?, false).await
    }

    /// Metadata of a resolved SFTP path: `stat` when `follow_links`, else `lstat`.
    async fn metadata_of(&self, text: &str, follow_links: bool) -> Result<FileMetadata> {
        self.with_sftp(Retry::Idempotent, |channel| async move {
            let (operation, attrs) = if follow_links {
                ("stat", channel.stat(text).await)
            } else {
                ("lstat", channel.lstat(text).await)
            };
            let attrs = attrs.map_err(|e| self.sftp_error(operation, text, e))?;
            Ok(FileMetadata::from_attrs(&attrs))
        })
        .await
    }

    /// The canonical absolute form of `path` as the server resolves it (SFTP `realpath`):
    /// every symlink followed, `.` and `..` removed. A relative `path` resolves against the
    /// workdir, or the login directory without one. OpenSSH also resolves a path whose last
    /// component does not exist; other servers may refuse it.
    ///
    /// # Errors
    /// [`Error::Sftp`] (status `NoSuchFile` when a component is missing),
    /// [`Error::SftpUnavailable`] on a server without SFTP, [`Error::InvalidInput`] for a
    /// path that is not valid UTF-8, or a connection error.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        let path = self.resolve_path(path, None);
        let text = sftp_path(&path)?;
        self.with_sftp(Retry::Idempotent, |channel| async move {
            channel
                .real_path(text)
                .await
                .map(PathBuf::from)
                .map_err(|e| self.sftp_error("realpath", text, e))
        })
        .await
    }

    /// Whether `path` exists (following symlinks: a dangling link does not exist).
    ///
    /// # Errors
    /// Any failure other than "no such file", e.g. a permission problem on a parent.
    pub async fn exists(&self, path: &Path) -> Result<bool> {
        match self.metadata(path).await {
            Ok(_) => Ok(true),
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The entries of a directory (without `.` and `..`), sorted by name, each with its own
    /// (not followed) metadata.
    ///
    /// # Errors
    /// As [`metadata`](Self::metadata).
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn list_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let path = self.resolve_path(path, None);
        let text = sftp_path(&path)?;
        let mut entries = self
            .with_sftp(Retry::Idempotent, |channel| async move {
                channel
                    .read_dir(text)
                    .await
                    .map_err(|e| self.sftp_error("readdir", text, e))
            })
            .await?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries
            .into_iter()
            .map(|(name, attrs)| DirEntry {
                path: path.join(&name),
                metadata: FileMetadata::from_attrs(&attrs),
                name,
            })
            .collect())
    }

    /// Creates a directory and its missing parents, like `mkdir -p`. An existing directory is
    /// fine.
    ///
    /// # Errors
    /// [`Error::Sftp`] naming the component that could not be created (e.g. because a file
    /// is in the way), [`Error::InvalidInput`] for a path that is not valid UTF-8, or a
    /// connection error.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn create_dir_all(&self, path: &Path) -> Result<()> {
        let path = self.resolve_path(path, None);
        sftp_path(&path)?;
        self.audited("create_dir_all", &path, None, async {
            self.with_sftp(Retry::Idempotent, |channel| {
                let path = path.clone();
                async move { self.mkdir_all(&channel, &path).await }
            })
            .await
        })
        .await
    }

    /// Removes a file or symlink (not a directory).
    ///
    /// # Errors
    /// As [`metadata`](Self::metadata). Not retried after a broken channel, since the removal
    /// may have happened.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn remove_file(&self, path: &Path) -> Result<()> {
        let path = self.resolve_path(path, None);
        let text = sftp_path(&path)?;
        self.audited("remove_file", &path, None, async {
            self.with_sftp(Retry::Never, |channel| async move {
                channel
                    .remove(text)
                    .await
                    .map_err(|e| self.sftp_error("remove", text, e))
            })
            .await
        })
        .await
    }

    /// Removes a directory and everything in it. Symlinks inside are removed, not followed.
    ///
    /// # Errors
    /// As [`metadata`](Self::metadata); a path that is not a directory is `Not a directory
    /// (os error 20)`.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let path = self.resolve_path(path, None);
        let text = sftp_path(&path)?;
        self.audited("remove_dir_all", &path, None, async {
            self.with_sftp(Retry::Never, |channel| async move {
                let attrs = channel
                    .lstat(text)
                    .await
                    .map_err(|e| self.sftp_error("lstat", text, e))?;
                if !FileMetadata::from_attrs(&attrs).is_dir() {
                    return Err(self.file_error("remove_dir_all", Path::new(text), ENOTDIR));
                }
                self.remove_tree(&channel, text.to_owned()).await
            })
            .await
        })
        .await
    }

    /// Removes an empty directory (`rmdir`).
    ///
    /// # Errors
    /// As [`metadata`](Self::metadata); a directory that is not empty fails with the
    /// server's status. Not retried after a broken channel.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn remove_dir(&self, path: &Path) -> Result<()> {
        let path = self.resolve_path(path, None);
        let text = sftp_path(&path)?;
        self.audited("remove_dir", &path, None, async {
            self.with_sftp(Retry::Never, |channel| async move {
                channel
                    .rmdir(text)
                    .await
                    .map_err(|e| self.sftp_error("rmdir", text, e))
            })
            .await
        })
        .await
    }

    /// Renames `from` to `to`, atomically replacing an existing `to` (with
    /// `posix-rename@openssh.com`; servers without it refuse to replace).
    ///
    /// # Errors
    /// [`Error::Sftp`] naming `from`, [`Error::InvalidInput`] for paths that are not valid
    /// UTF-8, or a connection error.
    #[tracing::instrument(
        level = "debug",
        skip(self),
        fields(host = %self.inner.config.host),
        err(level = "debug")
    )]
    pub async fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (from, to) = (self.resolve_path(from, None), self.resolve_path(to, None));
        let from_text = sftp_path(&from)?;
        let to_text = sftp_path(&to)?;
        self.audited("rename", &from, Some(&to), async {
            self.with_sftp(Retry::Never, |channel| async move {
                channel
                    .rename(from_text, to_text)
                    .await
                    .map_err(|e| self.sftp_error("rename", from_text, e))
            })
            .await
        })
        .await
    }

    /// `mkdir -p` over SFTP: creates the missing components from the deepest existing one.
    pub(crate) async fn mkdir_all(&self, channel: &Arc<SftpChannel>, path: &Path) -> Result<()> {
        let mut missing = Vec::new();
        let mut current = Some(path);
        while let Some(dir) = current.filter(|dir| !dir.as_os_str().is_empty()) {
            let text = sftp_path(dir)?;
            match channel.stat(text).await {
                Ok(attrs) if FileMetadata::from_attrs(&attrs).is_dir() => break,
                Ok(_) => return Err(self.file_error("mkdir", dir, ENOTDIR)),
                Err(e) if has_status(&e, StatusCode::NoSuchFile) => {
                    missing.push(text);
                    current = dir.parent();
                }
                Err(e) => return Err(self.sftp_error("stat", text, e)),
            }
        }
        for dir in missing.into_iter().rev() {
            if let Err(error) = channel.mkdir(dir, None).await {
                // Someone else may have created it meanwhile (mkdir then says "Failure").
                let exists = channel
                    .stat(dir)
                    .await
                    .is_ok_and(|a| FileMetadata::from_attrs(&a).is_dir());
                if !exists {
                    return Err(self.sftp_error("mkdir", dir, error));
                }
            }
        }
        Ok(())
    }

    /// Removes `dir`'s contents (files concurrently, directories recursively), then `dir`.
    fn remove_tree<'a>(
        &'a self,
        channel: &'a Arc<SftpChannel>,
        dir: String,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let entries = channel
                .read_dir(&dir)
                .await
                .map_err(|e| self.sftp_error("readdir", &dir, e))?;
            let (dirs, others): (Vec<_>, Vec<_>) = entries
                .into_iter()
                .map(|(name, attrs)| (format!("{}/{name}", dir.trim_end_matches('/')), attrs))
                .partition(|(_, attrs)| FileMetadata::from_attrs(attrs).is_dir());
            futures::stream::iter(others.into_iter().map(Ok))
                .try_for_each_concurrent(16, |(path, _)| async move {
                    channel
                        .remove(&path)
                        .await
                        .map_err(|e| self.sftp_error("remove", &path, e))
                })
                .await?;
            for (path, _) in dirs {
                self.remove_tree(channel, path).await?;
            }
            channel
                .rmdir(&dir)
                .await
                .map_err(|e| self.sftp_error("rmdir", &dir, e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_types_come_from_the_format_bits() {
        let attrs = |mode| FileAttributes {
            permissions: Some(mode),
            ..FileAttributes::empty()
        };
        let socket = FileMetadata::from_attrs(&attrs(0o140_755));
        assert_eq!(socket.file_type, FileType::Other);
        assert_eq!(socket.permissions, 0o755);
        assert!(FileMetadata::from_attrs(&attrs(0o040_700)).is_dir());
        assert!(FileMetadata::from_attrs(&attrs(0o120_777)).is_symlink());
        assert!(FileMetadata::from_attrs(&attrs(0o100_644)).is_file());
    }
}
