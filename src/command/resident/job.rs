//! Jobs started by a connection's Python runner: no shell start, and the output mirrored.
//!
//! A `J` request carries what the shell start would write (see `jobs::script`): the job's
//! id, its spec and params texts, its `sh -c` text, the spool cap, the deadline and the kill
//! grace. The runner forks a *supervisor* (`supervise` in `runner.py`) that leaves the
//! runner's session (`setsid`) and descriptors behind, lays out the job directory exactly as
//! the shell start does (the same claims, files and records, so every other job operation
//! and every other client reads it as any job), `posix_spawn`s the command in a session of
//! its own, records its `pid` line, and answers. It then spools both streams with the cap,
//! keeps the deadline and writes `exit`, as the shell runner does: the job outlives the
//! runner, the channel and the connection.
//!
//! What it spools it also *mirrors*, on a pipe the runner forwards as this request's output:
//! records `[tag u8][length u32 BE][data]`, `a` the answer (`ok BASE`, or `fallback WHY`),
//! `o`/`e` bytes exactly as written to the spool files, `l` when the mirror reached
//! [`MIRROR_MAX`] (the rest is only in the files), `z` the end (the `exit` line, then the
//! `.drop` records of stdout and stderr, a line each). The client keeps the mirror with the
//! [`Job`](crate::Job) handle, so a read of output it holds costs no transfer, only the
//! check that the spool file by path is still the one mirrored (see `jobs`).
//!
//! Anything the supervisor cannot decide alone (the id exists or is claimed, a write failed,
//! the base directory is not absolute) answers `fallback` before any job runs, and the shell
//! start decides it as it always did: with the same messages and exit codes.

use std::{
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use bytes::{Buf, Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

use super::{ACK_EVERY, Choice, Frame, Need, Resident, runner_for};
use crate::{
    command::output::OutputChunk,
    pool::{Pool, Running},
};

/// Output the supervisor mirrors at most per job (`MIRROR_MAX` in `runner.py`): it bounds
/// the client's memory per job and the channel's traffic for output nobody reads.
const MIRROR_MAX: usize = 4 * 1024 * 1024;

/// What the supervisor needs to start a job (see the module docs).
pub(crate) struct RunnerJob<'a> {
    pub(crate) id: &'a str,
    /// The `spec` file's text.
    pub(crate) spec: &'a [u8],
    /// The `params` file's text.
    pub(crate) params: &'a [u8],
    /// The command's `sh -c` text (the direct form's).
    pub(crate) text: &'a [u8],
    pub(crate) spool_cap: u64,
    pub(crate) deadline: Option<Duration>,
    pub(crate) kill_grace: Duration,
}

impl RunnerJob<'_> {
    /// The `J` request's data.
    fn encode(&self) -> Vec<u8> {
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        swiftide_ssh_runner::Job {
            spool_cap: self.spool_cap,
            // 0 is no deadline; a deadline of 0 ms is 1 ms, still one.
            deadline_ms: self.deadline.map_or(0, |d| millis(d).max(1)),
            grace_ms: u32::try_from(self.kill_grace.as_millis()).unwrap_or(u32::MAX),
            id: self.id.as_bytes(),
            spec: self.spec,
            params: self.params,
            text: self.text,
        }
        .encode()
    }
}

/// How a start through the runner went.
pub(crate) enum RunnerJobStart {
    /// The job runs: the base directory the supervisor used, and its mirror.
    Started {
        base: Vec<u8>,
        mirror: Arc<JobMirror>,
    },
    /// No job was started here (no Python runner on the connection, an id that exists, a
    /// start that broke): the shell start decides, as for any job.
    Fallback(String),
}

