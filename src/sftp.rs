//! The SFTP layer: one reusable SFTP channel per pooled connection, and the typed file
//! operations built on it.
//!
//! # Why the raw session
//!
//! russh-sftp's high-level `SftpSession` has no `posix-rename@openssh.com` (plain SFTP rename
//! refuses to replace an existing file on OpenSSH, so an atomic write cannot be built on it)
//! and hides its pipelining behind `AsyncRead`/`AsyncWrite`. [`RawSftpSession`] sends any
//! request, so this module keeps its own pipelines: reads ramp up to [`MAX_READS`] requests in
//! flight, writes keep [`MAX_WRITES`] in flight, each of the server's `limits@openssh.com`
//! length (255 KiB on OpenSSH).
//!
//! # Paths
//!
//! russh-sftp carries paths as `String` and decodes names the server sends lossily. Paths that
//! are not valid UTF-8 therefore never go over SFTP: reads and writes fall back to a shell
//! script over exec ([`crate::files`]), the other operations return
//! [`Error::InvalidInput`].
//!
//! # Handles
//!
//! OpenSSH sends a handle as a 4-byte number, which russh-sftp decodes as a `String`: numbers
//! of 128 and more are not valid UTF-8 and would be mangled. OpenSSH reuses the lowest free
//! numbers, so keeping fewer than 128 handles open per channel ([`MAX_HANDLES`]) keeps every
//! handle intact.

use std::{
    io,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures::{
    StreamExt, TryStreamExt,
    stream::{FuturesOrdered, FuturesUnordered},
};
use russh_sftp::{
    client::{Config as SftpConfig, RawSftpSession, error::Error as SftpError},
    protocol::{FileAttributes, OpenFlags, Packet, StatusCode},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::{OwnedSemaphorePermit, Semaphore},
};

use crate::{
    error::{Error, Phase, Result, SftpStatus},
    executor::SshExecutor,
    files, pool,
    session::Session,
};

/// Most read requests in flight for one file (reached by doubling from 1).
const MAX_READS: usize = 32;
/// Most write requests in flight for one file.
const MAX_WRITES: usize = 32;
/// Largest read or write request, also when the server allows more.
const MAX_IO_LEN: u32 = 255 * 1024;
/// What every SFTP server must accept when it announces no limits.
const DEFAULT_IO_LEN: u32 = 32 * 1024;
/// Open handles per channel; see the module docs for why it stays below 128.
const MAX_HANDLES: usize = 64;
/// Per-request deadline of russh-sftp: a request that gets no answer fails after this long.
/// `MAX_WRITES × MAX_IO_LEN` (8 MiB) must be sendable in this time, so links down to about
/// 300 KiB/s work.
const REQUEST_TIMEOUT_SECS: u64 = 30;
/// Largest incoming SFTP packet accepted (a 255 KiB data reply plus headers fits easily).
const MAX_INCOMING_PACKET: u32 = 1024 * 1024;
/// Symlinks followed before a write gives up, as Linux's `ELOOP` limit.
const MAX_SYMLINKS: usize = 40;
/// The buffer reserved up front for a read, whatever size the server claims.
const MAX_PREALLOCATION: u64 = 256 * 1024 * 1024;

const POSIX_RENAME: &str = "posix-rename@openssh.com";
const LIMITS: &str = "limits@openssh.com";

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

/// Linux error numbers whose texts LocalExecutor's messages contain.
pub(crate) const ENOENT: i32 = 2;
pub(crate) const EACCES: i32 = 13;
pub(crate) const ENOTDIR: i32 = 20;
pub(crate) const EISDIR: i32 = 21;
pub(crate) const ELOOP: i32 = 40;

/// The text `std::io::Error` prints for an OS error, e.g. `Is a directory (os error 21)`:
/// the exact reason LocalExecutor (through fs-err) puts in its file error messages.
pub(crate) fn os_error_text(code: i32) -> String {
    io::Error::from_raw_os_error(code).to_string()
}

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
    fn from_attrs(attrs: &FileAttributes) -> Self {
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

/// Marks the SFTP channel broken as soon as its byte stream ends or fails, so the next
/// operation opens a new channel instead of waiting for a request to time out.
struct Watched<S> {
    inner: S,
    broken: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let wanted = buf.remaining() > 0;
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(outcome) = &result
            && (outcome.is_err() || (wanted && buf.filled().len() == before))
        {
            self.broken.store(true, Ordering::Release);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Err(_))) {
            self.broken.store(true, Ordering::Release);
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.broken.store(true, Ordering::Release);
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One SFTP channel of one connection, shared by every file operation on that connection.
pub(crate) struct SftpChannel {
    raw: RawSftpSession,
    read_len: u32,
    write_len: u32,
    posix_rename: bool,
    broken: Arc<AtomicBool>,
    /// Weak: the session owns this channel.
    session: Weak<Session>,
    handles: Arc<Semaphore>,
}

impl std::fmt::Debug for SftpChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SftpChannel")
            .field("read_len", &self.read_len)
            .field("write_len", &self.write_len)
            .field("posix_rename", &self.posix_rename)
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

/// An open remote handle. Dropping it closes the handle in the background.
struct OpenHandle {
    channel: Arc<SftpChannel>,
    handle: String,
    permit: Option<OwnedSemaphorePermit>,
}

impl OpenHandle {
    /// Closes and waits for the server's answer (a write's close can report an error).
    async fn close(mut self) -> Result<(), SftpError> {
        let permit = self.permit.take();
        let result = self.channel.raw.close(self.handle.as_str()).await;
        drop(permit);
        result.map(drop)
    }
}

impl Drop for OpenHandle {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let channel = self.channel.clone();
        let handle = std::mem::take(&mut self.handle);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = channel.raw.close(handle).await;
                drop(permit);
            });
        }
    }
}

