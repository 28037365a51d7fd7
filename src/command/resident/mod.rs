//! The resident runner: one program per connection that runs the executor's commands as
//! requests on its channel, so that a command costs the host a `fork` and an `sh -c`
//! instead of a whole SSH session (sshd's fork and session set-up, the login shell, the
//! bootstrap).
//!
//! # Starting it
//!
//! The first command on a connection that can use a runner ([`RunnerRequest`]) sets its
//! start off (in the background under [`Runner::Auto`](crate::Runner::Auto), running per
//! exec itself; see `slot`), which opens one more session channel and sends one exec
//! request, login-shell neutral like the universal form's bootstrap (see
//! `command::wrapper`), or, for an escalated handle, the escalated script that runs it as
//! the target (see `start`):
//!
//! ```text
//! exec python3 -c '<loader: read N bytes from stdin, exec them>' NONCE spawn
//! ```
//!
//! then the script (`runner.py`, a few KiB, standard library only) on stdin. It answers with
//! a hello frame carrying the random nonce, its interpreter's version and its pid; whatever
//! the login shell printed before it (rc files that talk) is skipped. The protocol, the
//! scripts and the helper live in the `swiftide-ssh-runner` crate (`runner/PROTOCOL.md`),
//! whose conformance suite drives every implementation over pipes. Python 3.8 and later start
//! commands with `posix_spawn` (vfork: about 60 % of the server CPU of a fork). Without such
//! a Python (the shell says "not found" and exits 127, or the script exits 127 on an older
//! Python) the same runner in Perl (`runner.pl`, only modules of Debian's Essential
//! `perl-base`, `exec perl -e '<loader>'`) is tried on a new channel, then the Python one with
//! `fork` (see `start::Interpreter`). None answering (a BusyBox system, a login shell that exits at
//! once) makes the connection use the per-exec path for good
//! ([`Runner::Auto`](crate::Runner::Auto)), or fails the command with
//! [`Error::RunnerUnavailable`] ([`Runner::Resident`](crate::Runner::Resident)). Nothing of
//! the command has been sent then.
//!
//! # One command
//!
//! A request frame carries the `sh -c` text of the direct form (`cd`, environment, the
//! command: [`direct_text`](crate::command::direct_text)), so a command gets exactly what the
//! direct form gives it. The runner spawns (or forks) a child that calls `setsid` (its own session and
//! process group, whose id is its pid, as sshd's `setsid` gives the per-exec command), takes
//! `/dev/null` as stdin and two fresh pipes as stdout and stderr, restores `SIGPIPE` and
//! `exec`s `sh -c TEXT` from the `PATH` the login shell left, in the home directory sshd
//! started it in, with the login shell's environment. The runner frames what the pipes carry
//! as it arrives and sends the end (exit code, or signal name and core flag) only once both
//! pipes are closed, so output that lingering children write after the leader exited is
//! kept, as LocalExecutor and sshd keep it.
//!
//! # Kills
//!
//! * Timeout or cancellation: a kill frame. The runner sends SIGTERM to the group, and
//!   SIGKILL once the leader has gone or the grace has passed, as the per-exec supervisor
//!   does; no second channel.
//! * Client death: sshd closes the runner's stdin, and the runner SIGKILLs the group of every
//!   command whose leader still runs (with `kill_on_disconnect`, the default), then exits.
//! * Runner death (`kill -9`, the OOM killer): its channel closes; each command in flight
//!   fails with [`Error::RunnerLost`] ("may have run") and its group, if it had started, is
//!   killed from a new channel. The next command starts a new runner.
//!
//! # Flow control
//!
//! All the connection's commands share the runner's channel, whose SSH window would let one
//! slow reader stall the rest. So the runner stops reading a command's pipes once 4 MiB of
//! its output is unacknowledged, and the driver acknowledges what its caller has taken.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
};

use bytes::{Buf, Bytes, BytesMut};
use swiftide_ssh_runner::{self as protocol, End, Kind, Run, RunFlags};
use tokio::sync::mpsc;

mod job;
mod slot;
mod start;