/// Starts `job` through the resident runner of a pooled connection that runs as
/// `escalation`'s target (`None`: the login), where it is a Python one (only `runner.py`
/// supervises jobs).
pub(crate) async fn start_job(
    pool: &Arc<Pool>,
    job: &RunnerJob<'_>,
    escalation: Option<&crate::command::escalation::Exchange>,
) -> RunnerJobStart {
    let config = &pool.config;
    if !super::wanted(config) {
        return RunnerJobStart::Fallback("no runner wanted".to_owned());
    }
    // Held for the start only: the mirror then needs no slot of its own.
    let slot = match pool.acquire_slot().await {
        Ok(slot) => slot,
        Err(error) => return RunnerJobStart::Fallback(error.to_string()),
    };
    let _running = Running::new(slot.session.clone());
    let runner = match runner_for(pool, &slot.session, escalation, Need::Preferred).await {
        Choice::Use(runner) if runner.name.starts_with("python ") => runner,
        Choice::Use(runner) => {
            return RunnerJobStart::Fallback(format!("{} supervises no jobs", runner.name));
        }
        Choice::PerExec | Choice::Fail(_) | Choice::Retry(_) => {
            return RunnerJobStart::Fallback("no runner on this connection".to_owned());
        }
    };
    let Ok((id, frames)) = runner
        .send_routed(swiftide_ssh_runner::Kind::Job, &job.encode())
        .await
    else {
        return RunnerJobStart::Fallback("the runner's channel closed".to_owned());
    };
    pool.registry
        .counters
        .runner_commands
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mirror = Arc::new(JobMirror::default());
    let (answer, answered) = oneshot::channel();
    // The pump outlives this call (and a dropped `spawn_job`): it takes the mirror until its
    // end, and acknowledges everything, so the runner never holds the supervisor's pipe.
    tokio::spawn(pump(runner, id, frames, Arc::downgrade(&mirror), answer));
    match answered.await {
        Ok(answer) => match answer.strip_prefix(b"ok ") {
            Some(base) => RunnerJobStart::Started {
                base: base.to_vec(),
                mirror,
            },
            None => RunnerJobStart::Fallback(String::from_utf8_lossy(&answer).into_owned()),
        },
        Err(_) => RunnerJobStart::Fallback("no answer from the runner".to_owned()),
    }
}

/// Takes request `id`'s frames: the answer to `answer`, the output and end into `mirror`
/// while a handle holds it.
async fn pump(
    runner: Arc<Resident>,
    id: u32,
    mut frames: mpsc::UnboundedReceiver<Frame>,
    mirror: Weak<JobMirror>,
    answer: oneshot::Sender<Vec<u8>>,
) {
    let mut answer = Some(answer);
    let mut buffer = BytesMut::new();
    let mut unacked = 0usize;
    while let Some(frame) = frames.recv().await {
        let Frame::Output(OutputChunk::Stdout(data)) = frame else {
            if matches!(frame, Frame::Ended(_) | Frame::Fault(_)) {
                break;
            }
            continue;
        };
        unacked += data.len();
        buffer.extend_from_slice(&data);
        while let Some((tag, record)) = next_record(&mut buffer) {
            match tag {
                b'a' => {
                    if let Some(answer) = answer.take() {
                        let _ = answer.send(record.to_vec());
                    }
                }
                b'o' | b'e' | b'l' | b'z' => {
                    if let Some(mirror) = mirror.upgrade() {
                        mirror.take(tag, record);
                    }
                }
                _ => {}
            }
        }
        if unacked >= ACK_EVERY {
            runner.ack(id, unacked).await;
            unacked = 0;
        }
    }
    // The pipe or the channel closed: what the mirror lacks now is only in the files.
    if let Some(mirror) = mirror.upgrade() {
        mirror.take(b'l', Bytes::new());
    }
}

/// The next whole mirror record in `buffer`.
fn next_record(buffer: &mut BytesMut) -> Option<(u8, Bytes)> {
    let header = buffer.get(..5)?;
    let tag = header[0];
    let len = usize::try_from(u32::from_be_bytes(header[1..5].try_into().ok()?)).ok()?;
    if buffer.len() < 5 + len {
        return None;
    }
    buffer.advance(5);
    Some((tag, buffer.split_to(len).freeze()))
}

/// A job's output as its supervisor spooled it, from offset 0, up to [`MIRROR_MAX`] (see
/// the module docs). Shared by the clones of the [`Job`](crate::Job) that started it.
#[derive(Default)]
pub(crate) struct JobMirror {
    state: Mutex<MirrorState>,
    /// Told of every record taken.
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct MirrorState {
    /// Stdout, stderr.
    streams: [Vec<u8>; 2],
    /// The `z` record: the job ended and `streams` hold all of its output.
    end: Option<Bytes>,
    /// Nothing more will come (the limit, the runner's end, a check that found the files
    /// replaced): what is held stays true, what is not is in the files.
    closed: bool,
    /// The spool files' modification times once the end was seen by path, per stream: a
    /// file with another one was replaced (the job removed and started again).
    mtimes: [Option<u32>; 2],
}

/// What the mirror holds of a read (see [`JobMirror::read`]).
pub(crate) struct MirrorRead {
    pub(crate) bytes: Bytes,
    /// The stream's whole length as mirrored so far (its final length with `end`).
    pub(crate) held: u64,
    /// The end record (`exit` line, then the `.drop` lines), when the stream is whole.
    pub(crate) end: Option<Bytes>,
}

impl std::fmt::Debug for JobMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the output itself (it may hold secrets): how much is held.
        let state = self.state();
        f.debug_struct("JobMirror")
            .field("stdout", &state.streams[0].len())
            .field("stderr", &state.streams[1].len())
            .field("ended", &state.end.is_some())
            .field("closed", &state.closed)
            .finish()
    }
}