fn has_status(error: &SftpError, code: StatusCode) -> bool {
    matches!(error, SftpError::Status(status) if status.status_code == code)
}

fn is_eof(error: &SftpError) -> bool {
    has_status(error, StatusCode::Eof)
}

fn ok_status(packet: Packet) -> Result<(), SftpError> {
    match packet {
        Packet::Status(status) if status.status_code == StatusCode::Ok => Ok(()),
        Packet::Status(status) => Err(SftpError::Status(status)),
        _ => Err(SftpError::UnexpectedPacket),
    }
}

/// An SSH `string`: a big-endian `u32` length, then the bytes.
fn put_ssh_string(out: &mut Vec<u8>, value: &str) -> Result<(), SftpError> {
    let len = u32::try_from(value.len())
        .map_err(|_| SftpError::Limited("path longer than 4 GiB".to_owned()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    Ok(())
}

impl SftpChannel {
    /// Opens the `sftp` subsystem on a new channel of `session` and negotiates limits.
    async fn open(executor: &SshExecutor, session: &Arc<Session>) -> Result<Self> {
        let inner = &executor.inner;
        let config = &inner.config;
        let mut channel = pool::open_channel(session, config, &inner.registry.counters).await?;
        let ssh_error = |source| Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Sftp,
            source,
        };
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(ssh_error)?;
        // Wait for the answer: a server without SFTP would otherwise only show up as a
        // request timeout much later.
        let answer =
            tokio::time::timeout(config.connect_timeout, subsystem_reply(&mut channel)).await;
        if answer != Ok(true) {
            let _ = channel.close().await;
            return Err(executor.sftp_failure(
                "start",
                "",
                "the server refused the sftp subsystem",
            ));
        }
        let broken = Arc::new(AtomicBool::new(false));
        let stream = Watched {
            inner: channel.into_stream(),
            broken: broken.clone(),
        };
        let sftp_config = SftpConfig {
            max_packet_len: MAX_INCOMING_PACKET,
            request_timeout_secs: REQUEST_TIMEOUT_SECS,
            ..SftpConfig::default()
        };
        let raw = RawSftpSession::new_with_config(stream, sftp_config);
        let negotiated = tokio::time::timeout(config.connect_timeout, negotiate(raw)).await;
        let (raw, lengths, posix_rename) = match negotiated {
            Ok(Ok(done)) => done,
            Ok(Err(error)) => return Err(executor.sftp_error("start", "", error)),
            Err(_) => {
                return Err(Error::Timeout {
                    host: config.host.clone(),
                    port: config.port,
                    phase: Phase::Sftp,
                    after: config.connect_timeout,
                });
            }
        };
        Ok(Self {
            raw,
            read_len: lengths.0,
            write_len: lengths.1,
            posix_rename,
            broken,
            session: Arc::downgrade(session),
            handles: Arc::new(Semaphore::new(MAX_HANDLES)),
        })
    }

    /// The channel ended, or its connection did.
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
            || self
                .session
                .upgrade()
                .is_none_or(|session| session.is_dead())
    }

    /// Waits for room for one more open handle (see [`MAX_HANDLES`]).
    async fn handle_permit(&self) -> Result<OwnedSemaphorePermit, SftpError> {
        self.handles
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| SftpError::UnexpectedBehavior("session closed".to_owned()))
    }

    async fn open_handle(
        self: &Arc<Self>,
        path: &str,
        flags: OpenFlags,
        attrs: FileAttributes,
    ) -> Result<OpenHandle, SftpError> {
        let permit = self.handle_permit().await?;
        let handle = self.raw.open(path, flags, attrs).await?.handle;
        Ok(OpenHandle {
            channel: self.clone(),
            handle,
            permit: Some(permit),
        })
    }

    /// Reads a whole file. The size from `fstat` (sent together with the first read) ends a
    /// small file after one round trip; larger files double the reads in flight up to
    /// [`MAX_READS`] and end at the server's EOF.
    pub(crate) async fn read_file(self: &Arc<Self>, path: &str) -> Result<Vec<u8>, SftpError> {
        let file = self
            .open_handle(path, OpenFlags::READ, FileAttributes::empty())
            .await?;
        let handle = file.handle.as_str();
        let chunk = self.read_len;
        let (attrs, first) = tokio::join!(self.raw.fstat(handle), self.raw.read(handle, 0, chunk));
        let size = attrs.ok().and_then(|attrs| attrs.attrs.size).unwrap_or(0);
        let mut out = Vec::with_capacity(usize::try_from(size.min(MAX_PREALLOCATION)).unwrap_or(0));
        match first {
            Ok(data) => out.extend_from_slice(&data.data),
            Err(error) if is_eof(&error) => return Ok(out),
            Err(error) => return Err(error),
        }
        // A short first read that matches the size is the whole file. A size of 0 proves
        // nothing (files in /proc), so those are read to EOF.
        let whole = size > 0 && out.len() as u64 == size && out.len() < chunk as usize;
        if !whole {
            self.read_rest(handle, &mut out).await?;
        }
        drop(file);
        Ok(out)
    }

    /// Appends everything from `out.len()` to EOF, with up to [`MAX_READS`] reads in flight.
    async fn read_rest(&self, handle: &str, out: &mut Vec<u8>) -> Result<(), SftpError> {
        let chunk = self.read_len;
        let mut depth = 2;
        let mut next = out.len() as u64;
        let mut in_flight = FuturesOrdered::new();
        loop {
            while in_flight.len() < depth {
                let offset = next;
                in_flight.push_back(async move { self.raw.read(handle, offset, chunk).await });
                next += u64::from(chunk);
            }
            match in_flight.next().await {
                Some(Ok(data)) => {
                    out.extend_from_slice(&data.data);
                    if data.data.len() < chunk as usize {
                        // The requests behind a short read start past a gap: drop them and
                        // continue right after the data (this also finds EOF).
                        in_flight = FuturesOrdered::new();
                        next = out.len() as u64;
                    } else {
                        depth = (depth * 2).min(MAX_READS);
                    }
                }
                Some(Err(error)) if is_eof(&error) => return Ok(()),
                Some(Err(error)) => return Err(error),
                None => return Ok(()),
            }
        }
    }

    /// Writes `content` at offset 0 of an open handle, [`MAX_WRITES`] requests in flight.
    async fn write_all(&self, handle: &str, content: &[u8]) -> Result<(), SftpError> {
        let chunk = self.write_len as usize;
        let mut in_flight = FuturesUnordered::new();
        let mut offset = 0u64;
        for piece in content.chunks(chunk) {
            if in_flight.len() >= MAX_WRITES
                && let Some(result) = in_flight.next().await
            {
                result?;
            }
            in_flight.push(self.raw.write(handle, offset, piece.to_vec()));
            offset += piece.len() as u64;
        }
        while let Some(result) = in_flight.next().await {
            result?;
        }
        Ok(())
    }

    async fn stat(&self, path: &str) -> Result<FileAttributes, SftpError> {
        Ok(self.raw.stat(path).await?.attrs)
    }

    async fn lstat(&self, path: &str) -> Result<FileAttributes, SftpError> {
        Ok(self.raw.lstat(path).await?.attrs)
    }

    async fn read_link(&self, path: &str) -> Result<String, SftpError> {
        let name = self.raw.readlink(path).await?;
        name.files
            .into_iter()
            .next()
            .map(|file| file.filename)
            .ok_or(SftpError::UnexpectedPacket)
    }

    /// Lists a directory (without `.` and `..`), with each entry's `lstat` attributes.
    async fn read_dir(
        self: &Arc<Self>,
        path: &str,
    ) -> Result<Vec<(String, FileAttributes)>, SftpError> {
        let permit = self.handle_permit().await?;
        let handle = self.raw.opendir(path).await?.handle;
        let dir = OpenHandle {
            channel: self.clone(),
            handle,
            permit: Some(permit),
        };
        let mut entries = Vec::new();
        loop {
            match self.raw.readdir(dir.handle.as_str()).await {
                Ok(name) => entries.extend(
                    name.files
                        .into_iter()
                        .filter(|file| file.filename != "." && file.filename != "..")
                        .map(|file| (file.filename, file.attrs)),
                ),
                Err(error) if is_eof(&error) => break,
                Err(error) => return Err(error),
            }
        }
        drop(dir);
        Ok(entries)
    }

    /// Renames, replacing an existing target atomically when the server has
    /// `posix-rename@openssh.com` (plain SFTP rename fails if the target exists).
    async fn rename(&self, from: &str, to: &str) -> Result<(), SftpError> {
        if !self.posix_rename {
            return self.raw.rename(from, to).await.map(drop);
        }
        let mut payload = Vec::with_capacity(from.len() + to.len() + 8);
        put_ssh_string(&mut payload, from)?;
        put_ssh_string(&mut payload, to)?;
        ok_status(self.raw.extended(POSIX_RENAME, payload).await?)
    }

    /// Sets only the permission bits (a chmod; unlike the mode given at open, the server's
    /// umask does not apply).
    async fn set_permissions(&self, handle: &str, mode: u32) -> Result<(), SftpError> {
        let attrs = FileAttributes {
            permissions: Some(mode & 0o7777),
            ..FileAttributes::empty()
        };
        self.raw.fsetstat(handle, attrs).await.map(drop)
    }

    /// Best effort: gives the file the old file's owner (works as root, or for a group the
    /// user belongs to).
    async fn set_owner(&self, handle: &str, uid: u32, gid: u32) {
        let attrs = FileAttributes {
            uid: Some(uid),
            gid: Some(gid),
            ..FileAttributes::empty()
        };
        let _ = self.raw.fsetstat(handle, attrs).await;
    }
}