pub(crate) use job::{JobMirror, RunnerJob, RunnerJobStart, start_job};
pub(crate) use slot::{Choice, Need, note_escalated, runner_for};

use crate::{
    command::output::{ExitStatus, OutputChunk},
    config::{Config, Runner},
    pool::ChannelCount,
};

/// Output a command's driver acknowledges at a time (the runner's window is 4 MiB).
pub(crate) const ACK_EVERY: usize = 256 * 1024;

/// What a command needs to run through a runner.
#[derive(Debug, Clone)]
pub(crate) struct RunnerRequest {
    /// The `sh -c` text.
    pub(crate) text: Vec<u8>,
    /// Bytes for the command's stdin, then EOF (the crate's own scripts); `None`:
    /// `/dev/null`.
    pub(crate) stdin: Option<Bytes>,
    /// Run by `/bin/sh` (the crate's own scripts, as their bootstrap does), not the `sh`
    /// on the `PATH` (a user's command, as the direct form does).
    pub(crate) system_shell: bool,
    /// Limits and confinement the runner applies before `sh` runs (an encoded
    /// [`protocol::Guard`]); `None`: none.
    pub(crate) guard: Option<Vec<u8>>,
}

impl RunnerRequest {
    /// A user's command: the direct form's `sh -c` text.
    pub(crate) fn command(text: Vec<u8>) -> Self {
        Self {
            text,
            stdin: None,
            system_shell: false,
            guard: None,
        }
    }

    /// Whether the request fits in one frame ([`protocol::MAX_DATA`]); a larger one goes
    /// per exec, where the universal form carries a command of any length on stdin.
    pub(crate) fn fits(&self) -> bool {
        let guarded = if self.guard.is_some() {
            RunFlags::GUARDED
        } else {
            0
        };
        self.run(RunFlags(guarded), 0).fits()
    }

    /// The run request's data for this command.
    fn run(&self, flags: RunFlags, grace_ms: u32) -> Run<'_> {
        Run {
            flags,
            grace_ms,
            guard: self.guard.as_deref().unwrap_or_default(),
            text: &self.text,
            stdin: self.stdin.as_deref().unwrap_or_default(),
        }
    }

    /// Stdin data up to which the crate's own scripts take the runner: the request holds
    /// it whole, in the client's memory and the runner's (a larger write streams per exec).
    pub(crate) const SCRIPT_STDIN_LIMIT: usize = 1024 * 1024;

    /// One of the crate's own scripts with `data` on stdin, as `script_request` runs it
    /// (with `nl` set, which the bootstrap sets and quoted values use), or `None` when
    /// `data` is over [`SCRIPT_STDIN_LIMIT`](Self::SCRIPT_STDIN_LIMIT).
    pub(crate) fn script(script: &[u8], data: &[u8]) -> Option<Self> {
        if data.len() > Self::SCRIPT_STDIN_LIMIT {
            return None;
        }
        let mut text = b"nl='\n'\n".to_vec();
        text.extend_from_slice(script);
        Some(Self {
            text,
            stdin: Some(Bytes::copy_from_slice(data)),
            system_shell: true,
            guard: None,
        })
    }
}

/// What the runner says about one request.
#[derive(Debug)]
pub(crate) enum Frame {
    /// The command runs; its process group.
    Started(u32),
    Output(OutputChunk),
    /// The end, as the runner put it (see [`exit_status`]).
    Ended(Option<End>),
    /// The runner could not take the request (see PROTOCOL.md, "Faults"): nothing ran.
    Fault(String),
}

/// A connection's runner.
pub(crate) struct Resident {
    writer: tokio::sync::Mutex<russh::ChannelWriteHalf<russh::client::Msg>>,
    routes: Arc<Mutex<Routes>>,
    next_id: AtomicU32,
    /// `perl 5.036000`, `python 3.11.2`.
    pub(crate) name: String,
    /// The runner's channel counts as one of the connection's channels.
    _count: ChannelCount,
}

#[derive(Default)]
struct Routes {
    /// The channel has closed: nothing more will be routed.
    closed: bool,
    requests: HashMap<u32, mpsc::UnboundedSender<Frame>>,
}

