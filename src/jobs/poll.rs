//! The poll of a running job in one round trip over SFTP, with no process on the host.
//!
//! A read by path is two round trips (`open`, then `read`), so the files a poll reads again
//! and again stay open on the connection's SFTP channel ([`SftpChannel::kept_handle`]): the
//! stream's spool file, its `.drop` record (overwritten in place, so an open handle sees the
//! new text), `/proc/<runner>/stat` and the host's boot id. A poll then sends every request
//! at once and waits for the answers together:
//!
//! * [`Job::status`] of a job whose `pid` record this handle has already read: `exit` by
//!   path (an `open` that fails while the job runs), a read of the kept `/proc/<runner>/stat`
//!   handle and one of the kept boot id. An open `/proc/PID/stat` stays bound to its process:
//!   once that ends, reads fail (the kernel's `ESRCH`, an SFTP `Failure`) even if the pid is
//!   reused, which means "gone". Anything but "`exit` absent, runner alive, same boot" falls
//!   back to the full check ([`Job::status`]'s by-path reads), which reads `exit` again
//!   before it calls a job lost.
//! * [`Job::read`]: the kept `.drop` handle at 0, the kept spool handle at the cursor, then a
//!   `stat` of the spool file by path. SFTP servers answer the requests of one channel in
//!   order (OpenSSH's `sftp-server` handles them one by one), so the `.drop` text is read
//!   before the bytes, which makes a short read after a written `.drop` the true end. The
//!   `stat` by path keeps an open handle from outliving its file: a removed job's spool file
//!   is missing by path ([`Error::JobNotFound`]), and a spool file shorter by path than what
//!   its handle read was replaced (the job was removed and started again under its id), so
//!   the handles are dropped and the read goes by path.
//!
//! The first poll of a handle, or on a new connection or channel, opens the handles (one
//! round trip more). On a server without SFTP every read is an exec: polls keep the
//! sequential by-path reads there, a few execs each, never a fan-out.

use std::sync::Arc;

use bytes::Bytes;
use russh_sftp::{client::error::Error as SftpError, protocol::StatusCode};

use super::{
    BOOT_ID, Job, JobOutput, JobStatus, JobStream, RECORD_MAX,
    state::{DropRecord, ExitRecord, PidRecord, proc_start_time, trimmed},
};
use crate::{
    error::{Error, Result, SftpStatus},
    files::{Retry, SftpChannel, has_status, sftp_path},
};

/// A read of `path` from `offset` on the channel's kept handle. A handle the server refused
/// to read (its file or process gone) is forgotten, so the next read opens `path` anew.
async fn kept_read(
    channel: &Arc<SftpChannel>,
    path: &str,
    offset: u64,
    max: u64,
) -> Result<Vec<u8>, SftpError> {
    let handle = channel.kept_handle(path).await?;
    read_on_kept(channel, &handle.handle, path, offset, max).await
}

/// A read on `handle`, kept for `path`: forgotten when the server refused the read.
async fn read_on_kept(
    channel: &SftpChannel,
    handle: &str,
    path: &str,
    offset: u64,
    max: u64,
) -> Result<Vec<u8>, SftpError> {
    let result = channel.read_at(handle, offset, max).await;
    if let Err(error) = &result
        && is_status(error)
    {
        channel.forget_kept(path);
    }
    result
}

/// Whether an SFTP error is the server's answer (a status) rather than a transport failure.
fn is_status(error: &SftpError) -> bool {
    matches!(error, SftpError::Status(_))
}