/// Whether the server accepted the subsystem request (other messages, such as window
/// adjustments, may come first).
async fn subsystem_reply(channel: &mut russh::Channel<russh::client::Msg>) -> bool {
    loop {
        match channel.wait().await {
            Some(russh::ChannelMsg::Success) => return true,
            Some(russh::ChannelMsg::Failure | russh::ChannelMsg::Close) | None => return false,
            Some(_) => {}
        }
    }
}

/// `init`, then `limits@openssh.com` when offered. Returns the read and write lengths and
/// whether `posix-rename@openssh.com` is available.
async fn negotiate(
    mut raw: RawSftpSession,
) -> Result<(RawSftpSession, (u32, u32), bool), SftpError> {
    let version = raw.init().await?;
    let has = |name: &str| version.extensions.get(name).is_some_and(|v| v == "1");
    let posix_rename = has(POSIX_RENAME);
    let mut lengths = (DEFAULT_IO_LEN, DEFAULT_IO_LEN);
    if has(LIMITS) {
        let limits = russh_sftp::client::rawsession::Limits::from(raw.limits().await?);
        let clamp = |len: Option<u64>| {
            len.and_then(|len| u32::try_from(len).ok())
                .map_or(DEFAULT_IO_LEN, |len| len.clamp(1, MAX_IO_LEN))
        };
        lengths = (clamp(limits.read_len), clamp(limits.write_len));
        raw.set_limits(limits);
    }
    Ok((raw, lengths, posix_rename))
}

