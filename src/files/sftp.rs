//! The SFTP channel: one per pooled connection, opened on first use and replaced when it
//! breaks, and the requests sent on it. The typed file API on top is in
//! [`crate::files::remote_fs`].
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
//! script over exec ([`crate::files::exec_fallback`]), the other operations return
//! [`Error::InvalidInput`].
//!
//! # Handles
//!
//! OpenSSH sends a handle as a 4-byte number, which russh-sftp decodes as a `String`: numbers
//! of 128 and more are not valid UTF-8 and would be mangled. OpenSSH reuses the lowest free
//! numbers, so keeping fewer than 128 handles open per channel ([`MAX_HANDLES`]) keeps every
//! handle intact.

use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use futures::{
    StreamExt,
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
    command,
    error::{Error, Phase, Result},
    executor::SshExecutor,
    pool::{self, Running, Session},
};

/// What an escalated handle's SFTP channel runs as the target: the first `sftp-server` found
/// where distributions install it (Debian and Ubuntu, RHEL and Fedora, Arch and Alpine, the
/// BSDs and macOS, Dropbear's default), else one on `PATH`. A host with only sshd's
/// `internal-sftp` has none: the channel ends at once, and file operations take the exec
/// fallbacks as on a server without SFTP.
const SFTP_SERVER_SCRIPT: &str = "for p in /usr/lib/openssh/sftp-server \
     /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server /usr/libexec/sftp-server \
     /usr/lib/sftp-server /usr/local/libexec/sftp-server \"$(command -v sftp-server)\"; do \
     [ -n \"$p\" ] && [ -x \"$p\" ] && exec \"$p\"; done; echo \"no sftp-server found\" >&2; exit 127";

/// Most read requests in flight for one file (reached by doubling from [`FIRST_READS`]).
const MAX_READS: usize = 32;

/// Reads [`SftpChannel::read_at`] sends at once before any reply: a job's megabyte of output
/// in one round trip, where starting with one request took three (four were one request
/// short of a MiB: OpenSSH's reads are 255 KiB at most, so its last 4 KiB took a second
/// round trip). A request past the end costs one small EOF reply.
const FIRST_READS: usize = 8;
/// Most write requests in flight for one file.
const MAX_WRITES: usize = 32;
/// Largest read or write request, also when the server allows more.
const MAX_IO_LEN: u32 = 255 * 1024;
/// What every SFTP server must accept when it announces no limits.
const DEFAULT_IO_LEN: u32 = 32 * 1024;
/// Open handles per channel; see the module docs for why it stays below 128.
const MAX_HANDLES: usize = 64;
/// Handles kept open between operations per channel ([`SftpChannel::kept_handle`]): half of
/// [`MAX_HANDLES`], so that kept handles never starve the operations that open their own.
/// Jobs keep up to 4 per polled job (a stream, its `.drop` record, `/proc/<runner>/stat`,
/// the boot id shared by all), so about 10 jobs polled in turn keep theirs open; more evict
/// each other (least recently used first) and cost a re-open.
const MAX_KEPT: usize = MAX_HANDLES / 2;
/// Per-request deadline of russh-sftp: a request that gets no answer fails after this long.
/// `MAX_WRITES × MAX_IO_LEN` (8 MiB) must be sendable in this time, so links down to about
/// 300 KiB/s work.
const REQUEST_TIMEOUT_SECS: u64 = 30;
/// Largest incoming SFTP packet accepted (a 255 KiB data reply plus headers fits easily).
const MAX_INCOMING_PACKET: u32 = 1024 * 1024;
/// The buffer reserved up front for a read, whatever size the server claims.
const MAX_PREALLOCATION: u64 = 256 * 1024 * 1024;

const POSIX_RENAME: &str = "posix-rename@openssh.com";
const LIMITS: &str = "limits@openssh.com";

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
    /// [`SftpChannel::kept_handle`]'s handles by path, most recently used first.
    kept: std::sync::Mutex<VecDeque<(String, Arc<KeptHandle>)>>,
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
pub(crate) struct OpenHandle {
    channel: Arc<SftpChannel>,
    pub(crate) handle: String,
    permit: Option<OwnedSemaphorePermit>,
}