impl Job {
    /// Reads `/proc/PID/stat` (or the boot id) on a kept handle, over exec without SFTP:
    /// `None` when missing, or when the server refused the read (the process ended).
    pub(super) async fn read_kept_record(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let executor = &self.executor;
        let result = executor
            .with_sftp(Retry::Idempotent, |channel| async move {
                kept_read(&channel, path, 0, RECORD_MAX)
                    .await
                    .map_err(|e| executor.sftp_error("read", path, e))
            })
            .await;
        match result {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::Sftp {
                status: Some(_), ..
            }) => Ok(None),
            Err(Error::SftpUnavailable { .. }) => {
                executor
                    .read_range(std::path::Path::new(path), 0, RECORD_MAX)
                    .await
            }
            Err(error) => Err(error),
        }
    }

    /// The `pid` record this handle read last (a job's record never changes once written).
    pub(super) fn known_start(&self) -> Option<PidRecord> {
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Remembers the job's `pid` record. A different one than before means the job was
    /// removed and started again under its id: the handles kept for the old one go.
    pub(super) async fn remember_start(&self, pid: &PidRecord) {
        let changed = {
            let mut known = self
                .known
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let changed = known.as_ref().is_some_and(|old| old != pid);
            *known = Some(pid.clone());
            changed
        };
        if changed {
            self.forget_handles().await;
        }
    }

    /// Stops keeping this job's handles on the current SFTP channel (best effort).
    pub(super) async fn forget_handles(&self) {
        if let (Ok(channel), Some(dir)) = (self.executor.sftp().await, self.dir.to_str()) {
            channel.forget_kept(dir);
        }
    }

    /// The one-round-trip status of a job known to have started (see the module docs):
    /// `Some` when `exit` is there or the runner still runs on the same boot, `None` when
    /// the full check must decide.
    pub(super) async fn quick_status(&self, known: &PidRecord) -> Result<Option<JobStatus>> {
        let Some(exit_path) = sftp_path(&self.dir.join("exit")).ok().map(str::to_owned) else {
            return Ok(None);
        };
        let runner_stat = format!("/proc/{}/stat", known.runner_pid);
        let executor = &self.executor;
        let result = executor
            .with_sftp(Retry::Idempotent, |channel| {
                let (exit_path, runner_stat) = (exit_path.as_str(), runner_stat.as_str());
                async move {
                    let (exit, runner, boot) = tokio::join!(
                        channel.read_range(exit_path, 0, RECORD_MAX),
                        kept_read(&channel, runner_stat, 0, RECORD_MAX),
                        kept_read(&channel, BOOT_ID, 0, RECORD_MAX),
                    );
                    let fail = |path: &str, e| Err(executor.sftp_error("read", path, e));
                    let exit = match exit {
                        Ok(bytes) => ExitRecord::parse(&bytes),
                        Err(e) if has_status(&e, StatusCode::NoSuchFile) => None,
                        Err(e) => return fail(exit_path, e),
                    };
                    if let Some(exit) = exit {
                        return Ok(Some(JobStatus::Exited(exit.status())));
                    }
                    let runner_alive = match runner {
                        Ok(stat) => {
                            proc_start_time(&stat).as_deref()
                                == Some(known.runner_start_time.as_str())
                        }
                        Err(e) if is_status(&e) => false,
                        Err(e) => return fail(runner_stat, e),
                    };
                    let same_boot = match boot {
                        Ok(boot) => known.boot_id == "-" || known.boot_id == trimmed(&boot),
                        Err(e) if is_status(&e) => true,
                        Err(e) => return fail(BOOT_ID, e),
                    };
                    // Running: its start time is filled in below.
                    Ok((runner_alive && same_boot).then_some(JobStatus::Running {
                        pid: known.pid,
                        started_at: std::time::SystemTime::UNIX_EPOCH,
                    }))
                }
            })
            .await;
        match result {
            Err(Error::SftpUnavailable { .. }) => Ok(None),
            Ok(Some(JobStatus::Running { pid, .. })) => Ok(Some(JobStatus::Running {
                pid,
                started_at: self.started_at(known).await?,
            })),
            other => other,
        }
    }

    /// [`Job::read`] on kept handles, in one round trip (see the module docs). `None` when
    /// SFTP cannot do it (no SFTP, a path it cannot carry, a replaced spool file): then the
    /// read goes by path.
    pub(super) async fn quick_read(
        &self,
        stream: JobStream,
        offset: u64,
        max: u64,
    ) -> Result<Option<JobOutput>> {
        let data_path = self.dir.join(stream.name());
        let drop_path = self.dir.join(format!("{}.drop", stream.name()));
        let (Ok(data_path), Ok(drop_path), Some(dir)) = (
            sftp_path(&data_path),
            sftp_path(&drop_path),
            self.dir.to_str(),
        ) else {
            return Ok(None);
        };
        let executor = &self.executor;
        let result = executor
            .with_sftp(Retry::Idempotent, |channel| async move {
                let fail = |path: &str, e| executor.sftp_error("read", path, e);
                let missing = |e: &SftpError| has_status(e, StatusCode::NoSuchFile);
                let (drop_handle, data_handle) = tokio::join!(
                    channel.kept_handle(drop_path),
                    channel.kept_handle(data_path)
                );
                let data_handle = match data_handle {
                    Ok(handle) => handle,
                    Err(e) if missing(&e) => return Ok(Err(self.not_found())),
                    Err(e) => return Err(fail(data_path, e)),
                };
                let drop_handle = match drop_handle {
                    Ok(handle) => Some(handle),
                    Err(e) if missing(&e) => None,
                    Err(e) => return Err(fail(drop_path, e)),
                };
                // In this order on the wire: the record, the bytes, the file by path.
                let drop_read = async {
                    match &drop_handle {
                        Some(handle) => Some(
                            read_on_kept(&channel, &handle.handle, drop_path, 0, RECORD_MAX).await,
                        ),
                        None => None,
                    }
                };
                let (drop_text, bytes, by_path) = tokio::join!(
                    drop_read,
                    read_on_kept(&channel, &data_handle.handle, data_path, offset, max),
                    channel.stat(data_path)
                );
                let by_path = match by_path {
                    Ok(attrs) => attrs,
                    Err(e) if missing(&e) => {
                        channel.forget_kept(dir);
                        return Ok(Err(self.not_found()));
                    }
                    Err(e) => return Err(fail(data_path, e)),
                };
                let bytes = bytes.map_err(|e| fail(data_path, e))?;
                let record = match drop_text {
                    Some(Ok(text)) => DropRecord::parse(&text),
                    Some(Err(e)) => return Err(fail(drop_path, e)),
                    None => None,
                };
                // The first read request was answered before the `stat`, and a spool file
                // only grows: if the path is shorter than what the handle read, the handle's
                // file is no longer the one at the path.
                let first = (bytes.len() as u64)
                    .min(u64::from(channel.read_len()))
                    .min(max);
                if by_path
                    .size
                    .is_some_and(|size| size < offset.saturating_add(first))
                {
                    channel.forget_kept(dir);
                    return Ok(Ok(None));
                }
                Ok(Ok(Some((bytes, record))))
            })
            .await;
        let (bytes, record) = match result {
            Ok(Ok(Some(read))) => read,
            Ok(Ok(None)) | Err(Error::SftpUnavailable { .. }) => return Ok(None),
            Ok(Err(not_found)) => return Err(not_found),
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => return Err(self.not_found()),
            Err(error) => return Err(error),
        };
        let ended = match record {
            Some(record) => Some(self.drop_of(stream, record).await?),
            None => None,
        };
        Ok(Some(Self::output(offset, max, bytes, ended)))
    }

    /// A read of output this handle's start mirrored (see `command::resident::job`): the
    /// bytes from memory, checked with one round trip. A `stat` of the spool file by path
    /// must show no more than the mirror holds, and no `exit` record may be there before the
    /// mirror's end: else the mirror is behind, and is given a moment to catch up (what the
    /// files hold is on its way), or the files are read. A spool file shorter than the
    /// mirror, or, once ended, of another length or modification time than first seen,
    /// means the job was removed (or removed and started again): the mirror is dropped.
    /// `None`: read the files.
    pub(super) async fn mirror_read(
        &self,
        stream: JobStream,
        offset: u64,
        max: u64,
    ) -> Result<Option<JobOutput>> {
        /// How long a read waits for a mirror that is behind the files.
        const CATCH_UP: std::time::Duration = std::time::Duration::from_millis(100);
        let Some(mirror) = &self.mirror else {
            return Ok(None);
        };
        let index = usize::from(stream == JobStream::Stderr);
        let Some(before) = mirror.read(index, offset, max) else {
            return Ok(None);
        };
        let file = self.dir.join(stream.name());
        let exit_file = self.dir.join("exit");
        let (Ok(path), Ok(exit_path)) = (sftp_path(&file), sftp_path(&exit_file)) else {
            return Ok(None);
        };
        let ended = before.end.is_some();
        let executor = &self.executor;
        let checked = executor
            .with_sftp(Retry::Idempotent, |channel| async move {
                let exit = async {
                    if ended {
                        return Ok(false);
                    }
                    match channel.stat(exit_path).await {
                        Ok(_) => Ok(true),
                        Err(e) if has_status(&e, StatusCode::NoSuchFile) => Ok(false),
                        Err(e) => Err(executor.sftp_error("stat", exit_path, e)),
                    }
                };
                let (attrs, exit) = tokio::join!(channel.stat(path), exit);
                let attrs = attrs.map_err(|e| executor.sftp_error("stat", path, e))?;
                Ok((attrs, exit?))
            })
            .await;
        let (attrs, exit) = match checked {
            Ok(checked) => checked,
            Err(Error::Sftp {
                status: Some(SftpStatus::NoSuchFile),
                ..
            }) => return Err(self.not_found()),
            Err(Error::SftpUnavailable { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let size = attrs.size.unwrap_or(0);
        // The mirror only grows: a file shorter than it was is another file.
        if size < before.held {
            mirror.invalidate();
            return Ok(None);
        }
        // Once `exit` is there, the file seen is whole: the mirror must end with it.
        if !ended
            && (size > before.held || exit)
            && !mirror.catch_up(index, size, exit, CATCH_UP).await
        {
            return Ok(None);
        }
        let Some(read) = mirror.read(index, offset, max) else {
            return Ok(None);
        };
        let record = read.end.as_deref().map(|end| {
            end.split(|&byte| byte == b'\n')
                .nth(1 + index)
                .and_then(DropRecord::parse)
        });
        match record {
            Some(Some(record)) => {
                if size != read.held || !mirror.same_file(index, attrs.mtime) {
                    mirror.invalidate();
                    return Ok(None);
                }
                let ended = Some(self.drop_of(stream, record).await?);
                Ok(Some(Self::output(offset, max, read.bytes.to_vec(), ended)))
            }
            Some(None) => {
                mirror.invalidate();
                Ok(None)
            }
            None => Ok(Some(Self::output(offset, max, read.bytes.to_vec(), None))),
        }
    }

    /// A read's answer: `bytes` from `offset`, at the end when the stream `ended` (its drop)
    /// and the read came back short.
    pub(super) fn output(
        offset: u64,
        max: u64,
        bytes: Vec<u8>,
        ended: Option<Option<super::JobDrop>>,
    ) -> JobOutput {
        let next_offset = offset + bytes.len() as u64;
        let eof = ended.is_some() && (bytes.len() as u64) < max.max(1);
        JobOutput {
            bytes: Bytes::from(bytes),
            next_offset,
            eof,
            dropped: if eof { ended.flatten() } else { None },
        }
    }
}