/// The path as SFTP carries it: valid UTF-8 without NUL bytes (a NUL would silently cut the
/// path short on the server).
fn sftp_path(path: &Path) -> Result<&str> {
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

/// The status and reason text of a status error (`None` for transport errors). OpenSSH sends
/// generic texts ("No such file"); LocalExecutor's messages carry `std::io::Error`'s, so
/// those are used where the status says which error it was.
fn classify(error: &SftpError) -> Option<(SftpStatus, String)> {
    let SftpError::Status(status) = error else {
        return None;
    };
    Some(match status.status_code {
        StatusCode::NoSuchFile => (SftpStatus::NoSuchFile, os_error_text(ENOENT)),
        StatusCode::PermissionDenied => (SftpStatus::PermissionDenied, os_error_text(EACCES)),
        code => {
            let kind = if code == StatusCode::Failure {
                SftpStatus::Failure
            } else {
                SftpStatus::Other
            };
            let text = if status.error_message.is_empty() {
                code.to_string()
            } else {
                status.error_message.clone()
            };
            (kind, text)
        }
    })
}

/// Whether an operation may run again on a new channel after its channel broke under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Reads, and writes that replace a file as a whole: running them twice does no harm.
    Idempotent,
    /// Removing or renaming: the first attempt may have happened, so a retry could fail
    /// misleadingly.
    Never,
}