/// Reads the runner's frames and hands each to its request's driver, until the channel
/// closes; then every request still routed hears nothing more (its sender is dropped).
async fn read_frames(
    mut read: russh::ChannelReadHalf,
    mut buffer: BytesMut,
    routes: Arc<Mutex<Routes>>,
) {
    'channel: loop {
        loop {
            let (header, data) = match protocol::next_frame(&buffer) {
                Ok(Some((header, data))) => {
                    // Copied out rather than split off: a split-off piece would keep the
                    // buffer's whole allocation alive while it waits for a slow caller,
                    // several times its own size.
                    (header, Bytes::copy_from_slice(data))
                }
                Ok(None) => break,
                Err(oversized) => {
                    tracing::warn!(%oversized, "resident runner: unreadable frame; closing it");
                    break 'channel;
                }
            };
            buffer.advance(header.frame_len());
            let id = header.id;
            let frame = match Kind::from_byte(header.kind) {
                Some(Kind::Started) => std::str::from_utf8(&data)
                    .ok()
                    .and_then(|pid| pid.parse().ok())
                    .map(Frame::Started),
                Some(Kind::Stdout) => Some(Frame::Output(OutputChunk::Stdout(data))),
                Some(Kind::Stderr) => Some(Frame::Output(OutputChunk::Stderr(data))),
                Some(Kind::Ended) => Some(Frame::Ended(End::decode(&data))),
                Some(Kind::Fault) => {
                    let why = String::from_utf8_lossy(&data).into_owned();
                    tracing::warn!(id, %why, "resident runner: fault");
                    Some(Frame::Fault(why))
                }
                _ => None,
            };
            let Some(frame) = frame else { continue };
            let ended = matches!(frame, Frame::Ended(_) | Frame::Fault(_));
            if let Ok(mut routes) = routes.lock() {
                let sender = if ended {
                    routes.requests.remove(&id)
                } else {
                    routes.requests.get(&id).cloned()
                };
                if let Some(sender) = sender {
                    let _ = sender.send(frame);
                }
            }
        }
        match read.wait().await {
            Some(russh::ChannelMsg::Data { data }) => buffer.extend_from_slice(&data),
            Some(russh::ChannelMsg::ExtendedData { data, .. }) => {
                // The runner's own complaints (its interpreter's); never a command's output.
                tracing::debug!(runner_stderr = %String::from_utf8_lossy(&data), "resident runner");
            }
            Some(russh::ChannelMsg::Close) | None => break,
            Some(_) => {}
        }
    }
    if let Ok(mut routes) = routes.lock() {
        routes.closed = true;
        routes.requests.clear();
    }
}

/// The end a runner reported, with signals named as OpenSSH names them in `exit-signal`
/// (which names thirteen and calls the rest `SIG@openssh.com`), so that results do not
/// depend on the route. A guarded command's `XCPU` and `XFSZ` keep their names: the kernel's
/// signals for the limits its guard set (`Execution::limit_exceeded`), on a route per exec
/// never takes.
pub(crate) fn exit_status(end: Option<End>, guarded: bool) -> ExitStatus {
    match end {
        Some(End::Code(code)) => u32::try_from(code).map_or(ExitStatus::Unknown, ExitStatus::Code),
        Some(End::Signal { name, core_dumped }) => {
            const OPENSSH_NAMES: &[&str] = &[
                "ABRT", "ALRM", "FPE", "HUP", "ILL", "INT", "KILL", "PIPE", "QUIT", "SEGV", "TERM",
                "USR1", "USR2",
            ];
            let limit = guarded && (name == "XCPU" || name == "XFSZ");
            let name = if limit || OPENSSH_NAMES.contains(&name.as_str()) {
                name
            } else {
                "SIG@openssh.com".to_owned()
            };
            ExitStatus::Signal { name, core_dumped }
        }
        None => ExitStatus::Unknown,
    }
}

impl Resident {
    /// The runner's channel is still open.
    pub(crate) fn is_open(&self) -> bool {
        self.routes
            .lock()
            .map(|routes| !routes.closed)
            .unwrap_or(false)
    }