impl OpenHandle {
    /// Closes and waits for the server's answer (a write's close can report an error).
    pub(crate) async fn close(mut self) -> Result<(), SftpError> {
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

/// A handle the channel keeps open between operations ([`SftpChannel::kept_handle`]). It
/// refers to its channel weakly (the channel holds it), and closes in the background when
/// dropped while the channel lives; a channel that closes takes its handles with it.
pub(crate) struct KeptHandle {
    channel: Weak<SftpChannel>,
    pub(crate) handle: String,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for KeptHandle {
    fn drop(&mut self) {
        let (Some(permit), Some(channel)) = (self.permit.take(), self.channel.upgrade()) else {
            return;
        };
        let handle = std::mem::take(&mut self.handle);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = channel.raw.close(handle).await;
                drop(permit);
            });
        }
    }
}

pub(crate) fn has_status(error: &SftpError, code: StatusCode) -> bool {
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
        // Not counted among the connection's command channels (the count is dropped): the
        // capacity learned from refusals is for commands, next to this channel.
        let (mut channel, _) =
            pool::open_channel(session, config, &inner.registry.counters, &mut || true).await?;
        let ssh_error = |source| Error::Ssh {
            host: config.host.clone(),
            port: config.port,
            phase: Phase::Sftp,
            source,
        };
        match executor.exchange() {
            None => {
                channel
                    .request_subsystem(true, "sftp")
                    .await
                    .map_err(ssh_error)?;
                // Wait for the answer: a server without SFTP would otherwise only show up as
                // a request timeout much later.
                let answer =
                    tokio::time::timeout(config.connect_timeout, subsystem_reply(&mut channel))
                        .await;
                if answer != Ok(true) {
                    let _ = channel.close().await;
                    return Err(unavailable(config));
                }
            }
            Some(exchange) => {
                // The subsystem would run as the login user: the target's sftp-server is
                // started through the escalation instead, as `sftp -s 'sudo ...'` does.
                let marker = command::marker_prefix(rand::random());
                let wrapped = command::script_request(
                    &marker,
                    SFTP_SERVER_SCRIPT.as_bytes(),
                    b"",
                    Some(&exchange.escalation()),
                )?;
                channel
                    .exec(true, wrapped.request)
                    .await
                    .map_err(ssh_error)?;
                if let Err(error) =
                    command::hand_over(&mut channel, &exchange, config, &marker, &wrapped.stdin)
                        .await
                {
                    let _ = channel.close().await;
                    return Err(error);
                }
            }
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
            // Accepted, then closed before the version exchange: no sftp-server behind the
            // subsystem (Dropbear runs `<shell> -c /usr/lib/sftp-server`, which exits 126),
            // or none on the host for an escalation to start.
            Ok(Err(_)) if broken.load(Ordering::Acquire) => return Err(unavailable(config)),
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
            kept: std::sync::Mutex::new(VecDeque::with_capacity(MAX_KEPT + 1)),
        })
    }

    /// Marks an operation as running on this channel's connection (see
    /// [`Running`]); `None` when the connection is gone.
    pub(crate) fn running(&self) -> Option<Running> {
        self.session.upgrade().map(Running::new)
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

    pub(crate) async fn open_handle(
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

    /// Reads up to `max` bytes from `offset` (fewer at EOF), with up to [`MAX_READS`]
    /// requests in flight. Used by jobs, whose spool files are read by a client-owned cursor.
    pub(crate) async fn read_range(
        self: &Arc<Self>,
        path: &str,
        offset: u64,
        max: u64,
    ) -> Result<Vec<u8>, SftpError> {
        let file = self
            .open_handle(path, OpenFlags::READ, FileAttributes::empty())
            .await?;
        let out = self.read_at(&file.handle, offset, max).await;
        drop(file);
        out
    }

    /// Reads up to `max` bytes of an open handle from `offset` (fewer at EOF). The first
    /// requests (of up to [`read_len`](Self::read_len) bytes each, [`FIRST_READS`] of them
    /// when `max` asks for that much) are sent when the future is first polled; more follow,
    /// doubling up to [`MAX_READS`] in flight, while replies come back full. A request past
    /// the end costs the server one `read` that returns nothing.
    pub(crate) async fn read_at(
        &self,
        handle: &str,
        offset: u64,
        max: u64,
    ) -> Result<Vec<u8>, SftpError> {
        let chunk = u64::from(self.read_len);
        let end = offset.saturating_add(max);
        let mut out = Vec::new();
        let mut next = offset;
        let mut depth = FIRST_READS;
        let mut in_flight = FuturesOrdered::new();
        loop {
            while in_flight.len() < depth && next < end {
                let at = next;
                let len = u32::try_from(chunk.min(end - at)).unwrap_or(self.read_len);
                in_flight.push_back(async move { self.raw.read(handle, at, len).await });
                next += u64::from(len);
            }
            match in_flight.next().await {
                Some(Ok(data)) => {
                    let asked = chunk.min(end - (offset + out.len() as u64));
                    out.extend_from_slice(&data.data);
                    if (data.data.len() as u64) < asked {
                        // A short read: EOF for a regular file (a writer may still append,
                        // which the next read by cursor picks up).
                        break;
                    }
                    depth = (depth * 2).min(MAX_READS);
                }
                Some(Err(error)) if is_eof(&error) => break,
                Some(Err(error)) => return Err(error),
                None => break,
            }
        }
        Ok(out)
    }

    /// The largest read request sent (the server's limit, at most [`MAX_IO_LEN`]).
    pub(crate) fn read_len(&self) -> u32 {
        self.read_len
    }

    /// A read handle on `path` kept open on this channel for later reads (by jobs, which
    /// poll the same few files again and again: a read on an open handle is one round trip,
    /// a read by path two). Opened on first use; the [`MAX_KEPT`] most recently used stay
    /// open, and an evicted one closes once its last user drops it. A kept handle stays
    /// bound to the file it opened: a caller that needs the file now at `path` (which may
    /// have been replaced or removed) checks by path itself, and calls
    /// [`forget_kept`](Self::forget_kept) when the handle no longer serves.
    pub(crate) async fn kept_handle(
        self: &Arc<Self>,
        path: &str,
    ) -> Result<Arc<KeptHandle>, SftpError> {
        self.keep_open(path, OpenFlags::READ).await
    }

    /// Like [`kept_handle`](Self::kept_handle), but creates the file (empty) when it is
    /// missing; an existing one is opened as it is, never truncated. For a file that is about
    /// to be written and then read (a job's spool files): the handle is open before the
    /// writer starts, so the first read needs no open of its own.
    pub(crate) async fn kept_handle_creating(
        self: &Arc<Self>,
        path: &str,
    ) -> Result<Arc<KeptHandle>, SftpError> {
        self.keep_open(path, OpenFlags::READ | OpenFlags::CREATE)
            .await
    }

    async fn keep_open(
        self: &Arc<Self>,
        path: &str,
        flags: OpenFlags,
    ) -> Result<Arc<KeptHandle>, SftpError> {
        if let Some(handle) = self.kept_lookup(path) {
            return Ok(handle);
        }
        let mut file = self
            .open_handle(path, flags, FileAttributes::empty())
            .await?;
        let opened = Arc::new(KeptHandle {
            channel: Arc::downgrade(self),
            handle: std::mem::take(&mut file.handle),
            permit: file.permit.take(),
        });
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Another caller may have opened the same path meanwhile: keep one of the two.
        if let Some(index) = kept.iter().position(|(kept_path, _)| kept_path == path) {
            kept.remove(index);
        }
        kept.push_front((path.to_owned(), opened.clone()));
        kept.truncate(MAX_KEPT);
        Ok(opened)
    }

    fn kept_lookup(&self, path: &str) -> Option<Arc<KeptHandle>> {
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = kept.iter().position(|(kept_path, _)| kept_path == path)?;
        let entry = kept.remove(index)?;
        let handle = entry.1.clone();
        kept.push_front(entry);
        Some(handle)
    }

    /// Stops keeping the handles of `path` and of every path under it (a directory); they
    /// close once their users drop them.
    pub(crate) fn forget_kept(&self, path: &str) {
        let dir = format!("{}/", path.trim_end_matches('/'));
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.retain(|(kept_path, _)| kept_path != path && !kept_path.starts_with(&dir));
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
    pub(crate) async fn write_all(&self, handle: &str, content: &[u8]) -> Result<(), SftpError> {
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

    pub(crate) async fn stat(&self, path: &str) -> Result<FileAttributes, SftpError> {
        Ok(self.raw.stat(path).await?.attrs)
    }

    pub(crate) async fn lstat(&self, path: &str) -> Result<FileAttributes, SftpError> {
        Ok(self.raw.lstat(path).await?.attrs)
    }

    /// The server's `realpath` of `path` (OpenSSH: symlinks resolved, `.` and `..` removed;
    /// a missing last component is allowed).
    pub(crate) async fn real_path(&self, path: &str) -> Result<String, SftpError> {
        let name = self.raw.realpath(path).await?;
        name.files
            .into_iter()
            .next()
            .map(|file| file.filename)
            .ok_or(SftpError::UnexpectedPacket)
    }

    pub(crate) async fn read_link(&self, path: &str) -> Result<String, SftpError> {
        let name = self.raw.readlink(path).await?;
        name.files
            .into_iter()
            .next()
            .map(|file| file.filename)
            .ok_or(SftpError::UnexpectedPacket)
    }

    /// Lists a directory (without `.` and `..`), with each entry's `lstat` attributes.
    pub(crate) async fn read_dir(
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
    pub(crate) async fn rename(&self, from: &str, to: &str) -> Result<(), SftpError> {
        if !self.posix_rename {
            return self.raw.rename(from, to).await.map(drop);
        }
        let mut payload = Vec::with_capacity(from.len() + to.len() + 8);
        put_ssh_string(&mut payload, from)?;
        put_ssh_string(&mut payload, to)?;
        ok_status(self.raw.extended(POSIX_RENAME, payload).await?)
    }

    /// Fills a freshly opened file: owner (if given), content, mode, close.
    ///
    /// Content that fits in one write request costs a single round trip: all four requests
    /// are sent before the first reply is awaited (a raw request goes out when its future is
    /// first polled, and `join!` polls in order), and SFTP servers handle requests on one
    /// handle in the order they arrive (draft-ietf-secsh-filexfer-02, section 6). The owner
    /// goes first because a chown clears setuid/setgid bits. A write error wins over the
    /// others. Longer content keeps the write pipeline and closes after it.
    pub(crate) async fn fill_and_close(
        &self,
        file: OpenHandle,
        content: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(), SftpError> {
        let handle = file.handle.clone();
        let set_owner = async {
            if let Some((uid, gid)) = owner {
                self.set_owner(&handle, uid, gid).await;
            }
        };
        if content.len() > self.write_len as usize {
            set_owner.await;
            let (written, moded) = tokio::join!(
                self.write_all(&handle, content),
                self.set_permissions(&handle, mode)
            );
            written?;
            moded?;
            return file.close().await;
        }
        let write = async {
            if content.is_empty() {
                return Ok(());
            }
            self.raw
                .write(handle.as_str(), 0, content.to_vec())
                .await
                .map(drop)
        };
        let ((), written, moded, closed) = tokio::join!(
            set_owner,
            write,
            self.set_permissions(&handle, mode),
            file.close()
        );
        written?;
        moded?;
        closed
    }

    /// Sets only the permission bits (a chmod; unlike the mode given at open, the server's
    /// umask does not apply).
    pub(crate) async fn set_permissions(&self, handle: &str, mode: u32) -> Result<(), SftpError> {
        let attrs = FileAttributes {
            permissions: Some(mode & 0o7777),
            ..FileAttributes::empty()
        };
        self.raw.fsetstat(handle, attrs).await.map(drop)
    }

    /// Best effort: gives the file the old file's owner (works as root, or for a group the
    /// user belongs to).
    pub(crate) async fn set_owner(&self, handle: &str, uid: u32, gid: u32) {
        let _ = self.chown(handle, uid, gid).await;
    }

    /// Sets the file's owner and group (`u32::MAX`, chown's `-1`, leaves that id as it is:
    /// OpenSSH's sftp-server hands both to `fchown`).
    pub(crate) async fn chown(&self, handle: &str, uid: u32, gid: u32) -> Result<(), SftpError> {
        let attrs = FileAttributes {
            uid: Some(uid),
            gid: Some(gid),
            ..FileAttributes::empty()
        };
        self.raw.fsetstat(handle, attrs).await.map(drop)
    }

    /// `mkdir` with `mode` (less the server's umask); `None` leaves it to the server (0777
    /// less the umask, for OpenSSH's sftp-server).
    pub(crate) async fn mkdir(&self, path: &str, mode: Option<u32>) -> Result<(), SftpError> {
        let attrs = FileAttributes {
            permissions: mode,
            ..FileAttributes::empty()
        };
        self.raw.mkdir(path, attrs).await.map(drop)
    }

    pub(crate) async fn remove(&self, path: &str) -> Result<(), SftpError> {
        self.raw.remove(path).await.map(drop)
    }

    pub(crate) async fn rmdir(&self, path: &str) -> Result<(), SftpError> {
        self.raw.rmdir(path).await.map(drop)
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

/// What a pooled connection keeps for SFTP (one of its `pool::Extensions`).
#[derive(Default)]
pub(crate) struct SftpSlots {
    /// The login's channel.
    login: tokio::sync::Mutex<Held>,
    /// The channels of escalated handles (an sftp-server started through sudo, doas or su),
    /// one per escalation and credential (`Become::access_key`).
    escalated: tokio::sync::Mutex<std::collections::HashMap<String, Held>>,
}

/// What a pooled connection remembers about one SFTP identity.
#[derive(Default)]
enum Held {
    /// Nothing yet (or forgotten): the next use opens a channel.
    #[default]
    Nothing,
    Channel(Arc<SftpChannel>),
    /// The server turned out to have no usable SFTP subsystem: asked once per connection,
    /// not once per file.
    NoSftp,
}

/// The SFTP channel a pooled connection holds.
fn held_channel(slot: &Held) -> Option<Arc<SftpChannel>> {
    match slot {
        Held::Channel(channel) => Some(channel.clone()),
        Held::Nothing | Held::NoSftp => None,
    }
}

/// The SFTP channel a pooled connection holds, unless it broke.
fn live_channel(slot: &Held) -> Option<Arc<SftpChannel>> {
    held_channel(slot).filter(|channel| !channel.is_broken())
}

/// The channel `slot` holds, or a new one opened for `executor` (as its escalation says) and
/// kept there; a server found without SFTP is remembered as such.
async fn fill(
    slot: &mut Held,
    executor: &SshExecutor,
    session: &Arc<Session>,
) -> Result<Arc<SftpChannel>> {
    if matches!(slot, Held::NoSftp) {
        return Err(unavailable(&executor.inner.config));
    }
    if let Some(channel) = live_channel(slot) {
        return Ok(channel);
    }
    match SftpChannel::open(executor, session).await {
        Ok(channel) => {
            let channel = Arc::new(channel);
            *slot = Held::Channel(channel.clone());
            Ok(channel)
        }
        Err(error @ Error::SftpUnavailable { .. }) => {
            *slot = Held::NoSftp;
            Err(error)
        }
        Err(error) => Err(error),
    }
}

fn unavailable(config: &crate::config::Config) -> Error {
    Error::SftpUnavailable {
        host: config.host.clone(),
        port: config.port,
    }
}

impl SshExecutor {
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
            let slots = session.extensions.get::<SftpSlots>();
            match executor.escalation().map(crate::config::Become::access_key) {
                None => fill(&mut *slots.login.lock().await, &executor, &session).await,
                Some(identity) => {
                    let mut escalated = slots.escalated.lock().await;
                    fill(escalated.entry(identity).or_default(), &executor, &session).await
                }
            }
        })
        .await
        .map_err(|e| {
            let reason = format!("sftp open task failed: {e}");
            self.file_failure("start", "", reason, None)
        })?
    }

    /// An SFTP channel a live connection holds already for this handle's escalation, if
    /// any: opens none, and waits for nothing (a channel being opened right now counts as
    /// none).
    pub(crate) fn open_sftp_channel(&self) -> Option<Arc<SftpChannel>> {
        let identity = self.escalation().map(crate::config::Become::access_key);
        self.inner.registry.sessions().iter().find_map(|session| {
            let slots = session.extensions.peek::<SftpSlots>()?;
            match &identity {
                None => live_channel(&*slots.login.try_lock().ok()?),
                Some(identity) => live_channel(slots.escalated.try_lock().ok()?.get(identity)?),
            }
        })
    }

    /// Forgets `channel` if its session still holds it, so the next call opens a new one.
    pub(crate) async fn forget(&self, channel: &Arc<SftpChannel>) {
        let Some(session) = channel.session.upgrade() else {
            return;
        };
        let forget = |slot: &mut Held| {
            if held_channel(slot).is_some_and(|held| Arc::ptr_eq(&held, channel)) {
                *slot = Held::Nothing;
            }
        };
        let Some(slots) = session.extensions.peek::<SftpSlots>() else {
            return;
        };
        match self.escalation().map(crate::config::Become::access_key) {
            None => forget(&mut *slots.login.lock().await),
            Some(identity) => {
                if let Some(slot) = slots.escalated.lock().await.get_mut(&identity) {
                    forget(slot);
                }
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_rename_payload_is_two_ssh_strings() {
        let mut payload = Vec::new();
        put_ssh_string(&mut payload, "ab").unwrap();
        put_ssh_string(&mut payload, "").unwrap();
        assert_eq!(payload, [0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0]);
    }
}