impl SshExecutor {
    /// A typed error for a failed SFTP request, with LocalExecutor's reason texts for the
    /// statuses that have one. A missing status means a transport problem.
    pub(crate) fn sftp_error(
        &self,
        operation: &'static str,
        path: &str,
        error: SftpError,
    ) -> Error {
        let (status, reason) = match classify(&error) {
            Some((status, reason)) => (Some(status), reason),
            None => (None, error.to_string()),
        };
        Error::Sftp {
            host: self.inner.config.host.clone(),
            operation,
            path: path.to_owned(),
            reason,
            status,
        }
    }

    /// A file-level failure found by this crate (not by the server), e.g. "Is a directory".
    pub(crate) fn file_error(&self, operation: &'static str, path: &Path, code: i32) -> Error {
        Error::Sftp {
            host: self.inner.config.host.clone(),
            operation,
            path: path.to_string_lossy().into_owned(),
            reason: os_error_text(code),
            status: Some(match code {
                ENOENT => SftpStatus::NoSuchFile,
                EACCES => SftpStatus::PermissionDenied,
                _ => SftpStatus::Failure,
            }),
        }
    }

    fn sftp_failure(&self, operation: &'static str, path: &str, reason: &str) -> Error {
        Error::Sftp {
            host: self.inner.config.host.clone(),
            operation,
            path: path.to_owned(),
            reason: reason.to_owned(),
            status: None,
        }
    }