    /// Sends `request`; its frames arrive on the receiver. `Err`: the request could not be
    /// queued on the connection (nothing was sent).
    pub(crate) async fn submit(
        &self,
        request: &RunnerRequest,
        config: &Config,
    ) -> std::result::Result<(u32, mpsc::UnboundedReceiver<Frame>), ()> {
        let flag = |set: bool, flag: u8| if set { flag } else { 0 };
        let flags = flag(config.kill_on_disconnect, RunFlags::KILL_ON_DISCONNECT)
            | flag(request.stdin.is_some(), RunFlags::STDIN)
            | flag(request.system_shell, RunFlags::SYSTEM_SHELL)
            | flag(request.guard.is_some(), RunFlags::GUARDED);
        let grace_ms = u32::try_from(config.kill_grace.as_millis()).unwrap_or(u32::MAX);
        let run = request.run(RunFlags(flags), grace_ms);
        if !run.fits() {
            return Err(());
        }
        self.send_routed(Kind::Run, &run.encode()).await
    }

    /// Sends a request of `kind` with `data`, routed like [`submit`](Self::submit)'s.
    async fn send_routed(
        &self,
        kind: Kind,
        data: &[u8],
    ) -> std::result::Result<(u32, mpsc::UnboundedReceiver<Frame>), ()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::unbounded_channel();
        {
            let mut routes = self.routes.lock().map_err(|_| ())?;
            if routes.closed {
                return Err(());
            }
            routes.requests.insert(id, sender);
        }
        if self.send(protocol::encode(kind, id, data)).await.is_err() {
            self.forget(id);
            return Err(());
        }
        Ok((id, receiver))
    }

    /// Asks the runner to kill request `id`'s group (SIGTERM, grace, SIGKILL).
    pub(crate) async fn kill(&self, id: u32) {
        let _ = self.send(protocol::encode(Kind::Kill, id, b"")).await;
    }

    /// Tells the runner that `bytes` of request `id`'s output were taken.
    pub(crate) async fn ack(&self, id: u32, bytes: usize) {
        let _ = self
            .send(protocol::encode(
                Kind::Ack,
                id,
                &protocol::encode_ack(bytes),
            ))
            .await;
    }

    /// Stops routing request `id`'s frames (its driver gave up on it).
    pub(crate) fn forget(&self, id: u32) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.requests.remove(&id);
        }
    }

    async fn send(&self, frame: Vec<u8>) -> std::result::Result<(), russh::Error> {
        let writer = self.writer.lock().await;
        writer.data(frame.as_slice()).await
    }
}

/// Whether `config` lets commands use a runner at all.
pub(crate) fn wanted(config: &Config) -> bool {
    config.runner != Runner::PerExec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_over_one_frame_goes_per_exec() {
        let max = usize::try_from(protocol::MAX_DATA).unwrap();
        assert!(RunnerRequest::command(vec![b'x'; max - 9]).fits());
        assert!(!RunnerRequest::command(vec![b'x'; max - 8]).fits());
        let script = RunnerRequest::script(b"cat", &[0; 1024]).unwrap();
        assert!(script.fits());
    }

    #[test]
    fn ends_are_named_as_openssh_names_them() {
        assert_eq!(exit_status(End::decode(b"c 3"), false), ExitStatus::Code(3));
        assert_eq!(
            exit_status(End::decode(b"s TERM 0"), false),
            ExitStatus::Signal {
                name: "TERM".into(),
                core_dumped: false
            }
        );
        assert_eq!(
            exit_status(End::decode(b"s BUS 1"), false),
            ExitStatus::Signal {
                name: "SIG@openssh.com".into(),
                core_dumped: true
            }
        );
        assert_eq!(exit_status(End::decode(b"?"), false), ExitStatus::Unknown);
        // A guard's limit signals keep their names; unguarded, OpenSSH's name.
        let xcpu = |guarded| match exit_status(End::decode(b"s XCPU 1"), guarded) {
            ExitStatus::Signal { name, .. } => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(xcpu(true), "XCPU");
        assert_eq!(xcpu(false), "SIG@openssh.com");
    }
}