impl JobMirror {
    fn state(&self) -> std::sync::MutexGuard<'_, MirrorState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn take(&self, tag: u8, record: Bytes) {
        self.take_quietly(tag, record);
        self.changed.notify_waiters();
    }

    fn take_quietly(&self, tag: u8, record: Bytes) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        match tag {
            b'o' | b'e' => {
                let index = usize::from(tag == b'e');
                let total = state.streams[0].len() + state.streams[1].len();
                if total + record.len() > MIRROR_MAX {
                    state.closed = true;
                } else {
                    state.streams[index].extend_from_slice(&record);
                }
            }
            b'z' => {
                state.end = Some(record);
                state.closed = true;
            }
            _ => state.closed = true,
        }
    }

    /// Up to `max` bytes of stream `index` (0 stdout, 1 stderr) from `offset`, when the
    /// mirror holds some there, or holds the whole stream; `None`: ask the files.
    pub(crate) fn read(&self, index: usize, offset: u64, max: u64) -> Option<MirrorRead> {
        let state = self.state();
        let stream = state.streams.get(index)?;
        let held = stream.len() as u64;
        if offset >= held && state.end.is_none() {
            return None;
        }
        let start = usize::try_from(offset.min(held)).ok()?;
        let len = usize::try_from(max.min(held - offset.min(held))).ok()?;
        Some(MirrorRead {
            bytes: Bytes::copy_from_slice(stream.get(start..start + len)?),
            held,
            end: state.end.clone(),
        })
    }

    /// Waits up to `within` until the mirror holds `len` bytes of stream `index`, and the
    /// end too if `end`: what the files were seen to hold is on its way. `false`: it did not
    /// come (the mirror was closed, or is slower than that).
    pub(crate) async fn catch_up(
        &self,
        index: usize,
        len: u64,
        end: bool,
        within: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.state();
                let held = state.streams.get(index).map_or(0, Vec::len) as u64;
                if held >= len && (!end || state.end.is_some()) {
                    return true;
                }
                if state.closed {
                    return false;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// Whether a spool file seen by path with `mtime` is the one mirrored whole: the first
    /// time after the end, its time is kept; later, another time means another file.
    pub(crate) fn same_file(&self, index: usize, mtime: Option<u32>) -> bool {
        let mut state = self.state();
        let Some(kept) = state.mtimes.get_mut(index) else {
            return false;
        };
        match (*kept, mtime) {
            (None, _) => {
                *kept = mtime;
                true
            }
            (Some(kept), Some(mtime)) => kept == mtime,
            (Some(_), None) => false,
        }
    }

    /// Stops serving reads: the files are not the mirrored ones any more.
    pub(crate) fn invalidate(&self) {
        {
            let mut state = self.state();
            state.streams = Default::default();
            state.end = None;
            state.closed = true;
        }
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_come_from_the_mirror_only_where_it_holds_the_bytes_or_the_end() {
        let mirror = JobMirror::default();
        mirror.take(b'o', Bytes::from_static(b"hello"));
        let read = mirror.read(0, 1, 3).expect("held");
        assert_eq!((&read.bytes[..], read.held), (&b"ell"[..], 5));
        assert!(read.end.is_none());
        assert!(mirror.read(0, 5, 10).is_none(), "the tip is the files'");
        assert!(mirror.read(1, 0, 10).is_none());
        mirror.take(b'z', Bytes::from_static(b"0 @1\n0 0 9\n0 0 9\n"));
        let read = mirror.read(0, 5, 10).expect("the end is known");
        assert!(read.bytes.is_empty() && read.end.is_some());
        assert!(
            mirror
                .read(1, 0, 10)
                .is_some_and(|read| read.bytes.is_empty())
        );
        mirror.invalidate();
        assert!(mirror.read(0, 0, 10).is_none());
    }

    #[test]
    fn records_are_split_at_their_lengths() {
        let mut buffer = BytesMut::from(&b"o\0\0\0\x02hiz\0\0"[..]);
        assert_eq!(
            next_record(&mut buffer),
            Some((b'o', Bytes::from_static(b"hi")))
        );
        assert_eq!(next_record(&mut buffer), None);
        assert_eq!(&buffer[..], b"z\0\0");
    }
}