    /// The SFTP channel of a live connection, opened on first use and replaced when broken.
    pub(crate) async fn sftp(&self) -> Result<Arc<SftpChannel>> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let session = self.any_session().await?;
        // Opening runs in a task of its own: a caller cancelled (by a timeout, say) halfway
        // through would otherwise drop an opened channel, which holds one of the server's
        // session slots and russh memory for good. The finished channel is kept for reuse.
        let executor = self.clone();
        tokio::spawn(async move {
            let mut slot = session.sftp.lock().await;
            if let Some(channel) = slot.as_ref().filter(|channel| !channel.is_broken()) {
                return Ok(channel.clone());
            }
            let channel = Arc::new(SftpChannel::open(&executor, &session).await?);
            *slot = Some(channel.clone());
            Ok(channel)
        })
        .await
        .map_err(|e| self.sftp_failure("start", "", &format!("sftp open task failed: {e}")))?
    }

    /// Forgets `channel` if its session still holds it, so the next call opens a new one.
    async fn forget(&self, channel: &Arc<SftpChannel>) {
        let Some(session) = channel.session.upgrade() else {
            return;
        };
        let mut slot = session.sftp.lock().await;
        if slot.as_ref().is_some_and(|held| Arc::ptr_eq(held, channel)) {
            *slot = None;
        }
    }

    /// Runs `op` on an SFTP channel. If the channel broke under it with a transport error,
    /// the channel is dropped and, when `retry` allows, `op` runs once more on a new one.
    async fn with_sftp<T, F, Fut>(&self, retry: Retry, op: F) -> Result<T>
    where
        F: Fn(Arc<SftpChannel>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let channel = self.sftp().await?;
        let result = op(channel.clone()).await;
        let transport_failure = matches!(&result, Err(Error::Sftp { status: None, .. }));
        if !transport_failure || !channel.is_broken() {
            return result;
        }
        self.forget(&channel).await;
        if retry == Retry::Never {
            return result;
        }
        tracing::debug!(host = %self.inner.config.host, "sftp channel broke; retrying on a new one");
        op(self.sftp().await?).await
    }

    async fn any_session(&self) -> Result<Arc<Session>> {
        let registry = &self.inner.registry;
        let max_lifetime = self.inner.config.max_connection_lifetime;
        // Prefer connections that take new work: a retired one is about to close.
        let pick = || {
            let sessions = registry.sessions();
            let usable = |s: &&Arc<Session>| s.accepts_work(max_lifetime);
            let least_loaded = |s: &&Arc<Session>| s.slots.load(Ordering::Relaxed);
            sessions
                .iter()
                .filter(usable)
                .min_by_key(least_loaded)
                .or_else(|| {
                    sessions
                        .iter()
                        .filter(|s| !s.is_dead())
                        .min_by_key(least_loaded)
                })
                .cloned()
        };
        if let Some(session) = pick() {
            return Ok(session);
        }
        registry.dial_if_needed(0).await?;
        pick().ok_or_else(|| Error::ConnectionLost {
            host: self.inner.config.host.clone(),
            port: self.inner.config.port,
        })
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
        if path.to_str().is_none() {
            return files::read_via_exec(self, path).await;
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
            // OpenSSH opens a directory fine and then fails the read with a bare "Failure".
            Err(Error::Sftp {
                status: Some(SftpStatus::Failure),
                ..
            }) if self.is_dir(text).await => Err(self.file_error("read", path, EISDIR)),
            other => other,
        }
    }

    async fn is_dir(&self, path: &str) -> bool {
        let stat = self
            .with_sftp(Retry::Idempotent, |channel| async move {
                channel
                    .stat(path)
                    .await
                    .map_err(|e| self.sftp_error("stat", path, e))
            })
            .await;
        stat.is_ok_and(|attrs| FileMetadata::from_attrs(&attrs).is_dir())
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
    /// * A path that is not valid UTF-8 is written by a shell script over exec
    ///   (`cat > temp && mv`), with the same atomicity but without keeping the owner.
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
        if path.to_str().is_none() {
            return files::write_via_exec(self, path, content).await;
        }
        sftp_path(path)?;
        self.with_sftp(Retry::Idempotent, |channel| async move {
            self.write_atomic(&channel, path, content).await
        })
        .await
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
        let text = sftp_path(&path)?;
        self.with_sftp(Retry::Idempotent, |channel| async move {
            let attrs = channel
                .stat(text)
                .await
                .map_err(|e| self.sftp_error("stat", text, e))?;
            Ok(FileMetadata::from_attrs(&attrs))
        })
        .await
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
        let text = sftp_path(&path)?;
        self.with_sftp(Retry::Idempotent, |channel| async move {
            let attrs = channel
                .lstat(text)
                .await
                .map_err(|e| self.sftp_error("lstat", text, e))?;
            Ok(FileMetadata::from_attrs(&attrs))
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
        self.with_sftp(Retry::Idempotent, |channel| {
            let path = path.clone();
            async move { self.mkdir_all(&channel, &path).await }
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
        self.with_sftp(Retry::Never, |channel| async move {
            channel
                .raw
                .remove(text)
                .await
                .map(drop)
                .map_err(|e| self.sftp_error("remove", text, e))
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
        self.with_sftp(Retry::Never, |channel| async move {
            channel
                .rename(from_text, to_text)
                .await
                .map_err(|e| self.sftp_error("rename", from_text, e))
        })
        .await
    }

    /// `mkdir -p` over SFTP: creates the missing components from the deepest existing one.
    async fn mkdir_all(&self, channel: &Arc<SftpChannel>, path: &Path) -> Result<()> {
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
            if let Err(error) = channel.raw.mkdir(dir, FileAttributes::empty()).await {
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
                        .raw
                        .remove(path.as_str())
                        .await
                        .map(drop)
                        .map_err(|e| self.sftp_error("remove", &path, e))
                })
                .await?;
            for (path, _) in dirs {
                self.remove_tree(channel, path).await?;
            }
            channel
                .raw
                .rmdir(dir.as_str())
                .await
                .map(drop)
                .map_err(|e| self.sftp_error("rmdir", &dir, e))
        })
    }
}

/// Where a write really goes after following symlinks.
struct WriteTarget {
    path: String,
    /// The existing file's attributes, `None` for a new file.
    existing: Option<FileAttributes>,
}

/// The temporary file of an atomic write. Removed in the background when dropped armed
/// (a failure or a cancelled future).
struct TempFile {
    channel: Arc<SftpChannel>,
    path: String,
    armed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let channel = self.channel.clone();
        let path = std::mem::take(&mut self.path);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = channel.raw.remove(path).await;
            });
        }
    }
}

/// `.<name>.swiftide-<16 hex digits>.tmp` in the target's directory. Long names are cut so
/// the result stays within the usual 255-byte limit for one name.
pub(crate) fn temp_name(target: &str, nonce: u64) -> String {
    let (dir, name) = match target.rfind('/') {
        Some(at) => target.split_at(at + 1),
        None => ("", target),
    };
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let short = name.get(..end).unwrap_or_default();
    format!("{dir}.{short}.swiftide-{nonce:016x}.tmp")
}

/// Resolves a symlink's target: absolute as is, relative against the link's directory.
fn link_target(link: &str, target: &str) -> String {
    if target.starts_with('/') {
        return target.to_owned();
    }
    match link.rfind('/') {
        Some(at) => format!("{}{target}", link.get(..=at).unwrap_or_default()),
        None => target.to_owned(),
    }
}

impl SshExecutor {
    async fn write_atomic(
        &self,
        channel: &Arc<SftpChannel>,
        path: &Path,
        content: &[u8],
    ) -> Result<()> {
        let text = sftp_path(path)?;
        let target = match self.write_target(channel, text).await? {
            Some(target) => target,
            // A link pointing to a name SFTP cannot carry: let the shell follow it.
            None => return files::write_via_exec(self, path, content).await,
        };
        if target
            .existing
            .as_ref()
            .is_some_and(|a| FileMetadata::from_attrs(a).is_dir())
        {
            return Err(self.file_error("write", path, EISDIR));
        }
        if target.existing.is_none()
            && let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        {
            // LocalExecutor ignores these errors too; the open below reports the real one.
            let _ = self.mkdir_all(channel, parent).await;
        }
        let temp = temp_name(&target.path, rand::random());
        // Armed before the open is sent: if this future is dropped while the open is on its
        // way, the removal is queued behind it.
        let mut guard = TempFile {
            channel: channel.clone(),
            path: temp.clone(),
            armed: true,
        };
        let flags = OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::EXCLUDE;
        // 0600 while the content is incomplete; the final mode is set before the rename.
        let private = FileAttributes {
            permissions: Some(0o600),
            ..FileAttributes::empty()
        };
        let file = match channel.open_handle(&temp, flags, private).await {
            Ok(file) => file,
            Err(e) if has_status(&e, StatusCode::PermissionDenied) && target.existing.is_some() => {
                guard.armed = false;
                return self.write_in_place(channel, &target.path, content).await;
            }
            Err(error) => {
                guard.armed = false;
                return Err(self.sftp_error("write", &target.path, error));
            }
        };
        self.fill_temp(channel, file, &target, content).await?;
        channel
            .rename(&temp, &target.path)
            .await
            .map_err(|e| self.sftp_error("write", &target.path, e))?;
        guard.armed = false;
        Ok(())
    }

    /// Writes the content, then the final mode (and owner), then closes.
    async fn fill_temp(
        &self,
        channel: &Arc<SftpChannel>,
        file: OpenHandle,
        target: &WriteTarget,
        content: &[u8],
    ) -> Result<()> {
        let fail = |e| self.sftp_error("write", &target.path, e);
        let handle = file.handle.as_str();
        if let Some((uid, gid)) = target.existing.as_ref().and_then(|a| a.uid.zip(a.gid)) {
            // Before the chmod: a chown clears setuid/setgid bits.
            channel.set_owner(handle, uid, gid).await;
        }
        let mode = target
            .existing
            .as_ref()
            .and_then(|a| a.permissions)
            .unwrap_or(0o644);
        let (written, moded) = tokio::join!(
            channel.write_all(handle, content),
            channel.set_permissions(handle, mode)
        );
        written.map_err(fail)?;
        moded.map_err(fail)?;
        file.close().await.map_err(fail)
    }

    /// LocalExecutor's non-atomic write: truncate and write the existing file in place.
    async fn write_in_place(
        &self,
        channel: &Arc<SftpChannel>,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let fail = |e| self.sftp_error("write", path, e);
        let flags = OpenFlags::WRITE | OpenFlags::TRUNCATE;
        let file = channel
            .open_handle(path, flags, FileAttributes::empty())
            .await
            .map_err(fail)?;
        channel
            .write_all(file.handle.as_str(), content)
            .await
            .map_err(fail)?;
        file.close().await.map_err(fail)
    }

    /// Follows symlinks from `path` to the file a write replaces. `None` when a link target
    /// came back lossily decoded (not valid UTF-8).
    async fn write_target(
        &self,
        channel: &Arc<SftpChannel>,
        path: &str,
    ) -> Result<Option<WriteTarget>> {
        let mut current = path.to_owned();
        for _ in 0..MAX_SYMLINKS {
            let attrs = match channel.lstat(&current).await {
                Ok(attrs) => attrs,
                Err(e) if has_status(&e, StatusCode::NoSuchFile) => {
                    return Ok(Some(WriteTarget {
                        path: current,
                        existing: None,
                    }));
                }
                Err(error) => return Err(self.sftp_error("write", path, error)),
            };
            if !FileMetadata::from_attrs(&attrs).is_symlink() {
                return Ok(Some(WriteTarget {
                    path: current,
                    existing: Some(attrs),
                }));
            }
            let target = channel
                .read_link(&current)
                .await
                .map_err(|e| self.sftp_error("write", path, e))?;
            if target.contains(char::REPLACEMENT_CHARACTER) {
                return Ok(None);
            }
            current = link_target(&current, &target);
        }
        Err(self.file_error("write", Path::new(path), ELOOP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_stay_in_the_target_directory_and_short() {
        assert_eq!(
            temp_name("/a/b/file.txt", 0xab),
            "/a/b/.file.txt.swiftide-00000000000000ab.tmp"
        );
        assert_eq!(temp_name("file", 1), ".file.swiftide-0000000000000001.tmp");
        let long = format!("/d/{}", "é".repeat(200));
        let temp = temp_name(&long, 2);
        let name = temp.rsplit('/').next().unwrap_or_default();
        assert!(name.len() <= 255, "{}", name.len());
        assert!(temp.starts_with("/d/.é"));
    }

    #[test]
    fn relative_link_targets_resolve_against_the_link_directory() {
        assert_eq!(link_target("/a/b/link", "c/file"), "/a/b/c/file");
        assert_eq!(link_target("/a/b/link", "/abs"), "/abs");
        assert_eq!(link_target("link", "other"), "other");
        assert_eq!(link_target("/link", "../x"), "/../x");
    }

    #[test]
    fn reasons_are_local_executor_texts() {
        assert_eq!(
            os_error_text(ENOENT),
            "No such file or directory (os error 2)"
        );
        assert_eq!(os_error_text(EISDIR), "Is a directory (os error 21)");
        assert_eq!(os_error_text(EACCES), "Permission denied (os error 13)");
    }

    #[test]
    fn posix_rename_payload_is_two_ssh_strings() {
        let mut payload = Vec::new();
        put_ssh_string(&mut payload, "ab").unwrap();
        put_ssh_string(&mut payload, "").unwrap();
        assert_eq!(payload, [0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0]);
    }

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
